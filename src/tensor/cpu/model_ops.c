/* src/tensor/cpu/model_ops.c - the CPU reference of the ops that move tokens rather than
 * multiply them: uint8 clips to normalised float, token assembly (class tokens, positions,
 * MAE's mask tokens) and its backward, row gathers and scatters, pooling and its backward,
 * and MAE's targets and loss. Each element of every sum is added in a fixed
 * order (over clips, in order), so results do not depend on the number of threads.
 * Tests: tests/test_backend.c (finite differences, and against the guarded backend). */
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "tensor/cpu/model_ops.h"
#include "tensor/mae_rules.h"
#include "tubelet/rng.h"

void tbi_normalize(float *out, const uint8_t *in, const uint8_t *flip, int B, int T, int H,
                   int W, const float mean[3], const float std[3])
{
    const size_t plane = (size_t)H * W;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int mirror = flip && flip[b];
            const uint8_t *src = in + ((size_t)b * T + t) * plane * 3;  /* (H, W, 3) */
            for (int c = 0; c < 3; c++) {
                float m = mean[c], s = std[c];
                float *dst = out + (((size_t)b * 3 + c) * T + t) * plane; /* (H, W) */
                for (int y = 0; y < H; y++) {
                    const uint8_t *row = src + (size_t)y * W * 3 + c;
                    float *drow = dst + (size_t)y * W;
                    if (mirror)
                        for (int x = 0; x < W; x++)
                            drow[x] = ((float)row[(size_t)(W - 1 - x) * 3] - m) / s;
                    else
                        for (int x = 0; x < W; x++)
                            drow[x] = ((float)row[(size_t)x * 3] - m) / s;
                }
            }
        }
    }
}

/* This thread's share [d0, d1) of D columns, inside a parallel region: a sum over rows taken
 * column-wise, each column by one thread in row order, does not depend on the threads. */
static void thread_columns(int D, int *d0, int *d1)
{
#ifdef _OPENMP
    int th = omp_get_thread_num(), nth = omp_get_num_threads();
#else
    int th = 0, nth = 1;
#endif
    *d0 = D * th / nth;
    *d1 = D * (th + 1) / nth;
}

/* The position row of token j (after the NC class tokens) of clip b. */
static int pos_row(const int32_t *idx, int b, int j, int N, int NC)
{
    return NC + (idx ? idx[(size_t)b * N + j] : j);
}

void tbi_tokens_fwd(float *x, const float *tokens, const float *cls, const float *pos,
                    const int32_t *idx, int B, int N, int NC, int D)
{
    int NT = NC + N;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < NT; t++) {
            float *dst = x + ((size_t)b * NT + t) * D;
            const float *src = t < NC ? cls + (size_t)t * D : tokens + ((size_t)b * N + t - NC) * D;
            if (!pos) {
                memcpy(dst, src, sizeof(float) * (size_t)D);
                continue;
            }
            const float *pe = pos + (size_t)(t < NC ? t : pos_row(idx, b, t - NC, N, NC)) * D;
            for (int d = 0; d < D; d++)
                dst[d] = src[d] + pe[d];
        }
}

void tbi_tokens_bwd(float *dtokens, float *dcls, float *dpos, const float *dx,
                    const int32_t *idx, int B, int N, int NC, int NPOS, int D)
{
    int NT = NC + N;
    if (dpos && !idx) {
        /* Each position's row sums its clips' gradients in clip order. */
#pragma omp parallel for schedule(static)
        for (int t = 0; t < NT; t++) {
            float *g = dpos + (size_t)t * D;
            memset(g, 0, sizeof(float) * (size_t)D);
            for (int b = 0; b < B; b++) {
                const float *row = dx + ((size_t)b * NT + t) * D;
                for (int d = 0; d < D; d++)
                    g[d] += row[d];
            }
        }
    } else if (dpos) {
        /* Scattered: rows never kept stay 0; each column range to one thread, the clips and
         * tokens in order, so the sums do not depend on the threads. */
        memset(dpos, 0, sizeof(float) * (size_t)NPOS * D);
#pragma omp parallel
        {
            int d0, d1;
            thread_columns(D, &d0, &d1);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < NT; t++) {
                    int r = t < NC ? t : pos_row(idx, b, t - NC, N, NC);
                    const float *row = dx + ((size_t)b * NT + t) * D;
                    float *g = dpos + (size_t)r * D;
                    for (int d = d0; d < d1; d++)
                        g[d] += row[d];
                }
        }
    }
    if (dcls)
        for (int t = 0; t < NC; t++) {
            float *g = dcls + (size_t)t * D;
            memset(g, 0, sizeof(float) * (size_t)D);
            for (int b = 0; b < B; b++)
                for (int d = 0; d < D; d++)
                    g[d] += dx[((size_t)b * NT + t) * D + d];
        }
    if (dtokens)
#pragma omp parallel for schedule(static)
        for (int b = 0; b < B; b++)
            memcpy(dtokens + (size_t)b * N * D, dx + ((size_t)b * NT + NC) * D,
                   sizeof(float) * (size_t)N * D);
}

void tbi_gather_rows(float *dst, const float *src, const int32_t *idx, int B, int N, int NK,
                     int len)
{
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int j = 0; j < NK; j++)
            memcpy(dst + ((size_t)b * NK + j) * len,
                   src + ((size_t)b * N + idx[(size_t)b * NK + j]) * len,
                   sizeof(float) * (size_t)len);
}

void tbi_pool_fwd(int pool, float *pooled, const float *x, int B, int N, int D)
{
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        float *pb = pooled + (size_t)b * D;
        const float *xb = x + (size_t)b * N * D;
        if (pool == TBI_POOL_FIRST) {
            memcpy(pb, xb, sizeof(float) * (size_t)D);
            continue;
        }
        for (int d = 0; d < D; d++)
            pb[d] = 0;
        for (int t = 0; t < N; t++)
            for (int d = 0; d < D; d++)
                pb[d] += xb[(size_t)t * D + d];
        for (int d = 0; d < D; d++)
            pb[d] /= (float)N;
    }
}

void tbi_pool_bwd(int pool, float *dx, const float *dpooled, int B, int N, int D)
{
    float inv = 1.0f / (float)N;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        const float *g = dpooled + (size_t)b * D;
        float *xb = dx + (size_t)b * N * D;
        if (pool == TBI_POOL_FIRST) {
            memset(xb, 0, sizeof(float) * (size_t)N * D);
            memcpy(xb, g, sizeof(float) * (size_t)D);
            continue;
        }
        for (int t = 0; t < N; t++)
            for (int d = 0; d < D; d++)
                xb[(size_t)t * D + d] = g[d] * inv;
    }
}

void tbi_scatter_rows(float *dst, const float *src, const int32_t *idx, int B, int N, int NK,
                      int len)
{
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int j = 0; j < NK; j++)
            memcpy(dst + ((size_t)b * N + idx[(size_t)b * NK + j]) * len,
                   src + ((size_t)b * NK + j) * len, sizeof(float) * (size_t)len);
}

void tbi_tokens_fill_fwd(float *x, const float *src, const float *fill, const float *pos,
                         const int32_t *idx, int B, int NS, int NF, int D)
{
    int NT = NS + NF;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < NT; t++) {
            float *dst = x + ((size_t)b * NT + t) * D;
            const float *a = t < NS ? src + ((size_t)b * NS + t) * D : fill;
            const float *pe = pos + (size_t)idx[(size_t)b * NT + t] * D;
            for (int d = 0; d < D; d++)
                dst[d] = a[d] + pe[d];
        }
}

void tbi_tokens_fill_bwd(float *dsrc, float *dfill, const float *dx, int B, int NS, int NF,
                         int D)
{
    int NT = NS + NF;
    if (dsrc)
#pragma omp parallel for schedule(static)
        for (int b = 0; b < B; b++)
            memcpy(dsrc + (size_t)b * NS * D, dx + (size_t)b * NT * D,
                   sizeof(float) * (size_t)NS * D);
    if (!dfill)
        return;
    /* Each column to one thread, the clips and rows in order: the same sums for any
     * number of threads. */
#pragma omp parallel for schedule(static)
    for (int d = 0; d < D; d++)
        dfill[d] = tbi_fill_dcol_rule(dx, B, NS, NF, D, d);
}

void tbi_patch_target(float *out, const float *cols, int R, int C, int PP, const float *mean,
                      const float *std, int norm)
{
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) {
        const float *row = cols + (size_t)r * C * PP;
        float *o = out + (size_t)r * PP * C;
        for (int c = 0; c < C; c++) {
            const float *x = row + (size_t)c * PP;
            float m = mean[c], s = std[c];
            for (int p = 0; p < PP; p++)
                o[(size_t)p * C + c] = tbi_target_pixel_rule(x[p], s, m);
            if (!norm)
                continue;
            double sum = 0, sq = 0;
            for (int p = 0; p < PP; p++)
                sum += o[(size_t)p * C + c];
            double mu = sum / PP;
            for (int p = 0; p < PP; p++)
                sq += tbi_target_sq_rule(o[(size_t)p * C + c], mu);
            float fmu = (float)mu, inv = tbi_target_inv_rule(sq, PP);
            for (int p = 0; p < PP; p++)
                o[(size_t)p * C + c] = tbi_target_norm_rule(o[(size_t)p * C + c], fmu, inv);
        }
    }
}

/* The weights' sum, in double, in row order. */
static double weight_sum(const float *w, int R)
{
    double s = 0;
    for (int r = 0; r < R; r++)
        s += w[r];
    return s;
}

float tbi_mse_fwd(const float *pred, const float *tgt, const float *w, int R, int C)
{
    double total = 0; /* serial: the same sum for any number of threads (R C is small) */
    for (int r = 0; r < R; r++) {
        if (w[r] == 0)
            continue;
        const float *p = pred + (size_t)r * C, *t = tgt + (size_t)r * C;
        double acc = 0;
        for (int c = 0; c < C; c++)
            acc += tbi_mse_sq_rule(p[c], t[c]);
        total += tbi_mse_row_rule(w[r], acc, C);
    }
    return (float)(total / weight_sum(w, R));
}

void tbi_mse_bwd(float *dpred, const float *pred, const float *tgt, const float *w, int R, int C)
{
    double W = weight_sum(w, R);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) {
        const float *p = pred + (size_t)r * C, *t = tgt + (size_t)r * C;
        float *d = dpred + (size_t)r * C, k = tbi_mse_grad_k_rule(w[r], C, W);
        for (int c = 0; c < C; c++)
            d[c] = k * (p[c] - t[c]);
    }
}

/* Pairs (b, B-1-b) mixed together in place; the middle clip of an odd batch with itself. */
void tbi_mix_clips(float *x, int B, int CT, int H, int W, float lam, const int *box)
{
    size_t plane = (size_t)H * W, clip = (size_t)CT * plane;
    float a = lam, c = 1.0f - lam; /* timm's two factors, each rounded to float */
    for (int b = 0; b < (B + 1) / 2; b++) {
        float *u = x + (size_t)b * clip, *v = x + (size_t)(B - 1 - b) * clip;
        if (!box) {
#pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < clip; i++) {
                float ui = u[i], vi = v[i];
                u[i] = ui * a + vi * c;
                v[i] = vi * a + ui * c;
            }
            continue;
        }
        if (u == v)
            continue;
        for (int q = 0; q < CT; q++)
            for (int y = box[0]; y < box[1]; y++) {
                float *ur = u + q * plane + (size_t)y * W, *vr = v + q * plane + (size_t)y * W;
                for (int k = box[2]; k < box[3]; k++) {
                    float t = ur[k];
                    ur[k] = vr[k];
                    vr[k] = t;
                }
            }
    }
}

void tbi_erase_boxes(float *x, int B, int C, int T, int H, int W, const int32_t *boxes,
                     uint64_t seed, const uint64_t *streams)
{
    size_t plane = (size_t)H * W;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        tb_rng r;
        tb_rng_init(&r, seed, streams[b]);
        for (int t = 0; t < T; t++) {
            const int32_t *bx = boxes + ((size_t)b * T + t) * 4;
            if (bx[0] < 0)
                continue;
            for (int c = 0; c < C; c++) {
                float *f = x + (((size_t)b * C + c) * T + t) * plane;
                for (int y = bx[0]; y < bx[1]; y++)
                    for (int k = bx[2]; k < bx[3]; k++)
                        f[(size_t)y * W + k] = (float)tb_rng_normal(&r);
            }
        }
    }
}

/* Element i of x (f32, or bf16 widened exactly). */
static inline __attribute__((always_inline)) float x_at(const void *x, int bf16, size_t i)
{
    if (!bf16)
        return ((const float *)x)[i];
    uint32_t u = (uint32_t)((const uint16_t *)x)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* One span of scale_add / residual_add, inlined with bf16 constant so that each dtype gets a
 * loop of its own (the widening is a shift the vectoriser sees through). */
static inline __attribute__((always_inline)) void add_span(float *out, const float *a,
                                                           const void *x, int bf16,
                                                           const float *scale, size_t i0,
                                                           size_t i1)
{
    if (scale) {
        float s = *scale;
        for (size_t i = i0; i < i1; i++)
            out[i] = (a ? a[i] : 0.0f) + s * x_at(x, bf16, i);
    } else {
        for (size_t i = i0; i < i1; i++)
            out[i] = a[i] + x_at(x, bf16, i);
    }
}

void tbi_scale_add(float *out, const float *a, tbi_t x, const float *scale, int B, size_t n)
{
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (size_t i0 = 0; i0 < n; i0 += 4096) {
            size_t i1 = i0 + 4096 < n ? i0 + 4096 : n, o = (size_t)b * n;
            const float *s = scale ? scale + b : NULL;
            if (x.dt == TB_DTYPE_BF16)
                add_span(out, a, x.p, 1, s, o + i0, o + i1);
            else
                add_span(out, a, x.p, 0, s, o + i0, o + i1);
        }
}

void tbi_pos_tile_fwd(float *pos, const float *spatial, const float *temporal, int T, int S,
                      int D)
{
    memcpy(pos, spatial, sizeof(float) * (size_t)D);
#pragma omp parallel for collapse(2) schedule(static)
    for (int t = 0; t < T; t++)
        for (int s = 0; s < S; s++) {
            float *dst = pos + (1 + (size_t)t * S + s) * D;
            const float *sp = spatial + (1 + (size_t)s) * D;
            const float *te = temporal ? temporal + (size_t)t * D : NULL;
            for (int d = 0; d < D; d++)
                dst[d] = te ? sp[d] + te[d] : sp[d];
        }
}

void tbi_pos_tile_bwd(float *dspatial, float *dtemporal, const float *dpos, int T, int S, int D)
{
    memcpy(dspatial, dpos, sizeof(float) * (size_t)D);
    /* Each spatial row sums its T rows in frame order; each temporal row its S in order. */
#pragma omp parallel for schedule(static)
    for (int s = 0; s < S; s++) {
        float *g = dspatial + (1 + (size_t)s) * D;
        memset(g, 0, sizeof(float) * (size_t)D);
        for (int t = 0; t < T; t++) {
            const float *row = dpos + (1 + (size_t)t * S + s) * D;
            for (int d = 0; d < D; d++)
                g[d] += row[d];
        }
    }
    if (dtemporal)
#pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++) {
            float *g = dtemporal + (size_t)t * D;
            memset(g, 0, sizeof(float) * (size_t)D);
            for (int s = 0; s < S; s++) {
                const float *row = dpos + (1 + (size_t)t * S + s) * D;
                for (int d = 0; d < D; d++)
                    g[d] += row[d];
            }
        }
}

void tbi_embed_bwd(float *dtable, const float *dx, const int32_t *ids, int R, int V, int D)
{
    memset(dtable, 0, sizeof(float) * (size_t)V * D);
    /* Each thread a range of columns over every row in order: sums independent of threads. */
#pragma omp parallel
    {
        int d0, d1;
        thread_columns(D, &d0, &d1);
        for (int r = 0; r < R; r++) {
            const float *row = dx + (size_t)r * D;
            float *g = dtable + (size_t)ids[r] * D;
            for (int d = d0; d < d1; d++)
                g[d] += row[d];
        }
    }
}

void tbi_transpose(float *out, const float *in, int R, int C)
{
    enum { TILE = 32 };
#pragma omp parallel for collapse(2) schedule(static)
    for (int r0 = 0; r0 < R; r0 += TILE)
        for (int c0 = 0; c0 < C; c0 += TILE) {
            int r1 = r0 + TILE < R ? r0 + TILE : R, c1 = c0 + TILE < C ? c0 + TILE : C;
            for (int r = r0; r < r1; r++)
                for (int c = c0; c < c1; c++)
                    out[(size_t)c * R + r] = in[(size_t)r * C + c];
        }
}
