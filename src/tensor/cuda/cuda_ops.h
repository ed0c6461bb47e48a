/* src/tensor/cuda/cuda_ops.h - the CUDA twins of the op list's per-element, per-row and
 * optimizer ops (src/tensor/backend.h): each tbc_<op> takes a stream, then the CPU op's
 * arguments in its order and meaning, device pointers where the CPU op takes backend memory.
 * Queued on s; 0, TB_EINVAL (a bad shape, dtype, activation or alignment: f32 needs 4 bytes,
 * bf16 2) or TB_ECUDA (the launch failed). Deterministic: no atomics, fixed reduction orders.
 * Not yet wired into a backend table. Kernels: layernorm.cu, elementwise.cu, optim.cu. Tests:
 * tests/gpu/ops_emulate.cpp (on the CPU against the CPU ops). Compiles as C11 and C++17. */
#ifndef TUBELET_TENSOR_CUDA_OPS_H
#define TUBELET_TENSOR_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "tensor/backend.h"

/* out (R, C) typed = (inp - mean) * rstd * w + b per row; mean, rstd (R) f32 written, rstd =
 * 1 / sqrt(var + eps), var the biased variance. One warp per row. */
int tbc_layernorm_fwd(cudaStream_t s, tbi_t out, float *mean, float *rstd, const float *inp,
                      const float *w, const float *b, int R, int C, float eps);

/* dinp (R, C) += the input gradient; dw, db (C) written (the sums over rows, in a fixed order:
 * a second kernel, one block per 32 columns). dout typed. */
int tbc_layernorm_bwd(cudaStream_t s, float *dinp, float *dw, float *db, tbi_t dout,
                      const float *inp, const float *w, const float *mean, const float *rstd,
                      int R, int C);

/* act (enum tbi_act): exact-erf GELU or QuickGELU, x sigmoid(1.702 x); out may be inp. The
 * backward writes dinp = dout act'(inp) (may be dout), and out = act(inp) when out.p (may be
 * inp). */
int tbc_act_fwd(cudaStream_t s, int act, tbi_t out, tbi_t inp, size_t n);
int tbc_act_bwd(cudaStream_t s, int act, tbi_t dinp, tbi_t out, tbi_t inp, tbi_t dout,
                size_t n);

/* out = a + b (may alias either) */
int tbc_add(cudaStream_t s, float *out, const float *a, const float *b, size_t n);

/* B segments of n: out = a + scale[b] x (a NULL: 0; out may be a or x; scale (B) on the
 * device). */
int tbc_scale_add(cudaStream_t s, tbi_t out, const float *a, const float *x, const float *scale,
                  int B, size_t n);

/* The optimizers of backend.h, the CPU's arithmetic per element in its order (bias corrections
 * computed on the host by the same expressions). The _checked forms read the gradient factor
 * st->scale on the device and write nothing once st->bad is set. */
int tbc_adamw(cudaStream_t s, float *param, const float *grad, float grad_scale, float *m,
              float *v, size_t n, float lr, float beta1, float beta2, float eps,
              float weight_decay, int64_t step);
int tbc_lion(cudaStream_t s, float *param, const float *grad, float grad_scale, float *m,
             size_t n, float lr, float beta1, float beta2, float weight_decay);
int tbc_sgd(cudaStream_t s, float *param, const float *grad, float grad_scale, float *m,
            size_t n, float lr, float momentum, float weight_decay);
int tbc_adamw_checked(cudaStream_t s, float *param, const float *grad,
                      const struct tbi_step_stats *st, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int64_t step);
int tbc_lion_checked(cudaStream_t s, float *param, const float *grad,
                     const struct tbi_step_stats *st, float *m, size_t n, float lr, float beta1,
                     float beta2, float weight_decay);
int tbc_sgd_checked(cudaStream_t s, float *param, const float *grad,
                    const struct tbi_step_stats *st, float *m, size_t n, float lr,
                    float momentum, float weight_decay);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_TENSOR_CUDA_OPS_H */
