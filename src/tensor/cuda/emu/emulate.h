/* src/tensor/cuda/emu/emulate.h - a CUDA device on the CPU, to run the kernels of
 * src/tensor/cuda (compiled as C++ with TBC_EMULATE: the cuda-emu backend, emu/backend_emu.cpp,
 * and the tests of tests/gpu) and check their indexing with no GPU: each thread of a
 * block is a ucontext coroutine on one OS thread, blocks run one after another; __syncthreads
 * and the warp shuffles are barriers that move data as the CUDA guide documents. It checks
 * what a GPU checks late or never: launch limits (threads, block and grid dimensions, dynamic
 * shared memory against the architecture's opt-in maximum and the kernel's opt-in), shared
 * memory filled with NaN bytes before each block, a warp collective with a lane that exited,
 * and (emulate_mem.h) device memory between guard pages, NaN when fresh. It models no timing,
 * no memory ordering and no bank conflicts. emulate_ptx.h adds attention.cu's ldmatrix,
 * mma.sync and cp.async; emulate_rt.h the host runtime (streams run in an adversarial order).
 * The CUDA qualifiers are defined away here, the one place in the tree that names them. */
#ifndef TUBELET_TESTS_EMULATE_H
#define TUBELET_TESTS_EMULATE_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <algorithm>
#include <functional>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "emulate_cost.h"
#include "emulate_mem.h"

/* cuda_runtime.h defined these as host-compiler attributes; here they mean nothing. */
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
/* Kernels take shared memory through DYNAMIC_SMEM alone, which is poisoned before each block;
 * a static __shared__ array would be a host static here that nothing poisons, so it does not
 * compile. */
#undef __shared__
using std::max;
using std::min;
typedef __nv_bfloat16 bf16;

struct emu_idx {
    unsigned x, y, z;
};
static emu_idx threadIdx, blockIdx, gridDim, blockDim;

struct emu_copy {
    void *dst;
    const void *src;
    int valid;
    long group;
    int line;
};

struct emu_thread {
    ucontext_t ctx;
    char *stack;
    int done, waiting; /* waiting: 1 + the barrier it waits on, or 0 */
    unsigned gen;      /* that barrier's generation when it arrived */
    std::vector<emu_copy> copies;
    long committed;
};

/* One exchange slot per thread for the warp collectives. */
struct emu_slot {
    const uint16_t *p;
    uint32_t a[4], b[2];
    float c[4], v;
};

struct emu_barrier {
    int arrived;
    unsigned gen;
};

enum { EMU_STACK_BYTES = 256 * 1024 };
static std::vector<emu_thread> emu_threads;
static std::vector<char *> emu_stacks;    /* kept from launch to launch: allocating is the cost */
static std::vector<emu_barrier> emu_bars; /* [0] the block, [1 + w] warp w */
static std::vector<emu_slot> emu_slots;
static int emu_cur;
static ucontext_t emu_main;
static std::function<void()> emu_body;
static unsigned char *emu_smem_base;
static size_t emu_smem_size;
static long emu_n_collectives;

/* A library's refusal of a call, said on stderr (a test device): "emulate: LIB: ...". */
static inline void emu_say(const char *lib, const char *fmt, va_list ap)
{
    fprintf(stderr, "emulate: %s: ", lib);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
}

static void emu_fail(const char *what)
{
    fprintf(stderr, "emulate: %s (%s)\n", what, emu_where);
    abort();
}

/* Barrier bar over threads [first, first + count): returns once all live ones arrived. */
static void emu_wait(int bar, int first, int count)
{
    emu_barrier &b = emu_bars[bar];
    int live = 0;
    for (int i = first; i < first + count && i < (int)emu_threads.size(); i++)
        live += !emu_threads[i].done;
    if (++b.arrived == live) {
        b.arrived = 0;
        b.gen++;
        return;
    }
    emu_thread &t = emu_threads[emu_cur];
    t.waiting = bar + 1;
    t.gen = b.gen;
    swapcontext(&t.ctx, &emu_main);
}

static int emu_lane(void)
{
    return emu_cur % 32;
}

/* A collective of the whole warp (mask 0xffffffff): on a GPU, one with a lane that exited or
 * does not exist (a block of 48 threads) is undefined; here it fails. */
static void emu_warp_sync(void)
{
    const int w = emu_cur / 32;
    if ((w + 1) * 32 > (int)emu_threads.size())
        emu_fail("warp collective in a warp of fewer than 32 threads");
    for (int i = w * 32; i < w * 32 + 32; i++)
        if (emu_threads[i].done)
            emu_fail("warp collective with a full mask after a lane of the warp exited");
    emu_wait(1 + w, w * 32, 32);
}

/* A global access of thread emu_cur: counted when the launch is (emulate_cost.h). */
template <class T> static inline T *emu_gl(T *p, int write)
{
    if (emu_cost.on)
        emu_cost_access(emu_cur, p, sizeof(T), write);
    return p;
}

static void __syncthreads(void)
{
    emu_wait(0, 0, (int)emu_threads.size());
}

static emu_slot &emu_my_slot(void)
{
    return emu_slots[emu_cur];
}

static emu_slot &emu_lane_slot(int lane)
{
    return emu_slots[emu_cur / 32 * 32 + lane];
}

static void emu_full_mask(unsigned mask)
{
    if (mask != 0xffffffffu)
        emu_fail("a warp shuffle with a partial mask (only full warps are emulated)");
}

static inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask)
{
    emu_full_mask(mask);
    emu_my_slot().v = v;
    emu_warp_sync();
    float r = emu_lane_slot(emu_lane() ^ lane_mask).v;
    emu_warp_sync();
    emu_n_collectives++;
    return r;
}

static inline float __shfl_sync(unsigned mask, float v, int src_lane)
{
    emu_full_mask(mask);
    emu_my_slot().v = v;
    emu_warp_sync();
    float r = emu_lane_slot(src_lane % 32).v;
    emu_warp_sync();
    emu_n_collectives++;
    return r;
}

static void emu_trampoline(void)
{
    emu_body();
    emu_threads[emu_cur].done = 1;
}

/* Out of line: getcontext returns twice, which a caller's loop variables may not survive. */
static __attribute__((noinline)) void emu_make_thread(emu_thread *t)
{
    getcontext(&t->ctx);
    t->ctx.uc_stack.ss_sp = t->stack;
    t->ctx.uc_stack.ss_size = EMU_STACK_BYTES;
    t->ctx.uc_link = &emu_main;
    makecontext(&t->ctx, emu_trampoline, 0);
}

/* ---- shared-memory races -------------------------------------------------------------------
 * Every access to shared memory through the primitives (ldmatrix, cp.async: emulate_ptx.h) and
 * SH_LD / SH_ST (cuda_common.h: the kernels' plain loads and stores of shared memory) is
 * recorded per 4-byte word with its thread, the block's barrier count and the warp's
 * collective count: a word written by one thread and read or written by another with no
 * barrier between them (no __syncthreads, nor a warp collective where both are of one warp) is
 * an error naming both threads and lines, whatever order the threads happen to run in here.
 * A cp.async writes its destination when issued and again when its wait retires it. Not seen:
 * shared memory touched another way (a kernel must use the accessors), atomics on it. */
struct emu_sh_acc {
    int32_t thread; /* -1: none */
    uint32_t eb, ew;
    int32_t line;
};

struct emu_sh_word {
    emu_sh_acc w, r1, r2; /* the last write, the last read, the one before by another thread */
};

static std::vector<emu_sh_word> emu_sh;
static long emu_n_sh_checked;

static emu_sh_acc emu_sh_now(int line)
{
    return emu_sh_acc{emu_cur, emu_bars[0].gen, emu_bars[1 + (size_t)emu_cur / 32].gen, line};
}


static int emu_sh_ordered(const emu_sh_acc &a, const emu_sh_acc &now)
{
    return a.thread < 0 || a.thread == now.thread || now.eb > a.eb ||
           (a.thread / 32 == now.thread / 32 && now.ew > a.ew);
}

static void emu_sh_race(const char *what, const emu_sh_acc &a, const emu_sh_acc &b, size_t byte)
{
    fprintf(stderr,
            "emulate: shared-memory race: byte %zu %s by thread %d (line %d) and thread %d "
            "(line %d) with no barrier between (%s)\n",
            byte, what, a.thread, a.line, b.thread, b.line, emu_where);
    abort();
}

/* Thread emu_cur reads (write 0) or writes bytes at p of shared memory, at line. */
static inline void emu_sh_access(const void *p, size_t bytes, int write, int line)
{
    const unsigned char *c = (const unsigned char *)p;
    if (c < emu_smem_base || c + bytes > emu_smem_base + emu_smem_size)
        emu_fail("a shared-memory access outside the launch's dynamic shared memory");
    const emu_sh_acc now = emu_sh_now(line);
    const size_t first = (size_t)(c - emu_smem_base) / 4;
    const size_t last = (size_t)(c + bytes - 1 - emu_smem_base) / 4;
    for (size_t i = first; i <= last; i++) {
        emu_sh_word &w = emu_sh[i];
        emu_n_sh_checked++;
        if (!emu_sh_ordered(w.w, now))
            emu_sh_race(write ? "written twice" : "written and read", w.w, now, 4 * i);
        if (write) {
            if (!emu_sh_ordered(w.r1, now))
                emu_sh_race("read and written", w.r1, now, 4 * i);
            if (!emu_sh_ordered(w.r2, now))
                emu_sh_race("read and written", w.r2, now, 4 * i);
            w.w = now;
        } else {
            if (w.r1.thread != now.thread)
                w.r2 = w.r1;
            w.r1 = now;
        }
    }
}

template <class T> static T *emu_sh_rd(T *p, int line)
{
    emu_sh_access(p, sizeof(T), 0, line);
    return p;
}

template <class T> static T *emu_sh_wr(T *p, int line)
{
    emu_sh_access(p, sizeof(T), 1, line);
    return p;
}

/* ---- launch limits ------------------------------------------------------------------------
 * The launch is checked against one architecture's limits, by default sm_86's: of the three we
 * build for (80, 86, 90) the least dynamic shared memory, so what passes here launches on all.
 * Opt-in maxima per block (CUDA C++ Programming Guide, technical specifications per compute
 * capability; the Ampere and Hopper tuning guides): 163 KiB on 8.0, 99 KiB on 8.6 and 8.9,
 * 227 KiB on 9.0; above 48 KiB only after cudaFuncSetAttribute's
 * cudaFuncAttributeMaxDynamicSharedMemorySize for that kernel. */
static int emu_arch = 86;
static cudaError_t emu_error = cudaSuccess; /* sticky until cudaGetLastError, as the runtime's */
static long emu_n_refused;

struct emu_attr {
    const void *fn;
    int max_dynamic_smem;
};
static std::vector<emu_attr> emu_attrs;

static size_t emu_smem_optin(int arch)
{
    return (size_t)(arch == 80 ? 163 : arch == 90 ? 227 : 99) * 1024;
}

template <class F> static cudaError_t emu_func_set_attribute(F *fn, cudaFuncAttribute attr, int v)
{
    const void *key = reinterpret_cast<const void *>(fn);
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
        return cudaSuccess;
    if (v < 0 || (size_t)v > emu_smem_optin(emu_arch))
        return cudaErrorInvalidValue;
    for (emu_attr &a : emu_attrs)
        if (a.fn == key) {
            a.max_dynamic_smem = v;
            return cudaSuccess;
        }
    emu_attrs.push_back(emu_attr{key, v});
    return cudaSuccess;
}

static cudaError_t emu_get_last_error(void)
{
    const cudaError_t e = emu_error;
    emu_error = cudaSuccess;
    return e;
}

static int emu_refuse(cudaError_t e, const char *why, unsigned long long a, unsigned long long b)
{
    fprintf(stderr, "emulate: launch refused on sm_%d: %s (%llu, limit %llu)\n", emu_arch, why, a,
            b);
    emu_error = e;
    emu_n_refused++;
    return 0;
}

static int emu_launch_ok(const void *fn, dim3 g, dim3 b, size_t smem)
{
    const unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    const cudaError_t cfg = cudaErrorInvalidConfiguration;
    if (!g.x || !g.y || !g.z || !threads)
        return emu_refuse(cfg, "an empty grid or block", 0, 1);
    if (threads > 1024)
        return emu_refuse(cfg, "threads per block", threads, 1024);
    if (b.x > 1024 || b.y > 1024 || b.z > 64)
        return emu_refuse(cfg, "a block dimension (x, y <= 1024, z <= 64)", std::max(b.x, b.y),
                          b.z > 64 ? 64 : 1024);
    if (g.x > 2147483647u)
        return emu_refuse(cfg, "grid x", g.x, 2147483647u);
    if (g.y > 65535 || g.z > 65535)
        return emu_refuse(cfg, "grid y or z", std::max(g.y, g.z), 65535);
    if (smem > emu_smem_optin(emu_arch))
        return emu_refuse(cudaErrorInvalidValue, "dynamic shared memory bytes", smem,
                          emu_smem_optin(emu_arch));
    if (smem > 48 * 1024) {
        int opted = 0;
        for (const emu_attr &a : emu_attrs)
            opted |= a.fn == fn && (size_t)a.max_dynamic_smem >= smem;
        if (!opted)
            return emu_refuse(cudaErrorInvalidValue,
                              "dynamic shared memory over 48 KiB without the kernel's opt-in", smem,
                              48 * 1024);
    }
    return 1;
}

/* Runs the block's threads until all are done; a round where none can run is a deadlock. */
/* The order threads run in between barriers: by index, or (TBC_EMU_THREADS=reverse) the
 * highest first. A read of what another thread writes in the same barrier interval shows in one
 * of the two orders (NaN from fresh memory, or a stale value): the suite runs test_backend in
 * both. */
static int emu_reverse_threads(void)
{
    static int reverse = -1;
    if (reverse < 0) {
        const char *o = getenv("TBC_EMU_THREADS");
        reverse = o && !strcmp(o, "reverse");
    }
    return reverse;
}

static void emu_run_block(unsigned threads)
{
    const int reverse = emu_reverse_threads();
    for (;;) {
        int ran = 0, left = 0;
        for (unsigned k = 0; k < threads; k++) {
            const unsigned i = reverse ? threads - 1 - k : k;
            emu_thread &t = emu_threads[i];
            if (t.done)
                continue;
            left++;
            if (t.waiting && emu_bars[t.waiting - 1].gen == t.gen)
                continue;
            t.waiting = 0;
            emu_cur = (int)i;
            threadIdx =
                emu_idx{i % blockDim.x, i / blockDim.x % blockDim.y, i / (blockDim.x * blockDim.y)};
            swapcontext(&emu_main, &t.ctx);
            ran = 1;
        }
        if (!left)
            return;
        if (!ran)
            emu_fail("deadlock: threads wait at barriers no one else reaches");
    }
}

/* Runs body as every thread of every block of grid, blocks one after another. Threads are
 * numbered x fastest, warps are 32 consecutive numbers, as on the hardware. */
static void emu_run_grid(const char *kernel, dim3 grid, dim3 block, size_t smem_bytes,
                         const std::function<void()> &body, const char *cost = nullptr)
{
    const unsigned threads = block.x * block.y * block.z;
    gridDim = emu_idx{grid.x, grid.y, grid.z};
    blockDim = emu_idx{block.x, block.y, block.z};
    /* Shared memory between guard pages too: a read past the dynamic size faults. */
    const size_t smem_alloc = (smem_bytes + 15) / 16 * 16;
    const emu_place place = emu_placement;
    emu_placement = EMU_PLACE_END;
    emu_smem_base = (unsigned char *)emu_malloc(smem_alloc);
    emu_allocs.back().tracked = 0;
    emu_placement = place;
    emu_smem_size = smem_bytes;
    emu_body = body;
    while (emu_stacks.size() < threads)
        emu_stacks.push_back((char *)malloc(EMU_STACK_BYTES));
    /* One block cannot race with another: only grids of several are tracked. A counted launch
     * (emulate_cost.h) is a measurement: it skips the check, whose page faults cost more than
     * the count. */
    const int track = !cost && (unsigned long long)grid.x * grid.y * grid.z > 1;
    if (track)
        emu_track_begin();
    if (cost)
        emu_cost_begin(threads);
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                blockIdx = emu_idx{bx, by, bz};
                snprintf(emu_where, sizeof(emu_where), "%s, block (%u, %u, %u) of (%u, %u, %u)",
                         kernel, bx, by, bz, grid.x, grid.y, grid.z);
                /* NaN bytes, not zeros: a read of what no thread wrote shows. */
                memset(emu_smem_base, 0xff, smem_alloc);
                emu_sh.assign(smem_alloc / 4, emu_sh_word{{-1, 0, 0, 0}, {-1, 0, 0, 0},
                                                          {-1, 0, 0, 0}});
                emu_threads.assign(threads, emu_thread());
                emu_bars.assign(1 + (threads + 31) / 32, emu_barrier{0, 0});
                emu_slots.assign(threads, emu_slot());
                for (unsigned i = 0; i < threads; i++) {
                    emu_threads[i].stack = emu_stacks[i];
                    emu_make_thread(&emu_threads[i]);
                }
                if (cost)
                    emu_cost_block_begin(threads);
                emu_run_block(threads);
                if (cost)
                    emu_cost_block_end();
                if (track)
                    emu_track_block((bz * grid.y + by) * grid.x + bx, emu_where);
            }
    if (track)
        emu_track_end();
    if (cost)
        emu_cost_end(cost, kernel, grid, block, smem_bytes);
    snprintf(emu_where, sizeof(emu_where), "outside any kernel");
    emu_free(emu_smem_base);
    emu_smem_base = nullptr;
}

#include "emulate_rt.h"

/* The threads' stacks, kept from launch to launch, back to the system (a backend's close). */
static inline void emu_release(void)
{
    emu_drain();
    for (char *st : emu_stacks)
        free(st);
    emu_stacks.clear();
}

/* A launch: refused at once as a GPU would (cudaGetLastError then says so; nothing runs), else
 * queued on the stream (emulate_rt.h) with its arguments copied, as a launch copies them; the
 * null stream runs it at once. */
static void emu_launch(const void *fn, const char *kernel, dim3 grid, dim3 block,
                       size_t smem_bytes, cudaStream_t s, std::function<void()> body)
{
    if (!emu_launch_ok(fn, grid, block, smem_bytes))
        return;
    emu_n_launched++;
    const std::string cost = emu_cost_path(); /* read now: the program may unset it later */
    emu_enqueue(s, [=] {
        emu_run_grid(kernel, grid, block, smem_bytes, body, cost.empty() ? nullptr : cost.c_str());
    });
}

/* What src/tensor/cuda/cuda_common.h defines for nvcc, here for the emulator. */
#define DYNAMIC_SMEM(name) uint4 *name = (uint4 *)emu_smem_base
#define TBC_LAUNCH(kernel, grid, block, smem, stream, ...)                                         \
    emu_launch(reinterpret_cast<const void *>(&kernel), #kernel, dim3(grid), dim3(block), smem,    \
               stream, [=] { kernel(__VA_ARGS__); })
#define GL_LD(p) (*emu_gl((p), 0))
#define GL_ST(p, v) (*emu_gl((p), 1) = (v))
#define SH_LD(p) (*emu_sh_rd((p), __LINE__))
#define SH_ST(p, v) (*emu_sh_wr((p), __LINE__) = (v))
#define cudaFuncSetAttribute(fn, attr, value) emu_func_set_attribute(&fn, attr, value)
#define cudaGetLastError() emu_get_last_error()

#endif /* TUBELET_TESTS_EMULATE_H */
