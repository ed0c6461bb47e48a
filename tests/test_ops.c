/* tests/test_ops.c - the CPU ops, the specification every backend is checked against.
 * - each backward against central finite differences of L = sum(out * R) for random R;
 * - the GEMM's kernels (AVX-512, portable) and entry points against a double loop, called from
 *   inside OpenMP regions too; the matmul backward on any number of threads against one;
 * - FlashAttention (forward, log-sum-exp, backward; both paths; causal and not) against naive
 *   attention in double, for odd sequence lengths and head sizes 32 to 128;
 * - GELU and QuickGELU against their formulas, patchify against the Conv3d definition,
 *   cross-entropy with label smoothing against its formula, AdamW against PyTorch's update;
 * - the bf16 mode's operations (products, GELU, attention) to the bit against their exact
 *   values rounded once, ties decided by a float32 sum's order counted (test_bf16_ops);
 * - the bf16 GEMM (gemm_bf16.c) against the double product of its rounded operands, within
 *   f32 accumulation's bound, both storages, every transpose (test_gemm_bf16);
 * - a step's numbers on the backend (test_step_ops): the squares, loss and clipping factor to
 *   the bit against the host loop's arithmetic of before, the non-finite flags and their
 *   record, and checked updates equal to the plain ones - or writing nothing once flagged.
 * It runs again under ctest with TUBELET_CPU=portable, TUBELET_GEMM=openblas and other thread
 * counts (tests/CMakeLists.txt), which steer the kernels to their other paths. */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tb_test.h"
#include "core/cpu.h"
#include "core/internal.h"
#include "tensor/backend.h"
#include "tensor/cpu/vmath.h"
#include "tensor/cpu/kernels.h"
#include "tubelet/rng.h"
#include "tubelet/train.h"

static tb_rng rng;

static float *randn(size_t n, float s)
{
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)tb_rng_normal(&rng) * s;
    return x;
}

static float *zeros(size_t n)
{
    return calloc(n ? n : 1, sizeof(float));
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* Compare an analytic gradient with central differences of loss() at 24 random entries. */
typedef double (*loss_fn)(void *ctx);
static void fd_check(const char *what, float *x, size_t n, const float *grad, loss_fn loss,
                     void *ctx, float h, double tol)
{
    double worst = 0;
    for (int k = 0; k < 24; k++) {
        size_t i = (size_t)tb_rng_below(&rng, n);
        float saved = x[i];
        x[i] = saved + h;
        double lp = loss(ctx);
        x[i] = saved - h;
        double lm = loss(ctx);
        x[i] = saved;
        double num = (lp - lm) / (2.0 * h), err = fabs(num - grad[i]) / (fabs(num) + 1e-2);
        if (err > worst)
            worst = err;
        CHECK_MSG(err < tol, "%s: d/dx[%zu] analytic %.6g, numeric %.6g", what, i, grad[i], num);
    }
    fprintf(stderr, "%-22s worst relative error %.2e\n", what, worst);
}

/* ---- matmul ---- */
struct mm {
    float *out, *inp, *w, *bias, *r;
    int M, K, N;
};
static double mm_loss(void *p)
{
    struct mm *c = p;
    tbi_matmul_fwd(c->out, c->inp, c->w, c->bias, c->M, c->K, c->N);
    return dot(c->out, c->r, (size_t)c->M * c->N);
}

static void test_matmul(void)
{
    tbt_case = "matmul";
    struct mm c = {.M = 13, .K = 29, .N = 7};
    c.inp = randn((size_t)c.M * c.K, 1);
    c.w = randn((size_t)c.N * c.K, 0.3f);
    c.bias = randn((size_t)c.N, 1);
    c.r = randn((size_t)c.M * c.N, 1);
    c.out = zeros((size_t)c.M * c.N);
    /* The gradients are written, not accumulated: start them as garbage. */
    float *dinp = randn((size_t)c.M * c.K, 1e3f), *dw = randn((size_t)c.N * c.K, 1e3f);
    float *db = randn(c.N, 1e3f);
    tbi_matmul_bwd(dinp, dw, db, c.r, c.inp, c.w, c.M, c.K, c.N);
    fd_check("matmul d inp", c.inp, (size_t)c.M * c.K, dinp, mm_loss, &c, 1e-2f, 2e-3);
    fd_check("matmul d w", c.w, (size_t)c.N * c.K, dw, mm_loss, &c, 1e-2f, 2e-3);
    fd_check("matmul d bias", c.bias, c.N, db, mm_loss, &c, 1e-2f, 2e-3);
    /* The forward against its definition. */
    mm_loss(&c);
    double worst = 0;
    for (int i = 0; i < c.M; i++)
        for (int j = 0; j < c.N; j++) {
            double s = c.bias[j];
            for (int k = 0; k < c.K; k++)
                s += (double)c.inp[i * c.K + k] * c.w[j * c.K + k];
            worst = fmax(worst, fabs(s - c.out[i * c.N + j]));
        }
    CHECK_MSG(worst < 1e-4, "matmul forward off by %g", worst);
    free(c.inp), free(c.w), free(c.bias), free(c.r), free(c.out), free(dinp), free(dw), free(db);

    /* The backward on 1 thread, on 2 (where the two products run side by side, one a thread),
     * 3 and 8, on a team of one asked for two (no active levels allowed: the pair's one thread
     * runs both) and inside a region of one: the same bits as on one thread wherever the
     * products run on the AVX-512 kernel (every element sums over K in the same order); else
     * (OpenBLAS outside regions, our portable kernel inside) the same values to rounding.
     * Shapes across K, MC and NC blocks, with and without bias. */
    enum { NCONF = 6 };
    static const char *const conf[NCONF] = {"one thread",
                                            "two threads",
                                            "three threads",
                                            "eight threads",
                                            "a team of one asked for two",
                                            "a region of one"};
    static const int shapes[][3] = {{200, 70, 100}, {13, 300, 2100}, {97, 40, 33}};
    int exact = tbi_sgemm_uses_own();
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        size_t n[3] = {(size_t)M * K, (size_t)N * K, (size_t)N};
        float *inp = randn(n[0], 1), *w = randn(n[1], 0.3f);
        float *dout = randn((size_t)M * N, 1);
        /* The gradients start as NaN: written, not accumulated, and every element. */
        float *g[NCONF][3];
        for (int t = 0; t < NCONF; t++) {
            for (int x = 0; x < 3; x++) {
                g[t][x] = x == 2 && s == 1 ? NULL : malloc(sizeof(float) * n[x]);
                for (size_t i = 0; g[t][x] && i < n[x]; i++)
                    g[t][x][i] = NAN;
            }
            int threads = omp_get_max_threads(), levels = omp_get_max_active_levels();
            static const int nth[NCONF] = {1, 2, 3, 8, 2, 2};
            omp_set_num_threads(nth[t]);
            if (t == 4)
                omp_set_max_active_levels(0);
            if (t == 5) {
#pragma omp parallel num_threads(1)
                tbi_matmul_bwd(g[t][0], g[t][1], g[t][2], dout, inp, w, M, K, N);
            } else {
                tbi_matmul_bwd(g[t][0], g[t][1], g[t][2], dout, inp, w, M, K, N);
            }
            omp_set_num_threads(threads);
            omp_set_max_active_levels(levels);
        }
        for (int t = 1; t < NCONF; t++)
            for (int x = 0; x < 3; x++) {
                if (!g[0][x])
                    continue;
                /* The largest difference, against the largest value (a sum over 2100 terms
                 * that cancels to near zero is only as exact as its terms). */
                double most = 0, top = 0;
                size_t at = 0;
                for (size_t i = 0; i < n[x]; i++) {
                    double d = fabs((double)g[t][x][i] - g[0][x][i]);
                    top = fmax(top, fabs(g[0][x][i]));
                    if (!(d <= most))
                        most = d, at = i;
                }
                static const char *const what[3] = {"dinp", "dw", "dbias"};
                CHECK_MSG(exact ? most == 0 : most <= 1e-6 * top,
                          "matmul backward %dx%dx%d, %s: %s[%zu] %.9g, on one thread %.9g", M, K, N,
                          conf[t], what[x], at, g[t][x][at], g[0][x][at]);
            }
        free(inp), free(w), free(dout);
        for (int t = 0; t < NCONF; t++)
            free(g[t][0]), free(g[t][1]), free(g[t][2]);
    }
}

/* ---- layernorm ---- */
struct ln {
    float *out, *inp, *w, *b, *r, *mean, *rstd;
    int R, C;
};
static double ln_loss(void *p)
{
    struct ln *c = p;
    tbi_layernorm_fwd(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->R, c->C, 1e-6f);
    return dot(c->out, c->r, (size_t)c->R * c->C);
}

static void test_layernorm(void)
{
    tbt_case = "layernorm";
    struct ln c = {.R = 9, .C = 37};
    size_t n = (size_t)c.R * c.C;
    c.inp = randn(n, 2);
    c.w = randn(c.C, 1);
    c.b = randn(c.C, 1);
    c.r = randn(n, 1);
    c.out = zeros(n);
    c.mean = zeros(c.R);
    c.rstd = zeros(c.R);
    ln_loss(&c);
    /* Normalised rows: mean 0 and variance 1 before the affine part. */
    for (int r = 0; r < c.R; r++) {
        double m = 0, v = 0;
        for (int k = 0; k < c.C; k++) {
            double y = (c.out[r * c.C + k] - c.b[k]) / c.w[k];
            m += y;
            v += y * y;
        }
        CHECK(fabs(m / c.C) < 1e-4 && fabs(v / c.C - 1) < 1e-3);
    }
    /* dinp is added to (start it at zero), dw and db written (start them as garbage). */
    float *dinp = zeros(n), *dw = randn(c.C, 1e3f), *db = randn(c.C, 1e3f);
    tbi_layernorm_bwd(dinp, dw, db, c.r, c.inp, c.w, c.mean, c.rstd, c.R, c.C);
    fd_check("layernorm d inp", c.inp, n, dinp, ln_loss, &c, 1e-2f, 5e-3);
    fd_check("layernorm d w", c.w, c.C, dw, ln_loss, &c, 1e-2f, 2e-3);
    fd_check("layernorm d b", c.b, c.C, db, ln_loss, &c, 1e-2f, 2e-3);
    free(c.inp), free(c.w), free(c.b), free(c.r), free(c.out), free(c.mean), free(c.rstd);
    free(dinp), free(dw), free(db);
}

/* ---- gelu ---- */
struct ge {
    float *out, *inp, *r;
    size_t n;
};
static double ge_loss(void *p)
{
    struct ge *c = p;
    tbi_gelu_fwd(c->out, c->inp, c->n);
    return dot(c->out, c->r, c->n);
}

static void test_gelu(void)
{
    tbt_case = "gelu";
    struct ge c = {.n = 301};
    c.inp = randn(c.n, 2);
    c.r = randn(c.n, 1);
    c.out = zeros(c.n);
    ge_loss(&c);
    for (size_t i = 0; i < c.n; i++) {
        double x = c.inp[i], want = 0.5 * x * (1 + erf(x / sqrt(2.0)));
        CHECK_MSG(fabs(c.out[i] - want) < 1e-6, "gelu(%g) = %g, want %g", x, c.out[i], want);
    }
    float *dinp = randn(c.n, 1e3f); /* written, not accumulated */
    tbi_gelu_bwd(dinp, NULL, c.inp, c.r, c.n);
    fd_check("gelu d inp", c.inp, c.n, dinp, ge_loss, &c, 1e-2f, 2e-3);
    /* With out: the same gradient, and the forward's values. */
    float *dinp2 = randn(c.n, 1e3f), *out2 = randn(c.n, 1e3f);
    tbi_gelu_bwd(dinp2, out2, c.inp, c.r, c.n);
    ge_loss(&c);
    for (size_t i = 0; i < c.n; i++)
        CHECK_MSG(dinp2[i] == dinp[i] && out2[i] == c.out[i],
                  "gelu_bwd with out at %zu: %g %g, want %g %g", i, dinp2[i], out2[i], dinp[i],
                  c.out[i]);
    /* In place: dinp = dout. */
    float *inplace = malloc(sizeof(float) * c.n);
    memcpy(inplace, c.r, sizeof(float) * c.n);
    tbi_gelu_bwd(inplace, NULL, c.inp, inplace, c.n);
    CHECK_MSG(!memcmp(inplace, dinp, sizeof(float) * c.n), "gelu_bwd in place differs");
    /* Both in place, as the ViT's backward runs it: dinp = dout, out = inp. */
    float *x = malloc(sizeof(float) * c.n);
    memcpy(x, c.inp, sizeof(float) * c.n);
    memcpy(inplace, c.r, sizeof(float) * c.n);
    tbi_gelu_bwd(inplace, x, x, inplace, c.n);
    CHECK_MSG(!memcmp(inplace, dinp, sizeof(float) * c.n) &&
                  !memcmp(x, c.out, sizeof(float) * c.n), "gelu_bwd with out = inp differs");
    free(c.inp), free(c.r), free(c.out), free(dinp), free(dinp2), free(out2), free(inplace);
    free(x);
}

/* ---- QuickGELU ---- */
static double qg_loss(void *p)
{
    struct ge *c = p;
    tbi_quickgelu_fwd(c->out, c->inp, c->n);
    return dot(c->out, c->r, c->n);
}

static void test_quickgelu(void)
{
    tbt_case = "quickgelu";
    /* Wide inputs: sigmoid's saturation on both sides (below -51, e^(-1.702 x) is past
     * tbi_expf's range) and around zero. */
    struct ge c = {.n = 517};
    c.inp = randn(c.n, 4);
    c.inp[0] = -80, c.inp[1] = 80, c.inp[2] = 0, c.inp[3] = -52, c.inp[4] = 30;
    c.r = randn(c.n, 1);
    c.out = zeros(c.n);
    qg_loss(&c);
    for (size_t i = 0; i < c.n; i++) {
        double x = c.inp[i], want = x / (1 + exp(-1.702 * x));
        CHECK_MSG(fabs(c.out[i] - want) <= 1e-6 * (1 + fabs(want)),
                  "quickgelu(%.9g) = %.9g, want %.9g", x, c.out[i], want);
    }
    float *dinp = randn(c.n, 1e3f); /* written, not accumulated */
    tbi_quickgelu_bwd(dinp, NULL, c.inp, c.r, c.n);
    for (size_t i = 0; i < c.n; i++) {
        double x = c.inp[i], s = 1 / (1 + exp(-1.702 * x));
        double want = c.r[i] * (s + 1.702 * x * s * (1 - s));
        CHECK_MSG(fabs(dinp[i] - want) <= 1e-5 * (1 + fabs(want)),
                  "quickgelu'(%.9g) * %.9g = %.9g, want %.9g", x, c.r[i], dinp[i], want);
    }
    /* A smaller step than GELU's: QuickGELU's third derivative is larger, and with h = 1e-2
     * the differences' own error, h^2 f'(3) / 6, came to 1.4e-5 where f' crosses 0. */
    fd_check("quickgelu d inp", c.inp, c.n, dinp, qg_loss, &c, 4e-3f, 2e-3);
    /* With out: the same gradient, and the forward's values. */
    float *dinp2 = randn(c.n, 1e3f), *out2 = randn(c.n, 1e3f);
    tbi_quickgelu_bwd(dinp2, out2, c.inp, c.r, c.n);
    qg_loss(&c);
    for (size_t i = 0; i < c.n; i++)
        CHECK_MSG(dinp2[i] == dinp[i] && out2[i] == c.out[i],
                  "quickgelu_bwd with out at %zu: %g %g, want %g %g", i, dinp2[i], out2[i], dinp[i],
                  c.out[i]);
    /* Both in place: dinp = dout, out = inp. */
    float *x = malloc(sizeof(float) * c.n), *inplace = malloc(sizeof(float) * c.n);
    memcpy(x, c.inp, sizeof(float) * c.n);
    memcpy(inplace, c.r, sizeof(float) * c.n);
    tbi_quickgelu_bwd(inplace, x, x, inplace, c.n);
    CHECK_MSG(!memcmp(inplace, dinp, sizeof(float) * c.n) && !memcmp(x, c.out, sizeof(float) * c.n),
              "quickgelu_bwd with dinp = dout and out = inp differs");
    free(c.inp), free(c.r), free(c.out), free(dinp), free(dinp2), free(out2), free(inplace);
    free(x);
}

/* ---- vector exp and erfc against libm in double ---- */
static void test_vmath(void)
{
    tbt_case = "vmath";
    double worst_e = 0, worst_c = 0;
    for (int i = 0; i <= 200000; i++) {
        float x = -87.0f + 175.0f * (float)i / 200000;
        double e = fabs(tbi_expf(x) - exp(x)) / exp(x);
        worst_e = e > worst_e ? e : worst_e;
        float z = -9.0f + 18.0f * (float)i / 200000;
        double c = fabs(tbi_erfcf(z) - erfc(z)) / erfc(z);
        worst_c = c > worst_c ? c : worst_c;
    }
    CHECK_MSG(worst_e < 3e-7, "tbi_expf relative error %.2e", worst_e);
    CHECK_MSG(worst_c < 2e-5, "tbi_erfcf relative error %.2e", worst_c);
    CHECK(tbi_expf(-INFINITY) == 0 && tbi_expf(-100) == 0 && isfinite(tbi_expf(1000)));
    printf("vmath: expf %.2e, erfcf %.2e relative\n", worst_e, worst_c);
}

/* ---- sgemm: the AVX-512 kernel, the portable one and the dispatcher against a double loop ---- */
/* One product's operands, C as it was (C0), and what it should come to: op(A) @ op(B) in
 * double and the sum of its terms' magnitudes (computed once, for every path run on it). */
struct gprod {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    float *A, *B, *C, *C0, *bias;
    double *dot, *mag;
};

static int max_i(int a, int b)
{
    return a > b ? a : b;
}

/* C back to C0 for a run with alpha and beta; NaN when beta == 0 (C must not be read). */
static void gprod_reset(struct gprod *g, float alpha, float beta)
{
    g->alpha = alpha, g->beta = beta;
    for (size_t i = 0; i < (size_t)g->M * g->ldc; i++)
        g->C[i] = beta == 0 ? NAN : g->C0[i];
}

/* Random operands, leading dimensions pad past the widths (at least 1, as BLAS asks), C reset
 * for alpha and beta. */
static void gprod_init(struct gprod *g, int ta, int tb, int M, int N, int K, float alpha,
                       float beta, int pad, int with_bias)
{
    *g = (struct gprod){.ta = ta, .tb = tb, .M = M, .N = N, .K = K};
    g->lda = max_i(1, (ta ? M : K) + pad);
    g->ldb = max_i(1, (tb ? K : N) + pad);
    g->ldc = max_i(1, N + pad);
    g->A = randn((size_t)(ta ? K : M) * g->lda, 1);
    g->B = randn((size_t)(tb ? N : K) * g->ldb, 1);
    g->C = randn((size_t)M * g->ldc, 1);
    g->C0 = malloc(sizeof(float) * ((size_t)M * g->ldc + 1));
    memcpy(g->C0, g->C, sizeof(float) * (size_t)M * g->ldc);
    gprod_reset(g, alpha, beta);
    g->bias = with_bias ? randn((size_t)N, 1) : NULL;
}

static void gprod_free(struct gprod *g)
{
    free(g->A), free(g->B), free(g->C), free(g->C0), free(g->bias), free(g->dot), free(g->mag);
}

/* The product by one path: 0 tbi_sgemm, 1 the AVX-512 kernel (returns its code), 2
 * tbi_sgemm_bias (alpha 1, beta 0), 3 the portable kernel. */
static int gprod_run(struct gprod *g, int path)
{
    if (path == 1)
        return tbi_sgemm_own(g->ta, g->tb, g->M, g->N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb,
                             g->beta, g->C, g->ldc);
    if (path == 2)
        tbi_sgemm_bias(g->ta, g->tb, g->M, g->N, g->K, g->A, g->lda, g->B, g->ldb, g->bias, g->C,
                       g->ldc);
    else if (path == 3)
        tbi_sgemm_portable(g->ta, g->tb, g->M, g->N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb,
                           g->beta, g->C, g->ldc);
    else
        tbi_sgemm(g->ta, g->tb, g->M, g->N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb, g->beta,
                  g->C, g->ldc);
    return 0;
}

/* The worst error of C against the double loop, relative to the magnitude of its terms;
 * infinite where the padding between rows was written. */
static double gprod_worst(struct gprod *g)
{
    if (!g->dot) {
        g->dot = calloc((size_t)g->M * g->N + 1, sizeof(double));
        g->mag = calloc((size_t)g->M * g->N + 1, sizeof(double));
        for (int i = 0; i < g->M; i++)
            for (int j = 0; j < g->N; j++) {
                double s = 0, mag = 0;
                for (int k = 0; k < g->K; k++) {
                    double a = g->ta ? g->A[(size_t)k * g->lda + i] : g->A[(size_t)i * g->lda + k];
                    double b = g->tb ? g->B[(size_t)j * g->ldb + k] : g->B[(size_t)k * g->ldb + j];
                    s += a * b;
                    mag += fabs(a * b);
                }
                g->dot[(size_t)i * g->N + j] = s;
                g->mag[(size_t)i * g->N + j] = mag;
            }
    }
    double worst = 0;
    for (int i = 0; i < g->M; i++)
        for (int j = 0; j < g->ldc; j++) {
            size_t at = (size_t)i * g->ldc + j;
            if (j >= g->N) {
                if (!(g->beta == 0 ? isnan(g->C[at]) : g->C[at] == g->C0[at]))
                    worst = INFINITY;
                continue;
            }
            double s = g->dot[(size_t)i * g->N + j], mag = g->mag[(size_t)i * g->N + j];
            double bj = g->bias ? g->bias[j] : 0;
            double want = g->alpha * s + (g->beta == 0 ? 0 : g->beta * g->C0[at]) + bj;
            double err = fabs(g->C[at] - want) /
                         (fabs(g->alpha) * mag + fabs(g->beta * g->C0[at]) + fabs(bj) + 1e-30);
            if (!(err <= worst))
                worst = isnan(err) ? INFINITY : err;
        }
    return worst;
}

static void test_gemm(void)
{
    tbt_case = "gemm";
    /* Shapes that end mid-tile in every dimension, cross the K, M and N blocks of both kernels
     * (AVX-512: KC 256, MC 96, NC 2048, tiles 12 x 32; portable: 256 values of k, tiles 4 x
     * 24), and the degenerate ones (K = 0: C = beta * C; M or N = 0: nothing). */
    static const int shapes[][3] = {{1, 1, 1},      {12, 32, 256},  {13, 33, 257},  {7, 5, 3},
                                    {100, 70, 300}, {97, 2100, 40}, {200, 31, 520}, {5, 9, 0},
                                    {0, 5, 3},      {4, 0, 3},      {6, 25, 600},   {0, 0, 0}};
    static const char *const names[] = {"sgemm", "AVX-512 sgemm", "sgemm + bias", "portable sgemm"};
    int own = tbi_cpu_avx512();
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int t = 0; t < 4; t++) {
            int M = shapes[i][0], N = shapes[i][1], K = shapes[i][2], ta = t & 1, tb = t >> 1;
            float alpha = i % 2 ? 0.5f : 1.0f, beta = i % 3 == 0 ? 0.0f : i % 3 == 1 ? 1.0f : -0.7f;
            struct gprod g;
            gprod_init(&g, ta, tb, M, N, K, alpha, beta, (int)(i % 3), 1);
            float *bias = g.bias;
            /* Every path on the same operands. With a bias (path 2: alpha 1, beta 0): added
             * once whatever the number of K blocks, at the right columns of every N block. */
            for (int path = 0; path < 4; path++) {
                if (path == 1 && !own)
                    continue;
                g.bias = path == 2 ? bias : NULL;
                gprod_reset(&g, path == 2 ? 1.0f : alpha, path == 2 ? 0.0f : beta);
                double e = gprod_run(&g, path) == 0 ? gprod_worst(&g) : INFINITY;
                CHECK_MSG(e < 1e-5, "%s %dx%dx%d ta %d tb %d alpha %g beta %g: error %.2e",
                          names[path], M, N, K, ta, tb, g.alpha, g.beta, e);
            }
            g.bias = bias;
            gprod_free(&g);
        }
    if (!own)
        CHECK(tbi_sgemm_own(0, 0, 1, 1, 1, 1, NULL, 1, NULL, 1, 0, NULL, 1) == -1);
    /* The weight gradient with the bias gradient from the same pass: the product as
     * tbi_sgemm's, the sums tbi_colsum's to the bit, over several K blocks, MC blocks ending
     * mid-sliver and two N panels (the sums taken once); K = 0: zero sums. */
    static const int tn[][3] = {{97, 2100, 300}, {1, 5, 7}, {200, 40, 520}, {13, 3, 0}};
    for (size_t i = 0; i < sizeof(tn) / sizeof(tn[0]); i++) {
        int M = tn[i][0], N = tn[i][1], K = tn[i][2];
        float *A = randn((size_t)K * M + 1, 1), *B = randn((size_t)K * N + 1, 1);
        float *C = randn((size_t)M * N, 1), *C2 = zeros((size_t)M * N);
        float *s = randn((size_t)M, 1), *s2 = zeros((size_t)M);
        tbi_sgemm_tn_colsum(M, N, K, A, M, B, N, C, N, s);
        tbi_sgemm(1, 0, M, N, K, 1.0f, A, M, B, N, 0.0f, C2, N);
        tbi_colsum(s2, A, K, M);
        CHECK_MSG(!memcmp(C, C2, sizeof(float) * (size_t)M * N) &&
                      !memcmp(s, s2, sizeof(float) * (size_t)M),
                  "sgemm_tn_colsum %dx%dx%d differs from sgemm and colsum", M, N, K);
        free(A), free(B), free(C), free(C2), free(s), free(s2);
    }
}

/* Products called from inside OpenMP regions (the portable attention's way, and matmul's
 * pair): right on every thread, whatever TUBELET_GEMM says (OpenBLAS is never called there;
 * Debian's OpenMP build of it hangs where its own team comes out smaller than it asked, as in
 * a region of one, and the ctest variant with TUBELET_GEMM=openblas would time out). In a
 * region of three threads, each taking products in turn, and in a region of one (inactive,
 * but a region still), whose product takes our own kernel too: the same bits as outside a
 * region where that is the AVX-512 kernel. */
static void test_gemm_in_region(void)
{
    tbt_case = "gemm in a region";
    enum { NP = 12 };
    struct gprod g[NP];
    float *colsum[NP] = {0}, *want_colsum[NP] = {0};
    for (int p = 0; p < NP; p++) {
        int ta = p & 1, tb = p >> 1 & 1, path = p % 3 == 2 ? 2 : 0;
        int M = 37 + 11 * p, N = 29 + 7 * p, K = 41 + 13 * p;
        if (p >= NP - 2) /* weight gradients with their column sums: ta, no tb */
            ta = 1, tb = 0, path = 4;
        /* Rows padded, but for the weight gradients: their reference, tbi_colsum, takes no
         * leading dimension. */
        int pad = path == 4 ? 0 : p % 2;
        gprod_init(&g[p], ta, tb, M, N, K, path ? 1.0f : 0.5f, path ? 0.0f : -0.7f, pad, path == 2);
        if (path == 4) {
            colsum[p] = randn((size_t)M, 1e3f);
            want_colsum[p] = zeros((size_t)M);
            tbi_colsum(want_colsum[p], g[p].A, K, M);
        }
    }
#pragma omp parallel for num_threads(3) schedule(dynamic)
    for (int p = 0; p < NP; p++) {
        if (colsum[p])
            tbi_sgemm_tn_colsum(g[p].M, g[p].N, g[p].K, g[p].A, g[p].lda, g[p].B, g[p].ldb, g[p].C,
                                g[p].ldc, colsum[p]);
        else
            gprod_run(&g[p], g[p].bias ? 2 : 0);
    }
    for (int p = 0; p < NP; p++) {
        double e = gprod_worst(&g[p]);
        CHECK_MSG(e < 1e-5, "product %d (%dx%dx%d ta %d tb %d%s) in a region of 3: error %.2e",
                  p, g[p].M, g[p].N, g[p].K, g[p].ta, g[p].tb,
                  colsum[p] ? ", colsum" : g[p].bias ? ", bias" : "", e);
        if (colsum[p])
            CHECK_MSG(!memcmp(colsum[p], want_colsum[p], sizeof(float) * (size_t)g[p].M),
                      "product %d: column sums in a region differ from tbi_colsum's", p);
        gprod_free(&g[p]);
        free(colsum[p]), free(want_colsum[p]);
    }

    struct gprod one;
    gprod_init(&one, 0, 1, 150, 300, 200, 1.0f, 0.0f, 1, 0);
    size_t nc = (size_t)one.M * one.ldc;
    float *outside = malloc(sizeof(float) * nc);
    memcpy(outside, one.C, sizeof(float) * nc);
#pragma omp parallel num_threads(1)
    gprod_run(&one, 0);
    tbi_sgemm(0, 1, one.M, one.N, one.K, 1.0f, one.A, one.lda, one.B, one.ldb, 0.0f, outside,
              one.ldc);
    double e = gprod_worst(&one);
    CHECK_MSG(e < 1e-5, "a product in a region of one: relative error %.2e", e);
    if (tbi_sgemm_uses_own())
        CHECK_MSG(!memcmp(one.C, outside, sizeof(float) * nc),
                  "the AVX-512 kernel in a region of one differs from it outside");
    free(outside);
    gprod_free(&one);
}

/* ---- cross-entropy ---- */
struct xe {
    float *logits, *probs;
    int64_t *targets;
    int B, K;
    float eps;
};
static double xe_loss(void *p)
{
    struct xe *c = p;
    return tbi_xent_fwd(c->probs, c->logits, c->targets, c->B, c->K, c->eps);
}

/* The same loss in double: the reference, and what the finite differences differentiate (of
 * the float loss, rounding noise over 2h came within reach of the tolerance on some draws). */
static double xe_loss_ref(void *p)
{
    struct xe *c = p;
    double loss = 0;
    for (int b = 0; b < c->B; b++) {
        const float *z = c->logits + (size_t)b * c->K;
        double mx = -1e30, sum = 0;
        for (int k = 0; k < c->K; k++)
            mx = fmax(mx, z[k]);
        for (int k = 0; k < c->K; k++)
            sum += exp(z[k] - mx);
        double lse = mx + log(sum), smooth = 0;
        for (int k = 0; k < c->K; k++)
            smooth += (lse - z[k]) / c->K;
        loss += ((1.0 - c->eps) * (lse - z[c->targets[b]]) + c->eps * smooth) / c->B;
    }
    return loss;
}

static void test_xent(void)
{
    tbt_case = "cross-entropy";
    struct xe c = {.B = 6, .K = 11, .eps = 0.1f};
    c.logits = randn((size_t)c.B * c.K, 3);
    c.probs = zeros((size_t)c.B * c.K);
    c.targets = malloc(sizeof(int64_t) * c.B);
    for (int b = 0; b < c.B; b++)
        c.targets[b] = (int64_t)tb_rng_below(&rng, (uint64_t)c.K);
    double loss = xe_loss(&c), want = xe_loss_ref(&c);
    CHECK_MSG(fabs(loss - want) < 1e-5, "loss %g, want %g", loss, want);
    float *d = zeros((size_t)c.B * c.K);
    tbi_xent_bwd(d, c.probs, c.targets, c.B, c.K, c.eps);
    fd_check("xent d logits", c.logits, (size_t)c.B * c.K, d, xe_loss_ref, &c, 1e-2f, 2e-3);
    free(c.logits), free(c.probs), free(c.targets), free(d);
}

/* ---- attention ---- */
/* Naive attention in double: out (B, N, D), lse (B, NH, N) and, given dout, dqkv; causal:
 * query i over keys j <= i only (the softmax over those; the others add nothing). stored: NULL,
 * or the output the backward is given (B, N, D; a fused kernel's rowsum(dO O) reads it). */
static void naive_attention(double *out, double *lse, double *dqkv, const float *qkv,
                            const float *dout, const float *stored, int B, int N, int NH, int HS,
                            int causal)
{
    int D = NH * HS;
    double scale = 1.0 / sqrt((double)HS);
    double *p = malloc(sizeof(double) * (size_t)N * N), *dp = malloc(sizeof(double) * (size_t)N);
#define Q(b, i, s, h, d) qkv[((((size_t)(b) * N + (i)) * 3 + (s)) * NH + (h)) * HS + (d)]
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < N; i++) {
                double mx = -1e300, sum = 0;
                int nj = causal ? i + 1 : N;
                for (int j = 0; j < nj; j++) {
                    double s = 0;
                    for (int d = 0; d < HS; d++)
                        s += (double)Q(b, i, 0, h, d) * Q(b, j, 1, h, d);
                    p[(size_t)i * N + j] = s * scale;
                    mx = fmax(mx, s * scale);
                }
                for (int j = 0; j < nj; j++)
                    sum += exp(p[(size_t)i * N + j] - mx);
                lse[((size_t)b * NH + h) * N + i] = mx + log(sum);
                for (int j = 0; j < N; j++)
                    p[(size_t)i * N + j] = j < nj ? exp(p[(size_t)i * N + j] - mx) / sum : 0;
                for (int d = 0; d < HS; d++) {
                    double s = 0;
                    for (int j = 0; j < N; j++)
                        s += p[(size_t)i * N + j] * Q(b, j, 2, h, d);
                    out[((size_t)b * N + i) * D + h * HS + d] = s;
                }
            }
            /* Backward: dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)), dQ, dK. */
            for (int i = 0; i < N; i++) {
                const float *dOi = dout + ((size_t)b * N + i) * D + h * HS;
                double rs = 0;
                for (int j = 0; j < N; j++) {
                    double s = 0;
                    for (int d = 0; d < HS; d++)
                        s += (double)dOi[d] * Q(b, j, 2, h, d);
                    dp[j] = s;
                    rs += p[(size_t)i * N + j] * s;
                }
                if (stored)
                    rs = dot(dOi, stored + ((size_t)b * N + i) * D + h * HS, (size_t)HS);
                for (int j = 0; j < N; j++) {
                    double pij = p[(size_t)i * N + j], ds = pij * (dp[j] - rs) * scale;
                    for (int d = 0; d < HS; d++) {
                        size_t qi = ((((size_t)b * N + i) * 3 + 0) * NH + h) * HS + d;
                        size_t kj = ((((size_t)b * N + j) * 3 + 1) * NH + h) * HS + d;
                        size_t vj = ((((size_t)b * N + j) * 3 + 2) * NH + h) * HS + d;
                        dqkv[qi] += ds * Q(b, j, 1, h, d);
                        dqkv[kj] += ds * Q(b, i, 0, h, d);
                        dqkv[vj] += pij * dOi[d];
                    }
                }
            }
        }
#undef Q
    free(p);
    free(dp);
}

/* One attention path: 0 the dispatching entry points, 1 the portable tiles, 2 AVX-512 (0 when
 * tbi_cpu_avx512() is 0: nothing to test). */
static int run_attention(int path, float *out, float *lse, float *dqkv, const float *dout,
                         const float *qkv, int B, int N, int NH, int HS, int causal)
{
    if (path == 0) {
        tbi_attention_fwd(out, lse, qkv, B, N, NH, HS, causal);
        tbi_attention_bwd(dqkv, dout, qkv, out, lse, B, N, NH, HS, causal);
    } else if (path == 1) {
        tbi_attention_fwd_tiles(out, lse, qkv, B, N, NH, HS, causal);
        tbi_attention_bwd_tiles(dqkv, dout, qkv, out, lse, B, N, NH, HS, causal);
    } else if (tbi_attention_fwd_avx512(out, lse, qkv, B, N, NH, HS, causal) != 0 ||
               tbi_attention_bwd_avx512(dqkv, dout, qkv, out, lse, B, N, NH, HS, causal) != 0) {
        return 0;
    }
    return 1;
}

static void test_attention(void)
{
    /* Odd sizes, head sizes 32 to 128 (40: not a whole number of vectors), more than one
     * query tile (BR = 256 in the tiles path) and more than one key block (KB = 256 in the
     * AVX-512 path). Causal (the third number): CLIP's text tower's 77 tokens, and lengths
     * whose diagonal crosses the tiles path's query tiles (BR = 256) and key tiles (BC = 128)
     * and the AVX-512 path's strips (QS = 192) and key blocks (KB = 256) mid-tile. */
    const int sizes[][3] = {{1, 32, 0},  {37, 32, 0},  {101, 64, 0}, {130, 96, 0}, {65, 64, 0},
                            {33, 96, 0}, {300, 64, 0}, {600, 48, 0}, {45, 40, 0},  {70, 128, 0},
                            {1, 32, 1},  {77, 64, 1},  {37, 32, 1},  {301, 64, 1}, {529, 32, 1}};
    static const char *const paths[] = {"", " tiles", " avx512"};
    for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++) {
        /* One clip for the causal cases (the batch offsets are the same code either way). */
        int causal = sizes[c][2], B = causal ? 1 : 2, NH = 2, N = sizes[c][0], HS = sizes[c][1];
        int D = NH * HS;
        size_t nq = (size_t)B * N * 3 * D, no = (size_t)B * N * D;
        float *qkv = randn(nq, 1), *dout = randn(no, 1);
        double *rout = calloc(no, sizeof(double)), *rlse = calloc((size_t)B * NH * N, 8);
        double *rd = calloc(nq, sizeof(double));
        naive_attention(rout, rlse, rd, qkv, dout, NULL, B, N, NH, HS, causal);
        for (int path = 0; path < 3; path++) {
            char name[64];
            snprintf(name, sizeof(name), "attention%s%s N=%d HS=%d", causal ? " causal" : "",
                     paths[path], N, HS);
            tbt_case = name;
            /* dqkv starts as garbage: the backward writes it. */
            float *out = zeros(no), *lse = zeros((size_t)B * NH * N), *dqkv = randn(nq, 9);
            if (run_attention(path, out, lse, dqkv, dout, qkv, B, N, NH, HS, causal)) {
                double eo = 0, el = 0, ed = 0;
                for (size_t i = 0; i < no; i++)
                    eo = fmax(eo, fabs(out[i] - rout[i]));
                for (size_t i = 0; i < (size_t)B * NH * N; i++)
                    el = fmax(el, fabs(lse[i] - rlse[i]));
                for (size_t i = 0; i < nq; i++)
                    ed = fmax(ed, fabs(dqkv[i] - rd[i]) / (1 + fabs(rd[i])));
                CHECK_MSG(eo < 2e-5 && el < 2e-5 && ed < 1e-4,
                          "%s: out %.2e, lse %.2e, grads %.2e", name, eo, el, ed);
                fprintf(stderr, "%-37s out %.1e lse %.1e dqkv %.1e\n", name, eo, el, ed);
            }
            free(out), free(lse), free(dqkv);
        }
        free(qkv), free(dout), free(rout), free(rlse), free(rd);
    }
}

static void test_patchify_adamw(void)
{
    tbt_case = "patchify";
    int B = 2, C = 3, T = 4, H = 6, W = 8, TU = 2, P = 2;
    int Tp = T / TU, Hp = H / P, Wp = W / P, N = Tp * Hp * Wp, row = C * TU * P * P;
    float *video = randn((size_t)B * C * T * H * W, 1), *cols = zeros((size_t)B * N * row);
    tbi_patchify(cols, video, B, C, T, H, W, TU, P);
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tp; t++)
            for (int y = 0; y < Hp; y++)
                for (int x = 0; x < Wp; x++) {
                    int n = (t * Hp + y) * Wp + x, col = 0;
                    for (int c = 0; c < C; c++)
                        for (int dt = 0; dt < TU; dt++)
                            for (int dy = 0; dy < P; dy++)
                                for (int dx = 0; dx < P; dx++, col++)
                                    bad += cols[((size_t)b * N + n) * row + col] !=
                                           video[((((size_t)b * C + c) * T + t * TU + dt) * H +
                                                  y * P + dy) * W + x * P + dx];
                }
    CHECK_EQ(bad, 0);
    free(video), free(cols);

    tbt_case = "adamw";
    size_t n = 50;
    float *p = randn(n, 1), *g = randn(n, 1), *m = zeros(n), *v = zeros(n);
    double *rp = malloc(8 * n), *rm = calloc(n, 8), *rv = calloc(n, 8);
    for (size_t i = 0; i < n; i++)
        rp[i] = p[i];
    double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.05;
    /* The second step's gradient is clipped (scaled by 0.37): the same bits as an update from
     * a gradient scaled in place first, as clip_grad_norm_ + step do. */
    float *p2 = malloc(4 * n), *m2 = zeros(n), *v2 = zeros(n), *gs = malloc(4 * n);
    memcpy(p2, p, 4 * n);
    for (int step = 1; step <= 3; step++) {
        float s = step == 2 ? 0.37f : 1.0f;
        tbi_adamw(p, g, s, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd,
                  step);
        for (size_t i = 0; i < n; i++)
            gs[i] = g[i] * s;
        tbi_adamw(p2, gs, 1.0f, m2, v2, n, (float)lr, (float)b1, (float)b2, (float)eps,
                  (float)wd, step);
        for (size_t i = 0; i < n; i++) {
            rp[i] *= 1 - lr * wd;
            rm[i] = b1 * rm[i] + (1 - b1) * s * g[i];
            rv[i] = b2 * rv[i] + (1 - b2) * s * g[i] * s * g[i];
            double mh = rm[i] / (1 - pow(b1, step)), vh = rv[i] / (1 - pow(b2, step));
            rp[i] -= lr * mh / (sqrt(vh) + eps);
        }
    }
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(p[i] - rp[i]));
    CHECK_MSG(worst < 1e-5, "adamw off by %g after 3 steps", worst);
    CHECK_MSG(!memcmp(p, p2, 4 * n) && !memcmp(m, m2, 4 * n) && !memcmp(v, v2, 4 * n),
              "adamw with a gradient scale differs from adamw on the scaled gradient");
    free(p2), free(m2), free(v2), free(gs);
    CHECK_MSG(fabs(tbi_sum_squares(g, n) - dot(g, g, n)) < 1e-9, "sum of squares");
    free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv);
}

/* The step ops on the CPU backend against the host arithmetic the loop used before them (the
 * same bits): the squares of three spans, a K = 3 step's loss, its norm and clipping factor;
 * the flags: a NaN loss, an infinite norm, a NaN fused span, each recorded with its step and
 * kept past a finite check; then the checked AdamW, Lion and SGD equal the plain op at the
 * factor, and leave weights and moments untouched (to the bit) once a flag is set. */
static void test_step_ops(void)
{
    tbt_case = "step ops: the loop's arithmetic";
    tbi_backend *be = NULL;
    CHECK_EQ(tbi_backend_open(&be, "cpu"), 0);
    if (!be)
        return;
    const size_t n = 3000;
    float *g = randn(n, 2), *micro = NULL, losses[3] = {2.31f, 2.2999f, 1.0e-3f};
    struct tbi_step_stats *st = NULL, h;
    CHECK_EQ(be->ops->alloc(be, sizeof(*st), (void **)&st), 0);
    CHECK_EQ(be->ops->alloc(be, sizeof(float), (void **)&micro), 0);
    static const double clips[] = {0, 1.0, 50.0};
    for (int c = 0; c < 3; c++) {
        CHECK_EQ(be->ops->zero(be, st, sizeof(*st)), 0);
        double host_ss = 0;
        float host_loss = 0;
        for (int k = 0; k < 3; k++) {
            CHECK_EQ(be->ops->sum_squares_acc(be, &st->sumsq, g + k * 1000, 1000 - 7 * k), 0);
            host_ss += tbi_sum_squares(g + k * 1000, 1000 - 7 * k);
            CHECK_EQ(be->ops->to_device(be, micro, &losses[k], sizeof(float)), 0);
            CHECK_EQ(be->ops->step_loss(be, st, micro, 3), 0);
            host_loss += losses[k] / (float)3;
        }
        CHECK_EQ(be->ops->step_check(be, st, -1, 0, clips[c], 3, 12, 2, 9), 0);
        CHECK_EQ(be->ops->to_host(be, &h, st, sizeof(h)), 0);
        double norm = sqrt(host_ss) / 3;
        float scale = tb_clip_factor(norm, clips[c]) / (float)3;
        CHECK_MSG(!memcmp(&h.sumsq, &host_ss, 8) && !memcmp(&h.norm, &norm, 8) &&
                  !memcmp(&h.loss, &host_loss, 4) && !memcmp(&h.scale, &scale, 4) && !h.bad,
                  "clip %g: sumsq %.17g/%.17g norm %.17g/%.17g loss %.9g/%.9g scale %.9g/%.9g "
                  "bad %d", clips[c], h.sumsq, host_ss, h.norm, norm, h.loss, host_loss,
                  h.scale, scale, h.bad);
    }

    tbt_case = "step ops: the non-finite flags";
    const struct {
        float loss;
        double sumsq, span_sumsq;
        int span;
        enum tbi_bad want;
    } bad[] = {{NAN, 4, 0, -1, TBI_BAD_LOSS}, {INFINITY, 4, 0, -1, TBI_BAD_LOSS},
               {1, INFINITY, 0, -1, TBI_BAD_NORM}, {1, NAN, 0, -1, TBI_BAD_NORM},
               {1, 4, NAN, 5, TBI_BAD_SPAN}, {1, 4, 1, 5, TBI_BAD_NONE}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        h = (struct tbi_step_stats){.loss = bad[i].loss, .sumsq = bad[i].sumsq,
                                    .span_sumsq = bad[i].span_sumsq};
        CHECK_EQ(be->ops->to_device(be, st, &h, sizeof(h)), 0);
        CHECK_EQ(be->ops->step_check(be, st, bad[i].span, bad[i].span >= 0, 1.0, 1, 40 + i, 3,
                                     7), 0);
        /* a later finite step leaves the first record as it was */
        h.loss = 0.5f, h.sumsq = 1;
        CHECK_EQ(be->ops->to_device(be, st, &h, offsetof(struct tbi_step_stats, span_sumsq)), 0);
        CHECK_EQ(be->ops->step_check(be, st, -1, 0, 1.0, 1, 99, 9, 9), 0);
        CHECK_EQ(be->ops->to_host(be, &h, st, sizeof(h)), 0);
        int ok = (int)h.bad == (int)bad[i].want;
        if (bad[i].want != TBI_BAD_NONE)
            ok &= h.bad_step == 40 + (int64_t)i && h.bad_epoch == 3 && h.bad_batch == 7 &&
                  h.bad_span == bad[i].span &&
                  (bad[i].want != TBI_BAD_LOSS || !memcmp(&h.bad_loss, &bad[i].loss, 4));
        CHECK_MSG(ok, "case %zu: flag %d (want %d), step %lld, epoch %lld, batch %lld, span %d",
                  i, h.bad, bad[i].want, (long long)h.bad_step, (long long)h.bad_epoch,
                  (long long)h.bad_batch, h.bad_span);
    }

    tbt_case = "step ops: checked updates";
    float *p0 = randn(n, 1), *m0 = randn(n, 0.1f), *v0 = randn(n, 0.1f);
    for (size_t i = 0; i < n; i++)
        v0[i] *= v0[i];
    float *p[2], *m[2], *v[2];
    for (int j = 0; j < 2; j++)
        p[j] = malloc(4 * n), m[j] = malloc(4 * n), v[j] = malloc(4 * n);
    for (int kind = 0; kind < 3; kind++)
        for (int flagged = 0; flagged < 2; flagged++) {
            h = (struct tbi_step_stats){.scale = 0.37f, .bad = flagged ? TBI_BAD_NORM : 0};
            CHECK_EQ(be->ops->to_device(be, st, &h, sizeof(h)), 0);
            for (int j = 0; j < 2; j++) {
                memcpy(p[j], p0, 4 * n), memcpy(m[j], m0, 4 * n), memcpy(v[j], v0, 4 * n);
            }
            if (kind == 0) {
                CHECK_EQ(be->ops->adamw_checked(be, p[0], g, st, m[0], v[0], n, 1e-3f, 0.9f,
                                                0.999f, 1e-8f, 0.05f, 4), 0);
                CHECK_EQ(be->ops->adamw(be, p[1], g, 0.37f, m[1], v[1], n, 1e-3f, 0.9f, 0.999f,
                                        1e-8f, 0.05f, 4), 0);
            } else if (kind == 1) {
                CHECK_EQ(be->ops->lion_checked(be, p[0], g, st, m[0], n, 1e-3f, 0.9f, 0.99f,
                                               0.05f), 0);
                CHECK_EQ(be->ops->lion(be, p[1], g, 0.37f, m[1], n, 1e-3f, 0.9f, 0.99f, 0.05f),
                         0);
            } else {
                CHECK_EQ(be->ops->sgd_checked(be, p[0], g, st, m[0], n, 1e-2f, 0.9f, 4e-5f), 0);
                CHECK_EQ(be->ops->sgd(be, p[1], g, 0.37f, m[1], n, 1e-2f, 0.9f, 4e-5f), 0);
            }
            /* flagged: against the untouched copy */
            const float *wp = flagged ? p0 : p[1], *wm = flagged ? m0 : m[1];
            const float *wv = flagged ? v0 : v[1];
            CHECK_MSG(!memcmp(p[0], wp, 4 * n) && !memcmp(m[0], wm, 4 * n) &&
                      !memcmp(v[0], wv, 4 * n), "%s, %s: weights or moments differ",
                      kind == 0 ? "adamw" : kind == 1 ? "lion" : "sgd",
                      flagged ? "flagged (nothing may be written)" : "against the plain op");
        }
    for (int j = 0; j < 2; j++)
        free(p[j]), free(m[j]), free(v[j]);
    free(p0), free(m0), free(v0), free(g);
    be->ops->free(be, st);
    be->ops->free(be, micro);
    tbi_backend_close(&be);
}

/* Resident memory of this process, in kB (/proc/self/status), or -1. */
static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

/* AdamW and Lion give a 4 KB run of moments whose gradient and moments are all zero only its
 * weight decay: such runs get their decayed weights to the bit, their moments unwritten; every other
 * run gets the update it gets alone - a zero gradient on moments a row kept from earlier
 * steps still moves it - and zeroed moments that no gradient reaches are never committed. */
static void test_optim_zero_runs(void)
{
    tbt_case = "optimizer zero runs";
    enum { RUN = 1024, RUNS = 8 };
    size_t n = (size_t)RUN * RUNS;
    for (int lion = 0; lion < 2; lion++) {
        /* page-aligned moments, so each RUN floats are one page */
        float *m = tbi_alloc_zero_lazy(sizeof(float) * (n + RUN)), *v = NULL;
        float *v_all = tbi_alloc_zero_lazy(sizeof(float) * (n + RUN));
        float *ma = m + (RUN - ((uintptr_t)m & 4095) / sizeof(float)) % RUN;
        float *va = v_all + (RUN - ((uintptr_t)v_all & 4095) / sizeof(float)) % RUN;
        float *p = randn(n, 1), *g = zeros(n), *p0 = malloc(sizeof(float) * n);
        /* runs 1 and 5: gradients; run 3: no gradient but moments from before; others: zero */
        for (size_t i = 0; i < RUN; i++) {
            g[RUN + i] = (float)tb_rng_normal(&rng);
            g[5 * RUN + i] = (float)tb_rng_normal(&rng);
            ma[3 * RUN + i] = 0.01f * (float)tb_rng_normal(&rng);
            va[3 * RUN + i] = 1e-4f;
        }
        v = lion ? NULL : va;
        memcpy(p0, p, sizeof(float) * n);
        /* each changed run by itself, from copies */
        float *rp = malloc(sizeof(float) * n), *rm = malloc(sizeof(float) * n);
        float *rv = malloc(sizeof(float) * n);
        memcpy(rp, p, sizeof(float) * n), memcpy(rm, ma, sizeof(float) * n);
        memcpy(rv, va, sizeof(float) * n);
        for (int r = 0; r < RUNS; r++) {
            size_t o = (size_t)r * RUN;
            if (r % 2 == 0) /* zero runs: decayed only */
                for (size_t i = 0; i < RUN; i++)
                    rp[o + i] *= 1.0f - 1e-3f * 0.05f;
            else if (lion)
                tbi_lion(rp + o, g + o, 0.5f, rm + o, RUN, 1e-3f, 0.9f, 0.99f, 0.05f);
            else
                tbi_adamw(rp + o, g + o, 0.5f, rm + o, rv + o, RUN, 1e-3f, 0.9f, 0.999f, 1e-8f,
                          0.05f, 2);
        }
        if (lion)
            tbi_lion(p, g, 0.5f, ma, n, 1e-3f, 0.9f, 0.99f, 0.05f);
        else
            tbi_adamw(p, g, 0.5f, ma, v, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.05f, 2);
        CHECK_MSG(!memcmp(p, rp, sizeof(float) * n) && !memcmp(ma, rm, sizeof(float) * n) &&
                      (lion || !memcmp(va, rv, sizeof(float) * n)),
                  "%s over zero and non-zero runs differs from each run alone",
                  lion ? "lion" : "adamw");
        int moved = 0, kept = 1;
        float decay = 1.0f - 1e-3f * 0.05f;
        for (size_t i = 0; i < RUN; i++) {
            moved += p[3 * RUN + i] != p0[3 * RUN + i] * decay;
            kept &= p[2 * RUN + i] == p0[2 * RUN + i] * decay && ma[2 * RUN + i] == 0;
        }
        CHECK_MSG(moved > RUN / 2, "%s: a zero gradient on earlier moments moved %d of %d",
                  lion ? "lion" : "adamw", moved, RUN);
        CHECK_MSG(kept, "%s did more than decay a run of zero gradient and moments",
                  lion ? "lion" : "adamw");
        free(m), free(v_all), free(p), free(g), free(p0), free(rp), free(rm), free(rv);
    }

    /* 64 MB of moments for a table of which one row in 4096 has a gradient */
    size_t big = (size_t)16 << 20, row = 512;
    float *p = zeros(big), *g = zeros(big);
    memset(p, 0x3c, sizeof(float) * big); /* resident, as weights are */
    for (size_t r = 0; r < big / row; r += 4096)
        g[r * row] = 1.0f;
    float *m = tbi_alloc_zero_lazy(sizeof(float) * big), *v = tbi_alloc_zero_lazy(sizeof(float) * big);
    long before = rss_kb();
    tbi_adamw(p, g, 1.0f, m, v, big, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
    long grew = rss_kb() - before;
    CHECK_MSG(before > 0 && grew < 8 * 1024,
              "adamw on a gradient of 8 rows committed %ld kB of its 131072 kB of moments", grew);
    CHECK_MSG(m[0] != 0 && v[0] != 0 && m[1] == 0, "the rows with a gradient were updated");
    /* a resume: the moments from a host copy (a checkpoint's) into fresh zeroed memory */
    float *m2 = tbi_alloc_zero_lazy(sizeof(float) * big);
    before = rss_kb();
    tbi_cpu_to_device(NULL, m2, m, sizeof(float) * big);
    grew = rss_kb() - before;
    CHECK_MSG(grew < 8 * 1024, "loading moments of 8 rows committed %ld of 65536 kB", grew);
    CHECK_MSG(!memcmp(m2, m, sizeof(float) * big), "the loaded moments differ");
    memset(g, 0x7f, sizeof(float) * 2048); /* over zeros, data is written */
    tbi_cpu_to_device(NULL, m2, g, sizeof(float) * big);
    CHECK_MSG(!memcmp(m2, g, sizeof(float) * big), "a copy over zeroed memory differs");
    free(p), free(g), free(m), free(v), free(m2);
}

/* A bf16 pattern's value (the upper 16 bits of a float, the rest zero) in double, exponent
 * 255 read as 2^128 (the value an overflow rounds towards). */
static double bf16_value(uint32_t bits)
{
    int e = (int)((bits >> 23) & 0xff);
    double mant = (double)(bits & 0x7fffff), v = e ? ldexp(1 + mant / 8388608.0, e - 127)
                                                   : ldexp(mant, -149);
    return bits >> 31 ? -v : v;
}

/* The reference rounding, from its definition: the two bf16 neighbours of x (its bits cut,
 * and one step further from zero), the nearer of them, on a tie the one whose last kept bit
 * is 0. Infinities stay, NaN stays NaN. */
static uint32_t bf16_reference(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof(f));
    if (isnan(f) || isinf(f))
        return x;
    uint32_t lo = x & 0xffff0000u, hi = lo + 0x10000u;
    double dlo = fabs((double)f - bf16_value(lo)), dhi = fabs(bf16_value(hi) - (double)f);
    return dlo < dhi ? lo : dhi < dlo ? hi : (lo & 0x10000u) ? hi : lo;
}

/* tbi_round_bf16 to the bit: every low half (ties, just below and above them) under chosen
 * upper halves (zeros, the smallest and largest subnormals, the smallest normal, 1, the
 * largest finite, infinities, NaNs, both signs) and random ones, and random patterns. */
static void test_round_bf16(void)
{
    tbt_case = "bf16 rounding";
    static const uint32_t chosen[] = {0x0000, 0x0001, 0x0002, 0x007f, 0x0080, 0x3f80, 0x3f81,
                                      0x7f7e, 0x7f7f, 0x7f80, 0x7fc0, 0x7f81, 0x7fff};
    enum { N_CHOSEN = sizeof(chosen) / sizeof(chosen[0]), N_RANDOM = 64, LOW = 65536 };
    uint32_t *bits = malloc(sizeof(uint32_t) * LOW);
    float *x = malloc(sizeof(float) * LOW);
    long bad = 0, nan_in = 0, ties = 0;
    for (int h = 0; h < 2 * (N_CHOSEN + N_RANDOM) + 1; h++) {
        uint32_t high;
        if (h < 2 * N_CHOSEN)
            high = chosen[h / 2] | (h % 2 ? 0x8000u : 0);
        else
            high = (uint32_t)tb_rng_below(&rng, 65536);
        /* the last round: random whole patterns, of an odd count */
        size_t n = h == 2 * (N_CHOSEN + N_RANDOM) ? LOW - 3 : LOW;
        for (size_t i = 0; i < n; i++) {
            bits[i] = n == LOW ? high << 16 | (uint32_t)i : (uint32_t)tb_rng_below(&rng, 1ull << 32);
            memcpy(&x[i], &bits[i], sizeof(float));
        }
        tbi_round_bf16(x, n);
        for (size_t i = 0; i < n; i++) {
            uint32_t got, want = bf16_reference(bits[i]);
            memcpy(&got, &x[i], sizeof(got));
            float in, g;
            memcpy(&in, &bits[i], sizeof(in));
            memcpy(&g, &got, sizeof(g));
            int ok = isnan(in) ? isnan(g) && (got & 0xffffu) == 0 && (got >> 31) == (bits[i] >> 31)
                               : got == want;
            nan_in += isnan(in);
            ties += (bits[i] & 0xffffu) == 0x8000u;
            if (!ok && bad++ < 5)
                CHECK_MSG(ok, "0x%08x rounds to 0x%08x, the reference 0x%08x", bits[i], got,
                          want);
        }
    }
    CHECK_MSG(bad == 0, "%ld patterns rounded wrongly", bad);
    CHECK(nan_in > 0 && ties > 100);
    /* Worked cases: ties to even both ways, the overflow to infinity, the smallest subnormal */
    const uint32_t worked[][2] = {{0x3f808000, 0x3f800000}, {0x3f818000, 0x3f820000},
                                  {0x3f808001, 0x3f810000}, {0x7f7f8000, 0x7f800000},
                                  {0x7f7f7fff, 0x7f7f0000}, {0x00008000, 0x00000000},
                                  {0x00018000, 0x00020000}, {0x80008001, 0x80010000},
                                  {0xff800000, 0xff800000}};
    for (size_t k = 0; k < sizeof(worked) / sizeof(worked[0]); k++) {
        uint32_t got;
        memcpy(&x[0], &worked[k][0], sizeof(float));
        tbi_round_bf16(x, 1);
        memcpy(&got, &x[0], sizeof(got));
        CHECK_MSG(got == worked[k][1], "0x%08x rounds to 0x%08x, not 0x%08x", worked[k][0], got,
                  worked[k][1]);
    }
    fprintf(stderr, "bf16 rounding: %ld patterns wrong, %ld ties, %ld NaNs\n", bad, ties, nan_in);
    free(bits);
    free(x);
}

/* ---- bf16 operations to the bit ---- */
/* v rounded once to bf16 (nearest, ties to even) from its exact value: 8 significant bits, no
 * step below bf16's least subnormal 2^-133 (the default rounding mode is to nearest even). */
static double bf16_exact(double v)
{
    if (!isfinite(v) || v == 0)
        return v;
    int e;
    frexp(v, &e);
    int q = e - 8 < -133 ? -133 : e - 8;
    return (float)ldexp(nearbyint(ldexp(v, -q)), q); /* past bf16's largest: inf */
}

struct bits_count {
    long n, same, ties, bad;
};

/* A bf16 operation's outputs to the bit: f32 (n) is what the float32 op wrote, exact the
 * double reference. The operation's result is f32 rounded to bf16 (tbi_round_bf16, as the
 * bf16 mode stores it); it must equal the exact value rounded once, or be a tie: the float32
 * result within tol[i] of the exact value (the op's float32 accuracy) with a rounding
 * boundary between them, so that the order of a float32 sum decided the last bit. */
static void bf16_bits(struct bits_count *c, const char *what, const float *f32,
                      const double *exact, const double *tol, size_t n)
{
    float *got = malloc(sizeof(float) * n);
    memcpy(got, f32, sizeof(float) * n);
    tbi_round_bf16(got, n);
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        double want = bf16_exact(exact[i]);
        c->n++;
        if (got[i] == want) {
            c->same++;
        } else if (fabs(f32[i] - exact[i]) <= tol[i] &&
                   bf16_exact(exact[i] - tol[i]) != bf16_exact(exact[i] + tol[i])) {
            c->ties++;
        } else {
            c->bad++;
            if (bad++ < 3)
                CHECK_MSG(0, "%s[%zu]: %.9g (float32 %.9g), the exact %.12g rounds to %.9g",
                          what, i, got[i], f32[i], exact[i], want);
        }
    }
    free(got);
}

/* ex (R, C) = sum over l < L of a[r ar + l al] b[c bc + l bl] (+ bias[c]) in double, and
 * tol the float32 bound of that sum: (L + 2) 2^-24 times the sum of the terms' magnitudes. */
static void exact_product(double *ex, double *tol, int R, int C, int L, const float *a,
                          size_t ar, size_t al, const float *b, size_t bc, size_t bl,
                          const float *bias)
{
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            double sum = bias ? bias[c] : 0, mag = fabs(sum);
            for (int l = 0; l < L; l++) {
                double t = (double)a[r * ar + l * al] * b[c * bc + l * bl];
                sum += t, mag += fabs(t);
            }
            ex[(size_t)r * C + c] = sum, tol[(size_t)r * C + c] = (L + 2) * ldexp(1, -24) * mag;
        }
}

static float *randn_bf16(size_t n, float s)
{
    float *x = randn(n, s);
    tbi_round_bf16(x, n);
    return x;
}

/* The bf16 mode's operations (docs/PRECISION.md: bf16 operands, float32 arithmetic, the output
 * rounded once) against their exact values rounded once: the products with their bias and
 * their three gradients, GELU and its gradient, fused attention and its gradient (given the
 * stored, rounded output). Every value equal, but for ties decided by the float32 sum's order,
 * counted, and at most 1 in 100. The same reference on every CPU, for every kernel path. */
static void test_bf16_ops(void)
{
    struct bits_count c = {0};
    tbt_case = "bf16 products";
    int M = 37, K = 300, N = 45;
    float *inp = randn_bf16((size_t)M * K, 1), *w = randn_bf16((size_t)N * K, 0.3f);
    float *bias = randn_bf16((size_t)N, 1), *dout = randn_bf16((size_t)M * N, 1);
    float *out = zeros((size_t)M * N), *dinp = zeros((size_t)M * K), *dw = zeros((size_t)N * K);
    float *db = zeros((size_t)N);
    size_t most = (size_t)N * K > (size_t)M * K ? (size_t)N * K : (size_t)M * K;
    double *ex = calloc(most, sizeof(double)), *tol = calloc(most, sizeof(double));
    tbi_matmul_fwd(out, inp, w, bias, M, K, N);
    tbi_matmul_bwd(dinp, dw, db, dout, inp, w, M, K, N);
    const float one = 1;
    exact_product(ex, tol, M, N, K, inp, K, 1, w, K, 1, bias);
    bf16_bits(&c, "x W^T + b", out, ex, tol, (size_t)M * N);
    exact_product(ex, tol, M, K, N, dout, N, 1, w, 1, K, NULL);
    bf16_bits(&c, "dY W", dinp, ex, tol, (size_t)M * K);
    exact_product(ex, tol, N, K, M, dout, 1, N, inp, 1, K, NULL);
    bf16_bits(&c, "dY^T X", dw, ex, tol, (size_t)N * K);
    exact_product(ex, tol, N, 1, M, dout, 1, N, &one, 0, 0, NULL); /* the column sums */
    bf16_bits(&c, "colsum dY", db, ex, tol, (size_t)N);
    free(inp), free(w), free(bias), free(dout), free(out), free(dinp), free(dw), free(db);
    free(ex), free(tol);

    /* GELU: its float32 accuracy is test_gelu's 1e-6 absolute; the gradient's alike, scaled */
    tbt_case = "bf16 GELU";
    size_t n = 20000;
    float *x = randn_bf16(n, 2), *dy = randn_bf16(n, 1), *y = zeros(n), *dx = zeros(n);
    ex = calloc(n, sizeof(double)), tol = calloc(n, sizeof(double));
    tbi_gelu_fwd(y, x, n);
    tbi_gelu_bwd(dx, NULL, x, dy, n);
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        ex[i] = 0.5 * v * (1 + erf(v / sqrt(2.0))), tol[i] = 1e-6;
    }
    bf16_bits(&c, "GELU", y, ex, tol, n);
    for (size_t i = 0; i < n; i++) {
        double v = x[i], pdf = exp(-0.5 * v * v) / sqrt(2 * 3.14159265358979323846);
        double d = 0.5 * (1 + erf(v / sqrt(2.0))) + v * pdf;
        ex[i] = dy[i] * d, tol[i] = 2e-6 * fabs(dy[i]);
    }
    bf16_bits(&c, "GELU'", dx, ex, tol, n);
    free(x), free(dy), free(y), free(dx), free(ex), free(tol);

    /* Attention, both causal and not: test_attention's float32 accuracy (2e-5 on the output,
     * 1e-4 relative on the gradients) */
    for (int causal = 0; causal < 2; causal++) {
        tbt_case = causal ? "bf16 attention, causal" : "bf16 attention";
        int B = 2, T = 77, NH = 2, HS = 32, D = NH * HS;
        size_t nq = (size_t)B * T * 3 * D, no = (size_t)B * T * D;
        float *qkv = randn_bf16(nq, 1), *dO = randn_bf16(no, 1), *o = zeros(no);
        float *lse = zeros((size_t)B * NH * T), *dqkv = zeros(nq);
        double *ro = calloc(no, sizeof(double)), *rl = calloc((size_t)B * NH * T, 8);
        double *rd = calloc(nq, sizeof(double)), *t = calloc(nq, sizeof(double));
        CHECK_EQ(tbi_attention_fwd(o, lse, qkv, B, T, NH, HS, causal), 0);
        for (size_t i = 0; i < no; i++)
            t[i] = 2e-5;
        naive_attention(ro, rl, rd, qkv, dO, NULL, B, T, NH, HS, causal);
        bf16_bits(&c, "attention", o, ro, t, no);
        tbi_round_bf16(o, no); /* the stored output the backward is given */
        memset(rd, 0, sizeof(double) * nq);
        naive_attention(ro, rl, rd, qkv, dO, o, B, T, NH, HS, causal);
        CHECK_EQ(tbi_attention_bwd(dqkv, dO, qkv, o, lse, B, T, NH, HS, causal), 0);
        for (size_t i = 0; i < nq; i++)
            t[i] = 1e-4 * (1 + fabs(rd[i]));
        bf16_bits(&c, "attention dqkv", dqkv, rd, t, nq);
        free(qkv), free(dO), free(o), free(lse), free(dqkv), free(ro), free(rl), free(rd);
        free(t);
    }
    tbt_case = "bf16 operations";
    CHECK_MSG(c.bad == 0 && c.ties * 100 <= c.n, "%ld of %ld values differ from the exact "
              "rounding beyond a tie, %ld ties", c.bad, c.n, c.ties);
    fprintf(stderr, "bf16 operations: %ld values, %ld to the bit, %ld ties (%.3f%%), %ld wrong\n",
            c.n, c.same, c.ties, 100.0 * c.ties / c.n, c.bad);
}

/* ---- the bf16 GEMM (gemm_bf16.c) ---- */
/* One operand of the bf16 GEMM: f32 values (rows ld apart), their bf16 rounding as floats (the
 * reference's operand) and as bf16 bits (the other storage the kernel reads). */
struct bf16_operand {
    float *f, *r;
    uint16_t *h;
};

static void bf16_operand_init(struct bf16_operand *o, size_t n)
{
    o->f = randn(n, 1);
    o->r = malloc(sizeof(float) * (n ? n : 1));
    o->h = malloc(sizeof(uint16_t) * (n ? n : 1));
    tbi_round_bf16_copy(o->r, o->f, n);
    tbi_bf16_from_f32(o->h, o->f, n);
}

static void bf16_operand_free(struct bf16_operand *o)
{
    free(o->f), free(o->r), free(o->h);
}

static const void *bf16_operand_as(const struct bf16_operand *o, int dt)
{
    return dt == TB_DTYPE_BF16 ? (const void *)o->h : (const void *)o->f;
}

/* The shapes' counts for the report: elements, and those equal to the f32 kernel's. */
struct bf16_gemm_count {
    long n, same_f32;
};

/* One product of the bf16 GEMM in every storage of its operands, outside a region on 2
 * threads, on 1, and in a region of 2 (each thread its own C): within f32 accumulation's bound
 * of the double product of the rounded operands, everywhere the same bits; its row sums (ta)
 * tbi_colsum's order on the rounded A, to the bit. */
static void gemm_bf16_case(struct bf16_gemm_count *cnt, int ta, int tb, int M, int N, int K,
                           int pad, int with_bias)
{
    int lda = max_i(1, (ta ? M : K) + pad), ldb = max_i(1, (tb ? K : N) + pad), ldc = N + pad;
    struct bf16_operand a, b;
    bf16_operand_init(&a, (size_t)(ta ? K : M) * lda);
    bf16_operand_init(&b, (size_t)(tb ? N : K) * ldb);
    float *bias = with_bias ? randn_bf16((size_t)N, 1) : NULL;
    size_t nc = (size_t)M * ldc + 1;
    float *c = malloc(sizeof(float) * nc), *c2[2] = {malloc(sizeof(float) * nc),
                                                     malloc(sizeof(float) * nc)};
    float *f32 = zeros(nc), *sums = ta ? zeros((size_t)M + 1) : NULL;
    float *want_sums = zeros((size_t)M + 1), *sums2 = zeros((size_t)M + 1);
    tbi_sgemm_bias(ta, tb, M, N, K, a.r, lda, b.r, ldb, bias, f32, ldc);
    for (int i = 0; i < M && ta; i++)
        for (int k = 0; k < K; k++)
            want_sums[i] += a.r[(size_t)k * lda + i];
    int nth = omp_get_max_threads();
    for (int st = 0; st < 4; st++) {
        int adt = st & 1 ? TB_DTYPE_BF16 : TB_DTYPE_F32;
        int bdt = st & 2 ? TB_DTYPE_BF16 : TB_DTYPE_F32;
        const void *A = bf16_operand_as(&a, adt), *B = bf16_operand_as(&b, bdt);
        for (size_t i = 0; i < nc; i++)
            c[i] = c2[0][i] = c2[1][i] = NAN;
        omp_set_num_threads(2);
        int rc = tbi_gemm_bf16(ta, tb, M, N, K, A, adt, lda, B, bdt, ldb, bias, c, ldc, sums);
        omp_set_num_threads(1);
        rc |= tbi_gemm_bf16(ta, tb, M, N, K, A, adt, lda, B, bdt, ldb, bias, c2[0], ldc,
                            ta ? sums2 : NULL);
        omp_set_num_threads(nth);
        CHECK_MSG(rc == 0, "bf16 gemm %dx%dx%d: %d", M, N, K, rc);
        CHECK_MSG(!memcmp(c, c2[0], sizeof(float) * nc) &&
                      (!ta || !memcmp(sums, sums2, sizeof(float) * (size_t)M)),
                  "bf16 gemm %dx%dx%d ta %d tb %d: 2 threads and 1 differ", M, N, K, ta, tb);
        /* (a team of one, under OMP_THREAD_LIMIT=1, runs both) */
#pragma omp parallel num_threads(2) reduction(| : rc)
        for (int t = omp_get_thread_num(); t < 2; t += omp_get_num_threads())
            rc |= tbi_gemm_bf16(ta, tb, M, N, K, A, adt, lda, B, bdt, ldb, bias, c2[t], ldc,
                                NULL);
        CHECK_MSG(rc == 0, "bf16 gemm %dx%dx%d in a region: %d", M, N, K, rc);
        for (int t = 0; t < 2; t++)
            CHECK_MSG(!memcmp(c, c2[t], sizeof(float) * nc),
                      "bf16 gemm %dx%dx%d ta %d tb %d: in a region, thread %d differs", M, N, K,
                      ta, tb, t);
        long bad = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < ldc; j++) {
                size_t at = (size_t)i * ldc + j;
                if (j >= N) {
                    bad += !isnan(c[at]); /* the padding: never written */
                    continue;
                }
                double s = bias ? bias[j] : 0, mag = fabs(s);
                for (int k = 0; k < K; k++) {
                    double x = ta ? a.r[(size_t)k * lda + i] : a.r[(size_t)i * lda + k];
                    double y = tb ? b.r[(size_t)j * ldb + k] : b.r[(size_t)k * ldb + j];
                    s += x * y, mag += fabs(x * y);
                }
                double err = fabs(c[at] - s), bound = (K + 2) * ldexp(1, -23) * mag;
                if (!(err <= bound) && bad++ < 3)
                    CHECK_MSG(0, "bf16 gemm %dx%dx%d ta %d tb %d (%s, %s) [%d,%d]: %.9g, want "
                              "%.12g (bound %.3g)", M, N, K, ta, tb, adt ? "bf16" : "f32",
                              bdt ? "bf16" : "f32", i, j, c[at], s, bound);
                cnt->n++;
                cnt->same_f32 += c[at] == f32[at];
            }
        CHECK_MSG(bad == 0, "bf16 gemm %dx%dx%d ta %d tb %d: %ld elements wrong", M, N, K, ta, tb,
                  bad);
        if (ta)
            CHECK_MSG(!memcmp(sums, want_sums, sizeof(float) * (size_t)M),
                      "bf16 gemm %dx%dx%d: row sums differ from the rounded A's in order", M,
                      N, K);
    }
    bf16_operand_free(&a), bf16_operand_free(&b);
    free(bias), free(c), free(c2[0]), free(c2[1]), free(f32), free(sums), free(want_sums);
    free(sums2);
}

/* f32 operands rounded as packed to tbi_round_bf16's bits: ties both ways, a carry into the
 * exponent, overflow to infinity, infinities and NaN (a K = 1 product by 1, per storage
 * layout: read along rows, transposed, and interleaved). Subnormals are left out: VDPBF16PS
 * flushes them. */
static void gemm_bf16_rounding(void)
{
    static const uint32_t special[] = {0x3f808000, 0x3f818000, 0xbf808000, 0x3f80c000,
                                       0x3fff8000, 0x7f7fffff, 0xff7fffff, 0x7f800000,
                                       0xff800000, 0x7fc00001, 0xffa00000, 0x00800000};
    enum { M = 40 };
    float x[M], want[M], c[M], one = 1;
    for (int i = 0; i < M; i++) {
        uint32_t bits = i < 12 ? special[i] : 0;
        if (i < 12)
            memcpy(&x[i], &bits, sizeof(bits));
        else
            x[i] = (float)tb_rng_normal(&rng);
    }
    memcpy(want, x, sizeof(x));
    tbi_round_bf16(want, M);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            /* op(A) is M x 1 either way: A (M, 1) by rows, or (1, M) transposed */
            CHECK_EQ(tbi_gemm_bf16(ta, tb, M, 1, 1, x, TB_DTYPE_F32, ta ? M : 1, &one,
                                   TB_DTYPE_F32, 1, NULL, c, 1, NULL), 0);
            for (int i = 0; i < M; i++)
                CHECK_MSG(isnan(want[i]) ? isnan(c[i]) : !memcmp(&c[i], &want[i], 4),
                          "bf16 gemm rounding ta %d: %a gives %a, tbi_round_bf16 %a", ta, x[i],
                          c[i], want[i]);
            /* and as B: op(B) is 1 x M */
            CHECK_EQ(tbi_gemm_bf16(0, tb, 1, M, 1, &one, TB_DTYPE_F32, 1, x, TB_DTYPE_F32,
                                   tb ? 1 : M, NULL, c, M, NULL), 0);
            for (int i = 0; i < M; i++)
                CHECK_MSG(isnan(want[i]) ? isnan(c[i]) : !memcmp(&c[i], &want[i], 4),
                          "bf16 gemm rounding of B, tb %d: %a gives %a, tbi_round_bf16 %a", tb,
                          x[i], c[i], want[i]);
        }
}

/* The bf16 GEMM against the double product of its rounded operands, each element within the
 * bound of an f32 sum of K + 2 terms: every transpose, both storages, shapes that end mid-tile,
 * cross the K (512), M (96) and N (2048) blocks, odd K (the last pair padded), K = 1 and 0, with
 * a bias, row sums. How many elements equal the f32 kernel's on the same rounded operands is
 * counted, not required: VDPBF16PS adds a pair's two products in its own order. Without
 * avx512_bf16 (or with TUBELET_CPU=avx512), it must decline. */
static void test_gemm_bf16(void)
{
    tbt_case = "bf16 gemm";
    if (!tbi_cpu_avx512_bf16()) {
        float z = 0;
        CHECK(tbi_gemm_bf16(0, 0, 1, 1, 1, &z, TB_DTYPE_F32, 1, &z, TB_DTYPE_F32, 1, NULL, &z, 1,
                            NULL) == -1);
        fprintf(stderr, "bf16 gemm: no avx512_bf16 path here (declines, as it must)\n");
        return;
    }
    static const int shapes[][3] = {{1, 1, 1},      {12, 32, 512},   {13, 33, 513},
                                    {7, 5, 3},      {100, 70, 301},  {97, 2100, 40},
                                    {200, 31, 1030}, {5, 9, 1},      {6, 25, 600},
                                    {5, 9, 0},      {0, 5, 3},       {37, 45, 300}};
    struct bf16_gemm_count cnt = {0};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int t = 0; t < 4; t++)
            gemm_bf16_case(&cnt, t & 1, t >> 1, shapes[i][0], shapes[i][1], shapes[i][2],
                           (int)(i % 3), i % 2 == 0);
    gemm_bf16_rounding();
    fprintf(stderr, "bf16 gemm: %ld elements within the bound, %ld (%.1f%%) equal to the f32 "
            "kernel's on the rounded operands\n", cnt.n, cnt.same_f32,
            100.0 * cnt.same_f32 / (cnt.n ? cnt.n : 1));
}

/* The fair share's rule (share.c): the team is the ceiling less the cores other processes use,
 * rounded to nearest, never below one or above the ceiling. */
static void test_share_team(void)
{
    tbt_case = "fair share";
    const struct {
        int ceiling;
        double others;
        int want;
    } cases[] = {{2, 0.0, 2}, {2, 0.3, 2}, {2, 0.6, 1}, {2, 1.0, 1}, {2, 1.4, 1}, {2, 5.0, 1},
                 {8, 0.0, 8}, {8, 2.4, 6}, {8, 2.6, 5}, {8, 7.9, 1}, {1, 0.0, 1}, {3, 0.0, 3}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        CHECK_MSG(tbi_share_team(cases[i].ceiling, cases[i].others) == cases[i].want,
                  "a ceiling of %d beside %.1f busy cores gives %d threads, want %d",
                  cases[i].ceiling, cases[i].others,
                  tbi_share_team(cases[i].ceiling, cases[i].others), cases[i].want);
    /* The option off (the library's default) leaves the team alone, and turning it off after
     * it ran gives the team back its ceiling. */
    int ceiling = omp_get_max_threads();
    for (int i = 0; i < 3; i++)
        tbi_share_tick(0);
    CHECK_EQ(omp_get_max_threads(), ceiling);
    tbi_share_tick(1);
    tbi_share_tick(0);
    CHECK_EQ(omp_get_max_threads(), ceiling);
}

/* The processor switches (src/core/cpu.h), decided once for every layer: TUBELET_CPU=portable
 * turns off every AVX-512 path, =avx512 only the avx512_bf16 ones; the bf16 paths never run
 * without the AVX-512 set; asking again gives the same answer. */
static void test_cpu_switches(void)
{
    tbt_case = "cpu switches";
    const char *e = getenv("TUBELET_CPU");
    int v4 = tbi_cpu_avx512(), bf16 = tbi_cpu_avx512_bf16();
    CHECK_MSG(!bf16 || v4, "avx512_bf16 paths (%d) without AVX-512 (%d)", bf16, v4);
    if (e && !strcmp(e, "portable"))
        CHECK_MSG(!v4 && !bf16, "TUBELET_CPU=portable, yet avx512 %d, avx512_bf16 %d", v4, bf16);
    if (e && !strcmp(e, "avx512"))
        CHECK_MSG(!bf16, "TUBELET_CPU=avx512, yet avx512_bf16 %d", bf16);
    CHECK(tbi_cpu_avx512() == v4 && tbi_cpu_avx512_bf16() == bf16);
    CHECK_MSG(!v4 || tbi_cpu_avx2(), "AVX-512 (%d) without AVX2 (%d)", v4, tbi_cpu_avx2());
    fprintf(stderr, "cpu switches: TUBELET_CPU=%s: avx512 %d, avx512_bf16 %d, avx2 %d\n",
            e ? e : "(unset)", v4, bf16, tbi_cpu_avx2());
}

int main(void)
{
    tbt_begin("ops");
    tb_rng_init(&rng, 123, 0);
    test_cpu_switches();
    test_vmath();
    test_gemm();
    test_gemm_in_region();
    test_matmul();
    test_layernorm();
    test_gelu();
    test_quickgelu();
    test_xent();
    test_attention();
    test_patchify_adamw();
    test_optim_zero_runs();
    test_round_bf16();
    test_bf16_ops();
    test_gemm_bf16();
    test_share_team();
    test_step_ops();
    TBT_EXIT();
}
