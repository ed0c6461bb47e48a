/* include/tubelet/rng.h - counter-based random numbers (Philox4x32-10).
 * A generator is keyed by (seed, stream) and advanced by a counter, so the numbers for sample i
 * of epoch e depend only on (seed, e, i), never on which thread or process draws them.
 * Tests: tests/test_core.c. */
#ifndef TUBELET_RNG_H
#define TUBELET_RNG_H

#include "tubelet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Caller-owned value type; copy it freely. */
typedef struct tb_rng {
    uint32_t key[2];   /* from the seed */
    uint32_t ctr[4];   /* ctr[2..3] hold the stream, ctr[0..1] count blocks */
    uint32_t out[4];   /* the current block of output */
    int n_left;        /* unread words in out */
} tb_rng;

/* Start the generator for (seed, stream). Different streams are independent sequences. */
TB_API void tb_rng_init(tb_rng *rng, uint64_t seed, uint64_t stream);

/* A stream id from up to three keys, e.g. (epoch, sample index, purpose). */
TB_API uint64_t tb_rng_stream(uint64_t a, uint64_t b, uint64_t c);

TB_API uint32_t tb_rng_u32(tb_rng *rng);
TB_API uint64_t tb_rng_u64(tb_rng *rng);
/* Uniform double in [0, 1) with 53 random bits. */
TB_API double tb_rng_uniform(tb_rng *rng);
/* Uniform integer in [0, n); n > 0. Unbiased (rejection). */
TB_API uint64_t tb_rng_below(tb_rng *rng, uint64_t n);
/* Standard normal (Box-Muller). */
TB_API double tb_rng_normal(tb_rng *rng);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_RNG_H */
