/* src/tensor/cpu/avx512.h - small AVX-512 helpers shared by the CPU kernels (gemm.c,
 * attention_avx512.c, elementwise.c); each function carries its own target attribute, so the
 * files build without -mavx512f and run their AVX-512 code only where the processor has it. */
#ifndef TUBELET_TENSOR_CPU_AVX512_H
#define TUBELET_TENSOR_CPU_AVX512_H

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* The blocked kernels' integer arithmetic: the smaller of two, x rounded up to a multiple of m. */
static inline int min_i(int a, int b)
{
    return a < b ? a : b;
}

static inline int round_up(int x, int m)
{
    return (x + m - 1) / m * m;
}

/* Lanes [0, n) of 16: none for n <= 0, all for n >= 16. */
static inline __mmask16 lanes(int n)
{
    return n >= 16 ? (__mmask16)0xffff : n > 0 ? (__mmask16)((1u << n) - 1) : 0;
}

/* The running row sums of a packing of A^T (gemm.c's and gemm_bf16.c's pack_at), ns slivers of
 * mr rows, mc rows in all, kept in registers: acc[s] = sums[s mr ..] (0 without sums), and
 * back. Inlined with constant ns and mr, the loops unroll into the caller's registers. */
AVX512 static ALWAYS_INLINE void tbi_sums_load(__m512 *acc, int ns, int mr, const float *sums,
                                               int mc)
{
#pragma GCC unroll 8
    for (int s = 0; s < ns; s++)
        acc[s] = sums && s * mr < mc
                     ? _mm512_maskz_loadu_ps(lanes(min_i(mr, mc - s * mr)), sums + s * mr)
                     : _mm512_setzero_ps();
}

AVX512 static ALWAYS_INLINE void tbi_sums_store(const __m512 *acc, int ns, int mr, float *sums,
                                                int mc)
{
#pragma GCC unroll 8
    for (int s = 0; s < ns; s++)
        if (sums && s * mr < mc)
            _mm512_mask_storeu_ps(sums + s * mr, lanes(min_i(mr, mc - s * mr)), acc[s]);
}

/* Before a register kernel's loop over k: mr pairs of zeroed accumulators (a tile of mr x nr, nr
 * <= 32), and the C tile's m rows fetched (C is read or written only after the loop; fetched
 * now, its lines, from memory for wide products, arrive during the loop instead of stalling at
 * its end). */
AVX512 static ALWAYS_INLINE void tbi_tile_begin(__m512 *acc0, __m512 *acc1, int mr, int nr,
                                                float *c, size_t ldc, int m)
{
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        acc0[i] = acc1[i] = _mm512_setzero_ps();
        if (i < m) {
            __builtin_prefetch(c + (size_t)i * ldc, 1, 3);
            __builtin_prefetch(c + (size_t)i * ldc + nr - 1, 1, 3);
        }
    }
}

/* r[i] (row i of a 16 x 16 block) becomes column i: 64 shuffles instead of 256 scalar moves.
 * Pairs of rows interleave by 32 then 64 bits, leaving in lane L of r[4i + k] column 4L + k of
 * rows 4i..4i+3; 128-bit lane shuffles gather each column's four pieces. */
AVX512 static ALWAYS_INLINE void tbi_transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        __m512d t0 = _mm512_castps_pd(t[i]), t1 = _mm512_castps_pd(t[i + 1]);
        __m512d t2 = _mm512_castps_pd(t[i + 2]), t3 = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    for (int k = 0; k < 4; k++) {
        __m512 u0 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);
        __m512 u1 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);
        __m512 u2 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
        __m512 u3 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
        t[k] = _mm512_shuffle_f32x4(u0, u2, 0x88);
        t[k + 8] = _mm512_shuffle_f32x4(u0, u2, 0xdd);
        t[k + 4] = _mm512_shuffle_f32x4(u1, u3, 0x88);
        t[k + 12] = _mm512_shuffle_f32x4(u1, u3, 0xdd);
    }
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}

/* r[k] = column k of rows first .. first + 15 of a (ld apart), each read in the lanes `cols`
 * allows; rows from first + rows on, and the other lanes, read as 0 (no address past them is
 * formed). The packing kernels' step. */
AVX512 static ALWAYS_INLINE void tbi_load_transposed16(__m512 r[16], const float *a, size_t ld,
                                                       size_t first, int rows, __mmask16 cols)
{
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_setzero_ps();
    for (int i = 0; i < rows && i < 16; i++)
        r[i] = _mm512_maskz_loadu_ps(cols, a + (first + (size_t)i) * ld);
    tbi_transpose16(r);
}

#define TBI_LOG2E 1.44269504088896341f

/* 2^x on 16 lanes: x = n + r, |r| <= 1/2 (exact), a degree-5 polynomial for 2^r (a
 * minimax fit for relative error with p(0) = 1: 9e-8 in exact arithmetic, 2e-7 in float
 * Horner, near expf's 1-2 ulp), scaled by 2^n through vscalefps. Lanes below -127 are
 * zeroed (so is -inf, which would make r NaN); NaN stays NaN. 9 instructions, where e^x
 * by a Cody-Waite reduction and Cephes' degree-6 polynomial takes 14: callers fold log2 e
 * into a product they compute anyway (attention's scale) where they can. */
AVX512 static ALWAYS_INLINE __m512 tbi_exp2_16(__m512 x)
{
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-127.0f), _CMP_NLT_UQ);
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(1.326472708e-3f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.671512862e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.550733746e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.402224208e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.931469776e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, p, n);
}

#endif /* TUBELET_TENSOR_CPU_AVX512_H */
