/* src/tensor/cpu/contrastive.c - the symmetric InfoNCE loss (CLIP's, LaViLa's) as backend ops
 * (infonce_fwd, infonce_bwd): rows L2-normalised (norms floored at 1e-12), logits = scale x
 * cosine, the mean of the video->text (rows) and text->video (columns) cross-entropies, and
 * the gradients back through the normalisations. Computed in double, in the very order of
 * model.h's tb_clip_infonce, so the clip task's losses and weights keep their bits; it does not
 * gather features (the caller passes all N pairs). Also AVION's max-margin ranking loss, for the
 * host (model.h's tb_clip_max_margin, which with tb_clip_infonce is this file's kernels on host
 * memory). Tests: tests/test_clip.c (against finite differences, closed forms and PyTorch),
 * tests/test_backend.c. */
#include <math.h>
#include <string.h>

#include "tensor/backend.h"
#include "tensor/contrastive.h"
#include "tensor/contrastive_rules.h"
#include "tensor/cpu/kernels.h"

/* Rows of x (N, E) normalised into u, their norms (floored) into norm. */
static void l2_normalise(const float *x, int N, int E, double *u, double *norm)
{
    for (int i = 0; i < N; i++)
        tbi_nce_normalise_row(u + (size_t)i * E, norm + i, x + (size_t)i * E, E);
}

/* Mean cross-entropy of the rows of s (N, N; row i's target i) taken along rows (stride_r,
 * stride_c pick rows or columns); g += its gradient / 2. */
static double xent_diag(const double *s, int N, size_t stride_r, size_t stride_c, double *g)
{
    double loss = 0;
    for (int i = 0; i < N; i++)
        loss += tbi_nce_xent_line(s, g, N, (size_t)i, stride_r, stride_c);
    return loss / N;
}

/* out (N, N) = scale x a_i . b_j over unit rows a, b (N, E). */
static void dots(double *out, const double *a, const double *b, int N, int E, double scale)
{
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            out[(size_t)i * N + j] = tbi_nce_logit(a + (size_t)i * E, b + (size_t)j * E, E, scale);
}

double tbi_infonce_fwd(double *work, const float *v, const float *t, int N, int E, double scale)
{
    struct tbi_nce_parts p = tbi_nce_split(work, N, E);
    l2_normalise(v, N, E, p.u, p.nu);
    l2_normalise(t, N, E, p.w, p.nw);
    dots(p.s, p.u, p.w, N, E, scale);
    memset(p.g, 0, sizeof(double) * (size_t)N * N);
    return (xent_diag(p.s, N, N, 1, p.g) + xent_diag(p.s, N, 1, N, p.g)) / 2;
}

/* Rows [row0, row0 + rows) of dx (rows, E) from du through u = x / max(|x|, 1e-12):
 * (du - u (u . du)) / |x| above the floor, times mult. */
static void l2_backward(float *dx, const double *du, const double *u, const double *norm,
                        int row0, int rows, int E, float mult)
{
    for (int i = row0; i < row0 + rows; i++)
        tbi_nce_l2_bwd_row(dx + (size_t)(i - row0) * E, u + (size_t)i * E, du + (size_t)i * E,
                           norm[i], E, mult);
}

/* da, db (N, E) = the gradients on unit rows a, b from g (N, N), the loss's gradient on
 * scale x a_i . b_j. */
static void pair_grads(const double *g, double scale, const double *a, double *da,
                       const double *b, double *db, int N, int E)
{
    memset(da, 0, sizeof(double) * (size_t)N * E);
    memset(db, 0, sizeof(double) * (size_t)N * E);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double gij = scale * g[(size_t)i * N + j];
            if (gij == 0)
                continue;
            for (int e = 0; e < E; e++) {
                da[(size_t)i * E + e] += gij * b[(size_t)j * E + e];
                db[(size_t)j * E + e] += gij * a[(size_t)i * E + e];
            }
        }
}

void tbi_infonce_bwd(float *dv, float *dt, double *dscale, double *work, int N, int E,
                     double scale, int row0, int rows, float mult)
{
    struct tbi_nce_parts p = tbi_nce_split(work, N, E);
    size_t nn = (size_t)N * N;
    if (dscale) {
        /* logits = scale x cosine: d loss / d scale = sum g_ij cosine_ij */
        double d = 0;
        for (size_t k = 0; k < nn; k++)
            d += p.g[k] * p.s[k] / scale;
        *dscale = d;
    }
    if (!dv && !dt)
        return;
    pair_grads(p.g, scale, p.u, p.du, p.w, p.dw, N, E);
    if (dv)
        l2_backward(dv, p.du, p.u, p.nu, row0, rows, E, mult);
    if (dt)
        l2_backward(dt, p.dw, p.w, p.nw, row0, rows, E, mult);
}

double tbi_max_margin(double *work, const float *v, const float *t, int N, int E, double margin,
                      float *dv, float *dt)
{
    struct tbi_nce_parts p = tbi_nce_split(work, N, E);
    double *x = p.s, *g = p.g;
    l2_normalise(v, N, E, p.u, p.nu);
    l2_normalise(t, N, E, p.w, p.nw);
    /* x[i][j] = cos(text i, video j), as AVION's sim_matrix(text, video) */
    dots(x, p.w, p.u, N, E, 1);
    /* relu(margin - (x_ii - x_ij)) and relu(margin - (x_ii - x_ji)) over i != j, averaged; a
     * NaN similarity makes the loss NaN, as PyTorch's relu passes NaN on (never a flattering 0) */
    memset(g, 0, sizeof(double) * (size_t)N * N);
    double sum = 0, inv = 1.0 / (2.0 * N * (N - 1));
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            if (i == j)
                continue;
            double a = margin - (x[(size_t)i * N + i] - x[(size_t)i * N + j]);
            double b = margin - (x[(size_t)i * N + i] - x[(size_t)j * N + i]);
            if (!(a <= 0)) {
                sum += a;
                g[(size_t)i * N + i] -= inv, g[(size_t)i * N + j] += inv;
            }
            if (!(b <= 0)) {
                sum += b;
                g[(size_t)i * N + i] -= inv, g[(size_t)j * N + i] += inv;
            }
        }
    /* x's rows are the texts: the pairs' gradients with the towers' roles swapped */
    if (dv || dt) {
        pair_grads(g, 1, p.w, p.dw, p.u, p.du, N, E);
        if (dt)
            l2_backward(dt, p.dw, p.w, p.nw, 0, N, E, 1.0f);
        if (dv)
            l2_backward(dv, p.du, p.u, p.nu, 0, N, E, 1.0f);
    }
    return sum * inv;
}

double tbi_logit_scale(float *param)
{
    float clamped = *param < 0 ? 0 : *param > 4.6052f ? 4.6052f : *param;
    *param = clamped;
    return exp((double)clamped);
}
