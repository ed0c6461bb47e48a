/* src/data/dataset.c - annotation items to clips: which video, which frames (the sampler),
 * which crop, written into a caller's buffer by the caller's reader, then RandAugment in
 * training when asked. Every random choice of sample i in epoch e comes from one generator
 * keyed by (seed, TB_RNG_CLIP, e, i), RandAugment's from (seed, TB_RNG_RAND_AUGMENT, e, i).
 * Before the first clip, the rows no clip can be made of are dropped and those whose window
 * runs past their video counted (tb_ann_drop_unreadable): a window is clamped to its video, as
 * AVION's loader clamps it, but never without a word. Tests: tests/test_data.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "data/ann_internal.h"
#include "tubelet/data.h"
#include "tubelet/sample.h"

struct tb_dataset {
    const struct tb_annotations *ann;
    struct tb_dataset_opts o;
    char root[4096], ext[32];
    int kind;                 /* enum tb_ann_format, guessed from the items */
};

int tb_dataset_open(tb_dataset **out, const struct tb_annotations *ann,
                    const struct tb_dataset_opts *o)
{
    *out = NULL;
    if (!ann || ann->n_items <= 0)
        return tbi_err(TB_EINVAL, "a dataset needs annotations");
    if (o->n_frames < 1 || o->n_frames > 1024 || o->width < 1 || o->height < 1 ||
        o->width > 4096 || o->height > 4096)
        return tbi_err(TB_EINVAL, "bad clip shape: %d frames of %dx%d", o->n_frames, o->width,
                       o->height);
    if (o->sampler != TB_SAMPLE_SEGMENTS && o->stride < 1)
        return tbi_err(TB_EINVAL, "dense sampling needs a stride of at least 1");
    if ((unsigned)o->sampler >= TB_N_SAMPLERS)
        return tbi_err(TB_EINVAL, "no sampler %d", (int)o->sampler);
    int rc = tb_randaug_check(&o->rand_augment);
    if (rc < 0)
        return rc;
    tb_dataset *ds = tbi_calloc(1, sizeof(*ds));
    if (!ds)
        return tbi_err(TB_ENOMEM, "out of memory");
    ds->ann = ann;
    ds->o = *o;
    if (ds->o.n_views < 1 || ds->o.train)
        ds->o.n_views = 1;
    if (ds->o.n_crops != 3 || ds->o.train)
        ds->o.n_crops = 1;
    if (!ds->o.train)
        ds->o.rand_augment.n_ops = 0; /* evaluation clips are not augmented */
    snprintf(ds->root, sizeof(ds->root), "%s", o->root ? o->root : "");
    snprintf(ds->ext, sizeof(ds->ext), "%s", o->ext && o->ext[0] ? o->ext : "mp4");
    /* Kinetics items carry no time window. */
    ds->kind = ann->items[0].end_s > 0 ? TB_ANN_EPIC : TB_ANN_KINETICS;
    ds->o.root = ds->root;
    ds->o.ext = ds->ext;
    *out = ds;
    return 0;
}

void tb_dataset_close(tb_dataset **ds)
{
    if (!ds || !*ds)
        return;
    free(*ds);
    *ds = NULL;
}

int64_t tb_dataset_size(const tb_dataset *ds)
{
    return (int64_t)ds->ann->n_items * ds->o.n_views * ds->o.n_crops;
}

size_t tb_dataset_sample_bytes(const tb_dataset *ds)
{
    return (size_t)ds->o.n_frames * ds->o.width * ds->o.height * 3;
}

int tbi_ann_video_path(char *buf, size_t size, const char *root, const char *ext, int kinetics,
                       const char *video)
{
    if (kinetics)
        return root[0] && video[0] != '/' ? tbi_fmt(buf, size, "%s/%s", root, video)
                                          : tbi_fmt(buf, size, "%s", video);
    return tbi_fmt(buf, size, "%s/%s.%s", root, video, ext);
}

struct by_video {
    const char *video;
    int i;
};

static int cmp_by_video(const void *x, const void *y)
{
    const struct by_video *a = x, *b = y;
    int c = strcmp(a->video, b->video);
    return c ? c : (a->i > b->i) - (a->i < b->i);
}

/* Item it's frames [*start, *end) of its video (vi; path names it): the annotated action, or
 * the whole video where the item has no window (Kinetics); TB_ERANGE naming a's file and
 * line where the window holds no frame. */
static int item_window(const struct tb_annotations *a, const struct tb_ann_item *it,
                       int windowed, const char *path, const struct tb_video_info *vi,
                       int64_t *start, int64_t *end)
{
    *start = 0;
    *end = vi->n_frames;
    if (!windowed)
        return 0;
    tb_seconds_to_frames(it->start_s, it->end_s, vi->fps_num, vi->fps_den, vi->n_frames, start,
                         end);
    return *end > *start ? 0 : tbi_err(TB_ERANGE, "%s:%d: %s: the action (%.2f-%.2f s) is "
                                       "outside the video (%lld frames at %d/%d fps)", a->path,
                                       it->line, path, it->start_s, it->end_s,
                                       (long long)vi->n_frames, vi->fps_num, vi->fps_den);
}

int tbi_ann_overrun(double start_s, double end_s, int fps_num, int fps_den, int64_t n_frames)
{
    double fps = (double)fps_num / fps_den;
    /* tb_seconds_to_frames' rounding, before its clamp */
    return (nearbyint(start_s * fps) < 0 ? TBI_PAST_START : 0) |
           (ceil(end_s * fps - 1e-9) > (double)n_frames ? TBI_PAST_END : 0);
}

/* Where item it's window (which holds frames of its video vi) runs outside the video: noted
 * among a's clamped rows, naming the file, line and both extents. */
static void note_overrun(struct tb_annotations *a, const struct tb_ann_item *it,
                         const struct tb_video_info *vi)
{
    int o = tbi_ann_overrun(it->start_s, it->end_s, vi->fps_num, vi->fps_den, vi->n_frames);
    if (!o)
        return;
    char msg[2048];
    double len = (double)vi->n_frames * vi->fps_den / vi->fps_num;
    snprintf(msg, sizeof(msg), "%s:%d: %s: the window %.2f-%.2f s %s the video (%.2f s: %lld "
             "frames at %d/%d fps)", a->path, it->line, it->video, it->start_s, it->end_s,
             o == TBI_PAST_START ? "starts before" : o == TBI_PAST_END ? "ends past"
                                                   : "runs past both ends of",
             len, (long long)vi->n_frames, vi->fps_num, vi->fps_den);
    tbi_ann_note_clamped(a, it->line, msg);
}

/* Why item `it` of a (its video's info vi, or the open's failure rc) makes no clip: 1 with
 * the message in why, else 0. */
static int unreadable(const struct tb_annotations *a, const struct tb_ann_item *it, int rc,
                      const char *err, const struct tb_video_info *vi, char *why, size_t size)
{
    int64_t start, end;
    if (rc < 0) {
        snprintf(why, size, "%s:%d: %s", a->path, it->line, err);
        return 1;
    }
    if (item_window(a, it, a->format != TB_ANN_KINETICS, it->video, vi, &start, &end) == 0)
        return 0;
    snprintf(why, size, "%s", tb_errmsg());
    tb_errclear();
    return 1;
}

int tb_ann_drop_unreadable(struct tb_annotations *a, tb_reader *r, const char *root,
                           const char *ext)
{
    int n = a->n_items, dropped = 0, rc = 0;
    struct by_video *order = tbi_malloc(sizeof(*order) * (size_t)(n ? n : 1));
    unsigned char *drop = tbi_calloc((size_t)(n ? n : 1), 1);
    if (!order || !drop) {
        rc = tbi_err(TB_ENOMEM, "out of memory");
        goto end;
    }
    for (int i = 0; i < n; i++)
        order[i] = (struct by_video){a->items[i].video, i};
    qsort(order, (size_t)n, sizeof(*order), cmp_by_video);
    a->n_clamped = a->n_clamped_kept = 0; /* the rows kept now, counted afresh */
    root = root ? root : "";
    ext = ext && ext[0] ? ext : "mp4";
    for (int g = 0; g < n;) {
        const struct tb_ann_item *first = &a->items[order[g].i];
        char path[4096], err[1024] = "", why[1200];
        struct tb_video_info vi = {0};
        int orc = tbi_ann_video_path(path, sizeof(path), root, ext,
                                     a->format == TB_ANN_KINETICS, first->video);
        if (orc == 0)
            orc = tb_reader_info(r, path, &vi);
        if (orc < 0)
            snprintf(err, sizeof(err), "%s", orc == TB_ENOMEM ? "" : tb_errmsg());
        tb_errclear();
        if (orc == TB_ENOMEM) {
            rc = tbi_err(TB_ENOMEM, "out of memory");
            goto end;
        }
        int e = g;
        while (e < n && !strcmp(order[e].video, first->video))
            e++;
        for (; g < e; g++) {
            const struct tb_ann_item *it = &a->items[order[g].i];
            if (unreadable(a, it, orc, err, &vi, why, sizeof(why))) {
                drop[order[g].i] = 1;
                tbi_ann_note_bad(a, it->line, why);
                a->n_unreadable++;
                dropped++;
            } else if (a->format != TB_ANN_KINETICS) {
                note_overrun(a, it, &vi);
            }
        }
    }
    tbi_ann_drop(a, drop);
    if (a->n_items == 0)
        rc = tbi_err(TB_EFORMAT, "%s: no row makes a clip; first: %s", a->path, a->first_error);
end:
    free(order);
    free(drop);
    return rc < 0 ? rc : dropped;
}

int tb_dataset_get(const tb_dataset *ds, tb_reader *r, uint64_t seed, int64_t epoch, int64_t i,
                   uint8_t *out, struct tb_sample_info *info)
{
    const struct tb_dataset_opts *o = &ds->o;
    int64_t n = tb_dataset_size(ds);
    struct tb_sample_info scratch;
    char path[4096];
    int64_t frames[1024];
    int rc;

    if (!info)
        info = &scratch;
    memset(info, 0, sizeof(*info));
    if (i < 0 || i >= n)
        return tbi_err(TB_ERANGE, "sample %lld of %lld", (long long)i, (long long)n);
    int per_item = o->n_views * o->n_crops;
    const struct tb_ann_item *it = &ds->ann->items[i / per_item];
    info->item = i / per_item;
    info->view = (int)(i % per_item) / o->n_crops;
    int crop_no = (int)(i % per_item) % o->n_crops;
    info->label[0] = it->verb;
    info->label[1] = it->noun;
    info->label[2] = it->action;
    /* a clip with a caption list shows the caption of this visit (training: drawn for
     * (seed, epoch, item), AVION's random.choice; evaluation: the first) to every consumer */
    info->text = o->train && it->n_captions > 0
                     ? tb_ann_caption(it, tb_ann_caption_draw(it, seed, epoch, info->item))
                     : it->text;
    if ((rc = tbi_ann_video_path(path, sizeof(path), ds->root, ds->ext,
                                 ds->kind == TB_ANN_KINETICS, it->video)) < 0)
        return rc;

    struct tb_video_info vi;
    if ((rc = tb_reader_info(r, path, &vi)) < 0)
        return tbi_err_prefix(rc, "%s:%d", ds->ann->path, it->line);
    int64_t start, end;
    if ((rc = item_window(ds->ann, it, ds->kind != TB_ANN_KINETICS, path, &vi, &start, &end)) < 0)
        return rc;
    tb_rng rng;
    tb_rng_init_for(&rng, seed, TB_RNG_CLIP, (uint64_t)epoch, (uint64_t)i);
    if (o->sampler != TB_SAMPLE_SEGMENTS) {
        int64_t span_frames = end - start;
        rc = (o->sampler == TB_SAMPLE_DENSE ? tb_sample_dense : tb_sample_dense_jitter)(
            span_frames, o->n_frames, o->stride, o->train ? -1 : info->view, o->n_views, &rng,
            frames);
        for (int k = 0; rc == 0 && k < o->n_frames; k++)
            frames[k] += start;
    } else if (o->train) {
        rc = tb_sample_segments(start, end, o->n_frames, 1, &rng, frames);
    } else {
        rc = tb_sample_segments_view(start, end, o->n_frames, info->view, o->n_views, frames);
    }
    if (rc < 0)
        return tbi_err_prefix(rc, "%s:%d", ds->ann->path, it->line);
    /* Evaluation: the centre square of the short side, or (crops 1 and 2) the squares at
     * both ends of the long side, as three-crop testing does. */
    struct tb_crop_spec eval = {.mode = TB_CROP_CENTER};
    if (!o->train && crop_no > 0) {
        int side = vi.width < vi.height ? vi.width : vi.height;
        int far_x = crop_no == 2 && vi.width > side ? vi.width - side : 0;
        int far_y = crop_no == 2 && vi.height > side ? vi.height - side : 0;
        eval = (struct tb_crop_spec){.mode = TB_CROP_FIXED, .x = far_x, .y = far_y, .w = side,
                                     .h = side};
    }
    rc = tb_reader_read(r, path, frames, o->n_frames, o->train ? &o->crop : &eval, &rng,
                        o->width, o->height, out, &info->clip);
    /* RandAugment on the cropped (and flipped) frames, from its own stream */
    if (rc == 0 && o->rand_augment.n_ops > 0) {
        struct tb_ra_plan plan;
        tb_randaug_draw(&o->rand_augment, seed, epoch, i, &plan);
        rc = tb_randaug_apply(&plan, &o->rand_augment, out, o->n_frames, o->width, o->height);
    }
    return rc;
}
