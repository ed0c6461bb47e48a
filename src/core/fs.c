/* src/core/fs.c - the few file-system operations the library needs: mkdir -p, rm -r, existence
 * checks, whole-file reads, and atomic writes (write a sibling, fsync, rename, fsync the
 * directory); and the monotonic clock. POSIX only.
 * Tests: tests/test_core.c. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"

int tbi_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int tbi_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) == 0 ? 0 : -1;
}

int tbi_remove_tree(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0 && errno == ENOENT)
        return 0;
    if (nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return tbi_err(TB_EIO, "%s: cannot remove: %s", dir, strerror(errno));
    return 0;
}

int tbi_mkdirs(const char *dir)
{
    char path[4096];
    size_t len = strlen(dir);
    if (len == 0 || len >= sizeof(path))
        return tbi_err(TB_EINVAL, "bad directory name '%s'", dir);
    memcpy(path, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char saved = path[i];
        path[i] = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return tbi_err(TB_EIO, "%s: cannot create directory: %s", path, strerror(errno));
        if (!tbi_is_dir(path))
            return tbi_err(TB_EIO, "%s: exists and is not a directory", path);
        path[i] = saved;
    }
    return 0;
}

/* Make a rename in path's directory durable (after a power cut, not only a crash): fsync the
 * directory. Best effort: some file systems refuse a directory's fsync, and the file itself
 * is complete either way. */
static void sync_dir(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n >= sizeof(dir))
        return;
    if (!slash || n == 0) {
        snprintf(dir, sizeof(dir), "%s", slash ? "/" : ".");
    } else {
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int tbi_write_file_atomic(const char *path, const void *data, size_t len)
{
    char tmp[4096];
    int rc = tbi_fmt(tmp, sizeof(tmp), "%s.part", path);
    if (rc < 0)
        return rc;
    int fd = tbi_fault(TBI_FAULT_OPEN) ? (errno = EMFILE, -1)
                                       : open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0)
        return tbi_err(TB_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t n = tbi_fault(TBI_FAULT_WRITE) ? (errno = ENOSPC, -1) : write(fd, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return tbi_err(TB_EIO, "%s: write failed: %s", tmp, strerror(e));
        }
        p += n;
        left -= (size_t)n;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return tbi_err(TB_EIO, "%s: cannot flush: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return tbi_err(TB_EIO, "%s: cannot rename into place: %s", path, strerror(e));
    }
    sync_dir(path);
    return 0;
}

int tb_file_write_atomic(const char *path, const void *data, size_t len)
{
    return tbi_write_file_atomic(path, data, len);
}

int tbi_read_file(const char *path, char **out, size_t *out_len, size_t max_bytes)
{
    *out = NULL;
    FILE *f = tbi_fopen(path, "rb");
    if (!f)
        return tbi_err(errno == ENOENT ? TB_ENOENT : TB_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = tbi_malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    }
    for (;;) {
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (len < cap)
            break;
        if (cap >= max_bytes) {
            free(buf);
            fclose(f);
            return tbi_err(TB_EFORMAT, "%s: larger than %zu bytes", path, max_bytes);
        }
        cap *= 2;
        char *grown = tbi_realloc(buf, cap + 1);
        if (!grown) {
            free(buf);
            fclose(f);
            return tbi_err(TB_ENOMEM, "%s: out of memory", path);
        }
        buf = grown;
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return tbi_err(TB_EIO, "%s: read error", path);
    }
    buf[len] = '\0';
    *out = buf;
    if (out_len)
        *out_len = len;
    return 0;
}

double tbi_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
