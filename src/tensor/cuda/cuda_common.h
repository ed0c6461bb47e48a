/* src/tensor/cuda/cuda_common.h - what the .cu files of src/tensor/cuda share: the backend's
 * context and its launchers' prototypes (one per op of the op list: tbc_<op>, the CPU op's
 * parameters, static in the one translation unit backend.cu makes, which declares them), bf16, the
 * launch
 * (<<<>>> under nvcc; with TBC_EMULATE, emu/emulate.h's checked, queued launch on the CPU,
 * included before this), the host runtime seam (tbc_rt_*: the CUDA runtime, or the emulated
 * device's), dtype-generic loads and stores, the warp sum. C++ only. */
#ifndef TUBELET_TENSOR_CUDA_COMMON_H
#define TUBELET_TENSOR_CUDA_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" {
#include "core/internal.h"
#include "tensor/backend.h"
}
#include "tubelet/base.h"

#include "tensor/cuda/lt.h"

typedef __nv_bfloat16 bf16;

struct tbc_gemm_cache; /* matmul.cu */
/* cuBLASLt's workspace, bytes: Hopper's kernels want 32 MiB; the emulated cuBLASLt none. */
#ifdef TBC_EMULATE
enum { TBC_LT_WORKSPACE = 256 };
#else
enum { TBC_LT_WORKSPACE = 32 << 20 };
#endif

/* The backend's state (be->ctx). Kernels queue on compute; the data-parallel reductions on
 * comm, ordered by the events. scratch: device memory an op borrows for its own duration
 * (tbc_scratch), grown as needed. */
struct tbc_ctx {
    cudaStream_t compute, comm;
    int ev_compute, ev_comm; /* event handles: tbc_rt_event_* (-1: none) */
    void *scratch;
    size_t scratch_bytes;
    const struct tbc_lt *api;     /* cuBLASLt's functions (lt.h): the library's, or emulated */
    void *lt, *lt_ws;             /* cuBLASLt's handle and workspace */
    struct tbc_gemm_cache *gemms; /* the products' plans, one per shape */
    int n_gemms, cap_gemms;
    const struct tbc_nccl *nccl; /* NCCL's functions (nccl.h), with more than one process */
    void *nccl_comm;             /* its communicator */
    /* Copies to the device of TBC_STAGE_MIN bytes and more go through a ring of two pinned
     * host slots (backend.cu's to_device): the host fills one while the other's copy runs,
     * and the device reads pinned memory as the stream reaches the copy, so the host is not
     * held until the stream drains. Allocated at the first such copy. */
    void *stage[2];
    int stage_ev[2]; /* recorded after each slot's copy: the slot is free once it is done */
    int stage_next;
};
enum { TBC_STAGE_MIN = 1 << 20, TBC_STAGE_BYTES = 16 << 20 };

static inline struct tbc_ctx *tbc_ctx_of(tbi_backend *be)
{
    return (struct tbc_ctx *)be->ctx;
}

static inline cudaStream_t tbc_stream(tbi_backend *be)
{
    return tbc_ctx_of(be)->compute;
}

/* The last failed runtime call's error, kept for the message the op writes. */
static cudaError_t tbc_cuda_error;
#define TB_CUDA_OR_RETURN(call)                                                                    \
    do {                                                                                           \
        const cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                                   \
            tbc_cuda_error = e_;                                                                   \
            return TB_ECUDA;                                                                       \
        }                                                                                          \
    } while (0)

/* Shared memory is read and written through SH_LD(p) and SH_ST(p, v) (plain loads and stores
 * here; on the emulated device they feed its race check, emu/emulate.h). */
#ifndef TBC_EMULATE
#define SH_LD(p) (*(p))
#define SH_ST(p, v) (*(p) = (v))
#define DYNAMIC_SMEM(name) extern __shared__ uint4 name[]
#define TBC_LAUNCH(kernel, grid, block, smem, stream, ...)                                         \
    kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#endif

/* Global memory is read and written through GL_LD(p) and GL_ST(p, v) (plain loads and stores
 * here; on the emulated device they feed its cost count, emu/emulate.h, which defines them). A
 * 16-byte vector is one access of a uint4 or float4 pointer. */
#ifndef TBC_EMULATE
#define GL_LD(p) (*(p))
#define GL_ST(p, v) (*(p) = (v))
#endif

/* ---- the host runtime seam: 0 or TB_ECUDA ------------------------------------------------ */
#ifndef TBC_EMULATE
#define TBC_RT(call) ((call) == cudaSuccess ? 0 : TB_ECUDA)
static inline int tbc_rt_malloc(void **p, size_t n)
{
    return TBC_RT(cudaMalloc(p, n ? n : 1));
}
static inline int tbc_rt_free(void *p)
{
    return TBC_RT(cudaFree(p));
}
static inline int tbc_rt_memset(void *p, size_t n, cudaStream_t s)
{
    return TBC_RT(cudaMemsetAsync(p, 0, n, s));
}
static inline int tbc_rt_to_device(void *d, const void *h, size_t n, cudaStream_t s)
{
    return TBC_RT(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s));
}
static inline int tbc_rt_to_host(void *h, const void *d, size_t n, cudaStream_t s)
{
    if (cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s) != cudaSuccess)
        return TB_ECUDA;
    return TBC_RT(cudaStreamSynchronize(s));
}
static inline int tbc_rt_copy(void *d, const void *src, size_t n, cudaStream_t s)
{
    return TBC_RT(cudaMemcpyAsync(d, src, n, cudaMemcpyDeviceToDevice, s));
}
static inline int tbc_rt_sync(void)
{
    return TBC_RT(cudaDeviceSynchronize());
}
static inline int tbc_rt_host_alloc(void **p, size_t n)
{
    return TBC_RT(cudaHostAlloc(p, n, cudaHostAllocDefault));
}
static inline void tbc_rt_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}
/* From pinned host memory: the device reads it when the stream reaches the copy. */
static inline int tbc_rt_from_pinned(void *d, const void *h, size_t n, cudaStream_t s)
{
    return TBC_RT(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s));
}
static inline int tbc_rt_stream(cudaStream_t *s)
{
    return TBC_RT(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
}
static inline void tbc_rt_stream_destroy(cudaStream_t s)
{
    cudaStreamDestroy(s);
}
/* Events by a small handle, as on the emulated device: a table of 64, each given back at
 * close (a process opens and closes backends any number of times). */
static cudaEvent_t tbc_events[64];
static unsigned char tbc_event_used[64];
static inline int tbc_rt_event(int *ev)
{
    for (int i = 0; i < 64; i++)
        if (!tbc_event_used[i]) {
            if (cudaEventCreateWithFlags(&tbc_events[i], cudaEventDisableTiming) != cudaSuccess)
                return TB_ECUDA;
            tbc_event_used[i] = 1;
            *ev = i;
            return 0;
        }
    return TB_ECUDA;
}
static inline void tbc_rt_event_destroy(int ev)
{
    if (ev >= 0 && ev < 64 && tbc_event_used[ev]) {
        cudaEventDestroy(tbc_events[ev]);
        tbc_event_used[ev] = 0;
    }
}
static inline int tbc_rt_record(int ev, cudaStream_t s)
{
    return TBC_RT(cudaEventRecord(tbc_events[ev], s));
}
static inline int tbc_rt_wait(cudaStream_t s, int ev)
{
    return TBC_RT(cudaStreamWaitEvent(s, tbc_events[ev], 0));
}
/* The host waits for ev's latest record. */
static inline int tbc_rt_event_sync(int ev)
{
    return TBC_RT(cudaEventSynchronize(tbc_events[ev]));
}
static inline int tbc_rt_mem_info(size_t *free_b, size_t *total)
{
    return TBC_RT(cudaMemGetInfo(free_b, total));
}
static inline int tbc_rt_last_error(void)
{
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        tbc_cuda_error = e;
    return TBC_RT(e);
}
static inline const char *tbc_rt_error_string(void)
{
    return cudaGetErrorString(tbc_cuda_error);
}
#else
static inline int tbc_rt_malloc(void **p, size_t n)
{
    *p = emu_dev_malloc(n ? n : 1);
    return *p ? 0 : TB_ENOMEM;
}
static inline int tbc_rt_free(void *p)
{
    return emu_dev_free(p) ? TB_ECUDA : 0;
}
static inline int tbc_rt_memset(void *p, size_t n, cudaStream_t s)
{
    emu_memset(p, 0, n, s);
    return 0;
}
static inline int tbc_rt_to_device(void *d, const void *h, size_t n, cudaStream_t s)
{
    emu_copy_in(d, h, n, s);
    return 0;
}
static inline int tbc_rt_to_host(void *h, const void *d, size_t n, cudaStream_t s)
{
    (void)s;
    emu_copy_out(h, d, n);
    return 0;
}
static inline int tbc_rt_copy(void *d, const void *src, size_t n, cudaStream_t s)
{
    emu_copy_dev(d, src, n, s);
    return 0;
}
static inline int tbc_rt_sync(void)
{
    emu_drain();
    return 0;
}
static inline int tbc_rt_host_alloc(void **p, size_t n)
{
    *p = malloc(n ? n : 1);
    return *p ? 0 : TB_ENOMEM;
}
static inline void tbc_rt_host_free(void *p)
{
    free(p);
}
static inline int tbc_rt_from_pinned(void *d, const void *h, size_t n, cudaStream_t s)
{
    emu_copy_pinned(d, h, n, s);
    return 0;
}
static inline int tbc_rt_stream(cudaStream_t *s)
{
    *s = emu_stream_create();
    return 0;
}
static inline void tbc_rt_stream_destroy(cudaStream_t s)
{
    emu_stream_destroy(s);
}
static inline int tbc_rt_event(int *ev)
{
    *ev = emu_event_create();
    return 0;
}
static inline void tbc_rt_event_destroy(int ev)
{
    if (ev >= 0)
        emu_event_destroy(ev);
}
static inline int tbc_rt_record(int ev, cudaStream_t s)
{
    emu_event_record(ev, s);
    return 0;
}
static inline int tbc_rt_wait(cudaStream_t s, int ev)
{
    emu_stream_wait(s, ev);
    return 0;
}
static inline int tbc_rt_event_sync(int ev)
{
    (void)ev;
    emu_drain(); /* every record is done after it */
    return 0;
}
/* The emulated device's memory: TBC_EMU_MEM_GB (default 80, an H100's), or less where the
 * host has less available (emulated device memory is host memory). */
static inline int tbc_rt_mem_info(size_t *free_b, size_t *total)
{
    const char *g = getenv("TBC_EMU_MEM_GB");
    *total = (size_t)((g ? atof(g) : 80.0) * 1073741824.0);
    const uint64_t host = tbi_host_mem_available();
    *free_b = host < *total ? (size_t)host : *total;
    return 0;
}
static inline int tbc_rt_last_error(void)
{
    const cudaError_t e = emu_get_last_error();
    if (e != cudaSuccess)
        tbc_cuda_error = e;
    return e == cudaSuccess ? 0 : TB_ECUDA;
}
/* The emulator refuses launches with these two (emu/emulate.h says why on stderr). */
static inline const char *tbc_rt_error_string(void)
{
    return tbc_cuda_error == cudaErrorInvalidConfiguration ? "invalid configuration argument"
           : tbc_cuda_error == cudaErrorInvalidValue       ? "invalid argument"
                                                           : "an error of the emulated device";
}
#endif

/* A launch's error (refused configuration), as the op's return; 0 when it was queued. */
static inline int tbc_launched(tbi_backend *be, const char *op)
{
    if (tbc_rt_last_error())
        return tbi_err(TB_ECUDA, "%s %s: the kernel launch failed: %s", be->name, op,
                       tbc_rt_error_string());
    return 0;
}

/* bytes of device memory for the op that asks, valid until the next call: the compute stream
 * finishes with the old buffer before a bigger one replaces it. */
static inline int tbc_scratch(tbi_backend *be, size_t bytes, void **out)
{
    struct tbc_ctx *c = tbc_ctx_of(be);
    if (bytes > c->scratch_bytes) {
        if (c->scratch && tbc_rt_free(c->scratch))
            return tbi_err(TB_ECUDA, "%s: freeing scratch memory", be->name);
        c->scratch = NULL;
        c->scratch_bytes = 0;
        const size_t grown = bytes + bytes / 2;
        if (tbc_rt_malloc(&c->scratch, grown))
            return tbi_err(TB_ENOMEM, "%s: %zu bytes of scratch device memory", be->name, grown);
        c->scratch_bytes = grown;
    }
    *out = c->scratch;
    return 0;
}

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
    return t.dt == TB_DTYPE_BF16 ? __bfloat162float(GL_LD((const bf16 *)t.p + i))
                                 : GL_LD((const float *)t.p + i);
}

static __device__ __forceinline__ void store_t(tbi_t t, size_t i, float v)
{
    if (t.dt == TB_DTYPE_BF16)
        GL_ST((bf16 *)t.p + i, __float2bfloat16(v));
    else
        GL_ST((float *)t.p + i, v);
}

/* The same where the type is a template's. */
static __device__ __forceinline__ float get(const float *p)
{
    return GL_LD(p);
}

static __device__ __forceinline__ float get(const bf16 *p)
{
    return __bfloat162float(GL_LD(p));
}

static __device__ __forceinline__ void put(float *p, float v)
{
    GL_ST(p, v);
}

static __device__ __forceinline__ void put(bf16 *p, float v)
{
    GL_ST(p, __float2bfloat16(v));
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
