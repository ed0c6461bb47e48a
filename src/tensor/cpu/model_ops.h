/* src/tensor/cpu/model_ops.h - CPU reference kernels of the token ops (model_ops.c); their
 * contracts are the op list's (src/tensor/backend.h). */
#ifndef TUBELET_TENSOR_CPU_MODEL_OPS_H
#define TUBELET_TENSOR_CPU_MODEL_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/backend.h"

void tbi_normalize(float *out, const uint8_t *in, const uint8_t *flip, int B, int T, int H,
                   int W, const float mean[3], const float std[3]);
void tbi_tokens_fwd(float *x, const float *tokens, const float *cls, const float *pos,
                    const int32_t *idx, int B, int N, int NC, int D);
void tbi_tokens_bwd(float *dtokens, float *dcls, float *dpos, const float *dx,
                    const int32_t *idx, int B, int N, int NC, int NPOS, int D);
void tbi_gather_rows(float *dst, const float *src, const int32_t *idx, int B, int N, int NK,
                     int len);
void tbi_scatter_rows(float *dst, const float *src, const int32_t *idx, int B, int N, int NK,
                      int len);
void tbi_tokens_fill_fwd(float *x, const float *src, const float *fill, const float *pos,
                         const int32_t *idx, int B, int NS, int NF, int D);
void tbi_tokens_fill_bwd(float *dsrc, float *dfill, const float *dx, int B, int NS, int NF,
                         int D);
void tbi_patch_target(float *out, const float *cols, int R, int C, int PP, const float *mean,
                      const float *std, int norm);
/* The loss (returned) and its gradient. */
float tbi_mse_fwd(const float *pred, const float *tgt, const float *w, int R, int C);
void tbi_mse_bwd(float *dpred, const float *pred, const float *tgt, const float *w, int R, int C);
/* out = a + scale[b] x in segment b of n (a NULL: 0; scale NULL: a + x, no multiply); x f32
 * or bf16 (scale_add's and residual_add's kernel). */
void tbi_scale_add(float *out, const float *a, tbi_t x, const float *scale, int B, size_t n);
void tbi_mix_clips(float *x, int B, int CT, int H, int W, float lam, const int *box);
void tbi_erase_boxes(float *x, int B, int C, int T, int H, int W, const int32_t *boxes,
                     uint64_t seed, const uint64_t *streams);
void tbi_pos_tile_fwd(float *pos, const float *spatial, const float *temporal, int T, int S,
                      int D);
void tbi_pos_tile_bwd(float *dspatial, float *dtemporal, const float *dpos, int T, int S, int D);
void tbi_embed_bwd(float *dtable, const float *dx, const int32_t *ids, int R, int V, int D);
void tbi_transpose(float *out, const float *in, int R, int C);
void tbi_pool_fwd(int pool, float *pooled, const float *x, int B, int N, int D);
void tbi_pool_bwd(int pool, float *dx, const float *dpooled, int B, int N, int D);

#endif /* TUBELET_TENSOR_CPU_MODEL_OPS_H */
