/* src/core/internal.h - helpers shared by the library's modules, not part of the public API:
 * setting the thread's error message, logging through the installed callback, file-system
 * helpers (mkdir -p, atomic replace), and TB_ASSERT for internal invariants. */
#ifndef TUBELET_CORE_INTERNAL_H
#define TUBELET_CORE_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "tubelet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Record a message for the calling thread and return code, so callers can write
 * `return tbi_err(TB_EIO, "%s: cannot open", path);`. */
int tbi_err(int code, const char *fmt, ...) TB_PRINTF(2, 3);

/* Prefix the current message with "prefix: " (e.g. a file name added by an outer layer) and
 * return code. */
int tbi_err_prefix(int code, const char *fmt, ...) TB_PRINTF(2, 3);

void tbi_log(enum tb_log_level level, const char *fmt, ...) TB_PRINTF(2, 3);

/* Abort with file:line on a broken internal invariant; never for bad input. */
#define TB_ASSERT(cond)                                                                        \
    do {                                                                                       \
        if (!(cond))                                                                           \
            tbi_assert_fail(#cond, __FILE__, __LINE__);                                        \
    } while (0)
void tbi_assert_fail(const char *expr, const char *file, int line);

/* Evaluate expr (0 or a negative TB_E* code) and return its code when negative: for chains
 * of calls whose failure has already set the message (backend ops, mostly). */
#define TBI_TRY(expr)                                                                          \
    do {                                                                                       \
        int rc_ = (expr);                                                                      \
        if (rc_ < 0)                                                                           \
            return rc_;                                                                        \
    } while (0)

/* Create dir and its parents (mode 0777 before umask). 0 or TB_EIO with a message. */
int tbi_mkdirs(const char *dir);
/* Remove dir and everything under it (symbolic links are removed, not followed); a missing
 * dir is not an error. */
int tbi_remove_tree(const char *dir);

/* 1 if path names an existing regular file, else 0. */
int tbi_is_file(const char *path);
/* Seconds on the monotonic clock, from an arbitrary start. */
double tbi_now_s(void);
/* 1 if path names an existing directory, else 0. */
int tbi_is_dir(const char *path);

/* Write len bytes to path atomically: to "path.part", fsync, rename over path. */
int tbi_write_file_atomic(const char *path, const void *data, size_t len);

/* Read a whole file into a malloc'ed, NUL-terminated buffer (caller frees). At most max_bytes;
 * a larger file is TB_EFORMAT. */
int tbi_read_file(const char *path, char **out, size_t *out_len, size_t max_bytes);

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78; crc32c.c) of n bytes, and the CRC
 * of a longer buffer continued over n more: tbi_crc32c_extend(tbi_crc32c(a, na), b, nb) is the
 * CRC of a then b, and tbi_crc32c(d, n) is tbi_crc32c_extend(0, d, n). */
uint32_t tbi_crc32c(const void *data, size_t n);
uint32_t tbi_crc32c_extend(uint32_t crc, const void *data, size_t n);

/* Fault injection (fault.c), for tests: a call site asks tbi_fault(kind) and fails as if out
 * of memory (TBI_FAULT_ALLOC: every library allocation goes through tbi_malloc and the rest
 * below), unable to open (TBI_FAULT_OPEN) or out of disk space (TBI_FAULT_WRITE) when it
 * answers 1. tbi_fault_arm(kind, k) makes the k-th call from now fail, once (k 0: off);
 * tbi_fault_count(kind) only counts; tbi_fault_calls tells the calls since either. Threads
 * share the counters. */
enum tbi_fault { TBI_FAULT_ALLOC, TBI_FAULT_OPEN, TBI_FAULT_WRITE, TBI_FAULT_N };
void tbi_fault_arm(enum tbi_fault kind, int64_t k);
void tbi_fault_count(enum tbi_fault kind);
int64_t tbi_fault_calls(enum tbi_fault kind);
int tbi_fault(enum tbi_fault kind);

/* fopen and fwrite as fault points: an open fault fails with EMFILE, a write fault writes
 * nothing and fails with ENOSPC (the disk full). */
FILE *tbi_fopen(const char *path, const char *mode);
size_t tbi_fwrite(const void *p, size_t size, size_t n, FILE *f);

/* The library's allocations: malloc, calloc, realloc and strdup, each a fault point. */
void *tbi_malloc(size_t bytes);
void *tbi_calloc(size_t n, size_t size);
void *tbi_realloc(void *p, size_t bytes);
char *tbi_strdup(const char *s);

/* Big buffers (training state, activations, kernel scratch): from 2 MB on, 2 MB aligned with
 * huge pages requested; smaller, 64-byte aligned. free() them. tbi_calloc_big zeroes. NULL
 * when out of memory. */
void *tbi_alloc_big(size_t bytes);
void *tbi_calloc_big(size_t n, size_t size);
/* Zeroed memory whose pages are committed only as they are written: calloc's fresh mapping
 * from 2 MB on (small pages: a huge one would commit 2 MB for one written row), 16-byte
 * aligned. free() it. NULL when out of memory. */
void *tbi_alloc_zero_lazy(size_t bytes);
/* The host memory free for new allocations: MemAvailable, else all of its RAM, else
 * UINT64_MAX. */
uint64_t tbi_host_mem_available(void);

/* Parse all of s as a decimal integer in [lo, hi]: 0, or -1 (junk, overflow, out of range). */
int tbi_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* snprintf that reports truncation as TB_ERANGE naming what was being formatted. */
int tbi_fmt(char *buf, size_t size, const char *fmt, ...) TB_PRINTF(3, 4);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_CORE_INTERNAL_H */
