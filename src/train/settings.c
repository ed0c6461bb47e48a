/* src/train/settings.c - the one table of the settings a checkpoint records (the model, how
 * clips were sampled and normalised, the labels, the contrastive loss): each key's type, its
 * place in struct tb_ckpt_info, whether a checkpoint must have it, and which keys each task
 * records in which order. A checkpoint's settings are written from it (tbi_settings_meta) and
 * read back by it (tbi_settings_read, for tb_ckpt_info), so the two cannot drift. Not here:
 * the run's position, optimizer and data id (checkpoint.c, loop.c). Tests: tests/test_train.c
 * (resume, eval of every task's checkpoint), bench/same_bits.sh (the bytes written). */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/choices.h"
#include "core/internal.h"
#include "train/settings.h"
#include "train/task.h"

/* Enums are stored and read as the int they are. */
static_assert(sizeof(enum tb_pool) == sizeof(int) && sizeof(enum tb_norm) == sizeof(int) &&
                  sizeof(enum tb_sampler) == sizeof(int),
              "enums are ints");

enum kind {
    INT,    /* an int, "%d" */
    DOUBLE, /* a double, "%g" */
    NAME,   /* an int (an enum) written as its choice, the value-th of names */
    TEXT,   /* a char array (the task) */
};
enum need {
    OPTIONAL, /* absent: the checkpoints from before it was recorded; the default then */
    ALWAYS,   /* every tubelet checkpoint has it */
    CLIP,     /* every --task clip checkpoint has it */
};

struct setting {
    const char *key;
    enum kind kind;
    size_t off;                /* in struct tb_ckpt_info */
    const char *names;         /* NAME: its choices by value, "a|b|c" */
    enum need need;
};

/* A NAME's choices, by value (its index): the enums' order */
#define POOLS "cls|mean|none"                    /* enum tb_pool */
#define POSS "learned|sincos"                    /* enum tb_pos */
#define LAYOUTS "timm|clip"                      /* enum tb_layout */
#define NORMS "openai|imagenet"                  /* enum tb_norm */
#define LABELS "verb|noun|action"                /* enum tb_label_kind */
#define SAMPLERS "segments|dense|dense-jitter"   /* enum tb_sampler */
#define MASKS "none|running-cell"                /* tb_decoder_mask */
#define LOSSES "infonce|max-margin"              /* max_margin 0, 1 */

#define AT(field) offsetof(struct tb_ckpt_info, field)
static const struct setting settings[] = {
    {"task", TEXT, AT(task), NULL, OPTIONAL},
    {"dim", INT, AT(model.dim), NULL, ALWAYS},
    {"depth", INT, AT(model.depth), NULL, ALWAYS},
    {"heads", INT, AT(model.heads), NULL, ALWAYS},
    {"patch", INT, AT(model.patch), NULL, ALWAYS},
    {"tubelet", INT, AT(model.tubelet), NULL, ALWAYS},
    {"frames", INT, AT(model.frames), NULL, ALWAYS},
    {"height", INT, AT(model.height), NULL, ALWAYS},
    {"width", INT, AT(model.width), NULL, ALWAYS},
    {"classes", INT, AT(model.classes), NULL, ALWAYS},
    {"pool", NAME, AT(model.pool), POOLS, ALWAYS},
    {"pos", NAME, AT(model.pos), POSS, ALWAYS},
    {"qv_bias", INT, AT(model.qv_bias), NULL, OPTIONAL},
    {"layout", NAME, AT(model.layout), LAYOUTS, OPTIONAL},
    {"mask_ratio", DOUBLE, AT(mae.mask_ratio), NULL, OPTIONAL},
    {"decoder_mask", NAME, AT(mae.decoder_mask), MASKS, OPTIONAL},
    {"decoder_ratio", DOUBLE, AT(mae.decoder_ratio), NULL, OPTIONAL},
    {"dec_dim", INT, AT(mae.dec_dim), NULL, OPTIONAL},
    {"dec_depth", INT, AT(mae.dec_depth), NULL, OPTIONAL},
    {"dec_heads", INT, AT(mae.dec_heads), NULL, OPTIONAL},
    {"norm_target", INT, AT(mae.norm_target), NULL, OPTIONAL},
    {"embed", INT, AT(clip.embed), NULL, CLIP},
    {"vocab", INT, AT(clip.vocab), NULL, CLIP},
    {"context", INT, AT(clip.ctx), NULL, CLIP},
    {"text_width", INT, AT(clip.text_width), NULL, CLIP},
    {"text_heads", INT, AT(clip.text_heads), NULL, CLIP},
    {"text_depth", INT, AT(clip.text_layers), NULL, CLIP},
    {"text_causal", INT, AT(clip.text_causal), NULL, CLIP},
    {"temperature", DOUBLE, AT(clip.temperature), NULL, OPTIONAL},
    {"learn_temperature", INT, AT(clip.learn_temperature), NULL, OPTIONAL},
    {"loss", NAME, AT(max_margin), LOSSES, OPTIONAL},
    {"margin", DOUBLE, AT(margin), NULL, OPTIONAL},
    {"sampler", NAME, AT(sampler), SAMPLERS, OPTIONAL},
    {"stride", INT, AT(stride), NULL, OPTIONAL},
    {"norm", NAME, AT(norm), NORMS, OPTIONAL},
    {"label", NAME, AT(label), LABELS, OPTIONAL},
#define ROW(kind, key, flag, field, choices, def, help, lo, hi) {key, kind, AT(field), choices, OPTIONAL},
    TBI_SETTING_FLAGS(ROW)
#undef ROW
};
#undef AT
enum { N_SETTINGS = (int)(sizeof(settings) / sizeof(settings[0])) };

/* What each task records, in its order; "key?" only where it is not 0 (its default). */
static const char *const cls_keys[] = {
    "task", "dim", "depth", "heads", "patch", "tubelet", "frames", "height", "width", "classes",
    "pool", "pos", "qv_bias", "sampler", "stride", "norm", "label", "layout?", NULL};
static const char *const mae_keys[] = {
    "task", "dim", "depth", "heads", "patch", "tubelet", "frames", "height", "width", "classes",
    "pool", "pos", "qv_bias", "mask_ratio", "decoder_mask", "decoder_ratio", "dec_dim",
    "dec_depth", "dec_heads", "norm_target", "sampler", "stride", "norm", NULL};
static const char *const clip_keys[] = {
    "task", "dim", "depth", "heads", "patch", "tubelet", "frames", "height", "width", "classes",
    "pool", "pos", "layout", "embed", "vocab", "context", "text_width", "text_heads",
    "text_depth", "text_causal", "temperature", "learn_temperature", "loss", "margin", "sampler",
    "stride", "norm", NULL};

/* The settings chosen by flag (settings.h), which every task records after its own keys
 * where they are not their default. */
static const char *const flagged_keys[] = {
#define KEY(kind, key, ...) key,
    TBI_SETTING_FLAGS(KEY)
#undef KEY
    NULL};

static const struct setting *find(const char *key, size_t len)
{
    for (int i = 0; i < N_SETTINGS; i++)
        if (strlen(settings[i].key) == len && !strncmp(settings[i].key, key, len))
            return &settings[i];
    return NULL;
}

static int get_int(const struct tb_ckpt_info *s, const struct setting *k)
{
    int v;
    memcpy(&v, (const char *)s + k->off, sizeof(v));
    return v;
}

void tbi_settings_init(struct tb_ckpt_info *s, const char *task, const struct tb_train_opts *o)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->task, sizeof(s->task), "%s", task);
    s->sampler = o->data.sampler;
    s->stride = o->data.stride;
    s->norm = o->norm;
    s->label = o->label;
    s->max_margin = o->max_margin;
    s->margin = o->margin;
#define COPY(kind, key, flag, field, ...) s->field = o->field;
    TBI_SETTING_FLAGS(COPY)
#undef COPY
}

static int is_default(const struct tb_ckpt_info *s, const struct setting *k)
{
    if (k->kind == DOUBLE)
        return *(const double *)(const void *)((const char *)s + k->off) == 0;
    return k->kind == TEXT ? !((const char *)s + k->off)[0] : get_int(s, k) == 0;
}

/* One setting as "key":value, the value quoted (the checkpoint's metadata is text) or typed
 * (a number as a number: the Python view). */
static void put(struct tbi_sb *sb, const struct tb_ckpt_info *s, const struct setting *k,
                int first, int typed)
{
    const char *at = (const char *)s + k->off, *q = typed ? "" : "\"";
    size_t len;
    tbi_sb_printf(sb, "%s\"%s\":", first ? "" : ",", k->key);
    if (k->kind == INT)
        tbi_sb_printf(sb, "%s%d%s", q, get_int(s, k), q);
    else if (k->kind == DOUBLE)
        tbi_sb_printf(sb, "%s%g%s", q, *(const double *)(const void *)at, q);
    else if (k->kind == TEXT)
        tbi_sb_printf(sb, "\"%s\"", at);
    else if ((at = tbi_choice_at(k->names, get_int(s, k), &len)) != NULL)
        tbi_sb_printf(sb, "\"%.*s\"", (int)len, at);
    else
        tbi_sb_printf(sb, "\"%d\"", get_int(s, k)); /* out of its enum: refused on reading */
}

/* The task's keys in its order ("key?": only where not its default), then the settings chosen
 * by flag where not their default. */
static int settings_write(struct tbi_sb *sb, const struct tb_ckpt_info *s, int typed)
{
    const char *const *keys = !strcmp(s->task, "mae") ? mae_keys : !strcmp(s->task, "clip")
                                                                       ? clip_keys
                                                                       : cls_keys;
    int n = 0;
    for (int i = 0; keys[i]; i++) {
        size_t len = strcspn(keys[i], "?");
        const struct setting *k = find(keys[i], len);
        if (keys[i][len] != '?' || !is_default(s, k))
            put(sb, s, k, n++ == 0, typed);
    }
    for (int i = 0; flagged_keys[i]; i++) {
        const struct setting *k = find(flagged_keys[i], strlen(flagged_keys[i]));
        if (!is_default(s, k))
            put(sb, s, k, n++ == 0, typed);
    }
    return sb->failed ? tbi_err(TB_ENOMEM, "out of memory") : 0;
}

int tbi_settings_meta(struct tbi_sb *sb, const struct tb_ckpt_info *s)
{
    return settings_write(sb, s, 0);
}

int tb_ckpt_settings_json(const struct tb_ckpt_info *s, char **json)
{
    struct tbi_sb sb = {0};
    tbi_sb_printf(&sb, "{");
    int rc = settings_write(&sb, s, 1);
    tbi_sb_printf(&sb, "}");
    if (rc < 0 || sb.failed) {
        free(sb.buf);
        return rc < 0 ? rc : tbi_err(TB_ENOMEM, "out of memory");
    }
    *json = sb.buf;
    return 0;
}

/* One setting's text v into s; 0 or TB_EFORMAT naming the key and path. */
static int set_one(struct tb_ckpt_info *s, const struct setting *k, const char *v,
                   const char *path)
{
    char *at = (char *)s + k->off;
    int64_t n = 0;
    if (k->kind == TEXT) {
        snprintf(at, sizeof(s->task), "%.15s", v);
        return 0;
    }
    if (k->kind == DOUBLE) {
        char *end;
        double d = strtod(v, &end);
        if (end == v || *end)
            return tbi_err(TB_EFORMAT, "%s: its '%s' is '%s', not a number", path, k->key, v);
        memcpy(at, &d, sizeof(d));
        return 0;
    }
    if (k->kind == INT && tbi_parse_i64(v, 0, 1 << 24, &n) < 0)
        return tbi_err(TB_EFORMAT, "%s: its '%s' is '%s', not a count", path, k->key, v);
    if (k->kind == NAME)
        n = tbi_choice_index(k->names, v);
    if (k->kind == NAME && n < 0)
        return tbi_err(TB_EFORMAT, "%s: its '%s' is '%s', which this tubelet does not know",
                       path, k->key, v);
    int i = (int)n;
    memcpy(at, &i, sizeof(i));
    return 0;
}

int tbi_settings_read(const char *meta, const char *path, struct tb_ckpt_info *s)
{
    char v[256];
    memset(s, 0, sizeof(*s));
    /* before these were recorded: a classifier, AVION's segments at stride 4, AVION's
     * normalisation, verbs; InfoNCE at LaViLa's temperature */
    snprintf(s->task, sizeof(s->task), "cls");
    s->stride = 4;
    s->clip.temperature = 0.07;
    for (int i = 0; i < N_SETTINGS; i++) {
        const struct setting *k = &settings[i];
        if (tbi_meta_get(meta, k->key, v, sizeof(v)) == 0) {
            TBI_TRY(set_one(s, k, v, path));
            s->norm_recorded |= !strcmp(k->key, "norm");
            s->label_recorded |= !strcmp(k->key, "label");
        } else if (k->need == ALWAYS) {
            return tbi_err(TB_EFORMAT, "%s: not a tubelet checkpoint (no model config in its "
                           "metadata)", path);
        } else if (k->need == CLIP && !strcmp(s->task, "clip")) {
            return tbi_err(TB_EFORMAT, "%s: a --task clip checkpoint without '%s' in its "
                           "metadata", path, k->key);
        }
    }
    if (s->stride < 1 || s->stride > 1000)
        s->stride = 4; /* a library run that set none: its sampler read none (segments) */
    if (!strcmp(s->task, "clip")) { /* the dual encoder's video tower */
        s->model.layout = TB_LAYOUT_CLIP;
        s->model.embed = s->clip.embed;
    }
    s->mae.enc = s->model;
    return 0;
}
