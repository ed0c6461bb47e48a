/* src/tensor/cuda/layernorm.cu - LayerNorm forward and backward, the CPU op's rules
 * (src/tensor/layernorm_rules.h: two-pass mean and biased variance, rstd = 1 / sqrt(var + eps))
 * in fp32 with a typed output or output gradient. One warp per row: the lanes stride the row
 * (coalesced), shuffles reduce it, any C works; the row is read again per pass, which L1 and
 * L2 serve for the widths of our models. The parameter gradients sum over rows in two more
 * kernels, over the whole grid then per column, in a fixed order (no atomics: the same bits
 * every run). It does not fuse the residual add, nor keep a row in registers. Global memory
 * through GL_LD / GL_ST, shared through SH_LD / SH_ST. Tests: tests/gpu/ops_emulate.cpp. */
#include "tensor/cuda/cuda_common.h"
#include "tensor/layernorm_rules.h"

/* Rows per block of the row kernels (a warp each). The parameter gradients' first stage: blocks
 * of 32 columns (a warp's lanes read 32 consecutive columns: coalesced) by LN_GROUPS warps, each
 * block one chunk of LN_CHUNK rows (each warp a run of LN_RUN consecutive rows of it); the
 * second stage a thread per column. Fixed sizes: the order of the sums depends on R and C
 * alone, never on the GPU. */
enum {
    LN_WARPS = 8,
    LN_THREADS = 32 * LN_WARPS,
    LN_COLS = 32,
    LN_GROUPS = 8,
    LN_RUN = 16,
    LN_CHUNK = LN_GROUPS * LN_RUN,
    LN_SUM_THREADS = 256
};

template <typename TO>
__global__ void __launch_bounds__(LN_THREADS)
    layernorm_fwd_kernel(TO *out, float *mean, float *rstd, const float *inp, const float *w,
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
    layernorm_bwd_kernel(float *dinp, const TD *dout, const float *inp, const float *w,
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
    float sw = 0, sb = 0;
    if (c < C)
        for (int r = r0; r < r1; r++) {
            const size_t i = (size_t)r * C + c;
            const float dy = get(dout + i);
            sw += tbi_ln_dw_rule(dy, GL_LD(inp + i), GL_LD(mean + r), GL_LD(rstd + r));
            sb += dy;
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

template <typename TO>
static int launch_fwd(cudaStream_t s, TO *out, float *mean, float *rstd, const float *inp,
                      const float *w, const float *b, int R, int C, float eps)
{
    const unsigned blocks = (unsigned)((R + LN_WARPS - 1) / LN_WARPS);
    TBC_LAUNCH(layernorm_fwd_kernel<TO>, blocks, LN_THREADS, 0, s, out, mean, rstd, inp, w, b, R, C,
               eps);
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
    const unsigned blocks = (unsigned)((R + LN_WARPS - 1) / LN_WARPS);
    if (blocks) {
        TBC_LAUNCH(layernorm_bwd_kernel<TD>, blocks, LN_THREADS, 0, s, dinp, dout, inp, w, mean,
                   rstd, R, C);
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
