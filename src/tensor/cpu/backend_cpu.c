/* src/tensor/cpu/backend_cpu.c - the CPU backend: the op list's entries over the reference
 * kernels (kernels.h, model_ops.h) and host memory as backend memory (the table of backends by
 * name is src/tensor/registry.c). The guarded test backend (backend_guard.c) runs these same
 * functions. Nothing here computes: each op checks what only it can (memory) and calls its
 * kernel.
 * Tests: tests/test_backend.c, and every test that trains. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "tensor/contrastive.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/model_ops.h"
#include "tensor/video_rules.h"
#include "tubelet/dist.h"

int tbi_cpu_alloc(tbi_backend *be, size_t bytes, void **out)
{
    if (!(*out = tbi_alloc_big(bytes)))
        return tbi_err(TB_ENOMEM, "out of memory: %zu MB of %s memory", bytes >> 20, be->name);
    return 0;
}

int tbi_cpu_alloc_zero(tbi_backend *be, size_t bytes, void **out)
{
    if (!(*out = tbi_alloc_zero_lazy(bytes)))
        return tbi_err(TB_ENOMEM, "out of memory: %zu MB of %s memory", bytes >> 20, be->name);
    return 0;
}

int tbi_cpu_free(tbi_backend *be, void *p)
{
    (void)be;
    free(p);
    return 0;
}

int tbi_cpu_zero(tbi_backend *be, void *p, size_t bytes)
{
    (void)be;
    memset(p, 0, bytes);
    return 0;
}

/* memcpy, except that from 64 KB on a page of zero bytes onto a page of zero bytes is not
 * written: zeroed memory that stays zero (alloc_zero's moments of a token table's unused rows,
 * loaded from a checkpoint) stays uncommitted. A page of data costs one memcmp that stops at
 * its first non-zero byte. */
int tbi_cpu_to_device(tbi_backend *be, void *dst, const void *host_src, size_t bytes)
{
    (void)be;
    static const unsigned char zeros[4096];
    unsigned char *d = dst;
    const unsigned char *src = host_src;
    if (bytes < ((size_t)64 << 10)) {
        memcpy(d, src, bytes);
        return 0;
    }
    for (size_t i = 0, e; i < bytes; i = e) {
        size_t left = 4096 - ((uintptr_t)(d + i) & 4095);
        e = i + left < bytes ? i + left : bytes;
        if (memcmp(src + i, zeros, e - i) || memcmp(d + i, zeros, e - i))
            memcpy(d + i, src + i, e - i);
    }
    return 0;
}

int tbi_cpu_to_host(tbi_backend *be, void *host_dst, const void *src, size_t bytes)
{
    (void)be;
    memcpy(host_dst, src, bytes);
    return 0;
}

int tbi_cpu_copy(tbi_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    memmove(dst, src, bytes);
    return 0;
}

int tbi_cpu_sync(tbi_backend *be)
{
    (void)be;
    return 0;
}

int tbi_cpu_mem_avail(tbi_backend *be, uint64_t *host_bytes)
{
    (void)be;
    *host_bytes = tbi_host_mem_available();
    return 0;
}

/* MPI's all-reduces on the memory itself (host memory: nothing to stage), in the wait
 * (tb_dist_bucket_wait says why not while later ops run). */
int tbi_cpu_reduce_start(tbi_backend *be, float *x, size_t n)
{
    (void)be;
    return tb_dist_bucket_start(x, n);
}

int tbi_cpu_reduce_wait(tbi_backend *be)
{
    (void)be;
    return tb_dist_bucket_wait();
}

int tbi_cpu_gather(tbi_backend *be, float *all, const float *x, size_t n)
{
    (void)be;
    return tb_dist_gather_f32(x, n, all);
}

int tbi_cpu_bcast(tbi_backend *be, float *x, size_t n, int root)
{
    (void)be;
    return tb_dist_bcast(x, sizeof(float) * n, root);
}

/* ---- typed tensors: the f32 views the kernels compute on ------------------------------- */

/* The kernels are f32. A typed op computes on a view of each tensor: the tensor itself where
 * it is f32 and prec rounds nothing, else a slot of this thread's scratch holding it widened
 * (or rounded to bf16: a bf16 product's f32 operand). Outputs are computed in their view and
 * stored back: narrowed into bf16, or rounded in place where an f32 tensor holds a bf16
 * product's result. The scratch is held between calls (TBI_SCRATCH_TYPED slots, grown to the
 * largest operand seen). The bf16 products on avx512_bf16 convert inside the kernel's packing
 * instead (matmul_fwd_bf16, matmul_bwd_bf16): views for their outputs and bias alone. */
struct views {
    int prec;  /* enum tb_dtype: the product's type */
    int slots; /* scratch slots taken */
    int oom;
};

static float *slot(struct views *v, size_t n)
{
    float *f = v->slots < TBI_SCRATCH_TYPED_N
                   ? tbi_scratch(TBI_SCRATCH_TYPED + v->slots++, sizeof(float) * (n ? n : 1))
                   : NULL;
    v->oom |= !f;
    return f;
}

static int direct(const struct views *v, tbi_t t)
{
    return t.dt == TB_DTYPE_F32 && v->prec != TB_DTYPE_BF16;
}

/* An operand's view (NULL for none). */
static float *view_in(struct views *v, tbi_t t, size_t n)
{
    if (!t.p || direct(v, t))
        return t.p;
    float *f = slot(v, n);
    if (f && t.dt == TB_DTYPE_BF16)
        tbi_f32_from_bf16(f, t.p, n);
    else if (f)
        tbi_round_bf16_copy(f, t.p, n);
    return f;
}

/* An output's view: the tensor where it is f32, else a slot (NULL for none). */
static float *view_out(struct views *v, tbi_t t, size_t n)
{
    return !t.p || t.dt == TB_DTYPE_F32 ? t.p : slot(v, n);
}

/* An output's view back into its tensor. */
static void store(const struct views *v, tbi_t t, float *f, size_t n)
{
    if (!t.p)
        return;
    if (t.dt == TB_DTYPE_BF16)
        tbi_bf16_from_f32(t.p, f, n);
    else if (v->prec == TB_DTYPE_BF16)
        tbi_round_bf16(f, n);
}

static int bad_dtype(tbi_t t)
{
    return tbi_err(TB_EINVAL, "tensor of dtype %d: the CPU backend has f32 and bf16", t.dt);
}

static int views_check(const struct views *v, const tbi_t *t, int n)
{
    for (int i = 0; i < n; i++)
        if (t[i].dt != TB_DTYPE_F32 && t[i].dt != TB_DTYPE_BF16)
            return bad_dtype(t[i]);
    if (v->prec != TB_DTYPE_F32 && v->prec != TB_DTYPE_BF16)
        return tbi_err(TB_EINVAL, "product type %d: the CPU backend has f32 and bf16", v->prec);
    return 0;
}

static int views_oom(const struct views *v)
{
    return v->oom ? tbi_err(TB_ENOMEM, "out of memory for the f32 views of a typed op") : 0;
}

/* bf16 products on avx512_bf16 (gemm_bf16.c): the operands read in their storage type, only
 * the outputs (and the bias: a rounded copy of a vector) through views, stored as the twin's.
 * 1 where it ran, 0 where the twin must (no avx512_bf16, or no scratch for its packing), or a
 * negative TB_E*. */
static int matmul_fwd_bf16(const tbi_backend *be, tbi_t out, tbi_t inp, tbi_t w, tbi_t bias, int M,
                           int K, int N)
{
    struct views v = {.prec = TB_DTYPE_BF16};
    if (!tbi_cpu_avx512_bf16())
        return 0;
    const float *fb = view_in(&v, bias, (size_t)N);
    float *fo = view_out(&v, out, (size_t)M * N);
    TBI_TRY(views_oom(&v));
    tbi_share_tick(be->share);
    /* out (M, N) = inp (M, K) @ w (N, K)^T + bias */
    if (tbi_gemm_bf16(0, 1, M, N, K, inp.p, inp.dt, K, w.p, w.dt, K, fb, fo, N, NULL) < 0)
        return 0;
    store(&v, out, fo, (size_t)M * N);
    return 1;
}

static int matmul_bwd_bf16(tbi_t dinp, tbi_t dw, tbi_t dbias, tbi_t dout, tbi_t inp, tbi_t w, int M,
                           int K, int N)
{
    struct views v = {.prec = TB_DTYPE_BF16};
    if (!tbi_cpu_avx512_bf16() || (dbias.p && !dw.p))
        return 0;
    float *gi = view_out(&v, dinp, (size_t)M * K), *gw = view_out(&v, dw, (size_t)N * K);
    float *gb = view_out(&v, dbias, (size_t)N);
    TBI_TRY(views_oom(&v));
    if (tbi_matmul_bwd_bf16(gi, gw, gb, dout.p, dout.dt, inp.p, inp.dt, w.p, w.dt, M, K, N) < 0)
        return 0;
    store(&v, dinp, gi, (size_t)M * K);
    store(&v, dw, gw, (size_t)N * K);
    store(&v, dbias, gb, (size_t)N);
    return 1;
}

int tbi_cpu_matmul_fwd(tbi_backend *be, int prec, tbi_t out, tbi_t inp, tbi_t w, tbi_t bias, int M,
                       int K, int N)
{
    struct views v = {.prec = prec};
    TBI_TRY(views_check(&v, (tbi_t[]){out, inp, w, bias}, 4));
    int ran = prec == TB_DTYPE_BF16 ? matmul_fwd_bf16(be, out, inp, w, bias, M, K, N) : 0;
    if (ran)
        return ran < 0 ? ran : 0;
    const float *fi = view_in(&v, inp, (size_t)M * K), *fw = view_in(&v, w, (size_t)N * K);
    const float *fb = view_in(&v, bias, (size_t)N);
    float *fo = view_out(&v, out, (size_t)M * N);
    TBI_TRY(views_oom(&v));
    tbi_share_tick(be->share);
    tbi_matmul_fwd(fo, fi, fw, fb, M, K, N);
    store(&v, out, fo, (size_t)M * N);
    return 0;
}

int tbi_cpu_matmul_bwd(tbi_backend *be, int prec, tbi_t dinp, tbi_t dw, tbi_t dbias, tbi_t dout,
                       tbi_t inp, tbi_t w, int M, int K, int N)
{
    (void)be;
    struct views v = {.prec = prec};
    TBI_TRY(views_check(&v, (tbi_t[]){dinp, dw, dbias, dout, inp, w}, 6));
    int ran = prec == TB_DTYPE_BF16 ? matmul_bwd_bf16(dinp, dw, dbias, dout, inp, w, M, K, N) : 0;
    if (ran)
        return ran < 0 ? ran : 0;
    const float *fd = view_in(&v, dout, (size_t)M * N);
    const float *fi = dw.p ? view_in(&v, inp, (size_t)M * K) : NULL;
    const float *fw = dinp.p ? view_in(&v, w, (size_t)N * K) : NULL;
    float *gi = view_out(&v, dinp, (size_t)M * K), *gw = view_out(&v, dw, (size_t)N * K);
    float *gb = view_out(&v, dbias, (size_t)N);
    TBI_TRY(views_oom(&v));
    tbi_matmul_bwd(gi, gw, gb, fd, fi, fw, M, K, N);
    store(&v, dinp, gi, (size_t)M * K);
    store(&v, dw, gw, (size_t)N * K);
    store(&v, dbias, gb, (size_t)N);
    return 0;
}

int tbi_cpu_layernorm_fwd(tbi_backend *be, tbi_t out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int R, int C, float eps)
{
    (void)be;
    struct views v = {.prec = TB_DTYPE_F32};
    TBI_TRY(views_check(&v, &out, 1));
    float *fo = view_out(&v, out, (size_t)R * C);
    TBI_TRY(views_oom(&v));
    tbi_layernorm_fwd(fo, mean, rstd, inp, w, b, R, C, eps);
    store(&v, out, fo, (size_t)R * C);
    return 0;
}

int tbi_cpu_layernorm_bwd(tbi_backend *be, float *dinp, float *dw, float *db, tbi_t dout,
                          const float *inp, const float *w, const float *mean, const float *rstd,
                          int R, int C)
{
    (void)be;
    struct views v = {.prec = TB_DTYPE_F32};
    TBI_TRY(views_check(&v, &dout, 1));
    const float *fd = view_in(&v, dout, (size_t)R * C);
    TBI_TRY(views_oom(&v));
    tbi_layernorm_bwd(dinp, dw, db, fd, inp, w, mean, rstd, R, C);
    return 0;
}

static int bad_act(int act)
{
    return tbi_err(TB_EINVAL, "activation %d is not one of the op list's", act);
}

int tbi_cpu_act_fwd(tbi_backend *be, int act, tbi_t out, tbi_t inp, size_t n)
{
    (void)be;
    struct views v = {.prec = TB_DTYPE_F32};
    TBI_TRY(views_check(&v, (tbi_t[]){out, inp}, 2));
    if (act != TBI_ACT_GELU && act != TBI_ACT_QUICKGELU)
        return bad_act(act);
    const float *fi = view_in(&v, inp, n);
    float *fo = out.p == inp.p && out.dt == inp.dt ? (float *)fi : view_out(&v, out, n);
    TBI_TRY(views_oom(&v));
    (act == TBI_ACT_GELU ? tbi_gelu_fwd : tbi_quickgelu_fwd)(fo, fi, n);
    store(&v, out, fo, n);
    return 0;
}

/* In place as the contract allows: dinp may be dout and out may be inp, views alike. */
int tbi_cpu_act_bwd(tbi_backend *be, int act, tbi_t dinp, tbi_t out, tbi_t inp, tbi_t dout,
                    size_t n)
{
    (void)be;
    struct views v = {.prec = TB_DTYPE_F32};
    TBI_TRY(views_check(&v, (tbi_t[]){dinp, out, inp, dout}, 4));
    if (act != TBI_ACT_GELU && act != TBI_ACT_QUICKGELU)
        return bad_act(act);
    float *fi = view_in(&v, inp, n), *fd = view_in(&v, dout, n);
    float *gi = dinp.p == dout.p && dinp.dt == dout.dt ? fd : view_out(&v, dinp, n);
    float *fo = out.p == inp.p && out.dt == inp.dt ? fi : view_out(&v, out, n);
    TBI_TRY(views_oom(&v));
    (act == TBI_ACT_GELU ? tbi_gelu_bwd : tbi_quickgelu_bwd)(gi, fo, fi, fd, n);
    store(&v, dinp, gi, n);
    store(&v, out, fo, n);
    return 0;
}

int tbi_cpu_add(tbi_backend *be, float *out, const float *a, const float *b, size_t n)
{
    (void)be;
    tbi_add_fwd(out, a, b, n);
    return 0;
}

static int attention_oom(int heads, int N)
{
    return tbi_err(TB_ENOMEM, "out of memory for attention's scratch (%d heads of %d tokens)",
                   heads, N);
}

int tbi_cpu_attention_fwd(tbi_backend *be, tbi_t out, float *lse, tbi_t qkv, int B, int N, int NH,
                          int HS, int causal)
{
    (void)be;
    struct views v = {.prec = TB_DTYPE_F32};
    size_t RD = (size_t)B * N * NH * HS;
    TBI_TRY(views_check(&v, (tbi_t[]){out, qkv}, 2));
    const float *fq = view_in(&v, qkv, 3 * RD);
    float *fo = view_out(&v, out, RD);
    TBI_TRY(views_oom(&v));
    if (tbi_attention_fwd(fo, lse, fq, B, N, NH, HS, causal) < 0)
        return attention_oom(B * NH, N);
    store(&v, out, fo, RD);
    return 0;
}

int tbi_cpu_attention_bwd(tbi_backend *be, tbi_t dqkv, tbi_t dout, tbi_t qkv, tbi_t out,
                          const float *lse, int B, int N, int NH, int HS, int causal)
{
    (void)be;
    struct views v = {.prec = TB_DTYPE_F32};
    size_t RD = (size_t)B * N * NH * HS;
    TBI_TRY(views_check(&v, (tbi_t[]){dqkv, dout, qkv, out}, 4));
    const float *fd = view_in(&v, dout, RD), *fq = view_in(&v, qkv, 3 * RD);
    const float *fo = view_in(&v, out, RD);
    float *gq = view_out(&v, dqkv, 3 * RD);
    TBI_TRY(views_oom(&v));
    if (tbi_attention_bwd(gq, fd, fq, fo, lse, B, N, NH, HS, causal) < 0)
        return attention_oom(B * NH, N);
    store(&v, dqkv, gq, 3 * RD);
    return 0;
}

int tbi_cpu_xent_fwd(tbi_backend *be, float *loss, float *probs, const float *logits,
                     const int64_t *targets, int B, int K, float smoothing)
{
    (void)be;
    for (int b = 0; b < B; b++)
        if (targets[b] < 0 || targets[b] >= K)
            return tbi_err(TB_ERANGE, "label %lld of clip %d is not a class of %d",
                           (long long)targets[b], b, K);
    *loss = tbi_xent_fwd(probs, logits, targets, B, K, smoothing);
    return 0;
}

int tbi_cpu_xent_bwd(tbi_backend *be, float *dlogits, const float *probs, const int64_t *targets,
                     int B, int K, float smoothing)
{
    (void)be;
    tbi_xent_bwd(dlogits, probs, targets, B, K, smoothing);
    return 0;
}

int tbi_cpu_xent_soft_fwd(tbi_backend *be, float *loss, float *probs, const float *logits,
                          const float *targets, int B, int K)
{
    (void)be;
    *loss = tbi_xent_soft_fwd(probs, logits, targets, B, K);
    return 0;
}

int tbi_cpu_xent_soft_bwd(tbi_backend *be, float *dlogits, const float *probs, const float *targets,
                          int B, int K)
{
    (void)be;
    tbi_xent_soft_bwd(dlogits, probs, targets, B, K);
    return 0;
}

int tbi_cpu_mix_clips(tbi_backend *be, float *x, int B, int CT, int H, int W, float lam,
                      const int *host_box)
{
    (void)be;
    if (host_box && (host_box[0] < 0 || host_box[0] > host_box[1] || host_box[1] > H ||
                     host_box[2] < 0 || host_box[2] > host_box[3] || host_box[3] > W))
        return tbi_err(TB_EINVAL, "cutmix box rows %d-%d, columns %d-%d outside %dx%d", host_box[0],
                       host_box[1], host_box[2], host_box[3], H, W);
    tbi_mix_clips(x, B, CT, H, W, lam, host_box);
    return 0;
}

int tbi_cpu_erase_boxes(tbi_backend *be, float *x, int B, int C, int T, int H, int W,
                        const int32_t *host_boxes, uint64_t seed, const uint64_t *host_streams)
{
    (void)be;
    int i = tbi_erase_box_outside(host_boxes, B * T, H, W);
    if (i >= 0) {
        const int32_t *bx = host_boxes + (size_t)i * 4;
        return tbi_err(TB_EINVAL,
                       "erasing box of clip %d, frame %d: rows %d-%d, columns %d-%d outside %dx%d",
                       i / T, i % T, bx[0], bx[1], bx[2], bx[3], H, W);
    }
    tbi_erase_boxes(x, B, C, T, H, W, host_boxes, seed, host_streams);
    return 0;
}

int tbi_cpu_normalize(tbi_backend *be, float *out, const uint8_t *clips, const uint8_t *flip, int B,
                      int T, int H, int W, const float *host_mean, const float *host_std)
{
    (void)be;
    tbi_normalize(out, clips, flip, B, T, H, W, host_mean, host_std);
    return 0;
}

int tbi_cpu_patchify(tbi_backend *be, float *cols, const float *video, int B, int C, int T, int H,
                     int W, int TU, int P)
{
    (void)be;
    tbi_patchify(cols, video, B, C, T, H, W, TU, P);
    return 0;
}

int tbi_cpu_tokens_fwd(tbi_backend *be, float *x, const float *tokens, const float *cls,
                       const float *pos, const int32_t *idx, int B, int N, int NC, int D)
{
    (void)be;
    tbi_tokens_fwd(x, tokens, cls, pos, idx, B, N, NC, D);
    return 0;
}

int tbi_cpu_tokens_bwd(tbi_backend *be, float *dtokens, float *dcls, float *dpos, const float *dx,
                       const int32_t *idx, int B, int N, int NC, int NPOS, int D)
{
    (void)be;
    tbi_tokens_bwd(dtokens, dcls, dpos, dx, idx, B, N, NC, NPOS, D);
    return 0;
}

int tbi_cpu_gather_rows(tbi_backend *be, float *dst, const float *src, const int32_t *idx, int B,
                        int N, int NK, int len)
{
    (void)be;
    tbi_gather_rows(dst, src, idx, B, N, NK, len);
    return 0;
}

int tbi_cpu_scale_add(tbi_backend *be, tbi_t out, const float *a, const float *x,
                      const float *scale, int B, size_t n)
{
    (void)be;
    struct views v = {.prec = TB_DTYPE_F32};
    TBI_TRY(views_check(&v, &out, 1));
    float *fo = view_out(&v, out, (size_t)B * n);
    TBI_TRY(views_oom(&v));
    tbi_scale_add(fo, a, tbi_f32(x), scale, B, n);
    store(&v, out, fo, (size_t)B * n);
    return 0;
}

/* x is read in its dtype by the kernel (no view: bf16 widens inside the loop); out is f32. */
int tbi_cpu_residual_add(tbi_backend *be, float *out, const float *a, tbi_t x,
                         const float *scale, int B, size_t n)
{
    (void)be;
    struct views v = {.prec = TB_DTYPE_F32};
    TBI_TRY(views_check(&v, &x, 1));
    if (!out || !a || !x.p || B < 0)
        return tbi_err(TB_EINVAL, "residual_add: an output, a residual and a branch, B >= 0");
    tbi_scale_add(out, a, x, scale, B, n);
    return 0;
}

int tbi_cpu_scatter_rows(tbi_backend *be, float *dst, const float *src, const int32_t *idx, int B,
                         int N, int NK, int len)
{
    (void)be;
    tbi_scatter_rows(dst, src, idx, B, N, NK, len);
    return 0;
}

int tbi_cpu_pos_tile_fwd(tbi_backend *be, float *pos, const float *spatial, const float *temporal,
                         int T, int S, int D)
{
    (void)be;
    tbi_pos_tile_fwd(pos, spatial, temporal, T, S, D);
    return 0;
}

int tbi_cpu_pos_tile_bwd(tbi_backend *be, float *dspatial, float *dtemporal, const float *dpos,
                         int T, int S, int D)
{
    (void)be;
    tbi_pos_tile_bwd(dspatial, dtemporal, dpos, T, S, D);
    return 0;
}

int tbi_cpu_embed_bwd(tbi_backend *be, float *dtable, const float *dx, const int32_t *ids, int R,
                      int V, int D)
{
    (void)be;
    for (int r = 0; r < R; r++)
        if (ids[r] < 0 || ids[r] >= V)
            return tbi_err(TB_EINVAL, "embedding row %d: id %d outside the table's %d", r,
                           (int)ids[r], V);
    tbi_embed_bwd(dtable, dx, ids, R, V, D);
    return 0;
}

int tbi_cpu_transpose(tbi_backend *be, float *out, const float *in, int R, int C)
{
    (void)be;
    tbi_transpose(out, in, R, C);
    return 0;
}

int tbi_cpu_tokens_fill_fwd(tbi_backend *be, float *x, const float *src, const float *fill,
                            const float *pos, const int32_t *idx, int B, int NS, int NF, int D)
{
    (void)be;
    tbi_tokens_fill_fwd(x, src, fill, pos, idx, B, NS, NF, D);
    return 0;
}

int tbi_cpu_tokens_fill_bwd(tbi_backend *be, float *dsrc, float *dfill, const float *dx, int B,
                            int NS, int NF, int D)
{
    (void)be;
    tbi_tokens_fill_bwd(dsrc, dfill, dx, B, NS, NF, D);
    return 0;
}

int tbi_cpu_patch_target(tbi_backend *be, float *out, const float *cols, int R, int C, int PP,
                         const float *host_mean, const float *host_std, int norm)
{
    (void)be;
    tbi_patch_target(out, cols, R, C, PP, host_mean, host_std, norm);
    return 0;
}

int tbi_cpu_mse_fwd(tbi_backend *be, float *loss, tbi_t pred, const float *tgt, const float *w,
                    int R, int C)
{
    (void)be;
    struct views v = {.prec = TB_DTYPE_F32};
    TBI_TRY(views_check(&v, &pred, 1));
    const float *fp = view_in(&v, pred, (size_t)R * C);
    TBI_TRY(views_oom(&v));
    *loss = tbi_mse_fwd(fp, tgt, w, R, C);
    return 0;
}

int tbi_cpu_mse_bwd(tbi_backend *be, float *dpred, tbi_t pred, const float *tgt, const float *w,
                    int R, int C)
{
    (void)be;
    struct views v = {.prec = TB_DTYPE_F32};
    TBI_TRY(views_check(&v, &pred, 1));
    const float *fp = view_in(&v, pred, (size_t)R * C);
    TBI_TRY(views_oom(&v));
    tbi_mse_bwd(dpred, fp, tgt, w, R, C);
    return 0;
}

int tbi_cpu_pool_fwd(tbi_backend *be, int pool, float *pooled, const float *x, int B, int N, int D)
{
    (void)be;
    tbi_pool_fwd(pool, pooled, x, B, N, D);
    return 0;
}

int tbi_cpu_pool_bwd(tbi_backend *be, int pool, float *dx, const float *dpooled, int B, int N,
                     int D)
{
    (void)be;
    tbi_pool_bwd(pool, dx, dpooled, B, N, D);
    return 0;
}

int tbi_cpu_adamw(tbi_backend *be, float *param, const float *grad, float grad_scale, float *m,
                  float *v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t step)
{
    (void)be;
    tbi_adamw(param, grad, grad_scale, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
    return 0;
}

int tbi_cpu_lion(tbi_backend *be, float *param, const float *grad, float grad_scale, float *m,
                 size_t n, float lr, float beta1, float beta2, float weight_decay)
{
    (void)be;
    tbi_lion(param, grad, grad_scale, m, n, lr, beta1, beta2, weight_decay);
    return 0;
}

int tbi_cpu_sgd(tbi_backend *be, float *param, const float *grad, float grad_scale, float *m,
                size_t n, float lr, float momentum, float weight_decay)
{
    (void)be;
    tbi_sgd(param, grad, grad_scale, m, n, lr, momentum, weight_decay);
    return 0;
}

int tbi_cpu_sum_squares_acc(tbi_backend *be, double *acc, const float *x, size_t n)
{
    (void)be;
    *acc += tbi_sum_squares(x, n);
    return 0;
}

int tbi_cpu_step_loss(tbi_backend *be, struct tbi_step_stats *st, const float *loss, int K)
{
    (void)be;
    tbi_step_loss(st, loss, K);
    return 0;
}

int tbi_cpu_step_check(tbi_backend *be, struct tbi_step_stats *st, int span, int fused,
                       double max_norm, int K, int64_t step, int64_t epoch, int64_t batch)
{
    (void)be;
    tbi_step_check(st, span, fused, max_norm, K, step, epoch, batch);
    return 0;
}

int tbi_cpu_adamw_checked(tbi_backend *be, float *param, const float *grad,
                          const struct tbi_step_stats *st, float *m, float *v, size_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int64_t step)
{
    (void)be;
    if (!st->bad)
        tbi_adamw(param, grad, st->scale, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
    return 0;
}

int tbi_cpu_lion_checked(tbi_backend *be, float *param, const float *grad,
                         const struct tbi_step_stats *st, float *m, size_t n, float lr, float beta1,
                         float beta2, float weight_decay)
{
    (void)be;
    if (!st->bad)
        tbi_lion(param, grad, st->scale, m, n, lr, beta1, beta2, weight_decay);
    return 0;
}

int tbi_cpu_sgd_checked(tbi_backend *be, float *param, const float *grad,
                        const struct tbi_step_stats *st, float *m, size_t n, float lr,
                        float momentum, float weight_decay)
{
    (void)be;
    if (!st->bad)
        tbi_sgd(param, grad, st->scale, m, n, lr, momentum, weight_decay);
    return 0;
}

int tbi_cpu_infonce_fwd(tbi_backend *be, float *loss, double *work, const float *v, const float *t,
                        int N, int E, const double *scale)
{
    (void)be;
    *loss = (float)tbi_infonce_fwd(work, v, t, N, E, *scale);
    return 0;
}

int tbi_cpu_infonce_bwd(tbi_backend *be, float *dv, float *dt, double *dscale, double *work, int N,
                        int E, const double *scale, int row0, int rows, float mult)
{
    if (row0 < 0 || rows < 0 || row0 + rows > N)
        return tbi_err(TB_EINVAL, "%s infonce_bwd: rows [%d, %d) of %d", be->name, row0,
                       row0 + rows, N);
    tbi_infonce_bwd(dv, dt, dscale, work, N, E, *scale, row0, rows, mult);
    return 0;
}

int tbi_cpu_logit_scale(tbi_backend *be, double *scale, float *param)
{
    (void)be;
    *scale = tbi_logit_scale(param);
    return 0;
}

int tbi_cpu_logit_scale_bwd(tbi_backend *be, float *grad, const double *dscale, const double *scale)
{
    (void)be;
    *grad = (float)(*dscale * *scale);
    return 0;
}

static const struct tbi_ops cpu_ops = {
#define TBI_OP_ENTRY(name, params, args) .name = tbi_cpu_##name,
    TBI_OP_LIST(TBI_OP_ENTRY)
#undef TBI_OP_ENTRY
};

int tbi_cpu_open(tbi_backend *be)
{
    be->name = "cpu";
    be->device = TB_DEVICE_CPU;
    be->ops = &cpu_ops;
    return 0;
}
