/* include/tubelet/model.h - the video Vision Transformer (timm / VideoMAE): tubelet patch
 * embedding (Conv3d with stride = kernel), learned or fixed sin-cos positions, a class token
 * or mean pooling (fc_norm), pre-LN blocks with joint space-time attention, a linear head.
 * LayerNorm eps 1e-6, exact GELU, MLP 4x wide, qkv split as (3, NH, HS), attention scale
 * HS^-0.5; tokens in the order PyTorch flattens the Conv3d output (t, h, w).
 *
 * Parameters live in one block, named as timm names them (DESIGN.md section 4), so PyTorch
 * loads tubelet's safetensors directly; gradients and optimizer moments are blocks of the
 * same layout. Forward and backward are explicit per layer; activation buffers are planned
 * from the batch size before the first step, so peak memory is known up front.
 * Tests: tests/test_vit.c (against PyTorch). */
#ifndef TUBELET_MODEL_H
#define TUBELET_MODEL_H

#include "tubelet/base.h"
#include "tubelet/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tb_pool { TB_POOL_CLS, TB_POOL_MEAN };
enum tb_pos { TB_POS_LEARNED, TB_POS_SINCOS };

struct tb_vit_config {
    int dim, depth, heads;     /* D, L, NH */
    int patch, tubelet;        /* P, TU */
    int frames, height, width; /* T, H, W of the input clips */
    int classes;               /* K */
    enum tb_pool pool;
    enum tb_pos pos;
    int recompute;             /* 1: keep only each block's input; the backward runs the block's
                                * forward again (activation memory of one block, ~1.2x compute) */
    int recompute_mlp;         /* K < depth: blocks 0..K-1 keep no MLP hidden layer (fc1's
                                * output, 4 of a block's 10 rows per token); the backward
                                * recomputes it, one product (~0.5% of a step per block). Not
                                * with recompute. The same numbers either way. */
};

typedef struct tb_vit tb_vit;

/* Check the config and allocate parameters (zero) and gradients. */
TB_API int tb_vit_open(tb_vit **out, const struct tb_vit_config *cfg);
TB_API void tb_vit_close(tb_vit **m);
TB_API const struct tb_vit_config *tb_vit_config(const tb_vit *m);

/* timm's initialisation: truncated normal (std 0.02) for weights, zero biases, LayerNorm 1/0,
 * from a seed. */
TB_API void tb_vit_init(tb_vit *m, uint64_t seed);

/* The parameter list, in a fixed order. */
struct tb_param {
    const char *name;          /* timm name, e.g. "blocks.3.attn.qkv.weight" */
    int n_dims;
    int64_t shape[5];
    int64_t n;                 /* elements */
    float *data, *grad;        /* into the parameter block; grad once planned (see below) */
    int decay;                 /* weight decay applies (not biases, norms, pos/cls embeddings) */
};
TB_API int tb_vit_n_params(const tb_vit *m);
TB_API const struct tb_param *tb_vit_param(const tb_vit *m, int i);
/* All parameters as one block of tb_vit_n_floats floats. */
TB_API int64_t tb_vit_n_floats(const tb_vit *m);
TB_API float *tb_vit_params(tb_vit *m);
/* The gradients (once planned), as spans of consecutive parameters' gradients: span i holds
 * *n floats. Most of them live in activation space the backward is done with, so they hold
 * the last backward's gradients until the next forward overwrites them. */
TB_API int tb_vit_n_grad_spans(const tb_vit *m);
TB_API float *tb_vit_grad_span(tb_vit *m, int i, int64_t *n);

/* Set parameters from a safetensors file by name; every parameter must be there with its
 * shape. Extra tensors are ignored. */
TB_API int tb_vit_load(tb_vit *m, const struct tb_st_file *f);

/* Allocate activation buffers for batches of up to B clips; returns their bytes. */
TB_API int64_t tb_vit_plan(tb_vit *m, int B);

/* Forward a batch: video (B, 3, T, H, W). With labels (B), also the mean cross-entropy with
 * label smoothing, returned in *loss. Logits (B, K) stay readable via tb_vit_logits. */
TB_API int tb_vit_forward(tb_vit *m, const float *video, int B, const int64_t *labels,
                          float smoothing, float *loss);
TB_API const float *tb_vit_logits(const tb_vit *m);
/* Backward of the last forward (which had labels): gradients of every parameter, replaced.
 * Once per forward: the gradients take the space of that forward's activations. */
TB_API int tb_vit_backward(tb_vit *m);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_MODEL_H */
