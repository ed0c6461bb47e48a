/* src/model/vit.c - the video ViT (contract in model.h): parameters in one block with timm's
 * names, activations planned from the batch size, forward and backward written out layer by
 * layer through the backend op table. LayerNorm's backward adds into its input's gradient, so
 * the residual stream's gradient simply collects what each block adds; every other gradient
 * is written. Not here: the optimizer and the training loop (src/train). Tests:
 * tests/test_vit.c. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "tensor/ops.h"
#include "tubelet/model.h"
#include "tubelet/rng.h"

#define LN_EPS 1e-6f
#define MLP_RATIO 4
_Static_assert(MLP_RATIO >= 3, "qkv's gradient (3 D wide) shares the space of fc1's (MLP_RATIO D)");

/* Per-block parameter and activation pointers. */
struct block_params {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    float *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
};

struct block_acts {
    float *ln1_mean, *ln1_rstd;       /* (B*Nt): the normalised rows are recomputed */
    float *qkv;                       /* (B*Nt, 3D) */
    float *att;                       /* (B*Nt, D) attention output, before proj */
    float *lse;                       /* (B, NH, Nt) */
    float *res1;                      /* (B*Nt, D) x + proj(att) */
    float *ln2_mean, *ln2_rstd;
    float *fc1;                       /* (B*Nt, F) before GELU; the backward turns it into
                                       * GELU(fc1) in place once it has GELU's derivative.
                                       * m->fc1x for blocks that recompute it */
    size_t floats;                    /* the set's space, from ln1_mean on */
};

struct tb_vit {
    struct tb_vit_config c;
    const struct tbi_ops *ops;
    int D, F, NH, HS, Np, Nt, K, patch_len; /* patch_len = 3 * TU * P * P */
    int has_cls;

    struct tb_param *params;
    int n_params, cap_params;
    float *block;
    int64_t n_floats;
    /* Gradients, as L + 2 spans of consecutive parameters: the token embedding's (0), block
     * l's (1 + l), the final norm's and head's (L + 1). span_off[i] is span i's offset in the
     * parameter block (span_off[L + 2] = n_floats). Block l's gradients are written when its
     * backward runs, after block l + 1's activations are dead: they live there (and the token
     * embedding's in block 0's), and only what finds no such space gets grad_own. */
    int64_t *span_off;
    float **span;
    float *grad_own;
    /* named views into the block */
    float *patch_w, *patch_b, *cls, *pos, *norm_w, *norm_b, *head_w, *head_b;
    struct block_params *bp;
    float *sincos;                    /* (Nt, D) fixed positions, when pos = sincos */

    /* activations, for up to B_plan clips */
    int B_plan, B;
    float *acts;
    float *cols;                      /* (B*Np, patch_len) */
    float *patch_out;                 /* (B*Np, D), in dF's space (forward only) */
    float *x;                         /* (L+1, B*Nt, D): block inputs, then the final output */
    struct block_acts *ba;            /* L of them, or 1 shared when recomputing */
    float *gelu;                      /* (B*Nt, F) forward scratch: GELU(fc1) of the current
                                       * block, in dF's space (backward only) */
    float *fc1x;                      /* (B*Nt, F) fc1 of the blocks below recompute_mlp: in
                                       * the top block's space, after the gradients it hosts
                                       * (free in their forward and backward), or its own */
    float *ln;                        /* (B*Nt, D) scratch: a LayerNorm output of that block */
    float *pooled, *pooled_n, *pool_mean, *pool_rstd; /* (B, D), (B, D), (B), (B) */
    float *logits, *probs, *dlogits;  /* (B, K) */
    int64_t *labels;                  /* (B) */
    float smoothing;
    int have_labels;
    /* backward scratch; d3D (qkv's gradient) shares dF's space (never live together) */
    float *dres, *dD, *d3D, *dF, *dpool, *dpool_n;
};

static int add_param(tb_vit *m, const char *name, int decay, int n_dims, int64_t d0, int64_t d1,
                     int64_t d2, int64_t d3, int64_t d4)
{
    if (m->n_params == m->cap_params) {
        int cap = m->cap_params ? 2 * m->cap_params : 64;
        struct tb_param *g = realloc(m->params, sizeof(*g) * (size_t)cap);
        if (!g)
            return TB_ENOMEM;
        m->params = g;
        m->cap_params = cap;
    }
    struct tb_param *p = &m->params[m->n_params++];
    memset(p, 0, sizeof(*p));
    if (!(p->name = strdup(name)))
        return TB_ENOMEM;
    int64_t dims[5] = {d0, d1, d2, d3, d4};
    p->n_dims = n_dims;
    p->n = 1;
    for (int i = 0; i < n_dims; i++) {
        p->shape[i] = dims[i];
        p->n *= dims[i];
    }
    p->decay = decay;
    /* data/grad offsets are filled once the block exists; keep the running offset in data. */
    p->data = (float *)(intptr_t)m->n_floats;
    m->n_floats += p->n;
    return 0;
}

#define ADD(name, decay, nd, a, b, c, d, e)                                                     \
    do {                                                                                       \
        if ((rc = add_param(m, name, decay, nd, a, b, c, d, e)) < 0)                           \
            goto fail;                                                                         \
    } while (0)

static float *param_ptr(tb_vit *m, const char *name)
{
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name))
            return m->params[i].data;
    return NULL;
}

int tb_vit_open(tb_vit **out, const struct tb_vit_config *c)
{
    *out = NULL;
    if (c->dim < 1 || c->depth < 1 || c->heads < 1 || c->dim % c->heads || c->patch < 1 ||
        c->tubelet < 1 || c->frames < c->tubelet || c->frames % c->tubelet ||
        c->height % c->patch || c->width % c->patch || c->height < c->patch ||
        c->width < c->patch || c->classes < 1)
        return tbi_err(TB_EINVAL, "bad ViT config: width %d, depth %d, heads %d, patch %d, "
                       "tubelet %d, clips %dx%dx%d, %d classes (frames must divide by the "
                       "tubelet, height and width by the patch, width by the heads)", c->dim,
                       c->depth, c->heads, c->patch, c->tubelet, c->frames, c->height, c->width,
                       c->classes);
    if (c->recompute_mlp < 0 || c->recompute_mlp >= c->depth || (c->recompute && c->recompute_mlp))
        return tbi_err(TB_EINVAL, "recomputing the MLP of %d blocks: it must be fewer than the "
                       "depth (%d), and not with whole blocks recomputed", c->recompute_mlp,
                       c->depth);
    tb_vit *m = calloc(1, sizeof(*m));
    if (!m)
        return tbi_err(TB_ENOMEM, "out of memory");
    int rc = 0;
    m->c = *c;
    m->ops = &tbi_ops_cpu;
    m->D = c->dim;
    m->F = MLP_RATIO * c->dim;
    m->NH = c->heads;
    m->HS = c->dim / c->heads;
    m->Np = (c->frames / c->tubelet) * (c->height / c->patch) * (c->width / c->patch);
    m->has_cls = c->pool == TB_POOL_CLS;
    m->Nt = m->Np + m->has_cls;
    m->K = c->classes;
    m->patch_len = 3 * c->tubelet * c->patch * c->patch;
    int D = m->D, F = m->F;

    ADD("patch_embed.proj.weight", 1, 5, D, 3, c->tubelet, c->patch, c->patch);
    ADD("patch_embed.proj.bias", 0, 1, D, 0, 0, 0, 0);
    if (m->has_cls)
        ADD("cls_token", 0, 3, 1, 1, D, 0, 0);
    if (c->pos == TB_POS_LEARNED)
        ADD("pos_embed", 0, 3, 1, m->Nt, D, 0, 0);
    for (int l = 0; l < c->depth; l++) {
        char n[96];
#define B_ADD(suffix, decay, nd, a, b)                                                         \
    do {                                                                                       \
        snprintf(n, sizeof(n), "blocks.%d.%s", l, suffix);                                     \
        ADD(n, decay, nd, a, b, 0, 0, 0);                                                      \
    } while (0)
        B_ADD("norm1.weight", 0, 1, D, 0);
        B_ADD("norm1.bias", 0, 1, D, 0);
        B_ADD("attn.qkv.weight", 1, 2, 3 * D, D);
        B_ADD("attn.qkv.bias", 0, 1, 3 * D, 0);
        B_ADD("attn.proj.weight", 1, 2, D, D);
        B_ADD("attn.proj.bias", 0, 1, D, 0);
        B_ADD("norm2.weight", 0, 1, D, 0);
        B_ADD("norm2.bias", 0, 1, D, 0);
        B_ADD("mlp.fc1.weight", 1, 2, F, D);
        B_ADD("mlp.fc1.bias", 0, 1, F, 0);
        B_ADD("mlp.fc2.weight", 1, 2, D, F);
        B_ADD("mlp.fc2.bias", 0, 1, D, 0);
#undef B_ADD
    }
    const char *norm = m->has_cls ? "norm" : "fc_norm";
    char n[64];
    snprintf(n, sizeof(n), "%s.weight", norm);
    ADD(n, 0, 1, D, 0, 0, 0, 0);
    snprintf(n, sizeof(n), "%s.bias", norm);
    ADD(n, 0, 1, D, 0, 0, 0, 0);
    ADD("head.weight", 1, 2, m->K, D, 0, 0, 0);
    ADD("head.bias", 0, 1, m->K, 0, 0, 0, 0);

    m->block = tbi_calloc_big((size_t)m->n_floats, sizeof(float));
    m->bp = calloc((size_t)c->depth, sizeof(*m->bp));
    m->ba = calloc((size_t)c->depth, sizeof(*m->ba));
    m->span_off = calloc((size_t)c->depth + 3, sizeof(*m->span_off));
    m->span = calloc((size_t)c->depth + 2, sizeof(*m->span));
    if (!m->block || !m->bp || !m->ba || !m->span_off || !m->span) {
        rc = TB_ENOMEM;
        goto fail;
    }
    for (int i = 0; i < m->n_params; i++)
        m->params[i].data = m->block + (intptr_t)m->params[i].data;
    m->patch_w = param_ptr(m, "patch_embed.proj.weight");
    m->patch_b = param_ptr(m, "patch_embed.proj.bias");
    m->cls = param_ptr(m, "cls_token");
    m->pos = param_ptr(m, "pos_embed");
    snprintf(n, sizeof(n), "%s.weight", norm);
    m->norm_w = param_ptr(m, n);
    snprintf(n, sizeof(n), "%s.bias", norm);
    m->norm_b = param_ptr(m, n);
    m->head_w = param_ptr(m, "head.weight");
    m->head_b = param_ptr(m, "head.bias");
    for (int l = 0; l < c->depth; l++) {
        char nm[96];
#define P(field, suffix)                                                                       \
    snprintf(nm, sizeof(nm), "blocks.%d.%s", l, suffix);                                       \
    m->bp[l].field = param_ptr(m, nm)
        P(ln1_w, "norm1.weight");
        P(ln1_b, "norm1.bias");
        P(qkv_w, "attn.qkv.weight");
        P(qkv_b, "attn.qkv.bias");
        P(proj_w, "attn.proj.weight");
        P(proj_b, "attn.proj.bias");
        P(ln2_w, "norm2.weight");
        P(ln2_b, "norm2.bias");
        P(fc1_w, "mlp.fc1.weight");
        P(fc1_b, "mlp.fc1.bias");
        P(fc2_w, "mlp.fc2.weight");
        P(fc2_b, "mlp.fc2.bias");
#undef P
        m->span_off[1 + l] = m->bp[l].ln1_w - m->block;
    }
    m->span_off[c->depth + 1] = m->norm_w - m->block;
    m->span_off[c->depth + 2] = m->n_floats;
    if (c->pos == TB_POS_SINCOS) {
        /* VideoMAE's get_sinusoid_encoding_table: angle = p / 10000^(2 (j / 2) / D), sine on
         * even j, cosine on odd j; one row per token (the class token is position 0). */
        if (!(m->sincos = malloc(sizeof(float) * (size_t)m->Nt * D))) {
            rc = TB_ENOMEM;
            goto fail;
        }
        for (int p = 0; p < m->Nt; p++)
            for (int j = 0; j < D; j++) {
                double angle = p / pow(10000.0, 2.0 * (j / 2) / D);
                m->sincos[(size_t)p * D + j] = (float)(j % 2 ? cos(angle) : sin(angle));
            }
    }
    *out = m;
    return 0;
fail:
    tb_vit_close(&m);
    return tbi_err(rc, "out of memory for the model");
}
#undef ADD

void tb_vit_close(tb_vit **pm)
{
    if (!pm || !*pm)
        return;
    tb_vit *m = *pm;
    for (int i = 0; i < m->n_params; i++)
        free((char *)m->params[i].name);
    free(m->params);
    free(m->block);
    free(m->span_off);
    free(m->span);
    free(m->grad_own);
    free(m->bp);
    free(m->ba);
    free(m->sincos);
    free(m->acts);
    free(m->labels);
    free(m);
    *pm = NULL;
}

const struct tb_vit_config *tb_vit_config(const tb_vit *m)
{
    return &m->c;
}

int tb_vit_n_params(const tb_vit *m)
{
    return m->n_params;
}

const struct tb_param *tb_vit_param(const tb_vit *m, int i)
{
    return i >= 0 && i < m->n_params ? &m->params[i] : NULL;
}

int64_t tb_vit_n_floats(const tb_vit *m)
{
    return m->n_floats;
}

float *tb_vit_params(tb_vit *m)
{
    return m->block;
}

int tb_vit_n_grad_spans(const tb_vit *m)
{
    return m->c.depth + 2;
}

float *tb_vit_grad_span(tb_vit *m, int i, int64_t *n)
{
    if (i < 0 || i >= m->c.depth + 2 || !m->B_plan) {
        *n = 0;
        return NULL;
    }
    *n = m->span_off[i + 1] - m->span_off[i];
    return m->span[i];
}

/* Truncated normal on [-2 std, 2 std], as timm's trunc_normal_(std=.02) for ViTs. */
static float trunc_normal(tb_rng *r, float std)
{
    for (;;) {
        double x = tb_rng_normal(r);
        if (x >= -2 && x <= 2)
            return (float)(x * std);
    }
}

void tb_vit_init(tb_vit *m, uint64_t seed)
{
    tb_rng r;
    tb_rng_init(&r, seed, 0x5eed);
    for (int i = 0; i < m->n_params; i++) {
        struct tb_param *p = &m->params[i];
        size_t len = strlen(p->name);
        int is_norm_w = strstr(p->name, "norm") && len > 7 && !strcmp(p->name + len - 7, ".weight");
        for (int64_t k = 0; k < p->n; k++) {
            if (is_norm_w)
                p->data[k] = 1.0f;
            else if (p->decay || !strcmp(p->name, "pos_embed") || !strcmp(p->name, "cls_token"))
                p->data[k] = trunc_normal(&r, 0.02f);
            else
                p->data[k] = 0.0f;
        }
    }
}

int tb_vit_load(tb_vit *m, const struct tb_st_file *f)
{
    for (int i = 0; i < m->n_params; i++) {
        struct tb_param *p = &m->params[i];
        const struct tb_st_tensor *t = tb_st_find(f, p->name);
        if (!t)
            return tbi_err(TB_EFORMAT, "tensor '%s' is missing", p->name);
        int same = t->dtype == TB_ST_F32 && t->n_dims == p->n_dims;
        for (int d = 0; same && d < p->n_dims; d++)
            same = t->shape[d] == p->shape[d];
        if (!same) {
            char want[96] = "", got[96] = "";
            for (int d = 0; d < p->n_dims; d++)
                snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%lld",
                         d ? "," : "", (long long)p->shape[d]);
            for (int d = 0; d < t->n_dims; d++)
                snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%lld", d ? "," : "",
                         (long long)t->shape[d]);
            return tbi_err(TB_EFORMAT, "tensor '%s' has shape (%s), the model needs (%s)",
                           p->name, got, want);
        }
        memcpy(p->data, t->data, sizeof(float) * (size_t)p->n);
    }
    return 0;
}

/* ---- activations ------------------------------------------------------------------------ */

/* The gradient of the parameter at ptr. */
static float *grad_of(const tb_vit *m, const float *ptr)
{
    int64_t off = ptr - m->block;
    int s = 0;
    while (off >= m->span_off[s + 1])
        s++;
    return m->span[s] + (off - m->span_off[s]);
}

/* Whether a gradient span of len floats goes into a block's saved activations of `floats`:
 * when they are that block's own (not one set shared by recomputed blocks) and large enough. */
static int span_hosted(const tb_vit *m, int64_t len, size_t floats)
{
    return !m->c.recompute && (size_t)len <= floats;
}

/* Give each gradient span a home (see span_off): block l's in the activations of block l + 1,
 * the token embedding's in block 0's, where span_hosted; the rest in one allocation of their
 * own. Then every parameter's grad pointer. */
static int place_grads(tb_vit *m)
{
    int L = m->c.depth, n_span = L + 2;
    int64_t own = 0;
    for (int pass = 0; pass < 2; pass++) {
        own = 0;
        for (int i = 0; i < n_span; i++) {
            int64_t len = m->span_off[i + 1] - m->span_off[i];
            int host = i == 0 ? 0 : i < L ? i : -1; /* the block whose space is free by then */
            if (host >= 0 && span_hosted(m, len, m->ba[host].floats))
                m->span[i] = m->ba[host].ln1_mean;
            else {
                m->span[i] = pass ? m->grad_own + own : NULL;
                own += len;
            }
        }
        if (pass == 0) {
            free(m->grad_own);
            if (!(m->grad_own = tbi_alloc_big(sizeof(float) * (size_t)own)))
                return TB_ENOMEM;
        }
    }
    for (int i = 0; i < m->n_params; i++)
        m->params[i].grad = grad_of(m, m->params[i].data);
    return 0;
}

int64_t tb_vit_plan(tb_vit *m, int B)
{
    int D = m->D, F = m->F, L = m->c.depth, K = m->K;
    size_t T = (size_t)B * m->Nt, P = (size_t)B * m->Np, n = 0;
    /* Count, then carve one allocation. */
    size_t per_block = T * D * 2 + T * 3 * D + T * 4 + (size_t)B * m->NH * m->Nt; /* + fc1 */
    int n_acts = m->c.recompute ? 1 : L, K_mlp = m->c.recompute_mlp;
    n += P * m->patch_len + (L + 1) * T * D + n_acts * per_block + (n_acts - K_mlp) * T * F;
    n += T * D;
    /* fc1x: after block L - 2's gradients in block L - 1's space when it fits there. */
    int64_t g_top = m->span_off[L] - m->span_off[L - 1];
    size_t top = per_block + T * F, g_off = span_hosted(m, g_top, top) ? (size_t)g_top : 0;
    int fc1x_own = K_mlp > 0 && top - g_off < T * F;
    n += fc1x_own ? T * F : 0;
    n += (size_t)B * D * 2 + (size_t)B * 2 + (size_t)B * K * 3;
    n += T * D * 2 + T * F + (size_t)B * D * 2;                                  /* backward */
    free(m->acts);
    free(m->labels);
    m->acts = tbi_alloc_big(sizeof(float) * n);
    m->labels = malloc(sizeof(*m->labels) * (size_t)B);
    if (!m->acts || !m->labels) {
        m->B_plan = 0;
        return tbi_err(TB_ENOMEM, "out of memory for activations of %d clips (%zu MB)", B,
                       n * 4 >> 20);
    }
    float *p = m->acts;
#define TAKE(ptr, count)                                                                       \
    do {                                                                                       \
        ptr = p;                                                                               \
        p += (count);                                                                          \
    } while (0)
    TAKE(m->cols, P * m->patch_len);
    TAKE(m->x, (L + 1) * T * D);
    TAKE(m->ln, T * D);
    if (fc1x_own)
        TAKE(m->fc1x, T * F);
    for (int l = 0; l < n_acts; l++) {
        struct block_acts *a = &m->ba[l];
        a->floats = per_block + (l < K_mlp ? 0 : T * F);
        TAKE(a->ln1_mean, T);
        TAKE(a->ln1_rstd, T);
        TAKE(a->qkv, T * 3 * D);
        TAKE(a->att, T * D);
        TAKE(a->lse, (size_t)B * m->NH * m->Nt);
        TAKE(a->res1, T * D);
        TAKE(a->ln2_mean, T);
        TAKE(a->ln2_rstd, T);
        if (l < K_mlp)
            a->fc1 = NULL; /* set below */
        else
            TAKE(a->fc1, T * F);
    }
    if (K_mlp > 0 && !fc1x_own)
        m->fc1x = m->ba[L - 1].ln1_mean + g_off;
    for (int l = 0; l < K_mlp; l++)
        m->ba[l].fc1 = m->fc1x;
    TAKE(m->pooled, (size_t)B * D);
    TAKE(m->pooled_n, (size_t)B * D);
    TAKE(m->pool_mean, B);
    TAKE(m->pool_rstd, B);
    TAKE(m->logits, (size_t)B * K);
    TAKE(m->probs, (size_t)B * K);
    TAKE(m->dlogits, (size_t)B * K);
    TAKE(m->dres, T * D);
    TAKE(m->dD, T * D);
    TAKE(m->dF, T * F);
    m->d3D = m->dF; /* F >= 3 D */
    m->gelu = m->dF;
    m->patch_out = m->dF; /* P <= T */
    TAKE(m->dpool, (size_t)B * D);
    TAKE(m->dpool_n, (size_t)B * D);
#undef TAKE
    TB_ASSERT((size_t)(p - m->acts) <= n);
    if (place_grads(m) < 0) {
        m->B_plan = 0;
        return tbi_err(TB_ENOMEM, "out of memory for the gradients");
    }
    m->B_plan = B;
    return (int64_t)(n * sizeof(float));
}

/* ---- forward ----------------------------------------------------------------------------- */

/* The activations block l saves for its backward (one shared set when recomputing). */
static struct block_acts *acts_of(tb_vit *m, int l)
{
    return &m->ba[m->c.recompute ? 0 : l];
}

/* Block l: x[l] -> x[l + 1], saving what its backward needs; for_backward (recomputing):
 * only that, up to fc1 (the backward computes GELU(fc1) itself; fc2 and the output are not
 * needed). */
static void block_forward(tb_vit *m, int l, int for_backward)
{
    const struct tbi_ops *o = m->ops;
    const struct block_params *w = &m->bp[l];
    struct block_acts *a = acts_of(m, l);
    int D = m->D, F = m->F, R = m->B * m->Nt;
    const float *x = m->x + (size_t)l * R * D;
    float *y = m->x + (size_t)(l + 1) * R * D;
    /* x + proj(attention(qkv(norm1(x)))) */
    o->layernorm_fwd(m->ln, a->ln1_mean, a->ln1_rstd, x, w->ln1_w, w->ln1_b, R, D, LN_EPS);
    o->matmul_fwd(a->qkv, m->ln, w->qkv_w, w->qkv_b, R, D, 3 * D);
    o->attention_fwd(a->att, a->lse, a->qkv, m->B, m->Nt, m->NH, m->HS);
    o->matmul_fwd(a->res1, a->att, w->proj_w, w->proj_b, R, D, D);
    o->add_fwd(a->res1, a->res1, x, (size_t)R * D);
    /* res1 + fc2(gelu(fc1(norm2(res1)))) */
    o->layernorm_fwd(m->ln, a->ln2_mean, a->ln2_rstd, a->res1, w->ln2_w, w->ln2_b, R, D, LN_EPS);
    o->matmul_fwd(a->fc1, m->ln, w->fc1_w, w->fc1_b, R, D, F);
    if (for_backward)
        return;
    o->gelu_fwd(m->gelu, a->fc1, (size_t)R * F);
    o->matmul_fwd(y, m->gelu, w->fc2_w, w->fc2_b, R, F, D);
    o->add_fwd(y, y, a->res1, (size_t)R * D);
}

int tb_vit_forward(tb_vit *m, const float *video, int B, const int64_t *labels, float smoothing,
                   float *loss)
{
    const struct tbi_ops *o = m->ops;
    const struct tb_vit_config *c = &m->c;
    int D = m->D, Nt = m->Nt, Np = m->Np, L = c->depth;
    if (B < 1 || B > m->B_plan)
        return tbi_err(TB_EINVAL, "batch of %d clips, but activations are planned for %d", B,
                       m->B_plan);
    m->B = B;
    int R = B * Nt; /* token rows */

    /* Tubelet patches -> tokens (B, Np, D), plus class token and positions -> x0 (B, Nt, D). */
    o->patchify(m->cols, video, B, 3, c->frames, c->height, c->width, c->tubelet, c->patch);
    o->matmul_fwd(m->patch_out, m->cols, m->patch_w, m->patch_b, B * Np, m->patch_len, D);
    const float *pos = c->pos == TB_POS_LEARNED ? m->pos : m->sincos;
    float *x0 = m->x;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Nt; t++) {
            float *dst = x0 + ((size_t)b * Nt + t) * D;
            const float *src = m->has_cls && t == 0
                                   ? m->cls
                                   : m->patch_out + ((size_t)b * Np + t - m->has_cls) * D;
            const float *pe = pos + (size_t)t * D;
            for (int d = 0; d < D; d++)
                dst[d] = src[d] + pe[d];
        }

    for (int l = 0; l < L; l++)
        block_forward(m, l, 0);

    /* Pooling: the class token, or the mean of all tokens; then its norm and the head. */
    const float *xl = m->x + (size_t)L * R * D;
    for (int b = 0; b < B; b++) {
        float *pb = m->pooled + (size_t)b * D;
        if (m->has_cls) {
            memcpy(pb, xl + (size_t)b * Nt * D, sizeof(float) * (size_t)D);
            continue;
        }
        for (int d = 0; d < D; d++)
            pb[d] = 0;
        for (int t = 0; t < Nt; t++) {
            const float *row = xl + ((size_t)b * Nt + t) * D;
            for (int d = 0; d < D; d++)
                pb[d] += row[d];
        }
        for (int d = 0; d < D; d++)
            pb[d] /= (float)Nt;
    }
    o->layernorm_fwd(m->pooled_n, m->pool_mean, m->pool_rstd, m->pooled, m->norm_w, m->norm_b,
                     B, D, LN_EPS);
    o->matmul_fwd(m->logits, m->pooled_n, m->head_w, m->head_b, B, D, m->K);

    m->have_labels = labels != NULL;
    if (labels) {
        for (int b = 0; b < B; b++) {
            if (labels[b] < 0 || labels[b] >= m->K)
                return tbi_err(TB_ERANGE, "label %lld of clip %d is not a class of %d",
                               (long long)labels[b], b, m->K);
            m->labels[b] = labels[b];
        }
        m->smoothing = smoothing;
        float l_val = o->xent_fwd(m->probs, m->logits, m->labels, B, m->K, smoothing);
        if (loss)
            *loss = l_val;
    }
    return 0;
}

const float *tb_vit_logits(const tb_vit *m)
{
    return m->logits;
}

/* ---- backward ---------------------------------------------------------------------------- */

/* The gradient of a parameter, at the same offset in the gradient block. */
#define G(ptr) grad_of(m, ptr)

int tb_vit_backward(tb_vit *m)
{
    const struct tbi_ops *o = m->ops;
    const struct tb_vit_config *c = &m->c;
    int B = m->B, D = m->D, F = m->F, Nt = m->Nt, Np = m->Np, L = c->depth, R = B * Nt;
    if (!m->have_labels)
        return tbi_err(TB_EINVAL, "backward needs a forward with labels since the last backward");
    /* Every gradient below is written, not added: the block needs no clearing (88 MB for
     * ViT-S, 344 MB for ViT-B). */

    /* Loss -> logits -> head -> norm -> pooling -> the last residual stream. */
    o->xent_bwd(m->dlogits, m->probs, m->labels, B, m->K, m->smoothing);
    o->matmul_bwd(m->dpool_n, G(m->head_w), G(m->head_b), m->dlogits, m->pooled_n, m->head_w, B,
                  D, m->K);
    memset(m->dpool, 0, sizeof(float) * (size_t)B * D);
    o->layernorm_bwd(m->dpool, G(m->norm_w), G(m->norm_b), m->dpool_n, m->pooled, m->norm_w,
                     m->pool_mean, m->pool_rstd, B, D);
    memset(m->dres, 0, sizeof(float) * (size_t)R * D);
    for (int b = 0; b < B; b++) {
        const float *g = m->dpool + (size_t)b * D;
        if (m->has_cls) {
            memcpy(m->dres + (size_t)b * Nt * D, g, sizeof(float) * (size_t)D);
            continue;
        }
        float inv = 1.0f / (float)Nt;
        for (int t = 0; t < Nt; t++) {
            float *row = m->dres + ((size_t)b * Nt + t) * D;
            for (int d = 0; d < D; d++)
                row[d] = g[d] * inv;
        }
    }

    /* Blocks in reverse; dres holds the gradient of the block's output and, after it, of its
     * input (the residual connections add the branch gradients into it). */
    for (int l = L - 1; l >= 0; l--) {
        const struct block_params *w = &m->bp[l];
        const struct block_acts *a = acts_of(m, l);
        const float *x = m->x + (size_t)l * R * D;
        /* The block's activations again when recomputing (all of them, or fc1's output). The
         * LayerNorm outputs are not kept (two rows of D per token and block): recomputed from
         * the block's input and its saved statistics, to the bit. */
        if (c->recompute)
            block_forward(m, l, 1);
        o->layernorm_fwd(m->ln, a->ln2_mean, a->ln2_rstd, a->res1, w->ln2_w, w->ln2_b, R, D,
                         LN_EPS);
        if (l < c->recompute_mlp)
            o->matmul_fwd(a->fc1, m->ln, w->fc1_w, w->fc1_b, R, D, F);
        /* MLP branch: y = res1 + fc2(gelu(fc1(ln2))). fc2's input gradient first: the GELU
         * backward then also gives GELU(fc1) again, in place of fc1 (not needed after it),
         * for fc2's weight gradient: one pass instead of two, and no buffer of its own. */
        o->matmul_bwd(m->dF, NULL, NULL, m->dres, a->fc1, w->fc2_w, R, F, D);
        o->gelu_bwd(m->dF, a->fc1, a->fc1, m->dF, (size_t)R * F);
        o->matmul_bwd(NULL, G(w->fc2_w), G(w->fc2_b), m->dres, a->fc1, w->fc2_w, R, F, D);
        o->matmul_bwd(m->dD, G(w->fc1_w), G(w->fc1_b), m->dF, m->ln, w->fc1_w, R, D, F);
        o->layernorm_bwd(m->dres, G(w->ln2_w), G(w->ln2_b), m->dD, a->res1, w->ln2_w,
                         a->ln2_mean, a->ln2_rstd, R, D);
        /* Attention branch: res1 = x + proj(attention(qkv(ln1))) */
        o->matmul_bwd(m->dD, G(w->proj_w), G(w->proj_b), m->dres, a->att, w->proj_w, R, D, D);
        o->attention_bwd(m->d3D, m->dD, a->qkv, a->att, a->lse, B, Nt, m->NH, m->HS);
        o->layernorm_fwd(m->ln, a->ln1_mean, a->ln1_rstd, x, w->ln1_w, w->ln1_b, R, D, LN_EPS);
        o->matmul_bwd(m->dD, G(w->qkv_w), G(w->qkv_b), m->d3D, m->ln, w->qkv_w, R, D, 3 * D);
        o->layernorm_bwd(m->dres, G(w->ln1_w), G(w->ln1_b), m->dD, x, w->ln1_w, a->ln1_mean,
                         a->ln1_rstd, R, D);
    }

    /* Tokens: positions, class token, patch embedding (the video needs no gradient). */
    if (c->pos == TB_POS_LEARNED) {
        float *gp = G(m->pos);
        memset(gp, 0, sizeof(float) * (size_t)Nt * D);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Nt; t++) {
                const float *row = m->dres + ((size_t)b * Nt + t) * D;
                for (int d = 0; d < D; d++)
                    gp[(size_t)t * D + d] += row[d];
            }
    }
    if (m->has_cls) {
        float *gc = G(m->cls);
        memset(gc, 0, sizeof(float) * (size_t)D);
        for (int b = 0; b < B; b++)
            for (int d = 0; d < D; d++)
                gc[d] += m->dres[(size_t)b * Nt * D + d];
    }
    /* The patch rows of dres, gathered contiguous (B*Np, D) for the weight gradient. */
    float *dpatch = m->dD;
    for (int b = 0; b < B; b++)
        memcpy(dpatch + (size_t)b * Np * D, m->dres + ((size_t)b * Nt + m->has_cls) * D,
               sizeof(float) * (size_t)Np * D);
    o->matmul_bwd(NULL, G(m->patch_w), G(m->patch_b), dpatch, m->cols, m->patch_w, B * Np,
                  m->patch_len, D);
    /* The gradients now fill activation space of this forward: a second backward would read
     * them as activations. */
    m->have_labels = 0;
    return 0;
}
#undef G
