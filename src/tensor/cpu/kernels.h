/* src/tensor/cpu/kernels.h - the CPU reference kernels (the specification every backend is
 * checked against), called through the CPU backend's op table (src/tensor/backend.h) and
 * directly by the op tests and benchmarks. Float32, row-major, shapes in
 * the legend of include/tubelet/tensor.h. Backward functions ACCUMULATE (+=) into their
 * gradient outputs, which the caller zeroes, except the input gradients of matmul and (Quick)GELU:
 * those are written (=), since nothing else adds to them in a ViT and a zeroing pass over
 * the widest activations costs more than it is worth. Where the CPU has AVX-512 some kernels
 * have a second, faster implementation; tbi_cpu_avx512() chooses, and TUBELET_CPU=portable
 * forces the portable one everywhere (TUBELET_CPU=avx512: AVX-512, but not the avx512_bf16
 * paths, tbi_cpu_avx512_bf16). Tests: tests/test_ops.c. */
#ifndef TUBELET_TENSOR_CPU_KERNELS_H
#define TUBELET_TENSOR_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "core/cpu.h"

/* tbi_cpu_avx512() and tbi_cpu_avx512_bf16(), the switches every AVX-512 choice below goes
 * by, are decided once for the whole library in src/core/cpu.h. */

/* The fair share of a busy machine (share.c): tbi_share_tick(on), called before the products
 * from the thread that calls the ops with the backend's option (tbi_backend's share), sets
 * that thread's OpenMP team to the cores other processes leave free, measured every 0.25 s
 * (TUBELET_CPU_SHARE=off: never); with on 0 the team goes back to its ceiling and stays;
 * tbi_share_team is its rule: the ceiling (the team OpenMP was set to) less the cores others
 * use (others) rounded, at least 1. */
void tbi_share_tick(int on);
int tbi_share_team(int ceiling, double others);

/* C (M, N) = alpha * op(A) @ op(B) + beta * C, row-major, op = transpose when ta / tb (BLAS
 * semantics; C is not read when beta == 0). Which engine:
 * - inside an OpenMP region (omp_get_level() > 0, a team of one included): our own kernel on
 *   the calling thread alone, the AVX-512 one where tbi_cpu_avx512(), else the portable one;
 *   never OpenBLAS;
 * - outside: the AVX-512 kernel on all threads where tbi_cpu_avx512() and TUBELET_GEMM is
 *   not "openblas" (tbi_sgemm_uses_own), else OpenBLAS on its threads, but only where its team
 *   cannot come out smaller than it asks (with OMP_DYNAMIC, OMP_THREAD_LIMIT under the thread
 *   count, or no active level left, Debian 12's OpenMP build of OpenBLAS 0.3.21 spins in
 *   sched_yield forever): there our own kernels run on the team we get. */
void tbi_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc);
/* C (M, N) = op(A) @ op(B) + bias (N), added to every row (NULL: none); the bias comes with
 * the product's first pass over C, not as a second one. Engines as tbi_sgemm. */
void tbi_sgemm_bias(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                    int ldb, const float *bias, float *C, int ldc);
/* C (M, N) = A^T @ B (A is K x M) and colsum (M) = the column sums of A, in row order (the
 * bits of tbi_colsum): the weight and bias gradients of a Linear layer in one pass over A
 * where the AVX-512 kernel runs (its packing adds each row as it goes). Engines as tbi_sgemm. */
void tbi_sgemm_tn_colsum(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                         float *C, int ldc, float *colsum);
/* The AVX-512 kernel itself (all threads outside a region, the calling one inside): -1 where
 * tbi_cpu_avx512() is 0 (or out of memory), else 0. */
int tbi_sgemm_own(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);
/* The portable kernel itself: plain C, on the calling thread, any CPU, no allocation; every
 * element sums over k in order, so its bits do not depend on who calls it. */
void tbi_sgemm_portable(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc);
/* 1 where products outside an OpenMP region run on the AVX-512 kernel (tbi_cpu_avx512() and
 * not TUBELET_GEMM=openblas): its bits do not depend on the number of threads. */
int tbi_sgemm_uses_own(void);

/* C (M, N, f32) = op(A) @ op(B) + bias (N, added to every row; NULL: none), row-major, op =
 * transpose when ta / tb; A and B each stored as adt / bdt (enum tb_dtype: f32, rounded to
 * bf16 as read, or bf16): every operand rounded to bf16, the products summed in f32, pairs of k
 * at a time (VDPBF16PS: each pair's two products added one by one, rounded to nearest even,
 * subnormals flushed), so not the bits of tbi_sgemm on the rounded operands. sums (M, ta only;
 * NULL: none) = the rows of op(A) as rounded, summed in order (tbi_colsum's bits on the
 * rounded A). All threads outside an OpenMP region, the calling one inside. 0, or -1 (having
 * written nothing) without avx512_bf16 (tbi_cpu_avx512_bf16), out of memory, or sums with !ta. */
int tbi_gemm_bf16(int ta, int tb, int M, int N, int K, const void *A, int adt, int lda,
                  const void *B, int bdt, int ldb, const float *bias, float *C, int ldc,
                  float *sums);
/* tbi_matmul_bwd's products (dinp, dw written; dbias the rounded dout's column sums; each may
 * be NULL, but dbias only with dw) from dout, inp, w stored as ddt, idt, wdt, on tbi_gemm_bf16;
 * with two threads the two products side by side. 0, or -1 as tbi_gemm_bf16 (or dbias without
 * dw): then the outputs are undefined and the caller runs its f32 twin. */
int tbi_matmul_bwd_bf16(float *dinp, float *dw, float *dbias, const void *dout, int ddt,
                        const void *inp, int idt, const void *w, int wdt, int M, int K, int N);

/* Per-thread scratch kept between calls, one buffer per use; grows to bytes (64-byte aligned)
 * and returns it, or NULL when out of memory. Freed only with its thread. */
enum {
    TBI_SCRATCH_GEMM,
    TBI_SCRATCH_ATTENTION,
    TBI_SCRATCH_GEMM_BF16, /* gemm_bf16.c's packed operands */
    TBI_SCRATCH_TYPED, /* TBI_SCRATCH_TYPED_N of them: the typed ops' f32 views (backend_cpu.c) */
    TBI_SCRATCH_TYPED_N = 6,
    TBI_SCRATCH_N = TBI_SCRATCH_TYPED + TBI_SCRATCH_TYPED_N
};
float *tbi_scratch(int use, size_t bytes);

/* out (M, N) = inp (M, K) @ w^T, w (N, K), + bias (N) when bias != NULL (PyTorch Linear). */
void tbi_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int M,
                    int K, int N);
/* dinp (M, K) = dout @ w; dw (N, K) = dout^T @ inp; dbias (N) = colsum(dout); all written,
 * not accumulated (every parameter of the model is used once per step). Any of dinp, dw,
 * dbias may be NULL (not wanted). */
void tbi_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                    const float *w, int M, int K, int N);

/* sum (N) = the column sums of x (M, N). */
void tbi_colsum(float *sum, const float *x, int M, int N);

/* LayerNorm over the last dim: out, inp (R, C); w, b (C); mean, rstd (R) saved for backward. */
void tbi_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int R, int C, float eps);
/* dinp (R, C) += the input gradient (added: a residual stream's gradient collects there);
 * dw, db (C) = the parameter gradients (written). */
void tbi_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, const float *mean, const float *rstd, int R, int C);

/* Exact GELU (erf), elementwise over n. */
void tbi_gelu_fwd(float *out, const float *inp, size_t n);
/* dinp = dout * GELU'(inp) (written; dinp may be dout itself); also out = GELU(inp) when out
 * is not NULL (the backward of a block needs both, and they share the costly part, Phi(inp));
 * out may be inp itself. */
void tbi_gelu_bwd(float *dinp, float *out, const float *inp, const float *dout, size_t n);

/* QuickGELU, OpenAI CLIP's: x * sigmoid(1.702 x), elementwise over n. */
void tbi_quickgelu_fwd(float *out, const float *inp, size_t n);
/* dinp = dout * QuickGELU'(inp), out = QuickGELU(inp) when not NULL: tbi_gelu_bwd's contract
 * (dinp written, may be dout itself; out may be inp itself). */
void tbi_quickgelu_bwd(float *dinp, float *out, const float *inp, const float *dout, size_t n);

/* out = a + b, elementwise over n (the backward is a copy into both). */
void tbi_add_fwd(float *out, const float *a, const float *b, size_t n);

/* Multi-head attention the FlashAttention way: tiles of queries against tiles of keys with an
 * online softmax; only the log-sum-exp per query row is saved, the backward recomputes the
 * probabilities tile by tile; nothing N x N is ever held.
 * qkv (B, N, 3, NH, HS) as timm's qkv Linear output; out (B, N, NH, HS) = (B, N, D);
 * lse (B, NH, N). Scale HS^-0.5. causal != 0: query i attends to keys j <= i only (GPT's and
 * CLIP's text mask; the later keys get probability 0), in the forward and the backward alike;
 * tiles of keys wholly past a tile's queries are skipped. 0, or -1 out of memory (the
 * outputs are then NaN where a thread had no scratch). */
int tbi_attention_fwd(float *out, float *lse, const float *qkv, int B, int N, int NH, int HS,
                      int causal);
/* dqkv (B, N, 3, NH, HS) = gradients of q, k, v given dout (B, N, D) and the forward's out,
 * lse (written, not accumulated); causal as the forward's. 0 or -1 as the forward. */
int tbi_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                      const float *lse, int B, int N, int NH, int HS, int causal);
/* The two paths behind them: tile products through tbi_sgemm (attention.c, any CPU; 0 or -1
 * as above), and AVX-512 register tiles of its own (attention_avx512.c), used where
 * tbi_cpu_avx512(); those return -1 (having written nothing) without it or out of memory,
 * else 0. Both take causal. */
int tbi_attention_fwd_tiles(float *out, float *lse, const float *qkv, int B, int N, int NH, int HS,
                            int causal);
int tbi_attention_bwd_tiles(float *dqkv, const float *dout, const float *qkv, const float *out,
                            const float *lse, int B, int N, int NH, int HS, int causal);
int tbi_attention_fwd_avx512(float *out, float *lse, const float *qkv, int B, int N, int NH, int HS,
                             int causal);
int tbi_attention_bwd_avx512(float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse, int B, int N, int NH, int HS, int causal);

/* Softmax cross-entropy with label smoothing, PyTorch's definition, mean over the batch:
 * logits (B, K), targets (B); returns the loss; probs (B, K) saved for the backward. */
float tbi_xent_fwd(float *probs, const float *logits, const int64_t *targets, int B, int K,
                   float smoothing);
/* dlogits (B, K) = (probs - smoothed one-hot) / B (overwrites). */
void tbi_xent_bwd(float *dlogits, const float *probs, const int64_t *targets, int B, int K,
                  float smoothing);

/* Soft-target cross-entropy, mean over the batch of sum_k -targets log softmax: targets
 * (B, K); returns the loss; probs saved. The backward writes (probs * sum_k targets -
 * targets) / B. */
float tbi_xent_soft_fwd(float *probs, const float *logits, const float *targets, int B, int K);
void tbi_xent_soft_bwd(float *dlogits, const float *probs, const float *targets, int B, int K);

/* Tubelet patches of a video as rows: video (B, C, T, H, W) -> cols (B * N, C * TU * P * P),
 * row n = (t, h, w) token, columns in Conv3d weight order (c, dt, dy, dx). Then the patch
 * embedding is tbi_matmul_fwd with the weight viewed as (D, C * TU * P * P). */
void tbi_patchify(float *cols, const float *video, int B, int C, int T, int H, int W, int TU,
                  int P);

/* AdamW on one tensor, PyTorch's update (decoupled decay: p *= 1 - lr * wd first), step >= 1,
 * from the gradient times grad_scale (each product rounded to float, as if the gradient had
 * been scaled in place first). */
void tbi_adamw(float *param, const float *grad, float grad_scale, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step);

/* Lion on one tensor (the op list's contract), from the gradient times grad_scale. */
void tbi_lion(float *param, const float *grad, float grad_scale, float *m, size_t n, float lr,
              float beta1, float beta2, float weight_decay);

/* PyTorch's SGD with momentum on one tensor (the op list's contract). */
void tbi_sgd(float *param, const float *grad, float grad_scale, float *m, size_t n, float lr,
             float momentum, float weight_decay);

/* x (n) rounded in place to the nearest bfloat16 (ties to even), kept as float: the sign, the
 * 8 exponent bits and the top 7 mantissa bits; infinities stay, a NaN stays a NaN (quiet). */
void tbi_round_bf16(float *x, size_t n);
/* The same rounding from src into dst; into bf16's bits (uint16_t); and bf16 widened to
 * float (exact). */
void tbi_round_bf16_copy(float *dst, const float *src, size_t n);
void tbi_bf16_from_f32(uint16_t *dst, const float *src, size_t n);
void tbi_f32_from_bf16(float *dst, const uint16_t *src, size_t n);

/* Sum of squares of x (n), accumulated in double. */
double tbi_sum_squares(const float *x, size_t n);

/* A step's numbers (backend.h's struct tbi_step_stats; step.c): st->loss += *loss / K; the
 * non-finite check and clipping factor of step_check, as the op list says. */
struct tbi_step_stats;
void tbi_step_loss(struct tbi_step_stats *st, const float *loss, int K);
void tbi_step_check(struct tbi_step_stats *st, int span, int fused, double max_norm, int K,
                    int64_t step, int64_t epoch, int64_t batch);

/* The contrastive losses (contrastive.c) are declared in src/tensor/contrastive.h, for the
 * models too. */

#endif /* TUBELET_TENSOR_CPU_KERNELS_H */
