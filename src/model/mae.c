/* src/model/mae.c - VideoMAE pretraining (contract in model.h): the encoder is a ViT inside
 * this model's registry (vit.c, "encoder." names) that sees the visible tokens only; the
 * decoder is the shared block (block.c) over [visible..., decoded...] tokens; the target and
 * loss are backend ops on the encoder's own patches. The masks are drawn here, from each
 * sample's own generator. Not here: the training loop (src/train/mae_task.c).
 * Tests: tests/test_mae.c. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "model/block.h"
#include "model/plan.h"
#include "model/vit_internal.h"
#include "tubelet/rng.h"

#define LN_EPS 1e-6f

struct tb_mae {
    struct tb_mae_config c;
    tbi_backend *be;
    struct tb_params reg;
    tb_vit *enc;
    struct tbi_block_cfg bc;          /* the decoder's blocks */
    int De, Dd, Ld, V, PP;            /* encoder and decoder widths, decoder depth, values
                                       * per token (3 PP), pixels per tube */
    int Tp, Hp, Wp, Np, Nv, Nq, Nd;   /* token grid, patches, visible, decoded, Nv + Nq */
    int i_e2d, i_mask, i_norm_w, i_norm_b, i_head_w, i_head_b;
    int *blk_first;
    int span0;                        /* the decoder's first gradient span */
    float *sincos;                    /* (Np, Dd) */
    float mean01[3], std01[3];        /* the input's normalisation, 0-1 scale */

    int B_plan, B, B_in, mask_set, fwd_done;
    int tick_d, tick_db;              /* the decoder's first forward and backward ticks */
    int32_t *h_keep, *h_idx, *h_rows, *h_tok; /* host: (B, Nv), (B, Nd), (B, Nq) x2 */
    float *h_w;                       /* host (B, Nq) */
    int32_t *idx;                     /* (B, Nd): positions, visible then decoded */
    int32_t *q_tok;                   /* (B, Nq): the decoded tokens (= idx[b][Nv:]) */
    int32_t *q_rows;                  /* (B, Nq): their rows in x, Nv + j */
    float *w;                         /* (B * Nq): loss weights, 1 where encoder-masked */
    struct tbi_plan plan;             /* the arena of every buffer of the step, the encoder's
                                       * too */
    float *xe;                        /* (B*Nv, Dd): encoder features mapped */
    float **x;                        /* Ld of (B*Nd, Dd): the blocks' inputs */
    struct tbi_block_acts *ba;
    struct tbi_block_scratch s;
    float *qx, *feat_mean, *feat_rstd; /* (B*Nq, Dd), (B*Nq) x2 */
    void *feat, *dfeat;               /* (B*Nq, Dd) of bc.dt: the norm's output (the head's
                                       * operand), the head's input gradient */
    float *gath;                      /* (B*Nq, V): the decoded tokens' patches */
    void *pred;                       /* (B*Nq, V) of bc.dt: the head's product */
    float *tgt, *dpred;               /* (B*Nq, V); dpred is tgt's space (the loss's
                                       * backward writes over it) */
    float *dres, *dq;                 /* (B*Nd, Dd), (B*Nq, Dd) */
    float *dxe;                       /* (B*Nv, Dd): the mapped tokens' gradient */
    float *loss;
};

/* A tensor of the decoder's type (bc.dt: bf16 in bf16 mode). */
static tbi_t act(const tb_mae *m, const void *p)
{
    return tbi_t_of(p, m->bc.dt);
}

static int check_config(const struct tb_mae_config *c, int *Nv, int *Nq)
{
    const struct tb_vit_config *e = &c->enc;
    if (e->patch < 1 || e->tubelet < 1 || e->height % (e->patch ? e->patch : 1) ||
        e->width % (e->patch ? e->patch : 1) || e->frames % (e->tubelet ? e->tubelet : 1))
        return tbi_err(TB_EINVAL, "bad MAE clip shape: %dx%dx%d in patches of %dx%dx%d",
                       e->frames, e->height, e->width, e->tubelet, e->patch, e->patch);
    int Tp = e->frames / e->tubelet, Hp = e->height / e->patch, Wp = e->width / e->patch;
    int hw = Hp * Wp, masked = (int)(c->mask_ratio * hw);
    if (!(c->mask_ratio > 0 && c->mask_ratio < 1) || masked < 1 || masked >= hw)
        return tbi_err(TB_EINVAL, "mask ratio %g masks %d of the %d positions of a frame: it "
                       "must leave at least one visible and one masked", c->mask_ratio, masked,
                       hw);
    *Nv = Tp * (hw - masked);
    *Nq = Tp * masked;
    if (c->decoder_mask == TB_DECODER_MASK_RUNNING_CELL) {
        int k = (int)(4 * c->decoder_ratio);
        if (k < 1 || k > 3)
            return tbi_err(TB_EINVAL, "decoder mask ratio %g drops %d of a cell's 4 positions: "
                           "it must drop 1, 2 or 3", c->decoder_ratio, k);
        if (Hp % 2 || Wp % 2)
            return tbi_err(TB_EINVAL, "running-cell decoder masking lays 2x2 cells over the "
                           "%dx%d grid of patches: it must be even (another --size)", Hp, Wp);
        *Nq = Tp * (hw - k * hw / 4);
    } else if (c->decoder_mask != TB_DECODER_MASK_NONE) {
        return tbi_err(TB_EINVAL, "unknown decoder masking %d", (int)c->decoder_mask);
    }
    if (c->dec_dim < 1 || c->dec_depth < 1 || c->dec_heads < 1 || c->dec_dim % c->dec_heads)
        return tbi_err(TB_EINVAL, "bad MAE decoder: width %d, depth %d, heads %d (the heads "
                       "must divide the width)", c->dec_dim, c->dec_depth, c->dec_heads);
    return 0;
}

static int add(tb_mae *m, const char *name, enum tb_init init, int n_dims, int64_t d0, int64_t d1,
               int64_t d2)
{
    const int64_t shape[3] = {d0, d1, d2};
    return tbi_params_add(&m->reg, "", name, init, n_dims, shape);
}

/* The decoder's parameters as gradient spans: the mapping and mask token, one per block,
 * the norm and head. */
static int add_decoder(tb_mae *m)
{
    int rc, Dd = m->Dd;
    m->span0 = m->reg.n_spans;
    if ((rc = tbi_params_span(&m->reg)) < 0 ||
        (rc = m->i_e2d = add(m, "encoder_to_decoder.weight", TB_INIT_TRUNC_NORMAL, 2, Dd,
                             m->De, 0)) < 0 ||
        (rc = m->i_mask = add(m, "mask_token", TB_INIT_TRUNC_NORMAL, 3, 1, 1, Dd)) < 0)
        return rc;
    for (int l = 0; l < m->Ld; l++) {
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "decoder.blocks.%d.", l);
        if ((rc = m->blk_first[l] = tbi_block_add(&m->reg, prefix, &m->bc)) < 0)
            return rc;
    }
    if ((rc = tbi_params_span(&m->reg)) < 0 ||
        (rc = m->i_norm_w = add(m, "decoder.norm.weight", TB_INIT_ONE, 1, Dd, 0, 0)) < 0 ||
        (rc = m->i_norm_b = add(m, "decoder.norm.bias", TB_INIT_ZERO, 1, Dd, 0, 0)) < 0 ||
        (rc = m->i_head_w = add(m, "decoder.head.weight", TB_INIT_TRUNC_NORMAL, 2, m->V, Dd,
                                0)) < 0 ||
        (rc = m->i_head_b = add(m, "decoder.head.bias", TB_INIT_ZERO, 1, m->V, 0, 0)) < 0)
        return rc;
    return 0;
}

int tb_mae_open(tb_mae **out, const struct tb_mae_config *c)
{
    *out = NULL;
    int Nv = 0, Nq = 0, rc = check_config(c, &Nv, &Nq);
    if (rc < 0)
        return rc;
    tb_mae *m = tbi_calloc(1, sizeof(*m));
    if (!m)
        return tbi_err(TB_ENOMEM, "out of memory");
    m->c = *c;
    struct tb_vit_config *e = &m->c.enc;
    e->pool = TB_POOL_NONE;
    e->classes = 0;
    e->pos = TB_POS_SINCOS;
    e->qv_bias = 1;
    e->keep = Nv;
    m->De = e->dim;
    m->Dd = c->dec_dim;
    m->Ld = c->dec_depth;
    m->Tp = e->frames / e->tubelet;
    m->Hp = e->height / e->patch;
    m->Wp = e->width / e->patch;
    m->Np = m->Tp * m->Hp * m->Wp;
    m->Nv = Nv;
    m->Nq = Nq;
    m->Nd = Nv + Nq;
    m->PP = e->tubelet * e->patch * e->patch;
    m->V = 3 * m->PP;
    m->bc = (struct tbi_block_cfg){.D = m->Dd, .NH = c->dec_heads, .F = 4 * m->Dd,
                                   .eps = LN_EPS, .act = TBI_ACT_GELU, .names = TBI_NAMES_TIMM,
                                   .qv_bias = 1, .dt = e->dtype};
    m->blk_first = tbi_calloc((size_t)m->Ld, sizeof(*m->blk_first));
    m->ba = tbi_calloc((size_t)m->Ld, sizeof(*m->ba));
    m->x = tbi_calloc((size_t)m->Ld, sizeof(*m->x));
    if (!m->blk_first || !m->ba || !m->x) {
        rc = tbi_err(TB_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = tbi_backend_open(&m->be, e->backend)) < 0)
        goto fail;
    m->c.enc.backend = m->be->name;
    m->reg.be = m->be;
    if ((rc = tbi_vit_open_in(&m->enc, &m->c.enc, m->be, &m->reg, "encoder.")) < 0 ||
        (rc = add_decoder(m)) < 0 || (rc = tbi_params_alloc(&m->reg)) < 0 ||
        (rc = m->be->ops->zero(m->be, m->reg.data, sizeof(float) * (size_t)m->reg.n_floats)) < 0 ||
        (rc = tbi_vit_ready(m->enc)) < 0 ||
        (rc = tbi_sincos_upload(m->be, &m->sincos, m->Np, m->Dd)) < 0)
        goto fail;
    /* tb_mae_backward's tbi_span_done: the mapping's, one per block, the norm's and head's */
    TB_ASSERT(m->reg.n_spans - m->span0 == m->Ld + 2);
    *out = m;
    return 0;
fail:
    tb_mae_close(&m);
    return rc;
}

static void free_acts(tb_mae *m)
{
    tbi_plan_clear(&m->plan);
    free(m->h_keep);
    free(m->h_idx);
    free(m->h_rows);
    free(m->h_tok);
    free(m->h_w);
    m->h_keep = m->h_idx = m->h_rows = m->h_tok = NULL;
    m->h_w = NULL;
    m->B_plan = m->B = m->B_in = m->mask_set = m->fwd_done = 0;
    /* the encoder's spans too: their homes are in the plan */
    for (int s = 0; s < m->reg.n_spans; s++)
        m->reg.home[s] = NULL;
}

void tb_mae_close(tb_mae **pm)
{
    if (!pm || !*pm)
        return;
    tb_mae *m = *pm;
    tb_vit_close(&m->enc); /* its activations; the registry is this model's */
    if (m->be) {
        free_acts(m);
        if (m->sincos)
            m->be->ops->free(m->be, m->sincos);
        tbi_params_free(&m->reg);
    }
    tbi_backend_close(&m->be);
    free(m->blk_first);
    free(m->ba);
    free(m->x);
    free(m);
    *pm = NULL;
}

const struct tb_mae_config *tb_mae_config(const tb_mae *m)
{
    return &m->c;
}

tb_params *tb_mae_params(tb_mae *m)
{
    return &m->reg;
}

void tb_mae_sizes(const tb_mae *m, int *tokens, int *visible, int *decoded, int *values)
{
    if (tokens)
        *tokens = m->Np;
    if (visible)
        *visible = m->Nv;
    if (decoded)
        *decoded = m->Nq;
    if (values)
        *values = m->V;
}

int tb_mae_init(tb_mae *m, uint64_t seed)
{
    return tb_params_init(&m->reg, seed);
}

/* ---- plan -------------------------------------------------------------------------------- */

/* The decoder's step, from tick d (its forward: the target and mapping, one per block, the
 * head and loss; its backward from db: the loss and head, one per block from the top, the
 * mapping, which writes the encoder's features' gradient), ending at end. */
static void declare_decoder(tb_mae *m, struct tbi_plan *p, int B, int d, int db, int end)
{
    size_t Dd = (size_t)m->Dd, Rd = (size_t)B * m->Nd, Rq = (size_t)B * m->Nq;
    size_t Rv = (size_t)B * m->Nv, V = (size_t)m->V;
    int Ld = m->Ld, head = d + 1 + Ld, map = db + Ld + 1;
    TBI_BUF(p, m->idx, Rd, 0, end);
    TBI_BUF(p, m->q_tok, Rq, 0, end);
    TBI_BUF(p, m->q_rows, Rq, 0, end);
    TBI_BUF(p, m->w, Rq, 0, end);
    TBI_BUF(p, m->xe, Rv * Dd, d, d);
    for (int l = 0; l < Ld; l++) {
        TBI_BUF(p, m->x[l], Rd * Dd, d + l, db + Ld - l);
        tbi_plan_add(p, "block activations", &m->ba[l].ln1_mean,
                     tbi_block_acts_bytes(&m->bc, B, m->Nd, 1), d + 1 + l, db + Ld - l);
    }
    tbi_block_scratch_declare(p, &m->s, &m->bc, Rd, d + 1, d + Ld, db + 1, db + Ld);
    TBI_BUF(p, m->dxe, Rv * Dd, map, map);
    /* the last block's output, then the residual gradient */
    TBI_BUF(p, m->dres, Rd * Dd, d + Ld, map);
    TBI_BUF(p, m->qx, Rq * Dd, head, db);
    tbi_plan_add(p, "m->feat", &m->feat, Rq * Dd * tbi_dt_size(m->bc.dt), head, db);
    TBI_BUF(p, m->feat_mean, Rq, head, db);
    TBI_BUF(p, m->feat_rstd, Rq, head, db);
    /* the patches the target is made from; the target, then (in place) the predictions'
     * gradient; the predictions, read after the step (tb_mae_pred) */
    TBI_BUF(p, m->gath, Rq * V, d, d);
    TBI_BUF(p, m->tgt, Rq * V, d, db);
    tbi_plan_add(p, "m->pred", &m->pred, Rq * V * tbi_dt_size(m->bc.dt), head, end);
    TBI_BUF(p, m->loss, 1, head, end);
    TBI_BUF(p, m->dq, Rq * Dd, db, db);
    tbi_plan_add(p, "m->dfeat", &m->dfeat, Rq * Dd * tbi_dt_size(m->bc.dt), db, db);
    tbi_tower_grads_declare(p, &m->reg, m->span0, Ld, db, end);
}

int tb_mae_plan(tb_mae *m, int B, struct tb_plan_bytes *bytes_out)
{
    if (B < 1)
        return tbi_err(TB_EINVAL, "a plan for %d clips", B);
    if ((int64_t)B * m->Nd > INT_MAX / 4)
        return tbi_err(TB_ERANGE, "%d clips of %d decoder tokens are more rows than the ops "
                       "take: lower --batch", B, m->Nd);
    free_acts(m);
    size_t Rd = (size_t)B * m->Nd, Rq = (size_t)B * m->Nq, Rv = (size_t)B * m->Nv;
    int Le = tb_vit_config(m->enc)->depth, Ld = m->Ld;
    /* the encoder's forward, the decoder's forward and backward, the encoder's backward */
    int d = Le + 4, db = d + Ld + 2, eb = db + Ld + 2, end = eb + Le + 2;
    m->tick_d = d;
    m->tick_db = db;
    struct tbi_ticks t = {.fwd = 0, .patches = d, .bwd = eb, .grad_in = db + Ld + 1, .end = end};
    int rc = tbi_vit_declare(m->enc, B, &m->plan, &t);
    if (rc == 0) {
        declare_decoder(m, &m->plan, B, d, db, end);
        rc = tbi_plan_place(&m->plan);
    }
    if (rc == 0 && (!(m->h_keep = tbi_malloc(sizeof(int32_t) * Rv)) ||
                    !(m->h_idx = tbi_malloc(sizeof(int32_t) * Rd)) ||
                    !(m->h_rows = tbi_malloc(sizeof(int32_t) * Rq)) ||
                    !(m->h_tok = tbi_malloc(sizeof(int32_t) * Rq)) ||
                    !(m->h_w = tbi_malloc(sizeof(float) * Rq))))
        rc = tbi_err(TB_ENOMEM, "out of memory");
    char what[64];
    snprintf(what, sizeof(what), "the activations of %d clips", B);
    if (rc == 0)
        rc = tbi_plan_alloc(&m->plan, m->be, what, "lower --batch");
    if (rc == 0) {
        tbi_vit_bind(m->enc, B);
        for (int l = 0; l < Ld; l++)
            tbi_block_acts_carve(&m->ba[l], m->ba[l].ln1_mean, &m->bc, B, m->Nd, 1);
        m->dpred = m->tgt;
        /* The decoded tokens' rows in x never change: Nv + j. */
        for (int b = 0; b < B; b++)
            for (int j = 0; j < m->Nq; j++)
                m->h_rows[(size_t)b * m->Nq + j] = m->Nv + j;
        rc = m->be->ops->to_device(m->be, m->q_rows, m->h_rows, sizeof(int32_t) * Rq);
    }
    if (rc < 0) {
        free_acts(m);
        return rc;
    }
    m->B_plan = B;
    if (bytes_out)
        *bytes_out = tbi_plan_bytes(&m->plan);
    return 0;
}

/* ---- input and masks --------------------------------------------------------------------- */

static void set_norm(tb_mae *m, const float mean[3], const float std[3])
{
    for (int c = 0; c < 3; c++) {
        m->mean01[c] = mean[c] / 255.0f;
        m->std01[c] = std[c] / 255.0f;
    }
}

int tb_mae_set_video(tb_mae *m, const float *video, int B, const float mean[3],
                     const float std[3])
{
    if (!m->B_plan)
        return tbi_err(TB_EINVAL, "no plan: tb_mae_plan first");
    TBI_TRY(tb_vit_set_video(m->enc, video, B));
    set_norm(m, mean, std);
    m->B_in = B;
    m->mask_set = m->fwd_done = 0; /* the input may live where the forward's activations do */
    return 0;
}

int tb_mae_set_clips(tb_mae *m, const uint8_t *clips, const uint8_t *flip, int B,
                     const float mean[3], const float std[3])
{
    if (!m->B_plan)
        return tbi_err(TB_EINVAL, "no plan: tb_mae_plan first");
    TBI_TRY(tb_vit_set_clips(m->enc, clips, flip, B, mean, std));
    set_norm(m, mean, std);
    m->B_in = B;
    m->mask_set = m->fwd_done = 0; /* the input may live where the forward's activations do */
    return 0;
}

int tb_mae_set_mask(tb_mae *m, const uint8_t *mask, const uint8_t *drop)
{
    int B = m->B_in, Np = m->Np, Nv = m->Nv, Nq = m->Nq, Nd = m->Nd;
    const struct tbi_ops *o = m->be->ops;
    if (!B)
        return tbi_err(TB_EINVAL, "no input: set the video or clips first");
    int want_drop = m->c.decoder_mask != TB_DECODER_MASK_NONE;
    if (!drop != !want_drop)
        return tbi_err(TB_EINVAL, "%s", want_drop ? "the model masks the decoder: a drop mask "
                                                    "is needed"
                                                  : "a drop mask for a model whose decoder "
                                                    "decodes every masked token");
    double weight = 0;
    for (int b = 0; b < B; b++) {
        const uint8_t *mk = mask + (size_t)b * Np, *dr = drop ? drop + (size_t)b * Np : NULL;
        int32_t *keep = m->h_keep + (size_t)b * Nv, *idx = m->h_idx + (size_t)b * Nd;
        float *w = m->h_w + (size_t)b * Nq;
        int nv = 0, nq = 0;
        for (int t = 0; t < Np; t++) {
            int decoded = dr ? !dr[t] : mk[t] != 0;
            if (!mk[t] && nv < Nv)
                keep[nv] = t, idx[nv] = t;
            nv += !mk[t];
            if (decoded && nq < Nq)
                idx[Nv + nq] = t, w[nq] = mk[t] != 0, weight += mk[t] != 0;
            nq += decoded;
        }
        if (nv != Nv || nq != Nq)
            return tbi_err(TB_EINVAL, "clip %d: its mask leaves %d of %d tokens visible and "
                           "%d decoded; the model sees %d and decodes %d", b, nv, Np, nq, Nv,
                           Nq);
    }
    if (!(weight > 0))
        return tbi_err(TB_EINVAL, "no decoded token is masked from the encoder: the loss would "
                       "be 0/0");
    size_t Rq = (size_t)B * Nq;
    TBI_TRY(tb_vit_set_keep(m->enc, m->h_keep));
    TBI_TRY(o->to_device(m->be, m->idx, m->h_idx, sizeof(int32_t) * (size_t)B * Nd));
    for (int b = 0; b < B; b++) /* the decoded tokens: the tail of each clip's positions */
        memcpy(m->h_tok + (size_t)b * Nq, m->h_idx + (size_t)b * Nd + Nv, sizeof(int32_t) * Nq);
    TBI_TRY(o->to_device(m->be, m->q_tok, m->h_tok, sizeof(int32_t) * Rq));
    TBI_TRY(o->to_device(m->be, m->w, m->h_w, sizeof(float) * Rq));
    m->mask_set = 1;
    return 0;
}

int tb_mae_make_mask(const tb_mae *m, uint64_t seed, int64_t epoch, int64_t index,
                     uint8_t *mask, uint8_t *drop)
{
    int hw = m->Hp * m->Wp, masked = hw - m->Nv / m->Tp;
    tb_rng r;
    tb_rng_init_for(&r, seed, TB_RNG_MASK, (uint64_t)epoch, (uint64_t)index);
    /* Tube masking: a uniform choice of `masked` of the hw positions (the first of a
     * Fisher-Yates shuffle), in every temporal slice. Without memory for the shuffle there is
     * no mask: any other would break "the same for any number of workers", and resumes. */
    int *perm = (int *)tbi_malloc(sizeof(int) * (size_t)hw);
    uint8_t *frame = mask; /* slice 0, copied to the others */
    if (!perm)
        return tbi_err(TB_ENOMEM, "out of memory for the mask of sample %" PRId64, index);
    memset(frame, 0, (size_t)hw);
    for (int i = 0; i < hw; i++)
        perm[i] = i;
    for (int i = 0; i < masked; i++) {
        int j = i + (int)tb_rng_below(&r, (uint64_t)(hw - i)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
        frame[perm[i]] = 1;
    }
    free(perm);
    for (int t = 1; t < m->Tp; t++)
        memcpy(mask + (size_t)t * hw, frame, (size_t)hw);
    if (!drop || m->c.decoder_mask != TB_DECODER_MASK_RUNNING_CELL)
        return 0;
    /* VideoMAE v2's running cell: a queue of k ones and 4 - k zeros read from a pointer that
     * starts at a random phase and moves one step before each temporal slice; the 2x2 cell it
     * gives is tiled over the grid (1 = dropped). */
    int k = (int)(4 * m->c.decoder_ratio), phase = (int)tb_rng_below(&r, 4);
    for (int t = 0; t < m->Tp; t++) {
        int ptr = phase + t + 1;
        for (int y = 0; y < m->Hp; y++)
            for (int x = 0; x < m->Wp; x++) {
                int cell = 2 * (y % 2) + x % 2;
                drop[((size_t)t * m->Hp + y) * m->Wp + x] = (cell + ptr) % 4 < k;
            }
    }
    return 0;
}

/* ---- forward and backward ---------------------------------------------------------------- */

static void block_w(tb_mae *m, int l, struct tbi_block_w *w, struct tbi_block_w *g)
{
    tbi_block_bind(&m->reg, m->blk_first[l], &m->bc, w, g);
}

int tb_mae_run(tb_mae *m, float *loss)
{
    const struct tbi_ops *o = m->be->ops;
    tbi_backend *be = m->be;
    const struct tb_params *r = &m->reg;
    int B = m->B_in, Dd = m->Dd, Nd = m->Nd, Nq = m->Nq;
    if (!B || !m->mask_set)
        return tbi_err(TB_EINVAL, "%s", !B ? "no input: tb_mae_set_video or _set_clips first"
                                           : "no masks: tb_mae_set_mask first");
    m->B_in = m->mask_set = m->fwd_done = 0;
    m->B = B;
    size_t Rq = (size_t)B * Nq;
    /* Encoder over the visible tokens. Target: the decoded tokens' patches, un-normalised and
     * normalised per tube. */
    TBI_TRY(tb_vit_run(m->enc, NULL, 0, NULL));
    TBI_TRY(o->gather_rows(be, m->gath, tbi_vit_patches(m->enc), m->q_tok, B, m->Np, Nq, m->V));
    TBI_TRY(o->patch_target(be, m->tgt, m->gath, (int)Rq, 3, m->PP, m->mean01, m->std01,
                            m->c.norm_target));
    /* Mapped to the decoder's width. */
    TBI_TRY(o->matmul_fwd(be, m->bc.dt, f32(m->xe), f32(tbi_vit_feat(m->enc)),
                          f32(tbi_param_data(r, m->i_e2d)), f32(NULL), B * m->Nv, m->De, Dd));
    /* [visible..., mask token...] + positions; the blocks; the decoded rows normed, head. */
    TBI_TRY(o->tokens_fill_fwd(be, m->x[0], m->xe, tbi_param_data(r, m->i_mask), m->sincos, m->idx,
                               B, m->Nv, Nq, Dd));
    TBI_TRY(tbi_plan_tick(&m->plan, m->tick_d)); /* plan.h: what dies there is poisoned */
    for (int l = 0; l < m->Ld; l++) {
        struct tbi_block_w w;
        block_w(m, l, &w, NULL);
        float *y = l + 1 < m->Ld ? m->x[l + 1] : m->dres;
        TBI_TRY(tbi_block_forward(be, &m->bc, &w, &m->ba[l], &m->s, NULL,
                                  m->x[l], y, B, Nd, 0));
        TBI_TRY(tbi_plan_tick(&m->plan, m->tick_d + 1 + l));
    }
    /* the last block's output is in dres (no backward reads it) */
    TBI_TRY(o->gather_rows(be, m->qx, m->dres, m->q_rows, B, Nd, Nq, Dd));
    TBI_TRY(o->layernorm_fwd(be, act(m, m->feat), m->feat_mean, m->feat_rstd, m->qx,
                             tbi_param_data(r, m->i_norm_w), tbi_param_data(r, m->i_norm_b),
                             (int)Rq, Dd, LN_EPS));
    /* The head; the loss. */
    tbi_t pred = act(m, m->pred);
    TBI_TRY(o->matmul_fwd(be, m->bc.dt, pred, act(m, m->feat), f32(tbi_param_data(r, m->i_head_w)),
                          f32(tbi_param_data(r, m->i_head_b)), (int)Rq, Dd, m->V));
    TBI_TRY(o->mse_fwd(be, m->loss, pred, m->tgt, m->w, (int)Rq, m->V));
    TBI_TRY(tbi_plan_tick(&m->plan, m->tick_d + 1 + m->Ld));
    m->fwd_done = 1;
    /* the host reads the loss only when asked (a training step takes it on the backend:
     * tbi_*_loss) */
    return loss ? o->to_host(be, loss, m->loss, sizeof(float)) : 0;
}

float *tbi_mae_loss(tb_mae *m)
{
    return m->loss;
}

int tb_mae_pred(tb_mae *m, float *host)
{
    size_t n = (size_t)m->B * m->Nq * m->V;
    if (!m->B)
        return tbi_err(TB_EINVAL, "no predictions: no forward since planning");
    if (m->bc.dt == TB_DTYPE_F32)
        return m->be->ops->to_host(m->be, host, m->pred, sizeof(float) * n);
    /* bf16: the values into host's second half, widened front to back (value i is read
     * before float i, which overlaps only values up to i, is written) */
    uint16_t *h = (uint16_t *)host + n;
    TBI_TRY(m->be->ops->to_host(m->be, h, m->pred, sizeof(uint16_t) * n));
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        memcpy(host + i, &u, sizeof(u));
    }
    return 0;
}

int tb_mae_backward(tb_mae *m)
{
    const struct tbi_ops *o = m->be->ops;
    tbi_backend *be = m->be;
    const struct tb_params *r = &m->reg;
    int B = m->B, Dd = m->Dd, Nd = m->Nd, Nq = m->Nq, Nv = m->Nv;
    size_t Rd = (size_t)B * Nd, Rq = (size_t)B * Nq;
    if (!m->fwd_done)
        return tbi_err(TB_EINVAL, "backward needs a forward since the last backward and input");
    m->fwd_done = 0;
    /* Loss -> head -> norm -> the decoded rows of the last block's output. */
    TBI_TRY(o->mse_bwd(be, m->dpred, act(m, m->pred), m->tgt, m->w, (int)Rq, m->V));
    TBI_TRY(o->matmul_bwd(be, m->bc.dt, act(m, m->dfeat), f32(tbi_param_grad(r, m->i_head_w)),
                          f32(tbi_param_grad(r, m->i_head_b)), f32(m->dpred), act(m, m->feat),
                          f32(tbi_param_data(r, m->i_head_w)), (int)Rq, Dd, m->V));
    TBI_TRY(o->zero(be, m->dq, sizeof(float) * Rq * Dd));
    TBI_TRY(o->layernorm_bwd(be, m->dq, tbi_param_grad(r, m->i_norm_w),
                             tbi_param_grad(r, m->i_norm_b), act(m, m->dfeat), m->qx,
                             tbi_param_data(r, m->i_norm_w), m->feat_mean, m->feat_rstd,
                             (int)Rq, Dd));
    TBI_TRY(tbi_span_done(r, m->reg.n_spans - 1)); /* the norm's and head's */
    TBI_TRY(o->zero(be, m->dres, sizeof(float) * Rd * Dd));
    TBI_TRY(o->scatter_rows(be, m->dres, m->dq, m->q_rows, B, Nd, Nq, Dd));
    TBI_TRY(tbi_plan_tick(&m->plan, m->tick_db));
    for (int l = m->Ld - 1; l >= 0; l--) {
        struct tbi_block_w w, g;
        block_w(m, l, &w, &g);
        TBI_TRY(tbi_block_backward(be, &m->bc, &w, &g, &m->ba[l], &m->s, NULL,
                                   m->x[l], m->dres, B, Nd, TBI_FROM_SET));
        TBI_TRY(tbi_span_done(r, m->span0 + 1 + l));
        TBI_TRY(tbi_plan_tick(&m->plan, m->tick_db + m->Ld - l));
    }
    /* Mask token; the mapping, into the encoder's feature gradient; the encoder. */
    float *dxe = m->dxe;
    TBI_TRY(o->tokens_fill_bwd(be, dxe, tbi_param_grad(r, m->i_mask), m->dres, B, Nv, Nq, Dd));
    TBI_TRY(o->matmul_bwd(be, m->bc.dt, f32(tbi_vit_dfeat(m->enc)),
                          f32(tbi_param_grad(r, m->i_e2d)), f32(NULL), f32(dxe),
                          f32(tbi_vit_feat(m->enc)), f32(tbi_param_data(r, m->i_e2d)), B * Nv,
                          m->De, Dd));
    TBI_TRY(tbi_span_done(r, m->span0)); /* the mapping's and mask token's */
    TBI_TRY(tbi_plan_tick(&m->plan, m->tick_db + m->Ld + 1));
    return tbi_vit_backward_dev(m->enc);
}
