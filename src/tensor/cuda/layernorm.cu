/* src/tensor/cuda/layernorm.cu - LayerNorm forward and backward, the CPU op's rules
 * (src/tensor/layernorm_rules.h: two-pass mean and biased variance, rstd = 1 / sqrt(var + eps))
 * in fp32 with a typed output or output gradient. One warp per row: the lanes stride the row
 * (coalesced), shuffles reduce it, any C works; the row is read again per pass, which L1 and
 * L2 serve for the widths of our models. The parameter gradients sum over rows in a second
 * kernel, in a fixed order (no atomics: the same bits every run). It does not fuse the residual
 * add, nor keep a row in registers. Tests: tests/gpu/ops_emulate.cpp. */
#include "tensor/cuda/cuda_common.h"
#include "tensor/layernorm_rules.h"

/* Rows per block of the row kernels (a warp each); columns and row groups per block of the
 * parameter-gradient kernel: 32 columns (a warp's coalesced 128 bytes) by 16 row groups. */
enum { LN_WARPS = 8, LN_THREADS = 32 * LN_WARPS, LN_COLS = 32, LN_GROUPS = 16 };

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
        sum += GL_LD(&x[c]);
    const float m = tbi_ln_mean_rule(warp_sum(sum), C);
    float sq = 0;
    for (int c = lane; c < C; c += 32)
        sq += tbi_ln_sq_rule(GL_LD(&x[c]), m);
    const float s = tbi_ln_rstd_rule(warp_sum(sq), C, eps);
    TO *y = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        put(y + c, tbi_ln_out_rule(GL_LD(&x[c]), m, s, GL_LD(&w[c]), GL_LD(&b[c])));
    if (lane == 0) {
        GL_ST(&mean[row], m);
        GL_ST(&rstd[row], s);
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
    const float m = GL_LD(&mean[row]), s = GL_LD(&rstd[row]);
    float sum_d = 0, sum_dx = 0;
    for (int c = lane; c < C; c += 32) {
        const float xhat = tbi_ln_xhat_rule(GL_LD(&inp[o + c]), m, s),
                    dxhat = get(dout + o + c) * GL_LD(&w[c]);
        sum_d += dxhat;
        sum_dx += dxhat * xhat;
    }
    sum_d = tbi_ln_mean_rule(warp_sum(sum_d), C);
    sum_dx = tbi_ln_mean_rule(warp_sum(sum_dx), C);
    for (int c = lane; c < C; c += 32) {
        const float xhat = tbi_ln_xhat_rule(GL_LD(&inp[o + c]), m, s),
                    dxhat = get(dout + o + c) * GL_LD(&w[c]);
        GL_ST(&dinp[o + c], GL_LD(&dinp[o + c]) + (tbi_ln_dx_rule(s, dxhat, xhat, sum_d, sum_dx)));
    }
}

/* dw, db (C) = the sums over rows of dout xhat and dout. Block (32, 16): thread (x, y) sums
 * rows y, y + 16, ... of column 32 blockIdx.x + x, then row y = 0 adds the 16 partials in
 * order. Every thread reaches the barrier: columns past C load nothing. */
template <typename TD>
__global__ void __launch_bounds__(LN_COLS *LN_GROUPS)
    layernorm_param_grads_kernel(float *dw, float *db, const TD *dout, const float *inp,
                                 const float *mean, const float *rstd, int R, int C)
{
    DYNAMIC_SMEM(smem);
    float(*part)[LN_GROUPS][LN_COLS + 1] = (float(*)[LN_GROUPS][LN_COLS + 1]) smem;
    const int x = threadIdx.x, y = threadIdx.y, c = blockIdx.x * LN_COLS + x;
    float sw = 0, sb = 0;
    if (c < C)
        for (int r = y; r < R; r += LN_GROUPS) {
            const size_t i = (size_t)r * C + c;
            const float dy = get(dout + i);
            sw += tbi_ln_dw_rule(dy, GL_LD(&inp[i]), GL_LD(&mean[r]), GL_LD(&rstd[r]));
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
    GL_ST(&dw[c], sw);
    GL_ST(&db[c], sb);
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

template <typename TD>
static int launch_bwd(cudaStream_t s, float *dinp, float *dw, float *db, const TD *dout,
                      const float *inp, const float *w, const float *mean, const float *rstd, int R,
                      int C)
{
    const unsigned blocks = (unsigned)((R + LN_WARPS - 1) / LN_WARPS);
    if (blocks) {
        TBC_LAUNCH(layernorm_bwd_kernel<TD>, blocks, LN_THREADS, 0, s, dinp, dout, inp, w, mean,
                   rstd, R, C);
        TB_CUDA_OR_RETURN(cudaGetLastError());
    }
    const unsigned col_blocks = (unsigned)((C + LN_COLS - 1) / LN_COLS);
    TBC_LAUNCH(layernorm_param_grads_kernel<TD>, col_blocks, dim3(LN_COLS, LN_GROUPS),
               param_grads_smem(), s, dw, db, dout, inp, mean, rstd, R, C);
    TB_CUDA_OR_RETURN(cudaGetLastError());
    return 0;
}

static int tbc_layernorm_bwd(tbi_backend *be, float *dinp, float *dw, float *db, tbi_t dout,
                             const float *inp, const float *w, const float *mean, const float *rstd,
                             int R, int C)
{
    cudaStream_t s = tbc_stream(be);
    if (!dinp || !dw || !db || !dout.p || !inp || !w || !mean || !rstd || !shape_ok(R, C) ||
        !tbc_typed_ok(dout))
        return tbi_err(TB_EINVAL, "%s layernorm_bwd: a shape, dtype or alignment it does not take",
                       be->name);
    /* R = 0: no rows, but dw and db are still written (zeros), as the CPU op's. */
    if (dout.dt == TB_DTYPE_BF16)
        return launch_bwd(s, dinp, dw, db, (const bf16 *)dout.p, inp, w, mean, rstd, R, C);
    return launch_bwd(s, dinp, dw, db, (const float *)dout.p, inp, w, mean, rstd, R, C);
}
