/* src/data/ann_stats.c - the statistics of a loaded annotation file (tb_ann_stats_compute):
 * rows, distinct videos, clip durations, per-class counts, clips shorter than the sampler's
 * span, windows that run outside their video (past its end: clamped in training; before its
 * start), repeated rows and rows also in another split, cells that do not parse, and rows
 * whose video a prepared root lacks or the loader cannot read. Each video is
 * opened once with the clip reader, as the loader opens it (a prepared video's index; a plain
 * file decoded once); no clip is read. It prints nothing (`tubelet ann stats`,
 * src/cli/cmd_ann.c, does). Tests: tests/test_ann_stats.c. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "data/ann_internal.h"
#include "tubelet/data.h"
#include "tubelet/sample.h"

/* An item in name order: the video, then file order, so each video's rows are a run whose
 * first entry is its first line. */
struct by_video {
    const char *video;
    int item;
};

static int cmp_by_video(const void *pa, const void *pb)
{
    const struct by_video *a = pa, *b = pb;
    int c = strcmp(a->video, b->video);
    return c ? c : (a->item > b->item) - (a->item < b->item);
}

static int cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

static int cmp_class_id(const void *pa, const void *pb)
{
    const struct tb_ann_class_count *a = pa, *b = pb;
    return (a->id > b->id) - (a->id < b->id);
}

static int cmp_class_count(const void *pa, const void *pb)
{
    const struct tb_ann_class_count *a = pa, *b = pb;
    if (a->count != b->count)
        return a->count < b->count ? 1 : -1;
    return (a->id > b->id) - (a->id < b->id);
}

enum which { W_VERB, W_NOUN, W_ACTION };

/* One histogram: the rows' classes sorted and counted in runs, then ordered by count. */
static int build_hist(const struct tb_annotations *a, enum which w, struct tb_ann_hist *h)
{
    struct tb_ann_class_count *v = tbi_malloc(sizeof(*v) * (size_t)(a->n_items ? a->n_items : 1));
    if (!v)
        return tbi_err(TB_ENOMEM, "out of memory");
    int n = 0;
    for (int i = 0; i < a->n_items; i++) {
        const struct tb_ann_item *it = &a->items[i];
        int id = w == W_VERB ? it->verb : w == W_NOUN ? it->noun : it->action;
        if (id < 0)
            continue;
        v[n++] = (struct tb_ann_class_count){.id = id, .count = 1,
                                             .verb = w == W_ACTION ? it->verb : -1,
                                             .noun = w == W_ACTION ? it->noun : -1};
    }
    h->n_rows = n;
    qsort(v, (size_t)n, sizeof(*v), cmp_class_id);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k && v[k - 1].id == v[i].id)
            v[k - 1].count++;
        else
            v[k++] = v[i];
    }
    qsort(v, (size_t)k, sizeof(*v), cmp_class_count);
    h->classes = v;
    h->n_classes = k;
    return 0;
}

/* ---- repeated rows ---------------------------------------------------------------------- */

static int cmp_opt_str(const char *a, const char *b)
{
    return a && b ? strcmp(a, b) : (a != NULL) - (b != NULL);
}

/* Two rows' clips: video, then window. */
static int cmp_clip(const struct tb_ann_item *a, const struct tb_ann_item *b)
{
    int c = strcmp(a->video, b->video);
    if (c)
        return c;
    if (a->start_s != b->start_s)
        return a->start_s < b->start_s ? -1 : 1;
    if (a->end_s != b->end_s)
        return a->end_s < b->end_s ? -1 : 1;
    return 0;
}

/* Two rows as a whole, narration_id aside: the clip, the classes, the noun set, the text and
 * the captions (a Kinetics row's frame count too). */
static int cmp_row(const struct tb_ann_item *a, const struct tb_ann_item *b)
{
    int c = cmp_clip(a, b);
    if (c || (c = (a->verb > b->verb) - (a->verb < b->verb)) ||
        (c = (a->noun > b->noun) - (a->noun < b->noun)) ||
        (c = (a->n_frames > b->n_frames) - (a->n_frames < b->n_frames)) ||
        (c = (a->n_nouns > b->n_nouns) - (a->n_nouns < b->n_nouns)) ||
        (c = cmp_opt_str(a->text, b->text)) ||
        (c = (a->n_captions > b->n_captions) - (a->n_captions < b->n_captions)))
        return c;
    for (int k = 0; k < a->n_nouns && a->nouns && b->nouns; k++)
        if (a->nouns[k] != b->nouns[k])
            return a->nouns[k] < b->nouns[k] ? -1 : 1;
    for (int k = 0; k < a->n_captions; k++)
        if ((c = strcmp(tb_ann_caption(a, k), tb_ann_caption(b, k))))
            return c;
    return 0;
}

/* A row and its index, sorted by its content (ties: file order). */
struct ref {
    const struct tb_ann_item *it;
    int i;
};

static int cmp_by_row(const void *pa, const void *pb)
{
    const struct ref *a = pa, *b = pb;
    int c = cmp_row(a->it, b->it);
    return c ? c : (a->i > b->i) - (a->i < b->i);
}

static int cmp_by_clip(const void *pa, const void *pb)
{
    const struct ref *a = pa, *b = pb;
    int c = cmp_clip(a->it, b->it);
    return c ? c : (a->i > b->i) - (a->i < b->i);
}

/* A's rows in order of cmp into r (n). */
static void sort_rows(const struct tb_annotations *a, struct ref *r,
                      int (*cmp)(const void *, const void *))
{
    for (int i = 0; i < a->n_items; i++)
        r[i] = (struct ref){&a->items[i], i};
    qsort(r, (size_t)a->n_items, sizeof(*r), cmp);
}

/* Rows repeating an earlier row of a, and rows of other whose clip is one of a's. */
static int count_repeats(struct tb_ann_stats *s, const struct tb_annotations *a,
                         const struct tb_annotations *other)
{
    int n = a->n_items;
    struct ref *r = tbi_malloc(sizeof(*r) * (size_t)(n ? n : 1));
    if (!r)
        return tbi_err(TB_ENOMEM, "out of memory");
    sort_rows(a, r, cmp_by_row);
    for (int g = 0, e; g < n; g = e) /* each run of equal rows: its first in file order */
        for (e = g + 1; e < n && !cmp_row(r[g].it, r[e].it); e++) {
            s->n_duplicates++;
            if (!s->first_duplicate_line || r[e].it->line < s->first_duplicate_line) {
                s->first_duplicate_line = r[e].it->line;
                s->first_duplicate_of = r[g].it->line;
            }
        }
    s->other_checked = other != NULL;
    sort_rows(a, r, cmp_by_clip);
    for (int j = 0; other && j < other->n_items; j++) {
        const struct tb_ann_item *o = &other->items[j];
        int lo = 0, hi = n; /* the first of a's clips not below o's: its first row */
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (cmp_clip(r[mid].it, o) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == n || cmp_clip(r[lo].it, o))
            continue;
        s->n_overlap++;
        if (!s->first_overlap_line || o->line < s->first_overlap_line) {
            s->first_overlap_line = o->line;
            s->first_overlap_of = r[lo].it->line;
        }
    }
    free(r);
    return 0;
}

/* Rows whose optional cell did not parse. */
static void count_cell_errors(struct tb_ann_stats *s, const struct tb_annotations *a)
{
    for (int i = 0; i < a->n_items; i++) {
        const struct tb_ann_item *it = &a->items[i];
        if (!it->cell_error)
            continue;
        s->n_cell_errors++;
        if (!s->first_cell_error_line || it->line < s->first_cell_error_line) {
            s->first_cell_error_line = it->line;
            snprintf(s->first_cell_error, sizeof(s->first_cell_error), "%s", it->cell_error);
        }
    }
}

static void count_line(int64_t *count, int *first, int line)
{
    (*count)++;
    if (!*first || line < *first)
        *first = line;
}

enum found { F_MISSING, F_PREPARED, F_PLAIN, F_UNREADABLE };

/* What the root holds for one video, opened as the loader opens it: missing (nothing at its
 * path, or a path too long), prepared or plain (rate and length set), or unreadable (*reason:
 * the reader's message, malloc'ed). Returns the enum found, or TB_ENOMEM. */
static int look_up(tb_reader *r, const char *root, const char *ext, int kinetics,
                   const char *video, int *fps_num, int *fps_den, int64_t *n_frames,
                   char **reason)
{
    char path[4096];
    struct tb_video_info vi;
    int rc;
    if (tbi_ann_video_path(path, sizeof(path), root, ext, kinetics, video) < 0 ||
        (!tbi_is_dir(path) && !tbi_is_file(path))) {
        tb_errclear();
        return F_MISSING;
    }
    if ((rc = tb_reader_info(r, path, &vi)) == 0 && (vi.fps_num <= 0 || vi.fps_den <= 0))
        rc = tbi_err(TB_EDECODE, "%s: no frame rate", path);
    if (rc == TB_ENOMEM)
        return rc;
    if (rc < 0) {
        if (!(*reason = tbi_strdup(tb_errmsg())))
            return tbi_err(TB_ENOMEM, "out of memory");
        tb_errclear();
        return F_UNREADABLE;
    }
    *fps_num = vi.fps_num;
    *fps_den = vi.fps_den;
    *n_frames = vi.n_frames;
    return tbi_is_dir(path) ? F_PREPARED : F_PLAIN;
}

/* Append one video's entry to a list of n (missing or unreadable); reason is taken over. */
static int add_video(struct tb_ann_missing **list, int *n, const char *video, int64_t n_rows,
                     int first_line, char *reason)
{
    struct tb_ann_missing *m = tbi_realloc(*list, sizeof(*m) * (size_t)(*n + 1));
    if (!m) {
        free(reason);
        return tbi_err(TB_ENOMEM, "out of memory");
    }
    *list = m;
    m += *n;
    *m = (struct tb_ann_missing){.video = tbi_strdup(video), .n_rows = n_rows,
                                 .first_line = first_line, .reason = reason};
    (*n)++; /* counted even without its name, so tb_ann_stats_free frees the reason */
    return m->video ? 0 : tbi_err(TB_ENOMEM, "out of memory");
}

/* The rate and length (-1: unknown) that one video's rows are measured against. */
struct video_clock {
    int fps_num, fps_den;
    int64_t n_frames;
};

/* Look up one video of n_rows rows (the first on first_line) under the root: counted as
 * prepared, plain, missing or unreadable, and its rate and length into *ck when it opens. */
static int check_video(struct tb_ann_stats *s, tb_reader *reader, const char *root,
                       const char *ext, int kinetics, const char *video, int64_t n_rows,
                       int first_line, struct video_clock *ck)
{
    char *reason = NULL;
    int found = look_up(reader, root, ext, kinetics, video, &ck->fps_num, &ck->fps_den,
                        &ck->n_frames, &reason);
    if (found < 0)
        return found;
    s->n_prepared += found == F_PREPARED;
    s->n_plain += found == F_PLAIN;
    if (found == F_MISSING) {
        int rc = add_video(&s->missing, &s->n_missing, video, n_rows, first_line, NULL);
        if (rc < 0)
            return rc;
        s->n_missing_rows += n_rows;
    } else if (found == F_UNREADABLE) {
        int rc = add_video(&s->unreadable, &s->n_unreadable, video, n_rows, first_line, reason);
        if (rc < 0)
            return rc;
        s->n_unreadable_rows += n_rows;
    }
    return 0;
}

/* The frames of an EPIC or narration row's window, counting the windows that lie outside the
 * video, start before it or run past its end. */
static int64_t window_frames(struct tb_ann_stats *s, const struct tb_ann_item *it,
                             const struct video_clock *ck)
{
    int64_t first, end, frames;
    int64_t length = ck->n_frames >= 0 ? ck->n_frames : INT64_MAX / 4;
    tb_seconds_to_frames(it->start_s, it->end_s, ck->fps_num, ck->fps_den, length, &first, &end);
    frames = end > first ? end - first : 0;
    int over = tbi_ann_overrun(it->start_s, it->end_s, ck->fps_num, ck->fps_den, length);
    if (ck->n_frames >= 0 && frames == 0)
        count_line(&s->n_outside, &s->first_outside_line, it->line);
    else if (over & TBI_PAST_START)
        count_line(&s->n_past_start, &s->first_past_start_line, it->line);
    if (frames > 0 && ck->n_frames >= 0 && (over & TBI_PAST_END))
        count_line(&s->n_past_end, &s->first_past_end_line, it->line);
    return frames;
}

/* One row: its duration into dur (when it has one), and whether it is shorter than the span. */
static void count_row(struct tb_ann_stats *s, const struct tb_ann_item *it, int kinetics,
                      const struct video_clock *ck, int64_t span_frames, double *dur)
{
    int64_t frames;
    if (kinetics) {
        frames = ck->n_frames >= 0 ? ck->n_frames : it->n_frames > 0 ? it->n_frames : -1;
        if (frames >= 0)
            dur[s->n_timed++] = (double)frames * ck->fps_den / ck->fps_num;
    } else {
        frames = window_frames(s, it, ck);
        dur[s->n_timed++] = it->end_s - it->start_s;
    }
    if (frames < 0)
        return;
    s->n_counted++;
    if (frames < span_frames)
        count_line(&s->n_short, &s->first_short_line, it->line);
}

/* Total, minimum, median and maximum of the n_timed durations in dur (sorted here). */
static void summarize_durations(struct tb_ann_stats *s, double *dur)
{
    if (!s->n_timed)
        return;
    qsort(dur, (size_t)s->n_timed, sizeof(*dur), cmp_double);
    for (int64_t i = 0; i < s->n_timed; i++)
        s->total_s += dur[i];
    int64_t m = s->n_timed / 2;
    s->min_s = dur[0];
    s->max_s = dur[s->n_timed - 1];
    /* the midpoint as a + (b - a) / 2: (a + b) / 2 overflows for durations near DBL_MAX */
    s->median_s = s->n_timed % 2 ? dur[m] : dur[m - 1] + 0.5 * (dur[m] - dur[m - 1]);
}

int tb_ann_stats_compute(struct tb_ann_stats **out, const struct tb_annotations *a,
                         const struct tb_ann_stats_opts *opts)
{
    static const struct tb_ann_stats_opts defaults = {0};
    const struct tb_ann_stats_opts *o = opts ? opts : &defaults;
    struct by_video *order = NULL;
    double *dur = NULL;
    struct tb_ann_stats *s = NULL;
    tb_reader *reader = NULL;
    int rc = 0;

    *out = NULL;
    if (!a || a->n_items < 0)
        return tbi_err(TB_EINVAL, "statistics need loaded annotations");
    if (o->span_frames < 0 || o->fps_num < 0 || o->fps_den < 0 || (o->fps_num && !o->fps_den))
        return tbi_err(TB_EINVAL, "bad statistics options: span %lld frames at %d/%d fps",
                       (long long)o->span_frames, o->fps_num, o->fps_den);
    const char *root = o->root ? o->root : "", *ext = o->ext && o->ext[0] ? o->ext : "mp4";
    int def_num = o->fps_num ? o->fps_num : 30, def_den = o->fps_num ? o->fps_den : 1;
    int kinetics = a->format == TB_ANN_KINETICS, n = a->n_items;
    size_t cap = (size_t)(n ? n : 1);

    if (!(s = tbi_calloc(1, sizeof(*s))) || !(order = tbi_malloc(sizeof(*order) * cap)) ||
        !(dur = tbi_malloc(sizeof(*dur) * cap))) {
        rc = tbi_err(TB_ENOMEM, "out of memory");
        goto fail;
    }
    s->n_rows = n;
    s->root_checked = root[0] != '\0';
    if (s->root_checked && (rc = tb_reader_open(&reader, NULL)) < 0)
        goto fail;
    for (int i = 0; i < n; i++)
        order[i] = (struct by_video){a->items[i].video, i};
    qsort(order, (size_t)n, sizeof(*order), cmp_by_video);

    for (int g = 0, g_end; g < n; g = g_end) {
        for (g_end = g + 1; g_end < n && !strcmp(order[g_end].video, order[g].video); g_end++)
            ;
        s->n_videos++;
        struct video_clock ck = {def_num, def_den, -1};
        if (s->root_checked &&
            (rc = check_video(s, reader, root, ext, kinetics, order[g].video, g_end - g,
                              a->items[order[g].item].line, &ck)) < 0)
            goto fail;
        for (int k = g; k < g_end; k++)
            count_row(s, &a->items[order[k].item], kinetics, &ck, o->span_frames, dur);
    }

    summarize_durations(s, dur);
    count_cell_errors(s, a);
    if (o->other && o->other->format != a->format) {
        rc = tbi_err(TB_EINVAL, "statistics: %s and %s are of different formats", a->path,
                     o->other->path);
        goto fail;
    }
    if ((rc = count_repeats(s, a, o->other)) < 0 ||
        (rc = build_hist(a, W_VERB, &s->verb)) < 0 ||
        (rc = build_hist(a, W_NOUN, &s->noun)) < 0 ||
        (rc = build_hist(a, W_ACTION, &s->action)) < 0)
        goto fail;
    tb_reader_close(&reader);
    free(order);
    free(dur);
    *out = s;
    return 0;
fail:
    tb_reader_close(&reader);
    free(order);
    free(dur);
    tb_ann_stats_free(&s);
    return rc;
}

void tb_ann_stats_free(struct tb_ann_stats **ps)
{
    if (!ps || !*ps)
        return;
    struct tb_ann_stats *s = *ps;
    for (int i = 0; i < s->n_missing; i++)
        free(s->missing[i].video);
    free(s->missing);
    for (int i = 0; i < s->n_unreadable; i++) {
        free(s->unreadable[i].video);
        free(s->unreadable[i].reason);
    }
    free(s->unreadable);
    free(s->verb.classes);
    free(s->noun.classes);
    free(s->action.classes);
    free(s);
    *ps = NULL;
}
