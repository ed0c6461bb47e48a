/* src/tensor/cpu/attention_avx512.c - FlashAttention on AVX-512 register tiles: the same
 * algorithm as attention.c (query strips against key blocks, online softmax, only the
 * log-sum-exp kept, probabilities recomputed in the backward, nothing N x N), but the tile
 * products run on a small register kernel of its own instead of tbi_sgemm.
 *
 * Why: the products of attention are many and small (a few dozen rows, K = the head size), so
 * a general GEMM spends most of its time packing both operands for every tile. Here each
 * (batch, head) packs its keys and values once - K^T and V^T into slivers of TN columns for
 * the score products, K and V contiguous for the others - and every other operand is read in
 * place: the kernel broadcasts A from either a row-major or a column-major layout, so the
 * score strips serve as A both ways (P V and dS K by rows, P^T dO and dS^T Q by columns).
 * Query gradients collect in dqkv itself, a strip at a time; key and value gradients, which
 * every strip adds to, in contiguous per-head buffers (in dqkv's rows, 9 KB apart, ViT-B's
 * 1568 keys overflow L2 by set conflicts: its backward ~5% slower), copied to dqkv once.
 *
 * Causal attention (key j > query i masked) runs here too rather than falling back to the
 * portable path: a strip meets only the key blocks up to its last query, the block across the
 * diagonal is cut there, and each row's later keys get probability 0 by a lane mask. Text
 * towers' 77 tokens are one strip and one block, so this saves little beyond the masking; a
 * longer causal sequence skips half the blocks.
 *
 * Scratch is per thread and kept between calls (an allocation per call would be an mmap and
 * a round of page faults every time). Tests: tests/test_ops.c (against naive attention, and
 * against the portable path; causal and not). */
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/cpu/avx512.h"
#include "tensor/cpu/kernels.h"

#define TM 6         /* rows of the register tile */
#define TV 4         /* 16-float vectors per tile row */
#define TN (16 * TV) /* columns of the register tile; key slivers are this wide */
#define QS 192       /* query rows per strip (96: ViT-B's backward 4% slower; dK, dV have K = QS) */
#define KB 256       /* keys per block (a multiple of TN): the strips are QS x KB */

static size_t padded(int N)
{
    return (size_t)(N + TN - 1) / TN * TN;
}

/* Keys of a block (j0, nk) that query i may see: all of them, or (causal) those j0 + j <= i. */
static int visible(int causal, int i, int j0, int nk)
{
    if (!causal)
        return nk;
    int n = i - j0 + 1;
    return n < 0 ? 0 : n < nk ? n : nk;
}

#define LN2 0.69314718055994531f

/* t += A (TM x kc) @ B (kc x 16 nv); rows of B masked unless full (a mask register per load
 * costs a port the FMAs need, so full tiles, the usual case, go without). */
AVX512 static ALWAYS_INLINE void kloop(__m512 t[TM][TV], int nv, int kc, const float *const ar[TM],
                                       size_t aks, const float *b, size_t ldb,
                                       const __mmask16 mask[TV], int full)
{
    for (int k = 0; k < kc; k++) {
        __m512 bv[TV];
        const float *bk = b + (size_t)k * ldb;
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            bv[v] = full ? _mm512_loadu_ps(bk + 16 * v)
                         : _mm512_maskz_loadu_ps(mask[v], bk + 16 * v);
#pragma GCC unroll 6
        for (int r = 0; r < TM; r++) {
            __m512 av = _mm512_set1_ps(ar[r][(size_t)k * aks]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                t[r][v] = _mm512_fmadd_ps(av, bv[v], t[r][v]);
        }
    }
}

/* C (m x n) = alpha * A (m x kc) @ B (kc x n), plus C when acc; m <= TM, n <= 16 nv, nv <= TV
 * (a compile-time constant at every call: narrow tiles for the last few keys).
 * A(r, k) = a[r * ars + k * aks]; row k of B starts at b + k * ldb; C row r at c + r * ldc.
 * Rows of A past m are read as row 0 and never stored; columns past n are neither read nor
 * written. */
AVX512 static ALWAYS_INLINE void tile(int nv, int kc, const float *a, size_t ars, size_t aks,
                                      const float *b, size_t ldb, float *c, size_t ldc, int m,
                                      int n, float alpha, int acc)
{
    __m512 t[TM][TV];
    __mmask16 mask[TV];
    const float *ar[TM];
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++)
        mask[v] = lanes(n - 16 * v);
#pragma GCC unroll 6
    for (int r = 0; r < TM; r++) {
        ar[r] = a + (size_t)(r < m ? r : 0) * ars;
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            t[r][v] = _mm512_setzero_ps();
    }
    if (n == 16 * nv)
        kloop(t, nv, kc, ar, aks, b, ldb, mask, 1);
    else
        kloop(t, nv, kc, ar, aks, b, ldb, mask, 0);
    __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 6
    for (int r = 0; r < TM; r++) {
        if (r >= m)
            break;
        float *cr = c + (size_t)r * ldc;
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            __m512 x = acc ? _mm512_fmadd_ps(t[r][v], va,
                                             _mm512_maskz_loadu_ps(mask[v], cr + 16 * v))
                           : _mm512_mul_ps(t[r][v], va);
            _mm512_mask_storeu_ps(cr + 16 * v, mask[v], x);
        }
    }
}

/* A row-major: A(r, k) = a[r * lda + k]. */
AVX512 static void tile_rows(int kc, const float *a, size_t lda, const float *b, size_t ldb,
                             float *c, size_t ldc, int m, int n, float alpha, int acc)
{
    tile(TV, kc, a, lda, 1, b, ldb, c, ldc, m, n, alpha, acc);
}

/* The same, at most 16 columns. */
AVX512 static void tile_rows16(int kc, const float *a, size_t lda, const float *b, size_t ldb,
                               float *c, size_t ldc, int m, int n, float alpha, int acc)
{
    tile(1, kc, a, lda, 1, b, ldb, c, ldc, m, n, alpha, acc);
}

/* A column-major (A^T row-major): A(r, k) = a[k * lda + r]. */
AVX512 static void tile_cols(int kc, const float *a, size_t lda, const float *b, size_t ldb,
                             float *c, size_t ldc, int m, int n, float alpha, int acc)
{
    tile(TV, kc, a, 1, lda, b, ldb, c, ldc, m, n, alpha, acc);
}

/* C (M x N) = alpha * A (M x K) @ B (K x N), plus C when acc; B row-major; A by rows (a_t =
 * 0: A(r, k) = a[r * lda + k]) or by columns (a_t = 1: A(r, k) = a[k * lda + r]). */
AVX512 static void gemm_acc(int a_t, int acc, int M, int N, int K, float alpha, const float *a,
                            size_t lda, const float *b, size_t ldb, float *c, size_t ldc)
{
    for (int j = 0; j < N; j += TN)
        for (int i = 0; i < M; i += TM) {
            int m = min_i(TM, M - i), n = min_i(TN, N - j);
            if (a_t)
                tile_cols(K, a + i, lda, b + j, ldb, c + (size_t)i * ldc + j, ldc, m, n, alpha,
                          acc);
            else
                tile_rows(K, a + (size_t)i * lda, lda, b + j, ldb, c + (size_t)i * ldc + j, ldc,
                          m, n, alpha, acc);
        }
}

/* s (m x nk, stride KB) = alpha * x (m x HS, stride ldx) @ y^T, y^T given as packed slivers
 * (pack_t) starting at the block's first key. A last sliver of 16 keys or fewer (4 of ViT-T's
 * 196, 8 of ViT-S's 392) runs on a tile a quarter as wide. */
AVX512 static void scores(float *s, const float *x, size_t ldx, const float *yt, int m, int nk,
                          int HS, float alpha)
{
    for (int js = 0; js < nk; js += TN) {
        int n = min_i(TN, nk - js);
        for (int i = 0; i < m; i += TM) {
            const float *xi = x + (size_t)i * ldx, *ys = yt + (size_t)js * HS;
            float *si = s + (size_t)i * KB + js;
            if (n > 16)
                tile_rows(HS, xi, ldx, ys, TN, si, KB, min_i(TM, m - i), n, alpha, 0);
            else
                tile_rows16(HS, xi, ldx, ys, TN, si, KB, min_i(TM, m - i), n, alpha, 0);
        }
    }
}

/* dst: the rows of y (N x HS, stride ld) transposed into slivers of TN rows, each HS x TN
 * (dst[sliver][d][c] = y[sliver * TN + c][d]), zero past N; in blocks of 16 keys x 16 of
 * their values. */
AVX512 static void pack_t(float *dst, const float *y, size_t ld, int N, int HS)
{
    for (int c0 = 0; c0 < (int)padded(N); c0 += 16) {
        float *sl = dst + (size_t)(c0 / TN) * TN * HS + c0 % TN;
        for (int d0 = 0; d0 < HS; d0 += 16) {
            __m512 r[16];
            tbi_load_transposed16(r, y + d0, ld, (size_t)c0, N - c0, lanes(HS - d0));
            for (int i = 0; i < 16 && d0 + i < HS; i++)
                _mm512_storeu_ps(sl + (size_t)(d0 + i) * TN, r[i]);
        }
    }
}

/* n rows of HS floats from src (stride lds) to dst (stride ldd), by vector moves (a memcpy
 * call per row of 64-128 floats cost ~1% of the backward). */
AVX512 static void copy_rows(float *dst, size_t ldd, const float *src, size_t lds, int n, int HS)
{
    if (HS % 16 == 0) {
        for (int j = 0; j < n; j++)
            for (int d = 0; d < HS; d += 16)
                _mm512_storeu_ps(dst + (size_t)j * ldd + d,
                                 _mm512_loadu_ps(src + (size_t)j * lds + d));
        return;
    }
    for (int j = 0; j < n; j++)
        for (int d = 0; d < HS; d += 16) {
            __mmask16 k = lanes(HS - d);
            _mm512_mask_storeu_ps(dst + (size_t)j * ldd + d, k,
                                  _mm512_maskz_loadu_ps(k, src + (size_t)j * lds + d));
        }
}

/* Scratch floats one thread needs for one head, forward or backward. */
static size_t fwd_floats(int N, int HS)
{
    return padded(N) * HS + (size_t)N * HS + (size_t)QS * KB + (size_t)QS * HS + 2 * QS;
}

static size_t bwd_floats(int N, int HS)
{
    return 2 * padded(N) * HS + 3 * (size_t)N * HS + 2 * (size_t)QS * KB + 2 * (size_t)QS * HS + QS;
}

/* One (batch, head): out rows (stride ldo), lse (N), from q, k, v rows (stride ld). */
AVX512 static void fwd_head(float *out, size_t ldo, float *lse, const float *q, const float *k,
                            const float *v, size_t ld, int N, int HS, float scale, int causal,
                            float *ws)
{
    float *kt = ws, *vc = kt + padded(N) * HS, *s = vc + (size_t)N * HS, *o = s + QS * KB;
    float *mx = o + (size_t)QS * HS, *l = mx + QS;
    pack_t(kt, k, ld, N, HS);
    copy_rows(vc, (size_t)HS, v, ld, N, HS);
    for (int i0 = 0; i0 < N; i0 += QS) {
        int qr = min_i(QS, N - i0);
        for (int r = 0; r < qr; r++) {
            mx[r] = -INFINITY;
            l[r] = 0;
        }
        memset(o, 0, sizeof(float) * (size_t)qr * HS);
        /* Causal: no query of the strip sees a key past its last one. */
        int nkeys = causal ? i0 + qr : N;
        for (int j0 = 0; j0 < nkeys; j0 += KB) {
            int nk = min_i(KB, nkeys - j0);
            scores(s, q + (size_t)i0 * ld, ld, kt + (size_t)j0 * HS, qr, nk, HS,
                   scale * TBI_LOG2E);
            /* Online softmax, in base 2 (the scores come out times log2 e, so 2^s is e^s
             * of the real ones): rescale what the earlier blocks gave by 2^(old max - new).
             * A row's max is over the keys it sees (nj); a row that sees none of this block
             * keeps its max (finite: block 0, first, has key 0 for every row). */
            for (int r = 0; r < qr; r++) {
                float *sr = s + (size_t)r * KB;
                int nj = visible(causal, i0 + r, j0, nk);
                __m512 vm = _mm512_set1_ps(mx[r]), vs = _mm512_setzero_ps();
                for (int j = 0; j < nj; j += 16)
                    vm = _mm512_mask_max_ps(vm, lanes(nj - j), vm,
                                            _mm512_maskz_loadu_ps(lanes(nj - j), sr + j));
                float m = _mm512_reduce_max_ps(vm);
                vm = _mm512_set1_ps(m);
                for (int j = 0; j < nk; j += 16) {
                    __mmask16 kj = lanes(nk - j);
                    __m512 e = tbi_exp2_16(_mm512_sub_ps(_mm512_maskz_loadu_ps(kj, sr + j), vm));
                    if (causal) /* the masked keys: 0, whatever their exponential came to */
                        e = _mm512_maskz_mov_ps(lanes(nj - j), e);
                    _mm512_mask_storeu_ps(sr + j, kj, e);
                    vs = _mm512_mask_add_ps(vs, kj, vs, e);
                }
                float sum = _mm512_reduce_add_ps(vs), corr = exp2f(mx[r] - m);
                l[r] = l[r] * corr + sum;
                mx[r] = m;
                if (corr != 1.0f)
                    for (int d = 0; d < HS; d++)
                        o[(size_t)r * HS + d] *= corr;
            }
            gemm_acc(0, 1, qr, HS, nk, 1.0f, s, KB, vc + (size_t)j0 * HS, (size_t)HS, o,
                     (size_t)HS);
        }
        for (int r = 0; r < qr; r++) {
            float *dst = out + (size_t)(i0 + r) * ldo, inv = 1.0f / l[r];
            for (int d = 0; d < HS; d++)
                dst[d] = o[(size_t)r * HS + d] * inv;
            lse[i0 + r] = (mx[r] + log2f(l[r])) * LN2;
        }
    }
}

/* One (batch, head): dq, dk, dv rows (stride ld) = the gradients, given dO and O (stride
 * ldo) and the forward's lse. */
AVX512 static void bwd_head(float *dq, float *dk, float *dv, const float *q, const float *k,
                            const float *v, size_t ld, const float *o, const float *dO, size_t ldo,
                            const float *lse, int N, int HS, float scale, int causal, float *ws)
{
    size_t np = padded(N) * HS, nh = (size_t)N * HS;
    float *kt = ws, *vt = kt + np, *kc = vt + np, *dkc = kc + nh, *dvc = dkc + nh;
    float *p = dvc + nh, *ds = p + QS * KB, *qs = ds + QS * KB, *dos = qs + (size_t)QS * HS;
    float *delta = dos + (size_t)QS * HS;
    pack_t(kt, k, ld, N, HS);
    pack_t(vt, v, ld, N, HS);
    copy_rows(kc, (size_t)HS, k, ld, N, HS);
    /* Causal: the first strip no longer meets every key, so dK and dV start at zero and every
     * strip adds. */
    if (causal) {
        memset(dkc, 0, sizeof(float) * nh);
        memset(dvc, 0, sizeof(float) * nh);
    }
    for (int i0 = 0; i0 < N; i0 += QS) {
        int qr = min_i(QS, N - i0);
        /* The strip's rows of Q and dO, contiguous: the key-side products read them once
         * per TM keys. */
        copy_rows(qs, (size_t)HS, q + (size_t)i0 * ld, ld, qr, HS);
        copy_rows(dos, (size_t)HS, dO + (size_t)i0 * ldo, ldo, qr, HS);
        /* delta_i = dO_i . O_i, the row term of the softmax gradient. */
        for (int r = 0; r < qr; r++) {
            const float *orow = o + (size_t)(i0 + r) * ldo, *drow = dos + (size_t)r * HS;
            float sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int d = 0; d < HS; d++)
                sum += drow[d] * orow[d];
            delta[r] = sum;
        }
        int nkeys = causal ? i0 + qr : N;
        for (int j0 = 0; j0 < nkeys; j0 += KB) {
            int nk = min_i(KB, nkeys - j0);
            /* P = exp(scale Q K^T - lse) = 2^(log2 e (scale Q K^T - lse)), recomputed, 0
             * where masked; dP = dO V^T; dS = P (dP - delta). */
            scores(p, qs, (size_t)HS, kt + (size_t)j0 * HS, qr, nk, HS, scale * TBI_LOG2E);
            scores(ds, dos, (size_t)HS, vt + (size_t)j0 * HS, qr, nk, HS, 1.0f);
            for (int r = 0; r < qr; r++) {
                float *pr = p + (size_t)r * KB, *dr = ds + (size_t)r * KB;
                __m512 li = _mm512_set1_ps(lse[i0 + r] * TBI_LOG2E);
                __m512 di = _mm512_set1_ps(delta[r]);
                int nj = visible(causal, i0 + r, j0, nk);
                for (int j = 0; j < nk; j += 16) {
                    __mmask16 kj = lanes(nk - j);
                    __m512 e = tbi_exp2_16(_mm512_sub_ps(_mm512_maskz_loadu_ps(kj, pr + j), li));
                    if (causal)
                        e = _mm512_maskz_mov_ps(lanes(nj - j), e);
                    __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(kj, dr + j), di);
                    _mm512_mask_storeu_ps(pr + j, kj, e);
                    _mm512_mask_storeu_ps(dr + j, kj, _mm512_mul_ps(e, d));
                }
            }
            /* dV += P^T dO; dK += scale dS^T Q (the first strip writing, unless causal); dQ +=
             * scale dS K, straight into the output (the first key block writing). */
            gemm_acc(1, causal || i0 > 0, nk, HS, qr, 1.0f, p, KB, dos, (size_t)HS,
                     dvc + (size_t)j0 * HS, (size_t)HS);
            gemm_acc(1, causal || i0 > 0, nk, HS, qr, scale, ds, KB, qs, (size_t)HS,
                     dkc + (size_t)j0 * HS, (size_t)HS);
            gemm_acc(0, j0 > 0, qr, HS, nk, scale, ds, KB, kc + (size_t)j0 * HS, (size_t)HS,
                     dq + (size_t)i0 * ld, ld);
        }
    }
    copy_rows(dk, ld, dkc, (size_t)HS, N, HS);
    copy_rows(dv, ld, dvc, (size_t)HS, N, HS);
}

/* Each thread's scratch, kept between calls; every thread gets its own before any writes
 * an output, so running out of memory leaves the outputs untouched. */
static int all_scratch(float **ws, size_t floats, atomic_int *failed)
{
    *ws = tbi_scratch(TBI_SCRATCH_ATTENTION, sizeof(float) * floats);
    if (!*ws)
        atomic_store(failed, 1);
#pragma omp barrier
    return atomic_load(failed) ? -1 : 0;
}

int tbi_attention_fwd_avx512(float *out, float *lse, const float *qkv, int B, int N, int NH, int HS,
                             int causal)
{
    if (!tbi_cpu_avx512())
        return -1;
    const int D = NH * HS;
    const size_t ld = (size_t)3 * D;
    const float scale = 1.0f / sqrtf((float)HS);
    atomic_int failed = 0;
#pragma omp parallel
    {
        float *ws;
        if (all_scratch(&ws, fwd_floats(N, HS), &failed) == 0) {
#pragma omp for collapse(2) schedule(dynamic)
            for (int b = 0; b < B; b++)
                for (int h = 0; h < NH; h++) {
                    const float *q = qkv + (size_t)b * N * ld + (size_t)h * HS;
                    fwd_head(out + (size_t)b * N * D + (size_t)h * HS, (size_t)D,
                             lse + ((size_t)b * NH + h) * N, q, q + D, q + 2 * D, ld, N, HS, scale,
                             causal, ws);
                }
        }
    }
    return atomic_load(&failed) ? -1 : 0;
}

int tbi_attention_bwd_avx512(float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse, int B, int N, int NH, int HS, int causal)
{
    if (!tbi_cpu_avx512())
        return -1;
    const int D = NH * HS;
    const size_t ld = (size_t)3 * D;
    const float scale = 1.0f / sqrtf((float)HS);
    atomic_int failed = 0;
#pragma omp parallel
    {
        float *ws;
        if (all_scratch(&ws, bwd_floats(N, HS), &failed) == 0) {
#pragma omp for collapse(2) schedule(dynamic)
            for (int b = 0; b < B; b++)
                for (int h = 0; h < NH; h++) {
                    size_t qoff = (size_t)b * N * ld + (size_t)h * HS;
                    size_t ooff = (size_t)b * N * D + (size_t)h * HS;
                    const float *q = qkv + qoff;
                    float *dq = dqkv + qoff;
                    bwd_head(dq, dq + D, dq + 2 * D, q, q + D, q + 2 * D, ld, out + ooff,
                             dout + ooff, (size_t)D, lse + ((size_t)b * NH + h) * N, N, HS, scale,
                             causal, ws);
                }
        }
    }
    return atomic_load(&failed) ? -1 : 0;
}
