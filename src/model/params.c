/* src/model/params.c - the parameter registry (params.h, model.h): the table, the block on
 * the backend, initialisation and loading through host staging, and gradient spans. Not
 * here: where a model puts its gradient spans (the model decides). Tests: tests/test_vit.c. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "model/params.h"
#include "tubelet/rng.h"

int tbi_params_span(struct tb_params *r)
{
    if (r->n_spans + 1 >= r->cap_spans) {
        int cap = r->cap_spans ? 2 * r->cap_spans : 16;
        int *first = tbi_realloc(r->first, sizeof(*first) * (size_t)cap);
        if (first)
            r->first = first;
        int64_t *off = tbi_realloc(r->off, sizeof(*off) * (size_t)cap);
        if (off)
            r->off = off;
        float **home = tbi_realloc(r->home, sizeof(*home) * (size_t)cap);
        if (home)
            r->home = home;
        if (!first || !off || !home)
            return tbi_err(TB_ENOMEM, "out of memory for the parameter table");
        r->cap_spans = cap;
    }
    r->first[r->n_spans] = r->n;
    r->off[r->n_spans] = r->n_floats;
    r->home[r->n_spans] = NULL;
    r->n_spans++;
    r->first[r->n_spans] = r->n;
    r->off[r->n_spans] = r->n_floats;
    return 0;
}

/* Weight decay by name and rank, one rule for every model: AVION's (main_lavila_pretrain.py,
 * main_lavila_finetune_cls.py / _mir.py, main_videomae_pretrain.py) spares tensors of fewer
 * than 2 dimensions and every name containing "bias", "ln", "bn", "pos_embed" or
 * "positional_embedding"; its VideoMAE fine-tuning (main_videomae_finetune.py) spares the
 * model's no_weight_decay() set, pos_embed and cls_token, which only adds cls_token. So
 * VideoMAE's mask token (1, 1, D) is decayed, as AVION's pretraining does (VideoMAE's own
 * run_mae_pretraining.py spares it). */
static int decays(const char *name, int n_dims)
{
    static const char *const spared[] = {"bias", "ln", "bn", "pos_embed", "positional_embedding"};
    if (n_dims < 2)
        return 0;
    for (size_t i = 0; i < sizeof(spared) / sizeof(spared[0]); i++)
        if (strstr(name, spared[i]))
            return 0;
    const char *last = strrchr(name, '.');
    return strcmp(last ? last + 1 : name, "cls_token") != 0;
}

int tbi_params_add(struct tb_params *r, const char *prefix, const char *name, enum tb_init init,
                   int n_dims, const int64_t *shape)
{
    TB_ASSERT(r->n_spans > 0 && n_dims >= 0 && n_dims <= 5);
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        struct tb_param *p = tbi_realloc(r->p, sizeof(*p) * (size_t)cap);
        if (!p)
            return tbi_err(TB_ENOMEM, "out of memory for the parameter table");
        r->p = p;
        r->cap = cap;
    }
    struct tb_param *p = &r->p[r->n];
    memset(p, 0, sizeof(*p));
    size_t len = strlen(prefix) + strlen(name) + 1;
    char *full = tbi_malloc(len);
    if (!full)
        return tbi_err(TB_ENOMEM, "out of memory for the parameter table");
    snprintf(full, len, "%s%s", prefix, name);
    p->name = full;
    p->n_dims = n_dims;
    p->n = 1;
    for (int i = 0; i < n_dims; i++) {
        p->shape[i] = shape[i];
        p->n *= shape[i];
    }
    p->offset = r->n_floats;
    p->decay = decays(full, n_dims);
    p->init = init;
    p->init_std = 0.02f;
    p->lr_scale = 1;
    r->n_floats += p->n;
    r->n++;
    r->first[r->n_spans] = r->n;
    r->off[r->n_spans] = r->n_floats;
    return r->n - 1;
}

int tbi_params_alloc(struct tb_params *r)
{
    int rc = r->be->ops->alloc(r->be, sizeof(float) * (size_t)r->n_floats, (void **)&r->data);
    return rc < 0 ? tbi_err_prefix(rc, "the parameters (%lld floats)", (long long)r->n_floats)
                  : 0;
}

void tbi_params_free(struct tb_params *r)
{
    for (int i = 0; i < r->n; i++)
        free((char *)r->p[i].name);
    free(r->p);
    if (r->data)
        r->be->ops->free(r->be, r->data);
    free(r->first);
    free(r->off);
    free(r->home);
    memset(r, 0, sizeof(*r));
}

float *tbi_param_grad(const struct tb_params *r, int i)
{
    int s = 0;
    while (r->first[s + 1] <= i)
        s++;
    return r->home[s] ? r->home[s] + (r->p[i].offset - r->off[s]) : NULL;
}

void tb_params_fuse(tb_params *r, int (*done)(void *ctx, int span), void *ctx)
{
    r->fused = 1;
    r->done = done;
    r->done_ctx = ctx;
}

void tb_params_on_span(tb_params *r, int (*done)(void *ctx, int span), void *ctx)
{
    r->done = done;
    r->done_ctx = ctx;
}

int tbi_span_done(const struct tb_params *r, int s)
{
    if (r->done)
        return r->done(r->done_ctx, s);
    return r->fused ? tbi_err(TB_EINVAL, "a fused plan's backward needs the update of each "
                              "gradient span (tb_params_fuse)")
                    : 0;
}

int tbi_params_check_kept(const struct tb_params *r, const char *what)
{
    return r->fused ? tbi_err(TB_EINVAL, "%s: with fused updates the backward applies each "
                              "gradient and keeps none", what)
                    : 0;
}

int tb_params_spans(const tb_params *r)
{
    return r->n_spans;
}

void tb_params_span_range(const tb_params *r, int s, int *first, int *end)
{
    *first = r->first[s];
    *end = r->first[s + 1];
}

int tb_params_count(const tb_params *r)
{
    return r->n;
}

const struct tb_param *tb_params_at(const tb_params *r, int i)
{
    return i >= 0 && i < r->n ? &r->p[i] : NULL;
}

int tb_params_find(const tb_params *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->p[i].name, name))
            return i;
    return -1;
}

int64_t tb_params_floats(const tb_params *r)
{
    return r->n_floats;
}

int tb_params_read(tb_params *r, int i, float *host)
{
    return r->be->ops->to_host(r->be, host, tbi_param_data(r, i), sizeof(float) * (size_t)r->p[i].n);
}

int tb_params_write(tb_params *r, int i, const float *host)
{
    return r->be->ops->to_device(r->be, tbi_param_data(r, i), host,
                                 sizeof(float) * (size_t)r->p[i].n);
}

int tb_params_read_grad(tb_params *r, int i, float *host)
{
    TBI_TRY(tbi_params_check_kept(r, r->p[i].name));
    const float *g = tbi_param_grad(r, i);
    if (!g)
        return tbi_err(TB_EINVAL, "%s has no gradient before the model is planned",
                       r->p[i].name);
    return r->be->ops->to_host(r->be, host, g, sizeof(float) * (size_t)r->p[i].n);
}

/* Floats of the largest parameter: the host staging buffer's size. */
static int64_t largest(const tb_params *r)
{
    int64_t mx = 1;
    for (int i = 0; i < r->n; i++)
        mx = r->p[i].n > mx ? r->p[i].n : mx;
    return mx;
}

/* Truncated normal on [-2 std, 2 std], as timm's trunc_normal_(std=.02) for ViTs. */
static float trunc_normal(tb_rng *g, float std)
{
    for (;;) {
        double x = tb_rng_normal(g);
        if (x >= -2 && x <= 2)
            return (float)(x * std);
    }
}

int tb_params_init(tb_params *r, uint64_t seed)
{
    float *host = tbi_malloc(sizeof(float) * (size_t)largest(r));
    if (!host)
        return tbi_err(TB_ENOMEM, "out of memory");
    /* One stream over all parameters in order: the same numbers for the same table. */
    tb_rng g;
    tb_rng_init_for(&g, seed, TB_RNG_INIT, 0, 0);
    int rc = 0;
    for (int i = 0; i < r->n && rc == 0; i++) {
        const struct tb_param *p = &r->p[i];
        for (int64_t k = 0; k < p->n; k++)
            host[k] = p->init == TB_INIT_ONE            ? 1.0f
                      : p->init == TB_INIT_TRUNC_NORMAL ? trunc_normal(&g, p->init_std)
                      : p->init == TB_INIT_NORMAL ? (float)(tb_rng_normal(&g) * p->init_std)
                      : p->init == TB_INIT_CONST  ? p->init_std
                                                  : 0.0f;
        rc = tb_params_write(r, i, host);
    }
    free(host);
    return rc;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* Whether t has p's dtype and shape; else a message naming both shapes. */
static int check_shape(const struct tb_param *p, const struct tb_st_tensor *t, const char *name)
{
    int same = t->dtype == TB_ST_F32 && t->n_dims == p->n_dims;
    for (int d = 0; same && d < p->n_dims; d++)
        same = t->shape[d] == p->shape[d];
    if (same)
        return 0;
    char want[96] = "", got[96] = "";
    for (int d = 0; d < p->n_dims; d++)
        snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%lld", d ? "," : "",
                 (long long)p->shape[d]);
    for (int d = 0; d < t->n_dims; d++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%lld", d ? "," : "",
                 (long long)t->shape[d]);
    return tbi_err(TB_EFORMAT, "tensor '%s' has shape (%s)%s, the model needs (%s)%s", name, got,
                   t->dtype == TB_ST_F32 ? "" : " and is not float32", want,
                   ends_with(p->name, "pos_embed")
                       ? ": learned positions are not interpolated to another clip shape (use "
                         "sin-cos positions, --pos sincos)"
                   : ends_with(p->name, "temporal_embedding")
                       ? ": another frame count (--inflate-temporal bilinear fits it, as "
                         "AVION's fine-tuning)"
                       : "");
}

int tb_params_load(tb_params *r, const struct tb_st_file *f)
{
    for (int i = 0; i < r->n; i++) {
        const struct tb_param *p = &r->p[i];
        const struct tb_st_tensor *t = tb_st_find(f, p->name);
        if (!t)
            return tbi_err(TB_EFORMAT, "tensor '%s' is missing", p->name);
        int rc = check_shape(p, t, p->name);
        if (rc < 0 || (rc = tb_params_write(r, i, t->data)) < 0)
            return rc;
    }
    return 0;
}

void tb_inflate_rows(float *dst, int t_out, const float *src, int t_in, int D)
{
    double scale = (double)t_in / t_out;
    for (int t = 0; t < t_out; t++) {
        if (t_in >= t_out) {
            memcpy(dst + (size_t)t * D, src + (size_t)t * D, sizeof(float) * (size_t)D);
            continue;
        }
        double x = (t + 0.5) * scale - 0.5;
        x = x < 0 ? 0 : x;
        int i0 = (int)x, i1 = i0 + (i0 < t_in - 1);
        float w1 = (float)(x - i0), w0 = 1.0f - w1;
        for (int d = 0; d < D; d++)
            dst[(size_t)t * D + d] = w0 * src[(size_t)i0 * D + d] + w1 * src[(size_t)i1 * D + d];
    }
}

/* t (t_in, D) into parameter i of shape (t_out, D), inflated. */
static int load_inflated(tb_params *r, int i, const struct tb_st_tensor *t)
{
    const struct tb_param *p = &r->p[i];
    float *rows = tbi_malloc(sizeof(float) * (size_t)p->n);
    if (!rows)
        return tbi_err(TB_ENOMEM, "out of memory");
    tb_inflate_rows(rows, (int)p->shape[0], t->data, (int)t->shape[0], (int)p->shape[1]);
    int rc = tb_params_write(r, i, rows);
    free(rows);
    return rc;
}

int tb_params_load_from(tb_params *r, const struct tb_st_file *f, enum tb_inflate inflate,
                        int *loaded)
{
    /* a dual encoder's video tower first (tubelet's --task clip, AVION's: its text tower's
     * names are OpenAI CLIP's top-level ones, which the video tower's would meet) unless the
     * model is a dual encoder itself, then the model's own names, then a pretraining
     * checkpoint's encoder (VideoMAE's, tubelet's --task mae) */
    static const char *const prefixes[] = {"visual.", "", "encoder."};
    int n = 0, dual = 0;
    for (int i = 0; i < r->n; i++)
        dual |= !strncmp(r->p[i].name, "visual.", 7);
    for (int i = 0; i < r->n; i++) {
        const struct tb_param *p = &r->p[i];
        char name[300];
        const struct tb_st_tensor *t = NULL;
        for (size_t k = dual; !t && k < sizeof(prefixes) / sizeof(prefixes[0]); k++) {
            snprintf(name, sizeof(name), "%s%s", prefixes[k], p->name);
            t = tb_st_find(f, name);
        }
        if (!t)
            continue;
        int fit = inflate == TB_INFLATE_BILINEAR && ends_with(p->name, "temporal_embedding") &&
                  t->dtype == TB_ST_F32 && t->n_dims == 2 && p->n_dims == 2 &&
                  t->shape[1] == p->shape[1] && t->shape[0] >= 1 && t->shape[0] != p->shape[0];
        int rc = fit ? load_inflated(r, i, t) : check_shape(p, t, name);
        if (rc < 0 || (!fit && (rc = tb_params_write(r, i, t->data)) < 0))
            return rc;
        r->p[i].loaded = 1;
        n++;
    }
    if (loaded)
        *loaded = n;
    return 0;
}

void tb_params_layer_decay(tb_params *r, int depth, double decay)
{
    for (int i = 0; i < r->n; i++) {
        struct tb_param *p = &r->p[i];
        /* BEiT's and VideoMAE's layer ids: the embeddings 0, block N N + 1, the rest (norms,
         * head) depth + 1; parameter scale decay^(depth + 1 - id). */
        const char *b = strstr(p->name, "blocks.");
        int id = depth + 1;
        if (strstr(p->name, "patch_embed") || strstr(p->name, "cls_token") ||
            strstr(p->name, "pos_embed"))
            id = 0;
        else if (b && (b == p->name || b[-1] == '.'))
            id = atoi(b + 7) + 1;
        p->lr_scale = (float)pow(decay, depth + 1 - id);
    }
}
