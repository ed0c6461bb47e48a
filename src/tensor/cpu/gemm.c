/* src/tensor/cpu/gemm.c - single-precision GEMM for the CPU ops: our own AVX-512 kernel where
 * tbi_cpu_avx512() says so, a portable serial kernel of our own (plain C), and OpenBLAS
 * (cblas_sgemm) for products outside OpenMP regions on CPUs without AVX-512.
 *
 * Why our own: Debian 12's OpenBLAS 0.3.21 picks its kernels from the CPU model it knows; on
 * processors newer than it (Sapphire/Emerald Rapids) it falls back to SSE3 kernels, and with
 * OPENBLAS_CORETYPE=Haswell to AVX2 ones: half of what the FMA units can do. The kernel here
 * is the classic blocked scheme (Goto; BLIS's five loops): B is packed KC x NC into slivers
 * of NR columns, A is packed MC x KC into slivers of MR rows (or, for narrow products, read
 * in place by rows), and a MR x NR register tile of C is accumulated over KC with
 * broadcast-FMAs. Threads split the row blocks of one packed B, or, for weight gradients,
 * the columns (gemm_own).
 *
 * Inside an OpenMP region (the portable attention's tiles, the backward's pairs of products in
 * matmul.c) a product runs on the calling thread alone, on one of our kernels, never on
 * OpenBLAS; outside, OpenBLAS runs only where its team is sure to come out as large as it asks
 * (openblas_safe): Debian's OpenMP build of it spins in sched_yield forever when it does not,
 * as in a region of one. TUBELET_GEMM=openblas in the environment sends the products outside
 * regions to OpenBLAS; TUBELET_CPU=portable turns off every AVX-512 path (tbi_cpu_avx512;
 * TUBELET_CPU=avx512 only the avx512_bf16 ones, gemm_bf16.c's bf16 products). The
 * portable kernel is tuned no further than its register tile: the fallback, not the fast path.
 * Tests: tests/test_ops.c (against a double-precision loop, every transpose, odd shapes). */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/internal.h"
#include "tensor/cpu/avx512.h"
#include "tensor/cpu/kernels.h"

#define MR 12
#define NR 32
#define KC 256
#define MC 96
#define NC 2048
#define IN_PLACE_MAX_N 512 /* products narrower than this read a row-major A unpacked */
#define SPLIT_N_MAX_ROW_BLOCKS 4 /* at most this many MC blocks a thread: split the columns */

/* op(A) = A^T: each row of A (one k) is read once, left to right, and dealt out MR at a time
 * to the slivers. (Sliver by sliver instead, every k touched a new row and page: a stall per
 * 12 floats.) With sums: sums[i] (i < mc) += op(A)(i0 + i, p0 + k) for k in order, the
 * running sums kept in registers (the loop over slivers unrolled). */
AVX512 static ALWAYS_INLINE void pack_at(float *dst, const float *A, size_t lda, int i0, int p0,
                                         int mc, int kc, float *sums)
{
    __m512 acc[MC / MR];
    tbi_sums_load(acc, MC / MR, MR, sums, mc);
    for (int k = 0; k < kc; k++) {
        const float *src = A + (size_t)(p0 + k) * lda + i0;
#pragma GCC unroll 8
        for (int s = 0; s < MC / MR; s++) {
            int ir = s * MR;
            if (ir >= mc)
                break;
            __m512 v = _mm512_maskz_loadu_ps(lanes(min_i(MR, mc - ir)), src + ir);
            _mm512_mask_storeu_ps(dst + (size_t)ir * kc + (size_t)k * MR, 0x0fff, v);
            if (sums)
                acc[s] = _mm512_add_ps(acc[s], v);
        }
    }
    tbi_sums_store(acc, MC / MR, MR, sums, mc);
}

/* dst holds ceil(mc / MR) slivers, each kc x MR (k-major), zero-padded past mc rows:
 * dst[s][k][r] = op(A)(i0 + s*MR + r, p0 + k); sums (ta only, or NULL) as pack_at. */
AVX512 static void pack_a(float *dst, const float *A, size_t lda, int ta, int i0, int p0, int mc,
                          int kc, float *sums)
{
    if (ta) {
        /* Two inlined copies: the one without sums has no test of them in its loop. */
        if (sums)
            pack_at(dst, A, lda, i0, p0, mc, kc, sums);
        else
            pack_at(dst, A, lda, i0, p0, mc, kc, NULL);
        return;
    }
    /* Rows of A: 16 k of MR rows at a time, transposed in registers (lane r of vector k
     * is row r at k), each k's MR floats stored at once. */
    for (int ir = 0; ir < mc; ir += MR) {
        int mr = min_i(MR, mc - ir);
        float *d = dst + (size_t)ir * kc;
        for (int k0 = 0; k0 < kc; k0 += 16) {
            __m512 r[16];
            tbi_load_transposed16(r, A + p0 + k0, lda, (size_t)(i0 + ir), mr, lanes(kc - k0));
            for (int k = 0; k < 16 && k0 + k < kc; k++)
                _mm512_mask_storeu_ps(d + (size_t)(k0 + k) * MR, 0x0fff, r[k]);
        }
    }
}

/* One sliver of B: dst[k][c] = op(B)(p0 + k, j0 + c), kc x NR, zero-padded past nr columns;
 * by vector moves (rows of B), or 16 x 16 register transposes (B^T, whose rows are op(B)'s
 * columns). */
AVX512 static void pack_b(float *dst, const float *B, size_t ldb, int tb, int p0, int j0, int nr,
                          int kc)
{
    if (!tb) {
        __mmask16 k0 = lanes(nr), k1 = lanes(nr - 16);
        for (int k = 0; k < kc; k++) {
            const float *src = B + (size_t)(p0 + k) * ldb + j0;
            float *dk = dst + (size_t)k * NR;
            _mm512_store_ps(dk, _mm512_maskz_loadu_ps(k0, src));
            _mm512_store_ps(dk + 16, _mm512_maskz_loadu_ps(k1, src + 16));
        }
        return;
    }
    for (int c0 = 0; c0 < NR; c0 += 16)
        for (int q0 = 0; q0 < kc; q0 += 16) {
            __m512 r[16];
            tbi_load_transposed16(r, B + p0 + q0, ldb, (size_t)(j0 + c0), nr - c0,
                                  lanes(kc - q0));
            for (int k = 0; k < 16 && q0 + k < kc; k++)
                _mm512_store_ps(dst + (size_t)(q0 + k) * NR + c0, r[k]);
        }
}

/* The register kernels: an MR x NR tile of C, its 24 accumulators in registers (the loops over
 * rows unrolled), fed by broadcast-FMAs over kc. Each addresses A its own way so that its loop
 * holds nothing but the loads and FMAs: with one kernel taking A(i, k) = a[i * ars + k * aks],
 * GCC kept twelve row pointers, spilled them and reloaded two per k (4% slower). Before the
 * loop, tbi_tile_begin (avx512.h) zeroes the accumulators and fetches the C tile. */

/* After it: C (m x n of the tile) = alpha * acc + beta * C, plus bias (n, added to every row)
 * when not NULL; C is not read when beta == 0. */
AVX512 static ALWAYS_INLINE void tile_end(const __m512 acc0[MR], const __m512 acc1[MR],
                                          float *c, size_t ldc, int m, int n, float alpha,
                                          float beta, const float *bias)
{
    __mmask16 k0 = lanes(n), k1 = lanes(n - 16);
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
    if (bias) {
        bias0 = _mm512_maskz_loadu_ps(k0, bias);
        bias1 = _mm512_maskz_loadu_ps(k1, bias + 16);
    }
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        if (i >= m)
            break;
        float *ci = c + (size_t)i * ldc;
        __m512 r0 = _mm512_fmadd_ps(acc0[i], va, bias0), r1 = _mm512_fmadd_ps(acc1[i], va, bias1);
        if (beta != 0) {
            r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(k0, ci), r0);
            r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(k1, ci + 16), r1);
        }
        _mm512_mask_storeu_ps(ci, k0, r0);
        _mm512_mask_storeu_ps(ci + 16, k1, r1);
    }
}

/* A from a packed sliver (kc x MR, k-major; rows past m are its zero padding): one pointer. */
AVX512 static void kernel(int kc, const float *a, const float *restrict b, float *c, size_t ldc,
                          int m, int n, float alpha, float beta, const float *bias)
{
    __m512 acc0[MR], acc1[MR];
    tbi_tile_begin(acc0, acc1, MR, NR, c, ldc, m);
    for (int k = 0; k < kc; k++, a += MR, b += NR) {
        __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
            acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
        }
    }
    tile_end(acc0, acc1, c, ldc, m, n, alpha, beta, bias);
}

/* A read in place: MR whole rows, row-major with stride lda. Four pointers, each to three rows
 * (x86 addresses p, p + lda, p + 2 lda with one stride register), step along k together. */
AVX512 static void kernel_rows(int kc, const float *a, size_t lda, const float *restrict b,
                               float *c, size_t ldc, int n, float alpha, float beta,
                               const float *bias)
{
    __m512 acc0[MR], acc1[MR];
    tbi_tile_begin(acc0, acc1, MR, NR, c, ldc, MR);
    const float *p0 = a, *p1 = a + 3 * lda, *p2 = a + 6 * lda, *p3 = a + 9 * lda;
    for (int k = 0; k < kc; k++, p0++, p1++, p2++, p3++, b += NR) {
        __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            const float *p = i < 3 ? p0 : i < 6 ? p1 : i < 9 ? p2 : p3;
            __m512 ai = _mm512_set1_ps(p[(size_t)(i % 3) * lda]);
            acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
            acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
        }
    }
    tile_end(acc0, acc1, c, ldc, MR, n, alpha, beta, bias);
}

static void scale_c(float *C, size_t ldc, int M, int N, float beta)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
}

static void add_bias(float *C, size_t ldc, int M, int N, const float *bias)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            C[(size_t)i * ldc + j] += bias[j];
}

/* One product's operands, as tbi_sgemm takes them, and its optional sums of op(A)'s rows. */
struct prod {
    int ta, tb, M, N, K;
    float alpha, beta;
    const float *A, *B, *bias;
    int lda, ldb, ldc;
    float *C, *sums;
};

/* Rows [ic, ic + mc) by columns [jc, jc + nc) of C over the K block [pc, pc + kc), B's
 * slivers for those columns at bk; A packed into abuf first (adding to sums + ic when with
 * sums), or, read in place, only the rows past its last whole sliver. */
static void run_block(const struct prod *p, int in_place, int with_sums, int ic, int mc, int jc,
                      int nc, int pc, int kc, const float *bk, float *abuf)
{
    float bet = pc == 0 ? p->beta : 1.0f;
    const float *bia = pc == 0 && p->bias ? p->bias + jc : NULL;
    int mfull = in_place ? mc / MR * MR : 0; /* rows read in place; the rest packed */
    if (mfull < mc)
        pack_a(abuf + (size_t)mfull * kc, p->A, (size_t)p->lda, p->ta, ic + mfull, pc,
               mc - mfull, kc, with_sums && p->sums ? p->sums + ic + mfull : NULL);
    for (int jr = 0; jr < nc; jr += NR)
        for (int ir = 0; ir < mc; ir += MR) {
            float *c = p->C + (size_t)(ic + ir) * p->ldc + jc + jr;
            int n = min_i(NR, nc - jr);
            const float *bj = bia ? bia + jr : NULL;
            if (ir < mfull)
                kernel_rows(kc, p->A + (size_t)(ic + ir) * p->lda + pc, (size_t)p->lda,
                            bk + (size_t)jr * kc, c, (size_t)p->ldc, n, p->alpha, bet, bj);
            else
                kernel(kc, abuf + (size_t)ir * kc, bk + (size_t)jr * kc, c, (size_t)p->ldc,
                       min_i(MR, mc - ir), n, p->alpha, bet, bj);
        }
}

/* A by rows is read in place for narrow products: packing it is a transpose whose cost,
 * against the product's, grows as 32 / nc (a third of ViT-T's 192-column ones, when it was
 * done by scalars). For wide ones the packed sliver's contiguity wins (rows 3-12 KB apart
 * share cache sets: ~7% slower kernels on ViT-B's shapes). */
static int a_in_place(const struct prod *p, int nc)
{
    return !p->ta && nc < IN_PLACE_MAX_N;
}

/* The blocked loops; nth threads (1 inside an OpenMP region), in one of two ways:
 * - shared (most products): the threads pack each K block of B together, then take blocks
 *   of at most MC rows; two barriers per K block;
 * - split (few row blocks, many columns: the weight gradients of 384-768 outputs): each
 *   thread takes its own share of the columns, packing its B and all of A itself, with no
 *   barrier at all (with 4 row blocks to 2 threads, the shared way left a thread waiting at
 *   most K blocks).
 * The sums (ta only; zeroed by the caller) collect while column 0's panel packs A: each MC
 * block's K blocks come in order, one thread at a time, a barrier (or the same thread)
 * between. */
static void gemm_own(const struct prod *p, float *buf, int nth, int kcm, int ncm, int mcm,
                     int split)
{
#pragma omp parallel num_threads(nth) if (nth > 1)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        float *abuf = buf + (size_t)kcm * ncm + (size_t)t * mcm * kcm;
        if (split) {
            int ns = (p->N + NR - 1) / NR, n0 = ns * t / nt * NR;
            int n1 = min_i(p->N, ns * (t + 1) / nt * NR), w = ncm / nt / NR * NR;
            float *bbuf = buf + (size_t)t * w * kcm;
            for (int jc = n0; jc < n1; jc += w) {
                int nc = min_i(w, n1 - jc), in_place = a_in_place(p, nc);
                for (int pc = 0; pc < p->K; pc += KC) {
                    int kc = min_i(KC, p->K - pc);
                    for (int jr = 0; jr < nc; jr += NR)
                        pack_b(bbuf + (size_t)jr * kc, p->B, (size_t)p->ldb, p->tb, pc,
                               jc + jr, min_i(NR, nc - jr), kc);
                    for (int ic = 0; ic < p->M; ic += MC)
                        run_block(p, in_place, jc == 0, ic, min_i(MC, p->M - ic), jc, nc, pc, kc,
                                  bbuf, abuf);
                }
            }
        } else {
            /* Row blocks of whole slivers, at most MC rows, their number a multiple of the
             * threads and their sizes within a sliver of each other: ViT-S's 131 slivers as
             * 18 blocks of 7-8, not 16 of 8 and one of 3 (9 blocks to one thread, 8 to the
             * other: 67 slivers against 64 at every K block). */
            int ns = (p->M + MR - 1) / MR, nb = round_up((ns + MC / MR - 1) / (MC / MR), nt);
            nb = min_i(nb, ns);
            for (int jc = 0; jc < p->N; jc += NC) {
                int nc = min_i(NC, p->N - jc), in_place = a_in_place(p, nc);
                for (int pc = 0; pc < p->K; pc += KC) {
                    int kc = min_i(KC, p->K - pc);
#pragma omp for schedule(static)
                    for (int jr = 0; jr < nc; jr += NR)
                        pack_b(buf + (size_t)jr * kc, p->B, (size_t)p->ldb, p->tb, pc, jc + jr,
                               min_i(NR, nc - jr), kc);
#pragma omp for schedule(dynamic)
                    for (int ib = 0; ib < nb; ib++) {
                        int i0 = ib * ns / nb * MR, i1 = min_i(p->M, (ib + 1) * ns / nb * MR);
                        run_block(p, in_place, jc == 0, i0, i1 - i0, jc, nc, pc, kc, buf, abuf);
                    }
                }
            }
        }
    }
}

/* Scratch kept per thread between calls (a fresh allocation of a few MB per product is an
 * mmap and munmap, and a round of page faults, every time): one buffer per use, which only
 * grows (to a few MB on the thread that runs the big products, tens to hundreds of KB on the
 * attention threads) and lives as long as its thread. Freed by a thread-specific key's
 * destructor when the thread ends: OpenMP ends the threads that a smaller team than the last
 * no longer needs, and a _Thread_local pointer alone would leak their buffers. */
struct scratch {
    float *buf[TBI_SCRATCH_N];
    size_t cap[TBI_SCRATCH_N];
};

static _Thread_local struct scratch *scratch_mine;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_made;

static void scratch_free(void *p)
{
    struct scratch *s = p;
    for (int u = 0; u < TBI_SCRATCH_N; u++)
        free(s->buf[u]);
    free(s);
}

static void scratch_key_init(void)
{
    scratch_key_made = pthread_key_create(&scratch_key, scratch_free) == 0;
}

float *tbi_scratch(int use, size_t bytes)
{
    struct scratch *s = scratch_mine;
    if (!s) {
        pthread_once(&scratch_once, scratch_key_init);
        if (!scratch_key_made || !(s = tbi_calloc(1, sizeof(*s))))
            return NULL;
        if (pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
        scratch_mine = s;
    }
    if (bytes > s->cap[use]) {
        free(s->buf[use]);
        s->buf[use] = tbi_alloc_big(bytes);
        s->cap[use] = s->buf[use] ? bytes : 0;
    }
    return s->buf[use];
}

static int use_own(void)
{
    return tbi_cpu_gemm_own();
}

int tbi_sgemm_uses_own(void)
{
    return use_own();
}

/* Inside an OpenMP region, active or not: a team of one (OMP_THREAD_LIMIT=1, OMP_DYNAMIC, a
 * nested region past the active levels) counts too, so that a product there takes the same
 * kernel, and gives the same bits, whatever size its team came out. */
static int in_region(void)
{
    return omp_get_level() > 0;
}

/* The AVX-512 path, with an optional bias added to every row of C, and optional sums of op(A)'s
 * rows (ta only). */
static int sgemm_own(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc, const float *bias,
                     float *sums)
{
    if (!tbi_cpu_avx512())
        return -1;
    if (M <= 0 || N <= 0)
        return 0;
    if (sums && (!ta || K <= 0 || alpha == 0))
        return -1;
    if (K <= 0 || alpha == 0) {
        scale_c(C, (size_t)ldc, M, N, beta);
        if (bias)
            add_bias(C, (size_t)ldc, M, N, bias);
        return 0;
    }
    int nth = in_region() ? 1 : omp_get_max_threads();
    int kcm = min_i(KC, K), ncm = round_up(min_i(NC, N), NR), mcm = round_up(min_i(MC, M), MR);
    int split = nth > 1 && (M + MC - 1) / MC <= SPLIT_N_MAX_ROW_BLOCKS * nth &&
                N >= 4 * NR * nth;
    if (split) /* each thread's share of B in its own part of the buffer */
        ncm = round_up(round_up(N, NR) / nth + NR, NR) * nth;
    size_t bytes = sizeof(float) * ((size_t)kcm * ncm + (size_t)nth * mcm * kcm);
    float *buf = tbi_scratch(TBI_SCRATCH_GEMM, bytes);
    if (!buf)
        return -1;
    if (sums)
        memset(sums, 0, sizeof(float) * (size_t)M);
    struct prod p = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta,
                     .A = A, .B = B, .bias = bias, .lda = lda, .ldb = ldb, .ldc = ldc, .C = C,
                     .sums = sums};
    gemm_own(&p, buf, nth, kcm, ncm, mcm, split);
    return 0;
}

int tbi_sgemm_own(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc)
{
    return sgemm_own(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL);
}

/* ---- the portable kernel: plain C for the compiler to vectorise, one thread ----
 * PMR x PNR tiles of C, accumulated in registers over PKC values of k from a packed sliver of
 * op(B) (PKC x PNR, on the stack: no allocation, so it cannot fail) and A read in place, by
 * rows or by columns. 4 x 24 is 12 AVX2 accumulators, 3 loads of B and 4 broadcasts per k:
 * GCC 12 keeps them all in the 16 ymm registers (~95 GFLOP/s on one core here, OpenBLAS's
 * own level), where it turned 6 x 16, 4 x 16 and 8 x 8 tiles into scalar code or spilled
 * accumulators (6-8 GFLOP/s). Only B is packed: op(B)'s columns, read along k, are rows of
 * B^T apart otherwise, and a sliver serves every row tile; A's rows (or columns) are read
 * in order already. */
#define PMR 4
#define PNR 24
#define PKC 256

/* C (m x n of a tile) = alpha * A (m x kc) @ bp (kc x PNR) + bias + beta * C (not read when
 * beta == 0); A(r, k) = a[r * ars + k * aks] (rows past m are read as row 0, never stored). */
static ALWAYS_INLINE void ptile(int kc, const float *a, size_t ars, size_t aks,
                                const float *restrict bp, float *c, size_t ldc, int m, int n,
                                float alpha, float beta, const float *bias)
{
    const float *ar[PMR];
    float acc[PMR][PNR];
    for (int r = 0; r < PMR; r++) {
        ar[r] = a + (size_t)(r < m ? r : 0) * ars;
        for (int j = 0; j < PNR; j++)
            acc[r][j] = 0;
    }
    for (int k = 0; k < kc; k++) {
        const float *bk = bp + (size_t)k * PNR;
#pragma GCC unroll 4
        for (int r = 0; r < PMR; r++) {
            float av = ar[r][(size_t)k * aks];
            for (int j = 0; j < PNR; j++)
                acc[r][j] += av * bk[j];
        }
    }
    /* Whole tiles with constant bounds (the loop with m and n in it came out as a tangle of
     * shuffles that cost more than the products of small kc). */
    if (m == PMR && n == PNR) {
#pragma GCC unroll 4
        for (int r = 0; r < PMR; r++) {
            float *cr = c + (size_t)r * ldc;
            if (beta == 0)
                for (int j = 0; j < PNR; j++)
                    cr[j] = alpha * acc[r][j] + (bias ? bias[j] : 0.0f);
            else
                for (int j = 0; j < PNR; j++)
                    cr[j] = alpha * acc[r][j] + (bias ? bias[j] : 0.0f) + beta * cr[j];
        }
        return;
    }
    for (int r = 0; r < m; r++) {
        float *cr = c + (size_t)r * ldc;
        for (int j = 0; j < n; j++) {
            float x = alpha * acc[r][j] + (bias ? bias[j] : 0.0f);
            cr[j] = beta == 0 ? x : x + beta * cr[j];
        }
    }
}

/* A by rows (A(r, k) = a[r * lda + k]) and by columns (a[k * lda + r]): one copy of the
 * kernel each, with the strides constant. */
static void ptile_rows(int kc, const float *a, size_t lda, const float *bp, float *c, size_t ldc,
                       int m, int n, float alpha, float beta, const float *bias)
{
    ptile(kc, a, lda, 1, bp, c, ldc, m, n, alpha, beta, bias);
}

static void ptile_cols(int kc, const float *a, size_t lda, const float *bp, float *c, size_t ldc,
                       int m, int n, float alpha, float beta, const float *bias)
{
    ptile(kc, a, 1, lda, bp, c, ldc, m, n, alpha, beta, bias);
}

/* dst (kc x PNR) = op(B)(p0 + k, j0 + j), zero past n columns; B^T read along its rows. */
static void ppack_b(float *restrict dst, const float *B, size_t ldb, int tb, int p0, int j0, int n,
                    int kc)
{
    if (!tb) {
        for (int k = 0; k < kc; k++) {
            const float *src = B + (size_t)(p0 + k) * ldb + j0;
            float *d = dst + (size_t)k * PNR;
            for (int j = 0; j < PNR; j++)
                d[j] = j < n ? src[j] : 0.0f;
        }
        return;
    }
    for (int j = 0; j < PNR; j++) {
        const float *src = B + (size_t)(j0 + j) * ldb + p0;
        for (int k = 0; k < kc; k++)
            dst[(size_t)k * PNR + j] = j < n ? src[k] : 0.0f;
    }
}

/* tbi_sgemm_portable with an optional bias (N) added to every row. */
static void sgemm_portable(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                           int lda, const float *B, int ldb, float beta, float *C, int ldc,
                           const float *bias)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0 || alpha == 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float *c = C + (size_t)i * ldc + j;
                *c = (beta == 0 ? 0 : beta * *c) + (bias ? bias[j] : 0.0f);
            }
        return;
    }
    float bp[PKC * PNR] __attribute__((aligned(64)));
    for (int pc = 0; pc < K; pc += PKC) {
        int kc = min_i(PKC, K - pc);
        float bet = pc == 0 ? beta : 1.0f;
        for (int j0 = 0; j0 < N; j0 += PNR) {
            int n = min_i(PNR, N - j0);
            const float *bj = pc == 0 && bias ? bias + j0 : NULL;
            ppack_b(bp, B, (size_t)ldb, tb, pc, j0, n, kc);
            for (int i0 = 0; i0 < M; i0 += PMR) {
                int m = min_i(PMR, M - i0);
                float *c = C + (size_t)i0 * ldc + j0;
                if (ta)
                    ptile_cols(kc, A + (size_t)pc * lda + i0, (size_t)lda, bp, c, (size_t)ldc, m, n,
                               alpha, bet, bj);
                else
                    ptile_rows(kc, A + (size_t)i0 * lda + pc, (size_t)lda, bp, c, (size_t)ldc, m, n,
                               alpha, bet, bj);
            }
        }
    }
}

void tbi_sgemm_portable(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc)
{
    sgemm_portable(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL);
}

/* The portable kernel on every thread of a team, outside regions where OpenBLAS cannot be
 * trusted (below): each thread takes whole tiles of rows, or of columns for wide products. The
 * bits are the serial kernel's whatever the team's size: each element sums over k alone. */
static void sgemm_portable_team(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                                int lda, const float *B, int ldb, float beta, float *C, int ldc,
                                const float *bias)
{
    if (M <= 0 || N <= 0)
        return;
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        if (M >= N) {
            int tiles = (M + PMR - 1) / PMR, i0 = tiles * t / nt * PMR;
            int i1 = min_i(M, tiles * (t + 1) / nt * PMR);
            const float *a = ta ? A + i0 : A + (size_t)i0 * lda;
            sgemm_portable(ta, tb, i1 - i0, N, K, alpha, a, lda, B, ldb, beta, C + (size_t)i0 * ldc,
                           ldc, bias);
        } else {
            int tiles = (N + PNR - 1) / PNR, j0 = tiles * t / nt * PNR;
            int j1 = min_i(N, tiles * (t + 1) / nt * PNR);
            const float *b = tb ? B + (size_t)j0 * ldb : B + j0;
            sgemm_portable(ta, tb, M, j1 - j0, K, alpha, A, lda, b, ldb, beta, C + j0, ldc,
                           bias ? bias + j0 : NULL);
        }
    }
}

/* Whether OpenBLAS may run a product (outside regions): only where the team it asks for, of
 * omp_get_max_threads(), is sure to come out whole. Debian 12's OpenMP build of 0.3.21 deals
 * a product out as one job per thread asked for, each waiting for the others' packed panels,
 * so a team that comes out smaller (OMP_DYNAMIC, OMP_THREAD_LIMIT below the thread count, no
 * active level left) spins in sched_yield forever (OpenBLAS issue 4418; reproduced here with
 * each of the three). On one thread it asks for no team. */
static int openblas_safe(void)
{
    int n = omp_get_max_threads();
    return n == 1 || (!omp_get_dynamic() && omp_get_thread_limit() >= n &&
                      omp_get_max_active_levels() > omp_get_active_level());
}

static void cblas(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Every entry point's product, with an optional bias, and the column sums of A (ta, alpha 1,
 * beta 0 only; NULL: none). The engines:
 * - inside a region: the AVX-512 kernel on this thread (where tbi_cpu_avx512(), whatever
 *   TUBELET_GEMM says), else the portable one;
 * - outside: the AVX-512 kernel on all threads (use_own), else OpenBLAS where openblas_safe();
 *   where it is not, the AVX-512 kernel after all if the CPU has it, else the portable one on
 *   all threads.
 * The AVX-512 kernel fails only for want of scratch memory (or for sums it cannot take: K = 0);
 * the next engine then runs, and the sums come from tbi_colsum. */
static void product(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc, const float *bias,
                    float *sums)
{
    int region = in_region();
    if ((region || use_own() || !openblas_safe()) &&
        sgemm_own(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, sums) == 0)
        return;
    if (region) {
        sgemm_portable(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
    } else if (openblas_safe()) {
        cblas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        if (bias)
            add_bias(C, (size_t)ldc, M, N, bias);
    } else {
        sgemm_portable_team(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
    }
    if (sums)
        tbi_colsum(sums, A, K, M);
}

void tbi_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc)
{
    product(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL);
}

void tbi_sgemm_bias(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                    int ldb, const float *bias, float *C, int ldc)
{
    product(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, bias, NULL);
}

void tbi_sgemm_tn_colsum(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                         float *C, int ldc, float *colsum)
{
    product(1, 0, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, NULL, colsum);
}
