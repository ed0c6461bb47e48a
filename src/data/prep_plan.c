/* src/data/prep_plan.c - prep --plan's cost model (contract in prep_plan.h): encode a sample
 * with each candidate, time its decoding per kind of frame, count the frames the reader
 * decodes for the CSV's clips, calibrate the reader's per-clip cost once, predict. The two
 * video-level parts, the timing and the reader's counting rule (tb_plan_count_clip), live in
 * src/video/decode_cost.c; this file draws the clips from annotations and runs the loader.
 * It does not print or pick flags for the user beyond the choice; the CLI does the rest.
 * Tests: tests/test_prep_plan.c. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"
#include "tubelet/data.h"
#include "tubelet/prep_plan.h"
#include "tubelet/sample.h"
#include "tubelet/video.h"

#define MAX_CLIP_FRAMES 64

int tb_plan_default_encodings(int short_side, struct tb_plan_encoding *out)
{
    static const int gops[] = {250, 30, 16, 8};
    static const int sides[] = {256, 288, 320};
    int n = 0;
    for (int g = 0; g < 4; g++)
        for (int b = 1; b >= 0; b--)
            out[n++] = (struct tb_plan_encoding){gops[g], b, 1, short_side};
    out[n++] = (struct tb_plan_encoding){1, 0, 1, short_side};
    out[n++] = (struct tb_plan_encoding){250, 1, 0, short_side};
    out[n++] = (struct tb_plan_encoding){30, 1, 0, short_side};
    out[n++] = (struct tb_plan_encoding){8, 0, 0, short_side};
    for (int s = 0; s < 3; s++) {
        if (sides[s] == short_side)
            continue;
        out[n++] = (struct tb_plan_encoding){16, 0, 1, sides[s]};
        out[n++] = (struct tb_plan_encoding){8, 0, 1, sides[s]};
    }
    TB_ASSERT(n <= TB_PLAN_MAX_ENCODINGS);
    return n;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int find_name(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s))
            return i;
    return -1;
}

int tb_plan_draw_clips(const char *ann_path, const char *const *names,
                       const int64_t *n_frames_video, int n_videos, int fps_num, int fps_den,
                       int n_frames, int n_clips, uint64_t seed, int64_t *out, int *video_of)
{
    struct tb_annotations *ann = NULL;
    struct tb_ann_opts ao = {.format = TB_ANN_EPIC};
    int rc = tb_ann_load(&ann, ann_path, &ao);
    if (rc < 0)
        return rc;
    int *use = tbi_malloc(sizeof(*use) * (size_t)(ann->n_items + 1));
    if (!use) {
        tb_ann_free(&ann);
        return tbi_err(TB_ENOMEM, "out of memory");
    }
    int n_use = 0;
    for (int i = 0; i < ann->n_items; i++) {
        int v = find_name(names, n_videos, ann->items[i].video);
        int64_t s, e;
        if (v < 0)
            continue;
        tb_seconds_to_frames(ann->items[i].start_s, ann->items[i].end_s, fps_num, fps_den,
                             n_frames_video[v], &s, &e);
        if (e > s)
            use[n_use++] = i;
    }
    tb_rng rng;
    tb_rng_init_for(&rng, seed, TB_RNG_PLAN, 0, 0);
    for (int c = 0; n_use > 0 && c < n_clips; c++) {
        const struct tb_ann_item *it = &ann->items[use[tb_rng_below(&rng, (uint64_t)n_use)]];
        int v = find_name(names, n_videos, it->video);
        int64_t s, e, *f = out + (size_t)c * (size_t)n_frames;
        tb_seconds_to_frames(it->start_s, it->end_s, fps_num, fps_den, n_frames_video[v], &s, &e);
        if ((rc = tb_sample_segments(s, e, n_frames, 1, &rng, f)) < 0) {
            rc = tbi_err_prefix(rc, "%s:%d", ann_path, it->line);
            goto end;
        }
        qsort(f, (size_t)n_frames, sizeof(*f), cmp_i64);
        if (video_of)
            video_of[c] = v;
    }
    rc = n_use;
end:
    free(use);
    tb_ann_free(&ann);
    return rc;
}

/* ---- the plan ---------------------------------------------------------------------------- */

struct source {
    const char *path;
    char stem[256];
    int64_t n_frames; /* at the output rate, from the container's duration */
};

struct plan_run {
    const struct tb_plan_opts *o;
    struct tb_plan *p;
    struct source *src;
    const char **names;
    int n_src;
    int sample[64];   /* sources sampled */
    int n_sample;
    int64_t *clips;   /* n_clips x n_frames, from the CSV */
    int n_clips;
    int64_t sample_frames;
};

static int check_opts(const struct tb_plan_opts *o)
{
    if (!o->srcs || o->n_srcs <= 0)
        return tbi_err(TB_EINVAL, "prep --plan needs at least one source video");
    if (!o->ann_path || !o->ann_path[0])
        return tbi_err(TB_EINVAL, "prep --plan needs the annotation CSV (--ann FILE)");
    if (!(o->target > 0) || !isfinite(o->target) || o->target > 1e6)
        return tbi_err(TB_EINVAL, "target of %g clips per core per second makes no sense "
                       "(it must be above 0 and at most 1e6)", o->target);
    if (o->n_frames < 1 || o->n_frames > MAX_CLIP_FRAMES)
        return tbi_err(TB_EINVAL, "%d frames per clip: expected 1 to %d", o->n_frames,
                       MAX_CLIP_FRAMES);
    if (!o->prep || o->prep->fps_num <= 0 || o->prep->fps_den <= 0 ||
        o->prep->chunk_seconds <= 0)
        return tbi_err(TB_EINVAL, "prep --plan: bad frame rate or chunk length");
    if (!o->work_dir || !o->work_dir[0])
        return tbi_err(TB_EINVAL, "prep --plan needs a scratch directory");
    if (o->sample_seconds < 0 || o->n_sample_videos < 0 || o->n_clips < 0 ||
        o->n_calib_clips < 0)
        return tbi_err(TB_EINVAL, "prep --plan: negative sample size");
    return 0;
}

static void stem_of(char *buf, size_t size, const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(buf, size, "%s", b);
    char *dot = strrchr(buf, '.');
    if (dot && dot != buf)
        *dot = '\0';
}

/* Each source's stem and length at the output rate (the container's duration; no decode). */
static int probe_sources(struct plan_run *r)
{
    const struct tb_prep_opts *po = r->o->prep;
    for (int i = 0; i < r->n_src; i++) {
        struct tb_probe *pr = NULL;
        int rc = tb_probe(&pr, r->o->srcs[i], 0);
        if (rc < 0)
            return rc;
        double d = pr->duration > 0 ? pr->duration : 0;
        tb_probe_free(&pr);
        r->src[i].path = r->o->srcs[i];
        stem_of(r->src[i].stem, sizeof(r->src[i].stem), r->o->srcs[i]);
        r->names[i] = r->src[i].stem;
        r->src[i].n_frames = (int64_t)floor(d * po->fps_num / po->fps_den + 0.5);
        if (r->src[i].n_frames < 1)
            return tbi_err(TB_EDECODE, "%s: no duration in its container; prep it and plan "
                           "on the prepared video's source again", r->o->srcs[i]);
    }
    return 0;
}

static int draw_csv_clips(struct plan_run *r)
{
    const struct tb_plan_opts *o = r->o;
    int64_t *nf = tbi_malloc(sizeof(*nf) * (size_t)r->n_src);
    int *video_of = tbi_malloc(sizeof(*video_of) * (size_t)r->n_clips);
    r->clips = tbi_malloc(sizeof(*r->clips) * (size_t)r->n_clips * (size_t)o->n_frames);
    int rc;
    if (!nf || !video_of || !r->clips) {
        rc = tbi_err(TB_ENOMEM, "out of memory");
        goto end;
    }
    for (int i = 0; i < r->n_src; i++)
        nf[i] = r->src[i].n_frames;
    rc = tb_plan_draw_clips(o->ann_path, r->names, nf, r->n_src, o->prep->fps_num,
                            o->prep->fps_den, o->n_frames, r->n_clips, o->seed, r->clips,
                            video_of);
    if (rc == 0)
        rc = tbi_err(TB_EINVAL, "%s: no row names any of the %d source videos with a window "
                     "inside it (video ids are file stems, e.g. '%s')", o->ann_path, r->n_src,
                     r->names[0]);
    if (rc < 0)
        goto end;
    r->p->n_actions = rc;
    /* Sample the videos that have clips, spread over the list. */
    int *cand = tbi_calloc((size_t)r->n_src, sizeof(*cand)), n_has = 0;
    if (!cand) {
        rc = tbi_err(TB_ENOMEM, "out of memory");
        goto end;
    }
    for (int c = 0; c < r->n_clips; c++)
        cand[video_of[c]] = 1;
    for (int i = 0; i < r->n_src; i++)
        if (cand[i])
            cand[n_has++] = i;
    r->p->n_videos = n_has;
    int want = o->n_sample_videos ? o->n_sample_videos : 4;
    want = want < n_has ? want : n_has;
    want = want < 64 ? want : 64;
    for (int k = 0; k < want; k++)
        r->sample[r->n_sample++] = cand[(int)((int64_t)k * n_has / want)];
    free(cand);
    rc = 0;
end:
    free(nf);
    free(video_of);
    return rc;
}

static void row_dir(const struct plan_run *r, int row, char *buf, size_t size)
{
    snprintf(buf, size, "%s/e%d", r->o->work_dir, row);
}

/* Encode the sample with row's settings and time decoding each of its chunks. */
static int measure_row(struct plan_run *r, int row)
{
    struct tb_plan_row *pr = &r->p->rows[row];
    struct tb_prep_opts po = *r->o->prep;
    char dir[4096];
    row_dir(r, row, dir, sizeof(dir));
    po.out_root = dir;
    po.gop = pr->enc.gop;
    po.no_bframes = !pr->enc.bframes;
    po.tune = pr->enc.fastdecode ? "fastdecode" : "none";
    po.short_side = pr->enc.short_side;
    po.max_frames = r->sample_frames;
    po.overwrite = 1;
    po.cancel = r->o->cancel;
    struct tb_decode_cost sum = {0};
    int64_t frames = 0;
    double open_s = 0;
    int n_chunks = 0;
    for (int k = 0; k < r->n_sample; k++) {
        struct tb_prep_result res;
        const char *src = r->src[r->sample[k]].path;
        int rc = tb_prep_video(&po, src, &res);
        if (rc < 0)
            return rc;
        struct tb_video_index *idx = NULL;
        char vdir[4096 + 300], path[4096 + 400];
        snprintf(vdir, sizeof(vdir), "%s/%s", dir, res.name);
        if ((rc = tb_index_load(&idx, vdir)) < 0)
            return rc;
        for (int c = 0; c < idx->n_chunks && rc == 0; c++) {
            struct tb_decode_cost dc;
            snprintf(path, sizeof(path), "%s/%s", vdir, idx->chunks[c].file);
            if ((rc = tb_decode_cost_measure(path, 2, &dc)) < 0)
                break;
            sum.n_key += dc.n_key, sum.n_ref += dc.n_ref, sum.n_disposable += dc.n_disposable;
            sum.key_s += dc.key_s, sum.ref_s += dc.ref_s;
            sum.bytes += dc.bytes;
            sum.delay = dc.delay > sum.delay ? dc.delay : sum.delay;
            open_s += dc.open_s;
            n_chunks++;
        }
        frames += idx->n_frames;
        tb_index_free(&idx);
        if (rc < 0)
            return rc;
    }
    const struct tb_prep_opts *u = r->o->prep;
    double hours = (double)frames * u->fps_den / u->fps_num / 3600;
    pr->mb_per_hour = hours > 0 ? (double)sum.bytes / 1e6 / hours : 0;
    pr->key_us = 1e6 * sum.key_s / (double)sum.n_key;
    pr->ref_us = sum.n_ref ? 1e6 * sum.ref_s / (double)sum.n_ref : pr->key_us;
    pr->skip_fraction = sum.n_ref + sum.n_disposable
                            ? (double)sum.n_disposable / (double)(sum.n_ref + sum.n_disposable)
                            : 0;
    pr->delay = sum.delay;
    r->p->open_us += 1e6 * open_s / n_chunks; /* averaged over the rows later */
    return 0;
}

static void count_row(struct plan_run *r, struct tb_plan_row *pr)
{
    const struct tb_prep_opts *u = r->o->prep;
    int64_t chunk_frames = (int64_t)u->chunk_seconds * u->fps_num / u->fps_den;
    double f = 0, k = 0, op = 0, t = 0;
    for (int c = 0; c < r->n_clips; c++)
        tb_plan_count_clip(r->clips + (size_t)c * (size_t)r->o->n_frames, r->o->n_frames,
                           chunk_frames, pr->enc.gop, pr->skip_fraction, &f, &k, &op, &t);
    pr->frames_per_clip = f / r->n_clips;
    pr->tails_per_clip = t / r->n_clips;
    pr->keys_per_clip = k / r->n_clips;
    pr->opens_per_clip = op / r->n_clips;
}

/* Windows of 1 s up to the whole sample over the sampled videos, as annotation rows. */
static int sample_rows(const struct plan_run *r, struct tb_annotations *a, int n_rows)
{
    const struct tb_prep_opts *u = r->o->prep;
    double len = (double)r->sample_frames * u->fps_den / u->fps_num;
    tb_rng rng;
    tb_rng_init_for(&rng, r->o->seed, TB_RNG_PLAN, 1, 0);
    if (!(a->items = tbi_calloc((size_t)n_rows, sizeof(*a->items))))
        return tbi_err(TB_ENOMEM, "out of memory");
    a->n_items = n_rows;
    a->format = TB_ANN_EPIC;
    snprintf(a->path, sizeof(a->path), "(prep --plan sample)");
    for (int i = 0; i < n_rows; i++) {
        struct tb_ann_item *it = &a->items[i];
        double d = len > 1 ? 1 + (len - 1) * (double)tb_rng_below(&rng, 1000) / 1000 : len;
        it->start_s = (len - d) * (double)tb_rng_below(&rng, 1000) / 1000;
        it->end_s = it->start_s + d;
        it->video = r->src[r->sample[i % r->n_sample]].stem;
        it->verb = it->noun = it->action = 0;
        it->line = i + 1;
    }
    return 0;
}

static double process_cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Run the loader as bench-load runs it over the sample of row `row`: n clips, 2 workers,
 * batches of 16, random-resized crop to size and flips. *cpu_s: process CPU time;
 * *decoded: frames the decoders returned. */
static int run_loader(const struct plan_run *r, int row, int n, int size, double *cpu_s,
                      int64_t *decoded)
{
    struct tb_annotations ann = {0};
    tb_dataset *ds = NULL;
    tb_loader *l = NULL;
    char dir[4096];
    row_dir(r, row, dir, sizeof(dir));
    struct tb_dataset_opts dopts = {
        .root = dir, .ext = r->o->prep->ext, .sampler = TB_SAMPLE_SEGMENTS,
        .n_frames = r->o->n_frames, .train = 1, .width = size, .height = size,
        .crop = {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = 0.08, .scale_max = 1,
                 .ratio_min = 3.0 / 4, .ratio_max = 4.0 / 3, .flip = TB_FLIP_RANDOM},
    };
    struct tb_loader_opts lo = {.batch_size = 16, .n_workers = 2, .prefetch = 2,
                                .seed = r->o->seed, .shuffle = 1, .world = 1};
    int rc = sample_rows(r, &ann, 64);
    if (rc < 0 || (rc = tb_dataset_open(&ds, &ann, &dopts)) < 0 ||
        (rc = tb_loader_open(&l, ds, &lo)) < 0)
        goto end;
    double t0 = process_cpu_s();
    int64_t clips = 0;
    for (int64_t epoch = 0; rc == 0 && clips < n; epoch++) {
        int64_t nb = tb_loader_epoch(l, epoch);
        if (nb < 0) {
            rc = (int)nb;
            break;
        }
        for (int64_t k = 0; k < nb && clips < n; k++) {
            struct tb_batch *b = NULL;
            if ((rc = tb_loader_next(l, &b)) < 0)
                break;
            clips += b->n;
            tb_loader_release(l, b);
        }
    }
    *cpu_s = process_cpu_s() - t0;
    struct tb_loader_stats st;
    tb_loader_get_stats(l, &st);
    *decoded = st.frames_decoded;
    if (rc == 0 && clips != n)
        rc = tbi_err(TB_EINVAL, "prep --plan: %lld calibration clips, not %d", (long long)clips,
                     n);
end:
    tb_loader_close(&l);
    tb_dataset_close(&ds);
    free(ann.items);
    return rc;
}

/* The cost per clip beyond decoding and opening chunks, from the loader on the sample of the
 * eligible row with the shortest keyframe interval (all-intra when listed: every frame it
 * decodes is a keyframe, so its decode cost is known exactly). The sample's few files stay
 * open in the readers, so opens are left out here and counted per row. */
static int calibrate(struct plan_run *r)
{
    struct tb_plan *p = r->p;
    int best = -1;
    for (int i = 0; i < p->n_rows; i++)
        if (p->rows[i].eligible && (best < 0 || p->rows[i].enc.gop < p->rows[best].enc.gop))
            best = i;
    if (best < 0)
        best = 0;
    p->calib_row = best;
    const struct tb_plan_row *pr = &p->rows[best];
    int n = r->o->n_calib_clips ? r->o->n_calib_clips : 320;
    n = (n + 15) / 16 * 16;
    double cpu = 0;
    int64_t decoded = 0;
    int rc = run_loader(r, best, n, r->o->out_size ? r->o->out_size : 224, &cpu, &decoded);
    if (rc < 0)
        return rc;
    double keys = pr->enc.gop == 1 ? (double)decoded : (double)decoded * pr->keys_per_clip /
                                                           pr->frames_per_clip;
    double model = keys * pr->key_us + ((double)decoded - keys) * pr->ref_us +
                   2.0 * r->n_sample * p->open_us;
    p->overhead_us = (1e6 * cpu - model) / n;
    if (p->overhead_us < 0)
        p->overhead_us = 0;
    return 0;
}

static void predict(struct tb_plan *p, double target)
{
    p->chosen = -1;
    for (int i = 0; i < p->n_rows; i++) {
        struct tb_plan_row *pr = &p->rows[i];
        pr->clip_us = pr->keys_per_clip * pr->key_us +
                      (pr->frames_per_clip - pr->keys_per_clip) * pr->ref_us +
                      pr->tails_per_clip * pr->delay * pr->ref_us +
                      pr->opens_per_clip * p->open_us + p->overhead_us;
        pr->clips_per_core = 1e6 / pr->clip_us;
        pr->meets = pr->eligible && pr->clips_per_core >= target;
        if (pr->meets && (p->chosen < 0 || pr->mb_per_hour < p->rows[p->chosen].mb_per_hour))
            p->chosen = i;
    }
}

static int make_rows(struct plan_run *r)
{
    const struct tb_plan_opts *o = r->o;
    struct tb_plan_encoding def[TB_PLAN_MAX_ENCODINGS];
    const struct tb_plan_encoding *e = o->encodings;
    int n = o->n_encodings;
    if (!e) {
        n = tb_plan_default_encodings(o->prep->short_side, def);
        e = def;
    }
    if (n <= 0)
        return tbi_err(TB_EINVAL, "prep --plan: no candidate encodings");
    if (!(r->p->rows = tbi_calloc((size_t)n, sizeof(*r->p->rows))))
        return tbi_err(TB_ENOMEM, "out of memory");
    r->p->n_rows = n;
    for (int i = 0; i < n; i++) {
        if (e[i].gop < 1 || e[i].short_side < 0)
            return tbi_err(TB_EINVAL, "prep --plan: bad candidate (gop %d, short side %d)",
                           e[i].gop, e[i].short_side);
        r->p->rows[i].enc = e[i];
        r->p->rows[i].eligible = e[i].short_side == o->prep->short_side;
    }
    return 0;
}

static int run(struct plan_run *r)
{
    const struct tb_plan_opts *o = r->o;
    int rc;
    r->n_src = o->n_srcs;
    r->n_clips = o->n_clips ? o->n_clips : 4000;
    double secs = o->sample_seconds > 0 ? o->sample_seconds : 3;
    r->sample_frames = (int64_t)ceil(secs * o->prep->fps_num / o->prep->fps_den);
    r->p->sample_seconds = secs;
    if (!(r->src = tbi_calloc((size_t)r->n_src, sizeof(*r->src))) ||
        !(r->names = tbi_calloc((size_t)r->n_src, sizeof(*r->names))))
        return tbi_err(TB_ENOMEM, "out of memory");
    if ((rc = make_rows(r)) < 0 || (rc = probe_sources(r)) < 0 || (rc = draw_csv_clips(r)) < 0)
        return rc;
    r->p->n_sample_videos = r->n_sample;
    if ((rc = tbi_mkdirs(o->work_dir)) < 0)
        return rc;
    for (int i = 0; i < r->p->n_rows; i++) {
        if (o->cancel && *o->cancel)
            return tbi_err(TB_ECANCELED, "prep --plan: canceled");
        if ((rc = measure_row(r, i)) < 0)
            return rc;
        count_row(r, &r->p->rows[i]);
    }
    r->p->open_us /= r->p->n_rows;
    if ((rc = calibrate(r)) < 0)
        return rc;
    predict(r->p, o->target);
    return 0;
}

int tb_plan_make(struct tb_plan **out, const struct tb_plan_opts *opts)
{
    double t0 = tbi_now_s();
    *out = NULL;
    int rc = check_opts(opts);
    if (rc < 0)
        return rc;
    struct tb_plan *p = tbi_calloc(1, sizeof(*p));
    if (!p)
        return tbi_err(TB_ENOMEM, "out of memory");
    struct plan_run r = {.o = opts, .p = p};
    p->chosen = -1;
    rc = run(&r);
    for (int i = 0; p->rows && i < p->n_rows; i++) {
        char dir[4096];
        row_dir(&r, i, dir, sizeof(dir));
        tbi_remove_tree(dir);
    }
    free(r.src);
    free(r.names);
    free(r.clips);
    if (rc < 0) {
        tb_plan_free(&p);
        return rc;
    }
    p->seconds = tbi_now_s() - t0;
    *out = p;
    return 0;
}

void tb_plan_free(struct tb_plan **pp)
{
    if (!pp || !*pp)
        return;
    free((*pp)->rows);
    free(*pp);
    *pp = NULL;
}
