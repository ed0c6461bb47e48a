/* src/model/vit.c - the video ViT (contract in model.h): the token embedding (patches,
 * class token, positions), the shared blocks (block.c), pooling, final norm and an optional
 * head, all through the backend's ops on backend memory; activations planned from the batch
 * size. LayerNorm's backward adds into its input's gradient, so the residual stream's
 * gradient simply collects what each block adds; every other gradient is written. Not here:
 * the optimizer and the training loop (src/train). Tests: tests/test_vit.c. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "model/block.h"
#include "model/plan.h"
#include "model/vit_internal.h"
#include "tubelet/rng.h"

#define LN_EPS 1e-6f
#define MLP_RATIO 4
_Static_assert(MLP_RATIO >= 3, "qkv's gradient (3 D wide) shares the space of fc1's (MLP_RATIO D)");

/* What a backward may start from: set by a forward, spent by a backward or a new input. */
enum vit_grad {
    GRAD_NONE,     /* no forward since the last backward or input */
    GRAD_LOSS,     /* a forward with labels: from the model's loss */
    GRAD_FEATURES, /* a forward without: from a gradient on the features, given */
};

/* One forward's inputs besides the video: what tb_vit_set_keep, _set_drop_path and
 * _set_head_dropout put on the backend since the input (its buffers keep, drop, hmask), and
 * the targets of its loss (host; both NULL: no loss). */
struct vit_call {
    int keep, drop, hmask;
    const int64_t *labels;            /* (B) */
    const float *soft;                /* (B, K) */
    float smoothing;
};

/* What the last forward used, which its backward follows. */
struct vit_last {
    int drop, hmask, soft;
    float smoothing;
    enum vit_grad grad;
};

struct tb_vit {
    struct tb_vit_config c;
    char backend_name[32];
    tbi_backend *be;
    struct tb_params *reg;            /* own_reg, or a larger model's (MAE's) */
    struct tb_params own_reg;
    int owner;                        /* its backend and registry are its own */
    char prefix[32];                  /* of its parameter names: "" or "encoder." */
    int span0, span1;                 /* its gradient spans in reg */
    struct tbi_block_cfg bc;
    int D, F, NH, K, patch_len;       /* patch_len = 3 * TU * P * P */
    int Np;                           /* patches of a clip */
    int Nk;                           /* patch tokens the blocks see: keep, or Np */
    int Nt;                           /* tokens the blocks see: Nk + has_cls */
    int has_cls, pool;                /* pool: TBI_POOL_*, or -1 (none) */
    int clip, E, S;                   /* CLIP layout; its projection's width; positions a frame */
    /* parameter indices (-1: absent) */
    int i_patch_w, i_patch_b, i_cls, i_pos, i_norm_w, i_norm_b, i_head_w, i_head_b;
    int i_temporal, i_pre_w, i_pre_b, i_proj;
    int *blk_first;                   /* L: each block's first parameter */
    float *sincos;                    /* backend (Nt, D): fixed positions, when pos = sincos */

    /* activations (backend), for up to B_plan clips: buffers of the plan (plan.h), its own
     * or a larger model's */
    struct tbi_plan plan;             /* standalone: the arena of every buffer below */
    struct tbi_plan *tick_plan;       /* the plan it was declared into, at ticks */
    struct tbi_ticks ticks;           /* (tbi_plan_tick at each tick's end) */
    int B_plan, B;
    int B_in;                         /* clips in `video`, waiting for tb_vit_run */
    float *video;                     /* (B, 3, T, H, W) */
    uint8_t *clips;                   /* (B, T, H, W, 3): the loader's batch */
    uint8_t *flip;                    /* (B) */
    int32_t *keep;                    /* (B, Nk): the kept tokens, when keep */
    float *drop;                      /* (L, 2, B): drop path's branch factors */
    float *hmask, *feat_drop;         /* (B, D): head dropout's mask, the features it leaves */
    float *soft;                      /* (B, K): soft targets of the last forward */
    struct vit_call next;             /* what the next forward takes (tb_vit_set_*) */
    struct vit_last last;             /* what the last forward did */
    float *cols_all;                  /* (B*Np, patch_len): all patches, when keep */
    int64_t *labels;                  /* (B) */
    float *cols;                      /* (B*Nk, patch_len) */
    float *patch_out;                 /* (B*Nk, D) */
    float **x;                        /* L+1 of (B*Nt, D): block inputs, then the final output */
    struct tbi_block_acts *ba;        /* L of them, or 1 shared when recomputing */
    void *fc1x;                       /* (B*Nt, F) fc1 of the blocks below recompute_mlp (bc.dt) */
    struct tbi_block_scratch s;       /* ln (B*Nt, D); dD; dF: also the forward's act(fc1) */
    int F_rows;                       /* rows of the features: B, or B*Nt with pool none */
    float *pooled;                    /* (B, D) */
    float *feat, *feat_mean, *feat_rstd; /* (F_rows, D), (F_rows), (F_rows) */
    float *logits, *probs, *dlogits;  /* (B, K) */
    float *loss;                      /* (1) */
    float *dres, *dpool, *dfeat;      /* (B*Nt, D), (B, D), (F_rows, D) */
    float *dpatch;                    /* (B*Nk, D): the patch tokens' gradient */
    float *dpre;                      /* CLIP: (B*Nt, D), ln_pre's input gradient */
    /* CLIP: the tiled positions and their gradient (Nt, D), the tokens before ln_pre and its
     * statistics (B*Nt, D), (B*Nt); proj transposed and its gradient (E, D); the projected
     * features and their gradient (B, E) */
    float *pos_eff, *dpos_eff, *x_pre, *pre_mean, *pre_rstd, *projT, *dprojT, *emb, *demb;
};

/* What the head's initial weights are scaled by (VideoMAE's init_scale). */
static float head_scale(const struct tb_vit_config *c)
{
    return c->head_init_scale > 0 ? (float)c->head_init_scale : 1.0f;
}

static int add(tb_vit *m, const char *name, enum tb_init init, int n_dims, int64_t d0, int64_t d1,
               int64_t d2, int64_t d3, int64_t d4)
{
    const int64_t shape[5] = {d0, d1, d2, d3, d4};
    return tbi_params_add(m->reg, m->prefix, name, init, n_dims, shape);
}

static int check_config(const struct tb_vit_config *c)
{
    if (c->dim < 1 || c->depth < 1 || c->heads < 1 || c->dim % c->heads || c->patch < 1 ||
        c->tubelet < 1 || c->frames < c->tubelet || c->frames % c->tubelet ||
        c->height % c->patch || c->width % c->patch || c->height < c->patch ||
        c->width < c->patch || c->classes < 0)
        return tbi_err(TB_EINVAL, "bad ViT config: width %d, depth %d, heads %d, patch %d, "
                       "tubelet %d, clips %dx%dx%d, %d classes (frames must divide by the "
                       "tubelet, height and width by the patch, width by the heads)", c->dim,
                       c->depth, c->heads, c->patch, c->tubelet, c->frames, c->height, c->width,
                       c->classes);
    if (c->recompute_mlp < 0 || c->recompute_mlp >= c->depth || (c->recompute && c->recompute_mlp))
        return tbi_err(TB_EINVAL, "recomputing the MLP of %d blocks: it must be fewer than the "
                       "depth (%d), and not with whole blocks recomputed", c->recompute_mlp,
                       c->depth);
    int np = (c->frames / c->tubelet) * (c->height / c->patch) * (c->width / c->patch);
    if (c->keep < 0 || c->keep > np)
        return tbi_err(TB_EINVAL, "keeping %d of a clip's %d patch tokens", c->keep, np);
    if (c->pool == TB_POOL_NONE && c->classes)
        return tbi_err(TB_EINVAL, "no pooling, so no head: classes must be 0 (is %d)",
                       c->classes);
    if (c->layout == TB_LAYOUT_CLIP &&
        (c->pool != TB_POOL_CLS || c->pos != TB_POS_LEARNED || c->qv_bias || c->keep ||
         c->embed < 0 || (c->classes > 0) == (c->embed > 0)))
        return tbi_err(TB_EINVAL, "CLIP's video tower: a class token, learned positions, no "
                       "q/v biases, every token kept, and either a projection width (%d) or "
                       "a head (%d classes: AVION's classifier)", c->embed, c->classes);
    if (c->layout != TB_LAYOUT_CLIP && c->embed)
        return tbi_err(TB_EINVAL, "a projection (width %d) is CLIP's layout's", c->embed);
    if (c->dtype != TB_DTYPE_F32 && c->dtype != TB_DTYPE_BF16)
        return tbi_err(TB_EINVAL, "unknown dtype %d", (int)c->dtype);
    return 0;
}

static int add_blocks(tb_vit *m, const char *stem)
{
    for (int l = 0; l < m->c.depth; l++) {
        char prefix[96];
        snprintf(prefix, sizeof(prefix), "%s%s%d.", m->prefix, stem, l);
        int rc = m->blk_first[l] = tbi_block_add(m->reg, prefix, &m->bc);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* AVION's CLIP video tower, in OpenAI CLIP's names and order, as gradient spans: the token
 * embedding's (with ln_pre), one per block, ln_post's and the projection's. conv1 covers one
 * frame (D, 3, P, P) as CLIP's, or with tubelet TU > 1 TU frames (D, 3, TU, P, P; ViViT's
 * tubelet embedding, whose tokens see motion directly), the temporal embedding one row per
 * T / TU. Initialised as
 * AVION's: N(0, 0.02) class and positional embeddings, truncated N(0, 0.02) weights, zero
 * temporal embedding, N(0, D^-0.5) projection. Weight decay: params.c's rule. */
static int add_clip_params(tb_vit *m)
{
    const struct tb_vit_config *c = &m->c;
    int D = m->D, P = c->patch, TU = c->tubelet, Tt = c->frames / TU, rc;
    m->i_patch_b = m->i_temporal = m->i_head_w = m->i_head_b = -1;
    if ((rc = tbi_params_span(m->reg)) < 0 ||
        (rc = m->i_patch_w = TU == 1 ? add(m, "conv1.weight", TB_INIT_TRUNC_NORMAL, 4, D, 3, P,
                                           P, 0)
                                     : add(m, "conv1.weight", TB_INIT_TRUNC_NORMAL, 5, D, 3,
                                           TU, P, P)) < 0 ||
        (rc = m->i_cls = add(m, "class_embedding", TB_INIT_NORMAL, 1, D, 0, 0, 0, 0)) < 0 ||
        (rc = m->i_pos = add(m, "positional_embedding", TB_INIT_NORMAL, 2, m->S + 1, D, 0, 0,
                             0)) < 0 ||
        (Tt > 1 &&
         (rc = m->i_temporal = add(m, "temporal_embedding", TB_INIT_ZERO, 2, Tt, D, 0, 0,
                                   0)) < 0) ||
        (rc = m->i_pre_w = add(m, "ln_pre.weight", TB_INIT_ONE, 1, D, 0, 0, 0, 0)) < 0 ||
        (rc = m->i_pre_b = add(m, "ln_pre.bias", TB_INIT_ZERO, 1, D, 0, 0, 0, 0)) < 0 ||
        (rc = add_blocks(m, "transformer.resblocks.")) < 0 || (rc = tbi_params_span(m->reg)) < 0 ||
        (rc = m->i_norm_w = add(m, "ln_post.weight", TB_INIT_ONE, 1, D, 0, 0, 0, 0)) < 0 ||
        (rc = m->i_norm_b = add(m, "ln_post.bias", TB_INIT_ZERO, 1, D, 0, 0, 0, 0)) < 0)
        return rc;
    m->i_proj = -1;
    if (m->E > 0) {
        if ((rc = m->i_proj = add(m, "proj", TB_INIT_NORMAL, 2, D, m->E, 0, 0, 0)) < 0)
            return rc;
        m->reg->p[m->i_proj].init_std = 1.0f / sqrtf((float)D);
        return 0;
    }
    /* AVION's VideoClassifier: the tower without its projection, fc_cls N(0, 0.01), bias 0 */
    if ((rc = m->i_head_w = add(m, "head.weight", TB_INIT_NORMAL, 2, m->K, D, 0, 0, 0)) < 0 ||
        (rc = m->i_head_b = add(m, "head.bias", TB_INIT_ZERO, 1, m->K, 0, 0, 0, 0)) < 0)
        return rc;
    m->reg->p[m->i_head_w].init_std = 0.01f * head_scale(&m->c);
    return 0;
}

/* The parameters, in timm's order, as gradient spans: the token embedding's, one per block,
 * the final norm's and head's. */
static int add_params(tb_vit *m)
{
    if (m->clip)
        return add_clip_params(m);
    const struct tb_vit_config *c = &m->c;
    int D = m->D, rc;
    if ((rc = tbi_params_span(m->reg)) < 0 ||
        (rc = m->i_patch_w = add(m, "patch_embed.proj.weight", TB_INIT_TRUNC_NORMAL, 5, D, 3,
                                 c->tubelet, c->patch, c->patch)) < 0 ||
        (rc = m->i_patch_b = add(m, "patch_embed.proj.bias", TB_INIT_ZERO, 1, D, 0, 0, 0,
                                 0)) < 0)
        return rc;
    m->i_cls = m->i_pos = -1;
    if (m->has_cls &&
        (rc = m->i_cls = add(m, "cls_token", TB_INIT_TRUNC_NORMAL, 3, 1, 1, D, 0, 0)) < 0)
        return rc;
    if (c->pos == TB_POS_LEARNED &&
        (rc = m->i_pos = add(m, "pos_embed", TB_INIT_TRUNC_NORMAL, 3, 1, m->Np + m->has_cls,
                             D, 0, 0)) < 0)
        return rc;
    m->i_temporal = m->i_pre_w = m->i_pre_b = m->i_proj = -1;
    if ((rc = add_blocks(m, "blocks.")) < 0)
        return rc;
    const char *norm = m->c.pool == TB_POOL_MEAN ? "fc_norm" : "norm";
    char w[32], b[32];
    snprintf(w, sizeof(w), "%s.weight", norm);
    snprintf(b, sizeof(b), "%s.bias", norm);
    if ((rc = tbi_params_span(m->reg)) < 0 ||
        (rc = m->i_norm_w = add(m, w, TB_INIT_ONE, 1, D, 0, 0, 0, 0)) < 0 ||
        (rc = m->i_norm_b = add(m, b, TB_INIT_ZERO, 1, D, 0, 0, 0, 0)) < 0)
        return rc;
    m->i_head_w = m->i_head_b = -1;
    if (m->K > 0 &&
        ((rc = m->i_head_w = add(m, "head.weight", TB_INIT_TRUNC_NORMAL, 2, m->K, D, 0, 0,
                                 0)) < 0 ||
         (rc = m->i_head_b = add(m, "head.bias", TB_INIT_ZERO, 1, m->K, 0, 0, 0, 0)) < 0))
        return rc;
    if (m->K > 0)
        m->reg->p[m->i_head_w].init_std *= head_scale(&m->c);
    return 0;
}

void tbi_sincos_table(float *host, int n, int D)
{
    for (int p = 0; p < n; p++)
        for (int j = 0; j < D; j++) {
            double angle = p / pow(10000.0, 2.0 * (j / 2) / D);
            host[(size_t)p * D + j] = (float)(j % 2 ? cos(angle) : sin(angle));
        }
}

int tbi_sincos_upload(tbi_backend *be, float **out, int n, int D)
{
    size_t bytes = sizeof(float) * (size_t)n * D;
    float *host = tbi_malloc(bytes);
    int rc;
    *out = NULL;
    if (!host)
        return tbi_err(TB_ENOMEM, "out of memory");
    tbi_sincos_table(host, n, D);
    if ((rc = be->ops->alloc(be, bytes, (void **)out)) == 0)
        rc = be->ops->to_device(be, *out, host, bytes);
    free(host);
    return rc;
}

/* Fixed positions, one row per token (the class token is position 0). */
static int make_sincos(tb_vit *m)
{
    return tbi_sincos_upload(m->be, &m->sincos, m->Np + m->has_cls, m->D);
}

/* The model on be, its parameters added to reg under prefix (not allocated). */
static int vit_create(tb_vit **out, const struct tb_vit_config *c, tbi_backend *be,
                      struct tb_params *reg, const char *prefix)
{
    *out = NULL;
    int rc = check_config(c);
    if (rc < 0)
        return rc;
    tb_vit *m = tbi_calloc(1, sizeof(*m));
    if (!m)
        return tbi_err(TB_ENOMEM, "out of memory");
    m->c = *c;
    m->be = be;
    m->reg = reg;
    snprintf(m->prefix, sizeof(m->prefix), "%s", prefix);
    snprintf(m->backend_name, sizeof(m->backend_name), "%s", be->name);
    m->c.backend = m->backend_name;
    m->D = c->dim;
    m->F = MLP_RATIO * c->dim;
    m->NH = c->heads;
    m->Np = (c->frames / c->tubelet) * (c->height / c->patch) * (c->width / c->patch);
    m->has_cls = c->pool == TB_POOL_CLS;
    m->pool = c->pool == TB_POOL_CLS ? TBI_POOL_FIRST : c->pool == TB_POOL_MEAN ? TBI_POOL_MEAN
                                                                                 : -1;
    m->Nk = c->keep ? c->keep : m->Np;
    m->Nt = m->Nk + m->has_cls;
    m->K = c->classes;
    m->patch_len = 3 * c->tubelet * c->patch * c->patch;
    m->clip = c->layout == TB_LAYOUT_CLIP;
    m->E = c->embed;
    m->S = (c->height / c->patch) * (c->width / c->patch);
    m->bc = (struct tbi_block_cfg){.D = m->D, .NH = m->NH, .F = m->F, .eps = LN_EPS,
                                   .act = TBI_ACT_GELU, .attention = c->attention, .causal = 0,
                                   .names = m->clip ? TBI_NAMES_CLIP : TBI_NAMES_TIMM,
                                   .qv_bias = c->qv_bias, .dt = c->dtype};
    m->blk_first = tbi_calloc((size_t)c->depth, sizeof(*m->blk_first));
    m->ba = tbi_calloc((size_t)c->depth, sizeof(*m->ba));
    m->x = tbi_calloc((size_t)c->depth + 1, sizeof(*m->x));
    m->span0 = reg->n_spans;
    if (!m->blk_first || !m->ba || !m->x)
        rc = tbi_err(TB_ENOMEM, "out of memory");
    else if ((rc = tbi_block_check(&m->bc)) >= 0 && (rc = tbi_block_supported(be, &m->bc)) >= 0)
        rc = add_params(m);
    m->span1 = reg->n_spans;
    if (rc < 0) {
        tb_vit_close(&m);
        return rc;
    }
    /* backward's tbi_span_done: the tokens', one per block, the final norm's and head's */
    TB_ASSERT(m->span1 - m->span0 == c->depth + 2);
    *out = m;
    return 0;
}

int tbi_vit_open_in(tb_vit **out, const struct tb_vit_config *c, tbi_backend *be,
                    struct tb_params *reg, const char *prefix)
{
    *out = NULL;
    return vit_create(out, c, be, reg, prefix);
}

int tbi_vit_ready(tb_vit *m)
{
    return m->c.pos == TB_POS_SINCOS && !m->sincos ? make_sincos(m) : 0;
}

int tb_vit_open(tb_vit **out, const struct tb_vit_config *c)
{
    *out = NULL;
    tbi_backend *be = NULL;
    int rc = check_config(c);
    if (rc < 0 || (rc = tbi_backend_open(&be, c->backend)) < 0)
        return rc;
    tb_vit *m = NULL;
    struct tb_params tmp = {.be = be};
    if ((rc = vit_create(&m, c, be, &tmp, "")) < 0) {
        tbi_params_free(&tmp);
        tbi_backend_close(&be);
        return rc;
    }
    m->owner = 1;
    m->own_reg = tmp;
    m->reg = &m->own_reg;
    if ((rc = tbi_params_alloc(m->reg)) < 0 ||
        (rc = be->ops->zero(be, m->reg->data, sizeof(float) * (size_t)m->reg->n_floats)) < 0 ||
        (rc = tbi_vit_ready(m)) < 0) {
        tb_vit_close(&m);
        return rc;
    }
    *out = m;
    return 0;
}

/* Forget the plan: its own arena freed, the gradient spans homeless (a larger model's arena
 * is its owner's to free). */
static void free_acts(tb_vit *m)
{
    tbi_plan_clear(&m->plan);
    m->tick_plan = NULL;
    m->next = (struct vit_call){0};
    m->last = (struct vit_last){0};
    m->B_plan = m->B_in = m->B = 0;
    for (int s = m->span0; s < m->span1; s++)
        m->reg->home[s] = NULL;
}

void tb_vit_close(tb_vit **pm)
{
    if (!pm || !*pm)
        return;
    tb_vit *m = *pm;
    if (m->be) {
        free_acts(m);
        if (m->sincos)
            m->be->ops->free(m->be, m->sincos);
        if (m->owner)
            tbi_params_free(m->reg);
    }
    if (m->owner)
        tbi_backend_close(&m->be);
    free(m->blk_first);
    free(m->ba);
    free(m->x);
    free(m);
    *pm = NULL;
}

const struct tb_vit_config *tb_vit_config(const tb_vit *m)
{
    return &m->c;
}

tb_params *tb_vit_params(tb_vit *m)
{
    return m->reg;
}

const char *tb_vit_backend(const tb_vit *m)
{
    return m->be->name;
}

tbi_backend *tbi_vit_backend(tb_vit *m)
{
    return m->be;
}

int tb_vit_init(tb_vit *m, uint64_t seed)
{
    return tb_params_init(m->reg, seed);
}

/* ---- activations ------------------------------------------------------------------------ */

/* The ticks of block l's forward and of its backward. */
static int fwd_tick(const struct tbi_ticks *t, int l)
{
    return t->fwd + 3 + l;
}

static int bwd_tick(const tb_vit *m, const struct tbi_ticks *t, int l)
{
    return t->bwd + m->c.depth - l;
}

/* The flags that lower a plan, for the message of one too big. */
static const char *lowering_flags(const struct tb_vit_config *c)
{
    if (c->recompute)
        return "lower --batch";
    if (c->recompute_mlp + 1 < c->depth)
        return "lower --batch, or add --recompute-mlp K (up to depth - 1) or --recompute";
    return "lower --batch, or use --recompute";
}

/* The blocks' saved activations and scratch: each set from its forward to its backward (one
 * set over every block's when recomputing); res1 and fc1 of the blocks below recompute_mlp,
 * and the scratch, in the ticks of the blocks that use them. */
static void declare_blocks(tb_vit *m, struct tbi_plan *p, const struct tbi_ticks *t, int B)
{
    int L = m->c.depth, K = m->c.recompute_mlp;
    size_t T = (size_t)B * m->Nt, D = (size_t)m->D, F = (size_t)m->F;
    for (int l = 0; l < (m->c.recompute ? 1 : L); l++) {
        int last = m->c.recompute ? L - 1 : l;
        tbi_plan_add(p, "block activations", &m->ba[l].ln1_mean,
                     tbi_block_acts_bytes(&m->bc, B, m->Nt, l >= K), fwd_tick(t, l),
                     m->c.recompute ? fwd_tick(t, last) : bwd_tick(m, t, l));
        if (m->c.recompute)
            tbi_plan_also(p, bwd_tick(m, t, last), bwd_tick(m, t, 0));
    }
    if (K > 0) {
        if (tbi_block_keeps_res1(&m->bc)) { /* else the scratch has it for every block */
            TBI_BUF(p, m->s.res1, T * D, fwd_tick(t, 0), fwd_tick(t, K - 1));
            tbi_plan_also(p, bwd_tick(m, t, K - 1), bwd_tick(m, t, 0));
        }
        tbi_plan_add(p, "fc1x", &m->fc1x, T * F * tbi_dt_size(m->bc.dt), fwd_tick(t, 0),
                     fwd_tick(t, K - 1));
        tbi_plan_also(p, bwd_tick(m, t, K - 1), bwd_tick(m, t, 0));
    }
    int f0 = fwd_tick(t, 0), f1 = fwd_tick(t, L - 1), b0 = bwd_tick(m, t, L - 1);
    tbi_block_scratch_declare(p, &m->s, &m->bc, T, f0, f1, b0, bwd_tick(m, t, 0));
    /* block l's input from the tick that writes it to its backward; the last output to the
     * head's backward */
    for (int l = 0; l <= L; l++)
        TBI_BUF(p, m->x[l], T * D, l ? fwd_tick(t, l - 1) : t->fwd + 2,
                l < L ? bwd_tick(m, t, l) : t->bwd);
}

int tbi_vit_declare(tb_vit *m, int B, struct tbi_plan *p, const struct tbi_ticks *t)
{
    int D = m->D, L = m->c.depth, K = m->K > 0 ? m->K : 1;
    if (B < 1)
        return tbi_err(TB_EINVAL, "a plan for %d clips", B);
    /* The ops count rows (tokens of the batch) in int; their elements in size_t. */
    if ((int64_t)B * m->Nt > INT_MAX / 4 || (int64_t)B * m->Np > INT_MAX / 4)
        return tbi_err(TB_ERANGE, "%d clips of %d tokens are more rows than the ops take: %s",
                       B, m->Nt, lowering_flags(&m->c));
    free_acts(m);
    m->tick_plan = p;
    m->ticks = *t;
    size_t T = (size_t)B * m->Nt, P = (size_t)B * m->Nk, E = (size_t)m->E, NtD = (size_t)m->Nt * D;
    m->F_rows = m->pool < 0 ? (int)T : B;
    size_t FR = (size_t)m->F_rows, pixels = (size_t)B * 3 * m->c.frames * m->c.height * m->c.width;
    int f = t->fwd, head = t->fwd + L + 3, b = t->bwd, embed = t->bwd + L + 1, end = t->end;
    /* input, patches, embedding */
    TBI_BUF(p, m->clips, pixels, f, f);
    TBI_BUF(p, m->flip, B, f, f);
    TBI_BUF(p, m->video, pixels, f, f + 1);
    TBI_BUF(p, m->cols_all, m->c.keep ? (size_t)B * m->Np * m->patch_len : 0, f + 1, t->patches);
    TBI_BUF(p, m->cols, P * m->patch_len, f + 1, embed);
    TBI_BUF(p, m->keep, m->c.keep ? P : 0, f, end);
    TBI_BUF(p, m->drop, 2 * (size_t)L * B, f, end);
    TBI_BUF(p, m->hmask, (size_t)B * D, f, end);
    TBI_BUF(p, m->patch_out, P * D, f + 2, f + 2);
    declare_blocks(m, p, t, B);
    /* head and loss, and their gradients */
    TBI_BUF(p, m->pooled, (size_t)B * D, head, b);
    TBI_BUF(p, m->feat, FR * D, head, end);
    TBI_BUF(p, m->feat_mean, FR, head, end);
    TBI_BUF(p, m->feat_rstd, FR, head, end);
    TBI_BUF(p, m->feat_drop, (size_t)B * D, head, b);
    TBI_BUF(p, m->logits, (size_t)B * K, head, end);
    TBI_BUF(p, m->probs, (size_t)B * K, head, end);
    TBI_BUF(p, m->soft, (size_t)B * K, head, end);
    TBI_BUF(p, m->labels, B, head, end);
    TBI_BUF(p, m->loss, 1, head, end);
    TBI_BUF(p, m->dlogits, (size_t)B * K, b, b);
    TBI_BUF(p, m->dpool, (size_t)B * D, b, b);
    TBI_BUF(p, m->dfeat, FR * D, t->grad_in, b);
    TBI_BUF(p, m->dres, T * D, b, embed);
    TBI_BUF(p, m->dpatch, P * D, embed, embed);
    if (m->clip) {
        TBI_BUF(p, m->pos_eff, NtD, f + 2, f + 2);
        TBI_BUF(p, m->dpos_eff, NtD, embed, embed);
        TBI_BUF(p, m->dpre, T * D, embed, embed);
        TBI_BUF(p, m->x_pre, T * D, f + 2, embed);
        TBI_BUF(p, m->pre_mean, T, f + 2, embed);
        TBI_BUF(p, m->pre_rstd, T, f + 2, embed);
        TBI_BUF(p, m->projT, E * D, head, b);
        TBI_BUF(p, m->dprojT, E * D, b, b);
        TBI_BUF(p, m->emb, (size_t)B * E, head, end);
        TBI_BUF(p, m->demb, (size_t)B * E, t->grad_in, b);
    }
    tbi_tower_grads_declare(p, m->reg, m->span0, L, t->bwd, end);
    return p->err;
}

void tbi_vit_bind(tb_vit *m, int B)
{
    int L = m->c.depth, K = m->c.recompute_mlp;
    m->B_plan = B;
    for (int l = 0; l < (m->c.recompute ? 1 : L); l++)
        tbi_block_acts_carve(&m->ba[l], m->ba[l].ln1_mean, &m->bc, B, m->Nt, l >= K);
    for (int l = 0; l < K; l++)
        m->ba[l].fc1 = m->fc1x;
}

int tb_vit_plan(tb_vit *m, int B, struct tb_plan_bytes *bytes_out)
{
    int L = m->c.depth, rc;
    struct tbi_ticks t = {.fwd = 0, .patches = 1, .bwd = L + 4, .grad_in = L + 4,
                          .end = 2 * L + 6};
    if ((rc = tbi_vit_declare(m, B, &m->plan, &t)) < 0 || (rc = tbi_plan_place(&m->plan)) < 0) {
        free_acts(m);
        return rc;
    }
    char what[64];
    snprintf(what, sizeof(what), "the activations of %d clips", B);
    if ((rc = tbi_plan_alloc(&m->plan, m->be, what, lowering_flags(&m->c))) < 0) {
        free_acts(m);
        return rc;
    }
    tbi_vit_bind(m, B);
    if (bytes_out)
        *bytes_out = tbi_plan_bytes(&m->plan);
    return 0;
}

/* ---- forward ----------------------------------------------------------------------------- */

/* The activations block l saves for its backward (one shared set when recomputing). */
static const struct tbi_block_acts *acts_of(const tb_vit *m, int l)
{
    return &m->ba[m->c.recompute ? 0 : l];
}

/* Block l's drop path factors in the last forward (2, B), or NULL. */
static const float *drop_of(const tb_vit *m, int l)
{
    return m->last.drop ? m->drop + (size_t)l * 2 * m->B : NULL;
}

/* The head's input: the features, or their copy times head dropout's mask. */
static float *head_in(const tb_vit *m)
{
    return m->last.hmask ? m->feat_drop : m->feat;
}

static int block_forward(tb_vit *m, int l, int for_backward)
{
    struct tbi_block_w w;
    tbi_block_bind(m->reg, m->blk_first[l], &m->bc, &w, NULL);
    return tbi_block_forward(m->be, &m->bc, &w, acts_of(m, l), &m->s, drop_of(m, l), m->x[l],
                             m->x[l + 1], m->B, m->Nt, for_backward);
}

/* Tick k of the step (its forward's first tick plus fk, or its backward's plus bk) is over:
 * the plan poisons what dies there (plan.h). */
static int fwd_done(tb_vit *m, int fk)
{
    return tbi_plan_tick(m->tick_plan, m->ticks.fwd + fk);
}

static int bwd_done(tb_vit *m, int bk)
{
    return tbi_plan_tick(m->tick_plan, m->ticks.bwd + bk);
}

static int check_batch(const tb_vit *m, int B)
{
    if (B < 1 || B > m->B_plan)
        return tbi_err(TB_EINVAL, "batch of %d clips, but activations are planned for %d", B,
                       m->B_plan);
    return 0;
}

/* From m->video (B, 3, T, H, W): the tubelet patches (the kept ones) -> tokens (B, Nk, D),
 * plus class token and positions -> x0 (B, Nt, D). */
static int embed(tb_vit *m, int B)
{
    const struct tbi_ops *o = m->be->ops;
    tbi_backend *be = m->be;
    const struct tb_vit_config *c = &m->c;
    const struct tb_params *r = m->reg;
    int D = m->D;
    TBI_TRY(fwd_done(m, 0)); /* the input */
    TBI_TRY(o->patchify(be, c->keep ? m->cols_all : m->cols, m->video, B, 3, c->frames, c->height,
                        c->width, c->tubelet, c->patch));
    if (c->keep)
        TBI_TRY(o->gather_rows(be, m->cols, m->cols_all, m->keep, B, m->Np, m->Nk, m->patch_len));
    TBI_TRY(fwd_done(m, 1)); /* the patches */
    TBI_TRY(o->matmul_fwd(be, m->bc.dt, f32(m->patch_out), f32(m->cols),
                          f32(tbi_param_data(r, m->i_patch_w)),
                          f32(m->i_patch_b >= 0 ? tbi_param_data(r, m->i_patch_b) : NULL),
                          B * m->Nk, m->patch_len, D));
    if (!m->clip)
        return o->tokens_fwd(be, m->x[0], m->patch_out,
                             m->has_cls ? tbi_param_data(r, m->i_cls) : NULL,
                             c->pos == TB_POS_LEARNED ? tbi_param_data(r, m->i_pos) : m->sincos,
                             c->keep ? m->keep : NULL, B, m->Nk, m->has_cls, D);
    /* CLIP: tiled positions, then ln_pre into the first block's input. */
    TBI_TRY(o->pos_tile_fwd(be, m->pos_eff, tbi_param_data(r, m->i_pos),
                            m->i_temporal >= 0 ? tbi_param_data(r, m->i_temporal) : NULL,
                            c->frames / c->tubelet, m->S, D));
    TBI_TRY(o->tokens_fwd(be, m->x_pre, m->patch_out, tbi_param_data(r, m->i_cls), m->pos_eff,
                          NULL, B, m->Nk, 1, D));
    return o->layernorm_fwd(be, f32(m->x[0]), m->pre_mean, m->pre_rstd, m->x_pre,
                            tbi_param_data(r, m->i_pre_w), tbi_param_data(r, m->i_pre_b),
                            B * m->Nt, D, LN_EPS);
}

/* After the blocks: pooling (the class token, the mean of all tokens, or none), the norm (of
 * the pooled rows, or of every token), the head (after head dropout) or the projection. */
static int head(tb_vit *m, int B)
{
    const struct tbi_ops *o = m->be->ops;
    tbi_backend *be = m->be;
    const struct tb_params *r = m->reg;
    int D = m->D;
    const float *xl = m->x[m->c.depth], *pooled = xl;
    if (m->pool >= 0) {
        TBI_TRY(o->pool_fwd(be, m->pool, m->pooled, xl, B, m->Nt, D));
        pooled = m->pooled;
    }
    TBI_TRY(o->layernorm_fwd(be, f32(m->feat), m->feat_mean, m->feat_rstd, pooled,
                             tbi_param_data(r, m->i_norm_w), tbi_param_data(r, m->i_norm_b),
                             m->F_rows, D, LN_EPS));
    if (m->K > 0) {
        /* head dropout: the features times the mask, as B D segments of one */
        if (m->last.hmask)
            TBI_TRY(o->scale_add(be, f32(m->feat_drop), NULL, m->feat, m->hmask, B * D, 1));
        TBI_TRY(o->matmul_fwd(be, m->bc.dt, f32(m->logits), f32(head_in(m)),
                              f32(tbi_param_data(r, m->i_head_w)),
                              f32(tbi_param_data(r, m->i_head_b)), B, D, m->K));
    }
    if (m->E > 0) {
        /* feat @ proj (D, E), as a product with its transpose */
        TBI_TRY(o->transpose(be, m->projT, tbi_param_data(r, m->i_proj), D, m->E));
        TBI_TRY(o->matmul_fwd(be, m->bc.dt, f32(m->emb), f32(m->feat), f32(m->projT), f32(NULL),
                              B, D, m->E));
    }
    return 0;
}

/* The loss on the logits: soft targets, or labels with smoothing (checked here, on the host,
 * for every backend: a device's op cannot say which is wrong). */
static int loss_fwd(tb_vit *m, int B, const struct vit_call *in)
{
    const struct tbi_ops *o = m->be->ops;
    tbi_backend *be = m->be;
    if (m->K < 1)
        return tbi_err(TB_EINVAL, "labels for a model without a head");
    if (in->soft) {
        TBI_TRY(o->to_device(be, m->soft, in->soft, sizeof(float) * (size_t)B * m->K));
        return o->xent_soft_fwd(be, m->loss, m->probs, m->logits, m->soft, B, m->K);
    }
    for (int b = 0; b < B; b++)
        if (in->labels[b] < 0 || in->labels[b] >= m->K)
            return tbi_err(TB_ERANGE, "label %lld of clip %d is not a class of %d",
                           (long long)in->labels[b], b, m->K);
    TBI_TRY(o->to_device(be, m->labels, in->labels, sizeof(int64_t) * (size_t)B));
    return o->xent_fwd(be, m->loss, m->probs, m->logits, m->labels, B, m->K, in->smoothing);
}

/* The forward of the input (B clips in m->video) with the call's settings: tokens, blocks,
 * pooling, norm, head, loss. The host reads the loss only when asked (a training step takes
 * it on the backend: tbi_*_loss). */
static int forward(tb_vit *m, int B, const struct vit_call *in, float *loss)
{
    int has_loss = in->labels || in->soft;
    m->B = B;
    m->last = (struct vit_last){.drop = in->drop, .hmask = in->hmask, .soft = in->soft != NULL,
                                .smoothing = in->smoothing, .grad = GRAD_NONE};
    if (m->c.keep && !in->keep)
        return tbi_err(TB_EINVAL, "the model keeps %d tokens a clip: tb_vit_set_keep first",
                       m->c.keep);
    TBI_TRY(embed(m, B));
    TBI_TRY(fwd_done(m, 2)); /* the embedding */
    for (int l = 0; l < m->c.depth; l++) {
        TBI_TRY(block_forward(m, l, 0));
        TBI_TRY(fwd_done(m, 3 + l));
    }
    TBI_TRY(head(m, B));
    TBI_TRY(fwd_done(m, m->c.depth + 3)); /* the head (the loss's buffers live on) */
    m->last.grad = GRAD_FEATURES;
    if (!has_loss)
        return 0;
    TBI_TRY(loss_fwd(m, B, in));
    m->last.grad = GRAD_LOSS;
    return loss ? m->be->ops->to_host(m->be, loss, m->loss, sizeof(float)) : 0;
}

int tb_vit_set_video(tb_vit *m, const float *video, int B)
{
    const struct tb_vit_config *c = &m->c;
    TBI_TRY(check_batch(m, B));
    size_t n = (size_t)B * 3 * c->frames * c->height * c->width;
    TBI_TRY(m->be->ops->to_device(m->be, m->video, video, sizeof(float) * n));
    m->B_in = B;
    m->next = (struct vit_call){0};
    m->last.grad = GRAD_NONE; /* the input may live where the forward's activations do */
    return 0;
}

int tb_vit_set_clips(tb_vit *m, const uint8_t *clips, const uint8_t *flip, int B,
                     const float mean[3], const float std[3])
{
    const struct tb_vit_config *c = &m->c;
    const struct tbi_ops *o = m->be->ops;
    TBI_TRY(check_batch(m, B));
    size_t n = (size_t)B * c->frames * c->height * c->width * 3;
    TBI_TRY(o->to_device(m->be, m->clips, clips, n));
    if (flip)
        TBI_TRY(o->to_device(m->be, m->flip, flip, (size_t)B));
    TBI_TRY(o->normalize(m->be, m->video, m->clips, flip ? m->flip : NULL, B, c->frames,
                         c->height, c->width, mean, std));
    m->B_in = B;
    m->next = (struct vit_call){0};
    m->last.grad = GRAD_NONE; /* the input may live where the forward's activations do */
    return 0;
}

int tb_vit_set_keep(tb_vit *m, const int32_t *idx)
{
    int B = m->B_in, Nk = m->Nk;
    if (!m->c.keep || !B)
        return tbi_err(TB_EINVAL, "%s", !m->c.keep ? "the model keeps every token (keep 0)"
                                                   : "no input: set the video or clips first");
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Nk; j++) {
            int32_t t = idx[(size_t)b * Nk + j];
            if (t < 0 || t >= m->Np || (j && t <= idx[(size_t)b * Nk + j - 1]))
                return tbi_err(TB_EINVAL, "clip %d: kept token %d is %d: the kept tokens must "
                               "rise strictly and stay below %d", b, j, (int)t, m->Np);
        }
    TBI_TRY(m->be->ops->to_device(m->be, m->keep, idx, sizeof(int32_t) * (size_t)B * Nk));
    m->next.keep = 1;
    return 0;
}

int tb_vit_set_drop_path(tb_vit *m, const float *scale)
{
    if (!m->B_in)
        return tbi_err(TB_EINVAL, "no input: set the video or clips first");
    size_t n = 2 * (size_t)m->c.depth * m->B_in;
    for (size_t i = 0; i < n; i++)
        if (!(scale[i] >= 0) || scale[i] > 1e6f)
            return tbi_err(TB_EINVAL, "drop path factor %zu is %g: 0, or 1 / keep probability",
                           i, (double)scale[i]);
    /* (L, 2, B_in) as given; a forward of B clips reads block l's at l * 2 * B. */
    TBI_TRY(m->be->ops->to_device(m->be, m->drop, scale, sizeof(float) * n));
    m->next.drop = 1;
    return 0;
}

void tb_vit_drop_path_draw(float *scale, int L, int B, double rate, uint64_t seed,
                           int64_t epoch, const int64_t *index)
{
    for (int b = 0; b < B; b++) {
        tb_rng r;
        tb_rng_init_for(&r, seed, TB_RNG_DROP_PATH, (uint64_t)epoch, (uint64_t)index[b]);
        for (int l = 0; l < L; l++) {
            /* VideoMAE's rates: linspace(0, rate, L) over the blocks */
            double p = L > 1 ? rate * l / (L - 1) : 0, keep = 1 - p;
            for (int k = 0; k < 2; k++) {
                double u = tb_rng_uniform(&r);
                scale[((size_t)l * 2 + k) * B + b] = u < keep ? (float)(1.0 / keep) : 0.0f;
            }
        }
    }
}

static int need_input(const tb_vit *m)
{
    return m->B_in ? 0 : tbi_err(TB_EINVAL, "no input: tb_vit_set_video or tb_vit_set_clips "
                                 "first");
}

int tb_vit_mix(tb_vit *m, float lam, const int box[4])
{
    const struct tb_vit_config *c = &m->c;
    TBI_TRY(need_input(m));
    if (!(lam >= 0 && lam <= 1))
        return tbi_err(TB_EINVAL, "mixing weight %g outside [0, 1]", (double)lam);
    return m->be->ops->mix_clips(m->be, m->video, m->B_in, 3 * c->frames, c->height, c->width,
                                 lam, box);
}

int tb_vit_erase(tb_vit *m, const int32_t *boxes, uint64_t seed, const uint64_t *streams)
{
    const struct tb_vit_config *c = &m->c;
    TBI_TRY(need_input(m));
    return m->be->ops->erase_boxes(m->be, m->video, m->B_in, 3, c->frames, c->height, c->width,
                                   boxes, seed, streams);
}

int tb_vit_set_head_dropout(tb_vit *m, const float *mask)
{
    TBI_TRY(need_input(m));
    if (m->K < 1 || m->pool < 0)
        return tbi_err(TB_EINVAL, "head dropout needs a head on pooled features");
    size_t n = (size_t)m->B_in * m->D;
    for (size_t i = 0; i < n; i++)
        if (!(mask[i] >= 0) || mask[i] > 1e6f)
            return tbi_err(TB_EINVAL, "dropout factor %zu is %g: 0, or 1 / (1 - rate)", i,
                           (double)mask[i]);
    TBI_TRY(m->be->ops->to_device(m->be, m->hmask, mask, sizeof(float) * n));
    m->next.hmask = 1;
    return 0;
}

/* The input's forward (which overwrites the input's space). */
static int run(tb_vit *m, const int64_t *labels, const float *soft, float smoothing, float *loss)
{
    TBI_TRY(need_input(m));
    struct vit_call in = m->next;
    int B = m->B_in;
    in.labels = labels;
    in.soft = soft;
    in.smoothing = smoothing;
    m->B_in = 0;
    m->next = (struct vit_call){0};
    return forward(m, B, &in, loss);
}

int tb_vit_run(tb_vit *m, const int64_t *labels, float smoothing, float *loss)
{
    return run(m, labels, NULL, smoothing, loss);
}

int tb_vit_run_soft(tb_vit *m, const float *targets, float *loss)
{
    if (!targets)
        return tbi_err(TB_EINVAL, "no soft targets");
    return run(m, NULL, targets, 0, loss);
}

int tb_vit_forward(tb_vit *m, const float *video, int B, const int64_t *labels, float smoothing,
                   float *loss)
{
    TBI_TRY(tb_vit_set_video(m, video, B));
    return tb_vit_run(m, labels, smoothing, loss);
}

int tb_vit_forward_clips(tb_vit *m, const uint8_t *clips, const uint8_t *flip, int B,
                         const float mean[3], const float std[3], const int64_t *labels,
                         float smoothing, float *loss)
{
    TBI_TRY(tb_vit_set_clips(m, clips, flip, B, mean, std));
    return tb_vit_run(m, labels, smoothing, loss);
}

int tb_vit_logits(tb_vit *m, float *host)
{
    if (m->K < 1 || !m->B)
        return tbi_err(TB_EINVAL, "no logits: %s", m->K < 1 ? "the model has no head"
                                                             : "no forward since planning");
    return m->be->ops->to_host(m->be, host, m->logits, sizeof(float) * (size_t)m->B * m->K);
}

int tb_vit_features(tb_vit *m, float *host)
{
    if (!m->B)
        return tbi_err(TB_EINVAL, "no features: no forward since planning");
    return m->be->ops->to_host(m->be, host, m->E > 0 ? m->emb : m->feat,
                               sizeof(float) * (size_t)tb_vit_feature_floats(m));
}

int64_t tb_vit_feature_floats(const tb_vit *m)
{
    if (m->E > 0)
        return (int64_t)m->B * m->E;
    return (int64_t)(m->pool >= 0 ? m->B : m->B * m->Nt) * m->D;
}

/* ---- backward ---------------------------------------------------------------------------- */

/* From dfeat, the gradient on the features: the final norm, pooling, the blocks in reverse,
 * the token embedding. Every gradient is written, not added: the block needs no clearing
 * (88 MB for ViT-S, 344 MB for ViT-B). */
static int backward(tb_vit *m)
{
    const struct tbi_ops *o = m->be->ops;
    tbi_backend *be = m->be;
    const struct tb_vit_config *c = &m->c;
    const struct tb_params *r = m->reg;
    int B = m->B, D = m->D, Nt = m->Nt, L = c->depth;
    size_t R = (size_t)B * Nt;
    const float *xl = m->x[L];
    if (m->E > 0) {
        /* the projection: dfeat from the features' gradient, proj's gradient transposed */
        TBI_TRY(o->matmul_bwd(be, m->bc.dt, f32(m->dfeat), f32(m->dprojT), f32(NULL),
                              f32(m->demb), f32(m->feat), f32(m->projT), B, D, m->E));
        TBI_TRY(o->transpose(be, tbi_param_grad(r, m->i_proj), m->dprojT, m->E, D));
    }
    float *dnorm = m->pool >= 0 ? m->dpool : m->dres; /* the norm's input gradient: added to */
    TBI_TRY(o->zero(be, dnorm, sizeof(float) * (size_t)m->F_rows * D));
    TBI_TRY(o->layernorm_bwd(be, dnorm, tbi_param_grad(r, m->i_norm_w),
                             tbi_param_grad(r, m->i_norm_b), f32(m->dfeat),
                             m->pool >= 0 ? m->pooled : xl, tbi_param_data(r, m->i_norm_w),
                             m->feat_mean, m->feat_rstd, m->F_rows, D));
    TBI_TRY(tbi_span_done(r, m->span1 - 1)); /* the final norm's and head's (projection's) */
    if (m->pool >= 0)
        TBI_TRY(o->pool_bwd(be, m->pool, m->dres, m->dpool, B, Nt, D));
    TBI_TRY(bwd_done(m, 0)); /* the head's */
    /* Blocks in reverse; dres holds the gradient of the block's output and, after it, of its
     * input (the residual connections add the branch gradients into it). */
    for (int l = L - 1; l >= 0; l--) {
        struct tbi_block_w w, g;
        tbi_block_bind(m->reg, m->blk_first[l], &m->bc, &w, &g);
        if (c->recompute)
            TBI_TRY(block_forward(m, l, 1));
        TBI_TRY(tbi_block_backward(be, &m->bc, &w, &g, acts_of(m, l), &m->s, drop_of(m, l),
                                   m->x[l], m->dres, B, Nt,
                                   c->recompute            ? TBI_FROM_FRESH
                                   : l < c->recompute_mlp ? TBI_FROM_MLP
                                                           : TBI_FROM_SET));
        TBI_TRY(tbi_span_done(r, m->span0 + 1 + l));
        TBI_TRY(bwd_done(m, L - l));
    }
    /* Tokens: positions, class token, patch embedding (the video needs no gradient); the
     * patch rows gathered contiguous (B*Np, D) for the weight gradient. */
    float *dpatch = m->dpatch;
    if (m->clip) {
        /* ln_pre, the tokens, the tiled positions */
        float *dpre = m->dpre;
        TBI_TRY(o->zero(be, dpre, sizeof(float) * R * D));
        TBI_TRY(o->layernorm_bwd(be, dpre, tbi_param_grad(r, m->i_pre_w),
                                 tbi_param_grad(r, m->i_pre_b), f32(m->dres), m->x_pre,
                                 tbi_param_data(r, m->i_pre_w), m->pre_mean, m->pre_rstd,
                                 (int)R, D));
        TBI_TRY(o->tokens_bwd(be, dpatch, tbi_param_grad(r, m->i_cls), m->dpos_eff, dpre, NULL,
                              B, m->Nk, 1, Nt, D));
        TBI_TRY(o->pos_tile_bwd(be, tbi_param_grad(r, m->i_pos),
                                m->i_temporal >= 0 ? tbi_param_grad(r, m->i_temporal) : NULL,
                                m->dpos_eff, c->frames / c->tubelet, m->S, D));
    } else {
        TBI_TRY(o->tokens_bwd(be, dpatch, m->has_cls ? tbi_param_grad(r, m->i_cls) : NULL,
                              c->pos == TB_POS_LEARNED ? tbi_param_grad(r, m->i_pos) : NULL,
                              m->dres, c->keep ? m->keep : NULL, B, m->Nk, m->has_cls,
                              m->Np + m->has_cls, D));
    }
    TBI_TRY(o->matmul_bwd(be, m->bc.dt, f32(NULL), f32(tbi_param_grad(r, m->i_patch_w)),
                          f32(m->i_patch_b >= 0 ? tbi_param_grad(r, m->i_patch_b) : NULL),
                          f32(dpatch), f32(m->cols), f32(tbi_param_data(r, m->i_patch_w)),
                          B * m->Nk, m->patch_len, D));
    TBI_TRY(tbi_span_done(r, m->span0));
    TBI_TRY(bwd_done(m, L + 1)); /* the embedding's */
    /* The gradients now fill activation space of this forward: a second backward would read
     * them as activations. */
    m->last.grad = GRAD_NONE;
    return 0;
}

int tb_vit_backward(tb_vit *m)
{
    const struct tbi_ops *o = m->be->ops;
    const struct tb_params *r = m->reg;
    if (m->last.grad != GRAD_LOSS)
        return tbi_err(TB_EINVAL, "backward needs a forward with labels since the last "
                       "backward and input");
    /* Loss -> logits -> head -> the features' gradient. */
    if (m->last.soft)
        TBI_TRY(o->xent_soft_bwd(m->be, m->dlogits, m->probs, m->soft, m->B, m->K));
    else
        TBI_TRY(o->xent_bwd(m->be, m->dlogits, m->probs, m->labels, m->B, m->K,
                            m->last.smoothing));
    TBI_TRY(o->matmul_bwd(m->be, m->bc.dt, f32(m->dfeat), f32(tbi_param_grad(r, m->i_head_w)),
                          f32(tbi_param_grad(r, m->i_head_b)), f32(m->dlogits),
                          f32(head_in(m)), f32(tbi_param_data(r, m->i_head_w)), m->B, m->D,
                          m->K));
    if (m->last.hmask)
        TBI_TRY(o->scale_add(m->be, f32(m->dfeat), NULL, m->dfeat, m->hmask, m->B * m->D, 1));
    return backward(m);
}

int tb_vit_backward_features(tb_vit *m, const float *dfeat)
{
    if (m->last.grad == GRAD_NONE)
        return tbi_err(TB_EINVAL, "backward needs a forward since the last backward and input");
    TBI_TRY(m->be->ops->to_device(m->be, m->E > 0 ? m->demb : m->dfeat, dfeat,
                                  sizeof(float) * (size_t)tb_vit_feature_floats(m)));
    if (m->i_head_w >= 0) { /* a head the features' gradient does not reach: zero, written */
        const struct tb_params *r = m->reg;
        TBI_TRY(m->be->ops->zero(m->be, tbi_param_grad(r, m->i_head_w),
                                 sizeof(float) * (size_t)r->p[m->i_head_w].n));
        TBI_TRY(m->be->ops->zero(m->be, tbi_param_grad(r, m->i_head_b),
                                 sizeof(float) * (size_t)r->p[m->i_head_b].n));
    }
    return backward(m);
}

/* ---- for a larger model (MAE) ------------------------------------------------------------ */

float *tbi_vit_loss(tb_vit *m)
{
    return m->loss;
}

float *tbi_vit_feat(tb_vit *m)
{
    return m->E > 0 ? m->emb : m->feat;
}

float *tbi_vit_dfeat(tb_vit *m)
{
    return m->E > 0 ? m->demb : m->dfeat;
}

const float *tbi_vit_patches(tb_vit *m)
{
    return m->c.keep ? m->cols_all : m->cols;
}

int tbi_vit_backward_dev(tb_vit *m)
{
    if (m->last.grad == GRAD_NONE)
        return tbi_err(TB_EINVAL, "backward needs a forward since the last backward and input");
    return backward(m);
}
