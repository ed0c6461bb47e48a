/* include/tubelet/base.h - status codes, error messages and logging shared by every module.
 * Public functions return 0 (or a count) on success and a negative TB_E* code on failure; the
 * failing call leaves a message naming the file, frame or line in a thread-local buffer
 * (tb_errmsg). The library never prints: log lines go to a callback the program installs.
 * Tests: tests/test_core.c. */
#ifndef TUBELET_BASE_H
#define TUBELET_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TB_API __attribute__((visibility("default")))
#define TB_PRINTF(fmt_idx, va_idx) __attribute__((format(printf, fmt_idx, va_idx)))
#else
#define TB_API
#define TB_PRINTF(fmt_idx, va_idx)
#endif

/* One list of status codes; the enum and tb_strerror are both generated from it. */
#define TB_STATUS_LIST(X)                                                                      \
    X(TB_OK, 0, "success")                                                                     \
    X(TB_EINVAL, -1, "invalid argument")                                                       \
    X(TB_ENOMEM, -2, "out of memory")                                                          \
    X(TB_EIO, -3, "input/output error")                                                        \
    X(TB_ENOENT, -4, "no such file or directory")                                              \
    X(TB_EFORMAT, -5, "bad file format")                                                       \
    X(TB_EDECODE, -6, "cannot demux or decode video")                                          \
    X(TB_EENCODE, -7, "cannot encode or mux video")                                            \
    X(TB_ERANGE, -8, "value out of range")                                                     \
    X(TB_EOF, -9, "end of stream")                                                             \
    X(TB_ECANCELED, -10, "canceled")                                                           \
    X(TB_EUNSUPPORTED, -11, "not supported")                                                   \
    X(TB_ETIMEDOUT, -12, "timed out")                                                          \
    X(TB_ECUDA, -13, "CUDA error")                                                             \
    X(TB_EDIST, -14, "distributed communication error")

enum tb_status {
#define TB_STATUS_ENUM(name, value, text) name = value,
    TB_STATUS_LIST(TB_STATUS_ENUM)
#undef TB_STATUS_ENUM
};

/* Static text for a status code; never NULL. */
TB_API const char *tb_strerror(int status);

/* Message of the last failure on the calling thread ("" if none): what failed and where
 * (file, frame, line). Valid until the next failing call on this thread. */
TB_API const char *tb_errmsg(void);

/* Clear the calling thread's message. */
TB_API void tb_errclear(void);

enum tb_log_level { TB_LOG_ERROR, TB_LOG_WARN, TB_LOG_INFO, TB_LOG_DEBUG };

/* Where the library's log lines go. fn may be called from any thread, so it must be
 * thread-safe; msg has no trailing newline. With no callback installed, lines are dropped. */
typedef void (*tb_log_fn)(enum tb_log_level level, const char *msg, void *user);
TB_API void tb_set_log(tb_log_fn fn, void *user);

/* Write len bytes to path atomically: into "path.part", fsync, rename over path. A failure (a
 * full disk, say) leaves path as it was and no .part behind; TB_EIO naming the file. */
TB_API int tb_file_write_atomic(const char *path, const void *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_BASE_H */
