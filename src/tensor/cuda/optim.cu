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

__global__ void __launch_bounds__(OPT_THREADS)
    adamw_kernel(float *p, const float *g, opt_scale sc, float *m, float *v, size_t n,
                 float beta1, float beta2, float eps, float step_size, float bc2_sqrt, float decay)
{
    float gs;
    if (opt_skip(sc, &gs))
        return;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float gi = g[i] * gs;
        const float pi = p[i] * decay;
        const float mi = m[i] + (gi - m[i]) * (1.0f - beta1);
        const float vi = v[i] * beta2 + (1.0f - beta2) * gi * gi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi - step_size * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

__global__ void __launch_bounds__(OPT_THREADS)
    lion_kernel(float *p, const float *g, opt_scale sc, float *m, size_t n, float lr, float beta1,
                float beta2, float decay, float a1, float a2)
{
    float gs;
    if (opt_skip(sc, &gs))
        return;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float gi = g[i] * gs;
        const float c = m[i] * beta1 + a1 * gi;
        const float u = (float)((c > 0) - (c < 0));
        p[i] = p[i] * decay - lr * u;
        m[i] = m[i] * beta2 + a2 * gi;
    }
}

__global__ void __launch_bounds__(OPT_THREADS)
    sgd_kernel(float *p, const float *g, opt_scale sc, float *m, size_t n, float lr,
               float momentum, float weight_decay)
{
    float gs;
    if (opt_skip(sc, &gs))
        return;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float gi = g[i] * gs + weight_decay * p[i];
        m[i] = momentum * m[i] + gi;
        p[i] = p[i] - lr * m[i];
    }
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

static int adamw(cudaStream_t s, float *param, const float *grad, opt_scale sc, float *m,
                 float *v, size_t n, float lr, float beta1, float beta2, float eps,
                 float weight_decay, int64_t step)
{
    if (!opt_ok(param, grad, m, v) || step < 1)
        return TB_EINVAL;
    if (n == 0)
        return 0;
    /* tbi_adamw's expressions, on the host as there. */
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    float step_size = lr / bc1, bc2_sqrt = sqrtf(bc2), decay = 1.0f - lr * weight_decay;
    TBC_LAUNCH(adamw_kernel, tbc_blocks(n, OPT_THREADS), OPT_THREADS, 0, s, param, grad, sc, m, v,
               n, beta1, beta2, eps, step_size, bc2_sqrt, decay);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}

static int lion(cudaStream_t s, float *param, const float *grad, opt_scale sc, float *m, size_t n,
                float lr, float beta1, float beta2, float weight_decay)
{
    if (!opt_ok(param, grad, m, m))
        return TB_EINVAL;
    if (n == 0)
        return 0;
    float decay = 1.0f - lr * weight_decay, a1 = 1.0f - beta1, a2 = 1.0f - beta2;
    TBC_LAUNCH(lion_kernel, tbc_blocks(n, OPT_THREADS), OPT_THREADS, 0, s, param, grad, sc, m, n,
               lr, beta1, beta2, decay, a1, a2);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}

static int sgd(cudaStream_t s, float *param, const float *grad, opt_scale sc, float *m, size_t n,
               float lr, float momentum, float weight_decay)
{
    if (!opt_ok(param, grad, m, m))
        return TB_EINVAL;
    if (n == 0)
        return 0;
    TBC_LAUNCH(sgd_kernel, tbc_blocks(n, OPT_THREADS), OPT_THREADS, 0, s, param, grad, sc, m, n,
               lr, momentum, weight_decay);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}

extern "C" int tbc_adamw(cudaStream_t s, float *param, const float *grad, float grad_scale,
                         float *m, float *v, size_t n, float lr, float beta1, float beta2,
                         float eps, float weight_decay, int64_t step)
{
    return adamw(s, param, grad, scale_of(grad_scale, NULL), m, v, n, lr, beta1, beta2, eps,
                 weight_decay, step);
}

extern "C" int tbc_lion(cudaStream_t s, float *param, const float *grad, float grad_scale,
                        float *m, size_t n, float lr, float beta1, float beta2,
                        float weight_decay)
{
    return lion(s, param, grad, scale_of(grad_scale, NULL), m, n, lr, beta1, beta2, weight_decay);
}

extern "C" int tbc_sgd(cudaStream_t s, float *param, const float *grad, float grad_scale,
                       float *m, size_t n, float lr, float momentum, float weight_decay)
{
    return sgd(s, param, grad, scale_of(grad_scale, NULL), m, n, lr, momentum, weight_decay);
}

extern "C" int tbc_adamw_checked(cudaStream_t s, float *param, const float *grad,
                                 const struct tbi_step_stats *st, float *m, float *v, size_t n,
                                 float lr, float beta1, float beta2, float eps,
                                 float weight_decay, int64_t step)
{
    if (!st)
        return TB_EINVAL;
    return adamw(s, param, grad, scale_of(0, st), m, v, n, lr, beta1, beta2, eps, weight_decay,
                 step);
}

extern "C" int tbc_lion_checked(cudaStream_t s, float *param, const float *grad,
                                const struct tbi_step_stats *st, float *m, size_t n, float lr,
                                float beta1, float beta2, float weight_decay)
{
    if (!st)
        return TB_EINVAL;
    return lion(s, param, grad, scale_of(0, st), m, n, lr, beta1, beta2, weight_decay);
}

extern "C" int tbc_sgd_checked(cudaStream_t s, float *param, const float *grad,
                               const struct tbi_step_stats *st, float *m, size_t n, float lr,
                               float momentum, float weight_decay)
{
    if (!st)
        return TB_EINVAL;
    return sgd(s, param, grad, scale_of(0, st), m, n, lr, momentum, weight_decay);
}
