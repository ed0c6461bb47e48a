/* src/data/annotations.c - annotation files: EPIC-Kitchens-100 CSVs (columns found by name in
 * the header; all_noun_classes as a set of classes), Kinetics/VideoMAE lists and narration
 * CSVs. Every row is validated; an error names the file, the line and the column. With
 * skip_bad_rows the bad rows are counted (those without a start or end time apart) and the
 * first few kept with their messages. EPIC action ids: tb_ann_map_actions.
 * Tests: tests/test_data.c, tests/test_mir.c (the noun sets), tests/test_ann_stats.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "data/csv.h"
#include "tubelet/data.h"

#define MAX_FIELDS 64
#define ANN_MAX_BYTES (1u << 30)

int tbi_csv_split(char *line, char **fields, int max)
{
    int n = 0;
    char *p = line;
    for (;;) {
        if (n == max)
            return -1;
        if (*p == '"') {
            char *dst = ++p;
            fields[n++] = dst;
            for (;;) {
                if (!*p)
                    return -1; /* unterminated quote */
                if (*p == '"' && p[1] == '"') {
                    *dst++ = '"';
                    p += 2;
                } else if (*p == '"') {
                    p++;
                    break;
                } else {
                    *dst++ = *p++;
                }
            }
            *dst = '\0';
            if (*p && *p != ',')
                return -1;
        } else {
            fields[n++] = p;
            while (*p && *p != ',')
                p++;
        }
        if (*p != ',')
            return n;
        *p++ = '\0';
    }
}

/* "HH:MM:SS.ff" (any number of decimals) to seconds; -1 if malformed. Only digits, two
 * colons and one optional decimal point are accepted (strtod would take "0x1" or "inf"). */
static double parse_timestamp(const char *s)
{
    long part[3] = {0, 0, 0};
    int k = 0, digits = 0;
    double frac = 0, scale = 0.1;
    const char *p = s;
    for (; *p && *p != '.'; p++) {
        if (*p == ':') {
            if (!digits || ++k > 2)
                return -1;
            digits = 0;
        } else if (*p >= '0' && *p <= '9' && digits < 9) {
            part[k] = part[k] * 10 + (*p - '0');
            digits++;
        } else {
            return -1;
        }
    }
    if (k != 2 || !digits || part[1] > 59 || part[2] > 59)
        return -1;
    if (*p == '.')
        for (p++; *p; p++, scale *= 0.1) {
            if (*p < '0' || *p > '9')
                return -1;
            frac += (*p - '0') * scale;
        }
    return part[0] * 3600.0 + part[1] * 60.0 + part[2] + frac;
}

static int parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < 0)
        return -1;
    *out = v;
    return 0;
}

char *tbi_csv_trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

struct parser {
    struct tb_annotations *a;
    const struct tb_ann_opts *o;
    const char *path;
    int cap;
    int col[10];           /* EPIC: column of each field, -1 for an absent optional one */
    int untimed;           /* set by parse_row: the row failed for an empty start or end */
};

/* An empty time column fails apart from a malformed one: EK-100-shaped files from other tools
 * leave times out, and tb_ann_stats counts those rows on their own. */
static int empty_time(struct parser *ps, char *field, const char *column, int line_no)
{
    if (*tbi_csv_trim(field))
        return 0;
    ps->untimed = 1;
    return tbi_err(TB_EFORMAT, "%s:%d: column '%s' is empty: the row has no time window",
                   ps->path, line_no, column);
}

/* EPIC columns: the first five are required. */
enum { C_VIDEO, C_START, C_STOP, C_VERB, C_NOUN, C_NARRATION, C_NOUNS, C_ID, C_VERB_NAME,
       C_NOUN_NAME, N_EPIC_COLS };
static const char *const epic_names[N_EPIC_COLS] = {
    "video_id", "start_timestamp", "stop_timestamp", "verb_class", "noun_class",
    "narration", "all_noun_classes", "narration_id", "verb", "noun"};

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* all_noun_classes: a Python list of one class number or more, "[2, 15]", as EPIC writes it.
 * Returns the number of distinct classes with them in *out (malloc'ed, ascending: EPIC's
 * relevancy takes the list as a set), -1 for a malformed list with *at the offending
 * character's offset, or TB_ENOMEM. */
static int parse_noun_list(const char *s, int **out, int *at)
{
    const char *p = s;
    int n = 0, cap = 0, *v = NULL;
    while (*p == ' ')
        p++;
    if (*p != '[')
        goto bad;
    for (p++;; p++) {
        while (*p == ' ')
            p++;
        if (*p < '0' || *p > '9')
            goto bad;
        int64_t x = 0;
        for (; *p >= '0' && *p <= '9'; p++)
            if ((x = x * 10 + (*p - '0')) > 1000000)
                goto bad;
        if (n == cap) {
            int *g = tbi_realloc(v, sizeof(*g) * (size_t)(cap = cap ? 2 * cap : 4));
            if (!g) {
                free(v);
                return TB_ENOMEM;
            }
            v = g;
        }
        v[n++] = (int)x;
        while (*p == ' ')
            p++;
        if (*p == ']')
            break;
        if (*p != ',')
            goto bad;
    }
    for (p++; *p == ' '; p++)
        ;
    if (*p)
        goto bad;
    qsort(v, (size_t)n, sizeof(*v), cmp_int);
    int k = 1;
    for (int i = 1; i < n; i++)
        if (v[i] != v[k - 1])
            v[k++] = v[i];
    *out = v;
    return k;
bad:
    *at = (int)(p - s);
    free(v);
    return -1;
}

static struct tb_ann_item *add_item(struct parser *ps)
{
    struct tb_annotations *a = ps->a;
    if (a->n_items == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 256;
        struct tb_ann_item *g = tbi_realloc(a->items, sizeof(*g) * (size_t)cap);
        if (!g)
            return NULL;
        a->items = g;
        ps->cap = cap;
    }
    struct tb_ann_item *it = &a->items[a->n_items];
    memset(it, 0, sizeof(*it));
    it->verb = it->noun = it->action = -1;
    return it;
}

/* The row's noun set: its all_noun_classes list, or {noun_class} where the file has no such
 * column. */
static int row_nouns(struct parser *ps, char **f, int n, int line_no, struct tb_ann_item *it)
{
    int c = ps->col[C_NOUNS], at = 0;
    if (c < 0) {
        if (!(it->nouns = tbi_malloc(sizeof(*it->nouns))))
            return tbi_err(TB_ENOMEM, "%s: out of memory", ps->path);
        it->nouns[0] = it->noun;
        it->n_nouns = 1;
        return 0;
    }
    if (c >= n)
        return tbi_err(TB_EFORMAT, "%s:%d: %d fields, column 'all_noun_classes' missing",
                       ps->path, line_no, n);
    const char *s = tbi_csv_trim(f[c]);
    int k = parse_noun_list(s, &it->nouns, &at);
    if (k == TB_ENOMEM)
        return tbi_err(TB_ENOMEM, "%s: out of memory", ps->path);
    if (k < 0)
        return tbi_err(TB_EFORMAT, "%s:%d: column 'all_noun_classes': '%.80s' is not a list of "
                       "class numbers such as [2, 15] (at character %d)", ps->path, line_no, s,
                       at + 1);
    it->n_nouns = k;
    return 0;
}

/* Parse one data row into a new item. Returns 0, or TB_EFORMAT with the message set. */
static int parse_row(struct parser *ps, char *line, int line_no)
{
    char *f[MAX_FIELDS];
    const char *path = ps->path;
    struct tb_ann_item tmp = {0};
    int64_t v;
    tmp.verb = tmp.noun = tmp.action = -1;
    tmp.line = line_no;
    const char *video = NULL, *text = NULL, *id = NULL, *names[2] = {NULL, NULL};
    int n_fields = 0, rc;

    if (ps->o->format == TB_ANN_KINETICS) {
        /* "path num_frames label" or "path label", split from the right, so the path may
         * hold spaces: the label is the last word; the word before it is the frame count
         * when it is a number. */
        char *label = strrchr(line, ' '), *tab = strrchr(line, '\t');
        if (tab > label)
            label = tab;
        if (!label)
            return tbi_err(TB_EFORMAT, "%s:%d: expected 'path num_frames label', got '%.80s'",
                           path, line_no, line);
        *label++ = '\0';
        if (tbi_parse_i64(label, 0, 1000000000, &v) < 0)
            return tbi_err(TB_EFORMAT, "%s:%d: column 'label': '%s' is not a class number",
                           path, line_no, label);
        tmp.verb = (int)v;
        char *rest = tbi_csv_trim(line), *count = strrchr(rest, ' ');
        tab = strrchr(rest, '\t');
        if (tab > count)
            count = tab;
        if (count && tbi_parse_i64(count + 1, 1, INT64_MAX / 2, &v) == 0) {
            *count = '\0';
            tmp.n_frames = v;
        }
        video = rest;
    } else {
        int n = tbi_csv_split(line, f, MAX_FIELDS);
        if (n < 0)
            return tbi_err(TB_EFORMAT, "%s:%d: malformed CSV (unbalanced quotes or too many "
                           "fields)", path, line_no);
        if (ps->o->format == TB_ANN_EPIC) {
            for (int k = 0; k < 5; k++)
                if (ps->col[k] >= n)
                    return tbi_err(TB_EFORMAT, "%s:%d: %d fields, column '%s' missing", path,
                                   line_no, n, epic_names[k]);
            video = f[ps->col[C_VIDEO]];
            if ((rc = empty_time(ps, f[ps->col[C_START]], "start_timestamp", line_no)) < 0 ||
                (rc = empty_time(ps, f[ps->col[C_STOP]], "stop_timestamp", line_no)) < 0)
                return rc;
            if ((tmp.start_s = parse_timestamp(f[ps->col[C_START]])) < 0)
                return tbi_err(TB_EFORMAT, "%s:%d: column 'start_timestamp': '%s' is not "
                               "HH:MM:SS.ff", path, line_no, f[ps->col[C_START]]);
            if ((tmp.end_s = parse_timestamp(f[ps->col[C_STOP]])) < 0)
                return tbi_err(TB_EFORMAT, "%s:%d: column 'stop_timestamp': '%s' is not "
                               "HH:MM:SS.ff", path, line_no, f[ps->col[C_STOP]]);
            if (tbi_parse_i64(f[ps->col[C_VERB]], 0, 1000000, &v) < 0)
                return tbi_err(TB_EFORMAT, "%s:%d: column 'verb_class': '%s' is not a class "
                               "number", path, line_no, f[ps->col[C_VERB]]);
            tmp.verb = (int)v;
            if (tbi_parse_i64(f[ps->col[C_NOUN]], 0, 1000000, &v) < 0)
                return tbi_err(TB_EFORMAT, "%s:%d: column 'noun_class': '%s' is not a class "
                               "number", path, line_no, f[ps->col[C_NOUN]]);
            tmp.noun = (int)v;
            if (ps->col[C_NARRATION] >= 0 && ps->col[C_NARRATION] < n)
                text = f[ps->col[C_NARRATION]];
            if (ps->col[C_ID] >= 0 && ps->col[C_ID] < n &&
                *(id = tbi_csv_trim(f[ps->col[C_ID]])) == '\0')
                id = NULL;
            for (int k = 0; k < 2; k++) /* the classes' names, where the file has them */
                if (ps->col[C_VERB_NAME + k] >= 0 && ps->col[C_VERB_NAME + k] < n &&
                    *(names[k] = tbi_csv_trim(f[ps->col[C_VERB_NAME + k]])) == '\0')
                    names[k] = NULL;
            n_fields = n;
        } else {
            if (n < 4)
                return tbi_err(TB_EFORMAT, "%s:%d: expected 'video_id,start_s,end_s,text', got "
                               "%d fields", path, line_no, n);
            video = f[0];
            if ((rc = empty_time(ps, f[1], "start_s", line_no)) < 0 ||
                (rc = empty_time(ps, f[2], "end_s", line_no)) < 0)
                return rc;
            if (parse_seconds(tbi_csv_trim(f[1]), &tmp.start_s) < 0)
                return tbi_err(TB_EFORMAT, "%s:%d: column 'start_s': '%s' is not a time in "
                               "seconds", path, line_no, f[1]);
            if (parse_seconds(tbi_csv_trim(f[2]), &tmp.end_s) < 0)
                return tbi_err(TB_EFORMAT, "%s:%d: column 'end_s': '%s' is not a time in "
                               "seconds", path, line_no, f[2]);
            text = f[3];
        }
        if (tmp.end_s <= tmp.start_s)
            return tbi_err(TB_EFORMAT, "%s:%d: the action ends (%.2f s) before it starts "
                           "(%.2f s)", path, line_no, tmp.end_s, tmp.start_s);
    }
    video = tbi_csv_trim((char *)video);
    if (!video[0])
        return tbi_err(TB_EFORMAT, "%s:%d: empty video name", path, line_no);
    if (ps->o->format == TB_ANN_EPIC && (rc = row_nouns(ps, f, n_fields, line_no, &tmp)) < 0)
        return rc;
    struct tb_ann_item *it = add_item(ps);
    if (!it || !(tmp.video = tbi_strdup(video)) || (text && !(tmp.text = tbi_strdup(text))) ||
        (id && !(tmp.id = tbi_strdup(id))) ||
        (names[0] && !(tmp.verb_name = tbi_strdup(names[0]))) ||
        (names[1] && !(tmp.noun_name = tbi_strdup(names[1])))) {
        free(tmp.video);
        free(tmp.text);
        free(tmp.id);
        free(tmp.verb_name);
        free(tmp.noun_name);
        free(tmp.nouns);
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    }
    *it = tmp;
    ps->a->n_items++;
    return 0;
}

static int parse_header(struct parser *ps, char *line)
{
    char *f[MAX_FIELDS];
    int n = tbi_csv_split(line, f, MAX_FIELDS);
    for (int k = 0; k < N_EPIC_COLS; k++) {
        ps->col[k] = -1;
        for (int i = 0; i < n; i++)
            if (!strcmp(tbi_csv_trim(f[i]), epic_names[k]))
                ps->col[k] = i;
        if (ps->col[k] < 0 && k < C_NARRATION)
            return tbi_err(TB_EFORMAT, "%s:1: no '%s' column in the header (an "
                           "EPIC-Kitchens-100 CSV has video_id, start_timestamp, stop_timestamp, "
                           "verb_class, noun_class)", ps->path, epic_names[k]);
    }
    return 0;
}

void tbi_ann_note_bad(struct tb_annotations *a, int line, const char *message)
{
    int k = a->n_bad_kept;
    if (!a->n_skipped++ || line < a->bad[0].line)
        snprintf(a->first_error, sizeof(a->first_error), "%s", message);
    while (k > 0 && a->bad[k - 1].line > line)
        k--;
    if (k < TB_ANN_BAD_KEPT) {
        int last = a->n_bad_kept < TB_ANN_BAD_KEPT ? a->n_bad_kept : TB_ANN_BAD_KEPT - 1;
        memmove(&a->bad[k + 1], &a->bad[k], sizeof(a->bad[0]) * (size_t)(last - k));
        a->bad[k].line = line;
        snprintf(a->bad[k].message, sizeof(a->bad[k].message), "%s", message);
        a->n_bad_kept = last + 1;
    }
}

static void free_item(struct tb_ann_item *it)
{
    free(it->video);
    free(it->text);
    free(it->id);
    free(it->verb_name);
    free(it->noun_name);
    free(it->nouns);
}

void tbi_ann_drop(struct tb_annotations *a, const unsigned char *drop)
{
    int k = 0;
    for (int i = 0; i < a->n_items; i++) {
        if (drop[i])
            free_item(&a->items[i]);
        else
            a->items[k++] = a->items[i];
    }
    a->n_items = k;
}

void tb_ann_free(struct tb_annotations **pa)
{
    if (!pa || !*pa)
        return;
    struct tb_annotations *a = *pa;
    for (int i = 0; i < a->n_items; i++)
        free_item(&a->items[i]);
    free(a->items);
    free(a);
    *pa = NULL;
}

int tb_ann_load(struct tb_annotations **out, const char *path, const struct tb_ann_opts *o)
{
    char *text = NULL, *save = NULL;
    struct parser ps = {.o = o, .path = path};
    int rc = tbi_read_file(path, &text, NULL, ANN_MAX_BYTES);
    *out = NULL;
    if (rc < 0)
        return rc;
    if (!(ps.a = tbi_calloc(1, sizeof(*ps.a)))) {
        free(text);
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    }
    snprintf(ps.a->path, sizeof(ps.a->path), "%s", path);
    ps.a->format = o->format;
    /* strtok_r would fold empty lines away and lose the numbering, so walk by hand. */
    int line_no = 0;
    char *line = text;
    (void)save;
    while (line && *line) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        line_no++;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r')
            line[len - 1] = '\0';
        char *t = tbi_csv_trim(line);
        int header = line_no == 1 && (o->format == TB_ANN_EPIC ||
                                      (o->format == TB_ANN_NARRATION &&
                                       !strncmp(t, "video_id", 8)));
        if (!*t || *t == '#') {
            /* blank line or comment */
        } else if (header && o->format == TB_ANN_EPIC) {
            if ((rc = parse_header(&ps, t)) < 0)
                goto fail;
        } else if (!header) {
            ps.untimed = 0;
            rc = parse_row(&ps, t, line_no);
            if (rc == TB_ENOMEM)
                goto fail;
            if (rc < 0) {
                if (!o->skip_bad_rows)
                    goto fail;
                tbi_ann_note_bad(ps.a, line_no, tb_errmsg());
                ps.a->n_untimed += ps.untimed;
                tb_errclear();
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    if (ps.a->n_items == 0) {
        rc = tbi_err(TB_EFORMAT, "%s: no annotations%s%s", path,
                     ps.a->n_skipped ? "; first bad row: " : "", ps.a->first_error);
        goto fail;
    }
    free(text);
    *out = ps.a;
    return 0;
fail:
    free(text);
    tb_ann_free(&ps.a);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int tb_ann_map_actions(struct tb_annotations **sets, int n_sets)
{
    int total = 0, n_keys = 0;
    for (int s = 0; s < n_sets; s++)
        total += sets[s]->n_items;
    char **keys = tbi_malloc(sizeof(*keys) * (size_t)(total ? total : 1));
    char *buf = tbi_malloc((size_t)(total ? total : 1) * 24);
    if (!keys || !buf) {
        free(keys);
        free(buf);
        return tbi_err(TB_ENOMEM, "out of memory");
    }
    for (int s = 0; s < n_sets; s++)
        for (int i = 0; i < sets[s]->n_items; i++) {
            char *k = buf + (size_t)n_keys * 24;
            snprintf(k, 24, "%d:%d", sets[s]->items[i].verb, sets[s]->items[i].noun);
            keys[n_keys++] = k;
        }
    qsort(keys, (size_t)n_keys, sizeof(*keys), cmp_str);
    int n_unique = 0;
    for (int i = 0; i < n_keys; i++)
        if (!n_unique || strcmp(keys[i], keys[n_unique - 1]))
            keys[n_unique++] = keys[i];
    for (int s = 0; s < n_sets; s++)
        for (int i = 0; i < sets[s]->n_items; i++) {
            char k[24];
            const char *kp = k;
            snprintf(k, sizeof(k), "%d:%d", sets[s]->items[i].verb, sets[s]->items[i].noun);
            char **hit = bsearch(&kp, keys, (size_t)n_unique, sizeof(*keys), cmp_str);
            sets[s]->items[i].action = (int)(hit - keys);
        }
    free(keys);
    free(buf);
    return n_unique;
}
