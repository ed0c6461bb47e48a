/* src/train/checkpoint.c - checkpoints as safetensors (train.h): parameters under their
 * registry names, AdamW moments under "optimizer.*", and in the metadata the run's settings
 * (model, sampler, normalisation, ...), the position in training and the optimizer's step,
 * all as strings. Tensors come from backend memory by explicit copies, straight into the
 * file's buffer; written atomically with the file's checksum (tb_st_write_fill). Version 2
 * checkpoints must carry the checksum; version 1 (before it) load unchecked. Tests:
 * tests/test_train.c (resume gives the same losses as an uninterrupted run),
 * tests/test_crash.c (kill -9 at any moment, torn and flipped files refused). */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/strbuf.h"
#include "model/params.h"
#include "train/task.h"
#include "tubelet/train.h"

/* The string value of "key" in a flat JSON object of strings; 0 or -1. */
int tbi_meta_get(const char *meta, const char *key, char *out, size_t size)
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
    return tbi_meta_get(meta, key, v, sizeof(v)) || tbi_parse_i64(v, INT64_MIN, INT64_MAX, out) ? -1
                                                                                              : 0;
}

/* Read a checkpoint: a version 2 one must have carried its checksum (a bit flipped in the
 * field's name would otherwise pass it off as unchecked); unknown versions are refused. */
static int read_ckpt(struct tb_st_file **f, const char *path)
{
    char version[16];
    int rc = tb_st_read(f, path);
    if (rc < 0 || tbi_meta_get((*f)->metadata, "version", version, sizeof(version)) ||
        !strcmp(version, "1"))
        return rc;
    if (!strcmp(version, "2") && (*f)->checksummed)
        return 0;
    rc = strcmp(version, "2")
             ? tbi_err(TB_EUNSUPPORTED, "%s: a checkpoint of version '%s', which this tubelet "
                       "does not know (1 and 2)", path, version)
             : tbi_err(TB_EFORMAT, "%s: damaged: a version 2 checkpoint without its checksum",
                       path);
    tb_st_free(f);
    return rc;
}

struct fill_ctx {
    tb_params *r;
    const struct tb_optim *opt;
};

/* Tensor i of the file: parameter i % n, from the parameters or a moment. */
static int fill(void *user, int i, void *dst)
{
    struct fill_ctx *f = user;
    tb_params *r = f->r;
    const struct tb_param *p = &r->p[i % r->n];
    int k = i / r->n;
    size_t bytes = sizeof(float) * (size_t)p->n;
    if (k && f->opt->full) { /* --zero: gathered from every process (tbi_optim_gather) */
        memcpy(dst, f->opt->full + (size_t)(k - 1) * (size_t)r->n_floats + p->offset, bytes);
        return 0;
    }
    const float *src =
        k == 0 ? tbi_param_data(r, i % r->n) : tbi_optim_state(f->opt, k - 1, p->offset);
    if (!src)
        return tbi_err(TB_EINVAL,
                       "the optimizer state of %s is another process's: gather it "
                       "first",
                       p->name);
    return r->be->ops->to_host(r->be, dst, src, bytes);
}

int tb_ckpt_save(const char *path, tb_params *r, const struct tb_optim *opt,
                 const struct tb_train_pos *pos, const char *meta_extra)
{
    int np = r->n, n = 0;
    struct tb_st_tensor *ts = tbi_calloc((size_t)np * 3, sizeof(*ts));
    struct tbi_sb meta = {0};
    if (!ts)
        return tbi_err(TB_ENOMEM, "out of memory");
    for (int k = 0; k < 1 + (opt ? tb_optimizer_states(opt->kind) : 0); k++)
        for (int i = 0; i < np; i++) {
            const struct tb_param *p = &r->p[i];
            struct tb_st_tensor *t = &ts[n++];
            if (k == 0)
                snprintf(t->name, sizeof(t->name), "%s", p->name);
            else
                snprintf(t->name, sizeof(t->name), "optimizer.%s.%s",
                         tb_optimizer_state_name(opt->kind, k - 1), p->name);
            t->dtype = TB_ST_F32;
            t->n_dims = p->n_dims;
            memcpy(t->shape, p->shape, sizeof(p->shape));
            t->n = p->n;
        }
    tbi_sb_printf(&meta, "{\"format\":\"tubelet-checkpoint\",\"version\":\"2\",\"epoch\":\"%"
                  PRId64 "\",\"batch\":\"%" PRId64 "\",\"step\":\"%" PRId64 "\",\"adam_step\":\"%"
                  PRId64 "\",\"optimizer\":\"%s\"%s%s}", pos ? pos->epoch : 0, pos ? pos->batch : 0,
                  pos ? pos->step : 0, opt ? opt->step : 0,
                  tb_optimizer_name(opt ? opt->kind : TB_OPT_ADAMW),
                  meta_extra && meta_extra[0] ? "," : "", meta_extra ? meta_extra : "");
    struct fill_ctx fc = {r, opt};
    int rc = meta.failed ? tbi_err(TB_ENOMEM, "out of memory")
                         : tb_st_write_fill(path, ts, n, meta.buf, fill, &fc);
    tbi_sb_free(&meta);
    free(ts);
    return rc;
}

int tb_ckpt_label_space(const char *path, struct tb_label_space **out)
{
    static const char key[] = "\"label_space\":\"";
    struct tb_st_file *f = NULL;
    *out = NULL;
    int rc = read_ckpt(&f, path);
    const char *p = rc == 0 && f->metadata ? strstr(f->metadata, key) : NULL;
    if (p) {
        p += sizeof(key) - 1;
        const char *e = strchr(p, '"');
        char *text = e ? tbi_malloc((size_t)(e - p) + 1) : NULL;
        if (!e)
            rc = tbi_err(TB_EFORMAT, "%s: an unterminated label space", path);
        else if (!text)
            rc = tbi_err(TB_ENOMEM, "out of memory");
        if (text) {
            memcpy(text, p, (size_t)(e - p));
            text[e - p] = '\0';
            rc = tbi_label_space_parse(out, text, path);
            free(text);
        }
    }
    tb_st_free(&f);
    return rc;
}

int tb_ckpt_info(const char *path, struct tb_ckpt_info *info)
{
    struct tb_st_file *f = NULL;
    char s[32];
    int rc = read_ckpt(&f, path);
    if (rc < 0 || (rc = tbi_settings_read(f->metadata, path, info)) < 0) {
        tb_st_free(&f);
        return rc;
    }
    if (tbi_meta_get(f->metadata, "data", info->data, sizeof(info->data)))
        info->data[0] = '\0';
    if (meta_i64(f->metadata, "global_batch", &info->global_batch))
        info->global_batch = 0;
    if (!tbi_meta_get(f->metadata, "best", s, sizeof(s)) &&
        meta_i64(f->metadata, "best_epoch", &info->best_epoch) == 0)
        info->best = strtod(s, NULL);
    else
        info->best_epoch = 0;
    tb_st_free(&f);
    return 0;
}

int tb_ckpt_load(const char *path, tb_params *r, struct tb_optim *opt, struct tb_train_pos *pos)
{
    struct tb_st_file *f = NULL;
    int rc = read_ckpt(&f, path);
    if (rc < 0)
        return rc;
    if ((rc = tb_params_load(r, f)) < 0) {
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
        if (meta_i64(f->metadata, "adam_step", &opt->step)) {
            rc = tbi_err(TB_EFORMAT, "%s: no optimizer step in its metadata", path);
            goto end;
        }
        char kind[16] = "adamw"; /* checkpoints from before Lion were AdamW's */
        tbi_meta_get(f->metadata, "optimizer", kind, sizeof(kind));
        if (strcmp(kind, tb_optimizer_name(opt->kind))) {
            rc = tbi_err(TB_EINVAL, "%s: its optimizer state is %s's, this run's optimizer is "
                         "%s", path, kind, tb_optimizer_name(opt->kind));
            goto end;
        }
        for (int i = 0; i < r->n; i++) {
            const struct tb_param *p = &r->p[i];
            for (int k = 0; k < tb_optimizer_states(opt->kind); k++) {
                char name[300];
                snprintf(name, sizeof(name), "optimizer.%s.%s",
                         tb_optimizer_state_name(opt->kind, k), p->name);
                const struct tb_st_tensor *t = tb_st_find(f, name);
                if (!t || t->n != p->n || t->dtype != TB_ST_F32) {
                    rc = tbi_err(TB_EFORMAT, "%s: optimizer state '%s' missing or of another "
                                 "size", path, name);
                    goto end;
                }
                float *dst = tbi_optim_state(opt, k, p->offset); /* --zero: this process's */
                if (dst && (rc = r->be->ops->to_device(r->be, dst, t->data,
                                                       sizeof(float) * (size_t)p->n)) < 0)
                    goto end;
            }
        }
    }
end:
    tb_st_free(&f);
    return rc;
}
