/* src/tensor/cuda/elementwise.cu - the per-element ops: exact-erf GELU and QuickGELU forward and
 * backward, add, scale_add; the activations are the CPU's rules (src/tensor/act_rules.h) on
 * CUDA's erfcf and expf where the CPU has its own fits (tbi_erfcf, tbi_expf), so the f32
 * results agree to a few ulps, not to the bit. Grid-stride loops of 256 threads, one element
 * per thread and step (coalesced; each thread reads an element before it writes it, so the
 * in-place forms are safe). Typed tensors are read and written by their runtime dtype, uniform
 * over a launch. Not vectorised to 16 bytes: a tensor carved from an arena may start anywhere
 * its dtype allows. Tests: tests/gpu/ops_emulate.cpp. */
#include <math.h>

#include "tensor/act_rules.h"
#include "tensor/cuda/cuda_common.h"

enum { EW_THREADS = 256 };

/* The activations' rules on CUDA's erfc and exp: dev_gelu_erfc, dev_gelu_grad,
 * dev_quick_sigmoid. */
TBI_ACT_RULES(dev, erfcf, expf)

static __device__ __forceinline__ float act_fwd(int act, float x)
{
    return act == TBI_ACT_GELU ? tbi_gelu_rule(x, dev_gelu_erfc(x))
                               : tbi_quickgelu_rule(x, dev_quick_sigmoid(x));
}

__global__ void __launch_bounds__(EW_THREADS)
    act_fwd_kernel(int act, tbi_t out, tbi_t inp, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float x = load_t(inp, i);
        store_t(out, i, act_fwd(act, x));
    }
}

__global__ void __launch_bounds__(EW_THREADS)
    act_bwd_kernel(int act, tbi_t dinp, tbi_t out, tbi_t inp, tbi_t dout, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float x = load_t(inp, i), dy = load_t(dout, i);
        float grad, y;
        if (act == TBI_ACT_GELU) {
            const float e = dev_gelu_erfc(x);
            grad = dev_gelu_grad(x, e);
            y = tbi_gelu_rule(x, e);
        } else {
            const float s = dev_quick_sigmoid(x);
            grad = tbi_quickgelu_grad_rule(x, s);
            y = tbi_quickgelu_rule(x, s);
        }
        store_t(dinp, i, dy * grad);
        if (out.p)
            store_t(out, i, y);
    }
}

__global__ void __launch_bounds__(EW_THREADS)
    add_kernel(float *out, const float *a, const float *b, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        GL_ST(&out[i], GL_LD(&a[i]) + GL_LD(&b[i]));
}

/* Segment b of n at blockIdx.y (striding by gridDim.y past 65535 segments): no division per
 * element. */
__global__ void __launch_bounds__(EW_THREADS)
    scale_add_kernel(tbi_t out, const float *a, const float *x, const float *scale, int B, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (int b = blockIdx.y; b < B; b += gridDim.y) {
        const float s = GL_LD(&scale[b]);
        const size_t o = (size_t)b * n;
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
            store_t(out, o + i, (a ? GL_LD(&a[o + i]) : 0.0f) + s * GL_LD(&x[o + i]));
    }
}

static int act_ok(int act)
{
    return act == TBI_ACT_GELU || act == TBI_ACT_QUICKGELU;
}

static int tbc_act_fwd(tbi_backend *be, int act, tbi_t out, tbi_t inp, size_t n)
{
    cudaStream_t s = tbc_stream(be);
    if (!act_ok(act) || !out.p || !inp.p || !tbc_typed_ok(out) || !tbc_typed_ok(inp))
        return tbi_err(TB_EINVAL, "%s act_fwd: a shape, dtype or alignment it does not take",
                       be->name);
    if (n == 0)
        return 0;
    TBC_LAUNCH(act_fwd_kernel, tbc_blocks(n, EW_THREADS), EW_THREADS, 0, s, act, out, inp, n);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}

static int tbc_act_bwd(tbi_backend *be, int act, tbi_t dinp, tbi_t out, tbi_t inp, tbi_t dout,
                       size_t n)
{
    cudaStream_t s = tbc_stream(be);
    if (!act_ok(act) || !dinp.p || !inp.p || !dout.p || !tbc_typed_ok(dinp) ||
        (out.p && !tbc_typed_ok(out)) || !tbc_typed_ok(inp) || !tbc_typed_ok(dout))
        return tbi_err(TB_EINVAL, "%s act_bwd: a shape, dtype or alignment it does not take",
                       be->name);
    if (n == 0)
        return 0;
    TBC_LAUNCH(act_bwd_kernel, tbc_blocks(n, EW_THREADS), EW_THREADS, 0, s, act, dinp, out, inp,
               dout, n);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}

static int tbc_add(tbi_backend *be, float *out, const float *a, const float *b, size_t n)
{
    cudaStream_t s = tbc_stream(be);
    if (!out || !a || !b || !tbc_aligned(out, 4) || !tbc_aligned(a, 4) || !tbc_aligned(b, 4))
        return tbi_err(TB_EINVAL, "%s add: a shape, dtype or alignment it does not take", be->name);
    if (n == 0)
        return 0;
    TBC_LAUNCH(add_kernel, tbc_blocks(n, EW_THREADS), EW_THREADS, 0, s, out, a, b, n);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}

static int tbc_scale_add(tbi_backend *be, tbi_t out, const float *a, const float *x,
                         const float *scale, int B, size_t n)
{
    cudaStream_t s = tbc_stream(be);
    if (!out.p || !x || !scale || B < 0 || !tbc_typed_ok(out) || !tbc_aligned(a, 4) ||
        !tbc_aligned(x, 4) || !tbc_aligned(scale, 4))
        return tbi_err(TB_EINVAL, "%s scale_add: a shape, dtype or alignment it does not take",
                       be->name);
    if (B == 0 || n == 0)
        return 0;
    const dim3 grid(tbc_blocks(n, EW_THREADS), B < 65535 ? B : 65535);
    TBC_LAUNCH(scale_add_kernel, grid, EW_THREADS, 0, s, out, a, x, scale, B, n);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}
