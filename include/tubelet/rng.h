/* include/tubelet/rng.h - counter-based random numbers (Philox4x32-10).
 * A generator is keyed by (seed, stream) and advanced by a counter; library code names its
 * stream by a purpose and up to three keys (tb_rng_init_for), so the numbers for sample i of
 * epoch e depend only on (seed, e, i, purpose), never on which thread or process draws them.
 * Tests: tests/test_core.c (streams, purposes), tests/test_data.c (the loader's). */
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

/* What a stream is for: every random choice in tubelet names one of these, so no two uses
 * can draw the same numbers by accident. The values are part of the streams' keys: add new
 * purposes at the end and never renumber. The keys a, b (and c, tb_rng_init_for3) of each: */
enum tb_rng_purpose {
    TB_RNG_CLIP = 1,         /* a training or evaluation sample's choices (frames, crop, flip):
                                a = epoch, b = sample index in the dataset */
    TB_RNG_SHUFFLE = 2,      /* an epoch's order of the samples: a = epoch, b = 0 */
    TB_RNG_SUBSTITUTE = 3,   /* the sample that replaces a failed clip: a = epoch, b = position
                                in the epoch, c = attempt (1, 2, ...) */
    TB_RNG_INIT = 4,         /* weight initialisation, every parameter in registry order from
                                one stream: a = 0, b = 0 */
    TB_RNG_MASK = 5,         /* MAE masks (tb_mae_make_mask): a = epoch, b = sample index */
    TB_RNG_MIXUP = 6,        /* mixup / cutmix (tb_mix_draw): a = epoch, b = batch index in
                                the epoch, c = process rank */
    TB_RNG_DROP_PATH = 7,    /* stochastic depth (tb_vit_drop_path_draw): a = epoch, b =
                                sample index; two draws per block, in block order */
    TB_RNG_SYNTH_VIDEO = 8,  /* tubelet synth, one video's plan: a = video index, b = 0 */
    TB_RNG_SYNTH_SPLIT = 9,  /* tubelet synth, the validation split: a = 0, b = 0 */
    TB_RNG_FRAMES = 10,      /* tubelet frames, its random crop modes: a = 0, b = 0 */
    TB_RNG_TEST = 11,        /* tests, free keys */
    TB_RNG_BASELINE = 12,    /* a metric's random-ranking baseline (the retrieval evaluation's
                                random similarities): a = epoch, b = 0 */
    TB_RNG_ERASE = 13,       /* random erasing (tb_erase_draw): a = epoch, b = sample index;
                                c = 0 the boxes, c = 1 the values */
    TB_RNG_DROPOUT = 14,     /* dropout before the head (tb_dropout_draw): a = epoch, b =
                                sample index */
    TB_RNG_RAND_AUGMENT = 15, /* RandAugment's ops (tb_randaug_draw): a = epoch, b = sample
                                 index */
    TB_RNG_CAPTION = 16,     /* a training clip's caption among its relevant sentences
                                (tb_mir_captions_draw) or its row's caption list
                                (tb_ann_caption_draw): a = epoch, b = sample index */
    TB_RNG_PLAN = 17,        /* prep --plan's clips (tb_plan_make): a = 0 the clips counted,
                                a = 1 the calibration clips; b = 0 */
    TB_RNG_N_PURPOSES        /* count + 1 (the values start at 1) */
};

/* Start the generator for (seed, purpose, a, b), the keys as listed above. Two calls give the
 * same numbers only when all their arguments agree; two different purposes (or keys) meet
 * only by a 64-bit hash collision, with one exception kept on purpose. For compatibility the
 * streams of CLIP, SHUFFLE, INIT, SYNTH_*, FRAMES (with the keys listed, c = 0) equal the
 * ad-hoc stream ids those uses had before purposes existed, so a seed gives the same batches,
 * initial weights and synthetic datasets as before. That keeps an old overlap: the synth's
 * streams equal CLIP's of epochs 1 and 2 (SYNTH_VIDEO (v) is CLIP (1, v), SYNTH_SPLIT is
 * CLIP (2, 0)), so `tubelet synth --seed K` and `tubelet train --seed K` draw some of the
 * same numbers. They are separate programs with seeds of their own, and making the synth's
 * streams distinct would change every synthetic dataset, so it stays; the purposes the
 * training side uses are all distinct (tests/test_core.c). */
TB_API void tb_rng_init_for(tb_rng *rng, uint64_t seed, enum tb_rng_purpose purpose, uint64_t a,
                            uint64_t b);
/* The same with a third key: tb_rng_init_for(r, s, p, a, b) is
 * tb_rng_init_for3(r, s, p, a, b, 0). */
TB_API void tb_rng_init_for3(tb_rng *rng, uint64_t seed, enum tb_rng_purpose purpose,
                             uint64_t a, uint64_t b, uint64_t c);

/* The raw stream id tb_rng_init_for3 uses for (purpose, a, b, c): for an op that takes a
 * stream (tb_rng_init(r, seed, tb_rng_stream_for(p, a, b, c)) is tb_rng_init_for3's). */
TB_API uint64_t tb_rng_stream_for(enum tb_rng_purpose purpose, uint64_t a, uint64_t b,
                                  uint64_t c);

/* Start the generator for (seed, stream), a raw stream id: for tests and benchmarks (library
 * code names a purpose). Different streams are independent sequences. */
TB_API void tb_rng_init(tb_rng *rng, uint64_t seed, uint64_t stream);

/* A stream id hashed from three keys (splitmix64 folds); distinct keys give distinct ids up
 * to a 64-bit collision. */
TB_API uint64_t tb_rng_stream(uint64_t a, uint64_t b, uint64_t c);

TB_API uint32_t tb_rng_u32(tb_rng *rng);
TB_API uint64_t tb_rng_u64(tb_rng *rng);
/* Uniform double in [0, 1) with 53 random bits. */
TB_API double tb_rng_uniform(tb_rng *rng);
/* Uniform integer in [0, n); n > 0. Unbiased (rejection). */
TB_API uint64_t tb_rng_below(tb_rng *rng, uint64_t n);
/* Standard normal (Box-Muller). */
TB_API double tb_rng_normal(tb_rng *rng);
/* Gamma(shape, 1), shape > 0 (Marsaglia and Tsang; below 1 by Gamma(shape + 1) U^(1/shape)),
 * and Beta(a, b) = X / (X + Y) of two of them (mixup's lambda: Beta(alpha, alpha)). */
TB_API double tb_rng_gamma(tb_rng *rng, double shape);
TB_API double tb_rng_beta(tb_rng *rng, double a, double b);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_RNG_H */
