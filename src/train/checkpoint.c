/* src/train/checkpoint.c - checkpoints as safetensors (train.h): parameters under timm names,
 * AdamW moments under "optimizer.*", and in the metadata the model config, the position in
 * training and the optimizer's step, all as strings. Written atomically (tb_st_write).
 * Tests: tests/test_train.c (resume gives the same losses as an uninterrupted run). */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/strbuf.h"
#include "tubelet/train.h"

/* The string value of "key" in a flat JSON object of strings; 0 or -1. */
static int meta_get(const char *meta, const char *key, char *out, size_t size)
{
    char pat[96];
    snprintf(pat, sizeof(pat), "\"%s\":\"", key);
    const char *p = meta ? strstr(meta, pat) : NULL;
    if (!p)
        return -1;
    p += strlen(pat);
    const char *e = strchr(p, '"');
    if (!e || (size_t)(e - p) >= size)
        return -1;
    memcpy(out, p, (size_t)(e - p));
    out[e - p] = '\0';
    return 0;
}

static int meta_i64(const char *meta, const char *key, int64_t *out)
{
    char v[64];
    return meta_get(meta, key, v, sizeof(v)) || tbi_parse_i64(v, INT64_MIN, INT64_MAX, out) ? -1
                                                                                              : 0;
}

int tb_ckpt_save(const char *path, tb_vit *m, const struct tb_adamw *opt,
                 const struct tb_train_pos *pos, const char *extra)
{
    const struct tb_vit_config *c = tb_vit_config(m);
    int np = tb_vit_n_params(m), n = 0;
    struct tb_st_tensor *ts = calloc((size_t)np * 3, sizeof(*ts));
    struct tbi_sb meta = {0};
    if (!ts)
        return tbi_err(TB_ENOMEM, "out of memory");
    float *base = tb_vit_params(m);
    for (int k = 0; k < (opt ? 3 : 1); k++)
        for (int i = 0; i < np; i++) {
            const struct tb_param *p = tb_vit_param(m, i);
            struct tb_st_tensor *t = &ts[n++];
            snprintf(t->name, sizeof(t->name), "%s%s",
                     k == 0 ? "" : k == 1 ? "optimizer.exp_avg." : "optimizer.exp_avg_sq.",
                     p->name);
            t->dtype = TB_ST_F32;
            t->n_dims = p->n_dims;
            memcpy(t->shape, p->shape, sizeof(p->shape));
            t->n = p->n;
            size_t off = (size_t)(p->data - base);
            t->data = k == 0 ? p->data : k == 1 ? opt->m + off : opt->v + off;
        }
    tbi_sb_printf(&meta, "{\"format\":\"tubelet-checkpoint\",\"version\":\"1\","
                  "\"dim\":\"%d\",\"depth\":\"%d\",\"heads\":\"%d\",\"patch\":\"%d\","
                  "\"tubelet\":\"%d\",\"frames\":\"%d\",\"height\":\"%d\",\"width\":\"%d\","
                  "\"classes\":\"%d\",\"pool\":\"%s\",\"pos\":\"%s\",\"epoch\":\"%" PRId64
                  "\",\"batch\":\"%" PRId64 "\",\"step\":\"%" PRId64 "\",\"adam_step\":\"%" PRId64
                  "\"%s%s}",
                  c->dim, c->depth, c->heads, c->patch, c->tubelet, c->frames, c->height,
                  c->width, c->classes, c->pool == TB_POOL_CLS ? "cls" : "mean",
                  c->pos == TB_POS_LEARNED ? "learned" : "sincos", pos ? pos->epoch : 0,
                  pos ? pos->batch : 0, pos ? pos->step : 0, opt ? opt->step : 0,
                  extra && extra[0] ? "," : "", extra ? extra : "");
    int rc = meta.failed ? tbi_err(TB_ENOMEM, "out of memory")
                         : tb_st_write(path, ts, n, meta.buf);
    tbi_sb_free(&meta);
    free(ts);
    return rc;
}

int tb_ckpt_config(const char *path, struct tb_vit_config *cfg)
{
    struct tb_st_file *f = NULL;
    int rc = tb_st_read(&f, path);
    if (rc < 0)
        return rc;
    int64_t v[9];
    const char *keys[9] = {"dim", "depth", "heads", "patch", "tubelet", "frames", "height",
                           "width", "classes"};
    char pool[16], pos[16];
    for (int i = 0; i < 9; i++)
        if (meta_i64(f->metadata, keys[i], &v[i]) || v[i] < 1 || v[i] > (1 << 24))
            rc = -1;
    if (rc < 0 || meta_get(f->metadata, "pool", pool, sizeof(pool)) ||
        meta_get(f->metadata, "pos", pos, sizeof(pos))) {
        tb_st_free(&f);
        return tbi_err(TB_EFORMAT, "%s: not a tubelet checkpoint (no model config in its "
                       "metadata)", path);
    }
    *cfg = (struct tb_vit_config){
        .dim = (int)v[0], .depth = (int)v[1], .heads = (int)v[2], .patch = (int)v[3],
        .tubelet = (int)v[4], .frames = (int)v[5], .height = (int)v[6], .width = (int)v[7],
        .classes = (int)v[8], .pool = strcmp(pool, "cls") ? TB_POOL_MEAN : TB_POOL_CLS,
        .pos = strcmp(pos, "learned") ? TB_POS_SINCOS : TB_POS_LEARNED,
    };
    tb_st_free(&f);
    return 0;
}

int tb_ckpt_load(const char *path, tb_vit *m, struct tb_adamw *opt, struct tb_train_pos *pos)
{
    struct tb_st_file *f = NULL;
    int rc = tb_st_read(&f, path);
    if (rc < 0)
        return rc;
    if ((rc = tb_vit_load(m, f)) < 0) {
        rc = tbi_err_prefix(rc, "%s", path);
        goto end;
    }
    if (pos && (meta_i64(f->metadata, "epoch", &pos->epoch) ||
                meta_i64(f->metadata, "batch", &pos->batch) ||
                meta_i64(f->metadata, "step", &pos->step))) {
        rc = tbi_err(TB_EFORMAT, "%s: no training position in its metadata", path);
        goto end;
    }
    if (opt) {
        float *base = tb_vit_params(m);
        if (meta_i64(f->metadata, "adam_step", &opt->step)) {
            rc = tbi_err(TB_EFORMAT, "%s: no optimizer step in its metadata", path);
            goto end;
        }
        for (int i = 0; i < tb_vit_n_params(m); i++) {
            const struct tb_param *p = tb_vit_param(m, i);
            size_t off = (size_t)(p->data - base);
            for (int k = 0; k < 2; k++) {
                char name[300];
                snprintf(name, sizeof(name), "optimizer.%s.%s", k ? "exp_avg_sq" : "exp_avg",
                         p->name);
                const struct tb_st_tensor *t = tb_st_find(f, name);
                if (!t || t->n != p->n || t->dtype != TB_ST_F32) {
                    rc = tbi_err(TB_EFORMAT, "%s: optimizer state '%s' missing or of another "
                                 "size", path, name);
                    goto end;
                }
                memcpy((k ? opt->v : opt->m) + off, t->data, sizeof(float) * (size_t)p->n);
            }
        }
    }
end:
    tb_st_free(&f);
    return rc;
}
