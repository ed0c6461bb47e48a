/* src/metrics/tfevents.c - TensorBoard event files of scalars (tfevents.h): each record is
 * TFRecord-framed (length, masked CRC32C of it, the bytes, masked CRC32C of them) around an
 * Event message (tensorflow/core/util/event.proto) encoded here field by field. Memory is one
 * record buffer and stdio's; nothing is read back. Tests: tests/test_tfevents.c, and
 * bench/tfevents_check.py with TensorBoard's own reader. */
#define _POSIX_C_SOURCE 200809L
#include "metrics/tfevents.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"

/* Protobuf wire types, and a field's key: its number and wire type. */
enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };
#define KEY(field, wire) ((uint64_t)(field) << 3 | (wire))

/* Event's fields, and Summary's and Summary.Value's. */
enum { EVENT_WALL_TIME = 1, EVENT_STEP = 2, EVENT_FILE_VERSION = 3, EVENT_SUMMARY = 5 };
enum { SUMMARY_VALUE = 1, VALUE_TAG = 1, VALUE_SIMPLE = 2 };

#define FILE_VERSION "brain.Event:2"
#define HEAD_BYTES 12 /* uint64 length, masked CRC of it */
#define TAIL_BYTES 4  /* masked CRC of the data */
/* A scalar's Event: wall time 9, step at most 11, summary key and length 3, value key and
 * length 3, tag key and length 3 + the tag, value 5 bytes; the file version's is smaller. */
#define EVENT_MAX (40 + TBI_TFEVENTS_TAG_MAX)
#define RECORD_MAX (HEAD_BYTES + EVENT_MAX + TAIL_BYTES)

struct tbi_tfevents {
    FILE *f;
    int failed;             /* a write failed: what follows in the file would be garbage */
    char path[4096];
    unsigned char rec[RECORD_MAX];
};

uint32_t tbi_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- encoding into the record buffer ------------------------------------------------------ */

struct enc {
    unsigned char *p;
    size_t n, cap;
};

static void put_byte(struct enc *e, unsigned b)
{
    TB_ASSERT(e->n < e->cap);
    e->p[e->n++] = (unsigned char)b;
}

static void put_le(struct enc *e, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        put_byte(e, (unsigned)(v >> (8 * i)) & 0xffu);
}

static void put_varint(struct enc *e, uint64_t v)
{
    for (; v >= 0x80; v >>= 7)
        put_byte(e, (unsigned)(v & 0x7f) | 0x80u);
    put_byte(e, (unsigned)v);
}

static size_t varint_bytes(uint64_t v)
{
    size_t n = 1;
    for (; v >= 0x80; v >>= 7)
        n++;
    return n;
}

/* The key and length of a length-delimited field whose n bytes follow. */
static void put_len_field(struct enc *e, int field, size_t n)
{
    put_varint(e, KEY(field, WIRE_LEN));
    put_varint(e, n);
}

/* An Event's wall time (now, seconds since the epoch) and step. */
static void put_event_head(struct enc *e, int64_t step)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wall = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    uint64_t bits;
    memcpy(&bits, &wall, sizeof(bits));
    put_varint(e, KEY(EVENT_WALL_TIME, WIRE_I64));
    put_le(e, bits, 8);
    put_varint(e, KEY(EVENT_STEP, WIRE_VARINT));
    put_varint(e, (uint64_t)step); /* int64: two's complement, as protobuf */
}

static struct enc event_enc(tbi_tfevents *w)
{
    return (struct enc){w->rec + HEAD_BYTES, 0, EVENT_MAX};
}

/* Frame the n bytes of Event at w->rec + HEAD_BYTES as one TFRecord and write it. */
static int write_record(tbi_tfevents *w, size_t n)
{
    struct enc head = {w->rec, 0, HEAD_BYTES}, tail = {w->rec + HEAD_BYTES + n, 0, TAIL_BYTES};
    put_le(&head, n, 8);
    put_le(&head, tbi_crc32c_mask(tbi_crc32c(w->rec, 8)), 4);
    put_le(&tail, tbi_crc32c_mask(tbi_crc32c(w->rec + HEAD_BYTES, n)), 4);
    size_t total = HEAD_BYTES + n + TAIL_BYTES;
    if (tbi_fwrite(w->rec, 1, total, w->f) != total) {
        w->failed = 1;
        return tbi_err(TB_EIO, "%s: cannot write: %s", w->path, strerror(errno));
    }
    return 0;
}

/* ---- the writer ------------------------------------------------------------------------- */

/* This machine's name as a file-name part: characters other than letters, digits, '.', '-'
 * and '_' become '_' ("localhost" when it has none). */
static void host_name(char *buf, size_t size)
{
    if (gethostname(buf, size) != 0 || !buf[0])
        snprintf(buf, size, "localhost");
    buf[size - 1] = '\0';
    for (char *c = buf; *c; c++)
        if (!(((*c | 0x20) >= 'a' && (*c | 0x20) <= 'z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '-' || *c == '_'))
            *c = '_';
}

/* Create the file exclusively: another process or writer of the same second, host and pid
 * gets the next number. */
static int create_file(tbi_tfevents *w, const char *dir)
{
    char host[256];
    host_name(host, sizeof(host));
    long long secs = (long long)time(NULL), pid = (long long)getpid();
    for (int n = 0; n < 1000; n++) {
        int rc = tbi_fmt(w->path, sizeof(w->path), "%s/events.out.tfevents.%lld.%s.%lld.%d",
                         dir, secs, host, pid, n);
        if (rc < 0)
            return rc;
        if ((w->f = tbi_fopen(w->path, "wbx")))
            return 0;
        if (errno != EEXIST)
            return tbi_err(TB_EIO, "%s: cannot create: %s", w->path, strerror(errno));
    }
    return tbi_err(TB_EIO, "%s: 1000 event files of this second and process exist already",
                   w->path);
}

int tbi_tfevents_open(tbi_tfevents **out, const char *dir)
{
    *out = NULL;
    tbi_tfevents *w = tbi_calloc(1, sizeof(*w));
    if (!w)
        return tbi_err(TB_ENOMEM, "out of memory");
    int rc = create_file(w, dir);
    if (rc == 0) {
        struct enc e = event_enc(w);
        put_event_head(&e, 0);
        put_len_field(&e, EVENT_FILE_VERSION, strlen(FILE_VERSION));
        for (const char *c = FILE_VERSION; *c; c++)
            put_byte(&e, (unsigned char)*c);
        if ((rc = write_record(w, e.n)) == 0)
            rc = tbi_tfevents_flush(w);
        if (rc < 0)
            remove(w->path);
    }
    if (rc < 0) {
        tbi_tfevents_close(&w);
        return rc;
    }
    *out = w;
    return 0;
}

int tbi_tfevents_scalar(tbi_tfevents *w, const char *tag, int64_t step, float value)
{
    size_t tag_n = strlen(tag);
    if (tag_n < 1 || tag_n > TBI_TFEVENTS_TAG_MAX)
        return tbi_err(TB_EINVAL, "%s: a tag of %zu bytes (1 to %d)", w->path, tag_n,
                       TBI_TFEVENTS_TAG_MAX);
    if (w->failed)
        return tbi_err(TB_EIO, "%s: an earlier write failed", w->path);
    size_t value_n = 1 + varint_bytes(tag_n) + tag_n + 1 + 4;
    size_t summary_n = 1 + varint_bytes(value_n) + value_n;
    uint32_t bits;
    memcpy(&bits, &value, sizeof(bits));
    struct enc e = event_enc(w);
    put_event_head(&e, step);
    put_len_field(&e, EVENT_SUMMARY, summary_n);
    put_len_field(&e, SUMMARY_VALUE, value_n);
    put_len_field(&e, VALUE_TAG, tag_n);
    for (size_t i = 0; i < tag_n; i++)
        put_byte(&e, (unsigned char)tag[i]);
    put_varint(&e, KEY(VALUE_SIMPLE, WIRE_I32));
    put_le(&e, bits, 4);
    return write_record(w, e.n);
}

int tbi_tfevents_flush(tbi_tfevents *w)
{
    if (w->failed)
        return tbi_err(TB_EIO, "%s: an earlier write failed", w->path);
    if (fflush(w->f) != 0) {
        w->failed = 1;
        return tbi_err(TB_EIO, "%s: cannot write: %s", w->path, strerror(errno));
    }
    return 0;
}

const char *tbi_tfevents_path(const tbi_tfevents *w)
{
    return w->path;
}

void tbi_tfevents_close(tbi_tfevents **p)
{
    if (!p || !*p)
        return;
    if ((*p)->f)
        fclose((*p)->f);
    free(*p);
    *p = NULL;
}
