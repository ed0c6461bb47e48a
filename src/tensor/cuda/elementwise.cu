/* src/tensor/cuda/elementwise.cu - the per-element ops: exact-erf GELU and QuickGELU forward and
 * backward, add, scale_add, residual_add; the activations are the CPU's rules
 * (src/tensor/act_rules.h) on CUDA's erfcf and expf where the CPU has its own fits (tbi_erfcf,
 * tbi_expf), so the f32 results agree to a few ulps, not to the bit. Grid-stride loops of 256
 * threads over 16-byte vectors (8 elements of any dtype: a uint4 of bf16 or two float4 of f32;
 * add's 4 f32 a float4), then the rest one element per thread; where a tensor is not 16-byte
 * aligned (one carved from an arena may start anywhere its dtype allows) the launcher takes the
 * scalar form, one element per thread and step. Coalesced either way; each thread reads its
 * elements before it writes them, so the in-place forms are safe. Typed tensors are read and
 * written by their runtime dtype, uniform over a launch; every value is the scalar form's, to the
 * bit. Global memory through GL_LD / GL_ST. Tests: tests/gpu/ops_emulate.cpp, tests/test_backend.c
 * (residual_add's parity on cuda-emu). */
#include <math.h>

#include "tensor/act_rules.h"
#include "tensor/cuda/cuda_common.h"

/* EW_VEC: the elements of a 16-byte step of a typed tensor (a bf16 uint4; f32 takes two
 * float4), so tensors of both dtypes step together; EW_VEC4: add's f32 float4. */
enum { EW_THREADS = 256, EW_VEC = 8, EW_VEC4 = 4 };

/* The activations' rules on CUDA's erfc and exp: dev_gelu_erfc, dev_gelu_grad,
 * dev_quick_sigmoid. */
TBI_ACT_RULES(dev, erfcf, expf)

static __device__ __forceinline__ float act_fwd(int act, float x)
{
    return act == TBI_ACT_GELU ? tbi_gelu_rule(x, dev_gelu_erfc(x))
                               : tbi_quickgelu_rule(x, dev_quick_sigmoid(x));
}

/* V f32 elements from p (V = 1, or a multiple of 4 from a 16-byte aligned p: float4s). */
template <int V> static __device__ __forceinline__ void load_f(const float *p, float *f)
{
    if constexpr (V == 1) {
        f[0] = GL_LD(p);
    } else {
#pragma unroll
        for (int k = 0; k < V; k += 4) {
            const float4 a = GL_LD((const float4 *)(p + k));
            f[k] = a.x, f[k + 1] = a.y, f[k + 2] = a.z, f[k + 3] = a.w;
        }
    }
}

template <int V> static __device__ __forceinline__ void store_f(float *p, const float *f)
{
    if constexpr (V == 1) {
        GL_ST(p, f[0]);
    } else {
#pragma unroll
        for (int k = 0; k < V; k += 4)
            GL_ST((float4 *)(p + k), make_float4(f[k], f[k + 1], f[k + 2], f[k + 3]));
    }
}

/* Elements i .. i + V - 1 of a typed tensor, widened exactly (V = 1: load_t; V = 8: i a
 * multiple of 8 and the tensor 16-byte aligned, one uint4 of bf16 or two float4 of f32; V = 4:
 * a uint2 of bf16 or a float4 of f32). */
template <int V> static __device__ __forceinline__ void load_v(tbi_t t, size_t i, float *f)
{
    if constexpr (V == 1) {
        f[0] = load_t(t, i);
    } else if (t.dt == TB_DTYPE_BF16 && V == 4) {
        const uint2 u = GL_LD((const uint2 *)((const bf16 *)t.p + i));
        const unsigned w[2] = {u.x, u.y};
#pragma unroll
        for (int k = 0; k < 2; k++) {
            f[2 * k] = __bfloat162float(__ushort_as_bfloat16((unsigned short)(w[k] & 0xffffu)));
            f[2 * k + 1] = __bfloat162float(__ushort_as_bfloat16((unsigned short)(w[k] >> 16)));
        }
    } else if (t.dt == TB_DTYPE_BF16) {
        const uint4 u = GL_LD((const uint4 *)((const bf16 *)t.p + i));
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            f[2 * k] = __bfloat162float(__ushort_as_bfloat16((unsigned short)(w[k] & 0xffffu)));
            f[2 * k + 1] = __bfloat162float(__ushort_as_bfloat16((unsigned short)(w[k] >> 16)));
        }
    } else {
        load_f<V>((const float *)t.p + i, f);
    }
}

/* The same stored, rounded to the tensor's dtype as store_t rounds (nearest even). */
template <int V> static __device__ __forceinline__ void store_v(tbi_t t, size_t i, const float *f)
{
    if constexpr (V == 1) {
        store_t(t, i, f[0]);
    } else if (t.dt == TB_DTYPE_BF16 && V == 4) {
        unsigned w[2];
#pragma unroll
        for (int k = 0; k < 2; k++)
            w[k] = (unsigned)__bfloat16_as_ushort(__float2bfloat16(f[2 * k])) |
                   (unsigned)__bfloat16_as_ushort(__float2bfloat16(f[2 * k + 1])) << 16;
        GL_ST((uint2 *)((bf16 *)t.p + i), make_uint2(w[0], w[1]));
    } else if (t.dt == TB_DTYPE_BF16) {
        unsigned w[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[k] = (unsigned)__bfloat16_as_ushort(__float2bfloat16(f[2 * k])) |
                   (unsigned)__bfloat16_as_ushort(__float2bfloat16(f[2 * k + 1])) << 16;
        GL_ST((uint4 *)((bf16 *)t.p + i), make_uint4(w[0], w[1], w[2], w[3]));
    } else {
        store_f<V>((float *)t.p + i, f);
    }
}

/* The grid-stride loop of every kernel here: body.template run<V>(i) on the n / V vectors (V
 * = 1: every element), then body.template run<1>(i) on the n % V elements left, one per
 * thread. */
template <int V, typename Body>
static __device__ __forceinline__ void ew_loop(const Body &body, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x,
                 first = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nv = n / V;
    for (size_t v = first; v < nv; v += stride)
        body.template run<V>(v * V);
    if (V > 1 && nv * V + first < n)
        body.template run<1>(nv * V + first);
}

struct act_fwd_body {
    int act;
    tbi_t out, inp;

    template <int V> __device__ __forceinline__ void run(size_t i) const
    {
        float f[V];
        load_v<V>(inp, i, f);
#pragma unroll
        for (int k = 0; k < V; k++)
            f[k] = act_fwd(act, f[k]);
        store_v<V>(out, i, f);
    }
};

template <int V>
__global__ void __launch_bounds__(EW_THREADS)
    act_fwd_kernel(int act, tbi_t out, tbi_t inp, size_t n)
{
    ew_loop<V>(act_fwd_body{act, out, inp}, n);
}

struct act_bwd_body {
    int act;
    tbi_t dinp, out, inp, dout;

    template <int V> __device__ __forceinline__ void run(size_t i) const
    {
        float x[V], d[V];
        load_v<V>(inp, i, x);
        load_v<V>(dout, i, d);
#pragma unroll
        for (int k = 0; k < V; k++) {
            float grad;
            if (act == TBI_ACT_GELU) {
                const float e = dev_gelu_erfc(x[k]);
                grad = dev_gelu_grad(x[k], e);
                x[k] = tbi_gelu_rule(x[k], e);
            } else {
                const float s = dev_quick_sigmoid(x[k]);
                grad = tbi_quickgelu_grad_rule(x[k], s);
                x[k] = tbi_quickgelu_rule(x[k], s);
            }
            d[k] = d[k] * grad;
        }
        store_v<V>(dinp, i, d);
        if (out.p)
            store_v<V>(out, i, x);
    }
};

template <int V>
__global__ void __launch_bounds__(EW_THREADS)
    act_bwd_kernel(int act, tbi_t dinp, tbi_t out, tbi_t inp, tbi_t dout, size_t n)
{
    ew_loop<V>(act_bwd_body{act, dinp, out, inp, dout}, n);
}

struct add_body {
    float *out;
    const float *a, *b;

    template <int V> __device__ __forceinline__ void run(size_t i) const
    {
        float x[V], y[V];
        load_f<V>(a + i, x);
        load_f<V>(b + i, y);
#pragma unroll
        for (int k = 0; k < V; k++)
            x[k] = x[k] + y[k];
        store_f<V>(out + i, x);
    }
};

template <int V>
__global__ void __launch_bounds__(EW_THREADS)
    add_kernel(float *out, const float *a, const float *b, size_t n)
{
    ew_loop<V>(add_body{out, a, b}, n);
}

/* One segment of scale_add and residual_add: out = a + s x over the segment at o (a NULL:
 * 0 + s x; scaled 0: a + x, no multiply); x f32 or bf16, out f32 or bf16. */
struct scale_add_body {
    tbi_t out;
    const float *a;
    tbi_t x;
    float s;
    int scaled;
    size_t o;

    template <int V> __device__ __forceinline__ void run(size_t i) const
    {
        float av[V], xv[V];
        if (a) {
            load_f<V>(a + o + i, av);
        } else {
#pragma unroll
            for (int k = 0; k < V; k++)
                av[k] = 0.0f;
        }
        load_v<V>(x, o + i, xv);
        if (scaled) {
#pragma unroll
            for (int k = 0; k < V; k++)
                av[k] = av[k] + s * xv[k];
        } else {
#pragma unroll
            for (int k = 0; k < V; k++)
                av[k] = av[k] + xv[k];
        }
        store_v<V>(out, o + i, av);
    }
};

/* Segment b of n at blockIdx.y (striding by gridDim.y past 65535 segments): no division per
 * element; scale NULL: no factor. */
template <int V>
static __device__ __forceinline__ void scale_add_segments(tbi_t out, const float *a, tbi_t x,
                                                          const float *scale, int B, size_t n)
{
    for (int b = blockIdx.y; b < B; b += gridDim.y)
        ew_loop<V>(scale_add_body{out, a, x, scale ? GL_LD(scale + b) : 1.0f, scale != nullptr,
                                  (size_t)b * n},
                   n);
}

/* The vector form only where every segment starts aligned (n a multiple of 8, or one
 * segment). */
template <int V>
__global__ void __launch_bounds__(EW_THREADS)
    scale_add_kernel(tbi_t out, const float *a, tbi_t x, const float *scale, int B, size_t n)
{
    scale_add_segments<V>(out, a, x, scale, B, n);
}

/* The same arithmetic under its own name, so that a profile and the cost report tell the
 * blocks' residual adds from drop path's scaling. */
template <int V>
__global__ void __launch_bounds__(EW_THREADS)
    residual_add_kernel(tbi_t out, const float *a, tbi_t x, const float *scale, int B, size_t n)
{
    scale_add_segments<V>(out, a, x, scale, B, n);
}

static int act_ok(int act)
{
    return act == TBI_ACT_GELU || act == TBI_ACT_QUICKGELU;
}

/* Whether every pointer given (NULL: none) is 16-byte aligned: the vector forms' need. */
static int ew_vec_ok(const void *a, const void *b, const void *c = NULL, const void *d = NULL)
{
    return tbc_aligned(a, 16) && tbc_aligned(b, 16) && tbc_aligned(c, 16) && tbc_aligned(d, 16);
}

/* Blocks for V elements per thread and step. */
static unsigned ew_blocks(size_t n, int V)
{
    return tbc_blocks((n + V - 1) / V, EW_THREADS);
}

static int tbc_act_fwd(tbi_backend *be, int act, tbi_t out, tbi_t inp, size_t n)
{
    cudaStream_t s = tbc_stream(be);
    if (!act_ok(act) || !out.p || !inp.p || !tbc_typed_ok(out) || !tbc_typed_ok(inp))
        return tbi_err(TB_EINVAL, "%s act_fwd: a shape, dtype or alignment it does not take",
                       be->name);
    if (n == 0)
        return 0;
    if (ew_vec_ok(out.p, inp.p))
        TBC_LAUNCH(act_fwd_kernel<EW_VEC>, ew_blocks(n, EW_VEC), EW_THREADS, 0, s, act, out, inp,
                   n);
    else
        TBC_LAUNCH(act_fwd_kernel<1>, ew_blocks(n, 1), EW_THREADS, 0, s, act, out, inp, n);
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
    if (ew_vec_ok(dinp.p, out.p, inp.p, dout.p))
        TBC_LAUNCH(act_bwd_kernel<EW_VEC>, ew_blocks(n, EW_VEC), EW_THREADS, 0, s, act, dinp, out,
                   inp, dout, n);
    else
        TBC_LAUNCH(act_bwd_kernel<1>, ew_blocks(n, 1), EW_THREADS, 0, s, act, dinp, out, inp, dout,
                   n);
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
    if (ew_vec_ok(out, a, b))
        TBC_LAUNCH(add_kernel<EW_VEC4>, ew_blocks(n, EW_VEC4), EW_THREADS, 0, s, out, a, b, n);
    else
        TBC_LAUNCH(add_kernel<1>, ew_blocks(n, 1), EW_THREADS, 0, s, out, a, b, n);
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
    const unsigned segs = B < 65535 ? B : 65535;
    const tbi_t xt = {(void *)x, TB_DTYPE_F32};
    if (n % EW_VEC == 0 && ew_vec_ok(out.p, a, x))
        TBC_LAUNCH(scale_add_kernel<EW_VEC>, dim3(ew_blocks(n, EW_VEC), segs), EW_THREADS, 0, s,
                   out, a, xt, scale, B, n);
    else
        TBC_LAUNCH(scale_add_kernel<1>, dim3(ew_blocks(n, 1), segs), EW_THREADS, 0, s, out, a, xt,
                   scale, B, n);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}

/* Without factors the B segments are one of B n (the vector form then needs no multiple of
 * 8: the loop's tail takes the rest). */
static int tbc_residual_add(tbi_backend *be, float *out, const float *a, tbi_t x,
                            const float *scale, int B, size_t n)
{
    cudaStream_t s = tbc_stream(be);
    if (!out || !a || !x.p || B < 0 || !tbc_aligned(out, 4) || !tbc_aligned(a, 4) ||
        !tbc_typed_ok(x) || !tbc_aligned(scale, 4))
        return tbi_err(TB_EINVAL, "%s residual_add: a shape, dtype or alignment it does not take",
                       be->name);
    if (B == 0 || n == 0)
        return 0;
    if (!scale)
        n *= (size_t)B, B = 1;
    const unsigned segs = B < 65535 ? B : 65535;
    const tbi_t ot = {out, TB_DTYPE_F32};
    /* 4 a thread (a float4 of a and out, 8 or 16 bytes of x): a warp's every access whole
     * sectors, where 8 would read each f32 operand as two half-used float4 passes */
    if ((B == 1 || n % EW_VEC4 == 0) && ew_vec_ok(out, a, x.p))
        TBC_LAUNCH(residual_add_kernel<EW_VEC4>, dim3(ew_blocks(n, EW_VEC4), segs), EW_THREADS,
                   0, s, ot, a, x, scale, B, n);
    else
        TBC_LAUNCH(residual_add_kernel<1>, dim3(ew_blocks(n, 1), segs), EW_THREADS, 0, s, ot, a, x,
                   scale, B, n);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}
