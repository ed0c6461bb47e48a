/* src/model/block.h - the pre-LN transformer block every tower shares (video encoders, MAE's
 * decoder, text towers): y = r + mlp(ln2(r)), r = x + proj(attention(qkv(ln1(x)))), over
 * explicit dimensions, with LayerNorm eps, the MLP's activation (exact GELU, QuickGELU) and
 * causal attention as parameters, its parameters named the timm way or OpenAI CLIP's, and the
 * qkv bias either whole (timm, CLIP) or VideoMAE's q and v biases with no k bias.
 * Forward saves what the backward needs (the LayerNorm outputs are recomputed from their
 * statistics, to the bit); backward adds its input gradient into the residual stream's.
 * Tests: tests/test_block.c (against PyTorch's nn.MultiheadAttention stack), tests/test_vit.c. */
#ifndef TUBELET_MODEL_BLOCK_H
#define TUBELET_MODEL_BLOCK_H

#include "model/params.h"
#include "model/plan.h"

enum tbi_names { TBI_NAMES_TIMM, TBI_NAMES_CLIP };

/* The model code's shorthand for an f32 tensor at the op boundary (backend.h's tbi_t). */
#define f32 tbi_f32

struct tbi_block_cfg {
    int D, NH, F;              /* width, heads, MLP width */
    float eps;                 /* LayerNorm */
    int act;                   /* enum tbi_act */
    int attention;             /* enum tb_attention: which attention op the block runs */
    int causal;                /* key j > query i masked (text towers) */
    int names;                 /* enum tbi_names */
    int qv_bias;               /* VideoMAE's attn.q_bias and attn.v_bias, no k bias (timm names) */
    int dt;                    /* enum tb_dtype: the activations' and the products' type. bf16
                                * mode (docs/PRECISION.md): the saved qkv, attention output and
                                * fc1, and the scratch, are stored as bf16; the products round
                                * their operands and results to bf16; LayerNorm's statistics,
                                * the residual stream and every weight stay f32, and the
                                * residual sum res1 is not kept (tbi_block_keeps_res1) */
};

/* Whether a set keeps the residual sum res1 (f32): not in bf16 mode, where it would be a
 * sixth of a set's bytes and costs one (D, D) product to compute again in the backward. */
static inline int tbi_block_keeps_res1(const struct tbi_block_cfg *c)
{
    return c->dt == TB_DTYPE_F32;
}

/* A block's parameters in registry order (one gradient span per block). With qv_bias,
 * QKV_B is the q bias (D) and V_B the v bias (D); without, QKV_B is the whole (3D) and there
 * is no V_B. */
enum {
    TBI_BLK_LN1_W, TBI_BLK_LN1_B, TBI_BLK_QKV_W, TBI_BLK_QKV_B, TBI_BLK_PROJ_W, TBI_BLK_PROJ_B,
    TBI_BLK_LN2_W, TBI_BLK_LN2_B, TBI_BLK_FC1_W, TBI_BLK_FC1_B, TBI_BLK_FC2_W, TBI_BLK_FC2_B,
    TBI_BLK_V_B, TBI_BLK_N
};

/* Backend pointers to a block's parameters (or their gradients), by TBI_BLK_* (V_B NULL
 * without qv_bias). */
struct tbi_block_w {
    float *p[TBI_BLK_N];
};

/* Check the dimensions (a message naming them when wrong). */
int tbi_block_check(const struct tbi_block_cfg *c);
/* 0 if be has every op a block of c runs for c's dtype (tbi_backend_supports), else
 * TB_EUNSUPPORTED naming the first it lacks: asked when a model is opened, before planning. */
int tbi_block_supported(const tbi_backend *be, const struct tbi_block_cfg *c);
/* Add a block's parameters under prefix (e.g. "blocks.3."), as a gradient span of its own;
 * returns the first one's index. */
int tbi_block_add(struct tb_params *r, const char *prefix, const struct tbi_block_cfg *c);
/* Pointers to the block whose first parameter is `first`: weights, and gradients (g may be
 * NULL; valid once the spans have homes). */
void tbi_block_bind(const struct tb_params *r, int first, const struct tbi_block_cfg *c,
                    struct tbi_block_w *w, struct tbi_block_w *g);

/* What a block keeps for its backward, for R = B * N token rows: f32, except the three of
 * the blocks' dtype (c->dt). */
struct tbi_block_acts {
    float *ln1_mean, *ln1_rstd;   /* (R) */
    void *qkv;                    /* (R, 3D), dt */
    void *att;                    /* (R, D), dt: attention output, before proj */
    float *lse;                   /* (B, NH, N) */
    float *res1;                  /* (R, D) x + proj(att), when kept; else NULL: the
                                   * scratch's */
    float *ln2_mean, *ln2_rstd;   /* (R) */
    void *fc1;                    /* (R, F), dt: before the activation; the backward turns it
                                   * into act(fc1) in place. Shared by blocks that recompute it. */
};
/* Bytes of one set: with fc1 and (tbi_block_keeps_res1) res1 when kept, else without both. */
size_t tbi_block_acts_bytes(const struct tbi_block_cfg *c, int B, int N, int kept);
/* Carve a set from p (in the order above, each part 64-byte aligned; a set's buffer of the
 * plan starts at ln1_mean), its parts as tbi_block_acts_bytes's; without fc1, the caller
 * points it at a buffer shared by the blocks that recompute it. */
void tbi_block_acts_carve(struct tbi_block_acts *a, void *p, const struct tbi_block_cfg *c, int B,
                          int N, int kept);

/* Scratch shared by all blocks of a tower, of the blocks' dtype (c->dt) but bias3; the
 * blocks' alone (a tower plans its own rows). */
struct tbi_block_scratch {
    void *ln;                     /* (R, D): a LayerNorm output; then, once the product
                                   * after that LayerNorm has read it, proj's or fc2's output
                                   * before its residual add */
    void *dD;                     /* (R, D) */
    void *dF;                     /* (R, max(F, 3D)): the forward's act(fc1), the backward's
                                   * fc1 and qkv gradients */
    float *bias3;                 /* (3D, f32), with qv_bias: (q, 0, v), or its gradient */
    float *res1;                  /* (R, D, f32): res1 of the blocks whose set has none */
};
static inline size_t tbi_block_dF_floats(const struct tbi_block_cfg *c)
{
    return (size_t)(c->F > 3 * c->D ? c->F : 3 * c->D);
}
/* Declare into p the gradient spans of a tower of L blocks whose backward starts at tick b:
 * span s0 + L + 1 (the head's) written at b, s0 + 1 + l (block l's) at b + L - l, s0 (the
 * embedding's) at b + L + 1; each live until end, or with fused updates (r->fused) only at
 * its tick (applied at once). */
void tbi_tower_grads_declare(struct tbi_plan *p, struct tb_params *r, int s0, int L, int b,
                             int end);
/* Declare the scratch of R rows into p, live over the forward's ticks [f0, f1] and the
 * backward's [b0, b1]; res1 too where no set keeps it (!tbi_block_keeps_res1), else the
 * caller declares it for the blocks that recompute it. */
void tbi_block_scratch_declare(struct tbi_plan *p, struct tbi_block_scratch *s,
                               const struct tbi_block_cfg *c, size_t R, int f0, int f1, int b0,
                               int b1);

/* x (R, D) -> y (R, D), saving into a; for_backward (recomputation): only up to fc1. drop
 * (backend, (2, B), or NULL): drop path's factors of each clip's attention and MLP branches
 * (0, or 1 / keep probability), multiplied into them before the residual adds. */
int tbi_block_forward(tbi_backend *be, const struct tbi_block_cfg *c, const struct tbi_block_w *w,
                      const struct tbi_block_acts *a, const struct tbi_block_scratch *s,
                      const float *drop, const float *x, float *y, int B, int N,
                      int for_backward);
/* Where a block's backward finds what its forward made: */
enum {
    TBI_FROM_SET,   /* the set as saved: res1 computed again first when it has none */
    TBI_FROM_MLP,   /* a set that did not keep res1 and fc1: both computed again first (two
                     * products, the same bits) */
    TBI_FROM_FRESH, /* all of it, from a forward for_backward just before */
};
/* dres (R, D): the output's gradient in, the input's out; the parameter gradients into g
 * (written); from: a TBI_FROM_*. drop: the forward's. */
int tbi_block_backward(tbi_backend *be, const struct tbi_block_cfg *c, const struct tbi_block_w *w,
                       const struct tbi_block_w *g, const struct tbi_block_acts *a,
                       const struct tbi_block_scratch *s, const float *drop, const float *x,
                       float *dres, int B, int N, int from);

#endif /* TUBELET_MODEL_BLOCK_H */
