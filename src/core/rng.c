/* src/core/rng.c - Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC 2011): ten rounds of a multiply-xor bijection keyed by the seed. Not cryptographic.
 * Tests: tests/test_core.c (the paper's known-answer vectors, stream independence). */
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
