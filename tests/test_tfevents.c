/* tests/test_tfevents.c - TensorBoard event files (src/metrics/tfevents.c) and `tubelet train
 * --tensorboard`:
 * - the TFRecord mask of a CRC-32C undone (the CRC itself: tests/test_core.c);
 * - scalars of values, steps and tags computed here (subnormals, -0, infinities, NaN; steps
 *   of 1 to 10 varint bytes, negative ones; tags of 1 to 256 bytes) read back by a parser
 *   here (both CRCs of every record, every field) and by tests/ref/tfevents_read.py (the
 *   formats in plain Python): the same floats to the bit, steps and tags, the file version
 *   first, wall times within the writing;
 * - damage: every bit of a small file flipped, and the file cut anywhere but between records,
 *   are refused by the parser here, a sample of them by the Python reader, naming the record;
 * - errors: a write past RLIMIT_FSIZE is TB_EIO naming the file and stays so, bad tags are
 *   TB_EINVAL, a missing directory TB_EIO; writers of one second and process get their own
 *   files;
 * - `tubelet train --tensorboard` (cls; clip with and without zero-shot classes; resumed;
 *   under `mpirun -np 2`, where mpirun works: rank 0's file only): every number
 *   metrics.jsonl holds for a scalar is in the run's event files at its step, equal within
 *   the printed precision plus float32 rounding, and nothing else; no event file without
 *   the flag. bench/tfevents_check.py does the same with TensorBoard itself. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>

#include "tb_test.h"
#include "metrics/tfevents.h"

#define PYTHON TB_TEST_PYTHON
#define MPIRUN "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe"
#define TAG_CAP (TBI_TFEVENTS_TAG_MAX + 1)

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- a reader of event files, for the checks ----------------------------------------------- */

struct event {
    double wall;
    int64_t step;
    int version;            /* 1: the file_version event (then tag holds it) */
    char tag[TAG_CAP];
    float value;
};

struct events {
    struct event *ev;
    int n, cap;
};

static uint32_t unmask(uint32_t m)
{
    uint32_t r = m - 0xa282ead8u;
    return (r >> 17) | (r << 15);
}

static uint64_t le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

struct msg {
    const unsigned char *p, *end;
};

/* A varint of at most 10 bytes within m, or -1. */
static int get_varint(struct msg *m, uint64_t *v)
{
    *v = 0;
    for (int k = 0; k < 10 && m->p < m->end; k++) {
        unsigned b = *m->p++;
        *v |= (uint64_t)(b & 0x7f) << (7 * k);
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* The next field of m: its number and wire type; varints in *v, fixed and length-delimited
 * fields as bytes at *data (*len of them). 1: a field, 0: the end, -1: malformed. */
static int next_field(struct msg *m, int *num, int *wire, uint64_t *v, const unsigned char **data,
                      size_t *len)
{
    uint64_t key;
    if (m->p == m->end)
        return 0;
    if (get_varint(m, &key) < 0)
        return -1;
    *num = (int)(key >> 3);
    *wire = (int)(key & 7);
    *len = *wire == 1 ? 8 : *wire == 5 ? 4 : 0;
    if (*wire == 0)
        return get_varint(m, v) < 0 ? -1 : 1;
    if (*wire == 2 && get_varint(m, v) < 0)
        return -1;
    if (*wire == 2)
        *len = (size_t)*v;
    else if (*wire != 1 && *wire != 5)
        return -1;
    if ((size_t)(m->end - m->p) < *len)
        return -1;
    *data = m->p;
    m->p += *len;
    return 1;
}

/* A Summary of one Value {tag, simple_value} into e; 0 or -1. */
static int parse_summary(struct msg s, struct event *e)
{
    int num, wire, n_values = 0, have_tag = 0, have_value = 0;
    uint64_t v;
    const unsigned char *d;
    size_t len;
    for (int r; (r = next_field(&s, &num, &wire, &v, &d, &len)) != 0; n_values++) {
        if (r < 0 || num != 1 || wire != 2)
            return -1;
        struct msg val = {d, d + len};
        while ((r = next_field(&val, &num, &wire, &v, &d, &len)) > 0) {
            if (num == 1 && wire == 2 && len < TAG_CAP) {
                memcpy(e->tag, d, len);
                e->tag[len] = '\0';
                have_tag = 1;
            } else if (num == 2 && wire == 5) {
                uint32_t bits = (uint32_t)le(d, 4);
                memcpy(&e->value, &bits, 4);
                have_value = 1;
            } else {
                return -1;
            }
        }
        if (r < 0)
            return -1;
    }
    return n_values == 1 && have_tag && have_value ? 0 : -1;
}

/* One Event's bytes into e; 0 or -1. */
static int parse_event(const unsigned char *p, size_t n, struct event *e)
{
    struct msg m = {p, p + n};
    int num, wire, r, have_wall = 0, parts = 0;
    uint64_t v;
    const unsigned char *d;
    size_t len;
    memset(e, 0, sizeof(*e));
    while ((r = next_field(&m, &num, &wire, &v, &d, &len)) > 0) {
        if (num == 1 && wire == 1) {
            uint64_t bits = le(d, 8);
            memcpy(&e->wall, &bits, 8);
            have_wall = 1;
        } else if (num == 2 && wire == 0) {
            e->step = (int64_t)v;
        } else if (num == 3 && wire == 2 && len < TAG_CAP) {
            memcpy(e->tag, d, len);
            e->version = 1;
            parts++;
        } else if (num == 5 && wire == 2) {
            if (parse_summary((struct msg){d, d + len}, e) < 0)
                return -1;
            parts++;
        } else {
            return -1;
        }
    }
    return r == 0 && have_wall && parts == 1 ? 0 : -1;
}

/* Every record of n bytes at p (both CRCs checked) appended to out; 0, or -1 with why (the
 * record and its offset) in err. */
static int parse_records(const unsigned char *p, size_t n, struct events *out, char *err,
                         size_t err_size)
{
    size_t pos = 0;
    for (int k = 0; pos < n; k++) {
        if (n - pos < 12)
            return snprintf(err, err_size, "record %d (byte %zu): header cut", k, pos), -1;
        uint64_t len = le(p + pos, 8);
        if (tbi_crc32c(p + pos, 8) != unmask((uint32_t)le(p + pos + 8, 4)))
            return snprintf(err, err_size, "record %d (byte %zu): length CRC", k, pos), -1;
        if (n - pos - 12 < 4 || len > n - pos - 16)
            return snprintf(err, err_size, "record %d (byte %zu): cut short", k, pos), -1;
        const unsigned char *data = p + pos + 12;
        if (tbi_crc32c(data, (size_t)len) != unmask((uint32_t)le(data + len, 4)))
            return snprintf(err, err_size, "record %d (byte %zu): data CRC", k, pos), -1;
        if (out->n == out->cap) {
            out->cap = out->cap ? 2 * out->cap : 64;
            out->ev = realloc(out->ev, sizeof(*out->ev) * (size_t)out->cap);
        }
        if (parse_event(data, (size_t)len, &out->ev[out->n]) < 0)
            return snprintf(err, err_size, "record %d (byte %zu): bad Event", k, pos), -1;
        if ((k == 0) != out->ev[out->n].version ||
            (k == 0 && strcmp(out->ev[out->n].tag, "brain.Event:2")))
            return snprintf(err, err_size, "record %d: file_version misplaced", k), -1;
        out->n++;
        pos += 16 + (size_t)len;
    }
    return 0;
}

static int read_events(const char *path, struct events *out)
{
    size_t n = 0;
    char err[256];
    unsigned char *p = (unsigned char *)tbt_read(path, &n);
    CHECK_MSG(p, "cannot read %s", path);
    int rc = p ? parse_records(p, n, out, err, sizeof(err)) : -1;
    if (p && rc < 0)
        TBT_FAIL("%s: %s", path, err);
    free(p);
    return rc;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* The event files of dir, sorted by name as TensorBoard reads them; returns how many. */
static int event_files(const char *dir, char names[][512], int cap)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        if (!strncmp(de->d_name, "events.out.tfevents.", 20) && n < cap)
            snprintf(names[n++], 512, "%s/%s", dir, de->d_name);
    if (d)
        closedir(d);
    qsort(names, (size_t)n, 512, by_name);
    return n;
}

/* ---- the writer on values made here -------------------------------------------------------- */

static void test_crc(void)
{
    tbt_case = "crc32c mask";
    for (uint32_t c = 1; c < 0xfff00000u; c += 0x01234567u)
        CHECK_EQ(unmask(tbi_crc32c_mask(c)), c);
}

#define N_SCALARS 3000

struct scalar {
    char tag[TAG_CAP];
    int64_t step;
    float value;
};

/* Scalar k's tag, step and value: tags of every length 1..256 (lengths over 127 take a
 * 2-byte varint), steps across the varint sizes and signs, values across float's range. */
static void make_scalar(int k, struct scalar *s)
{
    int len = 1 + k % TBI_TFEVENTS_TAG_MAX;
    for (int i = 0; i < len; i++)
        s->tag[i] = "abcdefghijklmnopqrstuvwxyz0123456789/_.-"[(i * 7 + k) % 40];
    s->tag[len] = '\0';
    static const int64_t steps[] = {0, 1, 127, 128, 16383, 16384, 2147483648LL,
                                    (int64_t)1 << 53, INT64_MAX, -1, -1000, INT64_MIN};
    s->step = k < 12 ? steps[k] : (int64_t)k * k * 7919 - 5000000;
    static const float special[] = {0.0f, -0.0f, FLT_MIN, FLT_MIN / 1024, -FLT_MAX, FLT_MAX,
                                    INFINITY, -INFINITY, NAN, 1.0f, -1.0f, FLT_EPSILON};
    s->value = k < 12 ? special[k] : sinf(0.37f * (float)k) * powf(10.0f, (float)(k % 17 - 8));
}

static int same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof(a));
}

/* The Python reader's lines against the events parsed here. */
static void compare_python(const char *path, const struct events *ev)
{
    char *out = NULL;
    int rc = tbt_run(&out, 120, PYTHON " %s/tests/ref/tfevents_read.py %s", TB_SOURCE_DIR, path);
    CHECK_MSG(rc == 0, "tfevents_read.py: %.2000s", out);
    char *line = out;
    int n = 0;
    for (char *nl; line && (nl = strchr(line, '\n')); line = nl + 1, n++) {
        *nl = '\0';
        if (n >= ev->n)
            break;
        const struct event *e = &ev->ev[n];
        const char *pat = e->version ? "\"file_version\": \"" : "\"tag\": \"";
        const char *w = strstr(line, "\"wall_time\": "), *s = strstr(line, "\"step\": ");
        const char *t = strstr(line, pat), *v = strstr(line, "\"value\": ");
        CHECK_MSG(w && s && t && (e->version || v), "line %d: %s", n, line);
        if (!(w && s && t && (e->version || v)))
            break;
        t += strlen(pat);
        const char *q = strchr(t, '"');
        CHECK_MSG(strtod(w + 13, NULL) == e->wall, "event %d: wall time %s", n, line);
        CHECK_MSG(strtoll(s + 8, NULL, 10) == e->step, "event %d: step %s", n, line);
        CHECK_MSG(q && (size_t)(q - t) == strlen(e->tag) && !strncmp(t, e->tag, strlen(e->tag)),
                  "event %d: tag %s", n, line);
        CHECK_MSG(e->version || same_float((float)strtod(v + 9, NULL), e->value),
                  "event %d: value %s (here %.9g)", n, line, e->value);
    }
    CHECK_EQ(n, ev->n);
    free(out);
}

static void test_write_read(int have_python)
{
    tbt_case = "scalars written and read back";
    static struct scalar s[N_SCALARS];
    tbi_tfevents *w = NULL;
    double t0 = wall_now();
    CHECK_EQ(tbi_tfevents_open(&w, tbt_dir()), 0);
    if (!w)
        return;
    char path[4200];
    snprintf(path, sizeof(path), "%s", tbi_tfevents_path(w));
    CHECK_STR_HAS(path, "/events.out.tfevents.");
    for (int k = 0; k < N_SCALARS; k++) {
        make_scalar(k, &s[k]);
        CHECK_EQ(tbi_tfevents_scalar(w, s[k].tag, s[k].step, s[k].value), 0);
        if (k % 500 == 0)
            CHECK_EQ(tbi_tfevents_flush(w), 0);
    }
    CHECK_EQ(tbi_tfevents_flush(w), 0);
    tbi_tfevents_close(&w);
    CHECK(w == NULL);
    double t1 = wall_now();

    struct events ev = {0};
    CHECK_EQ(read_events(path, &ev), 0);
    CHECK_EQ(ev.n, N_SCALARS + 1);
    for (int k = 0; k < ev.n; k++) {
        const struct event *e = &ev.ev[k];
        CHECK_MSG(e->wall >= t0 - 1e-3 && e->wall <= t1 + 1e-3 &&
                  (k == 0 || e->wall >= ev.ev[k - 1].wall), "event %d: wall time %.6f not in "
                  "[%.6f, %.6f] or going back", k, e->wall, t0, t1);
        if (k == 0) {
            CHECK_EQ(e->step, 0);
            continue;
        }
        const struct scalar *x = &s[k - 1];
        CHECK_MSG(!e->version && e->step == x->step && !strcmp(e->tag, x->tag) &&
                  same_float(e->value, x->value), "scalar %d: %s %" PRId64 " %.9g read as %s %"
                  PRId64 " %.9g", k - 1, x->tag, x->step, x->value, e->tag, e->step, e->value);
    }
    if (have_python)
        compare_python(path, &ev);
    free(ev.ev);

    tbt_case = "bad tags";
    CHECK_EQ(tbi_tfevents_open(&w, tbt_dir()), 0);
    char long_tag[TAG_CAP + 1];
    memset(long_tag, 'x', TAG_CAP);
    long_tag[TAG_CAP] = '\0';
    CHECK_EQ(tbi_tfevents_scalar(w, "", 1, 1), TB_EINVAL);
    CHECK_EQ(tbi_tfevents_scalar(w, long_tag, 1, 1), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "a tag of 257 bytes");
    CHECK_STR_HAS(tb_errmsg(), tbi_tfevents_path(w));
    CHECK_EQ(tbi_tfevents_scalar(w, long_tag + 1, 1, 1), 0);
    tbi_tfevents_close(&w);
}

/* A small file's every bit flipped and every cut are refused; the Python reader refuses a
 * sample of them. */
static void test_damage(int have_python)
{
    tbt_case = "damaged files";
    const char *dir = tbt_path("damage");
    tbi_tfevents *w = NULL;
    CHECK_EQ(tbt_run(NULL, 10, "mkdir -p %s", dir), 0);
    CHECK_EQ(tbi_tfevents_open(&w, dir), 0);
    if (!w)
        return;
    for (int k = 0; k < 3; k++)
        CHECK_EQ(tbi_tfevents_scalar(w, k == 1 ? "eval/top1" : "train/loss", k + 1,
                                     1.5f / (float)(k + 1)), 0);
    char path[4200], bad[4200];
    snprintf(path, sizeof(path), "%s", tbi_tfevents_path(w));
    snprintf(bad, sizeof(bad), "%s/bad.tfevents", dir);
    tbi_tfevents_close(&w);
    size_t n = 0;
    unsigned char *good = (unsigned char *)tbt_read(path, &n), *b = malloc(n + 1);
    if (!good || !b)
        return;
    char err[256];
    int refused = 0, cuts = 0;
    for (size_t i = 0; i < 8 * n; i++) {
        struct events ev = {0};
        memcpy(b, good, n);
        b[i / 8] ^= (unsigned char)(1u << (i % 8));
        refused += parse_records(b, n, &ev, err, sizeof(err)) < 0;
        free(ev.ev);
    }
    CHECK_EQ(refused, 8 * n);
    /* a cut between records leaves the records before it; any other cut is refused */
    size_t next = 0;
    int whole = 0;
    for (size_t len = 1; len < n; len++) {
        struct events ev = {0};
        if (len > next) {
            next += 16 + (size_t)le(good + next, 8);
            whole++;
        }
        int rc = parse_records(good, len, &ev, err, sizeof(err));
        CHECK_MSG(len == next ? rc == 0 && ev.n == whole : rc < 0, "cut at %zu of %zu: %d, "
                  "%d records", len, n, rc, ev.n);
        cuts += len != next;
        free(ev.ev);
    }
    CHECK_EQ(cuts, n - 4); /* 4 records: 3 cuts between them */
    /* the Python reader: a bit of each part of the second record, and cuts inside it */
    size_t r1 = 16 + (size_t)(good[0] | good[1] << 8); /* the first record's bytes */
    size_t len2 = (size_t)(good[r1] | good[r1 + 1] << 8);
    const size_t flips[] = {r1, r1 + 9, r1 + 12, r1 + 12 + len2 / 2, r1 + 12 + len2 + 2};
    const size_t cut[] = {r1 + 5, r1 + 12, r1 + 12 + len2, r1 + 15 + len2};
    for (int k = 0; have_python && k < 9; k++) {
        memcpy(b, good, n);
        if (k < 5)
            b[flips[k]] ^= 0x10;
        FILE *f = fopen(bad, "wb");
        fwrite(b, 1, k < 5 ? n : cut[k - 5], f);
        fclose(f);
        char *out = NULL;
        int rc = tbt_run(&out, 60, PYTHON " %s/tests/ref/tfevents_read.py %s", TB_SOURCE_DIR,
                         bad);
        CHECK_MSG(rc == 1, "damage %d: exit %d: %s", k, rc, out);
        CHECK_STR_HAS(out, "record 1 (byte ");
        CHECK_STR_HAS(out, k < 2 ? "length's CRC" : k < 5 ? "data's CRC" : "cut short");
        free(out);
    }
    free(good);
    free(b);
}

/* Writes past the file-size limit fail as TB_EIO naming the file, and stay failed. */
static void test_errors(void)
{
    tbt_case = "write errors";
    tbi_tfevents *w = NULL;
    CHECK_EQ(tbi_tfevents_open(&w, tbt_path("no/such/dir")), TB_EIO);
    CHECK(w == NULL);
    CHECK_STR_HAS(tb_errmsg(), "no/such/dir/events.out.tfevents.");
    CHECK_STR_HAS(tb_errmsg(), "cannot create");

    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 3000;
    signal(SIGXFSZ, SIG_IGN);
    CHECK_EQ(tbi_tfevents_open(&w, tbt_dir()), 0);
    setrlimit(RLIMIT_FSIZE, &lim);
    int rc = 0, k = 0;
    for (; k < 1000 && rc == 0; k++)
        if ((rc = tbi_tfevents_scalar(w, "train/loss", k, (float)k)) == 0 && k % 10 == 9)
            rc = tbi_tfevents_flush(w);
    char msg[4400];
    snprintf(msg, sizeof(msg), "%s", tb_errmsg());
    int rc2 = tbi_tfevents_scalar(w, "train/loss", k, 1), rc3 = tbi_tfevents_flush(w);
    const char *m3 = tb_errmsg();
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    CHECK_EQ(rc, TB_EIO);
    CHECK_MSG(k > 50 && k < 100, "failed after %d scalars of 40 bytes", k);
    CHECK_STR_HAS(msg, tbi_tfevents_path(w));
    CHECK_STR_HAS(msg, "cannot write: File too large");
    CHECK_EQ(rc2, TB_EIO);
    CHECK_EQ(rc3, TB_EIO);
    CHECK_STR_HAS(m3, "an earlier write failed");
    tbi_tfevents_close(&w);

    tbt_case = "writers of one second";
    tbi_tfevents *ws[3] = {NULL};
    for (int i = 0; i < 3; i++)
        CHECK_EQ(tbi_tfevents_open(&ws[i], tbt_dir()), 0);
    for (int i = 0; i < 3 && ws[0] && ws[1] && ws[2]; i++) {
        CHECK_EQ(tbi_tfevents_scalar(ws[i], "x", i, (float)i), 0);
        CHECK(strcmp(tbi_tfevents_path(ws[i]), tbi_tfevents_path(ws[(i + 1) % 3])));
    }
    char paths[3][4200];
    for (int i = 0; i < 3; i++) {
        snprintf(paths[i], sizeof(paths[i]), "%s", ws[i] ? tbi_tfevents_path(ws[i]) : "");
        tbi_tfevents_close(&ws[i]);
    }
    for (int i = 0; i < 3; i++) {
        struct events ev = {0};
        CHECK_EQ(read_events(paths[i], &ev), 0);
        CHECK_MSG(ev.n == 2 && ev.ev[1].step == i && ev.ev[1].value == (float)i,
                  "%s: %d events", paths[i], ev.n);
        free(ev.ev);
    }
    tbi_tfevents_close(&ws[0]); /* NULL-safe */
}

/* ---- tubelet train --tensorboard ----------------------------------------------------------- */

/* A scalar metrics.jsonl implies: its tag, step, value as printed and the unit of its last
 * printed digit. */
struct expect {
    char tag[64];
    int64_t step;
    double value, unit;
};

/* The unit of the last digit of a printed number ("0.8333": 1e-4, "1.5e-05": 1e-6). */
static double last_digit(const char *s, size_t len)
{
    const char *dot = memchr(s, '.', len), *e = memchr(s, 'e', len);
    size_t end = e ? (size_t)(e - s) : len;
    int decimals = dot ? (int)(end - (size_t)(dot - s) - 1) : 0;
    int exp10 = e ? atoi(e + 1) : 0;
    return pow(10.0, exp10 - decimals);
}

/* metrics.jsonl's scalars in order: train/<key> of a step line's loss, lr, grad_norm and
 * clips_per_s at its step; eval/<key> of an evaluation's metrics (eval/epoch its epoch;
 * zero-shot ones only when computed, else -1; not its counts of items, sentences, views and
 * crops) at the last step before it. */
static int expected(const char *run, struct expect *x, int cap)
{
    char path[4400];
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run);
    char *text = tbt_read(path, NULL), *line = text;
    int n = 0;
    int64_t step = 0;
    for (char *nl; line && (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = '\0';
        int eval = !strncmp(line, "{\"eval_epoch\": ", 15);
        if (!strncmp(line, "{\"step\": ", 9))
            step = strtoll(line + 9, NULL, 10);
        else if (!eval)
            continue; /* a start's line (rows, changed settings): no scalars */
        for (char *k = line; (k = strchr(k, '"'));) {
            char *ke = strchr(k + 1, '"'), *v = ke + 3;
            size_t vlen = strcspn(v, ",}");
            *ke = '\0';
            const char *key = k + 1;
            k = v + vlen;
            int train_key = !strcmp(key, "loss") || !strcmp(key, "lr") ||
                            !strcmp(key, "grad_norm") || !strcmp(key, "clips_per_s");
            int eval_key = strcmp(key, "items") && strcmp(key, "sentences") &&
                           strcmp(key, "views") && strcmp(key, "crops") &&
                           !(!strncmp(key, "zeroshot", 8) && !strncmp(v, "-1.0000", 7));
            if ((eval ? !eval_key : !train_key) || n == cap)
                continue;
            snprintf(x[n].tag, sizeof(x[n].tag), "%s/%s", eval ? "eval" : "train",
                     strcmp(key, "eval_epoch") ? key : "epoch");
            x[n].step = step;
            x[n].value = strtod(v, NULL);
            x[n].unit = last_digit(v, vlen);
            n++;
        }
    }
    free(text);
    return n;
}

/* The run's event files (n_files) hold exactly metrics.jsonl's scalars, in its order once
 * the files are taken in the order they were started (a resumed run's may sort first by name
 * when both began in one second); must_have: a tag that has to be among them. */
static void check_run(const char *run, int n_files, const char *must_have)
{
    static struct expect x[4096];
    static char names[8][512];
    struct events ev[8] = {{0}}, all = {0};
    int n = expected(run, x, 4096), nf = event_files(run, names, 8), order[8];
    CHECK_EQ(nf, n_files);
    CHECK_MSG(n >= 20, "%s/metrics.jsonl: %d scalars", run, n);
    for (int i = 0; i < nf; i++) {
        read_events(names[i], &ev[i]);
        CHECK_MSG(ev[i].n > 0, "%s: no events", names[i]);
        int j = i;
        for (; j > 0 && ev[order[j - 1]].n && ev[i].n && ev[order[j - 1]].ev[0].wall >
                                                          ev[i].ev[0].wall; j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
    for (int i = 0; i < nf; i++) {
        struct events *e = &ev[order[i]];
        for (int k = 1; k < e->n; k++) { /* past the file version */
            if (all.n == all.cap) {
                all.cap = all.cap ? 2 * all.cap : 256;
                all.ev = realloc(all.ev, sizeof(*all.ev) * (size_t)all.cap);
            }
            all.ev[all.n++] = e->ev[k];
        }
        free(e->ev);
    }
    int found = 0;
    CHECK_EQ(all.n, n);
    for (int k = 0; k < n && k < all.n; k++) {
        const struct event *e = &all.ev[k];
        double tol = 0.5 * x[k].unit * (1 + 1e-9) + fabs(x[k].value) * 0x1p-23;
        CHECK_MSG(!strcmp(e->tag, x[k].tag) && e->step == x[k].step &&
                  fabs((double)e->value - x[k].value) <= tol, "scalar %d: %s at %" PRId64
                  " = %.9g in the events, %s at %" PRId64 " = %.9g in metrics.jsonl", k, e->tag,
                  e->step, e->value, x[k].tag, x[k].step, x[k].value);
        found += must_have && !strcmp(e->tag, must_have);
    }
    CHECK_MSG(!must_have || found > 0, "%s: no %s", run, must_have);
    free(all.ev);
}

/* `cmd flags --out <scratch>/name` succeeds (printing want_out, unless NULL); its event
 * files, n_files of them (0: none may exist), hold metrics.jsonl's scalars. */
static void train_run(const char *cmd, const char *flags, const char *name, const char *want_out,
                      int n_files, const char *must_have)
{
    char *out = NULL;
    const char *run = tbt_path(name);
    int rc = tbt_run(&out, 300, "%s %s --out %s", cmd, flags, run);
    CHECK_MSG(rc == 0, "%s", out);
    if (want_out)
        CHECK_STR_HAS(out, want_out);
    free(out);
    static char names[8][512];
    if (n_files > 0)
        check_run(run, n_files, must_have);
    else
        CHECK_EQ(event_files(run, names, 8), 0);
}

static void test_train(const char *t, const char *d)
{
    char *out = NULL, data[4200], train[4400], val[4400], cls[8000], clip[8000], mpi[8200];
    snprintf(data, sizeof(data), "%s/data", d);
    snprintf(train, sizeof(train), "%s/syn/annotations/EPIC_100_train.csv", d);
    snprintf(val, sizeof(val), "%s/syn/annotations/EPIC_100_validation.csv", d);
    int rc = tbt_run(&out, 300, "%s synth --out %s/syn --videos 4 --seconds 20 --size 96x64 && "
                     "%s prep %s/syn/videos/*.mp4 --out %s --short-side 48 --preset veryfast",
                     t, d, t, d, data);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    snprintf(cls, sizeof(cls), "%s train --data %s --train %s --val %s --dim 32 --depth 2 "
             "--heads 2 --patch 16 --tubelet 2 --frames 4 --size 32 --batch 4 "
             "--workers 2 --flip false --log-every 1 --eval-every 1", t, data, train, val);
    snprintf(clip, sizeof(clip), "%s train --task clip --data %s --train %s --val %s --dim 32 "
             "--depth 2 --heads 2 --patch 16 --frames 2 --size 32 --batch 4 --embed 16 "
             "--text-width 32 --text-heads 2 --text-depth 1 --context 12 --log-every 1 "
             "--eval-every 1 --epochs 2 --lr 1e-3 --warmup-epochs 0 --tensorboard", t, data,
             train, val);

    tbt_case = "train --tensorboard (cls), then resumed for another epoch";
    train_run(cls, "--epochs 2 --tensorboard", "cls", NULL, 1, "eval/top1");
    train_run(cls, "--epochs 3 --log-every 2 --tensorboard --resume-changed", "cls", "resuming from", 2,
              "eval/val_loss");
    tbt_case = "train without --tensorboard";
    train_run(cls, "--epochs 1", "plain", NULL, 0, NULL);
    tbt_case = "train --tensorboard (clip, zero-shot classes)";
    char zs[4400];
    snprintf(zs, sizeof(zs), "--class-names %s/syn/annotations/EPIC_100_verb_classes.csv", d);
    train_run(clip, zs, "clip_zs", NULL, 1, "eval/zeroshot_top5");
    tbt_case = "train --tensorboard (clip, retrieval only)";
    train_run(clip, "", "clip", NULL, 1, "eval/map");

    /* two processes: rank 0 alone writes, the same numbers as its metrics.jsonl */
    if (tbt_run(NULL, 60, MPIRUN " -np 2 true") != 0) {
        fprintf(stderr, "skip: the mpirun case (mpirun cannot start 2 processes here)\n");
        return;
    }
    tbt_case = "mpirun -np 2 train --tensorboard";
    snprintf(mpi, sizeof(mpi), "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 " MPIRUN " -np 2 "
             "%s", cls);
    train_run(mpi, "--epochs 2 --batch 2 --tensorboard", "two",
              "(2 processes, 4 clips per step)", 1, "eval/top5");
}

int main(void)
{
    tbt_begin("tfevents");
    int have_python = tbt_run(NULL, 30, PYTHON " -c 'import json, struct'") == 0;
    if (!have_python)
        fprintf(stderr, "skip: the comparisons with tests/ref/tfevents_read.py (no %s)\n",
                PYTHON);
    test_crc();
    test_write_read(have_python);
    test_damage(have_python);
    test_errors();
    test_train(tbt_tubelet(), tbt_dir());
    TBT_EXIT();
}
