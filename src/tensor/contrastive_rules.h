/* src/tensor/contrastive_rules.h - InfoNCE's pieces per row, written once for the CPU backend
 * (src/tensor/cpu/contrastive.c, rows in a loop) and the CUDA one (src/tensor/cuda/
 * contrastive.cu, a thread per row, line or logit), in double and in model.h's
 * tb_clip_infonce order: the work buffer's layout (tbi_infonce_work, backend.h), a row's
 * L2 normalisation (norm floored at 1e-12), a logit's dot product, one line's cross-entropy
 * with its gradient, and a row's gradient back through the normalisation. How the pair
 * gradients sum over the other side is each backend's (a scatter on the CPU, a gather per
 * element on CUDA, the same order). (TBI_HD: backend.h.) Tests: tests/test_clip.c,
 * tests/test_backend.c (parity). */
#ifndef TUBELET_TENSOR_CONTRASTIVE_RULES_H
#define TUBELET_TENSOR_CONTRASTIVE_RULES_H

#include <math.h>
#include <stddef.h>

#include "tensor/backend.h"

/* The parts of work (tbi_infonce_work(N, E) doubles). */
struct tbi_nce_parts {
    double *u, *w;   /* (N, E): video and text rows, normalised */
    double *du, *dw; /* (N, E): the loss's gradients on them */
    double *s, *g;   /* (N, N): logits, and the loss's gradient on them */
    double *nu, *nw; /* (N): the rows' norms, floored */
};

static inline TBI_HD struct tbi_nce_parts tbi_nce_split(double *work, int N, int E)
{
    size_t ne = (size_t)N * E, nn = (size_t)N * N;
    struct tbi_nce_parts p;
    p.u = work, p.w = p.u + ne, p.du = p.w + ne, p.dw = p.du + ne;
    p.s = p.dw + ne, p.g = p.s + nn, p.nu = p.g + nn, p.nw = p.nu + N;
    return p;
}

/* Row x (E) normalised into u (E), its norm (floored) into *norm. */
static inline TBI_HD void tbi_nce_normalise_row(double *u, double *norm, const float *x, int E)
{
    double s = 0;
    for (int e = 0; e < E; e++)
        s += (double)x[e] * x[e];
    *norm = fmax(sqrt(s), 1e-12);
    for (int e = 0; e < E; e++)
        u[e] = x[e] / *norm;
}

/* The logit scale x a . b of unit rows a, b (E). */
static inline TBI_HD double tbi_nce_logit(const double *a, const double *b, int E, double scale)
{
    double d = 0;
    for (int e = 0; e < E; e++)
        d += a[e] * b[e];
    return scale * d;
}

/* Line i of s (N, N), along a row (stride_r N, stride_c 1) or a column (1, N), with target
 * i: its cross-entropy returned, and its gradient / (2 N) added into g at the same places. */
static inline TBI_HD double tbi_nce_xent_line(const double *s, double *g, int N, size_t i,
                                              size_t stride_r, size_t stride_c)
{
    double mx = -INFINITY, z = 0;
    for (int j = 0; j < N; j++)
        mx = fmax(mx, s[i * stride_r + j * stride_c]);
    for (int j = 0; j < N; j++)
        z += exp(s[i * stride_r + j * stride_c] - mx);
    double lse = mx + log(z);
    for (int j = 0; j < N; j++) {
        double p = exp(s[i * stride_r + j * stride_c] - lse);
        g[i * stride_r + j * stride_c] += (p - (i == (size_t)j)) / (2.0 * N);
    }
    return lse - s[i * stride_r + i * stride_c];
}

/* Row d (E) of dx from the gradient gi (E) on the unit row u (E) of norm `norm`, through
 * u = x / max(|x|, 1e-12): (gi - u (u . gi)) / |x| above the floor, times mult. */
static inline TBI_HD void tbi_nce_l2_bwd_row(float *d, const double *u, const double *gi,
                                             double norm, int E, float mult)
{
    double dot = 0;
    for (int e = 0; e < E; e++)
        dot += u[e] * gi[e];
    int floored = norm <= 1e-12;
    for (int e = 0; e < E; e++)
        d[e] = (float)((gi[e] - (floored ? 0 : u[e] * dot)) / norm) * mult;
}

#endif /* TUBELET_TENSOR_CONTRASTIVE_RULES_H */
