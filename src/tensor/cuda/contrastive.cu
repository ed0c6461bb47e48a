/* src/tensor/cuda/contrastive.cu - the symmetric InfoNCE loss and CLIP's logit scale on CUDA:
 * the CPU's double arithmetic (src/tensor/cpu/contrastive.c; its rows' code is
 * src/tensor/contrastive_rules.h, shared) in its order, each of its loops
 * split across threads only where the iterations are independent: a thread per row for the
 * normalisation and the softmax of each row, a thread per column for the columns', a thread
 * per logit, a thread per gradient element summing over the other side in the CPU's order, one
 * thread for the sums over rows. work keeps the CPU's layout (tbi_infonce_work: the unit rows,
 * their gradients, the logits and their gradient, the norms), which the backward reads.
 * N is a batch (tens to a few thousand): simple, not fast. No atomics. Tests:
 * tests/test_backend.c (parity), tests/test_clip.c (`tubelet step --task clip` on cuda-emu). */
#include "tensor/contrastive_rules.h"
#include "tensor/cuda/cuda_common.h"

enum { NCE_THREADS = 128 };

#define NCE_LOOP(i, n)                                                                         \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                   \
         i += (size_t)gridDim.x * blockDim.x)

/* Rows of v then t (2N): unit rows and floored norms. */
__global__ void nce_normalise_kernel(double *work, const float *v, const float *t, int N, int E)
{
    struct tbi_nce_parts p = tbi_nce_split(work, N, E);
    NCE_LOOP(r, (size_t)2 * N)
    {
        const int i = (int)(r % N), text = r >= (size_t)N;
        tbi_nce_normalise_row((text ? p.w : p.u) + (size_t)i * E, (text ? p.nw : p.nu) + i,
                              (text ? t : v) + (size_t)i * E, E);
    }
}

/* s (N, N) = scale u_i . w_j; g = 0 */
__global__ void nce_logits_kernel(double *work, int N, int E, const double *scale)
{
    struct tbi_nce_parts p = tbi_nce_split(work, N, E);
    NCE_LOOP(k, (size_t)N * N)
    {
        const size_t i = k / N, j = k % N;
        GL_ST(&p.s[k], tbi_nce_logit(p.u + i * E, p.w + j * E, E, GL_LD(scale)));
        GL_ST(&p.g[k], 0.0);
    }
}

/* The cross-entropy of line i of s with target i: along rows (cols 0) or columns (cols 1);
 * its loss into line_loss[i], g += its gradient / 2 (rows first, then columns, as the CPU). */
__global__ void nce_xent_kernel(double *work, double *line_loss, int N, int E, int cols)
{
    struct tbi_nce_parts p = tbi_nce_split(work, N, E);
    const size_t sr = cols ? 1 : (size_t)N, sc = cols ? (size_t)N : 1;
    NCE_LOOP(i, (size_t)N)
    {
        GL_ST(&line_loss[i], tbi_nce_xent_line(p.s, p.g, N, i, sr, sc));
    }
}

/* *loss = (mean of the rows' losses + mean of the columns') / 2, each summed in order */
__global__ void nce_loss_kernel(float *loss, const double *rows, const double *cols, int N)
{
    double a = 0, b = 0;
    for (int i = 0; i < N; i++)
        a += GL_LD(&rows[i]);
    for (int i = 0; i < N; i++)
        b += GL_LD(&cols[i]);
    GL_ST(loss, (float)((a / N + b / N) / 2));
}

/* *dscale = sum_k g_k s_k / scale, in order */
__global__ void nce_dscale_kernel(double *dscale, double *work, int N, int E, const double *scale)
{
    struct tbi_nce_parts p = tbi_nce_split(work, N, E);
    double d = 0;
    for (size_t k = 0; k < (size_t)N * N; k++)
        d += GL_LD(&p.g[k]) * GL_LD(&p.s[k]) / GL_LD(scale);
    GL_ST(dscale, d);
}

/* du (N, E) row i = sum_j scale g_ij w_j; dw row j = sum_i scale g_ij u_i (the CPU's loop
 * skips g_ij = 0, which adds nothing); one thread per element, the sum in the CPU's order */
__global__ void nce_pair_grads_kernel(double *work, int N, int E, const double *scale)
{
    struct tbi_nce_parts p = tbi_nce_split(work, N, E);
    NCE_LOOP(k, (size_t)2 * N * E)
    {
        const int side = k >= (size_t)N * E;
        const size_t r = (k % ((size_t)N * E)) / E, e = k % E;
        double acc = 0;
        for (int o = 0; o < N; o++) {
            const double gij =
                GL_LD(scale) * (side ? GL_LD(&p.g[(size_t)o * N + r]) : GL_LD(&p.g[r * N + o]));
            if (gij != 0)
                acc +=
                    gij * (side ? GL_LD(&p.u[(size_t)o * E + e]) : GL_LD(&p.w[(size_t)o * E + e]));
        }
        GL_ST(&(side ? p.dw : p.du)[r * E + e], acc);
    }
}

/* rows [row0, row0 + rows) of dx (rows, E) from du through the normalisation, times mult:
 * a thread per row of each side that is asked for */
__global__ void nce_l2_bwd_kernel(float *dv, float *dt, double *work, int N, int E, int row0,
                                  int rows, float mult)
{
    struct tbi_nce_parts p = tbi_nce_split(work, N, E);
    NCE_LOOP(r, (size_t)2 * rows)
    {
        const int text = r >= (size_t)rows, i = row0 + (int)(r % rows);
        float *dx = text ? dt : dv;
        if (!dx)
            continue;
        tbi_nce_l2_bwd_row(dx + (size_t)(i - row0) * E, (text ? p.w : p.u) + (size_t)i * E,
                           (text ? p.dw : p.du) + (size_t)i * E, GL_LD(&(text ? p.nw : p.nu)[i]), E,
                           mult);
    }
}

static unsigned nce_blocks(size_t n)
{
    return tbc_blocks(n, NCE_THREADS);
}

static int tbc_infonce_fwd(tbi_backend *be, float *loss, double *work, const float *v,
                           const float *t, int N, int E, const double *scale)
{
    if (N <= 0 || E <= 0 || !loss || !work || !v || !t || !scale)
        return tbi_err(TB_EINVAL, "%s infonce_fwd: N %d E %d", be->name, N, E);
    cudaStream_t s = tbc_stream(be);
    void *lines = NULL;
    TBI_TRY(tbc_scratch(be, sizeof(double) * 2 * (size_t)N, &lines));
    double *rows = (double *)lines, *cols = rows + N;
    TBC_LAUNCH(nce_normalise_kernel, nce_blocks((size_t)2 * N), NCE_THREADS, 0, s, work, v, t, N,
               E);
    TBI_TRY(tbc_launched(be, "infonce_fwd"));
    TBC_LAUNCH(nce_logits_kernel, nce_blocks((size_t)N * N), NCE_THREADS, 0, s, work, N, E, scale);
    TBI_TRY(tbc_launched(be, "infonce_fwd"));
    TBC_LAUNCH(nce_xent_kernel, nce_blocks((size_t)N), NCE_THREADS, 0, s, work, rows, N, E, 0);
    TBI_TRY(tbc_launched(be, "infonce_fwd"));
    TBC_LAUNCH(nce_xent_kernel, nce_blocks((size_t)N), NCE_THREADS, 0, s, work, cols, N, E, 1);
    TBI_TRY(tbc_launched(be, "infonce_fwd"));
    TBC_LAUNCH(nce_loss_kernel, 1, 1, 0, s, loss, (const double *)rows, (const double *)cols, N);
    return tbc_launched(be, "infonce_fwd");
}

static int tbc_infonce_bwd(tbi_backend *be, float *dv, float *dt, double *dscale, double *work,
                           int N, int E, const double *scale, int row0, int rows, float mult)
{
    if (row0 < 0 || rows < 0 || row0 + rows > N)
        return tbi_err(TB_EINVAL, "%s infonce_bwd: rows [%d, %d) of %d", be->name, row0,
                       row0 + rows, N);
    if (N <= 0 || E <= 0 || !work || !scale)
        return tbi_err(TB_EINVAL, "%s infonce_bwd: N %d E %d", be->name, N, E);
    cudaStream_t s = tbc_stream(be);
    if (dscale) {
        TBC_LAUNCH(nce_dscale_kernel, 1, 1, 0, s, dscale, work, N, E, scale);
        TBI_TRY(tbc_launched(be, "infonce_bwd"));
    }
    if ((!dv && !dt) || !rows)
        return 0;
    TBC_LAUNCH(nce_pair_grads_kernel, nce_blocks((size_t)2 * N * E), NCE_THREADS, 0, s, work, N, E,
               scale);
    TBI_TRY(tbc_launched(be, "infonce_bwd"));
    TBC_LAUNCH(nce_l2_bwd_kernel, nce_blocks((size_t)2 * rows), NCE_THREADS, 0, s, dv, dt, work, N,
               E, row0, rows, mult);
    return tbc_launched(be, "infonce_bwd");
}

/* param clamped to [0, 4.6052] in place, *scale = exp of it (the CPU's tbi_logit_scale) */
__global__ void nce_logit_scale_kernel(double *scale, float *param)
{
    const float v = GL_LD(param), clamped = v < 0 ? 0 : v > 4.6052f ? 4.6052f : v;
    GL_ST(param, clamped);
    GL_ST(scale, exp((double)clamped));
}

__global__ void nce_logit_scale_bwd_kernel(float *grad, const double *dscale, const double *scale)
{
    GL_ST(grad, (float)(GL_LD(dscale) * GL_LD(scale)));
}

static int tbc_logit_scale(tbi_backend *be, double *scale, float *param)
{
    if (!scale || !param)
        return tbi_err(TB_EINVAL, "%s logit_scale: no scale or parameter", be->name);
    TBC_LAUNCH(nce_logit_scale_kernel, 1, 1, 0, tbc_stream(be), scale, param);
    return tbc_launched(be, "logit_scale");
}

static int tbc_logit_scale_bwd(tbi_backend *be, float *grad, const double *dscale,
                               const double *scale)
{
    if (!grad || !dscale || !scale)
        return tbi_err(TB_EINVAL, "%s logit_scale_bwd: a missing tensor", be->name);
    TBC_LAUNCH(nce_logit_scale_bwd_kernel, 1, 1, 0, tbc_stream(be), grad, dscale, scale);
    return tbc_launched(be, "logit_scale_bwd");
}
