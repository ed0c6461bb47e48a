/* tests/test_mir.c - EPIC-Kitchens-100 multi-instance retrieval (src/metrics/mir.c) and the
 * all_noun_classes column (src/data/annotations.c).
 * - Against tests/ref/mir_ref.py (numpy): mAP and nDCG, both directions, to 1e-12 on random
 *   similarities with graded relevancy, square and not, tied (3 levels, float16, constant, -0
 *   against +0) where the reference's closed form was itself checked against the official
 *   formulas averaged over every order of the ties; queries without relevant items left out
 *   and counted alike; EK-100's sentence list and caption relevancy of a CSV with multi-noun
 *   rows, exactly; numpy's .npy files (float32/64, big-endian, header versions 1-3) read,
 *   Fortran order and int32 refused. That part skips without numpy.
 * - Known answers worked out here: a perfect ranking scores 1; a reversed one its closed form;
 *   a constant matrix the expected score of a random ranking wherever the relevant items sit;
 *   a graded example by hand; noun sets and relevancies of a small CSV by hand.
 * - Bad input: malformed all_noun_classes (the file loads, MIR refuses the row by file:line),
 *   rows of more or fewer fields than the header, .npy files of the wrong shape, dtype,
 *   order or size, out-of-range relevancy, columns in another sentence order, non-finite
 *   similarities, sentence CSVs naming unknown clips or with a comma outside quotes (and one
 *   with a byte order mark, CRLF and spaces around values read). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "core/npy.h"
#include "tb_test.h"
#include "tubelet/metrics.h"

#ifndef PYTHON
#define PYTHON TB_TEST_PYTHON
#endif

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

/* A .npy file written by hand: a version 1 header from the given dict text, padded to 64
 * bytes, then bytes of data. */
static void write_npy(const char *path, const char *dict, const void *data, size_t bytes)
{
    char header[512];
    int n = snprintf(header, sizeof(header), "%s", dict);
    while ((10 + n + 1) % 64)
        header[n++] = ' ';
    header[n++] = '\n';
    FILE *f = fopen(path, "wb");
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 255),
                             (unsigned char)(n >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(header, 1, (size_t)n, f);
    fwrite(data, 1, bytes, f);
    fclose(f);
}

static void write_f32(const char *path, const float *v, int64_t rows, int64_t cols)
{
    char dict[128];
    snprintf(dict, sizeof(dict), "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, "
             "%lld), }", (long long)rows, (long long)cols);
    write_npy(path, dict, v, sizeof(float) * (size_t)(rows * cols));
}

/* ---- all_noun_classes and narration_id ---------------------------------------------------- */

#define HEADER "narration_id,participant_id,video_id,narration_timestamp,start_timestamp," \
               "stop_timestamp,start_frame,stop_frame,narration,verb,verb_class,noun," \
               "noun_class,all_nouns,all_noun_classes\n"
#define ROW(id, narr, verb, noun, list) \
    id ",P01,P01_01,00:00:01.00,00:00:01.00,00:00:02.00,1,2," narr ",v," #verb ",n," #noun \
    ",\"['n']\"," list "\n"

/* Eleven clips: duplicated narrations, one with another action class (stir: 10/20, 10/34),
 * multi-noun sets, a repeated class, spaces. */
static const char *const small_csv =
    HEADER
    ROW("c0", "take plate", 0, 2, "[2]")
    ROW("c1", "put paper in bin", 1, 49, "\"[49, 36]\"")
    ROW("c2", "take plate", 0, 2, "[2]")
    ROW("c3", "wash cup", 2, 36, "\"[36, 36]\"")
    ROW("c4", "put paper in bin", 1, 49, "[49]")
    ROW("c5", "stir", 10, 20, "[20]")
    ROW("c6", "stir", 10, 34, "[34]")
    ROW("c7", "take plate", 0, 5, "\" [ 5 ,2 ] \"")
    ROW("c8", "open drawer", 3, 8, "[8]")
    ROW("c9", "stir", 10, 34, "\"[34, 20]\"")
    ROW("c10", "close drawer", 4, 8, "[8]");

static struct tb_annotations *load_small(void)
{
    struct tb_annotations *a = NULL;
    struct tb_ann_opts epic = {.format = TB_ANN_EPIC};
    const char *path = tbt_path("small.csv");
    write_file(path, small_csv);
    CHECK_EQ(tb_ann_load(&a, path, &epic), 0);
    if (!a)
        fprintf(stderr, "%s\n", tb_errmsg());
    return a;
}

static int same_set(const struct tb_ann_item *it, const int *want, int n)
{
    if (it->n_nouns != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (it->nouns[i] != want[i])
            return 0;
    return 1;
}

static void test_noun_sets(void)
{
    struct tb_ann_opts epic = {.format = TB_ANN_EPIC};
    struct tb_annotations *a = load_small();
    tbt_case = "noun sets";
    if (a) {
        CHECK_EQ(a->n_items, 11);
        CHECK(same_set(&a->items[0], (int[]){2}, 1));
        CHECK(same_set(&a->items[1], (int[]){36, 49}, 2));
        CHECK(same_set(&a->items[3], (int[]){36}, 1));
        CHECK(same_set(&a->items[7], (int[]){2, 5}, 2));
        CHECK(same_set(&a->items[9], (int[]){20, 34}, 2));
        CHECK(a->items[7].noun == 5 && a->items[7].verb == 0);
        CHECK(a->items[10].id && !strcmp(a->items[10].id, "c10"));
        CHECK(a->items[1].text && !strcmp(a->items[1].text, "put paper in bin"));
    }
    tb_ann_free(&a);

    tbt_case = "no all_noun_classes, no narration_id";
    const char *path = tbt_path("plain.csv");
    write_file(path, "video_id,start_timestamp,stop_timestamp,narration,verb_class,noun_class\n"
                     "P01_01,00:00:01.00,00:00:02.50,take cup,0,7\n");
    CHECK_EQ(tb_ann_load(&a, path, &epic), 0);
    if (a) {
        CHECK(same_set(&a->items[0], (int[]){7}, 1));
        CHECK(a->items[0].id == NULL);
    }
    tb_ann_free(&a);

    /* The column only MIR reads: a cell that does not parse is kept on the row (the file
     * loads, for the runs that never read it) and refused by what reads it, by file:line. */
    tbt_case = "malformed all_noun_classes";
    static const char *const bad[] = {"[2, x]", "2, 15", "[]", "[2,, 3]", "[2 3]", "[2, 15",
                                      "[-1]", "[2, 15] more", "[99999999]", "[2, 15,]", "[ ]"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[1024], want[256];
        snprintf(text, sizeof(text), HEADER "%s%s", ROW("c0", "take plate", 0, 2, "[2]"),
                 "c1,P01,P01_01,00:00:01.00,00:00:01.00,00:00:02.00,1,2,wash,v,2,n,2,x,\"");
        snprintf(text + strlen(text), sizeof(text) - strlen(text), "%s\"\n", bad[i]);
        path = tbt_path("bad_nouns.csv");
        write_file(path, text);
        snprintf(want, sizeof(want), "bad_nouns.csv:3: column 'all_noun_classes': '%s' is not a "
                 "list of class numbers such as [2, 15]", bad[i]);
        CHECK_EQ(tb_ann_load(&a, path, &epic), 0);
        if (!a)
            continue;
        CHECK_EQ(a->n_items, 2);
        CHECK(a->items[0].cell_error == NULL && a->items[0].n_nouns == 1);
        CHECK(a->items[1].nouns == NULL && a->items[1].n_nouns == 0 && a->items[1].verb == 2);
        CHECK_STR_HAS(a->items[1].cell_error ? a->items[1].cell_error : "", want);
        struct tb_mir_sentences *s = NULL;
        CHECK_EQ(tb_mir_sentences_build(&s, a), TB_EFORMAT);
        CHECK_STR_HAS(tb_errmsg(), want);
        CHECK(s == NULL);
        tb_ann_free(&a);
    }
    /* A row of fewer fields than the header is bad, whatever the missing column */
    tbt_case = "rows of fewer or more fields than the header";
    path = tbt_path("short_row.csv");
    write_file(path, HEADER "c0,P01,P01_01,00:00:01.00,00:00:01.00,00:00:02.00,1,2,wash,v,2,n,2\n");
    CHECK_EQ(tb_ann_load(&a, path, &epic), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "short_row.csv:2: 13 fields, the header has 15");
    /* ... and one of more: a comma outside quotes in the narration */
    write_file(path, HEADER "c0,P01,P01_01,00:00:01.00,00:00:01.00,00:00:02.00,1,2,wash, then "
                     "dry,v,2,n,2,x,[2]\n");
    CHECK_EQ(tb_ann_load(&a, path, &epic), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "short_row.csv:2: 16 fields, the header has 15: a comma outside "
                               "quotes?");
}

/* ---- sentences and relevancy --------------------------------------------------------------- */

/* Relevancy files for the 11 x 8 split of small.csv that must fail, and how. */
#define GOOD_DICT(shape) "{'descr': '<f4', 'fortran_order': False, 'shape': " shape ", }"
static const struct {
    const char *dict;
    int n_floats, extra;
    const char *want;
} bad_files[] = {
    {GOOD_DICT("(88,)"), 88, 0, "shape (88) (1-D), but the split has 11 clips"},
    {"{'descr': '<i4', 'fortran_order': False, 'shape': (11, 8), }", 88, 0,
     "rel.npy: dtype '<i4': only float32 and float64 are read"},
    {GOOD_DICT("(11, 8)"), 87, 0, "88 elements of <f4 need 480 (truncated)"},
    {GOOD_DICT("(11, 8)"), 88, 1, "(extra bytes)"},
    {"{'descr': '<f4', 'fortran_order': True, 'shape': (11, 8), }", 88, 0, "Fortran order"},
    {"{'descr': '<f4', 'shape': (11, 8), }", 88, 0,
     "'descr', 'fortran_order' or 'shape' is missing"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (11, 8), 'x': 1}", 88, 0,
     "a key other than"},
    {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (11, 8), }", 88, 0,
     "not a simple dtype string"},
    {GOOD_DICT("(11, 'x')"), 88, 0, "'shape' holds something other than integers"},
    {GOOD_DICT("(11 8)"), 88, 0, "'shape' is not a tuple of integers"},
    {GOOD_DICT("(99999999999999, 8)"), 88, 0, "a dimension over 2^40"},
    {GOOD_DICT("(11, 8)") " junk", 88, 0, "text after the closing '}'"},
};

static void test_relevancy(int have_numpy)
{
    struct tb_annotations *a = load_small();
    struct tb_mir_sentences *s = NULL, *l = NULL;
    char *out = NULL;
    if (!a)
        return;
    tbt_case = "sentences";
    CHECK_EQ(tb_mir_sentences_build(&s, a), 0);
    if (!s)
        goto done;
    /* The narrations by first appearance (clips 0, 1, 3, 5, 8, 10), then the classes none
     * carries, by first clip: stir as 10/34 (clip 6), take plate as 0/5 (clip 7). */
    static const int want_items[] = {0, 1, 3, 5, 8, 10, 6, 7};
    CHECK_EQ(s->n, 8);
    for (int j = 0; j < s->n && j < 8; j++) {
        CHECK_MSG(s->item[j] == want_items[j], "sentence %d: clip %d, expected %d", j,
                  s->item[j], want_items[j]);
        CHECK(s->text[j] == a->items[s->item[j]].text);
    }

    tbt_case = "relevancy by hand";
    int64_t n = a->n_items, m = s->n;
    float *rel = calloc((size_t)(n * m), sizeof(float)), *back = calloc((size_t)(n * m), 4);
    CHECK_EQ(tb_mir_relevancy(a, s, 0, n, rel), 0);
    CHECK(rel[1 * m + 2] == 0.25f);  /* clip 1 (1, {36, 49}) vs wash cup (2, {36}) */
    CHECK(rel[9 * m + 3] == 0.75f);  /* clip 9 (10, {20, 34}) vs stir (10, {20}) */
    CHECK(rel[4 * m + 1] == 0.75f);  /* clip 4 (1, {49}) vs put paper in bin (1, {36, 49}) */
    CHECK(rel[7 * m + 0] == 0.75f);  /* clip 7 (0, {2, 5}) vs take plate (0, {2}) */
    CHECK(rel[7 * m + 7] == 1.0f && rel[6 * m + 6] == 1.0f && rel[2 * m + 0] == 1.0f);
    CHECK(rel[8 * m + 5] == 0.5f);   /* open drawer vs close drawer: the noun alone */
    CHECK(rel[0 * m + 3] == 0.0f);
    float row[8];
    CHECK_EQ(tb_mir_relevancy(a, s, 9, 1, row), 0);
    CHECK(!memcmp(row, rel + 9 * m, sizeof(row)));
    CHECK_EQ(tb_mir_relevancy(a, s, 5, 7, rel), TB_EINVAL);

    tbt_case = "relevancy file";
    const char *path = tbt_path("rel.npy");
    write_f32(path, rel, n, m);
    CHECK_EQ(tb_mir_relevancy_load(path, a, s, back), 0);
    CHECK(!memcmp(rel, back, sizeof(float) * (size_t)(n * m)));
    write_f32(path, rel, n, m - 1);
    CHECK_EQ(tb_mir_relevancy_load(path, a, s, back), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "rel.npy: relevancy of shape (11, 7), but the split has 11 clips "
                               "and 8 sentences: expected (11, 8)");
    for (size_t i = 0; i < sizeof(bad_files) / sizeof(bad_files[0]); i++) {
        write_npy(path, bad_files[i].dict, rel, sizeof(float) * (size_t)bad_files[i].n_floats);
        if (bad_files[i].extra) {
            FILE *f = fopen(path, "ab");
            fputc(0, f);
            fclose(f);
        }
        CHECK_EQ(tb_mir_relevancy_load(path, a, s, back), TB_EFORMAT);
        CHECK_STR_HAS(tb_errmsg(), bad_files[i].want);
    }
    write_bytes(path, "\x93NUMPY\x01\x00\xff\x7f{'descr'", 17);
    CHECK_EQ(tb_mir_relevancy_load(path, a, s, back), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "the .npy header claims 32767 bytes; the file has 17");
    write_file(path, "\x93NUMP");
    CHECK_EQ(tb_mir_relevancy_load(path, a, s, back), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "not a .npy file");
    write_file(path, "P5 binary pgm, not numpy");
    CHECK_EQ(tb_mir_relevancy_load(path, a, s, back), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "not a .npy file");
    CHECK_EQ(tb_mir_relevancy_load(tbt_path("absent.npy"), a, s, back), TB_ENOENT);
    float saved = rel[5];
    rel[5] = 1.5f;
    write_f32(path, rel, n, m);
    CHECK_EQ(tb_mir_relevancy_load(path, a, s, back), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "rel.npy: relevancy (clip 0, sentence 5) is 1.5; relevancies lie "
                               "in [0, 1]");
    rel[5] = NAN;
    write_f32(path, rel, n, m);
    CHECK_EQ(tb_mir_relevancy_load(path, a, s, back), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "(clip 0, sentence 5) is nan");
    rel[5] = saved;

    tbt_case = "sentence CSV";
    /* The same sentences, the last two swapped and one narration misspelt (kept, logged:
     * the clip's narration is the sentence). */
    path = tbt_path("sentences.csv");
    write_file(path, "narration_id,narration\nc0,take plate\nc1,put paper in bin\nc3,wash cup\n"
                     "c5,stir\nc8,open drawer\nc10,close drawer\nc7,take plate\nc6,stirr\n");
    CHECK_EQ(tb_mir_sentences_load(&l, path, a), 0);
    if (l) {
        static const int want_loaded[] = {0, 1, 3, 5, 8, 10, 7, 6};
        CHECK_EQ(l->n, 8);
        for (int j = 0; j < l->n && j < 8; j++)
            CHECK(l->item[j] == want_loaded[j]);
        CHECK(!strcmp(l->text[7], "stir"));
        /* The relevancy in the built order does not fit the loaded one. */
        write_f32(tbt_path("rel.npy"), rel, n, m);
        CHECK_EQ(tb_mir_relevancy_load(tbt_path("rel.npy"), a, l, back), TB_EFORMAT);
        CHECK_STR_HAS(tb_errmsg(), "sentence 6 ('take plate', the narration of ");
        CHECK_STR_HAS(tb_errmsg(), "small.csv:9) has relevancy 0 with its own clip, not 1: "
                                   "the file's columns are in another sentence order");
    }
    tb_mir_sentences_free(&l);
    tb_mir_sentences_free(&l);
    write_file(path, "narration_id,narration\nc0,take plate\nc99,take plate\n");
    CHECK_EQ(tb_mir_sentences_load(&l, path, a), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "sentences.csv:3: narration_id 'c99' is not a clip of ");
    CHECK(l == NULL);
    write_file(path, "id,narration\nc0,take plate\n");
    CHECK_EQ(tb_mir_sentences_load(&l, path, a), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "sentences.csv:1: the header names no narration_id column");
    /* Read as pandas reads it: a row of more fields than the header (a comma outside quotes)
     * is refused, one quoted is a sentence; a byte order mark, CRLF and spaces around values
     * are no part of the values */
    write_file(path, "narration_id,narration\nc0,take plate\nc1,put paper, in bin\n");
    CHECK_EQ(tb_mir_sentences_load(&l, path, a), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "sentences.csv:3: more fields, the header has 2: a comma outside "
                               "quotes?");
    write_file(path, "\xEF\xBB\xBFnarration_id , narration\r\n c0 ,take plate\r\n\r\n"
                     "c1, \"put paper in bin\" \r\n");
    CHECK_EQ(tb_mir_sentences_load(&l, path, a), 0);
    CHECK(l && l->n == 2 && l->item[0] == 0 && l->item[1] == 1);
    tb_mir_sentences_free(&l);

    if (have_numpy) {
        tbt_case = "relevancy against mir_ref.py";
        int rc = tbt_run(&out, 120, PYTHON " %s/tests/ref/mir_ref.py relevancy %s %s",
                         TB_SOURCE_DIR, tbt_path("small.csv"), tbt_dir());
        CHECK_MSG(rc == 0, "mir_ref.py relevancy: %s", out);
        free(out);
        char *items = tbt_read(tbt_path("sentences.txt"), NULL);
        char *p = items;
        for (int j = 0; p && j < s->n; j++)
            CHECK_EQ(strtol(p, &p, 10), s->item[j]);
        while (p && (*p == '\n' || *p == ' '))
            p++;
        CHECK(p && !*p);
        free(items);
        memset(back, 0, sizeof(float) * (size_t)(n * m));
        /* numpy's float64 file, read and rounded to float32: the same bits as ours. */
        CHECK_EQ(tb_mir_relevancy_load(tbt_path("rel.npy"), a, s, back), 0);
        CHECK(!memcmp(rel, back, sizeof(float) * (size_t)(n * m)));
    }
    free(rel);
    free(back);
done:
    tb_mir_sentences_free(&s);
    tb_ann_free(&a);
}

/* ---- scores: known answers ------------------------------------------------------------------ */

/* E[AP] of a random ranking of n items, r of them relevant (binary). */
static double random_ap(int n, int r)
{
    double h = 0;
    for (int k = 1; k <= n; k++)
        h += 1.0 / k;
    return n == 1 ? 1 : (double)(r - 1) / (n - 1) + (double)(n - r) / ((double)n * (n - 1)) * h;
}

static void test_known_answers(void)
{
    struct tb_mir_scores sc;
    tbt_case = "perfect ranking";
    {
        /* Graded relevancy from the small CSV's clips; similarity = relevancy. */
        struct tb_annotations *a = load_small();
        struct tb_mir_sentences *s = NULL;
        if (a && tb_mir_sentences_build(&s, a) == 0) {
            int64_t n = a->n_items, m = s->n;
            float *rel = malloc(sizeof(float) * (size_t)(n * m));
            CHECK_EQ(tb_mir_relevancy(a, s, 0, n, rel), 0);
            CHECK_EQ(tb_mir_evaluate(rel, rel, n, m, &sc), 0);
            for (int d = 0; d < 3; d++) {
                CHECK_NEAR(sc.map[d], 1.0, 1e-15);
                CHECK_NEAR(sc.ndcg[d], 1.0, 1e-15);
            }
            /* Clips 4 (1, {49}) and 9 (10, {20, 34}) match no sentence exactly: no AP. */
            CHECK(sc.n_map[0] == n - 2 && sc.n_map[1] == m && sc.n_ndcg[0] == n &&
                  sc.n_ndcg[1] == m);
            free(rel);
        }
        tb_mir_sentences_free(&s);
        tb_ann_free(&a);
    }

    tbt_case = "reversed ranking";
    {
        /* Video i has texts 0 .. i relevant (binary) and ranks them last (sim = j). Its AP is
         * (1/R) sum_{k=1..R} k / (n - R + k) with R = i + 1, its nDCG 0: the first R ranks
         * hold nothing relevant. Text j's column is constant: its videos tie, and it scores
         * a random ranking of 4 videos, 4 - j relevant (texts 4..9: none, left out). */
        enum { NV = 4, NT = 10 };
        float sim[NV * NT], rel[NV * NT];
        double want_v = 0, want_t = 0, want_tn = 0;
        for (int i = 0; i < NV; i++)
            for (int j = 0; j < NT; j++) {
                sim[i * NT + j] = (float)j;
                rel[i * NT + j] = j <= i ? 1.0f : 0.0f;
            }
        for (int i = 0; i < NV; i++) {
            int r = i + 1;
            double ap = 0;
            for (int k = 1; k <= r; k++)
                ap += (double)k / (NT - r + k);
            want_v += ap / r / NV;
        }
        for (int j = 0; j < NV; j++) {
            want_t += random_ap(NV, NV - j) / NV;
            want_tn += (double)(NV - j) / NV / NV;
        }
        CHECK_EQ(tb_mir_evaluate(sim, rel, NV, NT, &sc), 0);
        CHECK_NEAR(sc.map[TB_MIR_V2T], want_v, 1e-15);
        CHECK_NEAR(sc.ndcg[TB_MIR_V2T], 0.0, 0);
        CHECK_NEAR(sc.map[TB_MIR_T2V], want_t, 1e-15);
        CHECK_NEAR(sc.ndcg[TB_MIR_T2V], want_tn, 1e-15);
        CHECK_NEAR(sc.map[TB_MIR_AVG], (want_v + want_t) / 2, 1e-15);
        CHECK(sc.n_map[TB_MIR_V2T] == NV && sc.n_map[TB_MIR_T2V] == NV &&
              sc.n_ndcg[TB_MIR_T2V] == NV);
    }

    tbt_case = "graded by hand";
    {
        /* One video: relevancy (1, 0.5, 0, 0) ranked in reverse. The 1 comes 4th after 0, 0
         * and 0.5: AP = (0 + 0 + 0.5 + 1) / 4 = 0.375 (EK-100 sums graded relevancy into the
         * precision); K = 2 and the first two ranks hold 0s: nDCG 0. Text->video: single
         * items, text 0 scores 1 and 1, text 1 nDCG 1 (no AP: nothing at 1), 2 and 3 none. */
        float sim[4] = {0, 1, 2, 3}, rel[4] = {1, 0.5f, 0, 0};
        CHECK_EQ(tb_mir_evaluate(sim, rel, 1, 4, &sc), 0);
        CHECK_NEAR(sc.map[TB_MIR_V2T], 0.375, 1e-16);
        CHECK_NEAR(sc.ndcg[TB_MIR_V2T], 0.0, 0);
        CHECK_NEAR(sc.map[TB_MIR_T2V], 1.0, 0);
        CHECK_NEAR(sc.ndcg[TB_MIR_T2V], 1.0, 0);
        CHECK(sc.n_map[TB_MIR_T2V] == 1 && sc.n_ndcg[TB_MIR_T2V] == 2);
    }

    tbt_case = "constant similarity";
    {
        /* Every text ties: the expected random score, wherever the relevant ones sit (index
         * order would give 1 with them first and the reversed value with them last). nDCG of
         * a random binary ranking: E[DCG] = (R/n) sum_{p<R} disc(p) = (R/n) IDCG. */
        enum { NV = 3, NT = 50, R = 5 };
        float sim[NV * NT], rel[NV * NT];
        for (int k = 0; k < NV * NT; k++)
            sim[k] = 0.25f;
        for (int first = 0; first < 2; first++) {
            for (int i = 0; i < NV; i++)
                for (int j = 0; j < NT; j++)
                    rel[i * NT + j] = (first ? j < R : j >= NT - R) ? 1.0f : 0.0f;
            CHECK_EQ(tb_mir_evaluate(sim, rel, NV, NT, &sc), 0);
            CHECK_NEAR(sc.map[TB_MIR_V2T], random_ap(NT, R), 1e-14);
            CHECK_NEAR(sc.ndcg[TB_MIR_V2T], (double)R / NT, 1e-14);
            CHECK_NEAR(sc.map[TB_MIR_T2V], 1.0, 1e-15);  /* all NV videos relevant */
            CHECK(sc.n_map[TB_MIR_T2V] == R);
        }
    }

    tbt_case = "bad scores input";
    {
        float sim[6] = {0, 1, 2, 3, 4, 5}, rel[6] = {1, 0, 0, 0, 1, 0};
        sim[5] = NAN;
        CHECK_EQ(tb_mir_evaluate(sim, rel, 2, 3, &sc), TB_EINVAL);
        CHECK_STR_HAS(tb_errmsg(), "similarity (video 1, text 2) is nan; similarities must be "
                                   "finite");
        sim[5] = -INFINITY;
        CHECK_EQ(tb_mir_evaluate(sim, rel, 2, 3, &sc), TB_EINVAL);
        CHECK_STR_HAS(tb_errmsg(), "similarity (video 1, text 2) is -inf");
        sim[5] = 5;
        rel[2] = 1.25f;
        CHECK_EQ(tb_mir_evaluate(sim, rel, 2, 3, &sc), TB_EINVAL);
        CHECK_STR_HAS(tb_errmsg(), "relevancy (video 0, text 2) is 1.25; relevancies lie in");
        rel[2] = -0.5f;
        CHECK_EQ(tb_mir_evaluate(sim, rel, 2, 3, &sc), TB_EINVAL);
        rel[2] = NAN;
        CHECK_EQ(tb_mir_evaluate(sim, rel, 2, 3, &sc), TB_EINVAL);
        CHECK_STR_HAS(tb_errmsg(), "relevancy (video 0, text 2) is nan");
        for (int k = 0; k < 6; k++)
            rel[k] = k == 1 ? 0.5f : 0;
        CHECK_EQ(tb_mir_evaluate(sim, rel, 2, 3, &sc), TB_EINVAL);
        CHECK_STR_HAS(tb_errmsg(), "no relevancy of exactly 1 anywhere");
        rel[1] = 0;
        CHECK_EQ(tb_mir_evaluate(sim, rel, 2, 3, &sc), TB_EINVAL);
        CHECK_STR_HAS(tb_errmsg(), "no relevancy above 0 anywhere");
        CHECK_EQ(tb_mir_evaluate(sim, rel, 0, 3, &sc), TB_EINVAL);
        CHECK_EQ(tb_mir_evaluate(NULL, rel, 2, 3, &sc), TB_EINVAL);
    }
}

/* ---- scores against the reference ----------------------------------------------------------- */

static float *read_npy(const char *path, int64_t *rows, int64_t *cols)
{
    struct tbi_npy h;
    float *v = NULL;
    if (tbi_npy_open(&h, path) < 0) {
        TBT_FAIL("%s", tb_errmsg());
        return NULL;
    }
    if (h.n_dims == 2 && (v = malloc(sizeof(float) * (size_t)h.n)) &&
        tbi_npy_read_f32(&h, path, v) < 0) {
        TBT_FAIL("%s", tb_errmsg());
        free(v);
        v = NULL;
    }
    *rows = h.shape[0];
    *cols = h.n_dims == 2 ? h.shape[1] : 0;
    tbi_npy_close(&h);
    return v;
}

static void test_reference(void)
{
    char *out = NULL;
    tbt_case = "mir_ref.py cases";
    int rc = tbt_run(&out, 120, PYTHON " %s/tests/ref/mir_ref.py cases %s", TB_SOURCE_DIR,
                     tbt_dir());
    CHECK_MSG(rc == 0, "mir_ref.py cases: %s", out);
    free(out);
    FILE *f = fopen(tbt_path("expected.txt"), "r");
    if (!f)
        return;
    char name[64];
    long long nv, nt, cnt[4];
    double want[6];
    int n_cases = 0;
    while (fscanf(f, "%63s %lld %lld %lf %lf %lf %lf %lf %lf %lld %lld %lld %lld", name, &nv, &nt,
                  &want[0], &want[1], &want[2], &want[3], &want[4], &want[5], &cnt[0], &cnt[1],
                  &cnt[2], &cnt[3]) == 13) {
        char file[128];
        int64_t r0, c0, r1, c1;
        tbt_case = name;
        snprintf(file, sizeof(file), "%s.sim.npy", name);
        float *sim = read_npy(tbt_path(file), &r0, &c0);
        snprintf(file, sizeof(file), "%s.rel.npy", name);
        float *rel = read_npy(tbt_path(file), &r1, &c1);
        CHECK(r0 == nv && c0 == nt && r1 == nv && c1 == nt);
        struct tb_mir_scores sc;
        if (sim && rel && r0 == nv && c0 == nt && r1 == nv && c1 == nt) {
            CHECK_EQ(tb_mir_evaluate(sim, rel, nv, nt, &sc), 0);
            for (int d = 0; d < 3; d++) {
                CHECK_NEAR(sc.map[d], want[d], 1e-12);
                CHECK_NEAR(sc.ndcg[d], want[3 + d], 1e-12);
            }
            CHECK(sc.n_map[0] == cnt[0] && sc.n_map[1] == cnt[1] && sc.n_ndcg[0] == cnt[2] &&
                  sc.n_ndcg[1] == cnt[3]);
        }
        free(sim);
        free(rel);
        n_cases++;
    }
    fclose(f);
    CHECK_EQ(n_cases, 10);

    tbt_case = "numpy's files";
    static const char *const good[] = {"f4", "f8", "be", "v2", "v3"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char file[64];
        int64_t r, c;
        snprintf(file, sizeof(file), "reader.%s.npy", good[i]);
        float *v = read_npy(tbt_path(file), &r, &c);
        CHECK_MSG(v && r == 3 && c == 4, "%s", file);
        for (int k = 0; v && k < 12; k++)
            CHECK_MSG(v[k] == (float)k / 11.0f, "%s[%d] = %.9g", file, k, (double)v[k]);
        free(v);
    }
    struct tbi_npy h;
    CHECK_EQ(tbi_npy_open(&h, tbt_path("reader.fortran.npy")), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "Fortran order (save np.ascontiguousarray(a))");
    CHECK_EQ(tbi_npy_open(&h, tbt_path("reader.i4.npy")), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "dtype '<i4'");
    tbi_npy_close(&h);
}

int main(void)
{
    tbt_begin("mir");
    int have_numpy = tbt_run(NULL, 60, PYTHON " -c 'import numpy'") == 0;
    test_noun_sets();
    test_relevancy(have_numpy);
    test_known_answers();
    if (have_numpy)
        test_reference();
    else
        fprintf(stderr, "skip: the comparisons with tests/ref/mir_ref.py (%s has no numpy)\n",
                PYTHON);
    TBT_EXIT();
}
