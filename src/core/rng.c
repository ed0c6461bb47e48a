/* src/core/rng.c - Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC 2011): ten rounds of a multiply-xor bijection keyed by the seed. Not cryptographic.
 * Also the purposes' streams (rng.h). Tests: tests/test_core.c (the paper's known-answer
 * vectors, stream independence, purposes distinct and the old ones unchanged). */
#include <math.h>

#include "tubelet/rng.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static void philox_round(uint32_t ctr[4], const uint32_t key[2])
{
    uint64_t p0 = (uint64_t)PHILOX_M0 * ctr[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * ctr[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    ctr[0] = hi1 ^ ctr[1] ^ key[0];
    ctr[1] = lo1;
    ctr[2] = hi0 ^ ctr[3] ^ key[1];
    ctr[3] = lo0;
}

/* The block function: out = Philox4x32-10(ctr, key). Exposed to the tests through
 * tb_rng_init with a crafted state, so it stays static. */
static void philox_block(uint32_t out[4], const uint32_t in[4], const uint32_t key_in[2])
{
    uint32_t key[2] = {key_in[0], key_in[1]};
    for (int i = 0; i < 4; i++)
        out[i] = in[i];
    for (int r = 0; r < 10; r++) {
        philox_round(out, key);
        key[0] += PHILOX_W0;
        key[1] += PHILOX_W1;
    }
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void tb_rng_init(tb_rng *rng, uint64_t seed, uint64_t stream)
{
    rng->key[0] = (uint32_t)seed;
    rng->key[1] = (uint32_t)(seed >> 32);
    rng->ctr[0] = 0;
    rng->ctr[1] = 0;
    rng->ctr[2] = (uint32_t)stream;
    rng->ctr[3] = (uint32_t)(stream >> 32);
    rng->n_left = 0;
}

uint64_t tb_rng_stream(uint64_t a, uint64_t b, uint64_t c)
{
    return splitmix64(splitmix64(splitmix64(a) ^ b) ^ c);
}

/* The first slot of a purpose's hashed stream: a constant ("tbrngpur") xored with the
 * purpose, so the purpose is a key of its own ahead of a, b and c. */
#define PURPOSE_TAG 0x7462726e67707572ull

/* The stream of (purpose, a, b, c). The purposes that were used before this list existed
 * keep, with the keys those uses passed, the exact stream ids they were given by hand then:
 * compatibility, so the same seed gives the same batches, initial weights and synthetic
 * datasets as before (tests/test_core.c checks each against its old expression). Every other
 * key, and every newer purpose, is a splitmix64 fold of (tag ^ purpose, a, b, c): four slots
 * where the old ids had three, so it meets an old id or another purpose's stream only by a
 * 64-bit collision. The substitute's old id, tb_rng_stream(epoch, position, attempt + 1),
 * was the shuffle's, tb_rng_stream(epoch, 0, 7), at position 0 and attempt 6; it is hashed
 * now. */
static uint64_t purpose_stream(enum tb_rng_purpose p, uint64_t a, uint64_t b, uint64_t c)
{
    switch (p) {
    case TB_RNG_CLIP: /* src/data/dataset.c: (epoch, sample, 0) */
        if (c == 0)
            return tb_rng_stream(a, b, 0);
        break;
    case TB_RNG_SHUFFLE: /* src/data/loader.c: (epoch, 0, 7) */
        if (b == 0 && c == 0)
            return tb_rng_stream(a, 0, 7);
        break;
    case TB_RNG_INIT: /* src/model/vit.c: the raw stream 0x5eed */
        if (a == 0 && b == 0 && c == 0)
            return 0x5eed;
        break;
    case TB_RNG_SYNTH_VIDEO: /* src/video/synth.c: (1, video, 0) */
        if (b == 0 && c == 0)
            return tb_rng_stream(1, a, 0);
        break;
    case TB_RNG_SYNTH_SPLIT: /* src/video/synth.c: (2, 0, 0) */
        if (a == 0 && b == 0 && c == 0)
            return tb_rng_stream(2, 0, 0);
        break;
    case TB_RNG_FRAMES: /* src/cli/cmd_frames.c: the raw stream 0 */
        if (a == 0 && b == 0 && c == 0)
            return 0;
        break;
    default:
        break;
    }
    uint64_t h = splitmix64(PURPOSE_TAG ^ (uint64_t)p);
    return splitmix64(splitmix64(splitmix64(h ^ a) ^ b) ^ c);
}

uint64_t tb_rng_stream_for(enum tb_rng_purpose purpose, uint64_t a, uint64_t b, uint64_t c)
{
    return purpose_stream(purpose, a, b, c);
}

void tb_rng_init_for3(tb_rng *rng, uint64_t seed, enum tb_rng_purpose purpose, uint64_t a,
                      uint64_t b, uint64_t c)
{
    tb_rng_init(rng, seed, purpose_stream(purpose, a, b, c));
}

void tb_rng_init_for(tb_rng *rng, uint64_t seed, enum tb_rng_purpose purpose, uint64_t a,
                     uint64_t b)
{
    tb_rng_init(rng, seed, purpose_stream(purpose, a, b, 0));
}

uint32_t tb_rng_u32(tb_rng *rng)
{
    if (rng->n_left == 0) {
        philox_block(rng->out, rng->ctr, rng->key);
        if (++rng->ctr[0] == 0)
            rng->ctr[1]++;
        rng->n_left = 4;
    }
    return rng->out[4 - rng->n_left--];
}

uint64_t tb_rng_u64(tb_rng *rng)
{
    uint64_t lo = tb_rng_u32(rng);
    uint64_t hi = tb_rng_u32(rng);
    return lo | (hi << 32);
}

double tb_rng_uniform(tb_rng *rng)
{
    return (double)(tb_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t tb_rng_below(tb_rng *rng, uint64_t n)
{
    /* Reject the top partial range so every residue is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = tb_rng_u64(rng);
    } while (x >= limit);
    return x % n;
}

double tb_rng_normal(tb_rng *rng)
{
    double u1 = tb_rng_uniform(rng);
    double u2 = tb_rng_uniform(rng);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double tb_rng_gamma(tb_rng *rng, double shape)
{
    if (shape < 1) {
        double u = tb_rng_uniform(rng);
        return tb_rng_gamma(rng, shape + 1) * pow(u > 0 ? u : 1e-300, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = tb_rng_normal(rng), v = 1 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = tb_rng_uniform(rng);
        if (u < 1 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1 - v + log(v)))
            return d * v;
    }
}

double tb_rng_beta(tb_rng *rng, double a, double b)
{
    double x = tb_rng_gamma(rng, a), y = tb_rng_gamma(rng, b);
    return x + y > 0 ? x / (x + y) : 0.5;
}
