/* src/tensor/cuda/optim.cu - AdamW, Lion and SGD on fp32 master weights and moments: the CPU's
 * rules per element (src/tensor/optim_rules.h: PyTorch's AdamW and SGD, AVION's Lion), the bias
 * corrections and decay factors computed on the host by the same rules. Where the CPU skips a
 * run of all-zero gradient and moments it applies only the decay, which is what the full update
 * does to such a run, to the bit; here every element takes the full update (no page is left
 * untouched: device memory is not committed lazily). The _checked forms read the clip factor
 * and the bad flag of struct tbi_step_stats on the device. The results match the CPU's to an
 * ulp or so (FMA contraction may differ), not to the bit. Tests: tests/gpu/ops_emulate.cpp. */
#include <math.h>

#include "tensor/cuda/cuda_common.h"
#include "tensor/optim_rules.h"

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
    *gs = g.scale ? GL_LD(g.scale) : g.grad_scale;
    return g.bad && GL_LD(g.bad);
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
    tbi_adamw_k k;

    __device__ void apply(size_t i, float gs) const
    {
        float pi = GL_LD(p + i), mi = GL_LD(m + i), vi = GL_LD(v + i);
        tbi_adamw_rule(&pi, &mi, &vi, GL_LD(&g[i]), gs, k);
        GL_ST(p + i, pi);
        GL_ST(m + i, mi);
        GL_ST(v + i, vi);
    }
};

struct lion_rule {
    float *p, *m;
    const float *g;
    tbi_lion_k k;

    __device__ void apply(size_t i, float gs) const
    {
        float pi = GL_LD(p + i), mi = GL_LD(m + i);
        tbi_lion_rule(&pi, &mi, GL_LD(&g[i]), gs, k);
        GL_ST(p + i, pi);
        GL_ST(m + i, mi);
    }
};

struct sgd_rule {
    float *p, *m;
    const float *g;
    float lr, momentum, weight_decay;

    __device__ void apply(size_t i, float gs) const
    {
        float pi = GL_LD(p + i), mi = GL_LD(m + i);
        tbi_sgd_rule(&pi, &mi, GL_LD(&g[i]), gs, lr, momentum, weight_decay);
        GL_ST(p + i, pi);
        GL_ST(m + i, mi);
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
    /* tbi_adamw's constants, on the host as there. */
    const adamw_rule r = {param, m, v, grad,
                          tbi_adamw_k_rule(lr, beta1, beta2, eps, weight_decay, step)};
    return launch_update(s, r, sc, n);
}

static int lion(cudaStream_t s, float *param, const float *grad, opt_scale sc, float *m, size_t n,
                float lr, float beta1, float beta2, float weight_decay)
{
    if (!opt_ok(param, grad, m, m))
        return TB_EINVAL;
    const lion_rule r = {param, m, grad, tbi_lion_k_rule(lr, beta1, beta2, weight_decay)};
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
