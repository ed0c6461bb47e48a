/* src/core/strbuf.h - a growable string for building files and JSON before writing them whole.
 * Allocation failure is sticky: later appends do nothing and tbi_sb_failed() reports it. */
#ifndef TUBELET_CORE_STRBUF_H
#define TUBELET_CORE_STRBUF_H

#include <stddef.h>

#include "tubelet/base.h"

struct tbi_sb {
    char *buf;
    size_t len, cap;
    int failed;
};

void tbi_sb_printf(struct tbi_sb *sb, const char *fmt, ...) TB_PRINTF(2, 3);
void tbi_sb_free(struct tbi_sb *sb);
/* Text so far ("" when empty or failed); owned by sb. */
const char *tbi_sb_str(const struct tbi_sb *sb);

#endif /* TUBELET_CORE_STRBUF_H */
