/* src/core/npy.c - .npy files (see npy.h), and tb_npy_write. The header is a Python dict literal, {'descr':
 * '<f4', 'fortran_order': False, 'shape': (9668, 3842), }, read by a small scanner that takes
 * exactly what numpy.lib.format writes: the three keys in any order, quoted strings, True or
 * False, a tuple of integers. Every length and count is checked before it is used: the
 * header's length against the file, the shape's product against overflow and the file size.
 * Tests: tests/test_mir.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/internal.h"
#include "core/npy.h"
#include "tubelet/safetensors.h"

#define MAX_HEADER (1u << 20)
#define CHUNK 65536

struct scan {
    const char *p, *end;
};

static void skip_space(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\t' || *s->p == '\r'))
        s->p++;
}

static int take(struct scan *s, char c)
{
    skip_space(s);
    if (s->p >= s->end || *s->p != c)
        return -1;
    s->p++;
    return 0;
}

/* A quoted string ('...' or "...", no escapes: numpy writes none in these fields). */
static int quoted(struct scan *s, char *out, size_t size)
{
    skip_space(s);
    if (s->p >= s->end || (*s->p != '\'' && *s->p != '"'))
        return -1;
    char q = *s->p++;
    size_t n = 0;
    for (; s->p < s->end && *s->p != q; s->p++) {
        if (*s->p == '\\' || n + 1 >= size)
            return -1;
        out[n++] = *s->p;
    }
    if (s->p >= s->end)
        return -1;
    s->p++;
    out[n] = '\0';
    return 0;
}

static int word(struct scan *s, const char *w)
{
    size_t n = strlen(w);
    skip_space(s);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n))
        return -1;
    s->p += n;
    return 0;
}

/* After an entry of a tuple or dict: 0 past a ',', 1 at the closing character, else -1. */
static int next_entry(struct scan *s, char close)
{
    skip_space(s);
    if (s->p < s->end && *s->p == ',') {
        s->p++;
        return 0;
    }
    return s->p < s->end && *s->p == close ? 1 : -1;
}

/* "(a, b, ...)" with an optional trailing comma; "()" is a 0-d array. */
static int shape_tuple(struct scan *s, struct tbi_npy *h, const char **why)
{
    if (take(s, '('))
        return *why = "'shape' is not a tuple", -1;
    h->n_dims = 0;
    h->n = 1;
    for (;;) {
        skip_space(s);
        if (s->p < s->end && *s->p == ')')
            break;
        if (h->n_dims == TBI_NPY_MAX_DIMS)
            return *why = "more than 8 dimensions", -1;
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return *why = "'shape' holds something other than integers", -1;
        int64_t v = 0;
        for (; s->p < s->end && *s->p >= '0' && *s->p <= '9'; s->p++)
            if ((v = v * 10 + (*s->p - '0')) > ((int64_t)1 << 40))
                return *why = "a dimension over 2^40", -1;
        h->shape[h->n_dims++] = v;
        if (v && h->n > INT64_MAX / 16 / v)
            return *why = "the shape's product overflows", -1;
        h->n *= v;
        if (next_entry(s, ')') < 0)
            return *why = "'shape' is not a tuple of integers", -1;
    }
    s->p++;
    return 0;
}

static int host_is_little(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* The dict: every key once, nothing else. */
static int parse_header(struct scan *s, struct tbi_npy *h, const char **why)
{
    int seen[3] = {0, 0, 0}, fortran = 0;
    char key[32];
    if (take(s, '{'))
        return *why = "it does not start with '{'", -1;
    for (;;) {
        skip_space(s);
        if (s->p < s->end && *s->p == '}')
            break;
        if (quoted(s, key, sizeof(key)) || take(s, ':'))
            return *why = "a key is not a quoted string followed by ':'", -1;
        if (!strcmp(key, "descr") && !seen[0]) {
            if (quoted(s, h->descr, sizeof(h->descr)))
                return *why = "'descr' is not a simple dtype string (a structured dtype?)", -1;
            seen[0] = 1;
        } else if (!strcmp(key, "fortran_order") && !seen[1]) {
            if (!word(s, "True"))
                fortran = 1;
            else if (word(s, "False"))
                return *why = "'fortran_order' is neither True nor False", -1;
            seen[1] = 1;
        } else if (!strcmp(key, "shape") && !seen[2]) {
            if (shape_tuple(s, h, why))
                return -1;
            seen[2] = 1;
        } else {
            return *why = "a key other than 'descr', 'fortran_order', 'shape' (or one twice)", -1;
        }
        if (next_entry(s, '}') < 0)
            return *why = "entries are not separated by ','", -1;
    }
    s->p++;
    skip_space(s);
    if (s->p != s->end)
        return *why = "text after the closing '}'", -1;
    if (!seen[0] || !seen[1] || !seen[2])
        return *why = "'descr', 'fortran_order' or 'shape' is missing", -1;
    if (fortran)
        return *why = "the array is in Fortran order (save np.ascontiguousarray(a))", -1;
    return 0;
}

static int check_dtype(struct tbi_npy *h, const char *path)
{
    const char *d = h->descr;
    int little = host_is_little();
    if ((d[0] == '<' || d[0] == '>' || d[0] == '=') && d[1] == 'f' &&
        (d[2] == '4' || d[2] == '8') && !d[3]) {
        h->item_bytes = d[2] - '0';
        h->swap = d[0] != '=' && (d[0] == '<') != little;
        return 0;
    }
    return tbi_err(TB_EFORMAT, "%s: dtype '%s': only float32 and float64 are read ('<f4', "
                   "'<f8'; convert with a.astype(np.float32))", path, d);
}

void tbi_npy_close(struct tbi_npy *h)
{
    if (h && h->f) {
        fclose(h->f);
        h->f = NULL;
    }
}

int tbi_npy_open(struct tbi_npy *h, const char *path)
{
    unsigned char pre[12];
    char *text = NULL;
    const char *why = NULL;
    struct stat st;
    int rc;
    memset(h, 0, sizeof(*h));
    FILE *f = tbi_fopen(path, "rb");
    if (!f)
        return tbi_err(errno == ENOENT ? TB_ENOENT : TB_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
        rc = tbi_err(TB_EIO, "%s: not a regular file", path);
        goto fail;
    }
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) {
        rc = tbi_err(TB_EFORMAT, "%s: not a .npy file (no \\x93NUMPY magic: make it with "
                     "np.save)", path);
        goto fail;
    }
    int major = pre[6];
    int64_t prefix = major == 1 ? 10 : 12, header_len;
    if (major < 1 || major > 3) {
        rc = tbi_err(TB_EFORMAT, "%s: .npy format version %d.%d (1, 2 and 3 are read)", path,
                     major, pre[7]);
        goto fail;
    }
    if (major == 1) {
        header_len = pre[8] | pre[9] << 8;
    } else {
        if (fread(pre + 10, 1, 2, f) != 2) {
            rc = tbi_err(TB_EFORMAT, "%s: truncated .npy header", path);
            goto fail;
        }
        header_len = (int64_t)pre[8] | (int64_t)pre[9] << 8 | (int64_t)pre[10] << 16 |
                     (int64_t)pre[11] << 24;
    }
    if (header_len > MAX_HEADER || prefix + header_len > (int64_t)st.st_size) {
        rc = tbi_err(TB_EFORMAT, "%s: the .npy header claims %lld bytes; the file has %lld "
                     "(truncated?)", path, (long long)header_len, (long long)st.st_size);
        goto fail;
    }
    if (!(text = tbi_malloc((size_t)header_len + 1))) {
        rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    if (fread(text, 1, (size_t)header_len, f) != (size_t)header_len) {
        rc = tbi_err(TB_EIO, "%s: cannot read the .npy header", path);
        goto fail;
    }
    text[header_len] = '\0';
    struct scan s = {text, text + header_len};
    if (memchr(text, '\0', (size_t)header_len) || parse_header(&s, h, &why)) {
        rc = tbi_err(TB_EFORMAT, "%s: bad .npy header (%s): %.120s", path,
                     why ? why : "a NUL byte in it", text);
        goto fail;
    }
    if ((rc = check_dtype(h, path)) < 0)
        goto fail;
    int64_t want = prefix + header_len + h->n * h->item_bytes;
    if ((int64_t)st.st_size != want) {
        rc = tbi_err(TB_EFORMAT, "%s: %lld bytes, but a header of %lld bytes and %lld elements "
                     "of %s need %lld (%s)", path, (long long)st.st_size,
                     (long long)(prefix + header_len), (long long)h->n, h->descr,
                     (long long)want, (int64_t)st.st_size < want ? "truncated" : "extra bytes");
        goto fail;
    }
    free(text);
    h->f = f;
    return 0;
fail:
    free(text);
    fclose(f);
    h->n_dims = 0;
    return rc;
}

static void swap_bytes(unsigned char *p, int64_t n, int size)
{
    for (int64_t i = 0; i < n; i++, p += size)
        for (int a = 0, b = size - 1; a < b; a++, b--) {
            unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

int tbi_npy_read_f64(struct tbi_npy *h, const char *path, int64_t n, double *out)
{
    int64_t done = 0;
    while (done < n) {
        int64_t k = n - done < CHUNK ? n - done : CHUNK;
        /* float64 lands in place; float32 lands in the upper half of the span and widens
         * upwards, so no element is overwritten before it is read */
        unsigned char *dst = (unsigned char *)(out + done);
        unsigned char *raw = h->item_bytes == 8 ? dst : dst + 4 * k;
        if (fread(raw, (size_t)h->item_bytes, (size_t)k, h->f) != (size_t)k)
            return tbi_err(TB_EIO, "%s: read failed (or the file ends) %lld elements into a "
                           "read of %lld", path, (long long)done, (long long)n);
        if (h->swap)
            swap_bytes(raw, k, h->item_bytes);
        if (h->item_bytes == 4)
            for (int64_t i = 0; i < k; i++) {
                float x;
                memcpy(&x, raw + 4 * i, 4);
                out[done + i] = x;
            }
        else
            for (int64_t i = 0; i < k; i++)
                memcpy(&out[done + i], raw + 8 * i, 8);
        done += k;
    }
    return 0;
}

int tbi_npy_read_f32(struct tbi_npy *h, const char *path, float *out)
{
    unsigned char *buf = tbi_malloc((size_t)CHUNK * 8);
    if (!buf)
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    for (int64_t done = 0; done < h->n;) {
        int64_t k = h->n - done < CHUNK ? h->n - done : CHUNK;
        if (fread(buf, (size_t)h->item_bytes, (size_t)k, h->f) != (size_t)k) {
            free(buf);
            return tbi_err(TB_EIO, "%s: read failed at element %lld", path, (long long)done);
        }
        if (h->swap)
            swap_bytes(buf, k, h->item_bytes);
        if (h->item_bytes == 4) {
            memcpy(out + done, buf, (size_t)k * 4);
        } else {
            for (int64_t i = 0; i < k; i++) {
                double d;
                memcpy(&d, buf + 8 * i, 8);
                /* Out of float's range the conversion is undefined: saturate to infinity
                 * (NaN stays NaN), for the caller's range check to name. */
                out[done + i] = d > FLT_MAX ? INFINITY : d < -FLT_MAX ? -INFINITY : (float)d;
            }
        }
        done += k;
    }
    free(buf);
    return 0;
}

int tb_npy_write(const char *path, const struct tb_st_tensor *t)
{
    static const char *const descr[] = {"<f4", "<i8", "<u2", "<f2"}; /* enum tb_st_dtype */
    static const size_t size[] = {4, 8, 2, 2};
    char header[256], dims[160] = "";
    int64_t n = 1;
    if (t->n_dims < 1 || t->n_dims > TB_ST_MAX_DIMS || (unsigned)t->dtype > TB_ST_F16 ||
        t->dtype == TB_ST_BF16)
        return tbi_err(TB_EINVAL, "%s: no .npy of %d dimensions of that type", path, t->n_dims);
    for (int d = 0; d < t->n_dims; d++) {
        snprintf(dims + strlen(dims), sizeof(dims) - strlen(dims), "%lld,%s",
                 (long long)t->shape[d], d + 1 < t->n_dims ? " " : "");
        n *= t->shape[d];
    }
    if (t->n_dims > 1) /* (3,) for one dimension, (3, 4) for two */
        dims[strlen(dims) - 1] = '\0';
    int len = snprintf(header, sizeof(header), "{'descr': '%s', 'fortran_order': False, "
                       "'shape': (%s), }", descr[t->dtype], dims);
    int pad = 64 - (10 + len + 1) % 64; /* magic, version, length, header, newline: 64-aligned */
    size_t hlen = (size_t)len + (size_t)pad + 1, body = size[t->dtype] * (size_t)n;
    uint8_t *buf = tbi_malloc(10 + hlen + body);
    if (!buf)
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)(hlen & 0xff);
    buf[9] = (uint8_t)(hlen >> 8);
    memcpy(buf + 10, header, (size_t)len);
    memset(buf + 10 + len, ' ', (size_t)pad);
    buf[10 + hlen - 1] = '\n';
    memcpy(buf + 10 + hlen, t->data, body); /* x86 and arm64 are little-endian, as '<' says */
    int rc = tbi_write_file_atomic(path, buf, 10 + hlen + body);
    free(buf);
    return rc;
}

int tb_npy_write_f32(const char *path, const float *x, int64_t rows, int64_t cols)
{
    struct tb_st_tensor t = {.dtype = TB_ST_F32, .n_dims = 2, .shape = {rows, cols},
                             .n = rows * cols, .data = (void *)x};
    return tb_npy_write(path, &t);
}
