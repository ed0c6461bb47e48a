/* src/tensor/cuda/mae.cu - VideoMAE's ops, the CPU ops' rules (src/tensor/mae_rules.h):
 * the decoder's tokens with the mask token filled in (and its backward: dfill summed column-wise
 * over the clips and fill rows in order, one thread a column), the pixel targets (normalised per
 * channel of a tube: one block a (row, channel), double sums in a fixed tree), and the weighted
 * MSE loss (one block a row's double sum, then one block adds the rows' terms and the weights in
 * a fixed tree; the loss is written on the device). No atomics: the same bits every run.
 * Tests: tests/test_backend.c (parity). */
#include "tensor/cuda/cuda_common.h"
#include "tensor/mae_rules.h"

enum { MAE_THREADS = 256 }; /* a power of two: the trees below halve it */

/* The sum of v over the block, in a fixed tree, in every thread; sh holds MAE_THREADS doubles.
 * Every thread of the block must call it (it has barriers). */
static __device__ double mae_block_sum(double v, double *sh)
{
    __syncthreads(); /* sh may still be read by a previous call */
    SH_ST(&sh[threadIdx.x], v);
    __syncthreads();
    for (int s = MAE_THREADS / 2; s > 0; s /= 2) {
        if ((int)threadIdx.x < s)
            SH_ST(&sh[threadIdx.x], SH_LD(&sh[threadIdx.x]) + SH_LD(&sh[threadIdx.x + s]));
        __syncthreads();
    }
    return SH_LD(&sh[0]);
}

/* ---- tokens_fill -------------------------------------------------------------------------- */
__global__ void mae_tokens_fill_fwd_kernel(float *x, const float *src, const float *fill,
                                           const float *pos, const int32_t *idx, int B, int NS,
                                           int NF, int D)
{
    const int NT = NS + NF;
    const size_t n = (size_t)B * NT * D;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(i % D);
        const size_t bt = i / D;
        const int t = (int)(bt % NT), b = (int)(bt / NT);
        const float a = t < NS ? GL_LD(&src[((size_t)b * NS + t) * D + d]) : GL_LD(&fill[d]);
        GL_ST(&x[i], a + GL_LD(&pos[(size_t)GL_LD(&idx[bt]) * D + d]));
    }
}

static int tbc_tokens_fill_fwd(tbi_backend *be, float *x, const float *src, const float *fill,
                               const float *pos, const int32_t *idx, int B, int NS, int NF, int D)
{
    if (B < 0 || NS < 0 || NF < 0 || D < 0)
        return tbi_err(TB_EINVAL, "%s tokens_fill_fwd: B %d, NS %d, NF %d, D %d", be->name, B, NS,
                       NF, D);
    const size_t n = (size_t)B * (NS + NF) * D;
    if (n == 0)
        return 0;
    TBC_LAUNCH(mae_tokens_fill_fwd_kernel, tbc_blocks(n, 256), 256, 0, tbc_stream(be), x, src, fill,
               pos, idx, B, NS, NF, D);
    return tbc_launched(be, "tokens_fill_fwd");
}

__global__ void mae_tokens_fill_dsrc_kernel(float *dsrc, const float *dx, int B, int NS, int NF,
                                            int D)
{
    const size_t per = (size_t)NS * D, n = (size_t)B * per;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        GL_ST(&dsrc[i], GL_LD(&dx[i / per * (size_t)(NS + NF) * D + i % per]));
}

/* dfill[d]: column d's fill rows summed in float, clips then rows in order (the CPU's sum). */
__global__ void mae_tokens_fill_dfill_kernel(float *dfill, const float *dx, int B, int NS, int NF,
                                             int D)
{
    for (int d = blockIdx.x * blockDim.x + threadIdx.x; d < D; d += gridDim.x * blockDim.x)
        dfill[d] = tbi_fill_dcol_rule(dx, B, NS, NF, D, d);
}

static int tbc_tokens_fill_bwd(tbi_backend *be, float *dsrc, float *dfill, const float *dx, int B,
                               int NS, int NF, int D)
{
    if (B < 0 || NS < 0 || NF < 0 || D < 0)
        return tbi_err(TB_EINVAL, "%s tokens_fill_bwd: B %d, NS %d, NF %d, D %d", be->name, B, NS,
                       NF, D);
    const size_t n = (size_t)B * NS * D;
    if (dsrc && n > 0) {
        TBC_LAUNCH(mae_tokens_fill_dsrc_kernel, tbc_blocks(n, 256), 256, 0, tbc_stream(be), dsrc,
                   dx, B, NS, NF, D);
        TBI_TRY(tbc_launched(be, "tokens_fill_bwd"));
    }
    if (dfill && D > 0) {
        TBC_LAUNCH(mae_tokens_fill_dfill_kernel, tbc_blocks((size_t)D, 128), 128, 0, tbc_stream(be),
                   dfill, dx, B, NS, NF, D);
        TBI_TRY(tbc_launched(be, "tokens_fill_bwd"));
    }
    return 0;
}

/* ---- patch_target ------------------------------------------------------------------------- */
enum { MAE_MAX_C = 4 };
struct mae_target_params {
    float mean[MAE_MAX_C], std[MAE_MAX_C];
};

/* Block (r, c) (blockIdx.x = r C + c): out[r][p][c] = cols[r][c][p] std[c] + mean[c]; with norm
 * then (u - mu) / (unbiased std + 1e-6) over the PP values, mu and the squares in double. */
__global__ void __launch_bounds__(MAE_THREADS)
    mae_patch_target_kernel(float *out, const float *cols, int C, int PP,
                            struct mae_target_params prm, int norm)
{
    DYNAMIC_SMEM(smem);
    double *sh = (double *)smem;
    const int c = blockIdx.x % C;
    const size_t r = blockIdx.x / C;
    const float *x = cols + (r * C + c) * PP;
    float *o = out + r * PP * C + c;
    const float m = prm.mean[c], s = prm.std[c];
    if (!norm) {
        for (int p = threadIdx.x; p < PP; p += MAE_THREADS)
            GL_ST(&o[(size_t)p * C], tbi_target_pixel_rule(GL_LD(&x[p]), s, m));
        return; /* uniform across the block: no barrier follows */
    }
    double sum = 0;
    for (int p = threadIdx.x; p < PP; p += MAE_THREADS)
        sum += tbi_target_pixel_rule(GL_LD(&x[p]), s, m);
    const double mu = mae_block_sum(sum, sh) / PP;
    double sq = 0;
    for (int p = threadIdx.x; p < PP; p += MAE_THREADS)
        sq += tbi_target_sq_rule(tbi_target_pixel_rule(GL_LD(&x[p]), s, m), mu);
    sq = mae_block_sum(sq, sh);
    const float fmu = (float)mu, inv = tbi_target_inv_rule(sq, PP);
    for (int p = threadIdx.x; p < PP; p += MAE_THREADS)
        GL_ST(&o[(size_t)p * C],
              tbi_target_norm_rule(tbi_target_pixel_rule(GL_LD(&x[p]), s, m), fmu, inv));
}

static int tbc_patch_target(tbi_backend *be, float *out, const float *cols, int R, int C, int PP,
                            const float *host_mean, const float *host_std, int norm)
{
    if (R < 0 || C < 0 || C > MAE_MAX_C || PP < 0 || (C > 0 && (!host_mean || !host_std)))
        return tbi_err(TB_EINVAL, "%s patch_target: R %d, C %d (at most %d), PP %d", be->name, R, C,
                       MAE_MAX_C, PP);
    if ((size_t)R * C * PP == 0)
        return 0;
    struct mae_target_params prm = {};
    for (int c = 0; c < C; c++) {
        prm.mean[c] = host_mean[c];
        prm.std[c] = host_std[c];
    }
    TBC_LAUNCH(mae_patch_target_kernel, (unsigned)((size_t)R * C), MAE_THREADS,
               sizeof(double) * MAE_THREADS, tbc_stream(be), out, cols, C, PP, prm, norm);
    return tbc_launched(be, "patch_target");
}

/* ---- mse ---------------------------------------------------------------------------------- */
/* term[r] = w[r] mean_c (pred - tgt)^2 in double (0 where w[r] = 0: the row is not read). */
__global__ void __launch_bounds__(MAE_THREADS)
    mae_mse_rows_kernel(double *term, tbi_t pred, const float *tgt, const float *w, int C)
{
    DYNAMIC_SMEM(smem);
    double *sh = (double *)smem;
    const size_t r = blockIdx.x;
    const float wr = GL_LD(&w[r]);
    if (wr == 0) {
        if (threadIdx.x == 0)
            GL_ST(&term[r], 0);
        return; /* uniform across the block */
    }
    double acc = 0;
    for (int c = threadIdx.x; c < C; c += MAE_THREADS)
        acc += tbi_mse_sq_rule(load_t(pred, r * C + c), GL_LD(&tgt[r * C + c]));
    acc = mae_block_sum(acc, sh);
    if (threadIdx.x == 0)
        GL_ST(&term[r], tbi_mse_row_rule(wr, acc, C));
}

/* One block: the weights' sum W into *wsum, and with term, *loss = sum term / W. */
__global__ void __launch_bounds__(MAE_THREADS)
    mae_mse_total_kernel(float *loss, double *wsum, const double *term, const float *w, int R)
{
    DYNAMIC_SMEM(smem);
    double *sh = (double *)smem;
    double sw = 0, st = 0;
    for (int r = threadIdx.x; r < R; r += MAE_THREADS) {
        sw += GL_LD(&w[r]);
        if (term)
            st += GL_LD(&term[r]);
    }
    sw = mae_block_sum(sw, sh);
    if (term)
        st = mae_block_sum(st, sh);
    if (threadIdx.x == 0) {
        if (wsum)
            GL_ST(wsum, sw);
        if (loss)
            GL_ST(loss, (float)(st / sw));
    }
}

__global__ void mae_mse_bwd_kernel(float *dpred, tbi_t pred, const float *tgt, const float *w,
                                   const double *wsum, int R, int C)
{
    const size_t n = (size_t)R * C;
    const double W = GL_LD(wsum);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float k = tbi_mse_grad_k_rule(GL_LD(&w[i / C]), C, W);
        GL_ST(&dpred[i], k * (load_t(pred, i) - GL_LD(&tgt[i])));
    }
}

static int mse_check(tbi_backend *be, const char *op, tbi_t pred, int R, int C)
{
    if (R <= 0 || C <= 0 || !tbc_typed_ok(pred))
        return tbi_err(TB_EINVAL, "%s %s: R %d, C %d, predictions f32 or bf16", be->name, op, R, C);
    return 0;
}

static int tbc_mse_fwd(tbi_backend *be, float *loss, tbi_t pred, const float *tgt, const float *w,
                       int R, int C)
{
    TBI_TRY(mse_check(be, "mse_fwd", pred, R, C));
    void *scratch = NULL;
    TBI_TRY(tbc_scratch(be, sizeof(double) * R, &scratch));
    double *term = (double *)scratch;
    const size_t smem = sizeof(double) * MAE_THREADS;
    TBC_LAUNCH(mae_mse_rows_kernel, (unsigned)R, MAE_THREADS, smem, tbc_stream(be), term, pred, tgt,
               w, C);
    TBI_TRY(tbc_launched(be, "mse_fwd"));
    TBC_LAUNCH(mae_mse_total_kernel, 1, MAE_THREADS, smem, tbc_stream(be), loss, (double *)NULL,
               (const double *)term, w, R);
    return tbc_launched(be, "mse_fwd");
}

static int tbc_mse_bwd(tbi_backend *be, float *dpred, tbi_t pred, const float *tgt, const float *w,
                       int R, int C)
{
    TBI_TRY(mse_check(be, "mse_bwd", pred, R, C));
    void *scratch = NULL;
    TBI_TRY(tbc_scratch(be, sizeof(double), &scratch));
    double *wsum = (double *)scratch;
    TBC_LAUNCH(mae_mse_total_kernel, 1, MAE_THREADS, sizeof(double) * MAE_THREADS, tbc_stream(be),
               (float *)NULL, wsum, (const double *)NULL, w, R);
    TBI_TRY(tbc_launched(be, "mse_bwd"));
    const size_t n = (size_t)R * C;
    TBC_LAUNCH(mae_mse_bwd_kernel, tbc_blocks(n, 256), 256, 0, tbc_stream(be), dpred, pred, tgt, w,
               (const double *)wsum, R, C);
    return tbc_launched(be, "mse_bwd");
}
