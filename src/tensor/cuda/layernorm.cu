/* src/tensor/cuda/layernorm.cu - LayerNorm forward and backward, the CPU op's rules
 * (src/tensor/layernorm_rules.h: two-pass mean and biased variance, rstd = 1 / sqrt(var + eps))
 * in fp32 with a typed output or output gradient. One warp per row. Rows of up to LN_VEC_MAX
 * columns (a multiple of 4, every tensor aligned for vectors) are read from global memory once,
 * into registers, 16 bytes a lane at a time, and w and b once per block (into shared memory);
 * other rows take the plain kernels, which read a row again per pass. Both give the same bits:
 * every lane adds the same columns in the same order. The parameter gradients sum over rows in
 * two more kernels, over the whole grid then per column, in a fixed order (no atomics: the same
 * bits every run). It does not fuse the residual add. Global memory through GL_LD / GL_ST,
 * shared through SH_LD / SH_ST. Tests: tests/gpu/ops_emulate.cpp. */
#include "tensor/cuda/cuda_common.h"
#include "tensor/layernorm_rules.h"

/* Rows per block of the row kernels (a warp each). The parameter gradients' first stage: blocks
 * of 32 columns (a warp's lanes read 32 consecutive columns: coalesced) by LN_GROUPS warps, each
 * block one chunk of LN_CHUNK rows (each warp a run of LN_RUN consecutive rows of it); the
 * second stage a thread per column. Fixed sizes: the order of the sums depends on R and C
 * alone, never on the GPU. The register kernels: a block of LN_WARPS warps takes LN_VEC_ROWS
 * rows (LN_VEC_ROWS / LN_WARPS a warp, so w and b are read once per 64 rows: 2% of ViT-B's row
 * traffic), in slices of 128 columns (4 a lane), at most LN_VEC_SLICES of them. */
enum {
    LN_WARPS = 8,
    LN_THREADS = 32 * LN_WARPS,
    LN_COLS = 32,
    LN_GROUPS = 8,
    LN_RUN = 16,
    LN_CHUNK = LN_GROUPS * LN_RUN,
    LN_SUM_THREADS = 256,
    LN_VEC_ROWS = 64,
    LN_VEC_SLICES = 8,
    LN_VEC_MAX = 128 * LN_VEC_SLICES
};
static_assert(LN_COLS == 32 && LN_RUN <= 32, "a run's rows are handed out by one warp's lanes");

/* ---- the plain kernels: any C, any alignment -------------------------------------------------
 * Lane l adds columns l, l + 32, l + 64, ... in that order into its partial; warp_sum adds the 32
 * partials. This order is the definition the register kernels below keep. */

template <typename TO>
__global__ void __launch_bounds__(LN_THREADS)
    layernorm_fwd_any_kernel(TO *out, float *mean, float *rstd, const float *inp, const float *w,
                             const float *b, int R, int C, float eps)
{
    const int lane = threadIdx.x % 32, row = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (row >= R)
        return; /* the whole warp: no lane of it reaches a shuffle */
    const float *x = inp + (size_t)row * C;
    float sum = 0;
    for (int c = lane; c < C; c += 32)
        sum += GL_LD(x + c);
    const float m = tbi_ln_mean_rule(warp_sum(sum), C);
    float sq = 0;
    for (int c = lane; c < C; c += 32)
        sq += tbi_ln_sq_rule(GL_LD(x + c), m);
    const float s = tbi_ln_rstd_rule(warp_sum(sq), C, eps);
    TO *y = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        put(y + c, tbi_ln_out_rule(GL_LD(x + c), m, s, GL_LD(w + c), GL_LD(b + c)));
    if (lane == 0) {
        GL_ST(mean + row, m);
        GL_ST(rstd + row, s);
    }
}

/* dinp += rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dout w, per row. */
template <typename TD>
__global__ void __launch_bounds__(LN_THREADS)
    layernorm_bwd_any_kernel(float *dinp, const TD *dout, const float *inp, const float *w,
                             const float *mean, const float *rstd, int R, int C)
{
    const int lane = threadIdx.x % 32, row = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (row >= R)
        return;
    const size_t o = (size_t)row * C;
    const float m = GL_LD(mean + row), s = GL_LD(rstd + row);
    float sum_d = 0, sum_dx = 0;
    for (int c = lane; c < C; c += 32) {
        const float xhat = tbi_ln_xhat_rule(GL_LD(inp + o + c), m, s),
                    dxhat = get(dout + o + c) * GL_LD(w + c);
        sum_d += dxhat;
        sum_dx += dxhat * xhat;
    }
    sum_d = tbi_ln_mean_rule(warp_sum(sum_d), C);
    sum_dx = tbi_ln_mean_rule(warp_sum(sum_dx), C);
    for (int c = lane; c < C; c += 32) {
        const float xhat = tbi_ln_xhat_rule(GL_LD(inp + o + c), m, s),
                    dxhat = get(dout + o + c) * GL_LD(w + c);
        GL_ST(dinp + o + c, GL_LD(dinp + o + c) + tbi_ln_dx_rule(s, dxhat, xhat, sum_d, sum_dx));
    }
}

/* ---- the register kernels: a row read once -------------------------------------------------
 * A row is read in slices of 128 columns, lane l holding columns 4 l .. 4 l + 3 of each (one
 * 16-byte float4 of f32, or 8 bytes of 4 bf16: a warp's access is 512 or 256 consecutive bytes,
 * whole sectors). The sums need the plain kernels' order, lane l adding columns l + 32 k' in k'
 * order, so each slice is first transposed across the warp (ln_strided: 4 shuffles) into that
 * layout; the element-wise outputs are computed where the values were loaded. Columns past C
 * (the last slice of a C not a multiple of 128) load nothing and add nothing. */

/* Four columns c .. c + 3 of a row (c a multiple of 4, p aligned to the access): one access. */
static __device__ __forceinline__ float4 ln_ld4(const float *p)
{
    return GL_LD((const float4 *)p);
}

static __device__ __forceinline__ float4 ln_ld4(const bf16 *p)
{
    const uint2 u = GL_LD((const uint2 *)p);
    return make_float4(__bfloat162float(__ushort_as_bfloat16((unsigned short)(u.x & 0xffffu))),
                       __bfloat162float(__ushort_as_bfloat16((unsigned short)(u.x >> 16))),
                       __bfloat162float(__ushort_as_bfloat16((unsigned short)(u.y & 0xffffu))),
                       __bfloat162float(__ushort_as_bfloat16((unsigned short)(u.y >> 16))));
}

/* The same stored, rounded to the tensor's dtype as put rounds (nearest even). */
static __device__ __forceinline__ void ln_st4(float *p, float4 v)
{
    GL_ST((float4 *)p, v);
}

static __device__ __forceinline__ unsigned ln_bf16x2(float lo, float hi)
{
    return (unsigned)__bfloat16_as_ushort(__float2bfloat16(lo)) |
           (unsigned)__bfloat16_as_ushort(__float2bfloat16(hi)) << 16;
}

static __device__ __forceinline__ void ln_st4(bf16 *p, float4 v)
{
    GL_ST((uint2 *)p, make_uint2(ln_bf16x2(v.x, v.y), ln_bf16x2(v.z, v.w)));
}

static __device__ __forceinline__ float ln_pick(const float a[4], int i)
{
    return i == 0 ? a[0] : i == 1 ? a[1] : i == 2 ? a[2] : a[3];
}

/* A slice transposed across the warp: lane l holds v[j] = column 4 l + j and gets t[q] = column
 * 32 q + l. Column 32 q + l is lane 8 q + l / 4's component l % 4; in round r lane l reads that
 * lane for q = (r + l % 4) % 4, and each lane sends its component (its q - r) % 4, the one its
 * readers want. Every lane of the warp must call it (the shuffles' full mask). Selects, no
 * indexed array: no local memory. */
static __device__ __forceinline__ void ln_strided(const float v[4], float t[4], int lane)
{
    const int j = lane & 3;
    float got[4];
#pragma unroll
    for (int r = 0; r < 4; r++)
        got[r] = __shfl_sync(0xffffffffu, ln_pick(v, ((lane >> 3) - r) & 3),
                             8 * ((r + j) & 3) + (lane >> 2));
#pragma unroll
    for (int q = 0; q < 4; q++)
        t[q] = ln_pick(got, (q - j) & 3);
}

/* w (or b: C floats) into shared memory, once per block. */
static __device__ __forceinline__ void ln_stage(float *ws, const float *w, int C)
{
    for (int c = threadIdx.x; c < C; c += LN_THREADS)
        SH_ST(ws + c, GL_LD(w + c));
}

/* Block k takes rows 64 k .. 64 k + 63, warp v of them rows 64 k + v + 8 i. NS slices of 128
 * columns cover C (at most 128 NS, C a multiple of 4); shared memory holds w then b. */
template <typename TO, int NS>
__global__ void __launch_bounds__(LN_THREADS)
    layernorm_fwd_kernel(TO *out, float *mean, float *rstd, const float *inp, const float *w,
                         const float *b, int R, int C, float eps)
{
    DYNAMIC_SMEM(smem);
    float *ws = (float *)smem, *bs = ws + C;
    ln_stage(ws, w, C);
    ln_stage(bs, b, C);
    __syncthreads();
    const int lane = threadIdx.x % 32;
    for (int row = blockIdx.x * LN_VEC_ROWS + threadIdx.x / 32;
         row < R && row < (int)(blockIdx.x + 1) * LN_VEC_ROWS; row += LN_WARPS) {
        const float *x = inp + (size_t)row * C;
        float v[NS][4], t[NS][4];
        float sum = 0;
#pragma unroll
        for (int k = 0; k < NS; k++) {
            const int c = 128 * k + 4 * lane;
            const float4 a = c < C ? ln_ld4(x + c) : make_float4(0, 0, 0, 0);
            v[k][0] = a.x, v[k][1] = a.y, v[k][2] = a.z, v[k][3] = a.w;
            t[k][0] = t[k][1] = t[k][2] = t[k][3] = 0;
            if (128 * k < C) /* the warp's branch */
                ln_strided(v[k], t[k], lane);
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (128 * k + 32 * q + lane < C)
                    sum += t[k][q];
        }
        const float m = tbi_ln_mean_rule(warp_sum(sum), C);
        float sq = 0;
#pragma unroll
        for (int k = 0; k < NS; k++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (128 * k + 32 * q + lane < C)
                    sq += tbi_ln_sq_rule(t[k][q], m);
        const float s = tbi_ln_rstd_rule(warp_sum(sq), C, eps);
        TO *y = out + (size_t)row * C;
#pragma unroll
        for (int k = 0; k < NS; k++) {
            const int c = 128 * k + 4 * lane;
            if (c >= C)
                continue;
            const float4 wv = SH_LD((const float4 *)(ws + c)), bv = SH_LD((const float4 *)(bs + c));
            ln_st4(y + c, make_float4(tbi_ln_out_rule(v[k][0], m, s, wv.x, bv.x),
                                      tbi_ln_out_rule(v[k][1], m, s, wv.y, bv.y),
                                      tbi_ln_out_rule(v[k][2], m, s, wv.z, bv.z),
                                      tbi_ln_out_rule(v[k][3], m, s, wv.w, bv.w)));
        }
        if (lane == 0) {
            GL_ST(mean + row, m);
            GL_ST(rstd + row, s);
        }
    }
}

/* The rows as the forward's; shared memory holds w. x and dout are transposed a slice at a time
 * (one pass of sums: nothing strided is kept). Each step in the plain kernel's order, dinp loaded
 * after xhat and dxhat: where a compiler contracts a product into a sum (an FMA) can depend on
 * what lies between them (on the emulated device GL_LD is a branch), and the bits with it. */
template <typename TD, int NS>
__global__ void __launch_bounds__(LN_THREADS)
    layernorm_bwd_kernel(float *dinp, const TD *dout, const float *inp, const float *w,
                         const float *mean, const float *rstd, int R, int C)
{
    DYNAMIC_SMEM(smem);
    float *ws = (float *)smem;
    ln_stage(ws, w, C);
    __syncthreads();
    const int lane = threadIdx.x % 32;
    for (int row = blockIdx.x * LN_VEC_ROWS + threadIdx.x / 32;
         row < R && row < (int)(blockIdx.x + 1) * LN_VEC_ROWS; row += LN_WARPS) {
        const size_t o = (size_t)row * C;
        const float m = GL_LD(mean + row), s = GL_LD(rstd + row);
        float v[NS][4], d[NS][4];
        float sum_d = 0, sum_dx = 0;
#pragma unroll
        for (int k = 0; k < NS; k++) {
            const int c = 128 * k + 4 * lane;
            const float4 a = c < C ? ln_ld4(inp + o + c) : make_float4(0, 0, 0, 0);
            const float4 g = c < C ? ln_ld4(dout + o + c) : make_float4(0, 0, 0, 0);
            v[k][0] = a.x, v[k][1] = a.y, v[k][2] = a.z, v[k][3] = a.w;
            d[k][0] = g.x, d[k][1] = g.y, d[k][2] = g.z, d[k][3] = g.w;
            if (128 * k >= C) /* the warp's branch */
                continue;
            float xt[4], dt[4];
            ln_strided(v[k], xt, lane);
            ln_strided(d[k], dt, lane);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int cq = 128 * k + 32 * q + lane;
                if (cq >= C)
                    continue;
                const float xhat = tbi_ln_xhat_rule(xt[q], m, s), dxhat = dt[q] * SH_LD(ws + cq);
                sum_d += dxhat;
                sum_dx += dxhat * xhat;
            }
        }
        sum_d = tbi_ln_mean_rule(warp_sum(sum_d), C);
        sum_dx = tbi_ln_mean_rule(warp_sum(sum_dx), C);
#pragma unroll
        for (int k = 0; k < NS; k++) {
            const int c = 128 * k + 4 * lane;
            if (c >= C)
                continue;
            const float4 wv = SH_LD((const float4 *)(ws + c));
            const float wj[4] = {wv.x, wv.y, wv.z, wv.w};
            float xhat[4], dxhat[4], r[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                xhat[j] = tbi_ln_xhat_rule(v[k][j], m, s);
                dxhat[j] = d[k][j] * wj[j];
            }
            const float4 d0 = GL_LD((const float4 *)(dinp + o + c));
            const float dj[4] = {d0.x, d0.y, d0.z, d0.w};
#pragma unroll
            for (int j = 0; j < 4; j++)
                r[j] = dj[j] + tbi_ln_dx_rule(s, dxhat[j], xhat[j], sum_d, sum_dx);
            GL_ST((float4 *)(dinp + o + c), make_float4(r[0], r[1], r[2], r[3]));
        }
    }
}

/* dw, db (C) = the sums over R rows of dout xhat and dout, in two stages.
 *
 * The order, per column: rows in runs of LN_RUN = 16 consecutive rows, each run summed in row
 * order from 0; the 8 runs of a chunk of 128 rows added in order (the chunk's partial); the
 * chunks' partials added in order from 0. So dw = (((0 + K_0) + K_1) + ...) with
 * K_k = (((R_k0 + R_k1) + ...) + R_k7) and R_kj = ((0 + t_r) + t_r+1) + ... over its 16 rows.
 * The CPU (src/tensor/cpu/elementwise.c, layernorm_param_grads) adds all R rows in row order
 * into one accumulator: the same bits for R <= 16 (one run), as the previous single-block
 * kernel had (16 interleaved row groups r = g mod 16, then the groups in order: also the CPU's
 * order for R <= 16); beyond, both are trees where the CPU's is a chain, so the low bits differ
 * from the CPU's (and from each other), with a rounding error bounded by 16 + 8 + R / 128
 * additions per term here (R / 16 + 16 before, R on the CPU). The FMA contraction of a term
 * into its sum may differ too (the CPU's loops contract; a test bound, not a bit match).
 *
 * Stage 1: block (x, y) of (LN_COLS, LN_GROUPS), blockIdx.x = chunk k times the column tiles
 * plus tile t (a 1-D grid: no limit of 65535 on either): thread (x, y) sums run y of chunk k for
 * column 32 t + x, then warp y = 0 adds the 8 runs in order and writes the chunk's partial at
 * row k of pw and pb (chunks x C). Every thread reaches the barrier: columns past C and rows
 * past R load nothing. */
template <typename TD>
__global__ void __launch_bounds__(LN_COLS *LN_GROUPS)
    layernorm_param_grads_kernel(float *pw, float *pb, const TD *dout, const float *inp,
                                 const float *mean, const float *rstd, int R, int C)
{
    DYNAMIC_SMEM(smem);
    float(*part)[LN_GROUPS][LN_COLS + 1] = (float(*)[LN_GROUPS][LN_COLS + 1]) smem;
    const int tiles = (C + LN_COLS - 1) / LN_COLS, k = blockIdx.x / tiles;
    const int x = threadIdx.x, y = threadIdx.y, c = (blockIdx.x % tiles) * LN_COLS + x;
    const int r0 = k * LN_CHUNK + y * LN_RUN, r1 = min(r0 + LN_RUN, R);
    /* the run's means and rstds, one a lane (one load each for the warp, where a load per
     * row would move a sector for 4 bytes), handed to every lane row by row */
    float mv = 0, sv = 0;
    if (x < r1 - r0) {
        mv = GL_LD(mean + r0 + x);
        sv = GL_LD(rstd + r0 + x);
    }
    float sw = 0, sb = 0;
    for (int r = r0; r < r1; r++) { /* r1 - r0 <= LN_RUN = 16: the same for the whole warp */
        const float m = __shfl_sync(0xffffffffu, mv, r - r0);
        const float s = __shfl_sync(0xffffffffu, sv, r - r0);
        if (c < C) {
            const size_t i = (size_t)r * C + c;
            const float dy = get(dout + i);
            sw += tbi_ln_dw_rule(dy, GL_LD(inp + i), m, s);
            sb += dy;
        }
    }
    SH_ST(&part[0][y][x], sw);
    SH_ST(&part[1][y][x], sb);
    __syncthreads();
    if (y != 0 || c >= C)
        return;
    for (int g = 1; g < LN_GROUPS; g++) {
        sw += SH_LD(&part[0][g][x]);
        sb += SH_LD(&part[1][g][x]);
    }
    GL_ST(pw + (size_t)k * C + c, sw);
    GL_ST(pb + (size_t)k * C + c, sb);
}

/* Stage 2: dw[c], db[c] = the chunks' partials added in chunk order from 0 (none: 0). A thread
 * per column: a warp's lanes read consecutive columns of each chunk's row. */
__global__ void __launch_bounds__(LN_SUM_THREADS)
    layernorm_param_sum_kernel(float *dw, float *db, const float *pw, const float *pb, int chunks,
                               int C)
{
    const int c = blockIdx.x * LN_SUM_THREADS + threadIdx.x;
    if (c >= C)
        return;
    float sw = 0, sb = 0;
    for (int k = 0; k < chunks; k++) {
        sw += GL_LD(pw + (size_t)k * C + c);
        sb += GL_LD(pb + (size_t)k * C + c);
    }
    GL_ST(dw + c, sw);
    GL_ST(db + c, sb);
}

static size_t param_grads_smem(void)
{
    return sizeof(float) * 2 * LN_GROUPS * (LN_COLS + 1);
}

static int shape_ok(int R, int C)
{
    return R >= 0 && C >= 1;
}

/* Whether a row of C columns takes the register kernels: C a multiple of 4 within LN_VEC_MAX, and
 * every tensor of rows aligned for its 4-column access (so each row is: C is a multiple of 4). */
static int vec_ok(int C, const void *f32a, const void *f32b, const void *typed, size_t typed_size)
{
    return C % 4 == 0 && C <= LN_VEC_MAX && tbc_aligned(f32a, 16) && tbc_aligned(f32b, 16) &&
           tbc_aligned(typed, 4 * typed_size);
}

/* The register kernels' slices for C: 3, 6 or 8 (ViT-S's 384, ViT-B's 768, ViT-L's 1024: exact). */
static int vec_slices(int C)
{
    return C <= 384 ? 3 : C <= 768 ? 6 : 8;
}

template <typename TO, int NS>
static void launch_fwd_vec(cudaStream_t s, TO *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int R, int C, float eps)
{
    TBC_LAUNCH((layernorm_fwd_kernel<TO, NS>), (unsigned)((R + LN_VEC_ROWS - 1) / LN_VEC_ROWS),
               LN_THREADS, sizeof(float) * 2 * (size_t)C, s, out, mean, rstd, inp, w, b, R, C, eps);
}

template <typename TO>
static int launch_fwd(cudaStream_t s, TO *out, float *mean, float *rstd, const float *inp,
                      const float *w, const float *b, int R, int C, float eps)
{
    if (!vec_ok(C, inp, inp, out, sizeof(TO))) {
        const unsigned blocks = (unsigned)((R + LN_WARPS - 1) / LN_WARPS);
        TBC_LAUNCH(layernorm_fwd_any_kernel<TO>, blocks, LN_THREADS, 0, s, out, mean, rstd, inp, w,
                   b, R, C, eps);
    } else if (vec_slices(C) == 3) {
        launch_fwd_vec<TO, 3>(s, out, mean, rstd, inp, w, b, R, C, eps);
    } else if (vec_slices(C) == 6) {
        launch_fwd_vec<TO, 6>(s, out, mean, rstd, inp, w, b, R, C, eps);
    } else {
        launch_fwd_vec<TO, 8>(s, out, mean, rstd, inp, w, b, R, C, eps);
    }
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}

static int tbc_layernorm_fwd(tbi_backend *be, tbi_t out, float *mean, float *rstd, const float *inp,
                             const float *w, const float *b, int R, int C, float eps)
{
    cudaStream_t s = tbc_stream(be);
    if (!out.p || !mean || !rstd || !inp || !w || !b || !shape_ok(R, C) || !tbc_typed_ok(out))
        return tbi_err(TB_EINVAL, "%s layernorm_fwd: a shape, dtype or alignment it does not take",
                       be->name);
    if (R == 0)
        return 0;
    if (out.dt == TB_DTYPE_BF16)
        return launch_fwd(s, (bf16 *)out.p, mean, rstd, inp, w, b, R, C, eps);
    return launch_fwd(s, (float *)out.p, mean, rstd, inp, w, b, R, C, eps);
}

template <typename TD, int NS>
static void launch_bwd_vec(cudaStream_t s, float *dinp, const TD *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int R, int C)
{
    TBC_LAUNCH((layernorm_bwd_kernel<TD, NS>), (unsigned)((R + LN_VEC_ROWS - 1) / LN_VEC_ROWS),
               LN_THREADS, sizeof(float) * (size_t)C, s, dinp, dout, inp, w, mean, rstd, R, C);
}

/* The row kernel, then the parameter gradients: one chunk's partials go straight to dw and db
 * (0 + K_0 is K_0: the second stage would change no bit); more go through scratch (chunks x C
 * twice) and the second stage. */
template <typename TD>
static int launch_bwd(tbi_backend *be, float *dinp, float *dw, float *db, const TD *dout,
                      const float *inp, const float *w, const float *mean, const float *rstd, int R,
                      int C)
{
    const int chunks = (R + LN_CHUNK - 1) / LN_CHUNK, tiles = (C + LN_COLS - 1) / LN_COLS;
    if ((int64_t)chunks * tiles > INT32_MAX)
        return tbi_err(TB_EINVAL, "%s layernorm_bwd: %d rows of %d columns: too many blocks",
                       be->name, R, C);
    cudaStream_t s = tbc_stream(be);
    if (R > 0) {
        if (!vec_ok(C, dinp, inp, dout, sizeof(TD)))
            TBC_LAUNCH(layernorm_bwd_any_kernel<TD>, (unsigned)((R + LN_WARPS - 1) / LN_WARPS),
                       LN_THREADS, 0, s, dinp, dout, inp, w, mean, rstd, R, C);
        else if (vec_slices(C) == 3)
            launch_bwd_vec<TD, 3>(s, dinp, dout, inp, w, mean, rstd, R, C);
        else if (vec_slices(C) == 6)
            launch_bwd_vec<TD, 6>(s, dinp, dout, inp, w, mean, rstd, R, C);
        else
            launch_bwd_vec<TD, 8>(s, dinp, dout, inp, w, mean, rstd, R, C);
        TB_CUDA_OR_RETURN(cudaGetLastError());
    }
    float *pw = dw, *pb = db;
    if (chunks > 1) {
        void *part = NULL;
        TBI_TRY(tbc_scratch(be, sizeof(float) * 2 * (size_t)chunks * C, &part));
        pw = (float *)part;
        pb = pw + (size_t)chunks * C;
    }
    if (chunks) {
        TBC_LAUNCH(layernorm_param_grads_kernel<TD>, (unsigned)(chunks * tiles),
                   dim3(LN_COLS, LN_GROUPS), param_grads_smem(), s, pw, pb, dout, inp, mean, rstd,
                   R, C);
        TB_CUDA_OR_RETURN(cudaGetLastError());
    }
    if (chunks != 1) {
        TBC_LAUNCH(layernorm_param_sum_kernel,
                   (unsigned)((C + LN_SUM_THREADS - 1) / LN_SUM_THREADS), LN_SUM_THREADS, 0, s, dw,
                   db, pw, pb, chunks, C);
        TB_CUDA_OR_RETURN(cudaGetLastError());
    }
    return 0;
}

static int tbc_layernorm_bwd(tbi_backend *be, float *dinp, float *dw, float *db, tbi_t dout,
                             const float *inp, const float *w, const float *mean, const float *rstd,
                             int R, int C)
{
    if (!dinp || !dw || !db || !dout.p || !inp || !w || !mean || !rstd || !shape_ok(R, C) ||
        !tbc_typed_ok(dout))
        return tbi_err(TB_EINVAL, "%s layernorm_bwd: a shape, dtype or alignment it does not take",
                       be->name);
    /* R = 0: no rows, but dw and db are still written (zeros, by the second stage alone), as
     * the CPU op's. */
    if (dout.dt == TB_DTYPE_BF16)
        return launch_bwd(be, dinp, dw, db, (const bf16 *)dout.p, inp, w, mean, rstd, R, C);
    return launch_bwd(be, dinp, dw, db, (const float *)dout.p, inp, w, mean, rstd, R, C);
}
