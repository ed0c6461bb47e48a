/* src/tensor/backend.h - the backend boundary: one op list (TBI_OP_LIST) from which the op
 * table, each backend's prototypes and tables, the guarded test backend's wrappers and the
 * parity harness's list of names are all generated. Every op returns 0 or a negative TB_E*
 * code and takes the backend (its context: a CUDA stream, library handles and workspace live
 * there), and pointers to backend memory, which only ops may read or write: model, optimizer,
 * checkpoint and trainer code move data with the memory ops (to_device, to_host) alone.
 * Row-major, shapes in the legend of include/tubelet/tensor.h; "host" marks the few arguments
 * that live in host memory. The tensors bf16 mode stores as bf16 (activations, the products'
 * operands and outputs: docs/PRECISION.md) cross as tbi_t, a pointer with its element type;
 * the rest are float32 (weights, LayerNorm statistics, the residual stream, losses, optimizer
 * state, reductions) or say their type (int64 labels, uint8 clips, int32 indices). What
 * each op computes is written beside its CPU reference in src/tensor/cpu/kernels.h and
 * model_ops.c. Tests: tests/test_backend.c (every
 * op of every compiled backend against the CPU reference), tests/test_ops.c (the reference). */
#ifndef TUBELET_TENSOR_BACKEND_H
#define TUBELET_TENSOR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "tubelet/tensor.h"

typedef struct tbi_backend tbi_backend;

/* A typed tensor: backend memory at p (NULL: none, where an op allows it) holding elements of
 * dt, TB_DTYPE_F32 (float) or TB_DTYPE_BF16 (uint16_t: a float's upper half; stored from f32
 * by rounding to nearest, ties to even, a NaN staying a NaN). An op reads any dtype exactly
 * (bf16 widens exactly) and rounds what it writes to its tensor's dtype. */
typedef struct {
    void *p;
    int dt; /* enum tb_dtype */
} tbi_t;
/* p as a tensor of dt, and as one of f32 (const only for the caller's convenience: an op
 * writes only the tensors its contract says it writes). */
static inline tbi_t tbi_t_of(const void *p, int dt)
{
    tbi_t t = {(void *)(uintptr_t)p, dt};
    return t;
}
static inline tbi_t tbi_f32(const float *p)
{
    return tbi_t_of(p, TB_DTYPE_F32);
}
/* Bytes of one element of dt. */
static inline size_t tbi_dt_size(int dt)
{
    return dt == TB_DTYPE_BF16 ? 2 : 4;
}

/* Rules written once for the CPU and the CUDA backends (src/tensor/optim_rules.h, xent_rules.h
 * and the other rule headers): host and device functions under nvcc; elsewhere always
 * inlined, also in the unoptimised sanitizer build, where a call per element would cost more
 * than the element's arithmetic. */
#ifdef __CUDACC__
#define TBI_HD __host__ __device__
#else
#define TBI_HD __attribute__((always_inline))
#endif

/* Activations of a transformer MLP (tbi_act_*). */
enum tbi_act { TBI_ACT_GELU, TBI_ACT_QUICKGELU };
/* Token pooling (pool_fwd/pool_bwd): the first token (a class token), or the mean. */
enum tbi_pool { TBI_POOL_FIRST, TBI_POOL_MEAN };

/* A training step's numbers, kept on the backend so that a step never waits for the host
 * (the step_* ops write them; the loop reads the whole struct once per log interval and
 * before a checkpoint; docs/DEVELOPING.md, "Syncs in a step"). The first block is this
 * step's (zeroed at its start); the second, once bad is set, holds the first non-finite
 * step's and stays: every *_checked update is skipped from then on, so the weights are the
 * ones before that step when the host reads the flag. */
enum tbi_bad { TBI_BAD_NONE, TBI_BAD_LOSS, TBI_BAD_NORM, TBI_BAD_SPAN };
struct tbi_step_stats {
    float loss;        /* the micro-batches' mean loss (then, reduced, the processes' mean) */
    float scale;       /* the update's gradient factor: clipping x 1 / K (step_check) */
    double sumsq;      /* the gradient's sum of squares (sum_squares_acc) */
    double span_sumsq; /* fused updates: the current span's */
    double norm;       /* sqrt(sumsq) / K (step_check) */
    int32_t bad;       /* enum tbi_bad: what was not finite first; sticky */
    int32_t bad_span;  /* TBI_BAD_SPAN: the span */
    int64_t bad_step, bad_epoch, bad_batch; /* where (as the caller of step_check numbers them) */
    float bad_loss;
    double bad_norm;
};

/* X(name, parameters, arguments): every op, in one list. */
#define TBI_OP_LIST(X)                                                                             \
    /* memory: bytes of backend memory, zeroed; freed with free (NULL is a no-op) */               \
    X(alloc, (tbi_backend * be, size_t bytes, void **out), (be, bytes, out))                       \
    /* zeroed memory whose pages cost nothing until written (the CPU's: fresh pages of the         \
     * system, 16-byte aligned): the optimizer's moments, where a large embedding table's          \
     * untouched rows stay unwritten (adamw, lion) */                                              \
    X(alloc_zero, (tbi_backend * be, size_t bytes, void **out), (be, bytes, out))                  \
    X(free, (tbi_backend * be, void *p), (be, p))                                                  \
    X(zero, (tbi_backend * be, void *p, size_t bytes), (be, p, bytes))                             \
    X(to_device, (tbi_backend * be, void *dst, const void *host_src, size_t bytes),                \
      (be, dst, host_src, bytes))                                                                  \
    X(to_host, (tbi_backend * be, void *host_dst, const void *src, size_t bytes),                  \
      (be, host_dst, src, bytes))                                                                  \
    X(copy, (tbi_backend * be, void *dst, const void *src, size_t bytes), (be, dst, src, bytes))   \
    X(sync, (tbi_backend * be), (be))                                                              \
    /* *host_bytes = the backend memory free for new allocations: a plan is checked against it     \
     * before its arena is made (the CPU's: MemAvailable, else all of its RAM) */                  \
    X(mem_avail, (tbi_backend * be, uint64_t * host_bytes), (be, host_bytes))                      \
    /* data parallelism: x (n) becomes a bucket of the mean over the processes, which may run      \
     * while later ops do (x untouched until reduce_wait); after reduce_wait every bucket          \
     * holds its mean. The CPU's run in the wait; one process: nothing to do */                    \
    X(reduce_start, (tbi_backend * be, float *x, size_t n), (be, x, n))                            \
    X(reduce_wait, (tbi_backend * be), (be))                                                       \
    /* all (processes, n) = every process's x (n), in rank order (data parallelism's               \
     * all-gather: the contrastive loss's features); one process: a copy */                        \
    X(gather, (tbi_backend * be, float *all, const float *x, size_t n), (be, all, x, n))           \
    /* x (n) = process root's x on every process, after the work queued before it (--zero:         \
     * the weights a process updated, to the others); one process: nothing */                      \
    X(bcast, (tbi_backend * be, float *x, size_t n, int root), (be, x, n, root))                   \
    /* out (M, N) = inp (M, K) @ w (N, K)^T + bias (N, or none). prec is the product's type:       \
     * TB_DTYPE_BF16 (bf16 mode's products, autocast's) rounds every operand to bf16 as it is      \
     * read and every result as it is written, whatever the tensors' own dtypes; f32: none */      \
    X(matmul_fwd,                                                                                  \
      (tbi_backend * be, int prec, tbi_t out, tbi_t inp, tbi_t w, tbi_t bias, int M, int K,        \
       int N),                                                                                     \
      (be, prec, out, inp, w, bias, M, K, N))                                                      \
    /* dinp (M, K) = dout @ w; dw (N, K) = dout^T @ inp; dbias = colsum(dout); written, any        \
     * may be none; prec as matmul_fwd's */                                                        \
    X(matmul_bwd,                                                                                  \
      (tbi_backend * be, int prec, tbi_t dinp, tbi_t dw, tbi_t dbias, tbi_t dout, tbi_t inp,       \
       tbi_t w, int M, int K, int N),                                                              \
      (be, prec, dinp, dw, dbias, dout, inp, w, M, K, N))                                          \
    X(layernorm_fwd,                                                                               \
      (tbi_backend * be, tbi_t out, float *mean, float *rstd, const float *inp, const float *w,    \
       const float *b, int R, int C, float eps),                                                   \
      (be, out, mean, rstd, inp, w, b, R, C, eps))                                                 \
    /* dinp += the input gradient; dw, db written */                                               \
    X(layernorm_bwd,                                                                               \
      (tbi_backend * be, float *dinp, float *dw, float *db, tbi_t dout, const float *inp,          \
       const float *w, const float *mean, const float *rstd, int R, int C),                        \
      (be, dinp, dw, db, dout, inp, w, mean, rstd, R, C))                                          \
    X(act_fwd, (tbi_backend * be, int act, tbi_t out, tbi_t inp, size_t n),                        \
      (be, act, out, inp, n))                                                                      \
    /* dinp = dout * act'(inp) (may be dout); out = act(inp) when not none (may be inp) */         \
    X(act_bwd,                                                                                     \
      (tbi_backend * be, int act, tbi_t dinp, tbi_t out, tbi_t inp, tbi_t dout, size_t n),         \
      (be, act, dinp, out, inp, dout, n))                                                          \
    X(add, (tbi_backend * be, float *out, const float *a, const float *b, size_t n),               \
      (be, out, a, b, n))                                                                          \
    /* B segments of n: out = a + scale[b] x in segment b (a NULL: 0; scale (B) on the device;     \
     * out may be a or x): drop path's per-clip branch factors */                                  \
    X(scale_add,                                                                                   \
      (tbi_backend * be, tbi_t out, const float *a, const float *x, const float *scale, int B,     \
       size_t n),                                                                                  \
      (be, out, a, x, scale, B, n))                                                                \
    /* a block's branch x (B segments of n, the block's dtype: bf16 widened exactly) onto the      \
     * residual stream: out = a + scale[b] x in segment b (drop path's factors, on the device);    \
     * scale NULL: out = a + x exactly, no multiply. out may be a (or x where x is f32) */         \
    X(residual_add,                                                                                \
      (tbi_backend * be, float *out, const float *a, tbi_t x, const float *scale, int B,           \
       size_t n),                                                                                  \
      (be, out, a, x, scale, B, n))                                                                \
    /* qkv (B, N, 3, NH, HS) -> out (B, N, D), lse (B, NH, N); causal: key j > query i masked */   \
    X(attention_fwd,                                                                               \
      (tbi_backend * be, tbi_t out, float *lse, tbi_t qkv, int B, int N, int NH, int HS,           \
       int causal),                                                                                \
      (be, out, lse, qkv, B, N, NH, HS, causal))                                                   \
    X(attention_bwd,                                                                               \
      (tbi_backend * be, tbi_t dqkv, tbi_t dout, tbi_t qkv, tbi_t out, const float *lse, int B,    \
       int N, int NH, int HS, int causal),                                                         \
      (be, dqkv, dout, qkv, out, lse, B, N, NH, HS, causal))                                       \
    /* loss (1) = mean smoothed cross-entropy of logits (B, K) at targets (B); probs saved */      \
    X(xent_fwd,                                                                                    \
      (tbi_backend * be, float *loss, float *probs, const float *logits, const int64_t *targets,   \
       int B, int K, float smoothing),                                                             \
      (be, loss, probs, logits, targets, B, K, smoothing))                                         \
    X(xent_bwd,                                                                                    \
      (tbi_backend * be, float *dlogits, const float *probs, const int64_t *targets, int B, int K, \
       float smoothing),                                                                           \
      (be, dlogits, probs, targets, B, K, smoothing))                                              \
    /* soft-target cross-entropy: loss (1) = mean over b of sum_k -targets[b][k] log               \
     * softmax(logits[b])[k] (timm's SoftTargetCrossEntropy), targets (B, K) on the device;        \
     * probs saved. The backward writes dlogits = (probs * sum_k targets - targets) / B            \
     * (probs - targets where each row of targets sums to 1, as mixup's do) */                     \
    X(xent_soft_fwd,                                                                               \
      (tbi_backend * be, float *loss, float *probs, const float *logits, const float *targets,     \
       int B, int K),                                                                              \
      (be, loss, probs, logits, targets, B, K))                                                    \
    X(xent_soft_bwd,                                                                               \
      (tbi_backend * be, float *dlogits, const float *probs, const float *targets, int B, int K),  \
      (be, dlogits, probs, targets, B, K))                                                         \
    /* mixing a batch with its reverse, in place, x (B, C, T, H, W): without a box (mixup),        \
     * clip b = lam clip b + (1 - lam) clip B-1-b (timm's x * lam + x.flip(0) * (1 - lam));        \
     * with host_box (y0, y1, x0, x1; 0 <= y0 <= y1 <= H, 0 <= x0 <= x1 <= W: cutmix), that        \
     * box of every frame and channel of clip b = clip B-1-b's (VideoMAE's video cutmix) */        \
    X(mix_clips,                                                                                   \
      (tbi_backend * be, float *x, int B, int CT, int H, int W, float lam, const int *host_box),   \
      (be, x, B, CT, H, W, lam, host_box))                                                         \
    /* random erasing in place, x (B, C, T, H, W): host_boxes (B, T, 4) gives frame t of clip      \
     * b's box (y0, y1, x0, x1; y0 < 0: none); its pixels, in (t, c, y, x) order over the          \
     * clip's boxes, become the successive tb_rng_normal draws of the stream                       \
     * tb_rng_init(seed, host_streams[b]) (one Philox block each: counter-addressable) */          \
    X(erase_boxes,                                                                                 \
      (tbi_backend * be, float *x, int B, int C, int T, int H, int W, const int32_t *host_boxes,   \
       uint64_t seed, const uint64_t *host_streams),                                               \
      (be, x, B, C, T, H, W, host_boxes, seed, host_streams))                                      \
    /* uint8 clips (B, T, H, W, 3) -> float (B, 3, T, H, W), (x - mean) / std per channel          \
     * (host arrays of 3, 0-255 scale), clip b mirrored where flip (B, or NULL) is set */          \
    X(normalize,                                                                                   \
      (tbi_backend * be, float *out, const uint8_t *clips, const uint8_t *flip, int B, int T,      \
       int H, int W, const float *host_mean, const float *host_std),                               \
      (be, out, clips, flip, B, T, H, W, host_mean, host_std))                                     \
    X(patchify,                                                                                    \
      (tbi_backend * be, float *cols, const float *video, int B, int C, int T, int H, int W,       \
       int TU, int P),                                                                             \
      (be, cols, video, B, C, T, H, W, TU, P))                                                     \
    /* x (B, NC + N, D): rows [0, NC) of each clip = cls (NC, D), then tokens (B, N, D);           \
     * + pos on every clip when not NULL: row t of pos for row t, or with idx (B, N; int32)        \
     * row NC + idx[b][j] for token j of clip b (a subset of the positions) */                     \
    X(tokens_fwd,                                                                                  \
      (tbi_backend * be, float *x, const float *tokens, const float *cls, const float *pos,        \
       const int32_t *idx, int B, int N, int NC, int D),                                           \
      (be, x, tokens, cls, pos, idx, B, N, NC, D))                                                 \
    /* its backward from dx: dtokens (B, N, D), dcls (NC, D), dpos (NPOS, D) written; any may      \
     * be NULL */                                                                                  \
    X(tokens_bwd,                                                                                  \
      (tbi_backend * be, float *dtokens, float *dcls, float *dpos, const float *dx,                \
       const int32_t *idx, int B, int N, int NC, int NPOS, int D),                                 \
      (be, dtokens, dcls, dpos, dx, idx, B, N, NC, NPOS, D))                                       \
    /* dst (B, NK, len) = the rows idx (B, NK; int32, each < N) of src (B, N, len) */              \
    X(gather_rows,                                                                                 \
      (tbi_backend * be, float *dst, const float *src, const int32_t *idx, int B, int N, int NK,   \
       int len),                                                                                   \
      (be, dst, src, idx, B, N, NK, len))                                                          \
    /* dst (B, N, len): its rows idx (B, NK; int32, each < N) = src (B, NK, len); the other        \
     * rows untouched (gather_rows' adjoint) */                                                    \
    X(scatter_rows,                                                                                \
      (tbi_backend * be, float *dst, const float *src, const int32_t *idx, int B, int N, int NK,   \
       int len),                                                                                   \
      (be, dst, src, idx, B, N, NK, len))                                                          \
    /* x (B, NS + NF, D): row j < NS of clip b = src (B, NS, D)'s, the NF rows after it =          \
     * fill (D: MAE's mask token); + pos (*, D) row idx[b][j] on every row (idx (B, NS + NF)) */   \
    X(tokens_fill_fwd,                                                                             \
      (tbi_backend * be, float *x, const float *src, const float *fill, const float *pos,          \
       const int32_t *idx, int B, int NS, int NF, int D),                                          \
      (be, x, src, fill, pos, idx, B, NS, NF, D))                                                  \
    /* its backward: dsrc (B, NS, D), dfill (D) = the fill rows' gradients summed; written,        \
     * either may be NULL */                                                                       \
    X(tokens_fill_bwd,                                                                             \
      (tbi_backend * be, float *dsrc, float *dfill, const float *dx, int B, int NS, int NF,        \
       int D),                                                                                     \
      (be, dsrc, dfill, dx, B, NS, NF, D))                                                         \
    /* MAE targets: rows cols (R, C * PP) in patchify's layout (channel, then the tube's PP        \
     * pixels) of normalised video -> out (R, PP * C), pixel-major, channel-minor, of              \
     * u = x * std[c] + mean[c] (host arrays of C); with norm, each channel of a row as            \
     * (u - mean) / (unbiased std + 1e-6) over its PP values (VideoMAE's target) */                \
    X(patch_target,                                                                                \
      (tbi_backend * be, float *out, const float *cols, int R, int C, int PP,                      \
       const float *host_mean, const float *host_std, int norm),                                   \
      (be, out, cols, R, C, PP, host_mean, host_std, norm))                                        \
    /* loss (1) = sum_r w[r] mean_c (pred - tgt)^2 / sum_r w[r] over rows (R, C); w (R) >= 0,      \
     * some > 0; pred typed (a bf16 product's result in bf16 mode), the rest f32. The              \
     * backward writes dpred (which may be tgt) */                                                 \
    X(mse_fwd,                                                                                     \
      (tbi_backend * be, float *loss, tbi_t pred, const float *tgt, const float *w, int R, int C), \
      (be, loss, pred, tgt, w, R, C))                                                              \
    X(mse_bwd,                                                                                     \
      (tbi_backend * be, float *dpred, tbi_t pred, const float *tgt, const float *w, int R,        \
       int C),                                                                                     \
      (be, dpred, pred, tgt, w, R, C))                                                             \
    /* CLIP's video positions: pos (1 + T S, D), row 0 = spatial's row 0, row 1 + t S + s =        \
     * spatial (1 + S, D)'s row 1 + s + temporal (T, D)'s row t (temporal NULL: none) */           \
    X(pos_tile_fwd,                                                                                \
      (tbi_backend * be, float *pos, const float *spatial, const float *temporal, int T, int S,    \
       int D),                                                                                     \
      (be, pos, spatial, temporal, T, S, D))                                                       \
    /* its backward from dpos: dspatial and dtemporal (may be NULL) written */                     \
    X(pos_tile_bwd,                                                                                \
      (tbi_backend * be, float *dspatial, float *dtemporal, const float *dpos, int T, int S,       \
       int D),                                                                                     \
      (be, dspatial, dtemporal, dpos, T, S, D))                                                    \
    /* an embedding's backward: dtable (V, D) written, row v = the sum of the rows r of dx         \
     * (R, D) whose ids[r] (int32, each < V) is v, in row order */                                 \
    X(embed_bwd,                                                                                   \
      (tbi_backend * be, float *dtable, const float *dx, const int32_t *ids, int R, int V, int D), \
      (be, dtable, dx, ids, R, V, D))                                                              \
    /* out (C, R) = in (R, C) transposed (a CLIP projection's x @ proj as a matmul) */             \
    X(transpose, (tbi_backend * be, float *out, const float *in, int R, int C),                    \
      (be, out, in, R, C))                                                                         \
    /* pooled (B, D) = x (B, N, D)'s first row or mean over N; the backward writes dx */           \
    X(pool_fwd, (tbi_backend * be, int pool, float *pooled, const float *x, int B, int N, int D),  \
      (be, pool, pooled, x, B, N, D))                                                              \
    X(pool_bwd,                                                                                    \
      (tbi_backend * be, int pool, float *dx, const float *dpooled, int B, int N, int D),          \
      (be, pool, dx, dpooled, B, N, D))                                                            \
    /* PyTorch's AdamW on one tensor from grad * grad_scale, step >= 1 */                          \
    X(adamw,                                                                                       \
      (tbi_backend * be, float *param, const float *grad, float grad_scale, float *m, float *v,    \
       size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step), \
      (be, param, grad, grad_scale, m, v, n, lr, beta1, beta2, eps, weight_decay, step))           \
    /* Lion (AVION's) on one tensor from g = grad * grad_scale: param = param (1 - lr wd)          \
     * - lr sign(beta1 m + (1 - beta1) g), then m = beta2 m + (1 - beta2) g */                     \
    X(lion,                                                                                        \
      (tbi_backend * be, float *param, const float *grad, float grad_scale, float *m, size_t n,    \
       float lr, float beta1, float beta2, float weight_decay),                                    \
      (be, param, grad, grad_scale, m, n, lr, beta1, beta2, weight_decay))                         \
    /* PyTorch's SGD on one tensor (dampening 0, not Nesterov), from g = grad * grad_scale:        \
     * g += weight_decay param (coupled decay), m = momentum m + g (m starts at 0, so the          \
     * first step's m is g, as PyTorch's), param -= lr m */                                        \
    X(sgd,                                                                                         \
      (tbi_backend * be, float *param, const float *grad, float grad_scale, float *m, size_t n,    \
       float lr, float momentum, float weight_decay),                                              \
      (be, param, grad, grad_scale, m, n, lr, momentum, weight_decay))                             \
    /* *acc (1 double, backend memory) += the sum of squares of x (n), in double */                \
    X(sum_squares_acc, (tbi_backend * be, double *acc, const float *x, size_t n), (be, acc, x, n)) \
    /* st->loss += *loss (1) / K, both on the backend (a micro-batch's loss into the step's) */    \
    X(step_loss, (tbi_backend * be, struct tbi_step_stats * st, const float *loss, int K),         \
      (be, st, loss, K))                                                                           \
    /* Unless st->bad is set already: span >= 0 (fused updates), st->span_sumsq into st->sumsq     \
     * and bad = TBI_BAD_SPAN if it is not finite; span < 0 (the step's end), norm = sqrt(sumsq)   \
     * (/ K unless fused), bad = TBI_BAD_LOSS if the loss is not finite, else TBI_BAD_NORM if      \
     * the norm is not (fused: its spans were checked), else scale = the clipping factor           \
     * (max_norm / (norm + 1e-6) where 0 < max_norm < norm, else 1) / K. A new bad records         \
     * step, epoch, batch, loss and norm (host values, as the caller names them) */                \
    X(step_check,                                                                                  \
      (tbi_backend * be, struct tbi_step_stats * st, int span, int fused, double max_norm, int K,  \
       int64_t step, int64_t epoch, int64_t batch),                                                \
      (be, st, span, fused, max_norm, K, step, epoch, batch))                                      \
    /* adamw, lion and sgd with grad_scale = st->scale read on the backend; nothing is written     \
     * (weights, moments) once st->bad is set: the update of a non-finite step never lands */      \
    X(adamw_checked,                                                                               \
      (tbi_backend * be, float *param, const float *grad, const struct tbi_step_stats *st,         \
       float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,                \
       float weight_decay, int64_t step),                                                          \
      (be, param, grad, st, m, v, n, lr, beta1, beta2, eps, weight_decay, step))                   \
    X(lion_checked,                                                                                \
      (tbi_backend * be, float *param, const float *grad, const struct tbi_step_stats *st,         \
       float *m, size_t n, float lr, float beta1, float beta2, float weight_decay),                \
      (be, param, grad, st, m, n, lr, beta1, beta2, weight_decay))                                 \
    X(sgd_checked,                                                                                 \
      (tbi_backend * be, float *param, const float *grad, const struct tbi_step_stats *st,         \
       float *m, size_t n, float lr, float momentum, float weight_decay),                          \
      (be, param, grad, st, m, n, lr, momentum, weight_decay))                                     \
    /* The symmetric InfoNCE loss (model.h's tb_clip_infonce, to the bit) of v, t (N, E, not       \
     * normalised; pair i matches) at the logit scale *scale (1 double, on the backend): *loss     \
     * (1) written, and work (tbi_infonce_work(N, E) doubles) keeps what the backward needs.       \
     * Computed in double. The backward writes rows [row0, row0 + rows) of the gradients on v      \
     * and t, times mult, into dv, dt (rows, E; either may be NULL), and *dscale (1 double, or     \
     * NULL): the loss's gradient on the scale (data parallel: each process its own rows,          \
     * mult the processes) */                                                                      \
    X(infonce_fwd,                                                                                 \
      (tbi_backend * be, float *loss, double *work, const float *v, const float *t, int N, int E,  \
       const double *scale),                                                                       \
      (be, loss, work, v, t, N, E, scale))                                                         \
    X(infonce_bwd,                                                                                 \
      (tbi_backend * be, float *dv, float *dt, double *dscale, double *work, int N, int E,         \
       const double *scale, int row0, int rows, float mult),                                       \
      (be, dv, dt, dscale, work, N, E, scale, row0, rows, mult))                                   \
    /* CLIP's learned temperature: param (1, the log of the logit scale) clamped in place to       \
     * [0, 4.6052] (LaViLa's clamp_(0, 4.6052)), *scale (1 double) = exp of it */                  \
    X(logit_scale, (tbi_backend * be, double *scale, float *param), (be, scale, param))            \
    /* grad (1) = (float)(dscale x scale): the loss's gradient on that log, from its gradient      \
     * on the scale (infonce_bwd's) */                                                             \
    X(logit_scale_bwd, (tbi_backend * be, float *grad, const double *dscale, const double *scale), \
      (be, grad, dscale, scale))

/* The doubles of infonce_fwd's work: both sides' unit rows and their gradients (4 N E), the
 * logits and their gradient (2 N N), the norms (2 N). */
static inline size_t tbi_infonce_work(int N, int E)
{
    return 4 * (size_t)N * (size_t)E + 2 * (size_t)N * (size_t)N + 2 * (size_t)N;
}

/* The op table of a backend. A backend may leave an op NULL (one it does not have yet):
 * tbi_backend_supports says so, and a caller that may meet such a backend asks it first. */
struct tbi_ops {
#define TBI_OP_FIELD(name, params, args) int(*name) params;
    TBI_OP_LIST(TBI_OP_FIELD)
#undef TBI_OP_FIELD
};

/* The ops by number, in the list's order: TBI_OP_<name> (TBI_OP_matmul_fwd), TBI_OP_N. */
enum tbi_op {
#define TBI_OP_ENUM(name, params, args) TBI_OP_##name,
    TBI_OP_LIST(TBI_OP_ENUM)
#undef TBI_OP_ENUM
    TBI_OP_N
};

/* The ops whose tensors cross as tbi_t, so may be bf16 (docs/DEVELOPING.md, "Typed tensors");
 * every other op's are f32 or say their type. test_backend checks this list against the
 * signatures above. */
#define TBI_OP_BF16_LIST(X)                                                                        \
    X(matmul_fwd) X(matmul_bwd) X(layernorm_fwd) X(layernorm_bwd) X(act_fwd) X(act_bwd)           \
    X(scale_add) X(residual_add) X(attention_fwd) X(attention_bwd) X(mse_fwd)                      \
    X(mse_bwd)

struct tbi_backend {
    const char *name;          /* "cpu", "cpu-guarded", "cuda-emu", "cuda" */
    enum tb_device device;
    const struct tbi_ops *ops; /* every op: the backend's, or for an op it leaves out one that
                                * fails with TB_EUNSUPPORTED naming the op (tbi_backend_fill) */
    const struct tbi_ops *own; /* the backend's table as it gave it, holes NULL (NULL: ops) */
    struct tbi_ops filled;     /* ops, when the registry filled the holes */
    /* per op (enum tbi_op), the dtypes its tensors may have, a mask of 1 << enum tb_dtype;
     * NULL (every backend today): f32, and bf16 for TBI_OP_BF16_LIST's ops */
    const unsigned char *dtypes;
    int share;                 /* the CPU's fair share on (struct tbi_backend_opts) */
    void *ctx;                 /* the backend's own state */
};

/* The CPU backend's ops: tbi_cpu_<op>, the reference (src/tensor/cpu/backend_cpu.c). */
#define TBI_OP_PROTO(name, params, args) int tbi_cpu_##name params;
TBI_OP_LIST(TBI_OP_PROTO)
#undef TBI_OP_PROTO
/* The CPU backend's open, "cpu" in src/tensor/registry.c (the guarded backend opens it too):
 * host memory, no state. */
int tbi_cpu_open(tbi_backend *be);

/* The backends by name (src/tensor/registry.c: where a new backend registers). */

/* What a backend is opened with. */
struct tbi_backend_opts {
    /* 1: the CPU ops' OpenMP team follows the cores other processes leave free
     * (src/tensor/cpu/share.c; TUBELET_CPU_SHARE=off still keeps it fixed); 0: it stays at
     * OpenMP's setting. Speed only: no result changes. */
    int share;
};
/* Open the backend called name: "cpu" (the default, also for NULL or ""), "cpu-guarded" (a
 * test backend: the CPU ops on memory kept PROT_NONE outside them, so any read or write of
 * backend memory from outside an op crashes), "cuda-emu", "cuda" where built. opts NULL: the
 * process's defaults (share as tb_backend_set_share last said; off unless called). 0, or
 * TB_EUNSUPPORTED naming the known ones, or the backend's own failure; *out NULL then. */
int tbi_backend_open_opts(tbi_backend **out, const char *name,
                          const struct tbi_backend_opts *opts);
/* tbi_backend_open_opts with the process's defaults. */
int tbi_backend_open(tbi_backend **out, const char *name);
void tbi_backend_close(tbi_backend **be);
/* The names of the backends this build has, for messages and the parity test. */
extern const char *const tbi_backend_names[];
/* 1 if be has op (enum tbi_op) for tensors of dt (enum tb_dtype), else 0 (an op it left NULL,
 * a dtype it does not take, an op or dtype out of range). */
int tbi_backend_supports(const tbi_backend *be, int op, int dt);
/* op's name (enum tbi_op), as the op list spells it; "?" out of range. */
const char *tbi_op_name(int op);
/* be's table made whole: be->own keeps the backend's, be->ops becomes be->filled, where each
 * op it left NULL fails with TB_EUNSUPPORTED ("the NAME backend has no OP op"). The registry's
 * open does it for every backend, so a new backend runs what it has and names what it lacks. */
void tbi_backend_fill(tbi_backend *be);

/* be->ops->name(be, ...) */
#define TBI_OP(be, name, ...) ((be)->ops->name((be), __VA_ARGS__))

#endif /* TUBELET_TENSOR_BACKEND_H */
