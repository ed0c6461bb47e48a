/* src/tensor/cuda/cuda_common.h - what the .cu files of src/tensor/cuda share: bf16, the error
 * return, the launch (<<<>>> under nvcc; with TBC_EMULATE, tests/gpu/emulate.h's checked
 * launch on the CPU, included before this), dtype-generic loads and stores, the warp sum. C++
 * only, for .cu files and their emulation; the launchers' C headers are cuda_attention.h and
 * cuda_ops.h. */
#ifndef TUBELET_TENSOR_CUDA_COMMON_H
#define TUBELET_TENSOR_CUDA_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "tensor/cuda/cuda_ops.h" /* backend.h, with C linkage */
#include "tubelet/base.h"

typedef __nv_bfloat16 bf16;

#define TB_CUDA_OR_RETURN(call)                                                                    \
    do {                                                                                           \
        if ((call) != cudaSuccess)                                                                 \
            return TB_ECUDA;                                                                       \
    } while (0)

#ifndef TBC_EMULATE
#define DYNAMIC_SMEM(name) extern __shared__ uint4 name[]
#define TBC_LAUNCH(kernel, grid, block, smem, stream, ...)                                         \
    kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#endif

static inline int tbc_aligned(const void *p, size_t a)
{
    return ((uintptr_t)p & (a - 1)) == 0;
}

/* A typed tensor the kernels can take: f32 or bf16, p aligned to its element (NULL: none). */
static inline int tbc_typed_ok(tbi_t t)
{
    return (t.dt == TB_DTYPE_F32 || t.dt == TB_DTYPE_BF16) && tbc_aligned(t.p, tbi_dt_size(t.dt));
}

/* Element i of a typed tensor, widened exactly; and stored rounded to nearest even, as the
 * CPU op's store. The dtype is uniform across a launch, so the branch costs no divergence. */
static __device__ __forceinline__ float load_t(tbi_t t, size_t i)
{
    return t.dt == TB_DTYPE_BF16 ? __bfloat162float(((const bf16 *)t.p)[i])
                                 : ((const float *)t.p)[i];
}

static __device__ __forceinline__ void store_t(tbi_t t, size_t i, float v)
{
    if (t.dt == TB_DTYPE_BF16)
        ((bf16 *)t.p)[i] = __float2bfloat16(v);
    else
        ((float *)t.p)[i] = v;
}

/* The same where the type is a template's. */
static __device__ __forceinline__ float get(const float *p)
{
    return *p;
}

static __device__ __forceinline__ float get(const bf16 *p)
{
    return __bfloat162float(*p);
}

static __device__ __forceinline__ void put(float *p, float v)
{
    *p = v;
}

static __device__ __forceinline__ void put(bf16 *p, float v)
{
    *p = __float2bfloat16(v);
}

/* The sum of v over the warp, in every lane (a butterfly: the same order in every lane). */
static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Blocks for a grid-stride loop over n items: one item per thread up to 8192 blocks (enough to
 * fill any of the GPUs we build for), then each thread takes several. */
static inline unsigned tbc_blocks(size_t n, unsigned threads)
{
    const size_t b = (n + threads - 1) / threads;
    return b < 8192 ? (unsigned)b : 8192u;
}

#endif /* TUBELET_TENSOR_CUDA_COMMON_H */
