/* src/data/annotations.c - annotation files: EPIC-Kitchens-100 CSVs (columns found by name in
 * the header; all_noun_classes as a set of classes), Kinetics/VideoMAE lists and narration
 * CSVs (columns by name under a header, or video_id,start_s,end_s,text; a captions column of
 * JSON lists: several captions a clip). Every row is split as RFC 4180 and pandas split it
 * (the CSV walker and splitter of csv.h live here): a row of more or fewer fields than the
 * header is bad. The columns every reader of a format reads are validated in every row, an
 * error naming the file, line and column; an optional column that can be malformed
 * (all_noun_classes) is validated by what reads it: a bad cell leaves the field unset and its
 * message on the item (cell_error). With skip_bad_rows the bad rows are counted (those
 * without a start or end time apart) and the first few kept with their messages. EPIC action
 * ids: tb_ann_map_actions. A visit's caption: tb_ann_caption_draw.
 * Tests: tests/test_data.c, tests/test_mir.c (the noun sets), tests/test_ann_stats.c,
 * tests/test_captions.c (caption lists). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "data/ann_internal.h"
#include "data/csv.h"
#include "tubelet/data.h"
#include "tubelet/rng.h"

#define MAX_FIELDS 64
#define ANN_MAX_BYTES (1u << 30)

/* ---- the CSV walker and splitter (csv.h) ------------------------------------------------ */

static int blank(char ch)
{
    return ch == ' ' || ch == '\t';
}

void tbi_csv_begin(struct tbi_csv *c, char *text, int quotes)
{
    if (text && !strncmp(text, "\xEF\xBB\xBF", 3))
        text += 3;
    c->p = text;
    c->next_line = 1;
    c->quotes = quotes;
}

/* The end of the record at p: its '\n' or NUL, following quotes when q; *open set when a
 * quoted field is still open at the end of the text. */
static char *record_end(char *p, int q, int *open)
{
    int in_quotes = 0, at_start = 1;
    *open = 0;
    for (; *p; p++) {
        if (in_quotes) {
            if (*p == '"' && p[1] == '"')
                p++;
            else if (*p == '"')
                in_quotes = 0;
        } else if (*p == '\n') {
            return p;
        } else if (*p == ',') {
            at_start = 1;
        } else if (*p == '"' && at_start && q) {
            in_quotes = 1;
            at_start = 0;
        } else if (!blank(*p)) {
            at_start = 0;
        }
    }
    *open = in_quotes;
    return p;
}

char *tbi_csv_next(struct tbi_csv *c, int *line)
{
    char *rec = c->p, *end;
    int open;
    if (!rec || !*rec)
        return NULL;
    end = record_end(rec, c->quotes, &open);
    if (open) /* an unclosed quote: this line alone is the record */
        end = record_end(rec, 0, &open);
    *line = c->next_line;
    for (char *p = rec; p < end; p++)
        c->next_line += *p == '\n';
    c->next_line++;
    c->p = *end ? end + 1 : end;
    *end = '\0';
    if (end > rec && end[-1] == '\r')
        end[-1] = '\0';
    return rec;
}

int tbi_csv_split(char *rec, char **fields, int max)
{
    int n = 0;
    char *p = rec;
    for (;;) {
        if (n == max)
            return TBI_CSV_EMANY;
        while (blank(*p))
            p++;
        if (*p == '"') {
            char *dst = ++p;
            fields[n++] = dst;
            for (;; p++) {
                if (!*p)
                    return TBI_CSV_EQUOTE;
                if (*p == '"' && p[1] != '"')
                    break;
                *dst++ = *p;
                p += *p == '"'; /* "" is one quote */
            }
            *dst = '\0';
            for (p++; blank(*p) || *p == '\r'; p++)
                ;
            if (*p && *p != ',')
                return TBI_CSV_EAFTER;
        } else {
            char *start = p, *e;
            fields[n++] = start;
            while (*p && *p != ',')
                p++;
            for (e = p; e > start && (blank(e[-1]) || e[-1] == '\r'); e--)
                ;
            int more = *p == ',';
            *e = '\0';
            if (!more)
                return n;
            p++;
            continue;
        }
        if (!*p)
            return n;
        p++; /* the comma */
    }
}

const char *tbi_csv_why(int code)
{
    switch (code) {
    case TBI_CSV_EQUOTE:
        return "a quoted field does not close (a quote is written \"\" inside quotes)";
    case TBI_CSV_EAFTER:
        return "text after a quoted field's closing quote (a quote is written \"\" inside "
               "quotes)";
    default:
        return "too many fields";
    }
}

int tbi_csv_read(const char *path, char **text, size_t max_bytes)
{
    size_t len = 0;
    int rc = tbi_read_file(path, text, &len, max_bytes);
    if (rc < 0)
        return rc;
    const unsigned char *u = (const unsigned char *)*text;
    const char *nul = memchr(*text, '\0', len);
    if (nul || (len >= 2 && ((u[0] == 0xFF && u[1] == 0xFE) || (u[0] == 0xFE && u[1] == 0xFF)))) {
        free(*text);
        *text = NULL;
        return tbi_err(TB_EFORMAT, "%s: %s: not UTF-8 text (UTF-16? save it as UTF-8)", path,
                       nul ? "a NUL byte" : "a UTF-16 byte order mark");
    }
    return 0;
}

char *tbi_csv_trim(char *s)
{
    while (blank(*s))
        s++;
    size_t n = strlen(s);
    while (n && (blank(s[n - 1]) || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* ---- cells ------------------------------------------------------------------------------ */

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

/* A time in seconds: any finite number, negative too (a window that starts before its
 * video: clamped to it and reported, as one past its end). */
static int parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || strpbrk(s, "xXnN"))
        return -1;
    *out = v;
    return 0;
}

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

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + (unsigned)d;
    }
    *out = v;
    return 0;
}

/* A \u escape at p (after the backslash: "uXXXX", a surrogate pair as two) as UTF-8 at *o;
 * returns the characters read, or -1. */
static int json_escape_u(const char *p, char **o)
{
    unsigned cp, lo;
    int used = 5;
    if (hex4(p + 1, &cp) < 0 || cp == 0 || (cp >= 0xDC00 && cp < 0xE000))
        return -1;
    if (cp >= 0xD800 && cp < 0xDC00) {
        if (p[5] != '\\' || p[6] != 'u' || hex4(p + 7, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
            return -1;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        used = 11;
    }
    unsigned char *u = (unsigned char *)*o;
    int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const unsigned char lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int i = n - 1; i > 0; i--, cp >>= 6)
        u[i] = (unsigned char)(0x80 | (cp & 0x3F));
    u[0] = (unsigned char)(lead[n] | cp);
    *o += n;
    return used;
}

/* One JSON string at *pp (after its opening quote) written at *o as UTF-8 and a NUL; both
 * advanced past it. 0, or -1 with *pp at the offending character. */
static int json_string(const char **pp, char **o)
{
    static const char plain[] = "\"\\/bfnrt", value[] = "\"\\/\b\f\n\r\t";
    const char *p = *pp;
    for (;;) {
        if (!*p) {
            *pp = p;
            return -1;
        }
        if (*p == '"')
            break;
        if (*p != '\\') {
            *(*o)++ = *p++;
            continue;
        }
        const char *k = p[1] ? strchr(plain, p[1]) : NULL;
        int used = k ? 1 : p[1] == 'u' ? json_escape_u(p + 1, o) : -1;
        if (used < 0) {
            *pp = p;
            return -1;
        }
        if (k)
            *(*o)++ = value[k - plain];
        p += 1 + used;
    }
    *(*o)++ = '\0';
    *pp = p + 1;
    return 0;
}

/* captions: a JSON list of one caption or more, ["a man opens a door", "C opens it"], as
 * Python's json.dumps writes it. The captions go to *out (malloc'ed: each NUL-terminated, one
 * after another) and their number is returned; -1 for a malformed list (*at the offending
 * character's offset, *why what is wrong), or TB_ENOMEM. */
static int parse_caption_list(const char *s, char **out, int *at, const char **why)
{
    const char *p = s;
    char *buf = tbi_malloc(strlen(s) + 1), *o = buf, *cap;
    int n = 0;
    *why = "not a JSON list of captions such as [\"a\", \"b\"]";
    if (!buf)
        return TB_ENOMEM;
    while (*p == ' ')
        p++;
    if (*p != '[')
        goto bad;
    for (p++;; p++) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\'')
            *why = "a Python list (str() of one): write it with json.dumps";
        if (*p != '"')
            goto bad;
        p++;
        cap = o;
        if (json_string(&p, &o) < 0)
            goto bad;
        if (!cap[strspn(cap, " \t\r\n")]) { /* blank; kept as written otherwise */
            *why = "a caption of the list is empty";
            goto bad;
        }
        n++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == ']')
            break;
        if (*p != ',')
            goto bad;
    }
    for (p++; *p == ' ' || *p == '\t'; p++)
        ;
    if (*p)
        goto bad;
    *out = buf;
    return n;
bad:
    *at = (int)(p - s);
    free(buf);
    return -1;
}

/* ---- rows ------------------------------------------------------------------------------- */

/* Every column a format names, found by name in the header (the narration format without a
 * header: video_id, start_s, end_s, text in that order). */
enum { C_VIDEO, C_START, C_STOP, C_VERB, C_NOUN, C_TEXT, C_NOUNS, C_ID, C_VERB_NAME,
       C_NOUN_NAME, C_CAPTIONS, N_COLS };
static const char *const epic_names[N_COLS] = {
    "video_id", "start_timestamp", "stop_timestamp", "verb_class", "noun_class",
    "narration", "all_noun_classes", "narration_id", "verb", "noun", NULL};
static const char *const narration_names[N_COLS] = {
    "video_id", "start_s", "end_s", NULL, NULL, "text", NULL, NULL, NULL, NULL, "captions"};

struct parser {
    struct tb_annotations *a;
    const struct tb_ann_opts *o;
    const char *path;
    int cap;
    int col[N_COLS];       /* the column of each, -1 for an absent one */
    int n_fields;          /* fields a row has: the header's (0: not read yet) */
    int header;            /* 1: the file has a header line */
    int untimed;           /* set by the row's parse: it failed for an empty start or end */
};

/* An empty time column fails apart from a malformed one: EK-100-shaped files from other tools
 * leave times out, and tb_ann_stats counts those rows on their own. */
static int empty_time(struct parser *ps, const char *field, const char *column, int line_no)
{
    if (*field)
        return 0;
    ps->untimed = 1;
    return tbi_err(TB_EFORMAT, "%s:%d: column '%s' is empty: the row has no time window",
                   ps->path, line_no, column);
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
    return &a->items[a->n_items];
}

static void free_item(struct tb_ann_item *it)
{
    free(it->video);
    free(it->text);
    free(it->id);
    free(it->verb_name);
    free(it->noun_name);
    free(it->nouns);
    free(it->captions);
    free(it->cell_error);
}

/* The row's noun set: its all_noun_classes list, or {noun_class} where the file has no such
 * column. A malformed list is no error here (only MIR reads the column): the item keeps no
 * set and the message in cell_error. */
static int row_nouns(struct parser *ps, char **f, int line_no, struct tb_ann_item *it)
{
    int c = ps->col[C_NOUNS], at = 0;
    if (c < 0) {
        if (!(it->nouns = tbi_malloc(sizeof(*it->nouns))))
            return tbi_err(TB_ENOMEM, "%s: out of memory", ps->path);
        it->nouns[0] = it->noun;
        it->n_nouns = 1;
        return 0;
    }
    int k = parse_noun_list(f[c], &it->nouns, &at);
    if (k == TB_ENOMEM)
        return tbi_err(TB_ENOMEM, "%s: out of memory", ps->path);
    if (k >= 0) {
        it->n_nouns = k;
        return 0;
    }
    char msg[512];
    snprintf(msg, sizeof(msg), "%s:%d: column 'all_noun_classes': '%.80s' is not a list of "
             "class numbers such as [2, 15] (at character %d)", ps->path, line_no, f[c], at + 1);
    it->nouns = NULL;
    it->n_nouns = 0;
    if (!(it->cell_error = tbi_strdup(msg)))
        return tbi_err(TB_ENOMEM, "%s: out of memory", ps->path);
    return 0;
}

/* "path num_frames label" or "path label", split from the right, so the path may hold
 * spaces: the label is the last word; the word before it is the frame count when it is a
 * number. */
static int parse_kinetics(struct parser *ps, char *line, int line_no, struct tb_ann_item *it)
{
    int64_t v;
    char *label = strrchr(line, ' '), *tab = strrchr(line, '\t');
    if (tab > label)
        label = tab;
    if (!label)
        return tbi_err(TB_EFORMAT, "%s:%d: expected 'path num_frames label', got '%.80s'",
                       ps->path, line_no, line);
    *label++ = '\0';
    if (tbi_parse_i64(label, 0, 1000000000, &v) < 0)
        return tbi_err(TB_EFORMAT, "%s:%d: column 'label': '%s' is not a class number",
                       ps->path, line_no, label);
    it->verb = (int)v;
    char *rest = tbi_csv_trim(line), *count = strrchr(rest, ' ');
    tab = strrchr(rest, '\t');
    if (tab > count)
        count = tab;
    if (count && tbi_parse_i64(count + 1, 1, INT64_MAX / 2, &v) == 0) {
        *count = '\0';
        it->n_frames = v;
    }
    rest = tbi_csv_trim(rest);
    if (!rest[0])
        return tbi_err(TB_EFORMAT, "%s:%d: empty video name", ps->path, line_no);
    return (it->video = tbi_strdup(rest)) ? 0 : tbi_err(TB_ENOMEM, "%s: out of memory",
                                                        ps->path);
}

/* The row's fields, as many as the header has (more is a comma outside quotes, which pandas
 * refuses too; fewer a row cut short). */
static int split_row(struct parser *ps, char *line, int line_no, char **f)
{
    int n = tbi_csv_split(line, f, MAX_FIELDS);
    const char *of = ps->header ? "the header has" : "the format (video_id,start_s,end_s,text) has";
    if (n == TBI_CSV_EMANY)
        return tbi_err(TB_EFORMAT, "%s:%d: more than %d fields, %s %d", ps->path, line_no,
                       MAX_FIELDS, of, ps->n_fields);
    if (n < 0)
        return tbi_err(TB_EFORMAT, "%s:%d: malformed CSV: %s", ps->path, line_no,
                       tbi_csv_why(n));
    if (n > ps->n_fields)
        return tbi_err(TB_EFORMAT, "%s:%d: %d fields, %s %d: a comma outside quotes? A field "
                       "holding one is quoted (\"open the door, then close it\")", ps->path,
                       line_no, n, of, ps->n_fields);
    if (n < ps->n_fields)
        return tbi_err(TB_EFORMAT, "%s:%d: %d fields, %s %d", ps->path, line_no, n, of,
                       ps->n_fields);
    return n;
}

/* The optional string column k of a row, NULL where the file has none or the cell is empty;
 * *dup its copy (TB_ENOMEM). */
static int opt_string(struct parser *ps, char **f, int k, char **dup)
{
    int c = ps->col[k];
    *dup = NULL;
    if (c < 0 || !f[c][0])
        return 0;
    return (*dup = tbi_strdup(f[c])) ? 0 : tbi_err(TB_ENOMEM, "%s: out of memory", ps->path);
}

/* An EPIC row's window and classes, the columns every reader of the format reads. */
static int parse_epic(struct parser *ps, char **f, int line_no, struct tb_ann_item *it)
{
    const char *path = ps->path, *start = f[ps->col[C_START]], *stop = f[ps->col[C_STOP]];
    const char *verb = f[ps->col[C_VERB]], *noun = f[ps->col[C_NOUN]];
    int64_t v;
    int rc;
    if ((rc = empty_time(ps, start, "start_timestamp", line_no)) < 0 ||
        (rc = empty_time(ps, stop, "stop_timestamp", line_no)) < 0)
        return rc;
    if ((it->start_s = parse_timestamp(start)) < 0)
        return tbi_err(TB_EFORMAT, "%s:%d: column 'start_timestamp': '%s' is not HH:MM:SS.ff",
                       path, line_no, start);
    if ((it->end_s = parse_timestamp(stop)) < 0)
        return tbi_err(TB_EFORMAT, "%s:%d: column 'stop_timestamp': '%s' is not HH:MM:SS.ff",
                       path, line_no, stop);
    if (tbi_parse_i64(verb, 0, 1000000, &v) < 0)
        return tbi_err(TB_EFORMAT, "%s:%d: column 'verb_class': '%s' is not a class number",
                       path, line_no, verb);
    it->verb = (int)v;
    if (tbi_parse_i64(noun, 0, 1000000, &v) < 0)
        return tbi_err(TB_EFORMAT, "%s:%d: column 'noun_class': '%s' is not a class number",
                       path, line_no, noun);
    it->noun = (int)v;
    if ((rc = opt_string(ps, f, C_ID, &it->id)) < 0 ||
        (rc = opt_string(ps, f, C_VERB_NAME, &it->verb_name)) < 0 ||
        (rc = opt_string(ps, f, C_NOUN_NAME, &it->noun_name)) < 0)
        return rc;
    if (ps->col[C_TEXT] >= 0 && !(it->text = tbi_strdup(f[ps->col[C_TEXT]])))
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    return row_nouns(ps, f, line_no, it);
}

/* A narration row's window, text and captions. */
static int parse_narration(struct parser *ps, char **f, int line_no, struct tb_ann_item *it)
{
    const char *path = ps->path, *start = f[ps->col[C_START]], *stop = f[ps->col[C_STOP]];
    int rc, at = 0, c = ps->col[C_CAPTIONS];
    if ((rc = empty_time(ps, start, "start_s", line_no)) < 0 ||
        (rc = empty_time(ps, stop, "end_s", line_no)) < 0)
        return rc;
    if (parse_seconds(start, &it->start_s) < 0)
        return tbi_err(TB_EFORMAT, "%s:%d: column 'start_s': '%s' is not a time in seconds",
                       path, line_no, start);
    if (parse_seconds(stop, &it->end_s) < 0)
        return tbi_err(TB_EFORMAT, "%s:%d: column 'end_s': '%s' is not a time in seconds",
                       path, line_no, stop);
    if (c >= 0 && f[c][0]) {
        const char *why = "";
        int n = parse_caption_list(f[c], &it->captions, &at, &why);
        if (n == TB_ENOMEM)
            return tbi_err(TB_ENOMEM, "%s: out of memory", path);
        if (n < 0)
            return tbi_err(TB_EFORMAT, "%s:%d: column 'captions': '%.80s' is %s (at character "
                           "%d)", path, line_no, f[c], why, at + 1);
        it->n_captions = n;
    }
    if ((rc = opt_string(ps, f, C_TEXT, &it->text)) < 0)
        return rc;
    if (!it->text && !(it->text = tbi_strdup(it->captions ? it->captions : "")))
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    return 0;
}

/* Parse one data row into a new item. Returns 0, or TB_EFORMAT with the message set. */
static int parse_row(struct parser *ps, char *line, int line_no)
{
    char *f[MAX_FIELDS];
    struct tb_ann_item tmp = {.verb = -1, .noun = -1, .action = -1, .line = line_no};
    int rc;
    if (ps->o->format == TB_ANN_KINETICS) {
        rc = parse_kinetics(ps, line, line_no, &tmp);
    } else if ((rc = split_row(ps, line, line_no, f)) >= 0) {
        rc = ps->o->format == TB_ANN_EPIC ? parse_epic(ps, f, line_no, &tmp)
                                          : parse_narration(ps, f, line_no, &tmp);
        if (rc == 0 && tmp.end_s <= tmp.start_s)
            rc = tbi_err(TB_EFORMAT, "%s:%d: the action ends (%.2f s) before it starts "
                         "(%.2f s)", ps->path, line_no, tmp.end_s, tmp.start_s);
        if (rc == 0 && !f[ps->col[C_VIDEO]][0])
            rc = tbi_err(TB_EFORMAT, "%s:%d: empty video name", ps->path, line_no);
        if (rc == 0 && !(tmp.video = tbi_strdup(f[ps->col[C_VIDEO]])))
            rc = tbi_err(TB_ENOMEM, "%s: out of memory", ps->path);
    }
    struct tb_ann_item *it = rc < 0 ? NULL : add_item(ps);
    if (rc == 0 && !it)
        rc = tbi_err(TB_ENOMEM, "%s: out of memory", ps->path);
    if (rc < 0) {
        free_item(&tmp);
        return rc;
    }
    *it = tmp;
    ps->a->n_items++;
    return 0;
}

/* The header: each known column's place, every required one there and none twice. */
static int parse_header(struct parser *ps, char *line)
{
    char *f[MAX_FIELDS];
    int epic = ps->o->format == TB_ANN_EPIC, n = tbi_csv_split(line, f, MAX_FIELDS);
    const char *const *names = epic ? epic_names : narration_names;
    if (n < 0)
        return tbi_err(TB_EFORMAT, "%s:1: the header: %s", ps->path,
                       n == TBI_CSV_EMANY ? "more than 64 columns" : tbi_csv_why(n));
    ps->header = 1;
    ps->n_fields = n;
    for (int k = 0; k < N_COLS; k++) {
        ps->col[k] = -1;
        for (int i = 0; names[k] && i < n; i++) {
            if (strcmp(f[i], names[k]))
                continue;
            if (ps->col[k] >= 0)
                return tbi_err(TB_EFORMAT, "%s:1: the header names '%s' twice (columns %d and "
                               "%d)", ps->path, names[k], ps->col[k] + 1, i + 1);
            ps->col[k] = i;
        }
    }
    for (int k = 0; k < (epic ? C_TEXT : C_VERB); k++)
        if (ps->col[k] < 0)
            return tbi_err(TB_EFORMAT, "%s:1: no '%s' column in the header (%s)", ps->path,
                           names[k], epic ? "an EPIC-Kitchens-100 CSV has video_id, "
                           "start_timestamp, stop_timestamp, verb_class, noun_class"
                           : "a narration CSV has video_id, start_s, end_s, and text or "
                           "captions");
    if (!epic && ps->col[C_TEXT] < 0 && ps->col[C_CAPTIONS] < 0)
        return tbi_err(TB_EFORMAT, "%s:1: no 'text' or 'captions' column in the header (a "
                       "narration CSV has video_id, start_s, end_s, and text or captions)",
                       ps->path);
    return 0;
}

/* A narration file without a header: video_id,start_s,end_s,text. */
static void narration_positions(struct parser *ps)
{
    for (int k = 0; k < N_COLS; k++)
        ps->col[k] = -1;
    ps->col[C_VIDEO] = 0;
    ps->col[C_START] = 1;
    ps->col[C_STOP] = 2;
    ps->col[C_TEXT] = 3;
    ps->n_fields = 4;
}

/* 1 when a narration file's first record is a header: one of its fields is video_id; 0, or
 * TB_ENOMEM. */
static int narration_header(struct parser *ps, const char *rec)
{
    char *copy = tbi_strdup(rec), *f[MAX_FIELDS];
    if (!copy)
        return tbi_err(TB_ENOMEM, "%s: out of memory", ps->path);
    int n = tbi_csv_split(copy, f, MAX_FIELDS), yes = 0;
    for (int i = 0; i < n; i++)
        yes |= !strcmp(f[i], "video_id");
    free(copy);
    return yes;
}

/* Keep row line among the first TB_ANN_BAD_KEPT of rows (*n_kept of them), by line. */
static void keep_row(struct tb_ann_bad_row *rows, int *n_kept, int line, const char *message)
{
    int k = *n_kept;
    while (k > 0 && rows[k - 1].line > line)
        k--;
    if (k < TB_ANN_BAD_KEPT) {
        int last = *n_kept < TB_ANN_BAD_KEPT ? *n_kept : TB_ANN_BAD_KEPT - 1;
        memmove(&rows[k + 1], &rows[k], sizeof(rows[0]) * (size_t)(last - k));
        rows[k].line = line;
        snprintf(rows[k].message, sizeof(rows[k].message), "%s", message);
        *n_kept = last + 1;
    }
}

void tbi_ann_note_bad(struct tb_annotations *a, int line, const char *message)
{
    if (a->skipped_cap >= 0 && a->n_skipped == a->skipped_cap) {
        int cap = a->skipped_cap ? 2 * a->skipped_cap : 16;
        int *grown = tbi_realloc(a->skipped_lines, sizeof(int) * (size_t)cap);
        if (grown)
            a->skipped_lines = grown;
        a->skipped_cap = grown ? cap : -1;
    }
    if (a->skipped_cap >= 0)
        a->skipped_lines[a->n_skipped] = line;
    if (!a->n_skipped++ || line < a->bad[0].line)
        snprintf(a->first_error, sizeof(a->first_error), "%s", message);
    keep_row(a->bad, &a->n_bad_kept, line, message);
}

static int by_value(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

int tb_ann_row_lines(const struct tb_annotations *a, int *lines)
{
    int n = a->n_items + a->n_skipped;
    if (a->skipped_cap < 0)
        return tbi_err(TB_ENOMEM, "%s: the skipped rows' lines were lost (out of memory)",
                       a->path);
    if (!lines)
        return n;
    /* the items keep the file's order; the skipped rows are merged in by line */
    int *skipped = tbi_malloc(sizeof(int) * (size_t)(a->n_skipped + 1));
    if (!skipped)
        return tbi_err(TB_ENOMEM, "out of memory");
    if (a->n_skipped)
        memcpy(skipped, a->skipped_lines, sizeof(int) * (size_t)a->n_skipped);
    qsort(skipped, (size_t)a->n_skipped, sizeof(int), by_value);
    for (int i = 0, j = 0, k = 0; k < n; k++)
        lines[k] = j == a->n_skipped || (i < a->n_items && a->items[i].line < skipped[j])
                       ? a->items[i++].line
                       : skipped[j++];
    free(skipped);
    return n;
}

void tbi_ann_note_clamped(struct tb_annotations *a, int line, const char *message)
{
    a->n_clamped++;
    keep_row(a->clamped, &a->n_clamped_kept, line, message);
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
    free(a->skipped_lines);
    free(a);
    *pa = NULL;
}

/* One record of the file: the header, or a row (skipped and counted, or the error). */
static int load_record(struct parser *ps, char *rec, int line_no, int first)
{
    const struct tb_ann_opts *o = ps->o;
    if (first && o->format == TB_ANN_EPIC)
        return parse_header(ps, rec);
    if (first && o->format == TB_ANN_NARRATION) {
        int header = narration_header(ps, rec);
        if (header)
            return header < 0 ? header : parse_header(ps, rec);
        narration_positions(ps);
    }
    ps->untimed = 0;
    int rc = parse_row(ps, rec, line_no);
    if (rc == TB_ENOMEM || (rc < 0 && !o->skip_bad_rows))
        return rc;
    if (rc < 0) {
        tbi_ann_note_bad(ps->a, line_no, tb_errmsg());
        ps->a->n_untimed += ps->untimed;
        tb_errclear();
    }
    return 0;
}

int tb_ann_load(struct tb_annotations **out, const char *path, const struct tb_ann_opts *o)
{
    char *text = NULL, *rec;
    struct parser ps = {.o = o, .path = path};
    struct tbi_csv csv;
    int rc = tbi_csv_read(path, &text, ANN_MAX_BYTES), line_no, first = 1;
    *out = NULL;
    if (rc < 0)
        return rc;
    if (!(ps.a = tbi_calloc(1, sizeof(*ps.a)))) {
        free(text);
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    }
    snprintf(ps.a->path, sizeof(ps.a->path), "%s", path);
    ps.a->format = o->format;
    tbi_csv_begin(&csv, text, o->format != TB_ANN_KINETICS);
    while ((rec = tbi_csv_next(&csv, &line_no))) {
        char *t = tbi_csv_trim(rec);
        if (!*t || *t == '#') /* blank line or comment */
            continue;
        if ((rc = load_record(&ps, t, line_no, first)) < 0)
            goto fail;
        first = 0;
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

const char *tb_ann_caption(const struct tb_ann_item *it, int k)
{
    if (!it->captions)
        return k == 0 ? it->text : NULL;
    if (k < 0 || k >= it->n_captions)
        return NULL;
    const char *s = it->captions;
    while (k-- > 0)
        s += strlen(s) + 1;
    return s;
}

int tb_ann_caption_draw(const struct tb_ann_item *it, uint64_t seed, int64_t epoch, int64_t i)
{
    if (it->n_captions < 2)
        return 0;
    tb_rng g;
    tb_rng_init_for(&g, seed, TB_RNG_CAPTION, (uint64_t)epoch, (uint64_t)i);
    return (int)tb_rng_below(&g, (uint64_t)it->n_captions);
}
