/* src/tensor/cpu/elementwise.c - LayerNorm, exact GELU, QuickGELU, residual adds, AdamW, norms:
 * the per-element and per-row ops, each loop compiled twice (x86-64-v4 and the build's baseline)
 * and chosen by tbi_cpu_avx512(), never by the CPU alone, so TUBELET_CPU=portable reaches the
 * baseline copies anywhere. GELU has AVX-512 intrinsics of its own; QuickGELU only the loops.
 * The arithmetic per element and row is the CUDA backend's too: src/tensor/act_rules.h,
 * layernorm_rules.h and optim_rules.h.
 * Tests: tests/test_ops.c (formulas in double, finite differences, PyTorch's AdamW). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "tensor/act_rules.h"
#include "tensor/cpu/avx512.h"
#include "tensor/cpu/vmath.h"
#include "tensor/cpu/kernels.h"
#include "tensor/layernorm_rules.h"
#include "tensor/optim_rules.h"

/* The per-element loops are compiled twice, for AVX-512 (x86-64-v4) and for the build's
 * baseline: twice the lanes, and for the compute-bound ones nearly twice the speed. Each loop
 * is written once, as NAME_body (always inlined), and TWO_WAYS(NAME, (params), (args)) defines
 * NAME_v4 and NAME_base around it and NAME, which calls the first where tbi_cpu_avx512() and
 * the second elsewhere. Explicitly, not by GCC's target_clones as before: their ifunc resolver
 * chose from the CPU alone, so no environment switch could reach the baseline copies on an
 * AVX-512 machine; the v4 copies are the same code the clones were (same target, same body). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define V4 __attribute__((target("arch=x86-64-v4")))
#else
#define V4
#endif

#define TWO_WAYS(name, params, args)                                                               \
    V4 static void name##_v4 params                                                                \
    {                                                                                              \
        name##_body args;                                                                          \
    }                                                                                              \
    static void name##_base params                                                                 \
    {                                                                                              \
        name##_body args;                                                                          \
    }                                                                                              \
    static void name params                                                                        \
    {                                                                                              \
        if (tbi_cpu_avx512())                                                                      \
            name##_v4 args;                                                                        \
        else                                                                                       \
            name##_base args;                                                                      \
    }

/* This thread's share [*lo, *hi) of n items, in whole blocks of 16. */
static void share(size_t n, size_t *lo, size_t *hi)
{
#ifdef _OPENMP
    size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
#else
    size_t t = 0, nt = 1;
#endif
    size_t per = ((n + nt - 1) / nt + 15) / 16 * 16;
    *lo = t * per < n ? t * per : n;
    *hi = *lo + per < n ? *lo + per : n;
}

static ALWAYS_INLINE void layernorm_fwd_rows_body(float *out, float *mean, float *rstd,
                                                  const float *inp, const float *w, const float *b,
                                                  int r0, int r1, int C, float eps)
{
    for (int r = r0; r < r1; r++) {
        const float *x = inp + (size_t)r * C;
        float *y = out + (size_t)r * C;
        float m = 0;
#pragma omp simd reduction(+ : m)
        for (int c = 0; c < C; c++)
            m += x[c];
        m = tbi_ln_mean_rule(m, C);
        float var = 0;
#pragma omp simd reduction(+ : var)
        for (int c = 0; c < C; c++)
            var += tbi_ln_sq_rule(x[c], m);
        float s = tbi_ln_rstd_rule(var, C, eps);
        for (int c = 0; c < C; c++)
            y[c] = tbi_ln_out_rule(x[c], m, s, w[c], b[c]);
        mean[r] = m;
        rstd[r] = s;
    }
}
TWO_WAYS(layernorm_fwd_rows,
         (float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
          int r0, int r1, int C, float eps),
         (out, mean, rstd, inp, w, b, r0, r1, C, eps))

void tbi_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int R, int C, float eps)
{
#pragma omp parallel
    {
        size_t lo, hi;
        share((size_t)R, &lo, &hi);
        layernorm_fwd_rows(out, mean, rstd, inp, w, b, (int)lo, (int)hi, C, eps);
    }
}

static ALWAYS_INLINE void layernorm_bwd_rows_body(float *dinp, const float *dout, const float *inp,
                                                  const float *w, const float *mean,
                                                  const float *rstd, int r0, int r1, int C)
{
    for (int r = r0; r < r1; r++) {
        const float *x = inp + (size_t)r * C, *dy = dout + (size_t)r * C;
        float *dx = dinp + (size_t)r * C;
        float m = mean[r], s = rstd[r];
        /* dx = s * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * w */
        float sum_d = 0, sum_dx = 0;
#pragma omp simd reduction(+ : sum_d, sum_dx)
        for (int c = 0; c < C; c++) {
            float xhat = tbi_ln_xhat_rule(x[c], m, s), dxhat = dy[c] * w[c];
            sum_d += dxhat;
            sum_dx += dxhat * xhat;
        }
        sum_d = tbi_ln_mean_rule(sum_d, C);
        sum_dx = tbi_ln_mean_rule(sum_dx, C);
        for (int c = 0; c < C; c++) {
            float xhat = tbi_ln_xhat_rule(x[c], m, s), dxhat = dy[c] * w[c];
            dx[c] += tbi_ln_dx_rule(s, dxhat, xhat, sum_d, sum_dx);
        }
    }
}
TWO_WAYS(layernorm_bwd_rows,
         (float *dinp, const float *dout, const float *inp, const float *w, const float *mean,
          const float *rstd, int r0, int r1, int C),
         (dinp, dout, inp, w, mean, rstd, r0, r1, C))

/* dw, db (n columns of rows of stride ld) = the sums over R rows of dout * xhat and dout. */
static ALWAYS_INLINE void layernorm_param_grads_body(float *dw, float *db, const float *dout,
                                                     const float *inp, const float *mean,
                                                     const float *rstd, int R, size_t ld, size_t n)
{
    for (size_t c = 0; c < n; c++)
        dw[c] = db[c] = 0;
    for (int r = 0; r < R; r++) {
        const float *x = inp + (size_t)r * ld, *dy = dout + (size_t)r * ld;
        float m = mean[r], s = rstd[r];
#pragma omp simd
        for (size_t c = 0; c < n; c++) {
            dw[c] += tbi_ln_dw_rule(dy[c], x[c], m, s);
            db[c] += dy[c];
        }
    }
}
TWO_WAYS(layernorm_param_grads,
         (float *dw, float *db, const float *dout, const float *inp, const float *mean,
          const float *rstd, int R, size_t ld, size_t n),
         (dw, db, dout, inp, mean, rstd, R, ld, n))

void tbi_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, const float *mean, const float *rstd, int R, int C)
{
#pragma omp parallel
    {
        size_t lo, hi;
        share((size_t)R, &lo, &hi);
        layernorm_bwd_rows(dinp, dout, inp, w, mean, rstd, (int)lo, (int)hi, C);
    }
    /* The parameter gradients sum over rows: each thread one range of columns, rows in
     * order (the same sums for any number of threads). */
#pragma omp parallel
    {
        size_t lo, hi;
        share((size_t)C, &lo, &hi);
        layernorm_param_grads(dw + lo, db + lo, dout + lo, inp + lo, mean, rstd, R, (size_t)C,
                              hi - lo);
    }
}

/* sum (n) = the sums over M rows (stride ld) of x, in row order. */
static ALWAYS_INLINE void colsum_span_body(float *sum, const float *x, int M, size_t ld, size_t n)
{
    for (size_t j = 0; j < n; j++)
        sum[j] = 0;
    for (int i = 0; i < M; i++) {
        const float *row = x + (size_t)i * ld;
#pragma omp simd
        for (size_t j = 0; j < n; j++)
            sum[j] += row[j];
    }
}
TWO_WAYS(colsum_span, (float *sum, const float *x, int M, size_t ld, size_t n), (sum, x, M, ld, n))

void tbi_colsum(float *sum, const float *x, int M, int N)
{
#pragma omp parallel
    {
        size_t lo, hi;
        share((size_t)N, &lo, &hi);
        colsum_span(sum + lo, x + lo, M, (size_t)N, hi - lo);
    }
}

/* The activations' rules (src/tensor/act_rules.h) on the CPU's erfc and exp: cpu_gelu_erfc,
 * cpu_gelu_grad, cpu_quick_sigmoid. */
TBI_ACT_RULES(cpu, tbi_erfcf, tbi_expf)

/* GELU(x) = x * Phi(x) = 0.5 x erfc(-x / sqrt 2); GELU'(x) = Phi(x) + x phi(x). These loops
 * run only where the AVX-512 intrinsics below do not: one copy, the baseline's. */
static void gelu_fwd_span(float *out, const float *inp, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = tbi_gelu_rule(x, cpu_gelu_erfc(x));
    }
}

static void gelu_bwd_span(float *dinp, float *out, const float *inp, const float *dout, size_t n)
{
    if (out) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float x = inp[i], e = cpu_gelu_erfc(x);
            dinp[i] = dout[i] * cpu_gelu_grad(x, e);
            out[i] = tbi_gelu_rule(x, e);
        }
        return;
    }
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        dinp[i] = dout[i] * cpu_gelu_grad(x, cpu_gelu_erfc(x));
    }
}

/* The same on AVX-512 registers, where the processor has it: tbi_erfcf's fit with the
 * reciprocal by vrcp14ps and a Newton step (vdivps alone took a third of the loop) and the
 * exponentials in base 2 (tbi_exp2_16): 1.6 times the speed (bench: 0.57 against 0.9 ns
 * per element and thread, forward; 0.8 against 1.3, backward), within 1e-6 of the loops above.
 * The forward and the backward compute GELU(x) by the same steps, so its bits agree. */
AVX512 static ALWAYS_INLINE __m512 erfc16(__m512 x)
{
    __m512 z = _mm512_abs_ps(x);
    __m512 d = _mm512_fmadd_ps(z, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.0f));
    __m512 t = _mm512_rcp14_ps(d);
    t = _mm512_mul_ps(t, _mm512_fnmadd_ps(d, t, _mm512_set1_ps(2.0f)));
    static const float c[10] = {0.17087277f, -0.82215223f, 1.48851587f, -1.13520398f,
                                0.27886807f, -0.18628806f, 0.09678418f, 0.37409196f,
                                1.00002368f, -1.26551223f};
    __m512 p = _mm512_set1_ps(c[0]);
    for (int i = 1; i < 10; i++)
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(c[i]));
    __m512 r = _mm512_mul_ps(
        t, tbi_exp2_16(_mm512_mul_ps(_mm512_fnmadd_ps(z, z, p), _mm512_set1_ps(TBI_LOG2E))));
    __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_sub_ps(r, neg, _mm512_set1_ps(2.0f), r);
}

/* GELU(x) = 0.5 x e, given e = erfc(-x / sqrt 2): one definition for both passes. */
AVX512 static ALWAYS_INLINE __m512 gelu16(__m512 x, __m512 e)
{
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), e);
}

AVX512 static void gelu_fwd16(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes((int)(n - i < 16 ? n - i : 16));
        __m512 x = _mm512_maskz_loadu_ps(k, inp + i);
        _mm512_mask_storeu_ps(out + i, k,
                              gelu16(x, erfc16(_mm512_mul_ps(x, _mm512_set1_ps(-TBI_INV_SQRT2)))));
    }
}

AVX512 static void gelu_bwd16(float *dinp, float *out, const float *inp, const float *dout,
                              size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes((int)(n - i < 16 ? n - i : 16));
        __m512 x = _mm512_maskz_loadu_ps(k, inp + i), dy = _mm512_maskz_loadu_ps(k, dout + i);
        __m512 e = erfc16(_mm512_mul_ps(x, _mm512_set1_ps(-TBI_INV_SQRT2)));
        __m512 pdf = _mm512_mul_ps(
            _mm512_set1_ps(TBI_INV_SQRT_2PI),
            tbi_exp2_16(_mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(-0.5f * TBI_LOG2E)), x)));
        __m512 grad = _mm512_fmadd_ps(x, pdf, _mm512_mul_ps(_mm512_set1_ps(0.5f), e));
        _mm512_mask_storeu_ps(dinp + i, k, _mm512_mul_ps(dy, grad));
        if (out)
            _mm512_mask_storeu_ps(out + i, k, gelu16(x, e));
    }
}

void tbi_gelu_fwd(float *out, const float *inp, size_t n)
{
    int v = tbi_cpu_avx512();
#pragma omp parallel
    {
        size_t lo, hi;
        share(n, &lo, &hi);
        if (v)
            gelu_fwd16(out + lo, inp + lo, hi - lo);
        else
            gelu_fwd_span(out + lo, inp + lo, hi - lo);
    }
}

void tbi_gelu_bwd(float *dinp, float *out, const float *inp, const float *dout, size_t n)
{
    int v = tbi_cpu_avx512();
#pragma omp parallel
    {
        size_t lo, hi;
        share(n, &lo, &hi);
        if (v)
            gelu_bwd16(dinp + lo, out ? out + lo : NULL, inp + lo, dout + lo, hi - lo);
        else
            gelu_bwd_span(dinp + lo, out ? out + lo : NULL, inp + lo, dout + lo, hi - lo);
    }
}

/* QuickGELU(x) = x s, s = sigmoid(1.702 x) = 1 / (1 + e^(-1.702 x)); its derivative is
 * s + 1.702 x s (1 - s). The forward and the backward take x s by the same steps, so their
 * bits agree. Far below zero tbi_expf saturates at e^88: s comes out ~6e-39 where the true one
 * is smaller still, both nothing against any x s that matters. */
static ALWAYS_INLINE void quickgelu_fwd_span_body(float *out, const float *inp, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = tbi_quickgelu_rule(x, cpu_quick_sigmoid(x));
    }
}
TWO_WAYS(quickgelu_fwd_span, (float *out, const float *inp, size_t n), (out, inp, n))

static ALWAYS_INLINE void quickgelu_bwd_span_body(float *dinp, float *out, const float *inp,
                                                  const float *dout, size_t n)
{
    if (out) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float x = inp[i], s = cpu_quick_sigmoid(x);
            dinp[i] = dout[i] * tbi_quickgelu_grad_rule(x, s);
            out[i] = tbi_quickgelu_rule(x, s);
        }
        return;
    }
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], s = cpu_quick_sigmoid(x);
        dinp[i] = dout[i] * tbi_quickgelu_grad_rule(x, s);
    }
}
TWO_WAYS(quickgelu_bwd_span,
         (float *dinp, float *out, const float *inp, const float *dout, size_t n),
         (dinp, out, inp, dout, n))

void tbi_quickgelu_fwd(float *out, const float *inp, size_t n)
{
#pragma omp parallel
    {
        size_t lo, hi;
        share(n, &lo, &hi);
        quickgelu_fwd_span(out + lo, inp + lo, hi - lo);
    }
}

void tbi_quickgelu_bwd(float *dinp, float *out, const float *inp, const float *dout, size_t n)
{
#pragma omp parallel
    {
        size_t lo, hi;
        share(n, &lo, &hi);
        quickgelu_bwd_span(dinp + lo, out ? out + lo : NULL, inp + lo, dout + lo, hi - lo);
    }
}

void tbi_add_fwd(float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

static ALWAYS_INLINE void adamw_span_body(float *p, const float *g, float gs, float *m, float *v,
                                          size_t n, struct tbi_adamw_k k)
{
    /* Vectorised only because the kernels build with -fno-math-errno (CMakeLists.txt): with
     * errno, sqrtf stays a libm call and the loop ran scalar, 2.5x slower. omp simd: the four
     * arrays never overlap, so no runtime overlap checks. */
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        tbi_adamw_rule(p + i, m + i, v + i, g[i], gs, k);
}
TWO_WAYS(adamw_span,
         (float *p, const float *g, float gs, float *m, float *v, size_t n, struct tbi_adamw_k k),
         (p, g, gs, m, v, n, k))

/* Whether x (n) is all zero bits: a look at 16 at a time, out at the first that is not. */
static int zero_bits(const float *x, size_t n)
{
    const uint32_t *u = (const uint32_t *)(const void *)x;
    for (size_t i = 0; i < n; i += 16) {
        uint32_t any = 0;
        for (size_t k = i; k < i + 16 && k < n; k++)
            any |= u[k];
        if (any)
            return 0;
    }
    return 1;
}

/* The end of the run from i (below hi) that ends where the moments' next 4 KB page starts:
 * the updates go run by run so that a run whose gradient and moments are all zero bits gets
 * only its weight decay - what the update would do to it, to the bit (its step is 0, its
 * moments stay zero) - and its pages of moments stay unwritten (alloc_zero's: a token
 * table's unused rows never commit theirs). A dense run costs one look at its first
 * gradient. */
/* A zero run's update: p * decay (then minus a zero step, which changes no bits). */
static void decay_run(float *p, size_t n, float decay)
{
    if (decay != 1.0f)
#pragma omp simd
        for (size_t k = 0; k < n; k++)
            p[k] *= decay;
}

static size_t run_end(const float *m, size_t i, size_t hi)
{
    size_t left = (4096 - ((uintptr_t)(m + i) & 4095)) / sizeof(float); /* >= 1 */
    return i + left < hi ? i + left : hi;
}

void tbi_adamw(float *p, const float *g, float grad_scale, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step)
{
    /* PyTorch's AdamW (torch/optim/adamw.py, the single-tensor path), in the same order. */
    const struct tbi_adamw_k k = tbi_adamw_k_rule(lr, beta1, beta2, eps, weight_decay, step);
#pragma omp parallel
    {
        size_t lo, hi;
        share(n, &lo, &hi);
        for (size_t i = lo, e; i < hi; i = e) {
            e = run_end(m, i, hi);
            if (zero_bits(g + i, e - i) && zero_bits(m + i, e - i) && zero_bits(v + i, e - i)) {
                decay_run(p + i, e - i, k.decay);
                continue;
            }
            adamw_span(p + i, g + i, grad_scale, m + i, v + i, e - i, k);
        }
    }
}

void tbi_lion(float *p, const float *g, float grad_scale, float *m, size_t n, float lr,
              float beta1, float beta2, float weight_decay)
{
    /* AVION's Lion (lucidrains' lion-pytorch), in its order: p *= 1 - lr * wd; p -= lr *
     * sign(m beta1 + g (1 - beta1)); m = m beta2 + g (1 - beta2). One plain loop: the compiler
     * vectorises it for any processor, so it needs no tuned twin. */
    const struct tbi_lion_k k = tbi_lion_k_rule(lr, beta1, beta2, weight_decay);
#pragma omp parallel
    {
        size_t lo, hi;
        share(n, &lo, &hi);
        for (size_t i = lo, e; i < hi; i = e) { /* zero runs skipped, as tbi_adamw's */
            e = run_end(m, i, hi);
            if (zero_bits(g + i, e - i) && zero_bits(m + i, e - i)) {
                decay_run(p + i, e - i, k.decay);
                continue;
            }
#pragma omp simd
            for (size_t j = i; j < e; j++)
                tbi_lion_rule(p + j, m + j, g[j], grad_scale, k);
        }
    }
}

void tbi_sgd(float *p, const float *g, float grad_scale, float *m, size_t n, float lr,
             float momentum, float weight_decay)
{
    /* torch.optim.SGD's step (dampening 0): g = grad + wd p; buf = momentum buf + g (its
     * first buf is g, which momentum * 0 + g is); p = p - lr buf. A plain loop, as Lion's. */
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        tbi_sgd_rule(p + i, m + i, g[i], grad_scale, lr, momentum, weight_decay);
}

/* *sum = the sum of squares of x (n): sixteen running sums side by side (one add chain would
 * wait on its latency each element), added together at the end. */
static ALWAYS_INLINE void sum_squares_span_body(double *sum, const float *x, size_t n)
{
    double acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
#pragma omp simd
        for (int j = 0; j < 16; j++)
            acc[j] += (double)x[i + j] * x[i + j];
    for (; i < n; i++)
        acc[0] += (double)x[i] * x[i];
    double s = 0;
    for (int j = 0; j < 16; j++)
        s += acc[j];
    *sum = s;
}
TWO_WAYS(sum_squares_span, (double *sum, const float *x, size_t n), (sum, x, n))

/* bf16 rounding on the bits: adding 0x7fff plus the kept part's lowest bit, then cutting the
 * low 16, rounds to nearest with ties to even (a carry into the exponent is the right answer,
 * up to infinity); a NaN only gets its quiet bit, which the cut keeps, so it stays NaN. */
static ALWAYS_INLINE uint32_t bf16_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof(b));
    b = (b & 0x7fffffffu) > 0x7f800000u ? b | 0x00400000u : b + 0x7fffu + ((b >> 16) & 1u);
    return b >> 16;
}

static ALWAYS_INLINE void round_bf16_span_body(float *dst, const float *src, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        uint32_t b = bf16_bits(src[i]) << 16;
        memcpy(&dst[i], &b, sizeof(b));
    }
}
TWO_WAYS(round_bf16_span, (float *dst, const float *src, size_t n), (dst, src, n))

static ALWAYS_INLINE void to_bf16_span_body(uint16_t *dst, const float *src, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint16_t)bf16_bits(src[i]);
}
TWO_WAYS(to_bf16_span, (uint16_t *dst, const float *src, size_t n), (dst, src, n))

static ALWAYS_INLINE void from_bf16_span_body(float *dst, const uint16_t *src, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &b, sizeof(b));
    }
}
TWO_WAYS(from_bf16_span, (float *dst, const uint16_t *src, size_t n), (dst, src, n))

/* The three conversions share one loop over the threads' shares (kind: 0 round, 1 to bf16,
 * 2 from bf16). */
static void convert(int kind, void *dst, const void *src, size_t n)
{
#pragma omp parallel if (n > 65536)
    {
        size_t lo, hi;
        share(n, &lo, &hi);
        if (kind == 0)
            round_bf16_span((float *)dst + lo, (const float *)src + lo, hi - lo);
        else if (kind == 1)
            to_bf16_span((uint16_t *)dst + lo, (const float *)src + lo, hi - lo);
        else
            from_bf16_span((float *)dst + lo, (const uint16_t *)src + lo, hi - lo);
    }
}

void tbi_round_bf16(float *x, size_t n)
{
    convert(0, x, x, n);
}

void tbi_round_bf16_copy(float *dst, const float *src, size_t n)
{
    convert(0, dst, src, n);
}

void tbi_bf16_from_f32(uint16_t *dst, const float *src, size_t n)
{
    convert(1, dst, src, n);
}

void tbi_f32_from_bf16(float *dst, const uint16_t *src, size_t n)
{
    convert(2, dst, src, n);
}

/* Each thread's share summed, the shares added in thread order: the same bits on every run
 * for a given team (an OpenMP reduction adds them in whatever order threads finish, which for
 * three or more threads changed a gradient norm's last bit from run to run). */
double tbi_sum_squares(const float *x, size_t n)
{
    enum { MAX_PARTS = 64 };
    double part[MAX_PARTS];
    int nt = omp_get_max_threads() < MAX_PARTS ? omp_get_max_threads() : MAX_PARTS, used = 1;
#pragma omp parallel num_threads(nt)
    {
        size_t lo, hi;
        share(n, &lo, &hi);
        sum_squares_span(&part[omp_get_thread_num()], x + lo, hi - lo);
        if (omp_get_thread_num() == 0)
            used = omp_get_num_threads();
    }
    double s = 0;
    for (int t = 0; t < used; t++)
        s += part[t];
    return s;
}
