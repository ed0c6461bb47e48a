/* src/tensor/cuda/attention.cu - FlashAttention-2 on tensor cores: mma.sync m16n8k16 (bf16 in,
 * fp32 accumulate) through inline PTX, tiles in shared memory filled by cp.async and read by
 * ldmatrix, the online softmax in fp32 registers. The same algorithm as the CPU reference
 * (src/tensor/cpu/attention.c): only lse is kept, the backward recomputes P tile by tile.
 * It does not use Hopper's wgmma/TMA (mma.sync runs on sm_80, sm_86 and sm_90 alike), nor
 * split a long sequence's keys across blocks. Tests: tests/gpu/attention_check.cu (on a GPU),
 * tests/gpu/attention_emulate.cpp (this file on the CPU), tests/gpu/sass_check.sh (SASS, spills). */
#include <math.h>
#include <stdint.h>

#include "tensor/cuda/cuda_common.h"

/* Four warps per block, each owning 16 rows of the block's tile (the M of one mma). The forward
 * takes 64 queries against tiles of 64 keys: the scores of a warp are then 16 x 64 fp32 (32
 * registers), its output 16 x HS (32 or 64), its Q fragments 16 x HS bf16 (16 or 32): under
 * 200 registers at HS 128, no spills. The backward takes 64 keys per block (dK and dV, 16 x HS
 * each per warp, stay in registers: 64 or 128 of them) against 64 queries per step at HS 64
 * and 32 at HS 128, so S and dP (16 x BR each) fit beside them. Rows are padded by 8 bf16 (16
 * bytes) so the eight rows one ldmatrix reads fall in different banks. */
enum { WARPS = 4, THREADS = 128, FWD_BR = 64, FWD_BC = 64, BWD_BC = 64, PAD = 8 };

static constexpr __host__ __device__ int bwd_br(int HS)
{
    return HS == 64 ? 64 : 32;
}

static constexpr float LOG2E = 1.4426950408889634f;
static constexpr float LN2 = 0.6931471805599453f;

/* PTX wrappers. Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16): lane = 4 g + t; A (16 x
 * 16, row-major) regs a0..a3 = (row g, cols 2t, 2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..);
 * B (16 x 8, "col": k-contiguous) b0 = (k 2t, 2t+1; n g), b1 = (k 2t+8, 2t+9; n g); C (16 x 8
 * fp32) c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = (row g+8, same cols). The lower half of a
 * register holds the lower column. ldmatrix x4: lanes 8m..8m+7 address the rows of matrix m;
 * register m of lane 4g+t gets (row g, cols 2t, 2t+1) of matrix m, or with .trans (rows 2t,
 * 2t+1; col g). */
/* tests/gpu/attention_emulate.cpp compiles this file for the CPU with TBC_EMULATE, its
 * emulate_ptx.h giving these primitives (with the data movement below). */
#ifndef TBC_EMULATE

static __device__ __forceinline__ void sync_block(void)
{
    __syncthreads();
}

static __device__ __forceinline__ float shfl_xor(float v, int lane_mask)
{
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}

static __device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, bypassing L1; valid == 0 fills the 16 bytes with zeros. */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}

static __device__ __forceinline__ void cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int n> static __device__ __forceinline__ void cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
}

static __device__ __forceinline__ void ldsm4(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

static __device__ __forceinline__ void ldsm4_t(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* c (16 x 8) += a (16 x 16) @ b (16 x 8) */
static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#endif /* TBC_EMULATE */

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return (uint32_t)__bfloat16_as_ushort(v.x) | (uint32_t)__bfloat16_as_ushort(v.y) << 16;
}

/* The C fragments of n-tiles 2 kk and 2 kk + 1 (16 x 16 fp32 together) as one A fragment of
 * bf16: a C fragment's (row g, cols 2t, 2t+1) and (row g+8, ...) are where A holds them. */
static __device__ __forceinline__ void c_to_a(uint32_t a[4], const float (*c)[4], int kk)
{
    a[0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
    a[1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
    a[2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/* Where lane points its ldmatrix x4, as (row, col) offsets inside a 16 x 16 block of a
 * row-major shared tile, for the three uses below. */
/* A operand, rows = M, cols = K (non-trans): matrices (M 0-7, K 0-7), (M 8-15, K 0-7),
 * (M 0-7, K 8-15), (M 8-15, K 8-15) are a0..a3. */
static __device__ __forceinline__ int a_row(int lane)
{
    return lane % 16;
}
static __device__ __forceinline__ int a_col(int lane)
{
    return lane / 16 * 8;
}
/* B operands of two n-tiles from a tile stored (N, K) (non-trans): registers b0, b1 of n-tile
 * rows 0-7, then b0, b1 of rows 8-15. */
static __device__ __forceinline__ int bn_row(int lane)
{
    return lane % 8 + lane / 16 * 8;
}
static __device__ __forceinline__ int bn_col(int lane)
{
    return lane / 8 % 2 * 8;
}
/* B operands of two n-tiles from a tile stored (K, N) (.trans): b0, b1 of n-tile cols 0-7,
 * then of cols 8-15. The same offsets, .trans, read an A operand stored (K, M) with the
 * roles swapped: row = bn_row, col = bn_col (see the backward's dQ). */
static __device__ __forceinline__ int bk_row(int lane)
{
    return lane % 8 + lane / 8 % 2 * 8;
}
static __device__ __forceinline__ int bk_col(int lane)
{
    return lane / 16 * 8;
}

/* Rows r0.. r0 + ROWS of one head's slice (row i at g + i * ld, HS bf16) -> shared (stride
 * HS + PAD), by cp.async; rows at or past n are zeros. */
template <int ROWS, int HS>
static __device__ __forceinline__ void load_tile(bf16 *sm, const bf16 *g, size_t ld, int r0, int n)
{
    constexpr int CPR = HS / 8; /* 16-byte chunks per row */
    for (int c = threadIdx.x; c < ROWS * CPR; c += THREADS) {
        int r = c / CPR, col = c % CPR * 8;
        int ok = r0 + r < n;
        const bf16 *src = ok ? g + (size_t)(r0 + r) * ld + col : g;
        cp_async16(sm + r * (HS + PAD) + col, src, ok);
    }
}

/* One block: 64 queries of one (batch, head) against all the keys they see. Grid (query
 * blocks, B * NH); causal grids run the longest (last) query blocks first. sl2 = scale *
 * log2(e): the softmax runs in base 2. Shared: Q, K, V tiles (64 x (HS + PAD) bf16 each). */
template <int HS>
__global__ void __launch_bounds__(THREADS, 1)
    attention_fwd_kernel(bf16 *out, float *lse, const bf16 *qkv, int N, int NH, int causal,
                         float sl2)
{
    constexpr int LDS = HS + PAD, KT = HS / 16, NT = FWD_BC / 8, OT = HS / 8;
    DYNAMIC_SMEM(smem_fwd);
    bf16 *sq = (bf16 *)smem_fwd, *sk = sq + FWD_BR * LDS, *sv = sk + FWD_BC * LDS;
    const int D = NH * HS;
    const size_t ld = (size_t)3 * D;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int i0 = (causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * FWD_BR;
    const bf16 *q = qkv + (size_t)b * N * ld + (size_t)h * HS, *k = q + D, *v = q + 2 * D;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const int nkeys = causal ? min(N, i0 + FWD_BR) : N;
    const int ntiles = (nkeys + FWD_BC - 1) / FWD_BC;
    const int row0 = i0 + warp * 16 + g; /* this lane's rows: row0 and row0 + 8 */

    /* Groups in flight: (Q, K0), (V0); each tile then commits K(t+1) and V(t+1). */
    load_tile<FWD_BR, HS>(sq, q, ld, i0, N);
    load_tile<FWD_BC, HS>(sk, k, ld, 0, N);
    cp_async_commit();
    load_tile<FWD_BC, HS>(sv, v, ld, 0, N);
    cp_async_commit();

    uint32_t qf[KT][4];
    float o[OT][4];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int ot = 0; ot < OT; ot++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[ot][e] = 0.0f;

    for (int t = 0; t < ntiles; t++) {
        const int j0 = t * FWD_BC;
        cp_async_wait<1>();
        sync_block();
        if (t == 0)
#pragma unroll
            for (int kk = 0; kk < KT; kk++)
                ldsm4(qf[kk], sq + (warp * 16 + a_row(lane)) * LDS + kk * 16 + a_col(lane));

        /* S (16 x 64 per warp) = Q K^T */
        float s[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[nt][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KT; kk++)
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t kb[4];
                ldsm4(kb, sk + (np * 16 + bn_row(lane)) * LDS + kk * 16 + bn_col(lane));
                mma(s[2 * np], qf[kk], kb);
                mma(s[2 * np + 1], qf[kk], kb + 2);
            }

        /* Keys past N, and (causal) past the row's query, get -inf: only in the tiles that
         * hold any. */
        const int masked = j0 + FWD_BC > N || (causal && j0 + FWD_BC - 1 > i0 + warp * 16);
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s[nt][e] * sl2;
                if (masked) {
                    int col = j0 + nt * 8 + 2 * t4 + (e & 1), row = row0 + e / 2 * 8;
                    if (col >= N || (causal && col > row))
                        x = -INFINITY;
                }
                s[nt][e] = x;
            }

#pragma unroll
        /* Online softmax: rows g (e = 0, 1) and g + 8 (e = 2, 3); the four lanes of a group
         * share a row, so the max is reduced over them; l stays per lane until the end. */
        for (int r = 0; r < 2; r++) {
            float mx = m[r];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
            mx = fmaxf(mx, shfl_xor(mx, 1));
            mx = fmaxf(mx, shfl_xor(mx, 2));
            /* A row with no visible key yet keeps max -inf: subtract 0 then, not -inf (NaN). */
            const float base = mx == -INFINITY ? 0.0f : mx;
            const float corr = exp2f(m[r] - base);
            m[r] = mx;
            float sum = 0.0f;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    s[nt][2 * r + c] = exp2f(s[nt][2 * r + c] - base);
                    sum += s[nt][2 * r + c];
                }
            l[r] = l[r] * corr + sum;
#pragma unroll
            for (int ot = 0; ot < OT; ot++) {
                o[ot][2 * r] *= corr;
                o[ot][2 * r + 1] *= corr;
            }
        }

        /* V(t) landed and every warp is done with K(t): fetch K(t + 1) under the P V product. */
        cp_async_wait<0>();
        sync_block();
        if (t + 1 < ntiles)
            load_tile<FWD_BC, HS>(sk, k, ld, j0 + FWD_BC, N);
        cp_async_commit();

#pragma unroll
        /* O (16 x HS) += P (16 x 64, bf16: the C fragments of two n-tiles are one A) @ V */
        for (int kk = 0; kk < FWD_BC / 16; kk++) {
            uint32_t pa[4];
            c_to_a(pa, s, kk);
#pragma unroll
            for (int op = 0; op < OT / 2; op++) {
                uint32_t vb[4];
                ldsm4_t(vb, sv + (kk * 16 + bk_row(lane)) * LDS + op * 16 + bk_col(lane));
                mma(o[2 * op], pa, vb);
                mma(o[2 * op + 1], pa, vb + 2);
            }
        }
        sync_block();
        if (t + 1 < ntiles)
            load_tile<FWD_BC, HS>(sv, v, ld, j0 + FWD_BC, N);
        cp_async_commit();
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += shfl_xor(l[r], 1);
        l[r] += shfl_xor(l[r], 2);
        const int row = row0 + r * 8;
        if (row >= N)
            continue;
        const float inv = 1.0f / l[r];
        bf16 *orow = out + ((size_t)b * N + row) * D + (size_t)h * HS + 2 * t4;
#pragma unroll
        for (int ot = 0; ot < OT; ot++)
            GL_ST((__nv_bfloat162 *)(orow + ot * 8),
                __floats2bfloat162_rn(o[ot][2 * r] * inv, o[ot][2 * r + 1] * inv));
        if (t4 == 0)
            GL_ST(&lse[(size_t)bh * N + row], (m[r] + log2f(l[r])) * LN2);
    }
}

/* D (B, NH, N) = rowsum(dO * O) per (token, head), fp32 from the bf16 tensors, one warp per
 * row; and the row's dQ accumulator zeroed. Rows r = (b N + i) NH + h: out, dout and dq_work
 * are all (B, N, NH, HS) with that row order. */
__global__ void attention_bwd_pre_kernel(float *delta, float *dq_work, const bf16 *out,
                                         const bf16 *dout, int N, int NH, int HS, size_t rows)
{
    const size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows)
        return;
    const __nv_bfloat162 *o = (const __nv_bfloat162 *)(out + r * HS);
    const __nv_bfloat162 *d = (const __nv_bfloat162 *)(dout + r * HS);
    float sum = 0.0f;
    for (int c = lane; c < HS / 2; c += 32) {
        float2 a = __bfloat1622float2(GL_LD(&o[c])), x = __bfloat1622float2(GL_LD(&d[c]));
        sum += a.x * x.x + a.y * x.y;
    }
    for (int off = 16; off > 0; off /= 2)
        sum += shfl_xor(sum, off);
    for (int c = lane; c < HS; c += 32)
        GL_ST(&dq_work[r * HS + c], 0.0f);
    if (lane == 0) {
        const size_t bi = r / NH;
        const int h = (int)(r % NH);
        const size_t b = bi / N, i = bi % N;
        GL_ST(&delta[(b * NH + h) * N + i], sum);
    }
}

/* dqkv's q part (bf16) = scale * dq_work, two elements a thread. */
__global__ void attention_bwd_post_kernel(bf16 *dqkv, const float *dq_work, int NH, int HS,
                                          float scale, size_t pairs)
{
    const size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= pairs)
        return;
    const size_t e = 2 * p, r = e / HS, bi = r / NH;
    const int h = (int)(r % NH), c = (int)(e % HS);
    const size_t dst = bi * 3 * (size_t)NH * HS + (size_t)h * HS + c;
    const float2 w = GL_LD((const float2 *)(dq_work + e)); /* one 8-byte load, e even */
    GL_ST((__nv_bfloat162 *)(dqkv + dst), __floats2bfloat162_rn(w.x * scale, w.y * scale));
}

/* One block: 64 keys of one (batch, head) against every query block that sees them (all of
 * them, or causal those from the keys' own block on), BR queries a step. Per step and warp
 * (16 keys): S^T = K Q^T and dP^T = V dO^T (16 x BR), P^T = exp(scale S^T - lse) and dS^T =
 * P^T * (dP^T - D) in registers; dV += P^T dO, dK += dS^T Q in registers; dS^T goes to shared
 * memory and dQ (BR x HS) += dS K is split over the warps by columns (HS / 4 each) and added
 * to the fp32 workspace with atomicAdd (blocks of other keys add to the same rows). Q, dO, lse
 * and D are double-buffered: step s + 1's copies fly while step s computes. */
template <int HS>
__global__ void __launch_bounds__(THREADS, 1)
    attention_bwd_kernel(bf16 *dqkv, float *dq_work, const bf16 *dout, const bf16 *qkv,
                         const float *lse, const float *delta, int N, int NH, int causal, float sl2,
                         float scale)
{
    constexpr int BR = bwd_br(HS), BC = BWD_BC, LDS = HS + PAD, LDP = BR + PAD;
    constexpr int KT = HS / 16, NT = BR / 8, OT = HS / 8;
    constexpr int QC = HS / WARPS, QT = QC / 8, MT = BR / 16;
    DYNAMIC_SMEM(smem_bwd);
    bf16 *sk = (bf16 *)smem_bwd, *sv = sk + BC * LDS;
    bf16 *sq0 = sv + BC * LDS, *sdo0 = sq0 + 2 * BR * LDS, *sds = sdo0 + 2 * BR * LDS;
    float *slse0 = (float *)(sds + BC * LDP), *sdel0 = slse0 + 2 * BR;
    const int D = NH * HS;
    const size_t ld = (size_t)3 * D;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int j0 = blockIdx.x * BC;
    const bf16 *q = qkv + (size_t)b * N * ld + (size_t)h * HS, *k = q + D, *v = q + 2 * D;
    const bf16 *dO = dout + (size_t)b * N * D + (size_t)h * HS;
    const float *L = lse + (size_t)bh * N, *Dl = delta + (size_t)bh * N;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const int istart = causal ? j0 / BR * BR : 0;
    const int nsteps = (N - istart + BR - 1) / BR;
    const int key0 = j0 + warp * 16 + g; /* this lane's keys: key0 and key0 + 8 */

    load_tile<BC, HS>(sk, k, ld, j0, N);
    load_tile<BC, HS>(sv, v, ld, j0, N);
    load_tile<BR, HS>(sq0, q, ld, istart, N);
    load_tile<BR, HS>(sdo0, dO, (size_t)D, istart, N);
    cp_async_commit();
    /* lse pre-scaled to base 2; rows past N get 0 and are masked below. */
    for (int r = threadIdx.x; r < BR; r += THREADS) {
        int i = istart + r;
        SH_ST(&slse0[r], i < N ? GL_LD(&L[i]) * LOG2E : 0.0f);
        SH_ST(&sdel0[r], i < N ? GL_LD(&Dl[i]) : 0.0f);
    }

    float dk[OT][4], dv[OT][4];
#pragma unroll
    for (int ot = 0; ot < OT; ot++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dk[ot][e] = dv[ot][e] = 0.0f;

    for (int st = 0; st < nsteps; st++) {
        const int i0 = istart + st * BR, buf = st & 1;
        cp_async_wait<0>();
        sync_block();
        if (st + 1 < nsteps) {
            const int nb = buf ^ 1;
            load_tile<BR, HS>(sq0 + nb * BR * LDS, q, ld, i0 + BR, N);
            load_tile<BR, HS>(sdo0 + nb * BR * LDS, dO, (size_t)D, i0 + BR, N);
            cp_async_commit();
            for (int r = threadIdx.x; r < BR; r += THREADS) {
                int i = i0 + BR + r;
                SH_ST(&slse0[nb * BR + r], i < N ? GL_LD(&L[i]) * LOG2E : 0.0f);
                SH_ST(&sdel0[nb * BR + r], i < N ? GL_LD(&Dl[i]) : 0.0f);
            }
        }
        const bf16 *cq = sq0 + buf * BR * LDS, *cdo = sdo0 + buf * BR * LDS;
        const float *clse = slse0 + buf * BR, *cdel = sdel0 + buf * BR;

        /* S^T = K Q^T and dP^T = V dO^T, 16 keys x BR queries per warp */
        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[nt][e] = dp[nt][e] = 0.0f;
#pragma unroll 1
        for (int kk = 0; kk < KT; kk++) {
            uint32_t ka[4], va[4];
            ldsm4(ka, sk + (warp * 16 + a_row(lane)) * LDS + kk * 16 + a_col(lane));
            ldsm4(va, sv + (warp * 16 + a_row(lane)) * LDS + kk * 16 + a_col(lane));
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t qb[4], ob[4];
                ldsm4(qb, cq + (np * 16 + bn_row(lane)) * LDS + kk * 16 + bn_col(lane));
                ldsm4(ob, cdo + (np * 16 + bn_row(lane)) * LDS + kk * 16 + bn_col(lane));
                mma(s[2 * np], ka, qb);
                mma(s[2 * np + 1], ka, qb + 2);
                mma(dp[2 * np], va, ob);
                mma(dp[2 * np + 1], va, ob + 2);
            }
        }

        /* P^T = 2^(sl2 S^T - lse log2 e), 0 for keys or queries past N and (causal) for key >
         * query; dS^T = P^T (dP^T - D). Masked entries are set, not multiplied: their
         * exponent may overflow. */
        const int masked = i0 + BR > N || j0 + BC > N || (causal && j0 + warp * 16 + 15 > i0);
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int qi = nt * 8 + 2 * t4 + (e & 1), key = key0 + e / 2 * 8;
                float p = exp2f(s[nt][e] * sl2 - SH_LD(&clse[qi]));
                if (masked && (key >= N || i0 + qi >= N || (causal && key > i0 + qi)))
                    p = 0.0f;
                s[nt][e] = p;
                dp[nt][e] = p * (dp[nt][e] - SH_LD(&cdel[qi]));
            }

#pragma unroll
        /* dV += P^T dO and dK += dS^T Q: the C fragments of two query n-tiles are one A. */
        for (int kk = 0; kk < BR / 16; kk++) {
            uint32_t pa[4];
            c_to_a(pa, s, kk);
            uint32_t da[4];
            c_to_a(da, dp, kk);
#pragma unroll
            for (int op = 0; op < OT / 2; op++) {
                uint32_t ob[4], qb[4];
                ldsm4_t(ob, cdo + (kk * 16 + bk_row(lane)) * LDS + op * 16 + bk_col(lane));
                ldsm4_t(qb, cq + (kk * 16 + bk_row(lane)) * LDS + op * 16 + bk_col(lane));
                mma(dv[2 * op], pa, ob);
                mma(dv[2 * op + 1], pa, ob + 2);
                mma(dk[2 * op], da, qb);
                mma(dk[2 * op + 1], da, qb + 2);
            }
        }

#pragma unroll
        /* dS^T (BC keys x BR queries) -> shared, bf16 */
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int r = 0; r < 2; r++)
                SH_ST((uint32_t *)(sds + (warp * 16 + g + r * 8) * LDP + nt * 8 + 2 * t4),
                      pack_bf16(dp[nt][2 * r], dp[nt][2 * r + 1]));
        sync_block();

#pragma unroll
        /* dQ (BR x this warp's HS / 4 columns) = dS (BR x BC) @ K (BC x HS): A is dS^T read
         * with .trans (stored (K, M): row bn_row, col bn_col), B is K read with .trans. */
        for (int mt = 0; mt < MT; mt++) {
            float dq[QT][4];
#pragma unroll
            for (int qt = 0; qt < QT; qt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    dq[qt][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++) {
                uint32_t a[4];
                ldsm4_t(a, sds + (kk * 16 + bn_row(lane)) * LDP + mt * 16 + bn_col(lane));
#pragma unroll
                for (int cp = 0; cp < QT / 2; cp++) {
                    uint32_t kb[4];
                    ldsm4_t(kb, sk + (kk * 16 + bk_row(lane)) * LDS + warp * QC + cp * 16 +
                                    bk_col(lane));
                    mma(dq[2 * cp], a, kb);
                    mma(dq[2 * cp + 1], a, kb + 2);
                }
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = i0 + mt * 16 + g + e / 2 * 8;
                if (i >= N)
                    continue;
                float *dst =
                    dq_work + (((size_t)b * N + i) * NH + h) * HS + warp * QC + 2 * t4 + (e & 1);
#pragma unroll
                for (int qt = 0; qt < QT; qt++)
                    atomicAdd(dst + qt * 8, dq[qt][e]);
            }
        }
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = key0 + r * 8;
        if (key >= N)
            continue;
        bf16 *dst = dqkv + ((size_t)b * N + key) * ld + D + (size_t)h * HS + 2 * t4;
#pragma unroll
        for (int ot = 0; ot < OT; ot++) {
            GL_ST((__nv_bfloat162 *)(dst + ot * 8),
                __floats2bfloat162_rn(dk[ot][2 * r] * scale, dk[ot][2 * r + 1] * scale));
            GL_ST((__nv_bfloat162 *)(dst + D + ot * 8),
                __floats2bfloat162_rn(dv[ot][2 * r], dv[ot][2 * r + 1]));
        }
    }
}

static size_t fwd_smem(int HS)
{
    return sizeof(bf16) * (size_t)(FWD_BR + 2 * FWD_BC) * (HS + PAD);
}

static size_t bwd_smem(int HS)
{
    const int BR = bwd_br(HS);
    return sizeof(bf16) *
               ((size_t)(2 * BWD_BC + 4 * BR) * (HS + PAD) + (size_t)BWD_BC * (BR + PAD)) +
           sizeof(float) * 4 * BR;
}

/* Dynamic shared memory of the forward (backward = 0) or backward kernel for HS, in bytes;
 * 0 for an unsupported HS. Host-only arithmetic: needs no GPU. */
static inline size_t tbc_flash_smem_bytes(int HS, int backward)
{
    if (HS != 64 && HS != 128)
        return 0;
    return backward ? bwd_smem(HS) : fwd_smem(HS);
}

static int shape_ok(int B, int N, int NH, int HS)
{
    return B >= 1 && N >= 1 && NH >= 1 && (HS == 64 || HS == 128) && (long long)B * NH <= 65535 &&
           (long long)N * 3 * NH * HS < (1LL << 31);
}

template <int HS>
static int launch_fwd(cudaStream_t s, bf16 *out, float *lse, const bf16 *qkv, int B, int N, int NH,
                      int causal)
{
    const size_t smem = fwd_smem(HS);
    TB_CUDA_OR_RETURN(cudaFuncSetAttribute(attention_fwd_kernel<HS>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((N + FWD_BR - 1) / FWD_BR, B * NH);
    TBC_LAUNCH(attention_fwd_kernel<HS>, grid, THREADS, smem, s, out, lse, qkv, N, NH, causal,
               LOG2E / sqrtf((float)HS));
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}

/* qkv (B, N, 3, NH, HS) bf16 -> out (B, N, D) bf16 and lse (B, NH, N) fp32, the natural-log
 * log-sum-exp of each query row's scores scaled by HS^-0.5. causal != 0: key j > query i is
 * masked. HS is 64 or 128; qkv 16-byte aligned, out and lse 4-byte. Queued on s; returns 0,
 * TB_EINVAL (bad shape, HS, alignment, B * NH > 65535) or TB_ECUDA (the launch failed). */
static int tbc_flash_fwd(cudaStream_t s, bf16 *out, float *lse, const bf16 *qkv, int B, int N,
                         int NH, int HS, int causal)
{
    if (!out || !lse || !qkv || !shape_ok(B, N, NH, HS) || !tbc_aligned(qkv, 16) ||
        !tbc_aligned(out, 4) || !tbc_aligned(lse, 4))
        return TB_EINVAL;
    return HS == 64 ? launch_fwd<64>(s, out, lse, qkv, B, N, NH, causal)
                    : launch_fwd<128>(s, out, lse, qkv, B, N, NH, causal);
}

/* Bytes of device workspace tbc_flash_bwd needs: dQ in fp32 (B, N, NH, HS) and the row terms
 * D (B, NH, N). */
static size_t tbc_flash_bwd_workspace_bytes(int B, int N, int NH, int HS)
{
    if (!shape_ok(B, N, NH, HS))
        return 0;
    return sizeof(float) * ((size_t)B * N * NH * HS + (size_t)B * NH * N);
}

template <int HS>
static int launch_bwd(cudaStream_t s, bf16 *dqkv, float *work, const bf16 *dout, const bf16 *qkv,
                      const bf16 *out, const float *lse, int B, int N, int NH, int causal)
{
    const size_t rows = (size_t)B * N * NH, smem = bwd_smem(HS);
    float *dq_work = work, *delta = work + rows * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    TBC_LAUNCH(attention_bwd_pre_kernel, (unsigned)((rows + 7) / 8), 256, 0, s, delta, dq_work, out,
               dout, N, NH, HS, rows);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    TB_CUDA_OR_RETURN(cudaFuncSetAttribute(attention_bwd_kernel<HS>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((N + BWD_BC - 1) / BWD_BC, B * NH);
    TBC_LAUNCH(attention_bwd_kernel<HS>, grid, THREADS, smem, s, dqkv, dq_work, dout, qkv, lse,
               delta, N, NH, causal, scale * LOG2E, scale);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    const size_t pairs = rows * HS / 2;
    TBC_LAUNCH(attention_bwd_post_kernel, (unsigned)((pairs + 255) / 256), 256, 0, s, dqkv, dq_work,
               NH, HS, scale, pairs);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}

/* dqkv (B, N, 3, NH, HS) bf16 = the gradients of q, k, v (written, not accumulated) given
 * dout (B, N, D), the forward's qkv, out and lse, and causal as the forward's. work: device
 * memory of tbc_flash_bwd_workspace_bytes (8-byte aligned; its contents on entry do not
 * matter). dout 16-byte aligned. Returns as tbc_flash_fwd. dQ is summed with atomicAdd:
 * its low bits may differ between runs. */
static int tbc_flash_bwd(cudaStream_t s, bf16 *dqkv, float *work, const bf16 *dout, const bf16 *qkv,
                         const bf16 *out, const float *lse, int B, int N, int NH, int HS,
                         int causal)
{
    if (!dqkv || !work || !dout || !qkv || !out || !lse || !shape_ok(B, N, NH, HS) ||
        !tbc_aligned(qkv, 16) || !tbc_aligned(dout, 16) || !tbc_aligned(out, 4) ||
        !tbc_aligned(dqkv, 4) || !tbc_aligned(work, 8) || !tbc_aligned(lse, 4))
        return TB_EINVAL;
    return HS == 64 ? launch_bwd<64>(s, dqkv, work, dout, qkv, out, lse, B, N, NH, causal)
                    : launch_bwd<128>(s, dqkv, work, dout, qkv, out, lse, B, N, NH, causal);
}
