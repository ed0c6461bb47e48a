/* tests/fuzz/fuzz_ann.c - annotation files (src/data/annotations.c), built three times:
 * fuzz_ek100 (EPIC-Kitchens-100 action CSVs), fuzz_kinetics (Kinetics / VideoMAE lists,
 * "path num_frames label") and fuzz_narration ("video_id,start_s,end_s,text" CSVs), with
 * TBF_ANN_FORMAT the format. The input is the file, seen as every consumer of a loaded file
 * sees it: tb_ann_load with and without skip_bad_rows (they must agree: strict loading
 * succeeds exactly when skipping skips nothing, with the same items), every item's fields as
 * data.h states them (caption lists, a noun set that did not parse and MIR's refusal of it), tb_ann_stats_compute (`tubelet ann stats`: its histograms add up to
 * the rows) and, for EPIC files, tb_ann_map_actions, tb_mir_sentences_build and the split's
 * relevancy. Seeds: corpus/ek100, corpus/kinetics, corpus/narration (make_seeds.sh). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tubelet/data.h"
#include "tubelet/metrics.h"

/* Relevancy matrices up to this many entries are computed. */
#define MAX_RELEVANCY (1 << 16)

static void check_items(const struct tb_annotations *a, enum tb_ann_format format)
{
    if (a->n_items < 1 || a->n_skipped < 0 || a->n_untimed > a->n_skipped ||
        a->n_bad_kept != (a->n_skipped < TB_ANN_BAD_KEPT ? a->n_skipped : TB_ANN_BAD_KEPT))
        tbf_fail("%d items, %d skipped (%d untimed), %d kept", a->n_items, a->n_skipped,
                 a->n_untimed, a->n_bad_kept);
    for (int i = 0; i < a->n_items; i++) {
        const struct tb_ann_item *it = &a->items[i];
        if (!it->video || !it->video[0] || it->line < 1 || (i && it->line <= it[-1].line))
            tbf_fail("item %d: video '%s', line %d", i, it->video ? it->video : "(null)",
                     it->line);
        tbf_touch(it->video, strlen(it->video));
        if (it->text)
            tbf_touch(it->text, strlen(it->text));
        if (it->id)
            tbf_touch(it->id, strlen(it->id));
        if (format == TB_ANN_KINETICS) {
            if (it->verb < 0 || it->n_frames < 0 || it->text || it->nouns)
                tbf_fail("Kinetics item %d: label %d, %lld frames", i, it->verb,
                         (long long)it->n_frames);
            continue;
        }
        /* a narration window may start before its video (clamped where it is read) */
        if (!(it->end_s > it->start_s) || (format == TB_ANN_EPIC && it->start_s < 0))
            tbf_fail("item %d: window %g .. %g s", i, it->start_s, it->end_s);
        if (format == TB_ANN_NARRATION) {
            if (!it->text || it->nouns || it->cell_error || it->n_captions < 0 ||
                (it->n_captions > 0) != (it->captions != NULL))
                tbf_fail("narration item %d without its text, or %d captions", i,
                         it->n_captions);
            for (int k = 0; k < it->n_captions; k++) {
                const char *c = tb_ann_caption(it, k);
                if (!c || !c[0])
                    tbf_fail("narration item %d: caption %d empty", i, k);
                tbf_touch(c, strlen(c));
            }
            continue;
        }
        if (it->cell_error) { /* all_noun_classes that did not parse: no set */
            if (it->nouns || it->n_nouns)
                tbf_fail("EPIC item %d: a noun set beside '%s'", i, it->cell_error);
            tbf_touch(it->cell_error, strlen(it->cell_error));
            continue;
        }
        if (it->verb < 0 || it->noun < 0 || it->n_nouns < 1 || !it->nouns)
            tbf_fail("EPIC item %d: verb %d, noun %d, %d nouns", i, it->verb, it->noun,
                     it->n_nouns);
        for (int k = 1; k < it->n_nouns; k++)
            if (it->nouns[k] <= it->nouns[k - 1])
                tbf_fail("EPIC item %d: noun set not ascending", i);
    }
}

static int64_t hist_rows(const struct tb_ann_hist *h)
{
    int64_t n = 0;
    for (int i = 0; i < h->n_classes; i++) {
        if (h->classes[i].count < 1 || (i && h->classes[i].count > h->classes[i - 1].count))
            tbf_fail("histogram entry %d: count %lld out of order", i,
                     (long long)h->classes[i].count);
        n += h->classes[i].count;
    }
    if (n != h->n_rows)
        tbf_fail("histogram counts add up to %lld, not %lld rows", (long long)n,
                 (long long)h->n_rows);
    return n;
}

static void stats(const struct tb_annotations *a)
{
    struct tb_ann_stats *s = NULL;
    const struct tb_ann_stats_opts o = {.span_frames = 16};
    int rc = tb_ann_stats_compute(&s, a, &o);
    if (rc < 0)
        tbf_fail("tb_ann_stats_compute: %s", tb_errmsg());
    if (s->n_rows != a->n_items || s->n_videos < 1 || s->n_videos > s->n_rows ||
        s->n_short > s->n_counted || s->n_timed > s->n_rows)
        tbf_fail("stats: %lld rows, %lld videos, %lld short of %lld counted", (long long)s->n_rows,
                 (long long)s->n_videos, (long long)s->n_short, (long long)s->n_counted);
    if (s->n_timed && !(s->min_s <= s->median_s && s->median_s <= s->max_s))
        tbf_fail("stats: durations min %g, median %g, max %g", s->min_s, s->median_s, s->max_s);
    hist_rows(&s->verb);
    hist_rows(&s->noun);
    hist_rows(&s->action);
    tb_ann_stats_free(&s);
}

static void sentences(const struct tb_annotations *a)
{
    struct tb_mir_sentences *s = NULL;
    for (int i = 0; i < a->n_items; i++)
        if (!a->items[i].text)
            return; /* tb_mir_sentences_build refuses it, as it says */
    for (int i = 0; i < a->n_items; i++)
        if (a->items[i].cell_error) { /* a noun set that did not parse: refused, named */
            if (tb_mir_sentences_build(&s, a) != TB_EFORMAT || s ||
                strcmp(tb_errmsg(), a->items[i].cell_error))
                tbf_fail("tb_mir_sentences_build beside '%s': %s", a->items[i].cell_error,
                         tb_errmsg());
            return;
        }
    int rc = tb_mir_sentences_build(&s, a);
    if (rc < 0)
        tbf_fail("tb_mir_sentences_build: %s", tb_errmsg());
    if (s->n < 1 || s->n > a->n_items)
        tbf_fail("%d sentences of %d clips", s->n, a->n_items);
    for (int j = 0; j < s->n; j++)
        if (s->item[j] < 0 || s->item[j] >= a->n_items || s->text[j] != a->items[s->item[j]].text)
            tbf_fail("sentence %d names clip %d", j, s->item[j]);
    if ((int64_t)a->n_items * s->n <= MAX_RELEVANCY) {
        float *rel = malloc(sizeof(*rel) * (size_t)a->n_items * (size_t)s->n);
        if (rel && (rc = tb_mir_relevancy(a, s, 0, a->n_items, rel)) < 0)
            tbf_fail("tb_mir_relevancy: %s", tb_errmsg());
        for (int64_t k = 0; rel && k < (int64_t)a->n_items * s->n; k++)
            if (!(rel[k] >= 0 && rel[k] <= 1))
                tbf_fail("relevancy %lld is %g", (long long)k, (double)rel[k]);
        for (int j = 0; rel && j < s->n; j++)
            if (rel[(int64_t)s->item[j] * s->n + j] != 1.0f)
                tbf_fail("sentence %d's own clip has relevancy %g", j,
                         (double)rel[(int64_t)s->item[j] * s->n + j]);
        free(rel);
    }
    tb_mir_sentences_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const enum tb_ann_format format = TBF_ANN_FORMAT;
    const char *path = tbf_put(0, data, size);
    struct tb_annotations *skip = NULL, *strict = NULL;
    struct tb_ann_opts o = {.format = format, .skip_bad_rows = 1};
    tb_errclear();
    int rc_skip = tb_ann_load(&skip, path, &o);
    tbf_check_error(rc_skip, "tb_ann_load", path);
    o.skip_bad_rows = 0;
    tb_errclear();
    int rc_strict = tb_ann_load(&strict, path, &o);
    tbf_check_error(rc_strict, "tb_ann_load", path);
    if ((rc_strict == 0) != (rc_skip == 0 && skip->n_skipped == 0))
        tbf_fail("strict loading %s, skipping %s with %d rows skipped", tb_strerror(rc_strict),
                 tb_strerror(rc_skip), skip ? skip->n_skipped : -1);
    if (strict && strict->n_items != skip->n_items)
        tbf_fail("strict loading gave %d items, skipping %d", strict->n_items, skip->n_items);
    tb_ann_free(&strict);
    if (rc_skip < 0)
        return 0;
    check_items(skip, format);
    stats(skip);
    if (format == TB_ANN_EPIC) {
        int n_actions = tb_ann_map_actions(&skip, 1);
        if (n_actions < 1 || n_actions > skip->n_items)
            tbf_fail("tb_ann_map_actions: %d actions of %d items", n_actions, skip->n_items);
        for (int i = 0; i < skip->n_items; i++)
            if (skip->items[i].action < 0 || skip->items[i].action >= n_actions)
                tbf_fail("item %d: action %d of %d", i, skip->items[i].action, n_actions);
        stats(skip);
        sentences(skip);
    }
    tb_ann_free(&skip);
    if (skip)
        tbf_fail("tb_ann_free left the pointer set");
    return 0;
}
