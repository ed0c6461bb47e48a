/* src/tensor/cpu/attention.c - FlashAttention on the CPU: for each (batch, head), query tiles
 * of BR rows meet key tiles of BC rows; scores live only in a BR x BC tile, the softmax is
 * computed online (running max and sum per row), and only the log-sum-exp of each row is
 * kept for the backward, which recomputes the probabilities tile by tile. Nothing N x N is
 * ever allocated. The tile products are small tbi_sgemm calls, each on one thread inside the
 * OpenMP region that spreads the (batch, head) pairs over the cores (our own kernels there,
 * never OpenBLAS: gemm.c). Causal attention masks key j > query i: key tiles wholly past a
 * query tile are skipped, a tile across the diagonal is cut at its last query and its rows'
 * later keys get probability 0. This is the portable path; where tbi_cpu_avx512(),
 * tbi_attention_fwd/bwd run attention_avx512.c instead (the same algorithm, causal included,
 * on register tiles of its own, 2-4x faster on a ViT's shapes). It does not run heads in
 * parallel within a (batch, head) pair, nor split a long sequence's queries across threads.
 * Tests: tests/test_ops.c (both paths against naive attention, causal and not). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "tensor/cpu/vmath.h"
#include "tensor/cpu/kernels.h"

/* BR query rows meet BC key rows. Each tile product packs its operands (gemm.c), so a key
 * tile is packed once per query tile: tall query tiles keep that to N / BR times per head. */
#define BR 256
#define BC 128

/* Per-thread scratch for one (batch, head). */
struct tile {
    float *s;           /* scores, then probabilities (BR, BC) */
    float *dp;          /* dP, then dS (BR, BC) */
    float *acc;         /* output accumulator (BR, HS) */
    float m[BR], l[BR];
};

static int tile_init(struct tile *t, int HS)
{
    t->s = tbi_malloc(sizeof(float) * (size_t)BR * BC);
    t->dp = tbi_malloc(sizeof(float) * (size_t)BR * BC);
    t->acc = tbi_malloc(sizeof(float) * (size_t)BR * HS);
    return t->s && t->dp && t->acc ? 0 : -1;
}

static void tile_free(struct tile *t)
{
    free(t->s);
    free(t->dp);
    free(t->acc);
}

/* rows[i][d] = v for N rows of HS values, ld apart: one head's slice of out or of dqkv. */
static void fill_head(float *rows, size_t ld, int N, int HS, float v)
{
    for (int i = 0; i < N; i++)
        for (int d = 0; d < HS; d++)
            rows[(size_t)i * ld + d] = v;
}

/* s (br, bc; stride BC) = scale * q (br, HS; stride ld) @ k (bc, HS; stride ld)^T */
static void scores(float *s, const float *q, size_t ld, const float *k, size_t ldk, int br,
                   int bc, int HS, float scale)
{
    tbi_sgemm(0, 1, br, bc, HS, scale, q, (int)ld, k, (int)ldk, 0.0f, s, BC);
}

/* Keys of a tile (j0, bc) that query i may see: all of them, or (causal) those j0 + j <= i. */
static int visible(int causal, int i, int j0, int bc)
{
    if (!causal)
        return bc;
    int n = i - j0 + 1;
    return n < 0 ? 0 : n < bc ? n : bc;
}

int tbi_attention_fwd_tiles(float *out, float *lse, const float *qkv, int B, int N, int NH, int HS,
                            int causal)
{
    const int D = NH * HS;
    const size_t ld = (size_t)3 * D;
    const float scale = 1.0f / sqrtf((float)HS);
    int failed = 0;
#pragma omp parallel
    {
        struct tile t;
        int ok = tile_init(&t, HS) == 0;
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for collapse(2) schedule(dynamic)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                if (!ok) {
                    /* Out of memory for this thread's tiles: the call fails, and its heads
                     * are NaN rather than silently wrong. */
                    fill_head(lse + ((size_t)b * NH + h) * N, 1, N, 1, NAN);
                    fill_head(out + (size_t)b * N * D + (size_t)h * HS, (size_t)D, N, HS, NAN);
                    continue;
                }
                const float *q = qkv + (size_t)b * N * ld + (size_t)h * HS;
                const float *k = q + D, *v = q + 2 * D;
                for (int i0 = 0; i0 < N; i0 += BR) {
                    int br = N - i0 < BR ? N - i0 : BR;
                    for (int r = 0; r < br; r++) {
                        t.m[r] = -INFINITY;
                        t.l[r] = 0;
                    }
                    memset(t.acc, 0, sizeof(float) * (size_t)br * HS);
                    /* Causal: no query of the tile sees a key past its last one. */
                    int nkeys = causal ? i0 + br : N;
                    for (int j0 = 0; j0 < nkeys; j0 += BC) {
                        int bc = nkeys - j0 < BC ? nkeys - j0 : BC;
                        scores(t.s, q + (size_t)i0 * ld, ld, k + (size_t)j0 * ld, ld, br, bc,
                               HS, scale);
                        for (int r = 0; r < br; r++) {
                            /* A row that sees none of this tile keeps its max (finite: key
                             * tile 0, first, has key 0 for every row) and adds nothing. */
                            float *sr = t.s + (size_t)r * BC, mx = t.m[r];
                            int nj = visible(causal, i0 + r, j0, bc);
                            for (int j = 0; j < nj; j++)
                                mx = sr[j] > mx ? sr[j] : mx;
                            float corr = tbi_expf(t.m[r] - mx), sum = 0;
#pragma omp simd reduction(+ : sum)
                            for (int j = 0; j < nj; j++) {
                                sr[j] = tbi_expf(sr[j] - mx);
                                sum += sr[j];
                            }
                            for (int j = nj; j < bc; j++)
                                sr[j] = 0;
                            t.l[r] = t.l[r] * corr + sum;
                            t.m[r] = mx;
                            float *a = t.acc + (size_t)r * HS;
                            for (int d = 0; d < HS; d++)
                                a[d] *= corr;
                        }
                        /* acc (br, HS) += P (br, bc) @ V tile (bc, HS) */
                        tbi_sgemm(0, 0, br, HS, bc, 1.0f,
                                    t.s, BC, v + (size_t)j0 * ld, (int)ld, 1.0f, t.acc, HS);
                    }
                    for (int r = 0; r < br; r++) {
                        float *o = out + ((size_t)b * N + i0 + r) * D + (size_t)h * HS;
                        const float *a = t.acc + (size_t)r * HS;
                        float inv = 1.0f / t.l[r];
                        for (int d = 0; d < HS; d++)
                            o[d] = a[d] * inv;
                        lse[((size_t)b * NH + h) * N + i0 + r] = t.m[r] + logf(t.l[r]);
                    }
                }
            }
        }
        tile_free(&t);
    }
    return failed ? -1 : 0;
}

int tbi_attention_bwd_tiles(float *dqkv, const float *dout, const float *qkv, const float *out,
                            const float *lse, int B, int N, int NH, int HS, int causal)
{
    const int D = NH * HS;
    const size_t ld = (size_t)3 * D;
    const float scale = 1.0f / sqrtf((float)HS);
    int failed = 0;
#pragma omp parallel
    {
        struct tile t;
        float *delta = tbi_malloc(sizeof(float) * (size_t)N);
        int ok = tile_init(&t, HS) == 0 && delta;
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for collapse(2) schedule(dynamic)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                const float *q = qkv + (size_t)b * N * ld + (size_t)h * HS;
                const float *k = q + D, *v = q + 2 * D;
                float *dq = dqkv + (size_t)b * N * ld + (size_t)h * HS;
                float *dk = dq + D, *dv = dq + 2 * D;
                /* The gradients are written, not added: this head's rows start at zero (NaN
                 * out of memory, as in the forward). */
                for (float *g = dq; g <= dv; g += D)
                    fill_head(g, ld, N, HS, ok ? 0.0f : NAN);
                if (!ok)
                    continue;
                const float *o = out + (size_t)b * N * D + (size_t)h * HS;
                const float *dO = dout + (size_t)b * N * D + (size_t)h * HS;
                const float *L = lse + ((size_t)b * NH + h) * N;
                /* delta_i = dO_i . O_i, the row term of the softmax gradient. */
                for (int i = 0; i < N; i++) {
                    float s = 0;
                    for (int d = 0; d < HS; d++)
                        s += dO[(size_t)i * D + d] * o[(size_t)i * D + d];
                    delta[i] = s;
                }
                for (int j0 = 0; j0 < N; j0 += BC) {
                    int bcn = N - j0 < BC ? N - j0 : BC;
                    /* Causal: the query tiles wholly before this key tile see none of it, and
                     * a tile's queries none of its keys past the last of them. */
                    for (int i0 = causal ? j0 / BR * BR : 0; i0 < N; i0 += BR) {
                        int br = N - i0 < BR ? N - i0 : BR;
                        int bc = causal && i0 + br - j0 < bcn ? i0 + br - j0 : bcn;
                        /* P = exp(scale * Q K^T - lse), recomputed; 0 where masked. */
                        scores(t.s, q + (size_t)i0 * ld, ld, k + (size_t)j0 * ld, ld, br, bc, HS,
                               scale);
                        for (int r = 0; r < br; r++) {
                            float *sr = t.s + (size_t)r * BC, li = L[i0 + r];
                            int nj = visible(causal, i0 + r, j0, bc);
#pragma omp simd
                            for (int j = 0; j < nj; j++)
                                sr[j] = tbi_expf(sr[j] - li);
                            for (int j = nj; j < bc; j++)
                                sr[j] = 0;
                        }
                        /* dP = dO V^T, then dS = P * (dP - delta). */
                        scores(t.dp, dO + (size_t)i0 * D, (size_t)D, v + (size_t)j0 * ld, ld, br,
                               bc, HS, 1.0f);
                        for (int r = 0; r < br; r++) {
                            float *dpr = t.dp + (size_t)r * BC;
                            const float *sr = t.s + (size_t)r * BC;
                            float di = delta[i0 + r];
                            for (int j = 0; j < bc; j++)
                                dpr[j] = sr[j] * (dpr[j] - di);
                        }
                        /* dV tile (bc, HS) += P^T (bc, br) @ dO (br, HS) */
                        tbi_sgemm(1, 0, bc, HS, br, 1.0f,
                                    t.s, BC, dO + (size_t)i0 * D, D, 1.0f, dv + (size_t)j0 * ld,
                                    (int)ld);
                        /* dQ (br, HS) += scale * dS (br, bc) @ K tile (bc, HS) */
                        tbi_sgemm(0, 0, br, HS, bc, scale,
                                    t.dp, BC, k + (size_t)j0 * ld, (int)ld, 1.0f,
                                    dq + (size_t)i0 * ld, (int)ld);
                        /* dK tile (bc, HS) += scale * dS^T (bc, br) @ Q (br, HS) */
                        tbi_sgemm(1, 0, bc, HS, br, scale,
                                    t.dp, BC, q + (size_t)i0 * ld, (int)ld, 1.0f,
                                    dk + (size_t)j0 * ld, (int)ld);
                    }
                }
            }
        }
        free(delta);
        tile_free(&t);
    }
    return failed ? -1 : 0;
}

int tbi_attention_fwd(float *out, float *lse, const float *qkv, int B, int N, int NH, int HS,
                      int causal)
{
    if (tbi_attention_fwd_avx512(out, lse, qkv, B, N, NH, HS, causal) == 0)
        return 0;
    return tbi_attention_fwd_tiles(out, lse, qkv, B, N, NH, HS, causal);
}

int tbi_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                      const float *lse, int B, int N, int NH, int HS, int causal)
{
    if (tbi_attention_bwd_avx512(dqkv, dout, qkv, out, lse, B, N, NH, HS, causal) == 0)
        return 0;
    return tbi_attention_bwd_tiles(dqkv, dout, qkv, out, lse, B, N, NH, HS, causal);
}
