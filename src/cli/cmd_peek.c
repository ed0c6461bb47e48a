/* src/cli/cmd_peek.c - `tubelet peek`: a contact sheet of a few clips exactly as the model
 * will see them (the loader's first batch: sampled frames, crop, flip), one row per clip with
 * its sample, video, time window, labels and narration written above it. A PNG (or JPEG, PPM,
 * raw RGB24), through tb_image_write. Tests: tests/test_cli_data.c. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/sheet.h"
#include "tubelet/data.h"

struct peek_config {
    char *root;
    char *ann;
    char *format;
    char *out;
    int clips;
    int frames;
    int size;
    char *sampler;
    int stride;
    int train;
    double scale_min;
    int seed;
    char *verbs;
    char *nouns;
};

#define F(name, type, field, def, meta, help, ...)                                            \
    CLI_FLAG(name, type, struct peek_config, field, def, meta, help, __VA_ARGS__)
static const struct cli_flag peek_flags[] = {
    F("data", CLI_STR, root, NULL, "DIR", "prepared videos (tubelet prep --out)", CLI_NO_RANGE),
    F("ann", CLI_STR, ann, NULL, "FILE", "annotations", CLI_NO_RANGE),
    F("format", CLI_STR, format, "epic", "epic|kinetics|narration",
      "annotation format: epic, kinetics, narration",
      CLI_NO_RANGE),
    F("out", CLI_STR, out, NULL, "FILE.png",
      "the contact sheet: .png, .jpg, .ppm, or .rgb / .raw for RGB24 bytes", CLI_NO_RANGE),
    F("clips", CLI_INT, clips, "6", "N", "clips (rows)", 1, 64),
    F("frames", CLI_INT, frames, "8", "T", "frames per clip", 1, 64),
    F("size", CLI_INT, size, "112", "PX", "frame size (square)", 16, 1024),
    F("sampler", CLI_STR, sampler, "segments", "segments|dense|dense-jitter",
      "segments (AVION), dense (VideoMAE) or dense-jitter (AVION's VideoMAE pretraining)",
      CLI_NO_RANGE),
    F("stride", CLI_INT, stride, "4", "N", "frame stride of dense sampling", 1, 1000),
    F("train", CLI_BOOL, train, "true", "",
      "training view (jittered frames, random resized crop, flips); false: evaluation view",
      CLI_NO_RANGE),
    F("scale-min", CLI_DOUBLE, scale_min, "0.5", "S",
      "smallest crop area fraction of the random resized crop (AVION fine-tuning: 0.5)",
      0.01, 1),
    F("seed", CLI_INT, seed, "0", "K", "random seed (as for training)", 0, 2147483647),
    F("verbs", CLI_STR, verbs, "", "FILE", "verb class list (id,key,...) to print names",
      CLI_NO_RANGE),
    F("nouns", CLI_STR, nouns, "", "FILE", "noun class list (id,key,...) to print names",
      CLI_NO_RANGE),
};
#undef F

/* Class names from an EPIC class list, "id,key,...". Returns a malloc'ed array of n names. */

static const char *name_of(char **names, int n, int id)
{
    return id >= 0 && id < n && names[id] ? names[id] : NULL;
}

/* The class names of --verbs and --nouns, to print beside the ids (none where not given). */
struct class_names {
    char **verbs, **nouns;
    int n_verbs, n_nouns;
};

/* The dataset and loader of the sheet: the training (or evaluation) view of --data, a batch of
 * --clips clips. 0 or a negative TB_E*. */
static int open_loader(const struct peek_config *c, const struct tb_annotations *ann,
                       tb_dataset **ds, tb_loader **l)
{
    enum tb_sampler sampler = TB_SAMPLE_SEGMENTS;
    tb_sampler_parse(c->sampler, &sampler); /* the parser checked the names */
    struct tb_dataset_opts dopts = {
        .root = c->root, .ext = "mp4",
        .sampler = sampler,
        .n_frames = c->frames, .stride = c->stride, .train = c->train, .n_views = 1,
        .width = c->size, .height = c->size,
        .crop = {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = c->scale_min, .scale_max = 1,
                 .ratio_min = 3.0 / 4, .ratio_max = 4.0 / 3, .flip = TB_FLIP_RANDOM},
    };
    struct tb_loader_opts lo = {.batch_size = c->clips, .n_workers = 2, .prefetch = 0,
                                .seed = (uint64_t)c->seed, .shuffle = 1, .world = 1,
                                .max_failure_rate = 0.5};
    int rc = tb_dataset_open(ds, ann, &dopts);
    return rc < 0 ? rc : tb_loader_open(l, *ds, &lo);
}

/* The second line above a clip: its classes (by name where known) and narration, its label,
 * or its text, by the annotation format. */
static void describe_labels(char *line, size_t size, const struct tb_ann_item *it,
                            enum tb_ann_format format, const struct class_names *cn)
{
    const char *vn = name_of(cn->verbs, cn->n_verbs, it->verb);
    const char *nn = name_of(cn->nouns, cn->n_nouns, it->noun);
    if (format == TB_ANN_EPIC)
        snprintf(line, size, "%s (%d) %s (%d)%s%s", vn ? vn : "verb", it->verb,
                 nn ? nn : "noun", it->noun, it->text ? ": " : "", it->text ? it->text : "");
    else if (format == TB_ANN_KINETICS)
        snprintf(line, size, "label %d", it->verb);
    else
        snprintf(line, size, "%s", it->text ? it->text : "");
}

/* The contact sheet of batch b: a row per clip, two lines of text over its frames. Returns it
 * (malloc'ed, *w x *h RGB), or NULL after saying so. */
static uint8_t *draw_sheet(const struct peek_config *c, const struct tb_annotations *ann,
                           const struct tb_batch *b, enum tb_ann_format format,
                           const struct class_names *cn, int *w, int *h)
{
    const int scale = 2, gap = 2, margin = 4, text_h = 2 * (SHEET_GLYPH_H * scale + 3);
    int T = c->frames, S = c->size;
    int W = 2 * margin + T * S + (T - 1) * gap, row_h = text_h + S + 2 * gap;
    int H = 2 * margin + b->n * row_h;
    uint8_t *sheet = malloc((size_t)W * H * 3);
    if (!sheet) {
        fprintf(stderr, "tubelet peek: out of memory\n");
        return NULL;
    }
    memset(sheet, 24, (size_t)W * H * 3);
    static const uint8_t white[3] = {240, 240, 240}, yellow[3] = {250, 210, 60};
    size_t clip_bytes = (size_t)T * S * S * 3;
    for (int i = 0; i < b->n; i++) {
        const struct tb_ann_item *it = &ann->items[b->index[i]];
        int y = margin + i * row_h;
        char line[512];
        snprintf(line, sizeof(line), "#%lld %s %.2f-%.2fs%s", (long long)b->index[i], it->video,
                 it->start_s, it->end_s, b->flip[i] ? " flipped" : "");
        sheet_text(sheet, W, H, margin, y, line, scale, white);
        describe_labels(line, sizeof(line), it, format, cn);
        sheet_text(sheet, W, H, margin, y + SHEET_GLYPH_H * scale + 3, line, scale, yellow);
        for (int t = 0; t < T; t++)
            sheet_blit(sheet, W, margin + t * (S + gap), y + text_h + gap,
                       b->video + (size_t)i * clip_bytes + (size_t)t * S * S * 3, S, S);
    }
    *w = W;
    *h = H;
    return sheet;
}

static int run_peek(void *config, int n_args, char **args)
{
    struct peek_config *c = config;
    struct tb_annotations *ann = NULL;
    tb_dataset *ds = NULL;
    tb_loader *l = NULL;
    struct tb_batch *b = NULL;
    struct tb_ann_opts ao = {0};
    uint8_t *sheet = NULL;
    struct class_names cn = {0};
    int W, H, rc, status = 1;
    (void)n_args;
    (void)args;
    if (!c->root[0] || !c->ann[0] || !c->out[0]) {
        fprintf(stderr, "tubelet peek: --data, --ann and --out are required\n");
        return 2;
    }
    cli_ann_format(c->format, &ao.format); /* the parser checked the names */
    if ((c->verbs[0] && (rc = tb_classes_load(c->verbs, &cn.verbs, &cn.n_verbs)) < 0) ||
        (c->nouns[0] && (rc = tb_classes_load(c->nouns, &cn.nouns, &cn.n_nouns)) < 0)) {
        cli_report("peek", rc);
        tb_classes_free(&cn.verbs, &cn.n_verbs);
        return 1;
    }
    if (cli_ann_load(&ann, "peek", c->ann, ao.format) < 0 ||
        cli_ann_check(ann, "peek", c->root, "mp4", CLI_ROWS_REPORT, 0) < 0)
        goto end;
    if ((rc = open_loader(c, ann, &ds, &l)) < 0)
        goto fail;
    if (tb_loader_epoch(l, 0) < 1) {
        fprintf(stderr, "tubelet peek: no clips\n");
        goto end;
    }
    if ((rc = tb_loader_next(l, &b)) < 0)
        goto fail;
    if (!(sheet = draw_sheet(c, ann, b, ao.format, &cn, &W, &H)))
        goto end;
    /* Said only once the sheet is written. */
    if ((rc = tb_image_write(c->out, sheet, W, H, 1)) < 0)
        goto fail;
    printf("peek: %s: samples", c->out);
    for (int i = 0; i < b->n; i++)
        printf(" %lld", (long long)b->index[i]);
    printf(" (epoch 0, seed %d)\n", c->seed);
    status = 0;
    goto end;
fail:
    cli_report("peek", rc);
end:
    if (b)
        tb_loader_release(l, b);
    tb_loader_close(&l);
    tb_dataset_close(&ds);
    tb_ann_free(&ann);
    free(sheet);
    tb_classes_free(&cn.verbs, &cn.n_verbs);
    tb_classes_free(&cn.nouns, &cn.n_nouns);
    return status;
}

const struct cli_command cli_cmd_peek = {
    .name = "peek",
    .args = "",
    .summary = "draw a contact sheet of clips exactly as the model will see them",
    .details = "One row per clip of the loader's first batch (epoch 0 of --seed): its frames after\n"
               "sampling, crop and flip, under a line naming the sample, video, time window,\n"
               "labels and narration.",
    .flags = peek_flags,
    .n_flags = (int)(sizeof(peek_flags) / sizeof(peek_flags[0])),
    .config_size = sizeof(struct peek_config),
    .min_args = 0,
    .max_args = 0,
    .run = run_peek,
};
