/* tests/test_captions.c - relevant captions (AVION's EK-100 MIR fine-tuning; metrics.h's
 * tb_mir_captions_*, --relevant-captions):
 * - on hand-built clips whose verb and noun classes give relevancies 1, 1/2, 3/4, 1/6, 1/10
 *   and 0: each clip's set of sentences above a threshold equals the one this file computes
 *   from the classes in double precision, for thresholds on and off those values;
 * - the draws under TB_RNG_CAPTION keyed by (epoch, clip) over 20,000 epochs: only sentences
 *   of the set, each as often as a uniform choice gives (chi-square per clip, p = 1e-6);
 * - a clip with no sentence above the threshold draws -1 (the clip task keeps its narration);
 * - the relevancy from files against tests/ref/captions_ref.py (NumPy's np.where(rel[i] >
 *   t), AVION's expression): .npy float64 and float32 (compared in float32, as NumPy does: a
 *   threshold where the two differ is included), pickles of protocols 3, 4 and 5; files of
 *   another shape, column order, protocol 2, Fortran order or not an array refused, named;
 * - an EK-100-sized split (67,217 clips, 97 verbs, 300 nouns, long-tailed, one clip in ten
 *   with two nouns, every narration distinct: 67,217 x 67,217): its memory bounded and sampled
 *   rows right; a smaller one of 2,500 clips from a float64 .npy and from the classes: the
 *   same sets, the same draws;
 * - `tubelet train --task clip --relevant-captions`: the same checkpoint for 1 and 4 loader
 *   workers; another than without it; with a threshold that leaves each clip its own
 *   sentence only, the same as without it (the sentence reaches the clip's tokens); with one
 *   sentence, most clips having none above the threshold (their own narration), the same as
 *   without it; from a relevancy file and a sentence CSV, the same as from the classes;
 *   misuse refused;
 * - caption lists (a narration CSV's captions column, LaViLa's LLM-augmented narrations):
 *   each visit (epoch, sample) draws one of its clip's list from TB_RNG_CAPTION's stream keyed
 *   by them, uniformly over 20,000 epochs (chi-square, p = 1e-6); `tubelet train` from such a
 *   CSV for an epoch equals the run on the CSV of the captions drawn for that epoch, differs
 *   from the run on each list's first caption, and an interrupted and resumed run equals the
 *   uninterrupted one;
 * - the classes CSV of --class-names read as pandas reads it (a byte order mark, CRLF, quoted
 *   keys, 3,000-byte rows), a comma outside quotes refused. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <time.h>

#include "ek100_split.h"
#include "tb_test.h"
#include "tubelet/data.h"
#include "tubelet/metrics.h"
#include "tubelet/rng.h"

#ifndef PYTHON
#define PYTHON TB_TEST_PYTHON
#endif

/* EK-100's caption relevancy of clip v and the sentence of clip t, written here from the
 * definition (JPoSE's create_relevancy_files.py) rather than taken from the library. */
static double rel_of(const struct tb_ann_item *v, const struct tb_ann_item *t)
{
    int both = 0;
    for (int a = 0; a < v->n_nouns; a++)
        for (int b = 0; b < t->n_nouns; b++)
            both += v->nouns[a] == t->nouns[b];
    double noun = (double)both / (double)(v->n_nouns + t->n_nouns - both);
    return ((v->verb == t->verb ? 1.0 : 0.0) + noun) / 2;
}

/* The sentences of clip i above the threshold, as a 0/1 mask (s->n) from rel_of. */
static int expected_mask(const struct tb_annotations *a, const struct tb_mir_sentences *s,
                         int i, double thr, char *mask)
{
    int m = 0;
    for (int j = 0; j < s->n; j++)
        m += mask[j] = rel_of(&a->items[i], &a->items[s->item[j]]) > thr;
    return m;
}

/* The library's set for clip i equals mask: its list ascending, each once, no other; and,
 * when each is asked for (small sets), the k-th sentence the k-th of the list. */
static void same_set(const tb_mir_captions *c, int i, const char *mask, int n_sent,
                     const char *what, int each)
{
    int64_t m = tb_mir_captions_count(c, i);
    int *list = malloc(sizeof(int) * (size_t)(m + 1)), want = 0, ok = list != NULL;
    for (int j = 0; j < n_sent; j++)
        want += mask[j];
    CHECK_EQ(list ? tb_mir_captions_list(c, i, list) : -1, m);
    for (int64_t k = 0; ok && k < m; k++) {
        int j = list[k];
        ok = j >= 0 && j < n_sent && mask[j] && (!k || j > list[k - 1]) &&
             (!each || tb_mir_captions_sentence(c, i, k) == j);
    }
    CHECK_MSG(ok && m == want, "%s: clip %d has %lld sentences (%s), expected %d", what, i,
              (long long)m, ok ? "each expected" : "an unexpected, repeated or misplaced one",
              want);
    free(list);
}

/* An EPIC row: id, narration, verb class, noun classes (the first is noun_class). */
static void epic_row(FILE *f, int i, const char *narr, int verb, const int *nouns, int n)
{
    fprintf(f, "P01_01_%d,P01,P01_01,00:00:%02d.00,00:00:%02d.00,00:00:%02d.50,%d,%d,%s,v%d,%d,"
            "n%d,%d,\"['n']\",\"[", i, i % 60, i % 60, i % 60, 30 * (i % 60),
            30 * (i % 60) + 15, narr, verb, verb, nouns[0], nouns[0]);
    for (int k = 0; k < n; k++)
        fprintf(f, "%s%d", k ? ", " : "", nouns[k]);
    fprintf(f, "]\"\n");
}

static const char *epic_header = "narration_id,participant_id,video_id,narration_timestamp,"
                                 "start_timestamp,stop_timestamp,start_frame,stop_frame,"
                                 "narration,verb,verb_class,noun,noun_class,all_nouns,"
                                 "all_noun_classes\n";

/* The hand-built clips: relevancies between them are 1 (same verb and nouns), 3/4 (same verb,
 * noun sets {0} and {0, 1}), 1/2 (same verb, no noun in common), 1/4, 1/6 ({3} against
 * {3, 4, 5}, verbs differ), 1/10 ({3} against {3, 6, 7, 8, 9}) and 0; clip 5 repeats clip
 * 0's narration (one sentence for both). */
static void write_small(const char *path)
{
    static const struct {
        const char *narr;
        int verb, n, nouns[5];
    } rows[] = {
        {"take cup", 0, 1, {0}},
        {"take plate", 0, 1, {1}},
        {"wash cup", 1, 1, {0}},
        {"wash cup and plate", 1, 2, {0, 1}},
        {"open fridge", 2, 1, {2}},
        {"take cup", 0, 1, {0}},
        {"put pan pot lid", 3, 3, {3, 4, 5}},
        {"close pan", 2, 1, {3}},
        {"stir pan bowl spoon knife fork", 4, 5, {3, 6, 7, 8, 9}},
        {"wash plate", 1, 1, {1}},
        {"open pan", 2, 1, {3}},
    };
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(epic_header, f);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        epic_row(f, (int)i, rows[i].narr, rows[i].verb, rows[i].nouns, rows[i].n);
    fclose(f);
}

/* The sentence CSV of s: narration_id per row (tb_mir_sentences_load reads it back). */
static void write_sentences(const struct tb_annotations *a, const struct tb_mir_sentences *s,
                            const char *path)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fprintf(f, "narration_id,narration\n");
    for (int j = 0; j < s->n; j++)
        fprintf(f, "%s,%s\n", a->items[s->item[j]].id, s->text[j]);
    fclose(f);
}

/* The chi-square value a statistic of df degrees of freedom exceeds with probability 1e-6
 * (Wilson-Hilferty: z = 4.753 standard deviations of the normal). */
static double chi2_limit(int df)
{
    double k = 2.0 / (9.0 * df), x = 1 - k + 4.753 * sqrt(k);
    return df * x * x * x;
}

static const double thresholds[] = {0.1, 0.2, 0.166666665, 0.5, 0.6, 0.9, 0};
#define N_THR ((int)(sizeof(thresholds) / sizeof(thresholds[0])))

static void test_sets_and_draws(const struct tb_annotations *a, const struct tb_mir_sentences *s)
{
    char *mask = calloc((size_t)s->n, 1);
    for (int t = 0; t < N_THR && mask; t++) {
        tb_mir_captions *c = NULL;
        tbt_case = "sets from the classes";
        CHECK_EQ(tb_mir_captions_open(&c, a, s, thresholds[t], NULL), 0);
        if (!c)
            continue;
        struct tb_mir_captions_stats st;
        tb_mir_captions_stats(c, &st);
        int64_t pairs = 0;
        for (int i = 0; i < a->n_items; i++) {
            char what[64];
            snprintf(what, sizeof(what), "threshold %g", thresholds[t]);
            pairs += expected_mask(a, s, i, thresholds[t], mask);
            same_set(c, i, mask, s->n, what, 1);
        }
        CHECK_EQ(st.n_pairs, pairs);
        CHECK_EQ(st.n_items, a->n_items);
        CHECK_EQ(st.n_empty, 0); /* every clip's own narration is a sentence, at 1 */
        /* the draws at AVION's threshold: uniform over each clip's set */
        if (thresholds[t] == 0.1) {
            tbt_case = "draws: uniform over the set";
            enum { E = 20000 };
            int *hits = calloc((size_t)s->n, sizeof(int)), tested = 0;
            for (int i = 0; i < a->n_items && hits; i++) {
                int m = expected_mask(a, s, i, 0.1, mask), outside = 0;
                memset(hits, 0, sizeof(int) * (size_t)s->n);
                for (int e = 0; e < E; e++) {
                    tb_rng g;
                    tb_rng_init_for(&g, 3, TB_RNG_CAPTION, (uint64_t)e, (uint64_t)i);
                    int j = tb_mir_captions_draw(c, i, &g);
                    if (j < 0 || j >= s->n || !mask[j])
                        outside++;
                    else
                        hits[j]++;
                }
                CHECK_MSG(!outside, "clip %d: %d draws outside its set", i, outside);
                if (m < 2)
                    continue;
                double want = (double)E / m, chi2 = 0;
                for (int j = 0; j < s->n; j++)
                    if (mask[j])
                        chi2 += (hits[j] - want) * (hits[j] - want) / want;
                CHECK_MSG(chi2 < chi2_limit(m - 1), "clip %d: chi-square %.2f over %d "
                          "sentences (limit %.2f at p = 1e-6)", i, chi2, m, chi2_limit(m - 1));
                tested++;
            }
            CHECK_MSG(tested >= 8, "only %d clips with a choice", tested);
            free(hits);
        }
        tb_mir_captions_close(&c);
        CHECK(c == NULL);
    }
    free(mask);
    tbt_case = "threshold out of range";
    tb_mir_captions *c = NULL;
    CHECK_EQ(tb_mir_captions_open(&c, a, s, 1.0, NULL), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "threshold 1; it lies in [0, 1)");
    CHECK_EQ(tb_mir_captions_open(&c, a, s, -0.1, NULL), TB_EINVAL);
    CHECK(c == NULL);
    tb_mir_captions_close(&c);
}

/* A sentence list of only some clips: the others may have nothing above the threshold. */
static void test_fallback(const struct tb_annotations *a)
{
    tbt_case = "fallback: no sentence above the threshold";
    struct tb_mir_sentences *s = NULL;
    const char *path = tbt_path("two_sentences.csv");
    FILE *f = fopen(path, "w");
    if (f) {
        /* "take cup" (verb 0, {0}) and "open fridge" (verb 2, {2}) */
        fprintf(f, "narration_id,narration\nP01_01_0,take cup\nP01_01_4,open fridge\n");
        fclose(f);
    }
    CHECK_EQ(tb_mir_sentences_load(&s, path, a), 0);
    tb_mir_captions *c = NULL;
    CHECK_EQ(tb_mir_captions_open(&c, a, s, 0.6, NULL), 0);
    char mask[2];
    int empty = 0;
    for (int i = 0; c && i < a->n_items; i++) {
        int m = expected_mask(a, s, i, 0.6, mask);
        same_set(c, i, mask, 2, "two sentences", 1);
        tb_rng g;
        tb_rng_init_for(&g, 0, TB_RNG_CAPTION, 0, (uint64_t)i);
        int j = tb_mir_captions_draw(c, i, &g);
        CHECK_MSG(m ? j >= 0 && mask[j] : j == -1, "clip %d: drew %d of %d", i, j, m);
        empty += !m;
    }
    struct tb_mir_captions_stats st = {0};
    if (c)
        tb_mir_captions_stats(c, &st);
    /* above 0.6 only with the same verb and nouns: clips 0, 4 and 5 */
    CHECK_MSG(empty >= 5 && st.n_empty == empty, "%d clips without a sentence, stats say %lld",
              empty, (long long)st.n_empty);
    tb_mir_captions_close(&c);
    tb_mir_sentences_free(&s);
}

/* Sets from files written by captions_ref.py, against its np.where lines. */
static void same_as_lines(const tb_mir_captions *c, int n_items, int n_sent, const char *lines,
                          const char *what)
{
    char *text = tbt_read(lines, NULL), *p = text, *mask = calloc((size_t)n_sent, 1);
    CHECK_MSG(text != NULL, "%s: no %s", what, lines);
    for (int i = 0; text && mask && i < n_items; i++) {
        memset(mask, 0, (size_t)n_sent);
        char *nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = '\0';
        for (char *q = p, *e; *q; q = e) {
            long j = strtol(q, &e, 10);
            if (e == q)
                break;
            if (j >= 0 && j < n_sent)
                mask[j] = 1;
        }
        same_set(c, i, mask, n_sent, what, 1);
        p = nl + 1;
    }
    free(mask);
    free(text);
}

static void test_files(const struct tb_annotations *a, const struct tb_mir_sentences *s,
                       const char *clips, const char *sentences)
{
    tbt_case = "files against captions_ref.py";
    if (tbt_run(NULL, 60, PYTHON " -c 'import numpy'") != 0) {
        fprintf(stderr, "skip: no numpy for tests/ref/captions_ref.py\n");
        return;
    }
    const char *d = tbt_dir();
    char *out = NULL, args[256] = "";
    for (int t = 0; t < N_THR; t++)
        snprintf(args + strlen(args), sizeof(args) - strlen(args), " %.17g", thresholds[t]);
    int rc = tbt_run(&out, 120, PYTHON " %s/tests/ref/captions_ref.py %s %s %s%s",
                     TB_SOURCE_DIR, clips, sentences, d, args);
    CHECK_MSG(rc == 0, "captions_ref.py: %s", out);
    free(out);
    if (rc)
        return;
    struct tb_mir_sentences *sl = NULL;
    CHECK_EQ(tb_mir_sentences_load(&sl, sentences, a), 0);
    if (!sl)
        return;
    CHECK_EQ(sl->n, s->n);
    static const char *const f8[] = {"rel_f8.npy", "rel_p3.pkl", "rel_p4.pkl", "rel_p5.pkl"};
    char file[4400], lines[4400], what[200];
    int differ = 0;
    for (int t = 0; t < N_THR; t++) {
        for (int k = 0; k < 5; k++) {
            const char *name = k < 4 ? f8[k] : "rel_f4.npy";
            tb_mir_captions *c = NULL;
            snprintf(file, sizeof(file), "%s/%s", d, name);
            snprintf(lines, sizeof(lines), "%s/pos_%s_%d.txt", d, k < 4 ? "f8" : "f4", t);
            snprintf(what, sizeof(what), "%s, threshold %.17g", name, thresholds[t]);
            CHECK_MSG(tb_mir_captions_open(&c, a, sl, thresholds[t], file) == 0, "%s: %s", what,
                      tb_errmsg());
            if (c)
                same_as_lines(c, a->n_items, sl->n, lines, what);
            tb_mir_captions_close(&c);
        }
        snprintf(file, sizeof(file), "%s/pos_f8_%d.txt", d, t);
        snprintf(lines, sizeof(lines), "%s/pos_f4_%d.txt", d, t);
        char *x = tbt_read(file, NULL), *y = tbt_read(lines, NULL);
        differ += x && y && strcmp(x, y);
        free(x);
        free(y);
    }
    /* 0.166666665 lies below 1/6 but within half a float32 step of float32(1/6): in float64
     * the 1/6 pairs are above it, in float32 they equal it */
    CHECK_MSG(differ == 1, "%d thresholds where float32 and float64 files differ", differ);

    tbt_case = "refused files";
    tb_mir_captions *c = NULL;
    snprintf(file, sizeof(file), "%s/rel_p2.pkl", d);
    CHECK_EQ(tb_mir_captions_open(&c, a, sl, 0.1, file), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "protocol 2 from Python 3 keeps it as text");
    snprintf(file, sizeof(file), "%s/rel_fortran.pkl", d);
    CHECK_EQ(tb_mir_captions_open(&c, a, sl, 0.1, file), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "Fortran order");
    snprintf(file, sizeof(file), "%s/not_array.pkl", d);
    CHECK_EQ(tb_mir_captions_open(&c, a, sl, 0.1, file), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "not_array.pkl: not a pickled NumPy array");
    /* truncated: the data cut short */
    snprintf(file, sizeof(file), "%s/rel_p4.pkl", d);
    snprintf(lines, sizeof(lines), "%s/cut.pkl", d);
    tbt_run(NULL, 30, "head -c 300 %s > %s", file, lines);
    CHECK_MSG(tb_mir_captions_open(&c, a, sl, 0.1, lines) == TB_EFORMAT &&
              strstr(tb_errmsg(), "cut.pkl"), "%s", tb_errmsg());
    /* the columns of another order: the built list (s) against the file of sl's order only
     * when they differ; a shape of another split always */
    snprintf(file, sizeof(file), "%s/rel_f8.npy", d);
    CHECK_EQ(tb_mir_captions_open(&c, a, sl, 0.1, file), 0);
    tb_mir_captions_close(&c);
    struct tb_mir_sentences rev = *sl;
    int *items = malloc(sizeof(int) * (size_t)sl->n);
    const char **texts = malloc(sizeof(char *) * (size_t)sl->n);
    for (int j = 0; items && texts && j < sl->n; j++) {
        items[j] = sl->item[sl->n - 1 - j];
        texts[j] = sl->text[sl->n - 1 - j];
    }
    rev.item = items;
    rev.text = texts;
    CHECK_EQ(tb_mir_captions_open(&c, a, &rev, 0.1, file), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "with its own clip, not 1");
    rev.n = sl->n - 1;
    CHECK_EQ(tb_mir_captions_open(&c, a, &rev, 0.1, file), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "but the split has 11 clips");
    CHECK(c == NULL);
    free(items);
    free(texts);
    tb_mir_sentences_free(&sl);
}

/* The .npy header of a (rows, cols) array of descr. */
static void npy_header(FILE *f, const char *descr, int rows, int cols)
{
    char h[128];
    int len = snprintf(h, sizeof(h), "{'descr': '%s', 'fortran_order': False, 'shape': (%d, "
                       "%d), }", descr, rows, cols);
    int pad = (64 - (10 + len + 1) % 64) % 64;
    uint16_t hl = (uint16_t)(len + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(hl & 255, f);
    fputc(hl >> 8, f);
    fwrite(h, 1, (size_t)len, f);
    for (int k = 0; k < pad; k++)
        fputc(' ', f);
    fputc('\n', f);
}

/* The relevancy of annotations a over sentences s into path: float32 from the library's
 * tb_mir_relevancy, or float64 from this file's rel_of. */
static void write_npy(const struct tb_annotations *a, const struct tb_mir_sentences *s,
                      const char *path, int f64)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    npy_header(f, f64 ? "<f8" : "<f4", a->n_items, s->n);
    float *r32 = malloc(sizeof(float) * (size_t)s->n);
    double *r64 = malloc(sizeof(double) * (size_t)s->n);
    for (int i = 0; r32 && r64 && i < a->n_items; i++) {
        if (f64) {
            for (int j = 0; j < s->n; j++)
                r64[j] = rel_of(&a->items[i], &a->items[s->item[j]]);
            fwrite(r64, sizeof(double), (size_t)s->n, f);
        } else {
            CHECK_EQ(tb_mir_relevancy(a, s, i, 1, r32), 0);
            fwrite(r32, sizeof(float), (size_t)s->n, f);
        }
    }
    free(r32);
    free(r64);
    fclose(f);
}

/* ---- an EK-100-sized split ---------------------------------------------------------------- */

static void test_large(void)
{
    tbt_case = "an EK-100-sized split";
    enum { N = 67217 };
    const char *path = tbt_path("large.csv");
    CHECK_EQ(tbt_write_ek100_split(path, N, 1), 0);
    struct tb_annotations *a = NULL;
    struct tb_ann_opts o = {.format = TB_ANN_EPIC};
    CHECK_EQ(tb_ann_load(&a, path, &o), 0);
    struct tb_mir_sentences *s = NULL;
    CHECK_EQ(a ? tb_mir_sentences_build(&s, a) : -1, 0);
    if (!a || !s)
        goto end;
    CHECK_EQ(a->n_items, N);
    CHECK_EQ(s->n, N);
    tb_mir_captions *c = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ(tb_mir_captions_open(&c, a, s, 0.1, NULL), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!c)
        goto end;
    struct tb_mir_captions_stats st;
    tb_mir_captions_stats(c, &st);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    fprintf(stderr, "large split: %lld clips x %lld sentences, %lld pairs above 0.1 (%.0f a "
            "clip), %lld rows, %lld groups, %lld entries, %.2f MB (the dense float32 matrix: "
            "%.1f GB), %.2f s\n", (long long)st.n_items, (long long)st.n_sentences,
            (long long)st.n_pairs, (double)st.n_pairs / N, (long long)st.n_rows,
            (long long)st.n_groups, (long long)st.n_entries, st.bytes / 1e6,
            4.0 * N * N / 1e9, secs);
    /* bounded: what a sparse list of its pairs alone would take is ~4 bytes each */
    CHECK_MSG(st.bytes < (int64_t)64 << 20, "%lld bytes", (long long)st.bytes);
    CHECK_MSG(st.bytes * 20 < 4 * st.n_pairs, "%lld bytes for %lld pairs", (long long)st.bytes,
              (long long)st.n_pairs);
    char *mask = malloc(N);
    for (int i = 0; mask && i < N; i += 331) {
        expected_mask(a, s, i, 0.1, mask);
        same_set(c, i, mask, N, "large split", 0);
        /* a few sentences by rank, as a draw takes them */
        tb_rng g;
        tb_rng_init_for(&g, 0, TB_RNG_CAPTION, 0, (uint64_t)i);
        int j = tb_mir_captions_draw(c, i, &g);
        CHECK_MSG(j >= 0 && j < N && mask[j], "clip %d drew %d", i, j);
    }
    free(mask);
    tb_mir_captions_close(&c);
end:
    tb_mir_sentences_free(&s);
    tb_ann_free(&a);
}

/* A split of 2,500 clips from a float64 file (its rows grouped and grown past the first
 * allocation) and from the classes: the same sentences for every clip, and the same draws. */
static void test_medium_file(void)
{
    tbt_case = "a float64 file and the classes: the same sets and draws";
    enum { N = 2500 };
    const char *csv = tbt_path("medium.csv");
    char npy[4400];
    snprintf(npy, sizeof(npy), "%s", tbt_path("medium.npy"));
    CHECK_EQ(tbt_write_ek100_split(csv, N, 1), 0);
    struct tb_annotations *a = NULL;
    struct tb_ann_opts o = {.format = TB_ANN_EPIC};
    struct tb_mir_sentences *s = NULL;
    tb_mir_captions *cf = NULL, *cc = NULL;
    CHECK_EQ(tb_ann_load(&a, csv, &o), 0);
    CHECK_EQ(a ? tb_mir_sentences_build(&s, a) : -1, 0);
    if (!a || !s)
        goto end;
    write_npy(a, s, npy, 1);
    CHECK_MSG(tb_mir_captions_open(&cf, a, s, 0.1, npy) == 0, "%s", tb_errmsg());
    CHECK_EQ(tb_mir_captions_open(&cc, a, s, 0.1, NULL), 0);
    if (!cf || !cc)
        goto end;
    struct tb_mir_captions_stats sf, sc;
    tb_mir_captions_stats(cf, &sf);
    tb_mir_captions_stats(cc, &sc);
    CHECK_EQ(sf.n_pairs, sc.n_pairs);
    /* clips of one class have equal rows: the file stores no more rows than classes */
    CHECK_MSG(sf.n_rows <= sc.n_rows && sc.n_rows < N && sf.n_entries > 1 << 16, "%lld rows "
              "from the file, %lld classes, %lld entries (more than the first allocation's "
              "65,536?)", (long long)sf.n_rows, (long long)sc.n_rows, (long long)sf.n_entries);
    int *lf = malloc(sizeof(int) * (size_t)s->n), *lc = malloc(sizeof(int) * (size_t)s->n);
    int same = 1, draws = 1;
    for (int i = 0; lf && lc && i < N; i++) {
        int64_t m = tb_mir_captions_list(cf, i, lf);
        same &= m == tb_mir_captions_list(cc, i, lc) &&
                !memcmp(lf, lc, sizeof(int) * (size_t)m);
        for (int e = 0; e < 3; e++) {
            tb_rng g1, g2;
            tb_rng_init_for(&g1, 5, TB_RNG_CAPTION, (uint64_t)e, (uint64_t)i);
            g2 = g1;
            draws &= tb_mir_captions_draw(cf, i, &g1) == tb_mir_captions_draw(cc, i, &g2);
        }
    }
    CHECK_MSG(same, "a clip's sentences differ between the file and the classes");
    CHECK_MSG(draws, "a draw differs between the file and the classes");
    free(lf);
    free(lc);
end:
    tb_mir_captions_close(&cf);
    tb_mir_captions_close(&cc);
    tb_mir_sentences_free(&s);
    tb_ann_free(&a);
}

/* ---- tubelet train ------------------------------------------------------------------------ */

static int ckpt_differs(const char *run_a, const char *run_b)
{
    char pa[4400], pb[4400];
    snprintf(pa, sizeof(pa), "%s/last.safetensors", run_a);
    snprintf(pb, sizeof(pb), "%s/last.safetensors", run_b);
    struct tb_st_file *fa = NULL, *fb = NULL;
    int differ = 0;
    if (tb_st_read(&fa, pa) == 0 && tb_st_read(&fb, pb) == 0)
        for (int i = 0; i < fa->n_tensors; i++) {
            const struct tb_st_tensor *x = &fa->tensors[i], *y = tb_st_find(fb, x->name);
            differ |= !y || y->n != x->n ||
                      (x->dtype == TB_ST_F32 &&
                       memcmp(x->data, y->data, sizeof(float) * (size_t)x->n));
        }
    tb_st_free(&fa);
    tb_st_free(&fb);
    return differ;
}

static void test_list_train(const char *data, const char *epic_csv);
static void test_class_names(const char *data, const char *ckpt_run);

static void test_train(void)
{
    const char *t = tbt_tubelet(), *d = tbt_dir();
    char data[4200], csv[4400], flags[6000], *out = NULL;
    snprintf(data, sizeof(data), "%s/data", d);
    snprintf(csv, sizeof(csv), "%s/syn/annotations/EPIC_100_train.csv", d);
    tbt_case = "tubelet train: data";
    int rc = tbt_run(&out, 300, "%s synth --out %s/syn --videos 4 --seconds 20 --size 96x64 && "
                     "%s prep %s/syn/videos/*.mp4 --out %s --short-side 48 --preset veryfast",
                     t, d, t, d, data);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    if (rc)
        return;
    snprintf(flags, sizeof(flags), "--task clip --data %s --train %s --dim 32 --depth 2 "
             "--heads 2 --patch 16 --frames 2 --size 32 --batch 4 --embed 16 --text-width 32 "
             "--text-heads 2 --text-depth 1 --context 12 --log-every 1 --eval-every 0 "
             "--epochs 2 --lr 1e-3 --warmup-epochs 0", data, csv);

    /* the premise of the 0.99 run: each clip's only sentence above 0.99 is its narration */
    struct tb_annotations *a = NULL;
    struct tb_ann_opts o = {.format = TB_ANN_EPIC};
    struct tb_mir_sentences *s = NULL;
    tb_mir_captions *c = NULL;
    CHECK_EQ(tb_ann_load(&a, csv, &o), 0);
    CHECK_EQ(a ? tb_mir_sentences_build(&s, a) : -1, 0);
    CHECK_EQ(s ? tb_mir_captions_open(&c, a, s, 0.99, NULL) : -1, 0);
    int own_only = 1, choices = 0;
    for (int i = 0; c && i < a->n_items; i++)
        own_only &= tb_mir_captions_count(c, i) == 1 &&
                    !strcmp(s->text[tb_mir_captions_sentence(c, i, 0)], a->items[i].text);
    tb_mir_captions_close(&c);
    CHECK_EQ(s ? tb_mir_captions_open(&c, a, s, 0.1, NULL) : -1, 0);
    for (int i = 0; c && i < a->n_items; i++)
        choices += tb_mir_captions_count(c, i) > 1;
    tb_mir_captions_close(&c);
    CHECK_MSG(own_only && choices > a->n_items / 2, "the synthetic split: own only %d, %d "
              "clips with a choice at 0.1", own_only, choices);

    /* one sentence, clip 0's: at 0.99 the clips of its class draw it (their own narration),
     * every other clip has none above and keeps its own */
    int one_ok = 1;
    char p[4400];
    snprintf(p, sizeof(p), "%s/two.csv", d);
    FILE *f = fopen(p, "w");
    if (f && a) {
        fprintf(f, "narration_id,narration\n%s,%s\n%s,%s\n", a->items[0].id, a->items[0].text,
                a->items[1].id, a->items[1].text);
        fclose(f);
    }
    snprintf(p, sizeof(p), "%s/one.csv", d);
    if ((f = fopen(p, "w")) && a) {
        fprintf(f, "narration_id,narration\n%s,%s\n", a->items[0].id, a->items[0].text);
        fclose(f);
        struct tb_mir_sentences *one = NULL;
        CHECK_EQ(tb_mir_sentences_load(&one, p, a), 0);
        CHECK_EQ(one ? tb_mir_captions_open(&c, a, one, 0.99, NULL) : -1, 0);
        int none = 0;
        for (int i = 0; c && i < a->n_items; i++) {
            int64_t m = tb_mir_captions_count(c, i);
            none += !m;
            one_ok &= !m || !strcmp(a->items[i].text, a->items[0].text);
        }
        one_ok &= none > a->n_items / 2;
        tb_mir_captions_close(&c);
        tb_mir_sentences_free(&one);
    }
    CHECK_MSG(one_ok, "one sentence: the synthetic split does not fit the premise");

    enum { RUNS = 7 };
    char run[RUNS][4400], files[2][9000];
    snprintf(files[0], sizeof(files[0]), "--workers 3 --relevant-captions 0.1 --train-relevancy "
             "%s/rel.npy --train-sentences %s/sentences.csv", d, d);
    snprintf(files[1], sizeof(files[1]), "--workers 2 --relevant-captions 0.99 "
             "--train-sentences %s/one.csv", d);
    const char *extra[RUNS] = {
        "--workers 1 --relevant-captions 0.1", "--workers 4 --relevant-captions 0.1",
        "--workers 2 --relevant-captions 0.1", "--workers 2 --relevant-captions 0",
        "--workers 2 --relevant-captions 0.99", files[0], files[1]};
    if (a && s) {
        snprintf(p, sizeof(p), "%s/rel.npy", d);
        write_npy(a, s, p, 0);
        snprintf(p, sizeof(p), "%s/sentences.csv", d);
        write_sentences(a, s, p);
    }
    for (int k = 0; k < RUNS; k++) {
        tbt_case = "tubelet train --relevant-captions";
        snprintf(run[k], sizeof(run[k]), "%s/run%d", d, k);
        rc = tbt_run(&out, 300, "%s train %s %s --out %s", t, flags, extra[k], run[k]);
        CHECK_MSG(rc == 0, "%s: %s", extra[k], out);
        if (k != 3)
            CHECK_STR_HAS(out, "relevant captions: ");
        free(out);
    }
    tbt_case = "1, 2 and 4 workers";
    tbt_same_ckpt(run[0], run[1], "relevant captions, 1 and 4 workers");
    tbt_same_ckpt(run[0], run[2], "relevant captions, 1 and 2 workers");
    tbt_case = "another run than without";
    CHECK_MSG(ckpt_differs(run[0], run[3]), "the captions changed nothing");
    tbt_case = "own sentence only: the run without";
    tbt_same_ckpt(run[3], run[4], "threshold 0.99");
    tbt_case = "from a relevancy file and a sentence CSV";
    tbt_same_ckpt(run[0], run[5], "from rel.npy");
    tbt_case = "none above: the clip's own narration";
    tbt_same_ckpt(run[3], run[6], "one sentence at 0.99");

    tbt_case = "misuse refused";
    rc = tbt_run(&out, 60, "%s train %s --relevant-captions 1 --out %s/bad1", t, flags, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "threshold 1; it lies in [0, 1)"), "%s", out);
    free(out);
    rc = tbt_run(&out, 60, "%s train %s --train-relevancy %s/rel.npy --train-sentences "
                 "%s/sentences.csv --out %s/bad2", t, flags, d, d, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "they need --relevant-captions"), "%s", out);
    free(out);
    rc = tbt_run(&out, 60, "%s train %s --relevant-captions 0.1 --train-sentences "
                 "%s/two.csv --train-relevancy %s/rel.npy --out %s/bad3", t, flags, d, d, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "rel.npy: relevancy of 2 dimensions (18 x "),
              "%s", out);
    free(out);
    rc = tbt_run(&out, 60, "%s train --data %s --train %s --dim 32 --depth 1 --heads 2 "
                 "--frames 2 --size 32 --batch 4 --epochs 1 --relevant-captions 0.1 --out "
                 "%s/bad4", t, data, csv, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "not --task cls"), "%s", out);
    free(out);
    tb_mir_sentences_free(&s);
    tb_ann_free(&a);
    test_list_train(data, csv);
    test_class_names(data, run[0]);
}

/* ---- caption lists (LaViLa's LLM-augmented narrations) ---------------------------------- */

/* s as one CSV field: quoted, quotes doubled. */
static void csv_field(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++)
        fputs(*s == '"' ? "\"\"" : (char[]){*s, 0}, f);
    fputc('"', f);
}

/* n captions as a JSON list (json.dumps's escapes for quotes and backslashes), into buf. */
static void json_list(char *buf, size_t size, char caps[][128], int n)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, size - k, "[");
    for (int i = 0; i < n; i++) {
        k += (size_t)snprintf(buf + k, size - k, "%s\"", i ? ", " : "");
        for (const char *c = caps[i]; *c && k + 3 < size; c++) {
            if (*c == '"' || *c == '\\')
                buf[k++] = '\\';
            buf[k++] = *c;
        }
        k += (size_t)snprintf(buf + k, size - k, "\"");
    }
    snprintf(buf + k, size - k, "]");
}

/* The captions of clip i of a: 1 to 4, each its own text (a comma, a quote, a non-ASCII
 * letter among them). Returns how many. */
static int captions_of(const struct tb_ann_item *it, int i, char caps[4][128])
{
    int n = 1 + i % 4;
    snprintf(caps[0], 128, "%s", it->text);
    snprintf(caps[1], 128, "C %s, slowly", it->text);
    snprintf(caps[2], 128, "a \"%s\" again", it->text);
    snprintf(caps[3], 128, "caf\xC3\xA9: %s", it->text);
    return n;
}

/* Lists of 2 to 6 captions: each visit (epoch e, sample i) draws one of its clip's list,
 * uniformly (chi-square per clip, p = 1e-6), the draw of the seeded stream TB_RNG_CAPTION
 * keyed by (e, i) alone; a single caption draws 0. */
static void test_list_draws(void)
{
    tbt_case = "caption lists: draws";
    const char *path = tbt_path("lists.csv");
    FILE *f = fopen(path, "w");
    fprintf(f, "video_id,start_s,end_s,captions\n");
    for (int i = 0; i < 6; i++) {
        char caps[6][128], list[1024];
        for (int k = 0; k <= i; k++)
            snprintf(caps[k], 128, "clip %d, caption %d", i, k);
        json_list(list, sizeof(list), caps, i + 1);
        fprintf(f, "v%d,%d,%d,", i, i, i + 1);
        csv_field(f, list);
        fputc('\n', f);
    }
    fclose(f);
    struct tb_annotations *a = NULL;
    struct tb_ann_opts o = {.format = TB_ANN_NARRATION};
    CHECK_EQ(tb_ann_load(&a, path, &o), 0);
    if (!a)
        return;
    enum { E = 20000 };
    for (int i = 0; i < a->n_items; i++) {
        const struct tb_ann_item *it = &a->items[i];
        int m = it->n_captions, hits[6] = {0}, ok = m == i + 1;
        for (int e = 0; e < E && ok; e++) {
            int k = tb_ann_caption_draw(it, 7, e, i);
            tb_rng g;
            tb_rng_init_for(&g, 7, TB_RNG_CAPTION, (uint64_t)e, (uint64_t)i);
            int want = m > 1 ? (int)tb_rng_below(&g, (uint64_t)m) : 0;
            ok = k == want && k >= 0 && k < m && k == tb_ann_caption_draw(it, 7, e, i);
            hits[k < 0 || k >= 6 ? 0 : k]++;
        }
        CHECK_MSG(ok, "clip %d: a draw off the list, not its stream's, or not repeated", i);
        if (m < 2)
            continue;
        double want = (double)E / m, chi2 = 0;
        for (int k = 0; k < m; k++)
            chi2 += (hits[k] - want) * (hits[k] - want) / want;
        CHECK_MSG(chi2 < chi2_limit(m - 1), "clip %d: chi-square %.2f over %d captions", i, chi2,
                  m);
        char want_text[64];
        snprintf(want_text, sizeof(want_text), "clip %d, caption %d", i, m - 1);
        CHECK(!strcmp(tb_ann_caption(it, m - 1), want_text));
    }
    /* another seed draws otherwise */
    int differ = 0;
    for (int e = 0; e < 64; e++)
        differ += tb_ann_caption_draw(&a->items[5], 7, e, 5) !=
                  tb_ann_caption_draw(&a->items[5], 8, e, 5);
    CHECK_MSG(differ > 20, "seeds 7 and 8 differ in %d of 64 draws", differ);
    tb_ann_free(&a);
}

/* A run of flags stopped by Ctrl-C once 4 steps are logged, then resumed by the same command. */
static void interrupted(const char *t, const char *flags, const char *run)
{
    char *out = NULL;
    tbt_run(&out, 600, "%s train %s --workers 2 --out %s > %s.log 2>&1 & pid=$!; "
            "while [ \"$(cat %s/metrics.jsonl 2>/dev/null | grep -c step)\" -lt 4 ]; do "
            "kill -0 $pid 2>/dev/null || exit 3; sleep 0.01; done; kill -INT $pid; "
            "wait $pid; echo status=$?", t, flags, run, run, run);
    CHECK_STR_HAS(out, "status=1");
    free(out);
    int rc = tbt_run(&out, 600, "%s train %s --workers 2 --out %s", t, flags, run);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "resuming from");
    free(out);
}

/* Each row of a (its clip) with the caption k_of(item, i) as text, to path. */
static void write_texts(const struct tb_annotations *a, const char *path, int epoch)
{
    FILE *f = fopen(path, "w");
    fprintf(f, "video_id,start_s,end_s,text\n");
    for (int i = 0; i < a->n_items; i++) {
        const struct tb_ann_item *it = &a->items[i];
        int k = epoch < 0 ? 0 : tb_ann_caption_draw(it, 3, epoch, i);
        fprintf(f, "%s,%.3f,%.3f,", it->video, it->start_s, it->end_s);
        csv_field(f, tb_ann_caption(it, k));
        fputc('\n', f);
    }
    fclose(f);
}

/* `tubelet train --task clip` from a caption-list CSV: an epoch is one visit of every clip;
 * each visit's caption is the one tb_ann_caption_draw gives (a run on the CSV of those
 * captions alone ends in the same checkpoint), not always the first (another checkpoint);
 * an interrupted and resumed run draws the same (the same checkpoint), for any workers. */
static void test_list_train(const char *data, const char *epic_csv)
{
    const char *t = tbt_tubelet(), *d = tbt_dir();
    struct tb_annotations *a = NULL, *l = NULL;
    struct tb_ann_opts o = {.format = TB_ANN_EPIC}, on = {.format = TB_ANN_NARRATION};
    char lists[4400], drawn[4400], first[4400], flags[9000], run[5][4400], *out = NULL;
    tbt_case = "caption lists: tubelet train";
    CHECK_EQ(tb_ann_load(&a, epic_csv, &o), 0);
    if (!a)
        return;
    snprintf(lists, sizeof(lists), "%s/lists_train.csv", d);
    snprintf(drawn, sizeof(drawn), "%s/drawn_e0.csv", d);
    snprintf(first, sizeof(first), "%s/first.csv", d);
    FILE *f = fopen(lists, "w");
    fprintf(f, "video_id,start_s,end_s,captions\n");
    for (int i = 0; i < a->n_items; i++) {
        const struct tb_ann_item *it = &a->items[i];
        char caps[4][128], list[1024];
        json_list(list, sizeof(list), caps, captions_of(it, i, caps));
        fprintf(f, "%s,%.3f,%.3f,", it->video, it->start_s, it->end_s);
        csv_field(f, list);
        fputc('\n', f);
    }
    fclose(f);
    tb_ann_free(&a);
    /* the captions epoch 0 draws, and the first of each list, as plain text CSVs */
    CHECK_EQ(tb_ann_load(&l, lists, &on), 0);
    if (!l)
        return;
    int drawn_other = 0;
    for (int i = 0; i < l->n_items; i++)
        drawn_other += tb_ann_caption_draw(&l->items[i], 3, 0, i) != 0;
    CHECK_MSG(drawn_other > 2, "only %d clips draw another caption than their first",
              drawn_other);
    write_texts(l, drawn, 0);
    write_texts(l, first, -1);
    /* the loader's batches carry each visit's caption (as Python's Loader hands them out) */
    tbt_case = "caption lists: the loader's text";
    struct tb_dataset_opts dso = {.root = data, .ext = "mp4", .sampler = TB_SAMPLE_SEGMENTS,
                                  .n_frames = 2, .width = 32, .height = 32, .train = 1,
                                  .crop = {.mode = TB_CROP_CENTER}};
    struct tb_loader_opts lo = {.batch_size = 4, .n_workers = 2, .prefetch = 1, .seed = 3,
                                .shuffle = 1, .world = 1};
    tb_dataset *ds = NULL;
    tb_loader *ld = NULL;
    CHECK_EQ(tb_dataset_open(&ds, l, &dso), 0);
    CHECK_EQ(ds ? tb_loader_open(&ld, ds, &lo) : -1, 0);
    int checked = 0, not_first = 0;
    for (int64_t e = 0; ld && e < 3; e++) {
        int64_t nb = tb_loader_epoch(ld, e);
        for (int64_t k = 0; k < nb; k++) {
            struct tb_batch *b = NULL;
            CHECK_EQ(tb_loader_next(ld, &b), 0);
            for (int j = 0; b && j < b->n; j++) {
                const struct tb_ann_item *it = &l->items[b->index[j]];
                int want = tb_ann_caption_draw(it, 3, e, b->index[j]);
                CHECK_MSG(b->text[j] && !strcmp(b->text[j], tb_ann_caption(it, want)),
                          "epoch %lld, clip %lld: '%s', not its draw '%s'", (long long)e,
                          (long long)b->index[j], b->text[j], tb_ann_caption(it, want));
                checked++;
                not_first += want != 0;
            }
            if (b)
                tb_loader_release(ld, b);
        }
    }
    CHECK_MSG(checked >= 3 * 16 && not_first > 2, "%d captions checked, %d not the first",
              checked, not_first);
    tb_loader_close(&ld);
    tb_dataset_close(&ds);
    tb_ann_free(&l);

    snprintf(flags, sizeof(flags), "--task clip --format narration --data %s --dim 32 --depth 2 "
             "--heads 2 --patch 16 --frames 2 --size 32 --batch 4 --embed 16 --text-width 32 "
             "--text-heads 2 --text-depth 1 --context 16 --log-every 1 --eval-every 0 "
             "--lr 1e-3 --warmup-epochs 0 --seed 3", data);
    const char *extra[5] = {"--epochs 1 --workers 2 --train", "--epochs 1 --workers 1 --train",
                            "--epochs 1 --workers 1 --train", "--epochs 12 --workers 1 --train",
                            NULL};
    const char *train[5] = {lists, drawn, first, lists, NULL};
    for (int k = 0; k < 4; k++) {
        snprintf(run[k], sizeof(run[k]), "%s/lists_run%d", d, k);
        int rc = tbt_run(&out, 300, "%s train %s %s %s --out %s", t, flags, extra[k], train[k],
                         run[k]);
        CHECK_MSG(rc == 0, "%s", out);
        if (k == 0)
            CHECK_STR_HAS(out, "one drawn from its clip's list at every visit");
        free(out);
    }
    tbt_case = "caption lists: each visit's draw";
    tbt_same_ckpt(run[0], run[1], "the lists against the captions drawn for epoch 0");
    tbt_case = "caption lists: not the first caption";
    CHECK_MSG(ckpt_differs(run[0], run[2]), "drawing from the lists changed nothing");
    tbt_case = "caption lists: interrupted and resumed";
    char resumed[9500];
    snprintf(run[4], sizeof(run[4]), "%s/lists_int", d);
    snprintf(resumed, sizeof(resumed), "%s --epochs 12 --train %s", flags, lists);
    interrupted(t, resumed, run[4]);
    tbt_same_ckpt(run[3], run[4], "the lists, resumed");
}

/* The classes CSV of zero-shot classification (--class-names) read as pandas reads it: the
 * synthetic verb classes rewritten with a byte order mark, CRLF, quoted keys, spaces around
 * values and an instances column of 3,000 bytes score exactly as the plain file; a key with a
 * comma outside quotes is refused by file:line. */
static void test_class_names(const char *data, const char *ckpt_run)
{
    const char *t = tbt_tubelet(), *d = tbt_dir();
    char plain[4400], odd[4400], val[4400], *out[2] = {NULL, NULL};
    tbt_case = "classes CSV";
    snprintf(plain, sizeof(plain), "%s/syn/annotations/EPIC_100_verb_classes.csv", d);
    snprintf(val, sizeof(val), "%s/syn/annotations/EPIC_100_validation.csv", d);
    snprintf(odd, sizeof(odd), "%s/verb_classes_odd.csv", d);
    char *text = tbt_read(plain, NULL);
    FILE *f = fopen(odd, "w");
    fputs("\xEF\xBB\xBFid , key,instances,category\r\n", f);
    int n = 0;
    for (char *line = text ? strchr(text, '\n') : NULL; line && line[1]; n++) {
        char key[128] = "";
        line = strchr(line + 1, ',');
        if (!line || sscanf(line + 1, "%127[^,]", key) != 1)
            break;
        fprintf(f, "%d, \"%s\" ,\"[", n, key);
        for (int k = 0; k < 150; k++)
            fprintf(f, "%s'%s-%03d'", k ? ", " : "", key, k);
        fprintf(f, "]\",\tverbs\r\n");
        line = strchr(line, '\n');
    }
    fclose(f);
    free(text);
    CHECK_MSG(n >= 4, "%d classes read from %s", n, plain);
    for (int v = 0; v < 2; v++) {
        int rc = tbt_run(&out[v], 300, "%s eval --task mir --ckpt %s/last.safetensors --data %s "
                         "--val %s --batch 4 --class-names %s", t, ckpt_run, data, val,
                         v ? odd : plain);
        CHECK_MSG(rc == 0, "%s", out[v]);
    }
    const char *z[2] = {out[0] ? strstr(out[0], "\"zeroshot_top1\"") : NULL,
                        out[1] ? strstr(out[1], "\"zeroshot_top1\"") : NULL};
    CHECK_MSG(z[0] && z[1] && !strcmp(z[0], z[1]), "the odd classes CSV scores otherwise:\n%s\n"
              "%s", out[0], out[1]);
    free(out[0]);
    free(out[1]);
    f = fopen(odd, "w");
    fputs("id,key,instances,category\n0,move, left,x,y\n", f);
    fclose(f);
    int rc = tbt_run(&out[0], 300, "%s eval --task mir --ckpt %s/last.safetensors --data %s "
                     "--val %s --batch 4 --class-names %s", t, ckpt_run, data, val, odd);
    CHECK_MSG(rc != 0, "%s", out[0]);
    CHECK_STR_HAS(out[0], "verb_classes_odd.csv:2: more fields (a comma outside quotes?");
    free(out[0]);
}

int main(void)
{
    tbt_begin("captions");
    const char *clips = tbt_path("clips.csv");
    char clips_p[4400], sent_p[4400];
    snprintf(clips_p, sizeof(clips_p), "%s", clips);
    snprintf(sent_p, sizeof(sent_p), "%s", tbt_path("sentences_small.csv"));
    write_small(clips_p);
    struct tb_annotations *a = NULL;
    struct tb_ann_opts o = {.format = TB_ANN_EPIC};
    struct tb_mir_sentences *s = NULL;
    tbt_case = "hand-built clips";
    CHECK_EQ(tb_ann_load(&a, clips_p, &o), 0);
    CHECK_EQ(a ? tb_mir_sentences_build(&s, a) : -1, 0);
    if (a && s) {
        CHECK_EQ(a->n_items, 11);
        CHECK_EQ(s->n, 10); /* clip 5 repeats clip 0's narration */
        write_sentences(a, s, sent_p);
        test_sets_and_draws(a, s);
        test_fallback(a);
        test_files(a, s, clips_p, sent_p);
    }
    tb_mir_sentences_free(&s);
    tb_ann_free(&a);
    test_large();
    test_medium_file();
    test_train();
    test_list_draws();
    TBT_EXIT();
}
