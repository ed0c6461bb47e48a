/* src/tensor/cuda/emu/emulate_ptx.h - the PTX primitives of src/tensor/cuda/attention.cu on
 * emulate.h's device: ldmatrix and mma.sync move data between the lanes as the PTX
 * ISA documents (the products are plain fp32 sums), cp.async poisons its destination when it
 * is issued (NaN bytes: on a GPU the bytes land at any moment until the wait) and copies at the
 * wait that retires it, so a read before its wait, or a tile overwritten while another warp
 * still reads it, sees NaN; it asserts 16-byte aligned addresses in shared memory. attention.cu's own wrappers stand in for these under nvcc. */
#ifndef TUBELET_TESTS_EMULATE_PTX_H
#define TUBELET_TESTS_EMULATE_PTX_H

#include "emulate.h"

static void sync_block(void)
{
    __syncthreads();
}

static float shfl_xor(float v, int lane_mask)
{
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
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

static void emu_ldsm(uint32_t r[4], const void *p, int trans, int line)
{
    if (!emu_in_smem(p, 16) || ((uintptr_t)p & 15))
        emu_fail("ldmatrix row address outside shared memory or not 16-byte aligned");
    emu_sh_access(p, 16, 0, line); /* this lane's row */
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

/* attention.cu's ldsm4, ldsm4_t and cp_async16, with the caller's line for the race check. */
#define ldsm4(r, p) emu_ldsm((r), (p), 0, __LINE__)
#define ldsm4_t(r, p) emu_ldsm((r), (p), 1, __LINE__)
#define cp_async16(dst, src, valid) emu_cp_async16((dst), (src), (valid), __LINE__)

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
    if (emu_cost.on && emu_lane() == 0)
        emu_cost.flops += 2.0 * 16 * 8 * 16; /* one m16n8k16 per warp */
}

static void emu_cp_async16(void *dst, const void *src, int valid, int line)
{
    if (!emu_in_smem(dst, 16) || ((uintptr_t)dst & 15) || ((uintptr_t)src & 15))
        emu_fail("cp.async destination outside shared memory, or an address not 16-aligned");
    emu_sh_access(dst, 16, 1, line);
    if (valid)
        emu_gl(static_cast<const uint4 *>(src), 0); /* a global read of 16 bytes, counted */
    emu_thread &t = emu_threads[emu_cur];
    t.copies.push_back(emu_copy{dst, src, valid, t.committed, line});
    /* Until the wait that retires it, the destination holds nothing defined: NaN bytes, so a
     * read before the wait (or a tile overwritten while another warp still reads it) shows. */
    memset(dst, 0xff, 16);
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
            emu_sh_access(c.dst, 16, 1, c.line); /* the bytes land */
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
    emu_track_atomic(p, sizeof(*p));
    if (emu_cost.on)
        emu_cost_access(emu_cur, p, sizeof(*p), 2);
    const float old = *p;
    *p = old + v;
    return old;
}

#endif /* TUBELET_TESTS_EMULATE_PTX_H */
