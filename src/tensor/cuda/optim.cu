/* src/tensor/cuda/optim.cu - AdamW, Lion and SGD on fp32 master weights and moments, the CPU's
 * arithmetic per element in its order (src/tensor/cpu/elementwise.c: PyTorch's AdamW and SGD,
 * AVION's Lion), the bias corrections and decay factors computed on the host by the same
 * expressions. Where the CPU skips a run of all-zero gradient and moments it applies only the
 * decay, which is what the full update does to such a run, to the bit; here every element
 * takes the full update (no page is left untouched: device memory is not committed lazily).
 * The _checked forms read the clip factor and the bad flag of struct tbi_step_stats on the
 * device. The results match the CPU's to an ulp or so (FMA contraction may differ), not to the
 * bit. Tests: tests/gpu/ops_emulate.cpp. */
#include <math.h>

#include "tensor/cuda/cuda_common.h"

enum { OPT_THREADS = 256 };

/* The gradient factor: grad_scale, or *scale when the step's stats give it; nothing is done
 * once *bad is set (both NULL for the plain forms). */
struct opt_scale {
    float grad_scale;
    const float *scale;
    const int32_t *bad;
};

static __device__ __forceinline__ int opt_skip(opt_scale g, float *gs)
{
    *gs = g.scale ? *g.scale : g.grad_scale;
    return g.bad && *g.bad;
}

/* One kernel for the three rules: the skip, the gradient factor and the grid-stride loop, then
 * rule.apply(i, gs) on element i. */
template <typename Rule>
__global__ void __launch_bounds__(OPT_THREADS) update_kernel(Rule rule, opt_scale sc, size_t n)
{
    float gs;
    if (opt_skip(sc, &gs))
        return;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        rule.apply(i, gs);
}

struct adamw_rule {
    float *p, *m, *v;
    const float *g;
    float beta1, beta2, eps, step_size, bc2_sqrt, decay;

    __device__ void apply(size_t i, float gs) const
    {
        const float gi = g[i] * gs;
        const float pi = p[i] * decay;
        const float mi = m[i] + (gi - m[i]) * (1.0f - beta1);
        const float vi = v[i] * beta2 + (1.0f - beta2) * gi * gi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi - step_size * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
};

struct lion_rule {
    float *p, *m;
    const float *g;
    float lr, beta1, beta2, decay, a1, a2;

    __device__ void apply(size_t i, float gs) const
    {
        const float gi = g[i] * gs;
        const float c = m[i] * beta1 + a1 * gi;
        const float u = (float)((c > 0) - (c < 0));
        p[i] = p[i] * decay - lr * u;
        m[i] = m[i] * beta2 + a2 * gi;
    }
};

struct sgd_rule {
    float *p, *m;
    const float *g;
    float lr, momentum, weight_decay;

    __device__ void apply(size_t i, float gs) const
    {
        const float gi = g[i] * gs + weight_decay * p[i];
        m[i] = momentum * m[i] + gi;
        p[i] = p[i] - lr * m[i];
    }
};

template <typename Rule> static int launch_update(cudaStream_t s, Rule rule, opt_scale sc, size_t n)
{
    if (n == 0)
        return 0;
    TBC_LAUNCH(update_kernel<Rule>, tbc_blocks(n, OPT_THREADS), OPT_THREADS, 0, s, rule, sc, n);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}

static int opt_ok(const float *p, const float *g, const float *m, const float *v)
{
    return p && g && m && v && tbc_aligned(p, 4) && tbc_aligned(g, 4) && tbc_aligned(m, 4) &&
           tbc_aligned(v, 4);
}

static opt_scale scale_of(float grad_scale, const struct tbi_step_stats *st)
{
    opt_scale g = {grad_scale, st ? &st->scale : NULL, st ? &st->bad : NULL};
    return g;
}

static int adamw(cudaStream_t s, float *param, const float *grad, opt_scale sc, float *m, float *v,
                 size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                 int64_t step)
{
    if (!opt_ok(param, grad, m, v) || step < 1)
        return TB_EINVAL;
    /* tbi_adamw's expressions, on the host as there. */
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    float step_size = lr / bc1, bc2_sqrt = sqrtf(bc2), decay = 1.0f - lr * weight_decay;
    const adamw_rule r = {param, m, v, grad, beta1, beta2, eps, step_size, bc2_sqrt, decay};
    return launch_update(s, r, sc, n);
}

static int lion(cudaStream_t s, float *param, const float *grad, opt_scale sc, float *m, size_t n,
                float lr, float beta1, float beta2, float weight_decay)
{
    if (!opt_ok(param, grad, m, m))
        return TB_EINVAL;
    float decay = 1.0f - lr * weight_decay, a1 = 1.0f - beta1, a2 = 1.0f - beta2;
    const lion_rule r = {param, m, grad, lr, beta1, beta2, decay, a1, a2};
    return launch_update(s, r, sc, n);
}

static int sgd(cudaStream_t s, float *param, const float *grad, opt_scale sc, float *m, size_t n,
               float lr, float momentum, float weight_decay)
{
    if (!opt_ok(param, grad, m, m))
        return TB_EINVAL;
    const sgd_rule r = {param, m, grad, lr, momentum, weight_decay};
    return launch_update(s, r, sc, n);
}

static int tbc_adamw(tbi_backend *be, float *param, const float *grad, float grad_scale, float *m,
                     float *v, size_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, int64_t step)
{
    cudaStream_t s = tbc_stream(be);
    return adamw(s, param, grad, scale_of(grad_scale, NULL), m, v, n, lr, beta1, beta2, eps,
                 weight_decay, step);
}

static int tbc_lion(tbi_backend *be, float *param, const float *grad, float grad_scale, float *m,
                    size_t n, float lr, float beta1, float beta2, float weight_decay)
{
    cudaStream_t s = tbc_stream(be);
    return lion(s, param, grad, scale_of(grad_scale, NULL), m, n, lr, beta1, beta2, weight_decay);
}

static int tbc_sgd(tbi_backend *be, float *param, const float *grad, float grad_scale, float *m,
                   size_t n, float lr, float momentum, float weight_decay)
{
    cudaStream_t s = tbc_stream(be);
    return sgd(s, param, grad, scale_of(grad_scale, NULL), m, n, lr, momentum, weight_decay);
}

static int tbc_adamw_checked(tbi_backend *be, float *param, const float *grad,
                             const struct tbi_step_stats *st, float *m, float *v, size_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             int64_t step)
{
    cudaStream_t s = tbc_stream(be);
    if (!st)
        return tbi_err(TB_EINVAL, "%s adamw_checked: a shape, dtype or alignment it does not take",
                       be->name);
    return adamw(s, param, grad, scale_of(0, st), m, v, n, lr, beta1, beta2, eps, weight_decay,
                 step);
}

static int tbc_lion_checked(tbi_backend *be, float *param, const float *grad,
                            const struct tbi_step_stats *st, float *m, size_t n, float lr,
                            float beta1, float beta2, float weight_decay)
{
    cudaStream_t s = tbc_stream(be);
    if (!st)
        return tbi_err(TB_EINVAL, "%s lion_checked: a shape, dtype or alignment it does not take",
                       be->name);
    return lion(s, param, grad, scale_of(0, st), m, n, lr, beta1, beta2, weight_decay);
}

static int tbc_sgd_checked(tbi_backend *be, float *param, const float *grad,
                           const struct tbi_step_stats *st, float *m, size_t n, float lr,
                           float momentum, float weight_decay)
{
    cudaStream_t s = tbc_stream(be);
    if (!st)
        return tbi_err(TB_EINVAL, "%s sgd_checked: a shape, dtype or alignment it does not take",
                       be->name);
    return sgd(s, param, grad, scale_of(0, st), m, n, lr, momentum, weight_decay);
}
