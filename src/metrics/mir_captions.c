/* src/metrics/mir_captions.c - the relevant captions of a training split (see metrics.h): for
 * each clip, the sentences whose relevancy with it is above a threshold, stored sparse. From
 * the classes, relevancy depends only on the (verb, noun set) of the clip and of the
 * sentence, so one row per distinct clip class lists the groups of sentences of one class
 * above the threshold, with running sentence counts: the whole 67,217-clip EK-100 train split
 * fits in megabytes. From a file (.npy or a pickled array), rows are read one at a time and
 * clips whose rows are equal share one list of sentence indices. It does not draw for the
 * loader or tokenize: the clip task does (src/train/clip_task.c). Tests:
 * tests/test_captions.c. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/npy.h"
#include "metrics/mir_internal.h"
#include "tubelet/metrics.h"

struct tb_mir_captions {
    int64_t n_items, n_sentences;
    int32_t *row_of;       /* (n_items) each clip's row */
    int64_t n_rows;
    int64_t *row_start;    /* (n_rows + 1) each row's entries */
    int32_t *group;        /* (n_entries) the groups above the threshold, ascending in a row */
    int32_t *row_count;    /* (n_rows) the sentences of each row's groups; NULL when every
                              group is one sentence (group g is sentence g) */
    int64_t n_groups;
    int32_t *group_start;  /* (n_groups + 1) into member; NULL with row_count */
    int32_t *member;       /* (n_sentences) the sentences of each group, ascending */
    int64_t n_pairs, n_empty;
};

void tb_mir_captions_close(tb_mir_captions **pc)
{
    if (!pc || !*pc)
        return;
    tb_mir_captions *c = *pc;
    free(c->row_of);
    free(c->row_start);
    free(c->group);
    free(c->row_count);
    free(c->group_start);
    free(c->member);
    free(c);
    *pc = NULL;
}

int64_t tb_mir_captions_count(const tb_mir_captions *c, int64_t item)
{
    TB_ASSERT(item >= 0 && item < c->n_items);
    int64_t r = c->row_of[item];
    return c->row_count ? c->row_count[r] : c->row_start[r + 1] - c->row_start[r];
}

/* The sentences <= x among the groups of entries a .. b-1 (each group's members ascending). */
static int64_t count_upto(const tb_mir_captions *c, int64_t a, int64_t b, int32_t x)
{
    int64_t n = 0;
    for (int64_t e = a; e < b; e++) {
        const int32_t *m = c->member + c->group_start[c->group[e]];
        int32_t lo = 0, hi = c->group_start[c->group[e] + 1] - c->group_start[c->group[e]];
        if (m[hi - 1] <= x) {
            n += hi;
            continue;
        }
        while (lo < hi) { /* the first member above x */
            int32_t mid = lo + (hi - lo) / 2;
            if (m[mid] > x)
                hi = mid;
            else
                lo = mid + 1;
        }
        n += lo;
    }
    return n;
}

/* Sentences in ascending order, whichever way the row is stored, so a relevancy file and the
 * classes it was computed from draw the same sentences: the k-th of a grouped row is the
 * smallest x with more than k of its sentences <= x. */
int tb_mir_captions_sentence(const tb_mir_captions *c, int64_t item, int64_t k)
{
    TB_ASSERT(k >= 0 && k < tb_mir_captions_count(c, item));
    int64_t r = c->row_of[item], a = c->row_start[r], b = c->row_start[r + 1];
    if (!c->row_count)
        return c->group[a + k];
    int32_t lo = 0, hi = (int32_t)c->n_sentences - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (count_upto(c, a, b, mid) > k)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static int by_int(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    return (a > b) - (a < b);
}

int64_t tb_mir_captions_list(const tb_mir_captions *c, int64_t item, int *out)
{
    int64_t r = c->row_of[item], a = c->row_start[r], b = c->row_start[r + 1], n = 0;
    if (!c->row_count) {
        for (int64_t e = a; e < b; e++)
            out[n++] = c->group[e];
        return n;
    }
    for (int64_t e = a; e < b; e++)
        for (int32_t k = c->group_start[c->group[e]]; k < c->group_start[c->group[e] + 1]; k++)
            out[n++] = c->member[k];
    qsort(out, (size_t)n, sizeof(*out), by_int);
    return n;
}

int tb_mir_captions_draw(const tb_mir_captions *c, int64_t item, tb_rng *rng)
{
    int64_t n = tb_mir_captions_count(c, item);
    return n ? tb_mir_captions_sentence(c, item, (int64_t)tb_rng_below(rng, (uint64_t)n)) : -1;
}

static int64_t bytes_of(const tb_mir_captions *c)
{
    int64_t n_entries = c->row_start[c->n_rows];
    return (int64_t)sizeof(*c) + 4 * c->n_items + 8 * (c->n_rows + 1) + 4 * n_entries +
           (c->row_count ? 4 * c->n_rows + 4 * (c->n_groups + 1) + 4 * c->n_sentences : 0);
}

void tb_mir_captions_stats(const tb_mir_captions *c, struct tb_mir_captions_stats *st)
{
    *st = (struct tb_mir_captions_stats){
        .n_items = c->n_items, .n_sentences = c->n_sentences, .n_rows = c->n_rows,
        .n_groups = c->n_groups, .n_entries = c->row_start[c->n_rows],
        .n_pairs = c->n_pairs, .n_empty = c->n_empty, .bytes = bytes_of(c)};
}

/* ---- from the classes --------------------------------------------------------------------- */

/* Items by class: verb, then the noun set (size, then members); ties by index. */
struct keyed {
    const struct tb_ann_item *it;
    int i;
};

static int by_class(const void *pa, const void *pb)
{
    const struct keyed *a = pa, *b = pb;
    const struct tb_ann_item *x = a->it, *y = b->it;
    if (x->verb != y->verb)
        return x->verb < y->verb ? -1 : 1;
    if (x->n_nouns != y->n_nouns)
        return x->n_nouns < y->n_nouns ? -1 : 1;
    for (int k = 0; k < x->n_nouns; k++)
        if (x->nouns[k] != y->nouns[k])
            return x->nouns[k] < y->nouns[k] ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

static int same_class(const struct tb_ann_item *x, const struct tb_ann_item *y)
{
    return x->verb == y->verb && x->n_nouns == y->n_nouns &&
           !memcmp(x->nouns, y->nouns, sizeof(int) * (size_t)x->n_nouns);
}

/* Rows: the distinct classes of the clips, in class order, into c->row_of and c->n_rows;
 * rep[r] a clip of row r's class. k (n_items) is scratch for the sort. */
static void class_rows(tb_mir_captions *c, const struct tb_annotations *ann, struct keyed *k,
                       int32_t *rep)
{
    int n = ann->n_items;
    for (int i = 0; i < n; i++)
        k[i] = (struct keyed){&ann->items[i], i};
    qsort(k, (size_t)n, sizeof(*k), by_class);
    int n_keys = 0;
    for (int i = 0; i < n; i++) {
        if (!i || !same_class(k[i].it, k[i - 1].it))
            rep[n_keys++] = k[i].i;
        c->row_of[k[i].i] = n_keys - 1;
    }
    c->n_rows = n_keys;
}

/* Each group's sentences into c->member, in sentence order, from the counts in group_start. */
static int group_members(tb_mir_captions *c, const struct tb_mir_sentences *s,
                         const int32_t *group_of)
{
    int n_groups = (int)c->n_groups;
    int32_t *fill = tbi_malloc(sizeof(int32_t) * (size_t)(n_groups ? n_groups : 1));
    if (!fill)
        return tbi_err(TB_ENOMEM, "relevant captions: out of memory");
    memcpy(fill, c->group_start, sizeof(int32_t) * (size_t)n_groups);
    for (int j = 0; j < s->n; j++)
        c->member[fill[group_of[c->row_of[s->item[j]]]]++] = j;
    free(fill);
    return 0;
}

/* The groups: the classes some sentence carries, in class order (group_of[r], by row, or -1),
 * with a clip of each in *grep (n_groups; the caller frees it) and their sentences in
 * c->group_start and c->member. */
static int class_groups(tb_mir_captions *c, const struct tb_mir_sentences *s, const int32_t *rep,
                        int32_t *group_of, int32_t **grep)
{
    int n_keys = (int)c->n_rows, n_groups = 0;
    for (int g = 0; g < n_keys; g++)
        group_of[g] = -1;
    for (int j = 0; j < s->n; j++)
        group_of[c->row_of[s->item[j]]] = 0;
    for (int g = 0; g < n_keys; g++)
        if (group_of[g] == 0)
            group_of[g] = n_groups++;
    c->n_groups = n_groups;
    c->group_start = tbi_calloc((size_t)n_groups + 1, sizeof(int32_t));
    c->member = tbi_malloc(sizeof(int32_t) * (size_t)s->n);
    *grep = tbi_malloc(sizeof(**grep) * (size_t)(n_groups ? n_groups : 1));
    if (!c->group_start || !c->member || !*grep)
        return tbi_err(TB_ENOMEM, "relevant captions: out of memory");
    for (int g = 0; g < n_keys; g++)
        if (group_of[g] >= 0)
            (*grep)[group_of[g]] = rep[g];
    for (int j = 0; j < s->n; j++)
        c->group_start[group_of[c->row_of[s->item[j]]] + 1]++;
    for (int g = 0; g < n_groups; g++)
        c->group_start[g + 1] += c->group_start[g];
    return group_members(c, s, group_of);
}

/* c->row_start from how many groups each row has above the threshold. */
static int count_entries(tb_mir_captions *c, const struct tb_annotations *ann, const int32_t *rep,
                         const int32_t *grep, double threshold)
{
    int n_keys = (int)c->n_rows, n_groups = (int)c->n_groups;
    int64_t *count = tbi_calloc((size_t)n_keys + 1, sizeof(*count));
    c->row_start = tbi_malloc(sizeof(int64_t) * ((size_t)n_keys + 1));
    if (!count || !c->row_start) {
        free(count);
        return tbi_err(TB_ENOMEM, "relevant captions: out of memory");
    }
#pragma omp parallel for schedule(dynamic, 64)
    for (int r = 0; r < n_keys; r++) {
        const struct tb_ann_item *v = &ann->items[rep[r]];
        int64_t m = 0;
        for (int g = 0; g < n_groups; g++)
            m += tbi_mir_relevancy_of(v, &ann->items[grep[g]]) > threshold;
        count[r] = m;
    }
    c->row_start[0] = 0;
    for (int r = 0; r < n_keys; r++)
        c->row_start[r + 1] = c->row_start[r] + count[r];
    free(count);
    return 0;
}

/* Each row's groups above the threshold into c->group at c->row_start, their sentences
 * summed into c->row_count: the same test as count_entries, so the rows fill exactly. */
static int fill_entries(tb_mir_captions *c, const struct tb_annotations *ann, const int32_t *rep,
                        const int32_t *grep, double threshold)
{
    int n_keys = (int)c->n_rows, n_groups = (int)c->n_groups;
    int64_t n_entries = c->row_start[n_keys];
    c->group = tbi_malloc(sizeof(int32_t) * (size_t)(n_entries ? n_entries : 1));
    c->row_count = tbi_malloc(sizeof(int32_t) * (size_t)n_keys);
    if (!c->group || !c->row_count)
        return tbi_err(TB_ENOMEM, "relevant captions: out of memory for %lld entries",
                       (long long)n_entries);
#pragma omp parallel for schedule(dynamic, 64)
    for (int r = 0; r < n_keys; r++) {
        const struct tb_ann_item *v = &ann->items[rep[r]];
        int64_t e = c->row_start[r];
        int32_t sum = 0;
        for (int g = 0; g < n_groups; g++)
            if (tbi_mir_relevancy_of(v, &ann->items[grep[g]]) > threshold) {
                sum += c->group_start[g + 1] - c->group_start[g];
                c->group[e++] = g;
            }
        c->row_count[r] = sum;
    }
    return 0;
}

/* Rows: the distinct classes of the clips (in class order; rep[k] a clip of class k). Groups:
 * the classes that sentences carry, each with its sentences. Entries: for each row, the groups
 * above the threshold, counted in one pass and written in a second. */
static int build_classes(tb_mir_captions *c, const struct tb_annotations *ann,
                         const struct tb_mir_sentences *s, double threshold)
{
    int n = ann->n_items, rc = 0;
    struct keyed *k = tbi_malloc(sizeof(*k) * (size_t)n);
    int32_t *rep = tbi_malloc(sizeof(*rep) * (size_t)n);      /* (n_keys) */
    int32_t *group_of = tbi_malloc(sizeof(int32_t) * (size_t)n); /* (n_keys) or -1 */
    int32_t *grep = NULL;                                        /* (n_groups) */
    c->row_of = tbi_malloc(sizeof(*c->row_of) * (size_t)n);
    if (!k || !rep || !group_of || !c->row_of) {
        rc = tbi_err(TB_ENOMEM, "relevant captions: out of memory");
        goto end;
    }
    class_rows(c, ann, k, rep);
    if ((rc = class_groups(c, s, rep, group_of, &grep)) == 0 &&
        (rc = count_entries(c, ann, rep, grep, threshold)) == 0)
        rc = fill_entries(c, ann, rep, grep, threshold);
end:
    free(k);
    free(rep);
    free(group_of);
    free(grep);
    return rc;
}

/* ---- from a file -------------------------------------------------------------------------- */

/* Open-addressing table of the distinct rows, by a hash of their entries. */
struct rows {
    int64_t cap;     /* a power of 2 */
    int32_t *slot;   /* (cap) a row, or -1 */
    uint64_t *hash;  /* (cap) */
};

static uint64_t hash_row(const int32_t *g, int64_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int64_t i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)g[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return h;
}

/* The row equal to the entries at c->group + row_start[n_rows] .. + n (the last read), if
 * one is stored; else records it as row n_rows. Returns the row. */
static int32_t find_or_add(tb_mir_captions *c, struct rows *t, int64_t n)
{
    int64_t a = c->row_start[c->n_rows];
    const int32_t *g = c->group + a;
    uint64_t h = hash_row(g, n);
    for (int64_t p = (int64_t)(h & (uint64_t)(t->cap - 1));; p = (p + 1) & (t->cap - 1)) {
        int32_t r = t->slot[p];
        if (r < 0) {
            t->slot[p] = (int32_t)c->n_rows;
            t->hash[p] = h;
            c->row_start[c->n_rows + 1] = a + n;
            return (int32_t)c->n_rows++;
        }
        int64_t ra = c->row_start[r], rn = c->row_start[r + 1] - ra;
        if (t->hash[p] == h && rn == n && !memcmp(c->group + ra, g, sizeof(int32_t) * (size_t)n))
            return r;
    }
}

/* Every sentence's own clip, ascending, with the sentence: the column that must be 1 there. */
struct own {
    int item, j;
};

static int by_item(const void *pa, const void *pb)
{
    const struct own *a = pa, *b = pb;
    return a->item != b->item ? (a->item > b->item) - (a->item < b->item)
                              : (a->j > b->j) - (a->j < b->j);
}

/* What build_file reads with. */
struct reader {
    struct tbi_npy h;  /* the open file, read a row at a time */
    const char *path;
    int64_t S;         /* its columns: the sentences */
    double threshold;
    struct rows t;     /* the distinct rows stored so far */
    double *row;       /* (S) the row just read */
    struct own *own;   /* (S) the sentences by their own clip */
    int64_t next_own;  /* the first entry of own not yet checked */
    int64_t cap;       /* c->group's room, in entries */
};

static int check_shape(const struct tbi_npy *h, int64_t n, int64_t S, const char *path)
{
    if (h->n_dims == 2 && h->shape[0] == n && h->shape[1] == S)
        return 0;
    return tbi_err(TB_EFORMAT, "%s: relevancy of %d dimension%s (%lld x %lld), but the split "
                   "has %lld clips and %lld sentences: expected (%lld, %lld)", path, h->n_dims,
                   h->n_dims == 1 ? "" : "s", (long long)(h->n_dims ? h->shape[0] : 0),
                   (long long)(h->n_dims > 1 ? h->shape[1] : 0), (long long)n, (long long)S,
                   (long long)n, (long long)S);
}

/* The reader's buffers (build_file frees them) and c's per-clip arrays, for n clips and the
 * sentences s. */
static int reader_alloc(struct reader *rd, tb_mir_captions *c, const struct tb_mir_sentences *s,
                        int64_t n)
{
    for (rd->t.cap = 16; rd->t.cap < 2 * n; rd->t.cap *= 2)
        ;
    rd->t.slot = tbi_malloc(sizeof(*rd->t.slot) * (size_t)rd->t.cap);
    rd->t.hash = tbi_malloc(sizeof(*rd->t.hash) * (size_t)rd->t.cap);
    rd->row = tbi_malloc(sizeof(*rd->row) * (size_t)rd->S);
    rd->own = tbi_malloc(sizeof(*rd->own) * (size_t)rd->S);
    c->row_of = tbi_malloc(sizeof(*c->row_of) * (size_t)n);
    c->row_start = tbi_calloc((size_t)n + 1, sizeof(*c->row_start));
    if (!rd->t.slot || !rd->t.hash || !rd->row || !rd->own || !c->row_of || !c->row_start)
        return tbi_err(TB_ENOMEM, "%s: out of memory", rd->path);
    memset(rd->t.slot, 0xff, sizeof(*rd->t.slot) * (size_t)rd->t.cap);
    for (int j = 0; j < rd->S; j++)
        rd->own[j] = (struct own){s->item[j], j};
    qsort(rd->own, (size_t)rd->S, sizeof(*rd->own), by_item);
    return 0;
}

/* The columns of clip i's row above the threshold, appended to c->group after the rows stored
 * (a float32 file compared in float32, the precision its values were written in); *m how many. */
static int row_entries(tb_mir_captions *c, struct reader *rd, int64_t i, int64_t *m)
{
    float thr32 = (float)rd->threshold;
    int64_t a = c->row_start[c->n_rows];
    for (int64_t j = 0; j < rd->S; j++) {
        double x = rd->row[j];
        if (!(x >= 0 && x <= 1))
            return tbi_err(TB_EFORMAT, "%s: relevancy (clip %lld, sentence %lld) is %g; "
                           "relevancies lie in [0, 1]", rd->path, (long long)i, (long long)j, x);
        if (!(rd->h.item_bytes == 4 ? (float)x > thr32 : x > rd->threshold))
            continue;
        if (a + *m == rd->cap) {
            rd->cap = rd->cap ? 2 * rd->cap : 1 << 16;
            int32_t *g = tbi_realloc(c->group, sizeof(int32_t) * (size_t)rd->cap);
            if (!g)
                return tbi_err(TB_ENOMEM, "%s: out of memory for %lld entries", rd->path,
                               (long long)rd->cap);
            c->group = g;
        }
        c->group[a + (*m)++] = (int32_t)j;
    }
    return 0;
}

/* The sentences narrating clip i must have relevancy 1 with it: else the file's columns are
 * in another order than s's. */
static int check_own(const struct tb_annotations *ann, struct reader *rd, int64_t i)
{
    for (; rd->next_own < rd->S && rd->own[rd->next_own].item == i; rd->next_own++) {
        int j = rd->own[rd->next_own].j;
        if (rd->row[j] != 1) {
            const struct tb_ann_item *it = &ann->items[i];
            return tbi_err(TB_EFORMAT, "%s: sentence %d ('%s', the narration of %s:%d) has "
                           "relevancy %g with its own clip, not 1: the file's columns are in "
                           "another sentence order (EK-100's is its sentence CSV's: "
                           "--train-sentences)", rd->path, j, it->text, ann->path, it->line,
                           rd->row[j]);
        }
    }
    return 0;
}

/* Clip i's row read, checked and stored, or found equal to a stored one; -1 in c->row_of
 * where it has no entries. */
static int read_row(tb_mir_captions *c, const struct tb_annotations *ann, struct reader *rd,
                    int64_t i)
{
    int64_t m = 0;
    int rc;
    if ((rc = tbi_npy_read_f64(&rd->h, rd->path, rd->S, rd->row)) < 0 ||
        (rc = row_entries(c, rd, i, &m)) < 0 || (rc = check_own(ann, rd, i)) < 0)
        return rc;
    c->row_of[i] = m ? find_or_add(c, &rd->t, m) : -1;
    return 0;
}

/* The clips with none share one empty row; then the arrays shrink to what they hold (a
 * shrink that fails keeps the larger array). */
static int finish_rows(tb_mir_captions *c, const char *path)
{
    int64_t empty = -1;
    for (int64_t i = 0; i < c->n_items; i++)
        if (c->row_of[i] < 0) {
            if (empty < 0) {
                empty = c->n_rows++;
                c->row_start[c->n_rows] = c->row_start[empty];
            }
            c->row_of[i] = (int32_t)empty;
        }
    int64_t n_entries = c->row_start[c->n_rows];
    int32_t *g = tbi_realloc(c->group, sizeof(int32_t) * (size_t)(n_entries ? n_entries : 1));
    int64_t *rs = tbi_realloc(c->row_start, sizeof(int64_t) * (size_t)(c->n_rows + 1));
    if (g)
        c->group = g;
    if (rs)
        c->row_start = rs;
    if (!c->group && !(c->group = tbi_malloc(sizeof(int32_t))))
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    return 0;
}

/* Rows from the relevancy file at path, read one at a time: clips whose rows are equal share
 * one stored row. */
static int build_file(tb_mir_captions *c, const struct tb_annotations *ann,
                      const struct tb_mir_sentences *s, double threshold, const char *path)
{
    struct reader rd = {.path = path, .S = s->n, .threshold = threshold};
    int64_t n = ann->n_items;
    int rc = tbi_pkl_is(path);
    if (rc < 0 || (rc = rc ? tbi_pkl_open(&rd.h, path) : tbi_npy_open(&rd.h, path)) < 0)
        return rc;
    if ((rc = check_shape(&rd.h, n, rd.S, path)) < 0 || (rc = reader_alloc(&rd, c, s, n)) < 0)
        goto end;
    for (int64_t i = 0; i < n; i++)
        if ((rc = read_row(c, ann, &rd, i)) < 0)
            goto end;
    c->n_groups = rd.S;
    rc = finish_rows(c, path);
end:
    tbi_npy_close(&rd.h);
    free(rd.t.slot);
    free(rd.t.hash);
    free(rd.row);
    free(rd.own);
    return rc;
}

int tb_mir_captions_open(tb_mir_captions **out, const struct tb_annotations *ann,
                         const struct tb_mir_sentences *s, double threshold, const char *path)
{
    *out = NULL;
    int rc = tbi_mir_check_epic(ann);
    if (rc < 0)
        return rc;
    if (!s || s->n < 1)
        return tbi_err(TB_EINVAL, "relevant captions: no sentences");
    for (int j = 0; j < s->n; j++)
        if (s->item[j] < 0 || s->item[j] >= ann->n_items)
            return tbi_err(TB_EINVAL, "relevant captions: sentence %d names clip %d of %d", j,
                           s->item[j], ann->n_items);
    if (!(threshold >= 0 && threshold < 1))
        return tbi_err(TB_EINVAL, "relevant captions: threshold %g; it lies in [0, 1) (no "
                       "relevancy is above 1)", threshold);
    tb_mir_captions *c = tbi_calloc(1, sizeof(*c));
    if (!c)
        return tbi_err(TB_ENOMEM, "relevant captions: out of memory");
    c->n_items = ann->n_items;
    c->n_sentences = s->n;
    rc = path && path[0] ? build_file(c, ann, s, threshold, path)
                         : build_classes(c, ann, s, threshold);
    if (rc < 0) {
        tb_mir_captions_close(&c);
        return rc;
    }
    for (int64_t i = 0; i < c->n_items; i++) {
        int64_t m = tb_mir_captions_count(c, i);
        c->n_pairs += m;
        c->n_empty += !m;
    }
    *out = c;
    return 0;
}
