/* src/tensor/cpu/gemm_bf16.c - the bf16 mode's products on CPUs with avx512_bf16: C (f32) =
 * op(A) op(B) (+ bias), each operand read in its storage type (f32, rounded to bf16 as it is
 * packed, the bits of tbi_round_bf16; or bf16 itself), pairs of bf16 products summed into f32
 * by VDPBF16PS. gemm.c's blocked scheme (B packed KC x NC into slivers of NR columns, A MC x KC
 * into slivers of MR rows, an MR x NR register tile of C), with K packed in pairs: a sliver
 * holds, per pair of k, one 32-bit word (two bf16) per row or column, so that one broadcast
 * word of A against a vector of B's words is 32 products in one instruction, twice gemm.c's
 * FMA. Not a general GEMM: alpha 1, beta 0, no f32 products (those are gemm.c's), threads over
 * row blocks only. Where the CPU lacks avx512_bf16, or TUBELET_CPU is "portable" or "avx512",
 * it returns -1 and the caller runs the f32-view twin (backend_cpu.c).
 * Tests: tests/test_ops.c (test_gemm_bf16), tests/test_backend.c (test_bf16_storage). */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "tensor/cpu/avx512.h"
#include "tensor/cpu/kernels.h"
#include "tubelet/tensor.h"

#define BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

#define MR 12
#define NR 32
#define KC 512 /* values of k: 256 pairs, a B sliver of 32 KB as gemm.c's 256 floats */
#define MC 96
#define NC 2048

/* ---- packing: every operand becomes 32-bit words of two bf16 (k even low, k odd high) ---- */

/* Lanes [0, n) of 32 16-bit ones. */
static inline __mmask32 lanes32(int n)
{
    return n >= 32 ? (__mmask32)0xffffffffu : n > 0 ? (__mmask32)((1u << n) - 1) : 0;
}

/* 16 elements at x + off (those in m, the others 0) as bf16 in the upper half of each 32-bit
 * lane, the lower half zero: bf16 widened, or f32 rounded as tbi_round_bf16 does (NaN: quiet,
 * sign and payload kept; else adding 0x7fff plus the kept part's lowest bit and cutting; a carry
 * into the exponent is right, up to infinity). Not VCVTNE2PS2BF16: it flushes subnormals. */
BF16 static ALWAYS_INLINE __m512i load_hi(const void *x, int bf, size_t off, __mmask16 m)
{
    if (bf)
        return _mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)x + off)), 16);
    __m512i b = _mm512_maskz_loadu_epi32(m, (const float *)x + off);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(b, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
    r = _mm512_mask_or_epi32(r, nan, b, _mm512_set1_epi32(0x00400000));
    return _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u));
}

/* The words of elements k (lo) and k + 1 (hi), each from load_hi. */
BF16 static ALWAYS_INLINE __m512i pair_words(__m512i lo, __m512i hi)
{
    return _mm512_or_si512(_mm512_srli_epi32(lo, 16), hi);
}

/* The 16 words of n (at most 32; the rest read as 0) consecutive elements at x + off. */
BF16 static ALWAYS_INLINE __m512i row_words(const void *x, int bf, size_t off, int n)
{
    if (bf)
        return _mm512_maskz_loadu_epi16(lanes32(n), (const uint16_t *)x + off);
    /* Word i is the upper halves of elements 2i and 2i + 1: the odd 16-bit lanes of the two. */
    const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37,
                                         35, 33, 31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7,
                                         5, 3, 1);
    __m512i h0 = load_hi(x, 0, off, lanes(n)), h1 = load_hi(x, 0, off + 16, lanes(n - 16));
    return _mm512_permutex2var_epi16(h0, odd, h1);
}

/* r[q] = the words of pair q (elements col0 + 2q, + 1) of rows row0 .. row0 + 15 of x (ld
 * apart), lane i row i; rows from row0 + rows on, and elements from col0 + n on, read as 0. */
BF16 static ALWAYS_INLINE void load_words_t(__m512i r[16], const void *x, int bf, size_t ld,
                                            size_t row0, int rows, size_t col0, int n)
{
    __m512 f[16];
    for (int i = 0; i < 16; i++)
        f[i] = i < rows ? _mm512_castsi512_ps(row_words(x, bf, (row0 + i) * ld + col0, n))
                        : _mm512_setzero_ps();
    tbi_transpose16(f);
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_castps_si512(f[i]);
}

/* One product's operands: A and B as stored (bf: bf16, else f32), C f32. */
struct prod {
    int ta, tb, M, N, K;
    const void *A, *B;
    int abf, bbf, lda, ldb, ldc;
    const float *bias;
    float *C, *sums;
};

/* op(A) = A^T, rows k and k + 1 of A interleaved, MR at a time into the slivers (gemm.c's
 * pack_at: each row of A read once, left to right); sums[i] += op(A)(i, k) as rounded, for k
 * in order (the bits of tbi_colsum on the rounded matrix), kept in registers. */
BF16 static ALWAYS_INLINE void pack_at(uint32_t *dst, const struct prod *p, int i0, int p0,
                                       int mc, int kc, float *sums)
{
    int kp = (kc + 1) / 2;
    __m512 acc[MC / MR];
    tbi_sums_load(acc, MC / MR, MR, sums, mc);
    for (int q = 0; q < kp; q++) {
        size_t r0 = (size_t)(p0 + 2 * q) * p->lda + i0;
        int two = 2 * q + 1 < kc;
#pragma GCC unroll 8
        for (int s = 0; s < MC / MR; s++) {
            int ir = s * MR;
            if (ir >= mc)
                break;
            __mmask16 m = lanes(min_i(MR, mc - ir));
            __m512i lo = load_hi(p->A, p->abf, r0 + ir, m);
            __m512i hi = two ? load_hi(p->A, p->abf, r0 + p->lda + ir, m) : _mm512_setzero_si512();
            _mm512_mask_storeu_epi32(dst + (size_t)ir * kp + (size_t)q * MR, 0x0fff,
                                     pair_words(lo, hi));
            if (sums) {
                acc[s] = _mm512_add_ps(acc[s], _mm512_castsi512_ps(lo));
                if (two)
                    acc[s] = _mm512_add_ps(acc[s], _mm512_castsi512_ps(hi));
            }
        }
    }
    tbi_sums_store(acc, MC / MR, MR, sums, mc);
}

/* dst holds ceil(mc / MR) slivers, each kp x MR words (pair-major), zero past mc rows and past
 * kc: dst[s][q][r] = op(A)(i0 + s*MR + r, p0 + 2q and + 1); sums (ta only, or NULL) as
 * pack_at. */
BF16 static void pack_a(uint32_t *dst, const struct prod *p, int i0, int p0, int mc, int kc,
                        float *sums)
{
    int kp = (kc + 1) / 2;
    if (p->ta) {
        if (sums)
            pack_at(dst, p, i0, p0, mc, kc, sums);
        else
            pack_at(dst, p, i0, p0, mc, kc, NULL);
        return;
    }
    /* Rows of A: 16 pairs of MR rows at a time, transposed in registers. */
    for (int ir = 0; ir < mc; ir += MR) {
        uint32_t *d = dst + (size_t)ir * kp;
        for (int q0 = 0; q0 < kp; q0 += 16) {
            __m512i r[16];
            load_words_t(r, p->A, p->abf, (size_t)p->lda, (size_t)(i0 + ir), min_i(MR, mc - ir),
                         (size_t)(p0 + 2 * q0), kc - 2 * q0);
            for (int q = 0; q < 16 && q0 + q < kp; q++)
                _mm512_mask_storeu_epi32(d + (size_t)(q0 + q) * MR, 0x0fff, r[q]);
        }
    }
}

/* One sliver of B: dst[q][c] = op(B)(p0 + 2q and + 1, j0 + c), kp x NR words, zero past nr
 * columns and past kc: rows of B interleaved, or (B^T, whose rows are op(B)'s columns, pairs
 * adjacent) 16 x 16 word transposes. */
BF16 static void pack_b(uint32_t *dst, const struct prod *p, int p0, int j0, int nr, int kc)
{
    int kp = (kc + 1) / 2;
    if (!p->tb) {
        __mmask16 m0 = lanes(nr), m1 = lanes(nr - 16);
        for (int q = 0; q < kp; q++) {
            size_t r0 = (size_t)(p0 + 2 * q) * p->ldb + j0, r1 = r0 + p->ldb;
            int two = 2 * q + 1 < kc;
            __m512i z = _mm512_setzero_si512();
            __m512i lo0 = load_hi(p->B, p->bbf, r0, m0), lo1 = load_hi(p->B, p->bbf, r0 + 16, m1);
            __m512i hi0 = two ? load_hi(p->B, p->bbf, r1, m0) : z;
            __m512i hi1 = two ? load_hi(p->B, p->bbf, r1 + 16, m1) : z;
            _mm512_store_si512(dst + (size_t)q * NR, pair_words(lo0, hi0));
            _mm512_store_si512(dst + (size_t)q * NR + 16, pair_words(lo1, hi1));
        }
        return;
    }
    for (int c0 = 0; c0 < NR; c0 += 16)
        for (int q0 = 0; q0 < kp; q0 += 16) {
            __m512i r[16];
            load_words_t(r, p->B, p->bbf, (size_t)p->ldb, (size_t)(j0 + c0), nr - c0,
                         (size_t)(p0 + 2 * q0), kc - 2 * q0);
            for (int q = 0; q < 16 && q0 + q < kp; q++)
                _mm512_store_si512(dst + (size_t)(q0 + q) * NR + c0, r[q]);
        }
}

/* ---- the register kernel ---- */

/* C (m x n of an MR x NR tile) = acc + bias (n, when not NULL) + C (when add: the K blocks after
 * the first) from kp pairs of a packed A sliver (kp x MR words) and B sliver (kp x NR): 24
 * accumulators, two loads of B and twelve broadcasts per pair; the C tile fetched before the
 * loop (tbi_tile_begin). */
BF16 static void kernel(int kp, const uint32_t *a, const uint32_t *restrict b, float *c,
                        size_t ldc, int m, int n, int add, const float *bias)
{
    __m512 acc0[MR], acc1[MR];
    tbi_tile_begin(acc0, acc1, MR, NR, c, ldc, m);
    for (int q = 0; q < kp; q++, a += MR, b += NR) {
        __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
            acc0[i] = _mm512_dpbf16_ps(acc0[i], ai, b0);
            acc1[i] = _mm512_dpbf16_ps(acc1[i], ai, b1);
        }
    }
    __mmask16 k0 = lanes(n), k1 = lanes(n - 16);
    __m512 bias0 = bias ? _mm512_maskz_loadu_ps(k0, bias) : _mm512_setzero_ps();
    __m512 bias1 = bias ? _mm512_maskz_loadu_ps(k1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        if (i >= m)
            break;
        float *ci = c + (size_t)i * ldc;
        __m512 r0 = _mm512_add_ps(acc0[i], bias0), r1 = _mm512_add_ps(acc1[i], bias1);
        if (add) {
            r0 = _mm512_add_ps(_mm512_maskz_loadu_ps(k0, ci), r0);
            r1 = _mm512_add_ps(_mm512_maskz_loadu_ps(k1, ci + 16), r1);
        }
        _mm512_mask_storeu_ps(ci, k0, r0);
        _mm512_mask_storeu_ps(ci + 16, k1, r1);
    }
}

/* ---- the blocked loops ---- */

/* Rows [ic, ic + mc) by columns [jc, jc + nc) of C over the K block [pc, pc + kc), B's slivers
 * for those columns at bk; A packed into abuf first (adding to sums + ic when with_sums). */
static void run_block(const struct prod *p, int with_sums, int ic, int mc, int jc, int nc,
                      int pc, int kc, const uint32_t *bk, uint32_t *abuf)
{
    int kp = (kc + 1) / 2;
    const float *bia = pc == 0 && p->bias ? p->bias + jc : NULL;
    pack_a(abuf, p, ic, pc, mc, kc, with_sums && p->sums ? p->sums + ic : NULL);
    for (int jr = 0; jr < nc; jr += NR)
        for (int ir = 0; ir < mc; ir += MR)
            kernel(kp, abuf + (size_t)ir * kp, bk + (size_t)jr * kp,
                   p->C + (size_t)(ic + ir) * p->ldc + jc + jr, (size_t)p->ldc,
                   min_i(MR, mc - ir), min_i(NR, nc - jr), pc > 0, bia ? bia + jr : NULL);
}

/* nth threads (1 inside an OpenMP region) pack each K block of B together, then take blocks
 * of whole slivers of rows, at most MC, their number a multiple of the threads (gemm.c's
 * shared scheme, whose comment says why); two barriers per K block. The sums collect while
 * column panel 0 packs A: each row block's K blocks come in order, a barrier between. */
static void gemm_blocks(const struct prod *p, uint32_t *buf, int nth, int kpm, int ncm, int mcm)
{
#pragma omp parallel num_threads(nth) if (nth > 1)
    {
        int t = omp_get_thread_num();
        uint32_t *abuf = buf + (size_t)kpm * ncm + (size_t)t * mcm * kpm;
        int ns = (p->M + MR - 1) / MR, nt = omp_get_num_threads();
        int nb = min_i(round_up((ns + MC / MR - 1) / (MC / MR), nt), ns);
        for (int jc = 0; jc < p->N; jc += NC) {
            int nc = min_i(NC, p->N - jc);
            for (int pc = 0; pc < p->K; pc += KC) {
                int kc = min_i(KC, p->K - pc), kp = (kc + 1) / 2;
#pragma omp for schedule(static)
                for (int jr = 0; jr < nc; jr += NR)
                    pack_b(buf + (size_t)jr * kp, p, pc, jc + jr, min_i(NR, nc - jr), kc);
#pragma omp for schedule(dynamic)
                for (int ib = 0; ib < nb; ib++) {
                    int i0 = ib * ns / nb * MR, i1 = min_i(p->M, (ib + 1) * ns / nb * MR);
                    run_block(p, jc == 0, i0, i1 - i0, jc, nc, pc, kc, buf, abuf);
                }
            }
        }
    }
}

/* K = 0: C = bias (or 0) in every row, sums 0. */
static void empty_product(const struct prod *p)
{
    for (int i = 0; i < p->M; i++)
        for (int j = 0; j < p->N; j++)
            p->C[(size_t)i * p->ldc + j] = p->bias ? p->bias[j] : 0.0f;
    if (p->sums)
        memset(p->sums, 0, sizeof(float) * (size_t)p->M);
}

int tbi_gemm_bf16(int ta, int tb, int M, int N, int K, const void *A, int adt, int lda,
                  const void *B, int bdt, int ldb, const float *bias, float *C, int ldc,
                  float *sums)
{
    if (!tbi_cpu_avx512_bf16() || (sums && !ta))
        return -1;
    struct prod p = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .A = A, .B = B,
                     .abf = adt == TB_DTYPE_BF16, .bbf = bdt == TB_DTYPE_BF16, .lda = lda,
                     .ldb = ldb, .ldc = ldc, .bias = bias, .C = C, .sums = sums};
    if (M <= 0 || N <= 0)
        return 0;
    if (K <= 0) {
        empty_product(&p);
        return 0;
    }
    /* Inside a region, active or not, the calling thread alone (gemm.c's in_region). */
    int nth = omp_get_level() > 0 ? 1 : omp_get_max_threads();
    int kpm = (min_i(KC, K) + 1) / 2, ncm = round_up(min_i(NC, N), NR);
    int mcm = round_up(min_i(MC, M), MR);
    size_t bytes = sizeof(uint32_t) * ((size_t)kpm * ncm + (size_t)nth * mcm * kpm);
    uint32_t *buf = (uint32_t *)tbi_scratch(TBI_SCRATCH_GEMM_BF16, bytes);
    if (!buf)
        return -1;
    if (sums)
        memset(sums, 0, sizeof(float) * (size_t)M);
    gemm_blocks(&p, buf, nth, kpm, ncm, mcm);
    return 0;
}

/* dinp (M, K) = dout (M, N) @ w (N, K) */
static int dinp_of(float *dinp, const void *dout, int ddt, const void *w, int wdt, int M, int K,
                   int N)
{
    return tbi_gemm_bf16(0, 0, M, K, N, dout, ddt, N, w, wdt, K, NULL, dinp, K, NULL);
}

/* dw (N, K) = dout^T (N, M) @ inp (M, K), dbias (N) = the sums of its rows */
static int dw_of(float *dw, float *dbias, const void *dout, int ddt, const void *inp, int idt,
                 int M, int K, int N)
{
    return tbi_gemm_bf16(1, 0, N, K, M, dout, ddt, N, inp, idt, K, NULL, dw, K, dbias);
}

/* With two threads side by side, one product a thread (as matmul.c's tbi_matmul_bwd, whose
 * comment says why); else one after the other, each on all threads. */
int tbi_matmul_bwd_bf16(float *dinp, float *dw, float *dbias, const void *dout, int ddt,
                        const void *inp, int idt, const void *w, int wdt, int M, int K, int N)
{
    if (!tbi_cpu_avx512_bf16() || (dbias && !dw))
        return -1;
    int rc = 0;
    if (dinp && dw && omp_get_level() == 0 && omp_get_max_threads() == 2) {
#pragma omp parallel num_threads(2) reduction(| : rc)
        {
            /* A team of one (OMP_THREAD_LIMIT, OMP_DYNAMIC) runs both. */
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            if (t == 0)
                rc |= dinp_of(dinp, dout, ddt, w, wdt, M, K, N);
            if (t == nt - 1)
                rc |= dw_of(dw, dbias, dout, ddt, inp, idt, M, K, N);
        }
        return rc ? -1 : 0;
    }
    if (dinp)
        rc |= dinp_of(dinp, dout, ddt, w, wdt, M, K, N);
    if (dw)
        rc |= dw_of(dw, dbias, dout, ddt, inp, idt, M, K, N);
    return rc ? -1 : 0;
}
