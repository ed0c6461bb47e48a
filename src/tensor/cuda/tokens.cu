/* src/tensor/cuda/tokens.cu - tokens, positions, pooling, row gathers and the embedding
 * backward: the CPU ops of src/tensor/cpu/model_ops.c, one thread per output element. Every
 * sum (over clips, frames, repeated ids) is one thread's, in the CPU's order, so the results
 * are the CPU's bits; no atomics. Ids and indices are device memory, trusted as the CPU's are
 * (embed_bwd's ids are checked by the CPU op; here an id outside the table is skipped: never a
 * write out of bounds). Tests: tests/test_backend.c (parity). */
#include "tensor/cuda/cuda_common.h"

enum { TOK_THREADS = 256 };

#define TOK_LOOP(i, n)                                                                         \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                   \
         i += (size_t)gridDim.x * blockDim.x)

#define TOK_LAUNCH(be, op, kernel, n, ...)                                                     \
    do {                                                                                       \
        if ((n) > 0)                                                                           \
            TBC_LAUNCH(kernel, tbc_blocks((n), TOK_THREADS), TOK_THREADS, 0, tbc_stream(be),   \
                       __VA_ARGS__);                                                           \
        TBI_TRY(tbc_launched(be, op));                                                         \
    } while (0)

/* x (B, NC + N, D): class rows, then tokens, + pos (row t, or NC + idx[b][j]) */
__global__ void tok_fwd_kernel(float *x, const float *tokens, const float *cls, const float *pos,
                               const int32_t *idx, int B, int N, int NC, int D)
{
    const size_t NT = (size_t)NC + N, n = (size_t)B * NT * D;
    TOK_LOOP(i, n)
    {
        const int d = (int)(i % D), t = (int)(i / D % NT), b = (int)(i / D / NT);
        const float v = t < NC ? GL_LD(&cls[(size_t)t * D + d])
                               : GL_LD(&tokens[((size_t)b * N + t - NC) * D + d]);
        const int r = t < NC ? t : NC + (idx ? GL_LD(&idx[(size_t)b * N + t - NC]) : t - NC);
        GL_ST(&x[i], pos ? v + GL_LD(&pos[(size_t)r * D + d]) : v);
    }
}

/* dtokens (B, N, D) = the token rows of dx */
__global__ void tok_dtokens_kernel(float *dtokens, const float *dx, int B, int N, int NC, int D)
{
    const size_t n = (size_t)B * N * D;
    TOK_LOOP(i, n)
    {
        const size_t d = i % D, j = i / D % N, b = i / D / N;
        GL_ST(&dtokens[i], GL_LD(&dx[(b * (NC + N) + NC + j) * D + d]));
    }
}

/* rows (R, D): row t sums rows t of the B clips of dx (B, NT, D) in clip order (dcls, and dpos
 * without idx) */
__global__ void tok_sum_clips_kernel(float *rows, const float *dx, int B, int NT, int R, int D)
{
    const size_t n = (size_t)R * D;
    TOK_LOOP(i, n)
    {
        const size_t d = i % D, t = i / D;
        float g = 0;
        for (int b = 0; b < B; b++)
            g += GL_LD(&dx[((size_t)b * NT + t) * D + d]);
        GL_ST(&rows[i], g);
    }
}

/* dpos (NPOS, D) with idx: column d of every row, one thread, the clips and tokens in order
 * (rows nobody kept stay 0: zeroed first) */
__global__ void tok_dpos_scatter_kernel(float *dpos, const float *dx, const int32_t *idx, int B,
                                        int N, int NC, int NPOS, int D)
{
    TOK_LOOP(d, (size_t)D)
    {
        for (int r = 0; r < NPOS; r++)
            GL_ST(&dpos[(size_t)r * D + d], 0);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < NC + N; t++) {
                const int r = t < NC ? t : NC + GL_LD(&idx[(size_t)b * N + t - NC]);
                GL_ST(&dpos[(size_t)r * D + d],
                      GL_LD(&dpos[(size_t)r * D + d]) +
                          (GL_LD(&dx[((size_t)b * (NC + N) + t) * D + d])));
            }
    }
}

static int tbc_tokens_fwd(tbi_backend *be, float *x, const float *tokens, const float *cls,
                          const float *pos, const int32_t *idx, int B, int N, int NC, int D)
{
    if (B < 0 || N < 0 || NC < 0 || D <= 0 || (NC && !cls) || (N && !tokens))
        return tbi_err(TB_EINVAL, "%s tokens_fwd: B %d N %d NC %d D %d", be->name, B, N, NC, D);
    const size_t n = (size_t)B * (NC + N) * D;
    TOK_LAUNCH(be, "tokens_fwd", tok_fwd_kernel, n, x, tokens, cls, pos, idx, B, N, NC, D);
    return 0;
}

static int tbc_tokens_bwd(tbi_backend *be, float *dtokens, float *dcls, float *dpos,
                          const float *dx, const int32_t *idx, int B, int N, int NC, int NPOS,
                          int D)
{
    if (B < 0 || N < 0 || NC < 0 || D <= 0 || NPOS < 0)
        return tbi_err(TB_EINVAL, "%s tokens_bwd: B %d N %d NC %d D %d", be->name, B, N, NC, D);
    const int NT = NC + N;
    if (dpos && !idx)
        TOK_LAUNCH(be, "tokens_bwd", tok_sum_clips_kernel, (size_t)NT * D, dpos, dx, B, NT, NT,
                   D);
    else if (dpos)
        TOK_LAUNCH(be, "tokens_bwd", tok_dpos_scatter_kernel, (size_t)D, dpos, dx, idx, B, N, NC,
                   NPOS, D);
    if (dcls)
        TOK_LAUNCH(be, "tokens_bwd", tok_sum_clips_kernel, (size_t)NC * D, dcls, dx, B, NT, NC, D);
    if (dtokens)
        TOK_LAUNCH(be, "tokens_bwd", tok_dtokens_kernel, (size_t)B * N * D, dtokens, dx, B, N, NC,
                   D);
    return 0;
}

/* ---- positions ---------------------------------------------------------------------------- */

/* pos (1 + T S, D): row 0 = spatial's, row 1 + t S + s = spatial row 1 + s (+ temporal row t) */
__global__ void tok_pos_tile_kernel(float *pos, const float *spatial, const float *temporal,
                                    int T, int S, int D)
{
    const size_t n = (1 + (size_t)T * S) * D;
    TOK_LOOP(i, n)
    {
        const size_t d = i % D, r = i / D;
        if (r == 0) {
            GL_ST(&pos[i], GL_LD(&spatial[d]));
            continue;
        }
        const size_t t = (r - 1) / S, s = (r - 1) % S;
        const float sp = GL_LD(&spatial[(1 + s) * D + d]);
        GL_ST(&pos[i], temporal ? sp + GL_LD(&temporal[t * D + d]) : sp);
    }
}

/* dspatial (1 + S, D): row 0 = dpos row 0; row 1 + s sums its T rows in frame order.
 * dtemporal (T, D): row t sums its S rows in order. One kernel, one output element each. */
__global__ void tok_pos_tile_bwd_kernel(float *dspatial, float *dtemporal, const float *dpos,
                                        int T, int S, int D)
{
    const size_t ns = (1 + (size_t)S) * D, n = ns + (dtemporal ? (size_t)T * D : 0);
    TOK_LOOP(i, n)
    {
        const size_t d = i % D;
        if (i < (size_t)D) {
            GL_ST(&dspatial[i], GL_LD(&dpos[i]));
        } else if (i < ns) {
            const size_t s = i / D - 1;
            float g = 0;
            for (int t = 0; t < T; t++)
                g += GL_LD(&dpos[(1 + (size_t)t * S + s) * D + d]);
            GL_ST(&dspatial[i], g);
        } else {
            const size_t t = (i - ns) / D;
            float g = 0;
            for (int s = 0; s < S; s++)
                g += GL_LD(&dpos[(1 + t * S + s) * D + d]);
            GL_ST(&dtemporal[i - ns], g);
        }
    }
}

static int tbc_pos_tile_fwd(tbi_backend *be, float *pos, const float *spatial,
                            const float *temporal, int T, int S, int D)
{
    if (T < 0 || S < 0 || D <= 0)
        return tbi_err(TB_EINVAL, "%s pos_tile_fwd: T %d S %d D %d", be->name, T, S, D);
    TOK_LAUNCH(be, "pos_tile_fwd", tok_pos_tile_kernel, (1 + (size_t)T * S) * D, pos, spatial,
               temporal, T, S, D);
    return 0;
}

static int tbc_pos_tile_bwd(tbi_backend *be, float *dspatial, float *dtemporal, const float *dpos,
                            int T, int S, int D)
{
    if (T < 0 || S < 0 || D <= 0)
        return tbi_err(TB_EINVAL, "%s pos_tile_bwd: T %d S %d D %d", be->name, T, S, D);
    const size_t n = (1 + (size_t)S) * D + (dtemporal ? (size_t)T * D : 0);
    TOK_LAUNCH(be, "pos_tile_bwd", tok_pos_tile_bwd_kernel, n, dspatial, dtemporal, dpos, T, S,
               D);
    return 0;
}

/* ---- pooling ------------------------------------------------------------------------------ */

/* pooled (B, D): row 0 of each clip, or the mean over N (summed in token order, then / N) */
__global__ void tok_pool_fwd_kernel(int pool, float *pooled, const float *x, int B, int N, int D)
{
    TOK_LOOP(i, (size_t)B * D)
    {
        const size_t d = i % D, b = i / D;
        const float *xb = x + b * N * D;
        if (pool == TBI_POOL_FIRST) {
            GL_ST(&pooled[i], GL_LD(&xb[d]));
            continue;
        }
        float s = 0;
        for (int t = 0; t < N; t++)
            s += GL_LD(&xb[(size_t)t * D + d]);
        GL_ST(&pooled[i], s / (float)N);
    }
}

/* dx (B, N, D): dpooled on row 0 (the rest 0), or dpooled / N on every row */
__global__ void tok_pool_bwd_kernel(int pool, float *dx, const float *dpooled, int B, int N, int D,
                                    float inv)
{
    TOK_LOOP(i, (size_t)B * N * D)
    {
        const size_t d = i % D, t = i / D % N, b = i / D / N;
        const float g = GL_LD(&dpooled[b * D + d]);
        GL_ST(&dx[i], pool == TBI_POOL_FIRST ? (t == 0 ? g : 0.0f) : g * inv);
    }
}

static int pool_ok(tbi_backend *be, const char *op, int pool, int B, int N, int D)
{
    if ((pool != TBI_POOL_FIRST && pool != TBI_POOL_MEAN) || B < 0 || N <= 0 || D <= 0)
        return tbi_err(TB_EINVAL, "%s %s: pool %d B %d N %d D %d", be->name, op, pool, B, N, D);
    return 0;
}

static int tbc_pool_fwd(tbi_backend *be, int pool, float *pooled, const float *x, int B, int N,
                        int D)
{
    TBI_TRY(pool_ok(be, "pool_fwd", pool, B, N, D));
    TOK_LAUNCH(be, "pool_fwd", tok_pool_fwd_kernel, (size_t)B * D, pool, pooled, x, B, N, D);
    return 0;
}

static int tbc_pool_bwd(tbi_backend *be, int pool, float *dx, const float *dpooled, int B, int N,
                        int D)
{
    TBI_TRY(pool_ok(be, "pool_bwd", pool, B, N, D));
    TOK_LAUNCH(be, "pool_bwd", tok_pool_bwd_kernel, (size_t)B * N * D, pool, dx, dpooled, B, N, D,
               1.0f / (float)N);
    return 0;
}

/* ---- gathers, scatters, transposes, the embedding's backward ------------------------------- */

/* scatter 0: dst (B, NK, len) = rows idx of src (B, N, len); 1: dst (B, N, len) rows idx = src
 * (B, NK, len) */
__global__ void tok_rows_kernel(int scatter, float *dst, const float *src, const int32_t *idx,
                                int B, int N, int NK, int len)
{
    TOK_LOOP(i, (size_t)B * NK * len)
    {
        const size_t e = i % len, j = i / len % NK, b = i / len / NK;
        const size_t row = b * N + (size_t)GL_LD(&idx[b * NK + j]);
        if (scatter)
            GL_ST(&dst[row * len + e], GL_LD(&src[i]));
        else
            GL_ST(&dst[i], GL_LD(&src[row * len + e]));
    }
}

__global__ void tok_transpose_kernel(float *out, const float *in, int R, int C)
{
    TOK_LOOP(i, (size_t)R * C)
    {
        const size_t r = i % R, c = i / R; /* out (C, R) in its own order: coalesced writes */
        GL_ST(&out[i], GL_LD(&in[r * C + c]));
    }
}

/* dtable (V, D): column d of every row, one thread, the rows of dx in order */
__global__ void tok_embed_bwd_kernel(float *dtable, const float *dx, const int32_t *ids, int R,
                                     int V, int D)
{
    TOK_LOOP(d, (size_t)D)
    {
        for (int v = 0; v < V; v++)
            GL_ST(&dtable[(size_t)v * D + d], 0);
        for (int r = 0; r < R; r++) {
            const int v = GL_LD(&ids[r]);
            if (v >= 0 && v < V)
                GL_ST(&dtable[(size_t)v * D + d],
                      GL_LD(&dtable[(size_t)v * D + d]) + (GL_LD(&dx[(size_t)r * D + d])));
        }
    }
}

static int rows_ok(tbi_backend *be, const char *op, int B, int N, int NK, int len)
{
    if (B < 0 || N < 0 || NK < 0 || len < 0)
        return tbi_err(TB_EINVAL, "%s %s: B %d N %d NK %d len %d", be->name, op, B, N, NK, len);
    return 0;
}

static int tbc_gather_rows(tbi_backend *be, float *dst, const float *src, const int32_t *idx,
                           int B, int N, int NK, int len)
{
    TBI_TRY(rows_ok(be, "gather_rows", B, N, NK, len));
    TOK_LAUNCH(be, "gather_rows", tok_rows_kernel, (size_t)B * NK * len, 0, dst, src, idx, B, N,
               NK, len);
    return 0;
}

static int tbc_scatter_rows(tbi_backend *be, float *dst, const float *src, const int32_t *idx,
                            int B, int N, int NK, int len)
{
    TBI_TRY(rows_ok(be, "scatter_rows", B, N, NK, len));
    TOK_LAUNCH(be, "scatter_rows", tok_rows_kernel, (size_t)B * NK * len, 1, dst, src, idx, B, N,
               NK, len);
    return 0;
}

static int tbc_transpose(tbi_backend *be, float *out, const float *in, int R, int C)
{
    if (R < 0 || C < 0)
        return tbi_err(TB_EINVAL, "%s transpose: %d x %d", be->name, R, C);
    TOK_LAUNCH(be, "transpose", tok_transpose_kernel, (size_t)R * C, out, in, R, C);
    return 0;
}

static int tbc_embed_bwd(tbi_backend *be, float *dtable, const float *dx, const int32_t *ids,
                         int R, int V, int D)
{
    if (R < 0 || V <= 0 || D <= 0)
        return tbi_err(TB_EINVAL, "%s embed_bwd: R %d V %d D %d", be->name, R, V, D);
    TOK_LAUNCH(be, "embed_bwd", tok_embed_bwd_kernel, (size_t)D, dtable, dx, ids, R, V, D);
    return 0;
}
