/* tests/test_ann_stats.c - tb_ann_stats_compute and `tubelet ann stats` on an EK-100-shaped CSV
 * the test writes (EK-100's 15 columns, quoted list columns with commas inside, a missing
 * narration timestamp, empty start and stop times, a bad row, a blank line) against a
 * prepared root made by synth + prep at 15 fps (two videos), a plain file and a missing video
 * (and, in a second file, videos there that the loader cannot read, with their reasons):
 * every count is computed here from the rows as written; the bad rows are named by line; the
 * JSON report is valid JSON holding the same numbers; Kinetics lists and narration CSVs;
 * windows that run past their video's end or before its start, repeated rows and rows also in
 * another split (--val), each counted with its first line, and EPIC cells only some runs read
 * that do not parse; bad flags, a missing file and a file of bad rows are clear errors. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "tb_test.h"
#include "tubelet/data.h"
#include "tubelet/video.h"

enum { N_GEN = 48, N_VIDEOS = 4, SPAN = 16, MAX_CLASS = 16 };

/* The rows as the test writes them. */
struct row {
    const char *video;
    double start_s, end_s;
    int verb, noun, other_noun;
    int line;
};

static const char *const videos[N_VIDEOS] = {"P01_01", "P01_02", "P02_07", "P03_01"};
enum { V_PREP0, V_PREP1, V_MISSING, V_PLAIN };

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void timestamp(char *buf, size_t size, double s)
{
    int h = (int)(s / 3600), m = (int)(s / 60) % 60;
    snprintf(buf, size, "%02d:%02d:%05.2f", h, m, s - h * 3600 - m * 60);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- a small JSON checker: the report must be one valid value ------------------------- */

static const char *json_value(const char *p);

static const char *json_ws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
        p++;
    return p;
}

static const char *json_string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    for (; *p != '"'; p++) {
        if (!*p || (unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\' && !*++p)
            return NULL;
    }
    return p + 1;
}

static const char *json_value(const char *p)
{
    p = json_ws(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = json_ws(p + 1);
        if (*p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (!(p = json_string(json_ws(p))) || *(p = json_ws(p)) != ':')
                    return NULL;
                p++;
            }
            if (!(p = json_value(p)))
                return NULL;
            p = json_ws(p);
            if (*p == close)
                return p + 1;
            if (*p++ != ',')
                return NULL;
        }
    }
    if (*p == '"')
        return json_string(p);
    if (!strncmp(p, "null", 4) || !strncmp(p, "true", 4))
        return p + 4;
    if (!strncmp(p, "false", 5))
        return p + 5;
    char *end;
    strtod(p, &end);
    return end > p ? end : NULL;
}

static int json_valid(const char *s)
{
    const char *end = s ? json_value(s) : NULL;
    return end && !*json_ws(end);
}

/* The number after "key": at its first place in s, or -1. */
static long long json_int(const char *s, const char *key)
{
    char k[128];
    snprintf(k, sizeof(k), "\"%s\": ", key);
    const char *p = s ? strstr(s, k) : NULL;
    return p ? strtoll(p + strlen(k), NULL, 10) : -1;
}

/* ---- the EK-100-shaped file ------------------------------------------------------------- */

static const char header[] =
    "narration_id,participant_id,video_id,narration_timestamp,start_timestamp,"
    "stop_timestamp,start_frame,stop_frame,narration,verb,verb_class,noun,noun_class,"
    "all_nouns,all_noun_classes\n";

static const char *const verb_names[5] = {"take", "put", "open", "wash", "cut"};
static const char *const noun_names[7] = {"tap", "cup", "knife", "water", "pan", "lid", "bag"};

/* Writes the rows (and the broken ones) to path; good[] gets the rows that should load, with
 * their lines. Returns how many; *bad_line the 'x' verb row's line, untimed[2] the lines of
 * the rows without a start and without a stop time, *no_narr_ts the row without a narration
 * timestamp. */
static int write_epic(const char *path, struct row *good, int *bad_line, int untimed[2],
                      int *no_narr_ts)
{
    FILE *f = fopen(path, "w");
    uint64_t seed = 7;
    int line = 1, n = 0;
    static const double durations[] = {0.4, 0.8, 1.2, 2.0, 4.0};
    fputs(header, f);
    for (int i = 0; i < N_GEN; i++) {
        struct row r = {0};
        r.video = videos[lcg(&seed) % N_VIDEOS];
        /* Windows on 0.2 s steps: whole frames at 15 and 30 fps, inside a 10 s video. */
        r.start_s = 0.2 * (double)(lcg(&seed) % 30);
        r.end_s = r.start_s + durations[lcg(&seed) % 5];
        r.verb = (int)(lcg(&seed) % 5);
        r.noun = (int)(lcg(&seed) % 7);
        r.other_noun = (int)(lcg(&seed) % 7);
        if (i == 5) { /* past the end of a prepared 10 s video */
            r.video = videos[V_PREP0];
            r.start_s = 12;
            r.end_s = 13;
        }
        char ts[32], te[32], tn[32];
        timestamp(ts, sizeof(ts), r.start_s);
        timestamp(te, sizeof(te), r.end_s);
        timestamp(tn, sizeof(tn), r.start_s);
        line++;
        if (i == 9) { /* EK-100 style: the row is fine without a narration timestamp */
            tn[0] = '\0';
            *no_narr_ts = line;
        }
        if (i == 14) {
            fprintf(f, "\n"); /* blank lines count in the numbering */
            line++;
        }
        char vc[16];
        snprintf(vc, sizeof(vc), "%d", r.verb);
        if (i == 20) {
            ts[0] = '\0';
            untimed[0] = line;
        } else if (i == 31) {
            te[0] = '\0';
            untimed[1] = line;
        } else if (i == 26) {
            snprintf(vc, sizeof(vc), "x");
            *bad_line = line;
        }
        fprintf(f, "%s_%d,%.3s,%s,%s,%s,%s,%d,%d,\"%s %s, then wash\",%s,%s,%s,%d,"
                   "\"['%s', '%s']\",\"[%d, %d]\"\n",
                r.video, i, r.video, r.video, tn, ts, te, (int)(r.start_s * 60),
                (int)(r.end_s * 60), verb_names[r.verb], noun_names[r.noun],
                verb_names[r.verb], vc, noun_names[r.noun], r.noun, noun_names[r.noun],
                noun_names[r.other_noun], r.noun, r.other_noun);
        if (i == 20 || i == 31 || i == 26)
            continue;
        r.line = line;
        good[n++] = r;
    }
    fclose(f);
    return n;
}

/* The histogram h against counts[] (MAX_CLASS classes): every class, its count, the order. */
static void check_hist(const struct tb_ann_hist *h, const int64_t *counts, int64_t n_rows,
                       const char *what)
{
    int distinct = 0;
    for (int k = 0; k < MAX_CLASS; k++)
        distinct += counts[k] > 0;
    CHECK_MSG(h->n_classes == distinct, "%s: %d classes, expected %d", what, h->n_classes,
              distinct);
    CHECK_EQ(h->n_rows, n_rows);
    for (int i = 0; i < h->n_classes && i < distinct; i++) {
        const struct tb_ann_class_count *c = &h->classes[i];
        CHECK_MSG(c->id >= 0 && c->id < MAX_CLASS && c->count == counts[c->id],
                  "%s: class %d has %lld rows, expected %lld", what, c->id, (long long)c->count,
                  (long long)(c->id >= 0 && c->id < MAX_CLASS ? counts[c->id] : -1));
        if (i)
            CHECK_MSG(c[-1].count > c->count || (c[-1].count == c->count && c[-1].id < c->id),
                      "%s: class %d before %d is out of order", what, c[-1].id, c->id);
    }
}

/* Frames of a window at fps, for windows on whole frames; clamped to a video of n frames. */
static int64_t window_frames(const struct row *r, double fps, int64_t n)
{
    int64_t s = llround(r->start_s * fps), e = llround(r->end_s * fps);
    if (e > n)
        e = n;
    if (s > e)
        s = e;
    return e - s;
}

/* A narration row of the repeats test, and what it should count. */
struct nrow {
    const char *video;
    double start_s, end_s;
    const char *text;
};

/* Windows that run past their video (its end at the prepared video's 15 fps, its start
 * whatever the video), repeated rows, rows also in a validation file, and (EPIC) cells that
 * do not parse: the library's counts and first lines against the rows as written here, then
 * the report and its JSON. prep0 holds the frames of the prepared P01_01. */
static void check_repeats(const char *t, const char *d, const char *root, int64_t prep0)
{
    tbt_case = "windows, repeats, another split";
    double end = (double)prep0 / 15; /* P01_01's length */
    const struct nrow rows[] = {
        {"P01_01", 1, 2, "take cup"},
        {"P01_01", end - 1, end + 0.2, "past the end"},   /* 3 frames past */
        {"P01_01", 1, 2, "take cup"},                      /* a repeat of line 2 */
        {"P01_01", 1, 2, "take the cup"},                  /* the same clip, other text */
        {"P01_01", -0.4, 1, "before the start"},
        {"P01_01", end + 1, end + 2, "outside"},
        {"P01_01", end - 1, end, "to the end"},            /* inside */
        {"P02_07", -1, 1, "before a missing video"},       /* no root knows it: counted */
        {"P01_01", end - 1, end + 0.2, "past the end"},    /* a repeat of line 3 */
    };
    const struct nrow val[] = {
        {"P01_01", 5, 6, "new"},
        {"P01_01", 1, 2, "take a cup"},                    /* train's clip of lines 2, 4, 5 */
        {"P01_01", end - 1, end + 0.2, "x"},               /* train's line 3 */
    };
    int n = (int)(sizeof(rows) / sizeof(rows[0])), n_val = (int)(sizeof(val) / sizeof(val[0]));
    char train_p[4400], val_p[4400], *out = NULL;
    snprintf(train_p, sizeof(train_p), "%s/repeats.csv", d);
    snprintf(val_p, sizeof(val_p), "%s/repeats_val.csv", d);
    FILE *f = fopen(train_p, "w"), *g = fopen(val_p, "w");
    fprintf(f, "video_id,start_s,end_s,text\n");
    fprintf(g, "video_id,start_s,end_s,text\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "%s,%.4f,%.4f,%s\n", rows[i].video, rows[i].start_s, rows[i].end_s,
                rows[i].text);
    for (int i = 0; i < n_val; i++)
        fprintf(g, "%s,%.4f,%.4f,%s\n", val[i].video, val[i].start_s, val[i].end_s,
                val[i].text);
    fclose(f);
    fclose(g);
    /* expected, from the rows: frames of whole 1/15 s; the windows here fall on them */
    int64_t past_end = 0, past_start = 0, dups = 0, both = 0;
    int first_end = 0, first_start = 0, first_dup = 0, dup_of = 0, first_both = 0, both_of = 0;
    for (int i = 0; i < n; i++) {
        const struct nrow *r = &rows[i];
        int64_t s = llround(r->start_s * 15), e = llround(r->end_s * 15);
        int prepared = !strcmp(r->video, "P01_01"), inside = !prepared || (s < prep0 && e > 0);
        if (prepared && inside && e > prep0 && !past_end++)
            first_end = i + 2;
        if (inside && s < 0 && !past_start++)
            first_start = i + 2;
        for (int j = 0; j < i; j++)
            if (!strcmp(r->video, rows[j].video) && r->start_s == rows[j].start_s &&
                r->end_s == rows[j].end_s && !strcmp(r->text, rows[j].text)) {
                if (!dups++) {
                    first_dup = i + 2;
                    dup_of = j + 2;
                }
                break;
            }
    }
    for (int i = 0; i < n_val; i++)
        for (int j = 0; j < n; j++)
            if (!strcmp(val[i].video, rows[j].video) && val[i].start_s == rows[j].start_s &&
                val[i].end_s == rows[j].end_s) {
                if (!both++) {
                    first_both = i + 2;
                    both_of = j + 2;
                }
                break;
            }
    CHECK(past_end == 2 && past_start == 2 && dups == 2 && both == 2); /* each count used */

    struct tb_annotations *a = NULL, *v = NULL;
    struct tb_ann_opts narr = {.format = TB_ANN_NARRATION};
    struct tb_ann_stats *st = NULL;
    CHECK_EQ(tb_ann_load(&a, train_p, &narr), 0);
    CHECK_EQ(tb_ann_load(&v, val_p, &narr), 0);
    struct tb_ann_stats_opts so = {.root = root, .ext = "mp4", .span_frames = 1, .other = v};
    CHECK_EQ(a && v ? tb_ann_stats_compute(&st, a, &so) : -1, 0);
    if (st) {
        CHECK_EQ(st->n_past_end, past_end);
        CHECK_EQ(st->first_past_end_line, first_end);
        CHECK_EQ(st->n_past_start, past_start);
        CHECK_EQ(st->first_past_start_line, first_start);
        CHECK_EQ(st->n_outside, 1);
        CHECK_EQ(st->n_duplicates, dups);
        CHECK_EQ(st->first_duplicate_line, first_dup);
        CHECK_EQ(st->first_duplicate_of, dup_of);
        CHECK(st->other_checked);
        CHECK_EQ(st->n_overlap, both);
        CHECK_EQ(st->first_overlap_line, first_both);
        CHECK_EQ(st->first_overlap_of, both_of);
        tb_ann_stats_free(&st);
    }
    /* without a root: the start still counts, the end is not known */
    so = (struct tb_ann_stats_opts){.span_frames = 1};
    CHECK_EQ(a ? tb_ann_stats_compute(&st, a, &so) : -1, 0);
    if (st) {
        CHECK(st->n_past_end == 0 && st->n_past_start == past_start + 0 && !st->other_checked);
        tb_ann_stats_free(&st);
    }
    tb_ann_free(&a);
    tb_ann_free(&v);

    char want[512];
    int rc = tbt_run(&out, 60, "%s ann stats %s --format narration --val %s --data %s", t,
                     train_p, val_p, root);
    CHECK_MSG(rc == 0, "%s", out);
    snprintf(want, sizeof(want), "past end     %lld windows run past their video's end "
             "(training clamps them to it); the first at line %d", (long long)past_end,
             first_end);
    CHECK_STR_HAS(out, want);
    snprintf(want, sizeof(want), "before start %lld windows start before their video",
             (long long)past_start);
    CHECK_STR_HAS(out, want);
    snprintf(want, sizeof(want), "duplicates   %lld rows repeat an earlier row (video, window, "
             "classes, text); the first at line %d, repeating line %d", (long long)dups,
             first_dup, dup_of);
    CHECK_STR_HAS(out, want);
    snprintf(want, sizeof(want), "in both      %lld rows of %s (%d loaded, 0 bad rows skipped) "
             "are clips (video and window) of this file; the first at its line %d, this file's "
             "line %d", (long long)both, val_p, n_val, first_both, both_of);
    CHECK_STR_HAS(out, want);
    free(out);
    rc = tbt_run(&out, 60, "%s ann stats %s --format narration --val %s --data %s --json", t,
                 train_p, val_p, root);
    CHECK_MSG(rc == 0 && json_valid(out), "%s", out);
    CHECK_EQ(json_int(out ? strstr(out, "\"past_end\"") : NULL, "rows"), past_end);
    CHECK_EQ(json_int(out ? strstr(out, "\"past_start\"") : NULL, "rows"), past_start);
    CHECK_EQ(json_int(out ? strstr(out, "\"duplicates\"") : NULL, "first_of"), dup_of);
    CHECK_EQ(json_int(out ? strstr(out, "\"in_both\"") : NULL, "rows"), both);
    free(out);

    /* EPIC: all_noun_classes that does not parse is no bad row (a cls run never reads it),
     * but the report names it */
    tbt_case = "cells that do not parse";
    write_text(train_p, "video_id,start_timestamp,stop_timestamp,verb_class,noun_class,"
                        "all_noun_classes\nP01_01,00:00:01.00,00:00:02.00,1,2,\"[2]\"\n"
                        "P01_01,00:00:02.00,00:00:03.00,1,2,[]\n"
                        "P01_01,00:00:03.00,00:00:04.00,1,2,\"[2, x]\"\n");
    rc = tbt_run(&out, 60, "%s ann stats %s", t, train_p);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "3 loaded, 0 skipped");
    CHECK_STR_HAS(out, "bad cells    2 rows hold a cell that does not parse");
    CHECK_STR_HAS(out, "repeats.csv:3: column 'all_noun_classes': '[]' is not a list");
    free(out);
}

int main(void)
{
    tbt_begin("ann_stats");
    const char *d = tbt_dir(), *t = tbt_tubelet();
    char syn[4200], root[4200], csv[4300], *out = NULL;
    snprintf(syn, sizeof(syn), "%s/syn", d);
    snprintf(root, sizeof(root), "%s/chunks", d);
    snprintf(csv, sizeof(csv), "%s/EPIC_100_train.csv", d);

    /* Two prepared videos at 15 fps, and a plain file the reader would index itself. */
    int rc = tbt_run(&out, 300, "%s synth --out %s --videos 2 --seconds 10 --size 160x120 "
                     "--preset ultrafast && %s prep %s/videos/*.mp4 --out %s --preset ultrafast "
                     "--short-side 64 --fps 15 && cp %s/videos/P01_01.mp4 %s/%s.mp4", t, syn, t,
                     syn, root, syn, root, videos[V_PLAIN]);
    CHECK_MSG(rc == 0, "synth/prep: %s", out);
    free(out);
    if (rc != 0)
        TBT_EXIT();
    int64_t prep_frames[2] = {0};
    double prep_fps[2] = {0};
    for (int v = 0; v < 2; v++) {
        char dir[4400];
        struct tb_video_index *idx = NULL;
        snprintf(dir, sizeof(dir), "%s/%s.mp4", root, videos[v]);
        CHECK_EQ(tb_index_load(&idx, dir), 0);
        if (idx) {
            prep_frames[v] = idx->n_frames;
            prep_fps[v] = (double)idx->fps_num / idx->fps_den;
            tb_index_free(&idx);
        }
        CHECK_MSG(prep_fps[v] == 15 && prep_frames[v] > 0, "%s: %g fps, %lld frames",
                  videos[v], prep_fps[v], (long long)prep_frames[v]);
    }

    /* The plain file's rate and frame count as ffprobe sees them. */
    double plain_fps = 0;
    int64_t plain_frames = 0;
    rc = tbt_run(&out, 60, "ffprobe -v error -count_frames -select_streams v:0 -show_entries "
                 "stream=avg_frame_rate,nb_read_frames -of csv=p=0 %s/%s.mp4", root,
                 videos[V_PLAIN]);
    int num = 0, den = 0;
    long long nf = 0;
    CHECK_MSG(rc == 0 && out && sscanf(out, "%d/%d,%lld", &num, &den, &nf) == 3 && den > 0 &&
              nf > 0, "ffprobe: %s", out);
    free(out);
    plain_fps = den > 0 ? (double)num / den : 30;
    plain_frames = nf;

    struct row good[N_GEN];
    int bad_line = 0, untimed[2] = {0}, no_narr_ts = 0;
    int n_good = write_epic(csv, good, &bad_line, untimed, &no_narr_ts);

    /* What the stats should say, from the rows as written. */
    int64_t verbs[MAX_CLASS] = {0}, nouns[MAX_CLASS] = {0}, pairs[MAX_CLASS][MAX_CLASS] = {{0}};
    int64_t rows_of[N_VIDEOS] = {0}, short_rows = 0, outside = 0;
    int first_line_of[N_VIDEOS] = {0}, first_short = 0, first_outside = 0, n_videos = 0;
    double dur[N_GEN], total = 0;
    for (int i = 0; i < n_good; i++) {
        const struct row *r = &good[i];
        int v = 0;
        while (strcmp(videos[v], r->video))
            v++;
        n_videos += !rows_of[v]++;
        if (!first_line_of[v])
            first_line_of[v] = r->line;
        verbs[r->verb]++;
        nouns[r->noun]++;
        pairs[r->verb][r->noun]++;
        dur[i] = r->end_s - r->start_s;
        total += dur[i];
        /* The prepared videos and the plain file at their own rate and length (the plain
         * file's as ffprobe counts them), the missing one at --fps. */
        int known = v != V_MISSING;
        int64_t f = window_frames(r, !known ? 30 : v == V_PLAIN ? plain_fps : prep_fps[v],
                                  !known ? INT64_MAX : v == V_PLAIN ? plain_frames
                                                                    : prep_frames[v]);
        if (f < SPAN) {
            short_rows++;
            first_short = first_short ? first_short : r->line;
        }
        if (known && f == 0) {
            outside++;
            first_outside = first_outside ? first_outside : r->line;
        }
    }
    qsort(dur, (size_t)n_good, sizeof(*dur), cmp_double);
    double median = n_good % 2 ? dur[n_good / 2] : 0.5 * (dur[n_good / 2 - 1] + dur[n_good / 2]);
    int64_t distinct_pairs = 0;
    for (int v = 0; v < MAX_CLASS; v++)
        for (int k = 0; k < MAX_CLASS; k++)
            distinct_pairs += pairs[v][k] > 0;
    CHECK(outside == 1 && short_rows > outside && short_rows < n_good && rows_of[V_MISSING] &&
          rows_of[V_PLAIN]); /* the file exercises every count */

    tbt_case = "library";
    struct tb_annotations *a = NULL;
    struct tb_ann_opts ao = {.format = TB_ANN_EPIC, .skip_bad_rows = 1};
    struct tb_ann_stats *s = NULL;
    CHECK_EQ(tb_ann_load(&a, csv, &ao), 0);
    if (!a)
        TBT_EXIT();
    CHECK_EQ(a->n_items, n_good);
    CHECK_EQ(a->n_skipped, 3);
    CHECK_EQ(a->n_untimed, 2);
    CHECK_EQ(a->n_bad_kept, 3);
    CHECK_EQ(a->bad[0].line, untimed[0]);
    CHECK_EQ(a->bad[1].line, bad_line);
    CHECK_EQ(a->bad[2].line, untimed[1]);
    char want[4500];
    snprintf(want, sizeof(want), "EPIC_100_train.csv:%d: column 'start_timestamp' is empty",
             untimed[0]);
    CHECK_STR_HAS(a->bad[0].message, want);
    snprintf(want, sizeof(want), "EPIC_100_train.csv:%d: column 'verb_class': 'x'", bad_line);
    CHECK_STR_HAS(a->bad[1].message, want);
    snprintf(want, sizeof(want), "EPIC_100_train.csv:%d: column 'stop_timestamp' is empty",
             untimed[1]);
    CHECK_STR_HAS(a->bad[2].message, want);
    CHECK(!strcmp(a->first_error, a->bad[0].message));
    /* The quoted lists and the narration with a comma came through whole. */
    for (int i = 0; i < a->n_items && i < n_good; i++) {
        const struct tb_ann_item *it = &a->items[i];
        int lo = good[i].noun < good[i].other_noun ? good[i].noun : good[i].other_noun;
        int hi = good[i].noun ^ good[i].other_noun ^ lo;
        CHECK_MSG(it->line == good[i].line && it->n_nouns == (lo == hi ? 1 : 2) &&
                  it->nouns[0] == lo && it->nouns[it->n_nouns - 1] == hi &&
                  strstr(it->text, ", then wash"), "row at line %d", good[i].line);
    }
    CHECK(a->items[0].line == 2);
    int found_no_ts = 0;
    for (int i = 0; i < a->n_items; i++)
        found_no_ts |= a->items[i].line == no_narr_ts;
    CHECK_MSG(found_no_ts, "the row without a narration timestamp (line %d) was dropped",
              no_narr_ts);
    CHECK(tb_ann_map_actions(&a, 1) == distinct_pairs);

    struct tb_ann_stats_opts so = {.root = root, .ext = "mp4", .span_frames = SPAN,
                                   .fps_num = 30, .fps_den = 1};
    CHECK_EQ(tb_ann_stats_compute(&s, a, &so), 0);
    if (s) {
        CHECK_EQ(s->n_unreadable, 0);
        CHECK_EQ(s->n_unreadable_rows, 0);
        CHECK_EQ(s->n_rows, n_good);
        CHECK_EQ(s->n_videos, n_videos);
        CHECK_EQ(s->n_timed, n_good);
        CHECK_MSG(fabs(s->total_s - total) < 1e-6 && fabs(s->min_s - dur[0]) < 1e-6 &&
                  fabs(s->median_s - median) < 1e-6 && fabs(s->max_s - dur[n_good - 1]) < 1e-6,
                  "durations %g %g %g %g, expected %g %g %g %g", s->total_s, s->min_s,
                  s->median_s, s->max_s, total, dur[0], median, dur[n_good - 1]);
        CHECK_EQ(s->n_counted, n_good);
        CHECK_EQ(s->n_short, short_rows);
        CHECK_EQ(s->first_short_line, first_short);
        CHECK_EQ(s->n_outside, outside);
        CHECK_EQ(s->first_outside_line, first_outside);
        check_hist(&s->verb, verbs, n_good, "verb");
        check_hist(&s->noun, nouns, n_good, "noun");
        CHECK_EQ(s->action.n_classes, distinct_pairs);
        CHECK_EQ(s->action.n_rows, n_good);
        for (int i = 0; i < s->action.n_classes; i++) {
            const struct tb_ann_class_count *c = &s->action.classes[i];
            CHECK_MSG(c->verb >= 0 && c->noun >= 0 && c->count == pairs[c->verb][c->noun],
                      "action %d (%d:%d): %lld rows", c->id, c->verb, c->noun,
                      (long long)c->count);
            for (int k = 0; k < a->n_items; k++)
                if (a->items[k].action == c->id)
                    CHECK(a->items[k].verb == c->verb && a->items[k].noun == c->noun);
        }
        CHECK_EQ(s->root_checked, 1);
        CHECK_EQ(s->n_prepared, 2);
        CHECK_EQ(s->n_plain, 1);
        CHECK_EQ(s->n_missing, 1);
        CHECK_EQ(s->n_missing_rows, rows_of[V_MISSING]);
        if (s->n_missing == 1) {
            CHECK(!strcmp(s->missing[0].video, videos[V_MISSING]));
            CHECK_EQ(s->missing[0].n_rows, rows_of[V_MISSING]);
            CHECK_EQ(s->missing[0].first_line, first_line_of[V_MISSING]);
        }
        tb_ann_stats_free(&s);
    }
    /* Without a root nothing is looked up, and every window maps at the given rate. */
    so.root = NULL;
    CHECK_EQ(tb_ann_stats_compute(&s, a, &so), 0);
    if (s) {
        int64_t short30 = 0;
        for (int i = 0; i < n_good; i++)
            short30 += window_frames(&good[i], 30, INT64_MAX) < SPAN;
        CHECK(s->root_checked == 0 && s->n_missing == 0 && s->n_prepared == 0);
        CHECK_EQ(s->n_short, short30);
        CHECK_EQ(s->n_outside, 0);
        tb_ann_stats_free(&s);
    }
    so.span_frames = -1;
    CHECK_EQ(tb_ann_stats_compute(&s, a, &so), TB_EINVAL);
    CHECK(s == NULL);
    CHECK_STR_HAS(tb_errmsg(), "bad statistics options");
    tb_ann_stats_free(&s);

    tbt_case = "cli";
    rc = tbt_run(&out, 60, "%s ann stats %s --data %s --frames %d --json", t, csv, root, SPAN);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_MSG(json_valid(out), "not valid JSON: %s", out);
    CHECK_EQ(json_int(out, "rows"), n_good);
    CHECK_EQ(json_int(out, "skipped"), 3);
    CHECK_EQ(json_int(out, "untimed"), 2);
    CHECK_EQ(json_int(out, "videos"), n_videos);
    CHECK_EQ(json_int(out, "span_frames"), SPAN);
    CHECK_EQ(json_int(out, "short"), short_rows);
    CHECK_EQ(json_int(out, "outside"), outside);
    CHECK_EQ(json_int(out, "prepared"), 2);
    /* each sampler's span: T; (T - 1) x stride + 1; AVION's T x stride */
    static const struct {
        const char *sampler;
        int span;
    } spans[] = {{"segments", 4}, {"dense", 10}, {"dense-jitter", 12}};
    for (int k = 0; k < 3; k++) {
        char *o2 = NULL;
        rc = tbt_run(&o2, 60, "%s ann stats %s --frames 4 --stride 3 --sampler %s --json", t,
                     csv, spans[k].sampler);
        CHECK_MSG(rc == 0 && json_int(o2, "span_frames") == spans[k].span, "--sampler %s: %s",
                  spans[k].sampler, o2);
        free(o2);
    }
    CHECK_EQ(json_int(out, "missing_rows"), rows_of[V_MISSING]);
    snprintf(want, sizeof(want), "{\"line\": %d, \"message\": \"", bad_line);
    CHECK_STR_HAS(out, want);
    snprintf(want, sizeof(want), "{\"video\": \"%s\", \"rows\": %lld, \"first_line\": %d}",
             videos[V_MISSING], (long long)rows_of[V_MISSING], first_line_of[V_MISSING]);
    CHECK_STR_HAS(out, want);
    int64_t distinct_nouns = 0;
    for (int k = 0; k < MAX_CLASS; k++)
        distinct_nouns += nouns[k] > 0;
    const char *noun_json = out ? strstr(out, "\"noun\": {") : NULL;
    CHECK_EQ(json_int(noun_json, "classes"), distinct_nouns);
    CHECK_EQ(json_int(noun_json, "rows"), n_good);
    free(out);

    /* The report: the bad row by file and line, the missing video, the tables cut at --top. */
    rc = tbt_run(&out, 60, "%s ann stats %s --data %s --top 2", t, csv, root);
    CHECK_MSG(rc == 0, "%s", out);
    snprintf(want, sizeof(want), "EPIC_100_train.csv:%d: column 'verb_class': 'x' is not a "
             "class number", bad_line);
    CHECK_STR_HAS(out, want);
    snprintf(want, sizeof(want), "%lld loaded, 3 skipped (2 without a start or end time)",
             (long long)n_good);
    CHECK_STR_HAS(out, want);
    snprintf(want, sizeof(want), "missing    %s: %lld rows, the first at line %d",
             videos[V_MISSING], (long long)rows_of[V_MISSING], first_line_of[V_MISSING]);
    CHECK_STR_HAS(out, want);
    CHECK_STR_HAS(out, "more classes");
    free(out);

    /* Videos that are there but the loader cannot read: a rotated plain file (a phone video)
     * and an unfinished prep (a directory without video.idx); beside a prepared one and a
     * missing one. Each is named with the reader's reason. */
    tbt_case = "unreadable videos";
    rc = tbt_run(&out, 120, "ffmpeg -nostdin -v error -y -i %s/videos/P01_01.mp4 -c copy "
                 "-metadata:s:v:0 rotate=90 %s/P05_01.mp4 && mkdir -p %s/P06_01.mp4", syn, root,
                 root);
    CHECK_MSG(rc == 0, "ffmpeg: %s", out);
    free(out);
    char unread_csv[4400];
    snprintf(unread_csv, sizeof(unread_csv), "%s/unreadable.csv", d);
    static const char *const unread_rows[] = {"P01_01", "P05_01", "P06_01", "P05_01", "P09_09"};
    FILE *uf = fopen(unread_csv, "w");
    CHECK(uf != NULL);
    if (uf) {
        fputs(header, uf);
        for (int i = 0; i < 5; i++)
            fprintf(uf, "%s_%d,P0,%s,00:00:01.00,00:00:01.00,00:00:02.00,30,60,take cup,take,"
                    "0,cup,1,\"['cup']\",\"[1]\"\n", unread_rows[i], i, unread_rows[i]);
        fclose(uf);
    }
    tb_ann_free(&a);
    CHECK_EQ(tb_ann_load(&a, unread_csv, &ao), 0);
    so = (struct tb_ann_stats_opts){.root = root, .ext = "mp4", .span_frames = SPAN};
    CHECK_EQ(a ? tb_ann_stats_compute(&s, a, &so) : -1, 0);
    if (s) {
        CHECK_EQ(s->n_videos, 4);
        CHECK_EQ(s->n_prepared, 1);
        CHECK_EQ(s->n_plain, 0);
        CHECK_EQ(s->n_missing, 1);
        CHECK(s->n_missing == 1 && !strcmp(s->missing[0].video, "P09_09") &&
              s->missing[0].first_line == 6 && s->missing[0].reason == NULL);
        CHECK_EQ(s->n_unreadable, 2);
        CHECK_EQ(s->n_unreadable_rows, 3);
        if (s->n_unreadable == 2) {
            const struct tb_ann_missing *u = s->unreadable;
            CHECK(!strcmp(u[0].video, "P05_01") && u[0].n_rows == 2 && u[0].first_line == 3);
            CHECK_STR_HAS(u[0].reason, "P05_01.mp4: rotated video (");
            CHECK_STR_HAS(u[0].reason, "run tubelet prep on it first");
            CHECK(!strcmp(u[1].video, "P06_01") && u[1].n_rows == 1 && u[1].first_line == 4);
            CHECK_STR_HAS(u[1].reason, "P06_01.mp4: no video.idx");
        }
        tb_ann_stats_free(&s);
    }
    rc = tbt_run(&out, 120, "%s ann stats %s --data %s", t, unread_csv, root);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "1 of 4 videos readable (1 prepared, 0 plain files); 1 missing, named "
                       "by 1 rows; 2 unreadable, named by 3 rows");
    CHECK_STR_HAS(out, "unreadable P05_01: 2 rows, the first at line 3: ");
    CHECK_STR_HAS(out, "rotated video (");
    CHECK_STR_HAS(out, "unreadable P06_01: 1 rows, the first at line 4: ");
    free(out);
    rc = tbt_run(&out, 120, "%s ann stats %s --data %s --json", t, unread_csv, root);
    CHECK_MSG(rc == 0 && json_valid(out), "%s", out);
    CHECK_EQ(json_int(out, "unreadable_rows"), 3);
    CHECK_STR_HAS(out, "{\"video\": \"P05_01\", \"rows\": 2, \"first_line\": 3, \"reason\": \"");
    free(out);

    tbt_case = "other formats";
    char path[4400];
    snprintf(path, sizeof(path), "%s/k400.txt", d);
    write_text(path, "videos/a.mp4 300 3\nvideos/b.mp4 6 4\nvideos/c.mp4 3\n"
                     "videos/d.mp4 20 three\n");
    struct tb_ann_opts kin = {.format = TB_ANN_KINETICS, .skip_bad_rows = 1};
    tb_ann_free(&a);
    CHECK_EQ(tb_ann_load(&a, path, &kin), 0);
    so = (struct tb_ann_stats_opts){.span_frames = SPAN};
    CHECK_EQ(a ? tb_ann_stats_compute(&s, a, &so) : -1, 0);
    if (s) {
        /* Frame counts at the default 30 fps; c.mp4 has none. */
        CHECK(s->n_rows == 3 && s->n_timed == 2 && s->n_counted == 2 && s->n_short == 1);
        CHECK(fabs(s->total_s - 306 / 30.0) < 1e-9 && fabs(s->max_s - 10) < 1e-9);
        /* Labels 3, 4, 3: the label histogram, most frequent first. */
        CHECK(s->verb.n_classes == 2 && s->verb.classes[0].id == 3 &&
              s->verb.classes[0].count == 2 && s->verb.classes[1].id == 4);
        CHECK(s->noun.n_rows == 0 && s->action.n_rows == 0);
        tb_ann_stats_free(&s);
    }
    CHECK(a && a->n_skipped == 1 && a->n_untimed == 0 && a->bad[0].line == 4);
    tb_ann_free(&a);
    snprintf(path, sizeof(path), "%s/narr.csv", d);
    write_text(path, "video_id,start_s,end_s,text\nv1, ,2,no start\nv1,1,2.5,\"pick up, then "
                     "drink\"\nv2,0,0.5,short\n");
    struct tb_ann_opts narr = {.format = TB_ANN_NARRATION, .skip_bad_rows = 1};
    CHECK_EQ(tb_ann_load(&a, path, &narr), 0);
    CHECK(a && a->n_skipped == 1 && a->n_untimed == 1 && a->bad[0].line == 2);
    CHECK_EQ(a ? tb_ann_stats_compute(&s, a, &so) : -1, 0);
    if (s) {
        CHECK(s->n_rows == 2 && s->n_videos == 2 && s->n_short == 1 && s->verb.n_rows == 0);
        CHECK(fabs(s->median_s - 1.0) < 1e-9);
        tb_ann_stats_free(&s);
    }
    tb_ann_free(&a);
    rc = tbt_run(&out, 60, "%s ann stats %s --format narration --json", t, path);
    CHECK_MSG(rc == 0 && json_valid(out), "%s", out);
    CHECK_STR_HAS(out, "\"root\": null");
    free(out);

    check_repeats(t, d, root, prep_frames[0]);

    tbt_case = "errors";
    snprintf(path, sizeof(path), "%s/all_bad.csv", d);
    char text[1024];
    snprintf(text, sizeof(text), "%sa,P01,P01_01,,00:00:01.00,soon,60,120,x,take,0,cup,1,"
             "['cup'],[1]\n", header);
    write_text(path, text);
    /* tubelet ann ACTION [scratch/FILE] FLAGS: the exit code and the message. */
    static const struct {
        const char *action, *file, *flags;
        int rc;
        const char *says;
    } errors[] = {
        {"stat", "EPIC_100_train.csv", "", 2, "unknown action 'stat'"},
        {"stats", NULL, "", 2, "expected stats FILE"},
        {"stats", "EPIC_100_train.csv", "--format csv", 2,
         "--format: 'csv' is none of epic|kinetics|narration"},
        {"stats", "EPIC_100_train.csv", "--sampler random", 2, "--sampler: 'random' is none of "},
        {"stats", "EPIC_100_train.csv", "--bogus 3", 2, "unknown flag '--bogus'"},
        {"stats", "EPIC_100_train.csv", "--frames 0", 2, "--frames: 0 is out of range"},
        {"stats", "EPIC_100_train.csv", "--fps 0", 2, "--fps: malformed value '0'"},
        {"stats", "nope.csv", "", 1, "nope.csv"},
        {"stats", "all_bad.csv", "", 1, "all_bad.csv: no annotations; first bad row: "},
        {"stats", "all_bad.csv", "", 1, "all_bad.csv:2: column 'stop_timestamp': 'soon'"},
        /* Not an EK-100 file at all: the header is named. */
        {"stats", "k400.txt", "", 1, "k400.txt:1: no 'video_id' column"},
    };
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", d, errors[i].file ? errors[i].file : "");
        rc = tbt_run(&out, 60, "%s ann %s %s %s", t, errors[i].action,
                     errors[i].file ? path : "", errors[i].flags);
        CHECK_MSG(rc == errors[i].rc, "ann %s %s %s: exit %d, expected %d", errors[i].action,
                  errors[i].file ? errors[i].file : "", errors[i].flags, rc, errors[i].rc);
        CHECK_STR_HAS(out, errors[i].says);
        free(out);
    }
    TBT_EXIT();
}
