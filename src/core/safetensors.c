/* src/core/safetensors.c - safetensors files (see safetensors.h). The JSON header is parsed by
 * a small recursive reader that accepts exactly the JSON safetensors writers produce (objects,
 * arrays, strings, integers); anything else is TB_EFORMAT naming the file. Data offsets are
 * checked against the file size before any tensor is touched. Files written here carry a
 * CRC-32C of all their bytes as the first metadata entry, verified on read (files from other
 * writers have none and are read as they are). Tests: tests/test_vit.c, tests/test_crash.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/strbuf.h"
#include "tubelet/safetensors.h"

#define MAX_HEADER (100u << 20)
#define MAX_FILE ((size_t)64 << 30)

static const char *const dtype_names[] = {"F32", "I64", "BF16", "F16"};
static const int dtype_bytes[] = {4, 8, 2, 2};

struct json {
    const char *p, *end, *path;
};

static void skip_ws(struct json *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
        j->p++;
}

static int expect(struct json *j, char c)
{
    skip_ws(j);
    if (j->p >= j->end || *j->p != c)
        return -1;
    j->p++;
    return 0;
}

/* A string without escapes other than \" and \\ (tensor names and dtypes); out NULL skips
 * it, however long. */
static int string(struct json *j, char *out, size_t size)
{
    size_t n = 0;
    if (expect(j, '"'))
        return -1;
    while (j->p < j->end && *j->p != '"') {
        char c = *j->p++;
        if (c == '\\' && j->p < j->end)
            c = *j->p++;
        if (!out)
            continue;
        if (n + 1 >= size)
            return -1;
        out[n++] = c;
    }
    if (j->p >= j->end)
        return -1;
    j->p++;
    if (out)
        out[n] = '\0';
    return 0;
}

static int integer(struct json *j, int64_t *out)
{
    skip_ws(j);
    char *e;
    errno = 0;
    long long v = strtoll(j->p, &e, 10);
    if (e == j->p || errno || e > j->end)
        return -1;
    j->p = e;
    *out = v;
    return 0;
}

/* Objects and arrays nest at most this deep in a skipped value: the recursion keeps a few KB
 * of stack per level, and safetensors writers nest two or three. */
#define MAX_DEPTH 64

/* Skip any JSON value (for __metadata__ and unknown keys), depth levels down already. */
static int skip_value(struct json *j, int depth)
{
    skip_ws(j);
    if (j->p >= j->end || depth > MAX_DEPTH)
        return -1;
    char c = *j->p;
    if (c == '"')
        return string(j, NULL, 0);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        skip_ws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return 0;
        }
        for (;;) {
            if (c == '{') {
                char key[1024];
                if (string(j, key, sizeof(key)) || expect(j, ':'))
                    return -1;
            }
            if (skip_value(j, depth + 1))
                return -1;
            skip_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            return expect(j, close);
        }
    }
    while (j->p < j->end && *j->p != ',' && *j->p != '}' && *j->p != ']')
        j->p++;
    return 0;
}

static int tensor_entry(struct json *j, struct tb_st_tensor *t, int64_t offs[2])
{
    char key[64], dtype[16];
    int have = 0;
    if (expect(j, '{'))
        return -1;
    for (;;) {
        if (string(j, key, sizeof(key)) || expect(j, ':'))
            return -1;
        if (!strcmp(key, "dtype")) {
            if (string(j, dtype, sizeof(dtype)))
                return -1;
            int found = -1;
            for (int i = 0; i < 4; i++)
                if (!strcmp(dtype, dtype_names[i]))
                    found = i;
            if (found < 0)
                return -2;
            t->dtype = (enum tb_st_dtype)found;
            have |= 1;
        } else if (!strcmp(key, "shape")) {
            if (expect(j, '['))
                return -1;
            t->n_dims = 0;
            t->n = 1;
            skip_ws(j);
            if (j->p < j->end && *j->p == ']') {
                j->p++;
            } else {
                for (;;) {
                    int64_t v;
                    if (t->n_dims == TB_ST_MAX_DIMS || integer(j, &v) || v < 0)
                        return -1;
                    /* Bounded so the byte count of 8-byte elements fits an int64_t too. */
                    if (v && t->n > INT64_MAX / 8 / v)
                        return -1;
                    t->shape[t->n_dims++] = v;
                    t->n *= v;
                    skip_ws(j);
                    if (j->p < j->end && *j->p == ',') {
                        j->p++;
                        continue;
                    }
                    if (expect(j, ']'))
                        return -1;
                    break;
                }
            }
            have |= 2;
        } else if (!strcmp(key, "data_offsets")) {
            if (expect(j, '[') || integer(j, &offs[0]) || expect(j, ',') ||
                integer(j, &offs[1]) || expect(j, ']'))
                return -1;
            have |= 4;
        } else if (skip_value(j, 0)) {
            return -1;
        }
        skip_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (expect(j, '}'))
            return -1;
        return have == 7 ? 0 : -1;
    }
}

void tb_st_free(struct tb_st_file **pf)
{
    if (!pf || !*pf)
        return;
    struct tb_st_file *f = *pf;
    for (int i = 0; i < f->n_tensors; i++)
        free(f->tensors[i].data);
    free(f->tensors);
    free(f->metadata);
    free(f);
    *pf = NULL;
}

const struct tb_st_tensor *tb_st_find(const struct tb_st_file *f, const char *name)
{
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

static float half_to_float(uint16_t h, int bf16)
{
    uint32_t bits;
    if (bf16) {
        bits = (uint32_t)h << 16;
    } else {
        uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023;
        if (exp == 0 && man == 0)
            bits = sign;
        else if (exp == 0) { /* subnormal */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 1024));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 1023) << 13);
        } else if (exp == 31)
            bits = sign | 0x7F800000u | (man << 13);
        else
            bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The checksum's place: a file written here begins its header with CRC_HEAD, then the CRC's
 * 8 hex digits and a quote. The CRC is of the whole file with those 8 digits read as '0's
 * (a header cannot hold its own checksum otherwise): size, header and data are all covered. */
#define CRC_HEAD "{\"__metadata__\":{\"crc32c\":\""
#define CRC_AT (8 + sizeof(CRC_HEAD) - 1) /* the digits' offset in the file */
#define CRC_ZEROS "00000000"

/* The CRC of len bytes of a file whose digits at CRC_AT count as zeros. */
static uint32_t file_crc(const char *buf, size_t len)
{
    uint32_t c = tbi_crc32c(buf, CRC_AT);
    c = tbi_crc32c_extend(c, CRC_ZEROS, 8);
    return tbi_crc32c_extend(c, buf + CRC_AT + 8, len - CRC_AT - 8);
}

/* Whether the file carries a checksum (0: no; 1: yes, *stored holds it; -1: its digits are
 * not 8 lowercase hex digits). */
static int stored_crc(const char *buf, size_t len, uint64_t hlen, uint32_t *stored)
{
    if (hlen < CRC_AT + 9 - 8 || len < CRC_AT + 9 || memcmp(buf + 8, CRC_HEAD, CRC_AT - 8))
        return 0;
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = buf[CRC_AT + (size_t)i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return -1;
        v = v << 4 | (uint32_t)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    *stored = v;
    return buf[CRC_AT + 8] == '"' ? 1 : -1;
}

/* What the pieces of tb_st_read return besides 0: a header that does not parse, or no memory;
 * tb_st_read words the message. */
enum { ST_BAD = 1, ST_OOM = 2 };

/* The "__metadata__" value at j into f->metadata, less the file's own checksum (it is the
 * file's, not the caller's). 0, ST_BAD or ST_OOM. */
static int read_metadata(struct json *j, struct tb_st_file *f, const char *buf, int has_crc)
{
    skip_ws(j);
    const char *start = j->p;
    if (skip_value(j, 0))
        return ST_BAD;
    free(f->metadata);
    f->metadata = NULL;
    if (has_crc && start == buf + CRC_AT - strlen("{\"crc32c\":\"")) {
        /* The checksum is the file's, not the caller's: left out of the text. */
        const char *rest = buf + CRC_AT + 9;
        rest += *rest == ',';
        size_t n = (size_t)(j->p - rest);
        if ((f->metadata = tbi_malloc(n + 2))) {
            f->metadata[0] = '{';
            memcpy(f->metadata + 1, rest, n);
            f->metadata[n + 1] = '\0';
        }
    } else {
        f->metadata = strndup(start, (size_t)(j->p - start));
    }
    return f->metadata ? 0 : ST_OOM;
}

/* Tensor t's bytes (its n values of its dtype at src) into t->data, BF16 and F16 widened to
 * F32. 0 or ST_OOM. */
static int load_data(struct tb_st_tensor *t, const char *src, size_t bytes)
{
    int widen = t->dtype == TB_ST_BF16 || t->dtype == TB_ST_F16;
    size_t keep = widen ? (size_t)t->n * 4 : bytes;
    if (!(t->data = tbi_malloc(keep ? keep : 1)))
        return ST_OOM;
    if (widen) {
        const uint8_t *s = (const uint8_t *)src;
        for (int64_t i = 0; i < t->n; i++)
            ((float *)t->data)[i] = half_to_float((uint16_t)(s[2 * i] | s[2 * i + 1] << 8),
                                                  t->dtype == TB_ST_BF16);
        t->dtype = TB_ST_F32;
    } else {
        memcpy(t->data, src, bytes);
    }
    return 0;
}

/* The entry of tensor name at j, with its data from the data_len bytes at data, appended to f
 * (*cap: the room in f->tensors). 0, ST_OOM, or a negative TB_E* (said), *truncated set when
 * the file ends inside the tensor's data. */
static int read_tensor(struct json *j, struct tb_st_file *f, int *cap, const char *name,
                       const char *data, size_t data_len, int *truncated)
{
    if (f->n_tensors == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        struct tb_st_tensor *g = tbi_realloc(f->tensors, sizeof(*g) * (size_t)*cap);
        if (!g)
            return ST_OOM;
        f->tensors = g;
    }
    struct tb_st_tensor *t = &f->tensors[f->n_tensors];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    int64_t offs[2] = {0, 0};
    int e = tensor_entry(j, t, offs);
    if (e == -2)
        return tbi_err(TB_EUNSUPPORTED, "%s: tensor '%s' has a dtype tubelet does not read "
                       "(F32, I64, BF16, F16 are)", j->path, name);
    size_t bytes = (size_t)t->n * (size_t)dtype_bytes[t->dtype];
    if (e == 0 && offs[0] >= 0 && offs[1] >= offs[0] && (size_t)(offs[1] - offs[0]) == bytes &&
        (size_t)offs[1] > data_len) {
        *truncated = 1;
        return tbi_err(TB_EFORMAT, "%s: truncated: tensor '%s' ends at byte %lld of the data, "
                       "the file holds %zu (a torn write?)", j->path, name, (long long)offs[1],
                       data_len);
    }
    if (e < 0 || offs[0] < 0 || offs[1] < offs[0] || (size_t)offs[1] > data_len ||
        (size_t)(offs[1] - offs[0]) != bytes)
        return tbi_err(TB_EFORMAT, "%s: tensor '%s': bad entry or data offsets", j->path, name);
    if (load_data(t, data + offs[0], bytes))
        return ST_OOM;
    f->n_tensors++;
    return 0;
}

/* The header's length from the file's first 8 bytes (little-endian) into *hlen. 0, ST_BAD (too
 * long to be a header), or a negative TB_E* (said) for a file too short for it. */
static int header_length(const char *buf, size_t len, const char *path, uint64_t *hlen)
{
    if (len < 8)
        return tbi_err(TB_EFORMAT, "%s: truncated or not a safetensors file: %zu bytes", path,
                       len);
    *hlen = 0;
    for (int i = 7; i >= 0; i--)
        *hlen = *hlen << 8 | (uint8_t)buf[i];
    if (*hlen > MAX_HEADER)
        return ST_BAD;
    if (8 + *hlen > len)
        return tbi_err(TB_EFORMAT, "%s: truncated or not a safetensors file: its header is to "
                       "be %llu bytes, the file has %zu after the size", path,
                       (unsigned long long)*hlen, len - 8);
    return 0;
}

/* The header's entries (j: its JSON text) into f: the metadata, and each tensor with its data
 * from the bytes after the header. 0, ST_BAD, ST_OOM, or a negative TB_E* (said; *truncated set
 * where the file ends inside a tensor's data). */
static int read_header(struct json *j, struct tb_st_file *f, const char *buf, size_t len,
                       uint64_t hlen, int has_crc, int *truncated)
{
    int cap = 0, rc;
    if (expect(j, '{'))
        return ST_BAD;
    skip_ws(j);
    if (j->p < j->end && *j->p == '}')
        return 0;
    for (;;) {
        char name[256];
        if (string(j, name, sizeof(name)) || expect(j, ':'))
            return ST_BAD;
        if (!strcmp(name, "__metadata__"))
            rc = read_metadata(j, f, buf, has_crc);
        else
            rc = read_tensor(j, f, &cap, name, buf + 8 + hlen, len - 8 - hlen, truncated);
        if (rc != 0)
            return rc;
        skip_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        return expect(j, '}') ? ST_BAD : 0;
    }
}

int tb_st_read(struct tb_st_file **out, const char *path)
{
    char *buf = NULL;
    size_t len = 0;
    struct tb_st_file *f = NULL;
    int rc = tbi_read_file(path, &buf, &len, MAX_FILE);
    *out = NULL;
    if (rc < 0)
        return rc;
    uint64_t hlen = 0;
    uint32_t stored = 0, computed = 0;
    int truncated = 0, has_crc = 0, crc_bad = 0;
    if ((rc = header_length(buf, len, path, &hlen)) != 0)
        goto fail;
    /* The checksum is checked before the header is believed, but a torn file is named as
     * such below (by the data it lacks), rather than only as one that does not match. */
    has_crc = stored_crc(buf, len, hlen, &stored);
    if (has_crc < 0) {
        rc = tbi_err(TB_EFORMAT, "%s: damaged: its \"crc32c\" metadata is not 8 hex digits",
                     path);
        goto fail;
    }
    crc_bad = has_crc && (computed = file_crc(buf, len)) != stored;
    struct json j = {buf + 8, buf + 8 + hlen, path};
    if (!(f = tbi_calloc(1, sizeof(*f)))) {
        rc = ST_OOM;
        goto fail;
    }
    f->checksummed = has_crc;
    if ((rc = read_header(&j, f, buf, len, hlen, has_crc, &truncated)) == 0 && !crc_bad) {
        free(buf);
        *out = f;
        return 0;
    }
fail:
    if (rc == ST_BAD)
        rc = tbi_err(TB_EFORMAT, "%s: not a safetensors file (bad header)", path);
    else if (rc == ST_OOM)
        rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
    if (crc_bad && !truncated && rc != TB_ENOMEM)
        rc = tbi_err(TB_EFORMAT, "%s: damaged: its bytes do not match the checksum it carries "
                     "(crc32c %08x stored, %08x computed over its %zu bytes); not loaded (a "
                     "bit flipped on disk or on the way, or a program other than tubelet "
                     "rewrote it keeping tubelet's \"crc32c\" metadata)", path,
                     (unsigned)stored, (unsigned)computed, len);
    free(buf);
    tb_st_free(&f);
    return rc;
}

int tb_st_write(const char *path, const struct tb_st_tensor *ts, int n, const char *metadata)
{
    return tb_st_write_fill(path, ts, n, metadata, NULL, NULL);
}

/* The members of the JSON object text meta, each after a comma, into h, but for a "crc32c"
 * (the file's checksum is the writer's to set). 0, or -1 for text that is not an object. */
static int copy_members(struct tbi_sb *h, const char *meta)
{
    struct json j = {meta, meta + strlen(meta), "metadata"};
    char key[16];
    if (expect(&j, '{'))
        return -1;
    skip_ws(&j);
    if (j.p < j.end && *j.p == '}')
        return 0;
    for (;;) {
        skip_ws(&j);
        const char *k0 = j.p;
        int keep = string(&j, key, sizeof(key)) || strcmp(key, "crc32c");
        j.p = k0;
        if (string(&j, NULL, 0) || expect(&j, ':') || skip_value(&j, 0))
            return -1;
        if (keep)
            tbi_sb_printf(h, ",%.*s", (int)(j.p - k0), k0);
        skip_ws(&j);
        if (j.p < j.end && *j.p == ',') {
            j.p++;
            continue;
        }
        return expect(&j, '}');
    }
}

int tb_st_write_fill(const char *path, const struct tb_st_tensor *ts, int n,
                     const char *metadata, int (*fill)(void *user, int i, void *dst), void *user)
{
    struct tbi_sb h = {0};
    size_t off = 0;
    tbi_sb_printf(&h, "%s", CRC_HEAD CRC_ZEROS "\"");
    if (metadata && copy_members(&h, metadata) < 0) {
        tbi_sb_free(&h);
        return tbi_err(TB_EINVAL, "%s: the metadata is not a JSON object: %.80s", path,
                       metadata);
    }
    tbi_sb_printf(&h, "}");
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)ts[i].n * (size_t)dtype_bytes[ts[i].dtype];
        tbi_sb_printf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", ts[i].name,
                      dtype_names[ts[i].dtype]);
        for (int d = 0; d < ts[i].n_dims; d++)
            tbi_sb_printf(&h, "%s%lld", d ? "," : "", (long long)ts[i].shape[d]);
        tbi_sb_printf(&h, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        off += bytes;
    }
    tbi_sb_printf(&h, "}");
    /* Pad the header with spaces to a multiple of 8, as the reference writer does. */
    while (!h.failed && h.len % 8)
        tbi_sb_printf(&h, " ");
    if (h.failed) {
        tbi_sb_free(&h);
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    }
    size_t total = 8 + h.len + off;
    char *buf = tbi_malloc(total);
    if (!buf) {
        tbi_sb_free(&h);
        return tbi_err(TB_ENOMEM, "%s: out of memory (%zu bytes)", path, total);
    }
    for (int i = 0; i < 8; i++)
        buf[i] = (char)((uint64_t)h.len >> (8 * i));
    memcpy(buf + 8, h.buf, h.len);
    char *p = buf + 8 + h.len;
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)ts[i].n * (size_t)dtype_bytes[ts[i].dtype];
        int rc = ts[i].data ? 0 : fill ? fill(user, i, p) : TB_EINVAL;
        if (rc < 0) {
            free(buf);
            tbi_sb_free(&h);
            return tbi_err_prefix(rc, "%s: tensor '%s'", path, ts[i].name);
        }
        if (ts[i].data)
            memcpy(p, ts[i].data, bytes);
        p += bytes;
    }
    char digits[9];
    snprintf(digits, sizeof(digits), "%08x", (unsigned)file_crc(buf, total));
    memcpy(buf + CRC_AT, digits, 8);
    int rc = tbi_write_file_atomic(path, buf, total);
    free(buf);
    tbi_sb_free(&h);
    return rc;
}
