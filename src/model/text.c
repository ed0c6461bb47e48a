/* src/model/text.c - the text tower of the video-text dual encoder (LaViLa's and AVION's
 * TextTransformer, OpenAI CLIP's names): token and positional embeddings, causal pre-LN
 * blocks (text.h), ln_final on the end token's row (the position of the largest id, as
 * text.argmax(-1)), x @ text_projection. Forward and backward through the backend's ops;
 * activations planned from the batch size. Tests: tests/test_clip.c. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/internal.h"
#include "model/block.h"
#include "model/text.h"

struct tbi_text {
    struct tbi_text_config c;
    tbi_backend *be;
    struct tb_params *reg;            /* borrowed: the dual encoder's */
    int span0, span1;
    struct tbi_block_cfg bc;
    int i_tok, i_pos, i_ln_w, i_ln_b, i_proj;
    int *blk_first;
    /* activations (backend), for up to B_plan captions of ctx tokens; R = B * ctx rows */
    int B_plan, B, ready;             /* ready: a forward's activations wait for a backward */
    struct tbi_plan *tick_plan;       /* the plan it was declared into, at ticks */
    struct tbi_ticks ticks;           /* (tbi_plan_tick at each tick's end) */
    int32_t *ids, *eot;               /* (R), (B) */
    float **x;                        /* L + 1 of (R, D) */
    struct tbi_block_acts *ba;        /* L */
    struct tbi_block_scratch s;
    float *dres;                      /* (R, D) */
    float *tok, *dtok;                /* (R, D): the token rows, their gradient */
    float *sel, *feat, *mean, *rstd;  /* (B, D) x2, (B) x2: the end tokens, ln_final's */
    float *dsel, *dfeat;              /* (B, D) */
    float *projT, *dprojT;            /* (E, D) */
    float *emb, *demb;                /* (B, E) */
};

static int add(struct tbi_text *t, const char *prefix, const char *name, enum tb_init init,
               float std, int n_dims, int64_t d0, int64_t d1)
{
    const int64_t shape[2] = {d0, d1};
    int i = tbi_params_add(t->reg, prefix, name, init, n_dims, shape);
    if (i >= 0)
        t->reg->p[i].init_std = std;
    return i;
}

/* AVION's initialisation of a block's matrices: N(0, std) with attention D^-0.5, output
 * projections D^-0.5 (2L)^-0.5, c_fc (2D)^-0.5; its biases zero. */
static void init_block(struct tbi_text *t, int first)
{
    float D = (float)t->c.width, L = (float)t->c.layers;
    const int k[4] = {TBI_BLK_QKV_W, TBI_BLK_PROJ_W, TBI_BLK_FC1_W, TBI_BLK_FC2_W};
    const float std[4] = {1 / sqrtf(D), 1 / sqrtf(D) / sqrtf(2 * L), 1 / sqrtf(2 * D),
                          1 / sqrtf(D) / sqrtf(2 * L)};
    for (int j = 0; j < 4; j++) {
        t->reg->p[first + k[j]].init = TB_INIT_NORMAL;
        t->reg->p[first + k[j]].init_std = std[j];
    }
}

/* The parameters as gradient spans: the embeddings', one per block, ln_final's and the
 * projection's. Weight decay: params.c's rule. */
static int add_params(struct tbi_text *t, const char *prefix)
{
    const struct tbi_text_config *c = &t->c;
    int D = c->width, rc;
    if ((rc = tbi_params_span(t->reg)) < 0 ||
        (rc = t->i_tok = add(t, prefix, "token_embedding.weight", TB_INIT_NORMAL, 0.02f, 2,
                             c->vocab, D)) < 0 ||
        (rc = t->i_pos = add(t, prefix, "positional_embedding", TB_INIT_NORMAL, 0.01f, 2,
                             c->ctx, D)) < 0)
        return rc;
    for (int l = 0; l < c->layers; l++) {
        char name[96];
        snprintf(name, sizeof(name), "%stransformer.resblocks.%d.", prefix, l);
        if ((rc = t->blk_first[l] = tbi_block_add(t->reg, name, &t->bc)) < 0)
            return rc;
        init_block(t, rc);
    }
    if ((rc = tbi_params_span(t->reg)) < 0 ||
        (rc = t->i_ln_w = add(t, prefix, "ln_final.weight", TB_INIT_ONE, 0, 1, D, 0)) < 0 ||
        (rc = t->i_ln_b = add(t, prefix, "ln_final.bias", TB_INIT_ZERO, 0, 1, D, 0)) < 0 ||
        (rc = t->i_proj = add(t, prefix, "text_projection", TB_INIT_NORMAL, 1 / sqrtf(D), 2,
                              D, c->embed)) < 0)
        return rc;
    return 0;
}

int tbi_text_open_in(struct tbi_text **out, const struct tbi_text_config *c, tbi_backend *be,
                     struct tb_params *reg, const char *prefix)
{
    *out = NULL;
    if (c->vocab < 1 || c->ctx < 2 || c->layers < 1 || c->embed < 1)
        return tbi_err(TB_EINVAL, "bad text tower: vocabulary %d, context %d, %d blocks, "
                       "projection width %d", c->vocab, c->ctx, c->layers, c->embed);
    struct tbi_block_cfg bc = {.D = c->width, .NH = c->heads, .F = 4 * c->width, .eps = c->eps,
                               .act = c->act, .causal = c->causal, .names = TBI_NAMES_CLIP,
                               .dt = c->dt};
    TBI_TRY(tbi_block_check(&bc));
    TBI_TRY(tbi_block_supported(be, &bc));
    struct tbi_text *t = tbi_calloc(1, sizeof(*t));
    if (!t)
        return tbi_err(TB_ENOMEM, "out of memory");
    t->c = *c;
    t->be = be;
    t->reg = reg;
    t->bc = bc;
    t->blk_first = tbi_calloc((size_t)c->layers, sizeof(*t->blk_first));
    t->ba = tbi_calloc((size_t)c->layers, sizeof(*t->ba));
    t->x = tbi_calloc((size_t)c->layers + 1, sizeof(*t->x));
    t->span0 = reg->n_spans;
    int rc = !t->blk_first || !t->ba || !t->x ? tbi_err(TB_ENOMEM, "out of memory")
                                                : add_params(t, prefix);
    t->span1 = reg->n_spans;
    if (rc < 0) {
        tbi_text_close(&t);
        return rc;
    }
    /* the backward's tbi_span_done: the embeddings', one per block, ln_final's */
    TB_ASSERT(t->span1 - t->span0 == c->layers + 2);
    *out = t;
    return 0;
}

/* Forget the plan (the dual encoder's): the gradient spans homeless. */
static void free_acts(struct tbi_text *t)
{
    t->B_plan = t->B = t->ready = 0;
    t->tick_plan = NULL;
    for (int s = t->span0; s < t->span1; s++)
        t->reg->home[s] = NULL;
}

void tbi_text_close(struct tbi_text **pt)
{
    if (!pt || !*pt)
        return;
    struct tbi_text *t = *pt;
    free_acts(t);
    free(t->blk_first);
    free(t->ba);
    free(t->x);
    free(t);
    *pt = NULL;
}

int tbi_text_declare(struct tbi_text *t, int B, struct tbi_plan *p, const struct tbi_ticks *k)
{
    int D = t->c.width, L = t->c.layers, N = t->c.ctx, E = t->c.embed;
    if (B < 1 || (int64_t)B * N > INT_MAX / 4)
        return tbi_err(TB_EINVAL, "a plan for %d captions of %d tokens", B, N);
    free_acts(t);
    t->tick_plan = p;
    t->ticks = *k;
    size_t R = (size_t)B * N, BD = (size_t)B * D, ED = (size_t)E * D, BE = (size_t)B * E;
    int f = k->fwd, head = f + 1 + L, b = k->bwd, embed = b + L + 1;
    TBI_BUF(p, t->ids, R, f, embed);
    TBI_BUF(p, t->eot, B, f, b);
    for (int l = 0; l <= L; l++)
        TBI_BUF(p, t->x[l], R * D, f + l, l < L ? b + L - l : head);
    for (int l = 0; l < L; l++)
        tbi_plan_add(p, "block activations", &t->ba[l].ln1_mean,
                     tbi_block_acts_bytes(&t->bc, B, N, 1), f + 1 + l, b + L - l);
    tbi_block_scratch_declare(p, &t->s, &t->bc, R, f + 1, f + L, b + 1, b + L);
    TBI_BUF(p, t->tok, R * D, f, f);
    TBI_BUF(p, t->dtok, R * D, embed, embed);
    TBI_BUF(p, t->dres, R * D, b, embed);
    TBI_BUF(p, t->sel, BD, head, b);
    TBI_BUF(p, t->feat, BD, head, b);
    TBI_BUF(p, t->mean, B, head, b);
    TBI_BUF(p, t->rstd, B, head, b);
    TBI_BUF(p, t->projT, ED, head, b);
    TBI_BUF(p, t->emb, BE, head, k->end);
    TBI_BUF(p, t->demb, BE, k->grad_in, b);
    TBI_BUF(p, t->dsel, BD, b, b);
    TBI_BUF(p, t->dfeat, BD, b, b);
    TBI_BUF(p, t->dprojT, ED, b, b);
    tbi_tower_grads_declare(p, t->reg, t->span0, L, b, k->end);
    return p->err;
}

void tbi_text_bind(struct tbi_text *t, int B)
{
    t->B_plan = B;
    for (int l = 0; l < t->c.layers; l++)
        tbi_block_acts_carve(&t->ba[l], t->ba[l].ln1_mean, &t->bc, B, t->c.ctx, 1);
}

int tbi_text_check_ids(const struct tbi_text_config *c, const int32_t *ids, int B, int *eot)
{
    for (int b = 0; b < B; b++) {
        const int32_t *row = ids + (size_t)b * c->ctx;
        int best = 0;
        for (int j = 0; j < c->ctx; j++) {
            if (row[j] < 0 || row[j] >= c->vocab)
                return tbi_err(TB_EINVAL, "caption %d, token %d: id %d outside the vocabulary "
                               "of %d", b, j, (int)row[j], c->vocab);
            best = row[j] > row[best] ? j : best; /* the first largest, as argmax */
        }
        if (eot)
            eot[b] = best;
    }
    return 0;
}

int tbi_text_forward(struct tbi_text *t, const int32_t *ids, int B)
{
    const struct tbi_ops *o = t->be->ops;
    tbi_backend *be = t->be;
    const struct tb_params *r = t->reg;
    int D = t->c.width, N = t->c.ctx, L = t->c.layers, E = t->c.embed;
    if (B < 1 || B > t->B_plan)
        return tbi_err(TB_EINVAL, "%d captions, but the text tower is planned for %d", B,
                       t->B_plan);
    int *eot = tbi_malloc(sizeof(int) * (size_t)B);
    int32_t *eot32 = tbi_malloc(sizeof(int32_t) * (size_t)B);
    int rc = !eot || !eot32 ? tbi_err(TB_ENOMEM, "out of memory")
                            : tbi_text_check_ids(&t->c, ids, B, eot);
    for (int b = 0; rc == 0 && b < B; b++)
        eot32[b] = eot[b];
    if (rc == 0)
        rc = o->to_device(be, t->eot, eot32, sizeof(int32_t) * (size_t)B);
    free(eot);
    free(eot32);
    TBI_TRY(rc);
    size_t R = (size_t)B * N;
    t->B = B;
    t->ready = 0;
    TBI_TRY(o->to_device(be, t->ids, ids, sizeof(int32_t) * R));
    /* token rows, + positions -> x0 */
    TBI_TRY(o->gather_rows(be, t->tok, tbi_param_data(r, t->i_tok), t->ids, 1, t->c.vocab,
                           (int)R, D));
    TBI_TRY(o->tokens_fwd(be, t->x[0], t->tok, NULL, tbi_param_data(r, t->i_pos), NULL, B, N, 0,
                          D));
    TBI_TRY(tbi_plan_tick(t->tick_plan, t->ticks.fwd)); /* the embedding: what dies there */
    for (int l = 0; l < L; l++) {
        struct tbi_block_w w;
        tbi_block_bind(r, t->blk_first[l], &t->bc, &w, NULL);
        TBI_TRY(tbi_block_forward(be, &t->bc, &w, &t->ba[l], &t->s, NULL, t->x[l],
                                  t->x[l + 1], B, N, 0));
        TBI_TRY(tbi_plan_tick(t->tick_plan, t->ticks.fwd + 1 + l));
    }
    /* the end token's row, ln_final, the projection */
    TBI_TRY(o->gather_rows(be, t->sel, t->x[L], t->eot, B, N, 1, D));
    TBI_TRY(o->layernorm_fwd(be, tbi_f32(t->feat), t->mean, t->rstd, t->sel,
                             tbi_param_data(r, t->i_ln_w), tbi_param_data(r, t->i_ln_b), B, D,
                             t->c.eps));
    TBI_TRY(o->transpose(be, t->projT, tbi_param_data(r, t->i_proj), D, E));
    TBI_TRY(o->matmul_fwd(be, t->bc.dt, tbi_f32(t->emb), tbi_f32(t->feat), tbi_f32(t->projT),
                          tbi_f32(NULL), B, D, E));
    TBI_TRY(tbi_plan_tick(t->tick_plan, t->ticks.fwd + 1 + L)); /* the head */
    t->ready = 1;
    return 0;
}

float *tbi_text_emb(struct tbi_text *t)
{
    return t->emb;
}

int tbi_text_batch(const struct tbi_text *t)
{
    return t->B;
}

float *tbi_text_demb(struct tbi_text *t)
{
    return t->demb;
}

int tbi_text_backward(struct tbi_text *t)
{
    const struct tbi_ops *o = t->be->ops;
    tbi_backend *be = t->be;
    const struct tb_params *r = t->reg;
    int B = t->B, D = t->c.width, N = t->c.ctx, L = t->c.layers, E = t->c.embed;
    size_t R = (size_t)B * N;
    if (!t->ready)
        return tbi_err(TB_EINVAL, "the text tower's backward needs a forward since the last one");
    t->ready = 0;
    TBI_TRY(o->matmul_bwd(be, t->bc.dt, tbi_f32(t->dfeat), tbi_f32(t->dprojT), tbi_f32(NULL),
                          tbi_f32(t->demb), tbi_f32(t->feat), tbi_f32(t->projT), B, D, E));
    TBI_TRY(o->transpose(be, tbi_param_grad(r, t->i_proj), t->dprojT, E, D));
    TBI_TRY(o->zero(be, t->dsel, sizeof(float) * (size_t)B * D));
    TBI_TRY(o->layernorm_bwd(be, t->dsel, tbi_param_grad(r, t->i_ln_w),
                             tbi_param_grad(r, t->i_ln_b), tbi_f32(t->dfeat), t->sel,
                             tbi_param_data(r, t->i_ln_w), t->mean, t->rstd, B, D));
    TBI_TRY(tbi_span_done(r, t->span1 - 1)); /* ln_final's and the projection's */
    /* only the end tokens' rows have a gradient from above */
    TBI_TRY(o->zero(be, t->dres, sizeof(float) * R * D));
    TBI_TRY(o->scatter_rows(be, t->dres, t->dsel, t->eot, B, N, 1, D));
    TBI_TRY(tbi_plan_tick(t->tick_plan, t->ticks.bwd)); /* the head's */
    for (int l = L - 1; l >= 0; l--) {
        struct tbi_block_w w, g;
        tbi_block_bind(r, t->blk_first[l], &t->bc, &w, &g);
        TBI_TRY(tbi_block_backward(be, &t->bc, &w, &g, &t->ba[l], &t->s, NULL, t->x[l],
                                   t->dres, B, N, TBI_FROM_SET));
        TBI_TRY(tbi_span_done(r, t->span0 + 1 + l));
        TBI_TRY(tbi_plan_tick(t->tick_plan, t->ticks.bwd + L - l));
    }
    TBI_TRY(o->tokens_bwd(be, t->dtok, NULL, tbi_param_grad(r, t->i_pos), t->dres, NULL, B, N, 0,
                          N, D));
    TBI_TRY(o->embed_bwd(be, tbi_param_grad(r, t->i_tok), t->dtok, t->ids, (int)R, t->c.vocab,
                         D));
    TBI_TRY(tbi_span_done(r, t->span0));
    return tbi_plan_tick(t->tick_plan, t->ticks.bwd + L + 1); /* the embedding's */
}
