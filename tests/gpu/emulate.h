/* tests/gpu/emulate.h - just enough of a CUDA thread block on the CPU to run the kernels of
 * src/tensor/cuda/attention.cu (compiled as C++ with TBC_EMULATE) and check their indexing
 * with no GPU: each thread is a ucontext coroutine on one OS thread; sync_block, shfl_xor,
 * ldmatrix and mma.sync are barriers across the block or warp that move data as the PTX ISA
 * documents; cp.async copies at the wait that retires it (so a read before its wait sees
 * stale data). It models no timing, no memory ordering and no bank conflicts, and the
 * products are plain fp32 sums. Used by tests/gpu/attention_emulate.cpp only. The CUDA
 * qualifiers are defined away here, the one place in the tree that names them. */
#ifndef TUBELET_TESTS_EMULATE_H
#define TUBELET_TESTS_EMULATE_H

#include <math.h>
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
};

struct emu_thread {
    ucontext_t ctx;
    std::vector<char> stack;
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

static std::vector<emu_thread> emu_threads;
static std::vector<emu_barrier> emu_bars; /* [0] the block, [1 + w] warp w */
static std::vector<emu_slot> emu_slots;
static int emu_cur;
static ucontext_t emu_main;
static std::function<void()> emu_body;
static unsigned char *emu_smem_base;
static size_t emu_smem_size;
static long emu_n_collectives;

static void emu_fail(const char *what)
{
    fprintf(stderr, "emulate: %s (block %u,%u thread %d)\n", what, blockIdx.x, blockIdx.y, emu_cur);
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

static void emu_warp_sync(void)
{
    const int w = emu_cur / 32;
    emu_wait(1 + w, w * 32, 32);
}

static void sync_block(void)
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

static float shfl_xor(float v, int lane_mask)
{
    emu_my_slot().v = v;
    emu_warp_sync();
    float r = emu_lane_slot(emu_lane() ^ lane_mask).v;
    emu_warp_sync();
    return r;
}

static int emu_in_smem(const void *p, size_t bytes)
{
    const unsigned char *c = (const unsigned char *)p;
    return c >= emu_smem_base && c + bytes <= emu_smem_base + emu_smem_size;
}

static float emu_bf16(uint32_t bits16)
{
    uint32_t u = bits16 << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void emu_ldsm(uint32_t r[4], const void *p, int trans)
{
    if (!emu_in_smem(p, 16) || ((uintptr_t)p & 15))
        emu_fail("ldmatrix row address outside shared memory or not 16-byte aligned");
    emu_my_slot().p = (const uint16_t *)p;
    emu_warp_sync();
    const int l = emu_lane(), g = l / 4, t = l % 4;
    for (int m = 0; m < 4; m++) {
        uint32_t lo, hi;
        if (!trans) {
            const uint16_t *row = emu_lane_slot(8 * m + g).p;
            lo = row[2 * t];
            hi = row[2 * t + 1];
        } else {
            lo = emu_lane_slot(8 * m + 2 * t).p[g];
            hi = emu_lane_slot(8 * m + 2 * t + 1).p[g];
        }
        r[m] = lo | hi << 16;
    }
    emu_warp_sync();
    emu_n_collectives++;
}

static void ldsm4(uint32_t r[4], const bf16 *p)
{
    emu_ldsm(r, p, 0);
}

static void ldsm4_t(uint32_t r[4], const bf16 *p)
{
    emu_ldsm(r, p, 1);
}

/* Element (row, k) of A, (k, n) of B, from the lanes' registers (layouts as attention.cu's). */
static float emu_a(int row, int k)
{
    const emu_slot &s = emu_lane_slot(row % 8 * 4 + k % 8 / 2);
    const uint32_t r = s.a[(row >= 8) + 2 * (k >= 8)];
    return emu_bf16(k % 2 ? r >> 16 : r & 0xffff);
}

static float emu_b(int k, int n)
{
    const emu_slot &s = emu_lane_slot(n * 4 + k % 8 / 2);
    const uint32_t r = s.b[k >= 8];
    return emu_bf16(k % 2 ? r >> 16 : r & 0xffff);
}

static void mma(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    emu_slot &me = emu_my_slot();
    memcpy(me.a, a, sizeof(me.a));
    memcpy(me.b, b, sizeof(me.b));
    emu_warp_sync();
    const int l = emu_lane(), g = l / 4, t = l % 4;
    for (int e = 0; e < 4; e++) {
        const int row = g + e / 2 * 8, col = 2 * t + e % 2;
        float acc = c[e];
        for (int k = 0; k < 16; k++)
            acc += emu_a(row, k) * emu_b(k, col);
        c[e] = acc;
    }
    emu_warp_sync();
    emu_n_collectives++;
}

static void cp_async16(void *dst, const void *src, int valid)
{
    if (!emu_in_smem(dst, 16) || ((uintptr_t)dst & 15) || ((uintptr_t)src & 15))
        emu_fail("cp.async destination outside shared memory, or an address not 16-aligned");
    emu_thread &t = emu_threads[emu_cur];
    t.copies.push_back(emu_copy{dst, src, valid, t.committed});
}

static void cp_async_commit(void)
{
    emu_threads[emu_cur].committed++;
}

/* All but the newest n committed groups land now. */
template <int n> static void cp_async_wait(void)
{
    emu_thread &t = emu_threads[emu_cur];
    std::vector<emu_copy> keep;
    for (const emu_copy &c : t.copies) {
        if (c.group < t.committed - n) {
            if (c.valid)
                memcpy(c.dst, c.src, 16);
            else
                memset(c.dst, 0, 16);
        } else {
            keep.push_back(c);
        }
    }
    t.copies.swap(keep);
}

static float atomicAdd(float *p, float v)
{
    const float old = *p;
    *p = old + v;
    return old;
}

static void emu_trampoline(void)
{
    emu_body();
    emu_threads[emu_cur].done = 1;
}

/* Out of line: getcontext returns twice, which a caller's loop variables may not survive. */
static __attribute__((noinline)) void emu_make_thread(emu_thread *t)
{
    t->stack.resize(256 * 1024);
    getcontext(&t->ctx);
    t->ctx.uc_stack.ss_sp = t->stack.data();
    t->ctx.uc_stack.ss_size = t->stack.size();
    t->ctx.uc_link = &emu_main;
    makecontext(&t->ctx, emu_trampoline, 0);
}

/* Runs body as every thread of every block of grid, blocks one after another. */
static void emu_launch(dim3 grid, unsigned threads, size_t smem_bytes, std::function<void()> body)
{
    gridDim = emu_idx{grid.x, grid.y, grid.z};
    blockDim = emu_idx{threads, 1, 1};
    std::vector<uint4> smem((smem_bytes + 15) / 16 + 1);
    emu_smem_base = (unsigned char *)smem.data();
    emu_smem_size = smem_bytes;
    emu_body = body;
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            blockIdx = emu_idx{bx, by, 0};
            /* Garbage, not zeros: a read of what no copy wrote shows. */
            memset(smem.data(), 0xff, smem.size() * sizeof(uint4));
            emu_threads.assign(threads, emu_thread());
            emu_bars.assign(1 + (threads + 31) / 32, emu_barrier{0, 0});
            emu_slots.assign(threads, emu_slot());
            for (unsigned i = 0; i < threads; i++)
                emu_make_thread(&emu_threads[i]);
            for (;;) {
                int ran = 0, left = 0;
                for (unsigned i = 0; i < threads; i++) {
                    emu_thread &t = emu_threads[i];
                    if (t.done)
                        continue;
                    left++;
                    if (t.waiting && emu_bars[t.waiting - 1].gen == t.gen)
                        continue;
                    t.waiting = 0;
                    emu_cur = (int)i;
                    threadIdx = emu_idx{i, 0, 0};
                    swapcontext(&emu_main, &t.ctx);
                    ran = 1;
                }
                if (!left)
                    break;
                if (!ran)
                    emu_fail("deadlock: threads wait at barriers no one else reaches");
            }
        }
}

#define DYNAMIC_SMEM(name) uint4 *name = (uint4 *)emu_smem_base
#define TBC_LAUNCH(kernel, grid, block, smem, stream, ...)                                         \
    ((void)(stream), emu_launch(grid, block, smem, [&] { kernel(__VA_ARGS__); }))
#define cudaFuncSetAttribute(...) cudaSuccess
#define cudaGetLastError() cudaSuccess

#endif /* TUBELET_TESTS_EMULATE_H */
