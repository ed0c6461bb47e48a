/* src/cli/cmd_ann.c - `tubelet ann stats FILE`: what an annotation file holds, before any
 * training: rows (and the bad ones, by line), videos, clip durations, the verb/noun/action
 * histograms as top-k tables, clips shorter than the sampler's span, windows that run past
 * their video's end or before its start, repeated rows (and, with --val, rows also in the
 * other split), cells only some runs read that do not parse, and rows whose video a prepared
 * root lacks or the loader cannot read (with the reason); --json for the same as one object.
 * The CLI has no subcommand layer, so
 * `ann` is a command whose first argument names the action and `stats` is the only one.
 * The numbers come from tb_ann_stats_compute. Tests: tests/test_ann_stats.c. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "tubelet/data.h"

struct ann_config {
    char *format;
    char *val;
    char *root;
    char *ext;
    char *sampler;
    int frames;
    int stride;
    struct cli_rate fps;
    int top;
    int json;
};

#define F(name, type, field, def, meta, help, ...)                                            \
    CLI_FLAG(name, type, struct ann_config, field, def, meta, help, __VA_ARGS__)
static const struct cli_flag ann_flags[] = {
    F("format", CLI_STR, format, "epic", "epic|kinetics|narration",
      "annotation format: epic, kinetics, narration",
      CLI_NO_RANGE),
    F("val", CLI_STR, val, "", "FILE", "another split of the same format (the validation "
      "file of a training FILE): count its rows whose clip (video and window) is one of FILE's",
      CLI_NO_RANGE),
    F("data", CLI_STR, root, "", "DIR", "prepared videos (tubelet prep --out): open each video "
      "as training will and count the rows whose video is not there or cannot be read",
      CLI_NO_RANGE),
    F("ext", CLI_STR, ext, "mp4", "EXT", "prepared videos' suffix", CLI_NO_RANGE),
    F("sampler", CLI_STR, sampler, "segments", "segments|dense|dense-jitter",
      "segments (AVION: a clip spans T frames), dense (VideoMAE: (T - 1) * stride + 1) or "
      "dense-jitter (AVION's VideoMAE pretraining: T * stride)", CLI_NO_RANGE),
    F("frames", CLI_INT, frames, "16", "T", "frames per clip", 1, 1024),
    F("stride", CLI_INT, stride, "4", "N", "frame stride of dense sampling", 1, 1000),
    F("fps", CLI_RATE, fps, "30", "F", "the rate windows map to frames at where --root has no "
      "readable video giving its own (tubelet prep's default)", 1, 1000000),
    F("top", CLI_INT, top, "10", "K", "rows of each histogram table (0: every class; --json "
      "always lists every class)", 0, 100000000),
    F("json", CLI_BOOL, json, "false", "", "one JSON object instead of the report",
      CLI_NO_RANGE),
};
#undef F

static const char *const format_names[] = {"epic", "kinetics", "narration"};

/* ---- the report -------------------------------------------------------------------------- */

static double pct(int64_t part, int64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static void print_hist(const char *title, const struct tb_ann_hist *h, int64_t n_rows, int top)
{
    if (!h->n_rows)
        return;
    int n = top && top < h->n_classes ? top : h->n_classes;
    printf("\n%s: %d classes over %" PRId64 " rows", title, h->n_classes, h->n_rows);
    if (h->n_rows < n_rows)
        printf(" (%" PRId64 " rows without one)", n_rows - h->n_rows);
    printf("%s\n", n < h->n_classes ? "; the most frequent:" : "");
    /* Actions carry their verb:noun pair in a column of its own. */
    int pairs = n && h->classes[0].verb >= 0;
    printf("  %8s %-*s%10s  %6s\n", "class", pairs ? 14 : 0, pairs ? "verb:noun" : "", "rows",
           "share");
    for (int i = 0; i < n; i++) {
        const struct tb_ann_class_count *c = &h->classes[i];
        char pair[32] = "";
        if (pairs)
            snprintf(pair, sizeof(pair), "%d:%d", c->verb, c->noun);
        printf("  %8d %-*s%10" PRId64 "  %5.1f%%\n", c->id, pairs ? 14 : 0, pair, c->count,
               pct(c->count, h->n_rows));
    }
    if (n < h->n_classes) {
        int64_t rest = 0;
        for (int i = n; i < h->n_classes; i++)
            rest += h->classes[i].count;
        printf("  %d more classes: %" PRId64 " rows (%.1f%%); the rarest has %" PRId64 "\n",
               h->n_classes - n, rest, pct(rest, h->n_rows), h->classes[h->n_classes - 1].count);
    }
}

/* Windows partly outside their video (EPIC and narration rows). */
static void print_windows(const struct tb_ann_stats *s)
{
    if (s->root_checked)
        printf("past end     %" PRId64 " windows run past their video's end (training clamps "
               "them to it)", s->n_past_end);
    else
        printf("past end     not known without --data (the videos' lengths)");
    if (s->n_past_end)
        printf("; the first at line %d", s->first_past_end_line);
    printf("\nbefore start %" PRId64 " windows start before their video (a negative start: "
           "clamped to its first frame)", s->n_past_start);
    if (s->n_past_start)
        printf("; the first at line %d", s->first_past_start_line);
    printf("\n");
}

/* Repeated rows, the other split (val), bad cells. */
static void print_checks(const struct ann_config *c, const struct tb_ann_stats *s,
                         const struct tb_annotations *val)
{
    printf("duplicates   %" PRId64 " rows repeat an earlier row (video, window, classes, "
           "text)", s->n_duplicates);
    if (s->n_duplicates)
        printf("; the first at line %d, repeating line %d", s->first_duplicate_line,
               s->first_duplicate_of);
    printf("\n");
    if (s->other_checked) {
        printf("in both      %" PRId64 " rows of %s (%d loaded, %d bad rows skipped) are clips "
               "(video and window) of this file", s->n_overlap, c->val, val->n_items,
               val->n_skipped);
        if (s->n_overlap)
            printf("; the first at its line %d, this file's line %d", s->first_overlap_line,
                   s->first_overlap_of);
        printf("\n");
    }
    if (s->n_cell_errors)
        printf("bad cells    %" PRId64 " rows hold a cell that does not parse, in a column only "
               "some runs read (MIR refuses them; the others do not read it); the first: %s\n",
               s->n_cell_errors, s->first_cell_error);
}

static void print_report(const struct ann_config *c, const struct tb_annotations *a,
                         const struct tb_annotations *val, const struct tb_ann_stats *s,
                         int64_t span, int n_actions)
{
    printf("annotations  %s (%s)\n", a->path, format_names[a->format]);
    printf("rows         %" PRId64 " loaded, %d skipped", s->n_rows, a->n_skipped);
    if (a->n_untimed)
        printf(" (%d without a start or end time)", a->n_untimed);
    printf("\n");
    for (int i = 0; i < a->n_bad_kept; i++)
        printf("  bad row    %s\n", a->bad[i].message);
    if (a->n_skipped > a->n_bad_kept)
        printf("  bad row    and %d more\n", a->n_skipped - a->n_bad_kept);
    printf("videos       %" PRId64 "\n", s->n_videos);
    if (s->n_timed)
        printf("duration     %" PRId64 " clips, %.1f s in all (%.2f h); per clip min %.2f s, "
               "median %.2f s, max %.2f s\n", s->n_timed, s->total_s, s->total_s / 3600,
               s->min_s, s->median_s, s->max_s);
    else
        printf("duration     unknown (no time windows or frame counts)\n");
    char fps[32];
    if (c->fps.den == 1)
        snprintf(fps, sizeof(fps), "%d", c->fps.num);
    else
        snprintf(fps, sizeof(fps), "%d/%d", c->fps.num, c->fps.den);
    printf("short clips  %" PRId64 " of %" PRId64 " hold fewer than %" PRId64 " frames (%s, "
           "%d frames", s->n_short, s->n_counted, span, c->sampler, c->frames);
    if (strcmp(c->sampler, "segments"))
        printf(" at stride %d", c->stride);
    int64_t n_readable = s->n_prepared + s->n_plain;
    if (n_readable)
        printf(", at each video's own rate");
    if (n_readable < s->n_videos)
        printf(", at %s fps%s", fps, n_readable ? " for the others" : "");
    printf(")");
    if (s->n_short)
        printf("; the first at line %d", s->first_short_line);
    printf("\n");
    if (s->n_outside)
        printf("  outside    %" PRId64 " windows hold no frame of their video (past its end or "
               "before its start: dropped in training); the first at line %d\n", s->n_outside,
               s->first_outside_line);
    if (a->format != TB_ANN_KINETICS)
        print_windows(s);
    print_checks(c, s, val);
    if (s->root_checked) {
        printf("root         %s (.%s): %" PRId64 " of %" PRId64 " videos readable (%" PRId64
               " prepared, %" PRId64 " plain files)", c->root, c->ext, n_readable, s->n_videos,
               s->n_prepared, s->n_plain);
        if (s->n_missing)
            printf("; %d missing, named by %" PRId64 " rows", s->n_missing, s->n_missing_rows);
        if (s->n_unreadable)
            printf("; %d unreadable, named by %" PRId64 " rows", s->n_unreadable,
                   s->n_unreadable_rows);
        printf("\n");
        int n = c->top && c->top < s->n_missing ? c->top : s->n_missing;
        for (int i = 0; i < n; i++)
            printf("  missing    %s: %" PRId64 " rows, the first at line %d\n",
                   s->missing[i].video, s->missing[i].n_rows, s->missing[i].first_line);
        if (n < s->n_missing)
            printf("  missing    and %d more videos\n", s->n_missing - n);
        n = c->top && c->top < s->n_unreadable ? c->top : s->n_unreadable;
        for (int i = 0; i < n; i++)
            printf("  unreadable %s: %" PRId64 " rows, the first at line %d: %s\n",
                   s->unreadable[i].video, s->unreadable[i].n_rows, s->unreadable[i].first_line,
                   s->unreadable[i].reason);
        if (n < s->n_unreadable)
            printf("  unreadable and %d more videos\n", s->n_unreadable - n);
    }
    int kinetics = a->format == TB_ANN_KINETICS;
    print_hist(kinetics ? "labels" : "verbs", &s->verb, s->n_rows, c->top);
    print_hist("nouns", &s->noun, s->n_rows, c->top);
    if (n_actions > 0)
        print_hist("actions (ids of this file's verb:noun pairs, sorted as strings)", &s->action,
                   s->n_rows, c->top);
}

/* ---- JSON -------------------------------------------------------------------------------- */

static void json_hist(const char *name, const struct tb_ann_hist *h)
{
    printf(",\n  \"%s\": {\"classes\": %d, \"rows\": %" PRId64 ", \"counts\": [", name,
           h->n_classes, h->n_rows);
    for (int i = 0; i < h->n_classes; i++) {
        const struct tb_ann_class_count *c = &h->classes[i];
        printf("%s{\"id\": %d", i ? ", " : "", c->id);
        if (c->verb >= 0)
            printf(", \"verb\": %d, \"noun\": %d", c->verb, c->noun);
        printf(", \"count\": %" PRId64 "}", c->count);
    }
    printf("]}");
}

static void print_json(const struct ann_config *c, const struct tb_annotations *a,
                       const struct tb_ann_stats *s, int64_t span)
{
    printf("{\n  \"path\": ");
    cli_json_string(stdout, a->path);
    printf(",\n  \"format\": \"%s\",\n  \"rows\": %" PRId64 ",\n  \"skipped\": %d,\n"
           "  \"untimed\": %d,\n  \"bad_rows\": [", format_names[a->format], s->n_rows,
           a->n_skipped, a->n_untimed);
    for (int i = 0; i < a->n_bad_kept; i++) {
        printf("%s{\"line\": %d, \"message\": ", i ? ", " : "", a->bad[i].line);
        cli_json_string(stdout, a->bad[i].message);
        printf("}");
    }
    printf("],\n  \"videos\": %" PRId64 ",\n", s->n_videos);
    printf("  \"duration\": {\"clips\": %" PRId64 ", \"total_s\": %.6f, \"min_s\": %.6f, "
           "\"median_s\": %.6f, \"max_s\": %.6f},\n", s->n_timed, s->total_s, s->min_s,
           s->median_s, s->max_s);
    printf("  \"span\": {\"sampler\": ");
    cli_json_string(stdout, c->sampler);
    printf(", \"frames\": %d, \"stride\": %d, \"fps\": \"%d/%d\", \"span_frames\": %" PRId64
           ", \"counted\": %" PRId64 ", \"short\": %" PRId64 ", \"first_short_line\": %d, "
           "\"outside\": %" PRId64 ", \"first_outside_line\": %d},\n", c->frames, c->stride,
           c->fps.num, c->fps.den, span, s->n_counted, s->n_short, s->first_short_line,
           s->n_outside, s->first_outside_line);
    printf("  \"past_end\": ");
    if (s->root_checked)
        printf("{\"rows\": %" PRId64 ", \"first_line\": %d}", s->n_past_end,
               s->first_past_end_line);
    else
        printf("null");
    printf(",\n  \"past_start\": {\"rows\": %" PRId64 ", \"first_line\": %d},\n"
           "  \"duplicates\": {\"rows\": %" PRId64 ", \"first_line\": %d, \"first_of\": %d},\n"
           "  \"in_both\": ", s->n_past_start, s->first_past_start_line, s->n_duplicates,
           s->first_duplicate_line, s->first_duplicate_of);
    if (s->other_checked) {
        printf("{\"other\": ");
        cli_json_string(stdout, c->val);
        printf(", \"rows\": %" PRId64 ", \"first_line\": %d, \"first_of\": %d}", s->n_overlap,
               s->first_overlap_line, s->first_overlap_of);
    } else {
        printf("null");
    }
    printf(",\n  \"bad_cells\": {\"rows\": %" PRId64 ", \"first_line\": %d, \"first\": ",
           s->n_cell_errors, s->first_cell_error_line);
    cli_json_string(stdout, s->first_cell_error);
    printf("},\n");
    printf("  \"root\": ");
    if (!s->root_checked) {
        printf("null");
    } else {
        printf("{\"dir\": ");
        cli_json_string(stdout, c->root);
        printf(", \"ext\": ");
        cli_json_string(stdout, c->ext);
        printf(", \"prepared\": %" PRId64 ", \"plain\": %" PRId64 ", \"missing_rows\": %" PRId64
               ", \"missing\": [", s->n_prepared, s->n_plain, s->n_missing_rows);
        for (int i = 0; i < s->n_missing; i++) {
            printf("%s{\"video\": ", i ? ", " : "");
            cli_json_string(stdout, s->missing[i].video);
            printf(", \"rows\": %" PRId64 ", \"first_line\": %d}", s->missing[i].n_rows,
                   s->missing[i].first_line);
        }
        printf("], \"unreadable_rows\": %" PRId64 ", \"unreadable\": [", s->n_unreadable_rows);
        for (int i = 0; i < s->n_unreadable; i++) {
            printf("%s{\"video\": ", i ? ", " : "");
            cli_json_string(stdout, s->unreadable[i].video);
            printf(", \"rows\": %" PRId64 ", \"first_line\": %d, \"reason\": ",
                   s->unreadable[i].n_rows, s->unreadable[i].first_line);
            cli_json_string(stdout, s->unreadable[i].reason);
            printf("}");
        }
        printf("]}");
    }
    json_hist(a->format == TB_ANN_KINETICS ? "label" : "verb", &s->verb);
    json_hist("noun", &s->noun);
    json_hist("action", &s->action);
    printf("\n}\n");
}

static int run_ann(void *config, int n_args, char **args)
{
    struct ann_config *c = config;
    struct tb_annotations *a = NULL, *val = NULL;
    struct tb_ann_stats *s = NULL;
    struct tb_ann_opts ao = {.skip_bad_rows = 1};
    int rc, n_actions = 0;
    (void)n_args;
    if (strcmp(args[0], "stats")) {
        fprintf(stderr, "tubelet ann: unknown action '%s' (the one there is: tubelet ann stats "
                "FILE)\n", args[0]);
        return 2;
    }
    cli_ann_format(c->format, &ao.format); /* the parser checked the names */
    enum tb_sampler sampler = TB_SAMPLE_SEGMENTS;
    tb_sampler_parse(c->sampler, &sampler); /* the parser checked the name */
    int64_t span = tb_sampler_span(sampler, c->frames, c->stride);
    struct tb_ann_stats_opts so = {.root = c->root, .ext = c->ext, .span_frames = span,
                                   .fps_num = c->fps.num, .fps_den = c->fps.den};
    if ((rc = tb_ann_load(&a, args[1], &ao)) < 0 ||
        (c->val[0] && (rc = tb_ann_load(&val, c->val, &ao)) < 0))
        goto fail;
    so.other = val;
    if (ao.format == TB_ANN_EPIC && (rc = n_actions = tb_ann_map_actions(&a, 1)) < 0)
        goto fail;
    if ((rc = tb_ann_stats_compute(&s, a, &so)) < 0)
        goto fail;
    if (c->json)
        print_json(c, a, s, span);
    else
        print_report(c, a, val, s, span, n_actions);
    tb_ann_stats_free(&s);
    tb_ann_free(&a);
    tb_ann_free(&val);
    return 0;
fail:
    cli_report("ann stats", rc);
    tb_ann_free(&a);
    tb_ann_free(&val);
    return 1;
}

const struct cli_command cli_cmd_ann = {
    .name = "ann",
    .args = "stats FILE",
    .summary = "ann stats FILE: an annotation file's rows, bad rows, videos, classes, durations",
    .details = "'tubelet ann stats FILE' loads the file as training would (bad rows skipped and\n"
               "reported by line) and prints its rows, distinct videos, clip durations, the\n"
               "verb/noun/action histograms (--top rows each), the clips holding fewer frames\n"
               "than the sampler takes (--sampler, --frames, --stride at --fps or each video's\n"
               "own rate), the windows that start before their video, the rows that repeat\n"
               "an earlier row (video, window, classes, text) and, with --val FILE, the rows\n"
               "of FILE whose clip is one of these; with --data, the windows that run past\n"
               "their video's end (training clamps them and says so) and the rows whose video\n"
               "is not there or cannot be read:\n"
               "each video is opened as training opens it (a prepared video's index; a plain\n"
               "file is decoded once), and an unreadable one is named with the reader's reason\n"
               "(a rotated plain file, an unfinished prep, a broken index).",
    .flags = ann_flags,
    .n_flags = (int)(sizeof(ann_flags) / sizeof(ann_flags[0])),
    .config_size = sizeof(struct ann_config),
    .min_args = 2,
    .max_args = 2,
    .run = run_ann,
};
