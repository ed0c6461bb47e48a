/* src/metrics/mir.c - EPIC-Kitchens-100 multi-instance retrieval (see metrics.h): mAP and nDCG
 * with tied similarities scored as the mean over their orders, the sentence list and caption
 * relevancy of a split, the relevancy file. The definitions were read in JPoSE
 * (mwray/Joint-Part-of-Speech-Embeddings: src/evaluation/mAP.py, nDCG.py,
 * src/scripts/create_sentence_df.py, create_relevancy_files.py) and their copies in AVION and
 * LaViLa (utils/evaluation_ek100mir.py); docs/METRICS.md derives the tie rule. It does not
 * compute similarities: the caller's model does. Tests: tests/test_mir.c. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/npy.h"
#include "data/csv.h"
#include "metrics/mir_internal.h"
#include "tubelet/metrics.h"

/* ---- ranking ----------------------------------------------------------------------------- */

/* A 32-bit key whose ascending order is x's descending order; -0 and +0 get the same key, so
 * they tie as they compare. */
static uint32_t desc_key(float x)
{
    uint32_t u;
    if (x == 0)
        x = 0;
    memcpy(&u, &x, sizeof(u));
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~u;
}

/* Sort n entries (key << 32 | index) by key: LSD radix over the key's 32 bits in digits of
 * 11, 11 and 10 bits (a digit every entry shares is skipped). Stable; tmp holds n entries. */
static void sort_keys(uint64_t *a, uint64_t *tmp, int64_t n)
{
    static const int shift[3] = {32, 43, 54};
    uint64_t *src = a, *dst = tmp;
    int64_t count[2048];
    for (int pass = 0; pass < 3; pass++) {
        memset(count, 0, sizeof(count));
        for (int64_t i = 0; i < n; i++)
            count[(src[i] >> shift[pass]) & 2047]++;
        if (count[(src[0] >> shift[pass]) & 2047] == n)
            continue;
        for (int64_t d = 0, sum = 0; d < 2048; d++) {
            int64_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (int64_t i = 0; i < n; i++)
            dst[count[(src[i] >> shift[pass]) & 2047]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, sizeof(*a) * (size_t)n);
}

/* One thread's scratch for queries of up to n items. */
struct work {
    uint64_t *order, *ideal, *tmp;   /* (n) each */
    float *sim, *rel;                /* (COLS, n): a block of gathered columns */
};

enum { COLS = 16 }; /* text->video gathers this many columns per pass: one cache line a row */

/* Idempotent: a failed work_alloc has freed it already, and its thread frees it again. */
static void work_free(struct work *w)
{
    free(w->order);
    free(w->ideal);
    free(w->tmp);
    free(w->sim);
    free(w->rel);
    memset(w, 0, sizeof(*w));
}

static int work_alloc(struct work *w, int64_t n, int64_t n_cols)
{
    memset(w, 0, sizeof(*w));
    w->order = tbi_malloc(sizeof(uint64_t) * (size_t)n);
    w->ideal = tbi_malloc(sizeof(uint64_t) * (size_t)n);
    w->tmp = tbi_malloc(sizeof(uint64_t) * (size_t)n);
    if (n_cols) {
        w->sim = tbi_malloc(sizeof(float) * (size_t)(n * n_cols));
        w->rel = tbi_malloc(sizeof(float) * (size_t)(n * n_cols));
    }
    if (!w->order || !w->ideal || !w->tmp || (n_cols && (!w->sim || !w->rel))) {
        work_free(w);
        return -1;
    }
    return 0;
}

/* Score one query of n items, s and r contiguous; disc[p] = 1 / log2(p + 2). Writes NaN where
 * the score is undefined (no item of relevancy 1 for AP, none above 0 for nDCG).
 *
 * EPIC's AP, for the ranking r_(0), r_(1), ...: (1 / R) sum over ranks p with r_(p) == 1 of
 * C_p / (p + 1), C_p = r_(0) + ... + r_(p) (graded), R = #{r == 1}. EPIC's nDCG: the sum over
 * the first K ranks of r_(p) disc[p], over the same sum for r sorted descending, K = #{r > 0}.
 * A group of m tied items at ranks a .. b-1 (relevancy sum G, n1 of them at 1, S the sum of
 * the groups before it) contributes its expectation over the m! orders: every item lands on
 * every rank with probability 1/m, and the items before an item of relevancy 1 at rank p are
 * p - a of the other m - 1, so
 *   AP:  (n1 / m) sum_{p=a}^{b-1} (S + 1 + (p - a)(G - 1) / (m - 1)) / (p + 1)
 *   DCG: (G / m) sum_{p=a}^{min(b,K)-1} disc[p].
 * Untied (m = 1) these are EPIC's terms exactly. */
static void score_query(const float *s, const float *r, int64_t n, struct work *w,
                        const double *disc, double *ap, double *ndcg)
{
    int64_t n_rel = 0, n_pos = 0;
    for (int64_t k = 0; k < n; k++) {
        w->order[k] = (uint64_t)desc_key(s[k]) << 32 | (uint64_t)k;
        n_rel += r[k] == 1.0f;
        if (r[k] > 0)
            w->ideal[n_pos++] = (uint64_t)desc_key(r[k]) << 32 | (uint64_t)k;
    }
    *ap = *ndcg = NAN;
    if (!n_pos)
        return;
    sort_keys(w->ideal, w->tmp, n_pos);
    double idcg = 0, dcg = 0, ap_sum = 0, before = 0;
    for (int64_t p = 0; p < n_pos; p++)
        idcg += r[(uint32_t)w->ideal[p]] * disc[p];
    sort_keys(w->order, w->tmp, n);
    for (int64_t a = 0, b; a < n; a = b) {
        uint32_t key = (uint32_t)(w->order[a] >> 32);
        double g = 0;
        int64_t n1 = 0;
        for (b = a; b < n && (uint32_t)(w->order[b] >> 32) == key; b++) {
            float v = r[(uint32_t)w->order[b]];
            g += v;
            n1 += v == 1.0f;
        }
        int64_t m = b - a;
        if (n1) {
            double step = m > 1 ? (g - 1) / (double)(m - 1) : 0, t = 0;
            for (int64_t p = a; p < b; p++)
                t += (before + 1 + (double)(p - a) * step) / (double)(p + 1);
            ap_sum += (double)n1 / (double)m * t;
        }
        if (a < n_pos && g > 0) {
            double d = 0;
            for (int64_t p = a; p < b && p < n_pos; p++)
                d += disc[p];
            dcg += g / (double)m * d;
        }
        before += g;
    }
    if (n_rel)
        *ap = ap_sum / (double)n_rel;
    *ndcg = dcg / idcg;
}

/* The mean of the defined (non-NaN) values, in index order (the same for any thread count). */
static double mean_defined(const double *v, int64_t n, int64_t *n_defined)
{
    double sum = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(v[i])) {
            sum += v[i];
            k++;
        }
    *n_defined = k;
    return k ? sum / (double)k : NAN;
}

static int check_inputs(const float *sim, const float *rel, int64_t n_video, int64_t n_text)
{
    if (!sim || !rel || n_video < 1 || n_text < 1 || n_video > INT32_MAX ||
        n_text > INT32_MAX || n_video > INT64_MAX / 8 / n_text)
        return tbi_err(TB_EINVAL, "MIR scores: a %lld x %lld matrix%s (videos and texts: 1 to "
                       "2^31 - 1 each)", (long long)n_video, (long long)n_text,
                       sim && rel ? "" : " without data");
    for (int64_t i = 0; i < n_video; i++)
        for (int64_t j = 0; j < n_text; j++) {
            float s = sim[i * n_text + j], r = rel[i * n_text + j];
            if (!isfinite(s))
                return tbi_err(TB_EINVAL, "MIR scores: similarity (video %lld, text %lld) is "
                               "%g; similarities must be finite", (long long)i, (long long)j,
                               (double)s);
            if (!(r >= 0 && r <= 1))
                return tbi_err(TB_EINVAL, "MIR scores: relevancy (video %lld, text %lld) is %g; "
                               "relevancies lie in [0, 1]", (long long)i, (long long)j,
                               (double)r);
        }
    return 0;
}

/* Every query's scores, indexed by enum tb_mir_dir (V2T: a query per video, T2V: one per
 * text), and the rank discount that both directions share. */
struct per_query {
    double *disc;  /* (max(n_video, n_text)) disc[p] = 1 / log2(p + 2) */
    double *ap[2]; /* (n_video), (n_text) */
    double *nd[2]; /* (n_video), (n_text) */
};

static void per_query_free(struct per_query *q)
{
    free(q->disc);
    for (int d = 0; d < 2; d++) {
        free(q->ap[d]);
        free(q->nd[d]);
    }
}

/* The arrays, and the discount filled; -1 where one could not be allocated (the caller frees
 * what was). */
static int per_query_alloc(struct per_query *q, int64_t n_video, int64_t n_text)
{
    int64_t n_max = n_video > n_text ? n_video : n_text;
    q->disc = tbi_malloc(sizeof(double) * (size_t)n_max);
    q->ap[TB_MIR_V2T] = tbi_malloc(sizeof(double) * (size_t)n_video);
    q->nd[TB_MIR_V2T] = tbi_malloc(sizeof(double) * (size_t)n_video);
    q->ap[TB_MIR_T2V] = tbi_malloc(sizeof(double) * (size_t)n_text);
    q->nd[TB_MIR_T2V] = tbi_malloc(sizeof(double) * (size_t)n_text);
    if (!q->disc || !q->ap[0] || !q->nd[0] || !q->ap[1] || !q->nd[1])
        return -1;
    for (int64_t p = 0; p < n_max; p++)
        q->disc[p] = 1.0 / log2((double)p + 2);
    return 0;
}

/* Text -> video for the nc columns from j0: each gathered into w's rows, so that the videos
 * of a column lie contiguous, then ranked. */
static void score_columns(const float *sim, const float *rel, int64_t n_video, int64_t n_text,
                          int64_t j0, int64_t nc, struct work *w, const struct per_query *q)
{
    for (int64_t i = 0; i < n_video; i++)
        for (int64_t c = 0; c < nc; c++) {
            w->sim[c * n_video + i] = sim[i * n_text + j0 + c];
            w->rel[c * n_video + i] = rel[i * n_text + j0 + c];
        }
    for (int64_t c = 0; c < nc; c++)
        score_query(w->sim + c * n_video, w->rel + c * n_video, n_video, w, q->disc,
                    &q->ap[TB_MIR_T2V][j0 + c], &q->nd[TB_MIR_T2V][j0 + c]);
}

/* Both directions' queries, shared out over the threads, each with its own scratch. A thread
 * whose scratch failed still reaches every barrier of the loops, scoring nothing; returns -1
 * where one did. */
static int score_all(const float *sim, const float *rel, int64_t n_video, int64_t n_text,
                     const struct per_query *q)
{
    int64_t n_max = n_video > n_text ? n_video : n_text;
    int64_t n_blocks = (n_text + COLS - 1) / COLS;
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        struct work w;
        int ok = work_alloc(&w, n_max, COLS) == 0;
        failed |= !ok;
        /* video -> text: row i ranks the texts. */
#pragma omp for schedule(dynamic, 16)
        for (int64_t i = 0; i < n_video; i++)
            if (ok)
                score_query(sim + i * n_text, rel + i * n_text, n_text, &w, q->disc,
                            &q->ap[TB_MIR_V2T][i], &q->nd[TB_MIR_V2T][i]);
        /* text -> video: column j ranks the videos, gathered COLS columns at a time. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t blk = 0; blk < n_blocks; blk++) {
            int64_t j0 = blk * COLS, nc = n_text - j0 < COLS ? n_text - j0 : COLS;
            if (ok)
                score_columns(sim, rel, n_video, n_text, j0, nc, &w, q);
        }
        work_free(&w);
    }
    return failed ? -1 : 0;
}

/* The means over the queries whose scores are defined into *out, left as it was where a
 * direction has none (no mean to report). */
static int summarise(const struct per_query *q, int64_t n_video, int64_t n_text,
                     struct tb_mir_scores *out)
{
    const int64_t n[2] = {[TB_MIR_V2T] = n_video, [TB_MIR_T2V] = n_text};
    struct tb_mir_scores sc;
    for (int d = 0; d < 2; d++) {
        sc.map[d] = mean_defined(q->ap[d], n[d], &sc.n_map[d]);
        sc.ndcg[d] = mean_defined(q->nd[d], n[d], &sc.n_ndcg[d]);
    }
    if (!sc.n_ndcg[TB_MIR_V2T] || !sc.n_ndcg[TB_MIR_T2V])
        return tbi_err(TB_EINVAL, "MIR scores: no relevancy above 0 anywhere: nDCG and mAP are "
                       "undefined");
    if (!sc.n_map[TB_MIR_V2T] || !sc.n_map[TB_MIR_T2V])
        return tbi_err(TB_EINVAL, "MIR scores: no relevancy of exactly 1 anywhere: mAP counts "
                       "only those items (EK-100's relevancy gives each clip 1 with its own "
                       "narration)");
    sc.map[TB_MIR_AVG] = (sc.map[TB_MIR_V2T] + sc.map[TB_MIR_T2V]) / 2;
    sc.ndcg[TB_MIR_AVG] = (sc.ndcg[TB_MIR_V2T] + sc.ndcg[TB_MIR_T2V]) / 2;
    *out = sc;
    return 0;
}

int tb_mir_evaluate(const float *sim, const float *rel, int64_t n_video, int64_t n_text,
                    struct tb_mir_scores *out)
{
    struct per_query q = {0};
    int rc = check_inputs(sim, rel, n_video, n_text);
    if (rc < 0)
        return rc;
    /* A thread's scratch that failed is the same shortage as the arrays here: one message. */
    if (per_query_alloc(&q, n_video, n_text) < 0 || score_all(sim, rel, n_video, n_text, &q) < 0)
        rc = tbi_err(TB_ENOMEM, "MIR scores: out of memory (%lld x %lld)", (long long)n_video,
                     (long long)n_text);
    else
        rc = summarise(&q, n_video, n_text, out);
    per_query_free(&q);
    return rc;
}

/* ---- sentences --------------------------------------------------------------------------- */

int tbi_mir_check_epic(const struct tb_annotations *ann)
{
    if (!ann || ann->n_items < 1)
        return tbi_err(TB_EINVAL, "MIR sentences: no annotations");
    for (int i = 0; i < ann->n_items; i++) {
        const struct tb_ann_item *it = &ann->items[i];
        if (it->cell_error) /* a noun set that did not parse: read here, so refused here */
            return tbi_err(TB_EFORMAT, "%s", it->cell_error);
        if (it->verb < 0 || !it->nouns)
            return tbi_err(TB_EINVAL, "%s:%d: no verb class and noun set: MIR relevancy "
                           "needs EPIC-Kitchens-100 annotations", ann->path, it->line);
        if (!it->text)
            return tbi_err(TB_EINVAL, "%s:%d: no narration: MIR sentences are the split's "
                           "narrations (an EPIC CSV with a 'narration' column)", ann->path,
                           it->line);
    }
    return 0;
}

static int sentences_alloc(struct tb_mir_sentences **out, int n)
{
    struct tb_mir_sentences *s = tbi_calloc(1, sizeof(*s));
    if (s) {
        s->item = tbi_malloc(sizeof(*s->item) * (size_t)(n ? n : 1));
        s->text = tbi_malloc(sizeof(*s->text) * (size_t)(n ? n : 1));
    }
    if (!s || !s->item || !s->text) {
        tb_mir_sentences_free(&s);
        return tbi_err(TB_ENOMEM, "MIR sentences: out of memory");
    }
    *out = s;
    return 0;
}

void tb_mir_sentences_free(struct tb_mir_sentences **ps)
{
    if (!ps || !*ps)
        return;
    free((*ps)->item);
    free((*ps)->text);
    free(*ps);
    *ps = NULL;
}

/* Items ordered by a field, ties by index, for runs of equal values. */
struct keyed {
    const struct tb_ann_item *it;
    int i;
};

static int by_text(const void *pa, const void *pb)
{
    const struct keyed *a = pa, *b = pb;
    int c = strcmp(a->it->text, b->it->text);
    return c ? c : (a->i > b->i) - (a->i < b->i);
}

static int by_class(const void *pa, const void *pb)
{
    const struct keyed *a = pa, *b = pb;
    if (a->it->verb != b->it->verb)
        return a->it->verb < b->it->verb ? -1 : 1;
    if (a->it->noun != b->it->noun)
        return a->it->noun < b->it->noun ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

static int by_id(const void *pa, const void *pb)
{
    const struct keyed *a = pa, *b = pb;
    return strcmp(a->it->id, b->it->id);
}

int tb_mir_sentences_build(struct tb_mir_sentences **out, const struct tb_annotations *ann)
{
    *out = NULL;
    int rc = tbi_mir_check_epic(ann);
    if (rc < 0)
        return rc;
    int n = ann->n_items, n_sent = 0;
    struct keyed *k = tbi_malloc(sizeof(*k) * (size_t)n);
    char *first = tbi_calloc((size_t)n, 1);
    if (!k || !first || sentences_alloc(out, n) < 0) {
        free(k);
        free(first);
        return tbi_err(TB_ENOMEM, "MIR sentences: out of memory");
    }
    struct tb_mir_sentences *s = *out;
    for (int i = 0; i < n; i++)
        k[i] = (struct keyed){&ann->items[i], i};
    /* The distinct narrations (the first clip of each), in order of appearance. */
    qsort(k, (size_t)n, sizeof(*k), by_text);
    for (int i = 0; i < n; i++)
        if (!i || strcmp(k[i].it->text, k[i - 1].it->text))
            first[k[i].i] = 1;
    for (int i = 0; i < n; i++)
        if (first[i])
            s->item[n_sent++] = i;
    /* Then the action classes no sentence carries: a run of clips of one (verb, noun) whose
     * members are none of them a sentence's clip; its first clip joins, in clip order. */
    qsort(k, (size_t)n, sizeof(*k), by_class);
    for (int a = 0, b; a < n; a = b) {
        int covered = 0;
        for (b = a; b < n && k[b].it->verb == k[a].it->verb && k[b].it->noun == k[a].it->noun;
             b++)
            covered |= first[k[b].i];
        if (!covered)
            first[k[a].i] = 2;
    }
    for (int i = 0; i < n; i++)
        if (first[i] == 2)
            s->item[n_sent++] = i;
    s->n = n_sent;
    for (int j = 0; j < n_sent; j++)
        s->text[j] = ann->items[s->item[j]].text;
    free(k);
    free(first);
    return 0;
}

/* One row of the sentence CSV (n_fields: the header's): its clip, by narration_id. The
 * narration column is only compared: EK-100's test file pairs its last 7 ids with the previous
 * row's narration (its 'wash cooker' names clip P22_04_144, narrated 'cut slice'), and AVION
 * and LaViLa take the sentence from the id, as we do. Returns 1 where the narrations differ. */
static int sentence_row(const struct tb_annotations *ann, const struct keyed *ids, char *line,
                        const int *col, int n_fields, const char *path, int line_no, int *item)
{
    char *f[64];
    int n = tbi_csv_split(line, f, 64);
    if (n < 0 && n != TBI_CSV_EMANY)
        return tbi_err(TB_EFORMAT, "%s:%d: malformed CSV: %s", path, line_no, tbi_csv_why(n));
    if (n != n_fields)
        return tbi_err(TB_EFORMAT, "%s:%d: %s fields, the header has %d%s", path, line_no,
                       n < 0 ? "more than 64" : n > n_fields ? "more" : "fewer", n_fields,
                       n < 0 || n > n_fields ? ": a comma outside quotes? A field holding one "
                       "is quoted" : "");
    struct tb_ann_item probe = {.id = f[col[0]]};
    struct keyed key = {&probe, 0};
    const struct keyed *hit = bsearch(&key, ids, (size_t)ann->n_items, sizeof(*ids), by_id);
    if (!hit)
        return tbi_err(TB_EFORMAT, "%s:%d: narration_id '%s' is not a clip of %s", path,
                       line_no, probe.id, ann->path);
    *item = hit->i;
    if (col[1] < 0 || !strcmp(f[col[1]], hit->it->text))
        return 0;
    tbi_log(TB_LOG_WARN, "%s:%d: narration '%s', but clip %s (%s:%d) is narrated '%s': the "
            "clip's narration is the sentence", path, line_no, f[col[1]], probe.id, ann->path,
            hit->it->line, hit->it->text);
    return 1;
}

/* The sentence CSV's header: the narration_id and narration columns (col[1] -1 when
 * absent); the number of fields, or TB_EFORMAT. */
static int sentence_header(char *line, const char *path, int line_no, int *col)
{
    char *f[64];
    int n = tbi_csv_split(line, f, 64);
    if (n < 0)
        return tbi_err(TB_EFORMAT, "%s:%d: the header: %s", path, line_no,
                       n == TBI_CSV_EMANY ? "more than 64 columns" : tbi_csv_why(n));
    for (int c = 0; c < n; c++)
        for (int k = 0; k < 2; k++)
            if (!strcmp(f[c], k ? "narration" : "narration_id")) {
                if (col[k] >= 0)
                    return tbi_err(TB_EFORMAT, "%s:%d: the header names '%s' twice", path,
                                   line_no, f[c]);
                col[k] = c;
            }
    if (col[0] < 0)
        return tbi_err(TB_EFORMAT, "%s:%d: the header names no narration_id column", path,
                       line_no);
    return n;
}

/* Room for one more sentence. */
static int sentences_grow(struct tb_mir_sentences *s, int *cap, const char *path)
{
    if (s->n < *cap)
        return 0;
    *cap = *cap ? 2 * *cap : 1024;
    int *gi = tbi_realloc(s->item, sizeof(*gi) * (size_t)*cap);
    if (gi)
        s->item = gi;
    const char **gt = tbi_realloc(s->text, sizeof(*gt) * (size_t)*cap);
    if (gt)
        s->text = gt;
    return gi && gt ? 0 : tbi_err(TB_ENOMEM, "%s: out of memory", path);
}

/* The split's clips sorted by narration_id, each once, into *ids. */
static int ids_sorted(const struct tb_annotations *ann, struct keyed **ids, const char *path)
{
    for (int i = 0; i < ann->n_items; i++)
        if (!ann->items[i].id)
            return tbi_err(TB_EINVAL, "%s:%d: no narration_id: a sentence CSV names its clips "
                           "by narration_id", ann->path, ann->items[i].line);
    if (!(*ids = tbi_malloc(sizeof(**ids) * (size_t)ann->n_items)))
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < ann->n_items; i++)
        (*ids)[i] = (struct keyed){&ann->items[i], i};
    qsort(*ids, (size_t)ann->n_items, sizeof(**ids), by_id);
    for (int i = 1; i < ann->n_items; i++)
        if (!strcmp((*ids)[i].it->id, (*ids)[i - 1].it->id))
            return tbi_err(TB_EFORMAT, "%s: narration_id '%s' names two clips (lines %d and "
                           "%d)", ann->path, (*ids)[i].it->id, (*ids)[i - 1].it->line,
                           (*ids)[i].it->line);
    return 0;
}

int tb_mir_sentences_load(struct tb_mir_sentences **out, const char *path,
                          const struct tb_annotations *ann)
{
    char *text = NULL, *line;
    struct keyed *ids = NULL;
    struct tbi_csv csv;
    int rc, col[2] = {-1, -1}, line_no = 0, cap = 0, n_fields = 0;
    *out = NULL;
    if ((rc = tbi_mir_check_epic(ann)) < 0 || (rc = ids_sorted(ann, &ids, path)) < 0 ||
        (rc = tbi_csv_read(path, &text, 1u << 30)) < 0)
        goto fail;
    if (sentences_alloc(out, 0) < 0) {
        rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    struct tb_mir_sentences *s = *out;
    tbi_csv_begin(&csv, text, 1);
    while ((line = tbi_csv_next(&csv, &line_no))) {
        char *t = tbi_csv_trim(line);
        if (!*t)
            continue;
        if (!n_fields) {
            if ((rc = n_fields = sentence_header(t, path, line_no, col)) < 0)
                goto fail;
            continue;
        }
        if ((rc = sentences_grow(s, &cap, path)) < 0 ||
            (rc = sentence_row(ann, ids, t, col, n_fields, path, line_no, &s->item[s->n])) < 0)
            goto fail;
        s->text[s->n] = ann->items[s->item[s->n]].text;
        s->n++;
    }
    if (!s->n) {
        rc = tbi_err(TB_EFORMAT, "%s: no sentences", path);
        goto fail;
    }
    free(text);
    free(ids);
    return 0;
fail:
    free(text);
    free(ids);
    tb_mir_sentences_free(out);
    return rc;
}

/* ---- relevancy --------------------------------------------------------------------------- */

/* |a & b| / |a | b| of two ascending sets without repeats. */
static double set_iou(const int *a, int na, const int *b, int nb)
{
    int i = 0, j = 0, both = 0;
    while (i < na && j < nb) {
        if (a[i] == b[j]) {
            both++;
            i++;
            j++;
        } else if (a[i] < b[j]) {
            i++;
        } else {
            j++;
        }
    }
    return (double)both / (double)(na + nb - both);
}

double tbi_mir_relevancy_of(const struct tb_ann_item *v, const struct tb_ann_item *t)
{
    double verb = v->verb == t->verb;
    double noun = set_iou(v->nouns, v->n_nouns, t->nouns, t->n_nouns);
    return (verb + noun) / 2;
}

int tb_mir_relevancy(const struct tb_annotations *ann, const struct tb_mir_sentences *s,
                     int64_t first, int64_t n_rows, float *rel)
{
    int rc = tbi_mir_check_epic(ann);
    if (rc < 0)
        return rc;
    if (!s || s->n < 1 || !rel || first < 0 || n_rows < 0 || first > ann->n_items ||
        n_rows > ann->n_items - first)
        return tbi_err(TB_EINVAL, "MIR relevancy: rows %lld + %lld of %d clips, %d sentences",
                       (long long)first, (long long)n_rows, ann->n_items, s ? s->n : 0);
    for (int j = 0; j < s->n; j++)
        if (s->item[j] < 0 || s->item[j] >= ann->n_items)
            return tbi_err(TB_EINVAL, "MIR relevancy: sentence %d names clip %d of %d", j,
                           s->item[j], ann->n_items);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n_rows; r++) {
        const struct tb_ann_item *v = &ann->items[first + r];
        for (int j = 0; j < s->n; j++)
            rel[r * s->n + j] = (float)tbi_mir_relevancy_of(v, &ann->items[s->item[j]]);
    }
    return 0;
}

int tb_mir_relevancy_load(const char *path, const struct tb_annotations *ann,
                          const struct tb_mir_sentences *s, float *rel)
{
    struct tbi_npy h;
    int rc = tbi_mir_check_epic(ann);
    if (rc < 0)
        return rc;
    if (!s || s->n < 1 || !rel)
        return tbi_err(TB_EINVAL, "MIR relevancy %s: no sentences or no buffer", path);
    if ((rc = tbi_npy_open(&h, path)) < 0)
        return rc;
    if (h.n_dims != 2 || h.shape[0] != ann->n_items || h.shape[1] != s->n) {
        char shape[96] = "";
        for (int d = 0, len = 0; d < h.n_dims && len < 80; d++)
            len += snprintf(shape + len, sizeof(shape) - (size_t)len, "%s%lld", d ? ", " : "",
                            (long long)h.shape[d]);
        tbi_npy_close(&h);
        return tbi_err(TB_EFORMAT, "%s: relevancy of shape (%s)%s, but the split has %d clips "
                       "and %d sentences: expected (%d, %d)", path, shape,
                       h.n_dims == 1 ? " (1-D)" : "", ann->n_items, s->n, ann->n_items, s->n);
    }
    rc = tbi_npy_read_f32(&h, path, rel);
    tbi_npy_close(&h);
    if (rc < 0)
        return rc;
    for (int64_t i = 0; i < ann->n_items; i++)
        for (int64_t j = 0; j < s->n; j++) {
            float r = rel[i * s->n + j];
            if (!(r >= 0 && r <= 1))
                return tbi_err(TB_EFORMAT, "%s: relevancy (clip %lld, sentence %lld) is %g; "
                               "relevancies lie in [0, 1]", path, (long long)i, (long long)j,
                               (double)r);
        }
    for (int j = 0; j < s->n; j++) {
        const struct tb_ann_item *it = &ann->items[s->item[j]];
        float r = rel[(int64_t)s->item[j] * s->n + j];
        if (r != 1.0f)
            return tbi_err(TB_EFORMAT, "%s: sentence %d ('%s', the narration of %s:%d) has "
                           "relevancy %g with its own clip, not 1: the file's columns are in "
                           "another sentence order (EK-100's file is in its sentence CSV's "
                           "order: tb_mir_sentences_load)", path, j, it->text, ann->path,
                           it->line, (double)r);
    }
    return 0;
}
