/* tests/gpu/attention_ref.h - what tests/gpu/attention_check.cu (on a GPU) and
 * attention_emulate.cpp (on the CPU) share: random bf16 inputs, naive attention in double as
 * the reference, and the error measures with their tolerances. Host C++ only. */
#ifndef TUBELET_TESTS_ATTENTION_REF_H
#define TUBELET_TESTS_ATTENTION_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

/* Tolerances. out, dq, dk, dv: relative L2 error <= 2e-2, since the tensor-core products take
 * P and dS rounded to bf16 (8 significant bits, 2^-9 relative per element) and the results are
 * stored as bf16 (2^-9 again); that is what FlashAttention's own bf16 tests allow. Where the
 * reference is zero or nearly so (dq at N = 1: the softmax of one score has no gradient), the
 * error's RMS <= 1e-3 passes instead. lse: max abs error <= 1e-3, as its scores are exact
 * products of the same bf16 values summed in fp32. */
static const double TOL_REL = 2e-2, TOL_RMS = 1e-3, TOL_LSE = 1e-3;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static inline double uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((rng_state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static inline float gaussian(void)
{
    return (float)(sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()));
}

/* n standard normal values rounded to bf16: the device copy and its exact value. */
static inline void random_bf16(std::vector<bf16> &b, std::vector<double> &f, size_t n)
{
    b.resize(n);
    f.resize(n);
    for (size_t i = 0; i < n; i++) {
        b[i] = __float2bfloat16(gaussian());
        f[i] = __bfloat162float(b[i]);
    }
}

/* Naive attention in double, one query row at a time (nothing N x N): out (B, N, D), lse
 * (B, NH, N), and the backward's dqkv (B, N, 3, NH, HS) with D_i from the reference out. */
static inline void reference(const double *qkv, const double *dout, int B, int N, int NH, int HS,
                             int causal, double *out, double *lse, double *dqkv)
{
    const int D = NH * HS;
    const size_t ld = (size_t)3 * D;
    const double scale = 1.0 / sqrt((double)HS);
    std::vector<double> p(N), o(HS), dq(HS);
    memset(dqkv, 0, sizeof(double) * (size_t)B * N * ld);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const double *base = qkv + (size_t)b * N * ld + (size_t)h * HS;
            double *gbase = dqkv + (size_t)b * N * ld + (size_t)h * HS;
            for (int i = 0; i < N; i++) {
                const double *q = base + (size_t)i * ld;
                const int nk = causal ? i + 1 : N;
                double m = -INFINITY;
                for (int j = 0; j < nk; j++) {
                    const double *k = base + (size_t)j * ld + D;
                    double s = 0;
                    for (int d = 0; d < HS; d++)
                        s += q[d] * k[d];
                    p[j] = s * scale;
                    m = p[j] > m ? p[j] : m;
                }
                double sum = 0;
                for (int j = 0; j < nk; j++)
                    sum += p[j] = exp(p[j] - m);
                for (int d = 0; d < HS; d++)
                    o[d] = 0;
                for (int j = 0; j < nk; j++) {
                    const double *v = base + (size_t)j * ld + 2 * D;
                    p[j] /= sum;
                    for (int d = 0; d < HS; d++)
                        o[d] += p[j] * v[d];
                }
                lse[((size_t)b * NH + h) * N + i] = m + log(sum);
                double *orow = out + ((size_t)b * N + i) * D + (size_t)h * HS;
                const double *go = dout + ((size_t)b * N + i) * D + (size_t)h * HS;
                double di = 0;
                for (int d = 0; d < HS; d++) {
                    orow[d] = o[d];
                    di += go[d] * o[d];
                    dq[d] = 0;
                }
                for (int j = 0; j < nk; j++) {
                    const double *k = base + (size_t)j * ld + D, *v = k + D;
                    double dp = 0;
                    for (int d = 0; d < HS; d++)
                        dp += go[d] * v[d];
                    const double ds = p[j] * (dp - di);
                    double *dk = gbase + (size_t)j * ld + D, *dv = dk + D;
                    for (int d = 0; d < HS; d++) {
                        dq[d] += ds * k[d];
                        dk[d] += scale * ds * q[d];
                        dv[d] += p[j] * go[d];
                    }
                }
                double *dqrow = gbase + (size_t)i * ld;
                for (int d = 0; d < HS; d++)
                    dqrow[d] = scale * dq[d];
            }
        }
}

struct err {
    double max_abs, sse, ssr;
    size_t n;
};

static inline void err_add(struct err *e, double got, double ref)
{
    const double d = got - ref;
    if (!(fabs(d) <= e->max_abs)) /* NaN sticks */
        e->max_abs = fabs(d);
    e->sse += d * d;
    e->ssr += ref * ref;
    e->n++;
}

static inline double err_rel(const struct err *e)
{
    return e->ssr > 0 ? sqrt(e->sse / e->ssr) : (e->sse == 0 ? 0 : INFINITY);
}

static inline int err_ok(const struct err *e)
{
    return err_rel(e) <= TOL_REL || sqrt(e->sse / (double)e->n) <= TOL_RMS;
}

#endif /* TUBELET_TESTS_ATTENTION_REF_H */
