/* src/core/error.c - status text, the thread-local error message, and the log callback.
 * The library itself never writes to stdout or stderr; tbi_assert_fail is the one exception,
 * for broken invariants (a bug in tubelet, not bad input). Tests: tests/test_core.c. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

#define ERRMSG_BYTES 1024

static _Thread_local char errmsg[ERRMSG_BYTES];

const char *tb_strerror(int status)
{
    switch (status) {
#define TB_STATUS_CASE(name, value, text)                                                      \
    case value:                                                                                \
        return text;
        TB_STATUS_LIST(TB_STATUS_CASE)
#undef TB_STATUS_CASE
    }
    return "unknown error";
}

const char *tb_errmsg(void)
{
    return errmsg;
}

void tb_errclear(void)
{
    errmsg[0] = '\0';
}

int tbi_err(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
    va_end(ap);
    return code;
}

int tbi_err_prefix(int code, const char *fmt, ...)
{
    char prefix[ERRMSG_BYTES], old[ERRMSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, errmsg, sizeof(old));
    /* Truncation is acceptable here: the message is for people. */
    int n = snprintf(errmsg, sizeof(errmsg), "%.500s: ", prefix);
    snprintf(errmsg + n, sizeof(errmsg) - (size_t)n, "%.500s", old[0] ? old : tb_strerror(code));
    return code;
}

/* The callback and its argument change together, so they live in one struct swapped
 * atomically through a pointer to one of two static slots. Installing a logger is rare
 * (program start), so the simple scheme is enough. */
struct log_sink {
    tb_log_fn fn;
    void *user;
};
static struct log_sink sinks[2];
static _Atomic(struct log_sink *) sink = NULL;

void tb_set_log(tb_log_fn fn, void *user)
{
    struct log_sink *cur = atomic_load(&sink);
    struct log_sink *next = cur == &sinks[0] ? &sinks[1] : &sinks[0];
    next->fn = fn;
    next->user = user;
    atomic_store(&sink, fn ? next : NULL);
}

void tbi_log(enum tb_log_level level, const char *fmt, ...)
{
    struct log_sink *s = atomic_load(&sink);
    char msg[ERRMSG_BYTES];
    va_list ap;
    if (!s || !s->fn)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    s->fn(level, msg, s->user);
}

void tbi_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "tubelet: internal error: %s:%d: assertion '%s' failed\n", file, line, expr);
    abort();
}

int tbi_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int tbi_fmt(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size)
        return tbi_err(TB_ERANGE, "name too long (over %zu bytes): %.64s...", size, buf);
    return 0;
}
