/* src/core/strbuf.c - growable string (see strbuf.h). Tests: tests/test_core.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/internal.h"
#include "core/strbuf.h"

void tbi_sb_printf(struct tbi_sb *sb, const char *fmt, ...)
{
    va_list ap;
    if (sb->failed)
        return;
    for (;;) {
        size_t room = sb->cap - sb->len;
        va_start(ap, fmt);
        int n = vsnprintf(sb->buf ? sb->buf + sb->len : NULL, sb->buf ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            sb->failed = 1;
            return;
        }
        if (sb->buf && (size_t)n < room) {
            sb->len += (size_t)n;
            return;
        }
        size_t cap = sb->cap ? sb->cap : 256;
        while (cap - sb->len <= (size_t)n)
            cap *= 2;
        char *grown = tbi_realloc(sb->buf, cap);
        if (!grown) {
            sb->failed = 1;
            return;
        }
        sb->buf = grown;
        sb->cap = cap;
    }
}

void tbi_sb_free(struct tbi_sb *sb)
{
    free(sb->buf);
    sb->buf = NULL;
    sb->len = sb->cap = 0;
    sb->failed = 0;
}

const char *tbi_sb_str(const struct tbi_sb *sb)
{
    return sb->buf && !sb->failed ? sb->buf : "";
}
