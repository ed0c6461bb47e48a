/* tests/fuzz/fuzz.c - the fuzz targets' shared helpers (see fuzz.h). Linux only: memfd_create
 * and /proc/self/fd. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include "core/npy.h"
#include "fuzz.h"
#include "tubelet/data.h"
#include "tubelet/metrics.h"

static int slot_fd[TBF_SLOTS] = {-1, -1, -1, -1};
static char slot_path[TBF_SLOTS][64];

void tbf_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz: contract broken: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

static void write_all(int fd, const void *data, size_t size, const char *what)
{
    const char *p = data;
    if (ftruncate(fd, 0) != 0)
        tbf_fail("%s: ftruncate: %s", what, strerror(errno));
    for (off_t at = 0; size > 0;) {
        ssize_t n = pwrite(fd, p, size, at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            tbf_fail("%s: write: %s", what, strerror(errno));
        p += n;
        at += n;
        size -= (size_t)n;
    }
}

const char *tbf_put(int slot, const void *data, size_t size)
{
    if (slot < 0 || slot >= TBF_SLOTS)
        tbf_fail("tbf_put: slot %d", slot);
    if (slot_fd[slot] < 0) {
        char name[32];
        snprintf(name, sizeof(name), "tubelet-fuzz-%d", slot);
        if ((slot_fd[slot] = memfd_create(name, MFD_CLOEXEC)) < 0)
            tbf_fail("memfd_create: %s", strerror(errno));
        snprintf(slot_path[slot], sizeof(slot_path[slot]), "/proc/self/fd/%d", slot_fd[slot]);
    }
    write_all(slot_fd[slot], data, size, slot_path[slot]);
    return slot_path[slot];
}

static char dir_path[4096];

static void remove_dir(void)
{
    DIR *d = opendir(dir_path);
    if (d) {
        char path[8192];
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir_path, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir_path);
}

const char *tbf_dir(void)
{
    if (dir_path[0])
        return dir_path;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir_path, sizeof(dir_path), "%s/tubelet-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir_path))
        tbf_fail("mkdtemp %s: %s", dir_path, strerror(errno));
    atexit(remove_dir);
    return dir_path;
}

void tbf_write(const char *name, const void *data, size_t size)
{
    char path[8192];
    snprintf(path, sizeof(path), "%s/%s", tbf_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        tbf_fail("%s: cannot write: %s", path, strerror(errno));
}

void tbf_link(const char *name, const char *target)
{
    char path[8192];
    snprintf(path, sizeof(path), "%s/%s", tbf_dir(), name);
    unlink(path);
    if (symlink(target, path) != 0)
        tbf_fail("%s -> %s: %s", path, target, strerror(errno));
}

static void read_line(enum tb_log_level level, const char *msg, void *user)
{
    (void)user;
    if ((int)level < TB_LOG_ERROR || level > TB_LOG_DEBUG)
        tbf_fail("log level %d", (int)level);
    tbf_touch(msg, strlen(msg));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tb_set_log(read_line, NULL);
    return 0;
}

/* Each counted call's successes and failures (tbf_count), for TBF_REPORT. */
static struct {
    const char *call;
    long ok, failed;
} tally[16];

static void write_report(void)
{
    FILE *f = fopen(getenv("TBF_REPORT"), "w");
    for (int i = 0; f && i < 16 && tally[i].call; i++)
        fprintf(f, "%s %ld ok %ld failed\n", tally[i].call, tally[i].ok, tally[i].failed);
    if (f)
        fclose(f);
}

void tbf_count(int rc, const char *call)
{
    static int reporting = -1;
    if (reporting < 0 && (reporting = getenv("TBF_REPORT") != NULL))
        atexit(write_report);
    for (int i = 0; reporting && i < 16; i++)
        if (!tally[i].call || !strcmp(tally[i].call, call)) {
            tally[i].call = call;
            *(rc >= 0 ? &tally[i].ok : &tally[i].failed) += 1;
            return;
        }
}

void tbf_check_error(int rc, const char *call, const char *what)
{
    tbf_count(rc, call);
    if (rc >= 0)
        return;
    const char *msg = tb_errmsg();
    if (!strcmp(tb_strerror(rc), tb_strerror(-1000)))
        tbf_fail("%s returned %d, not a TB_E* code (message '%s')", call, rc, msg);
    if (!msg[0])
        tbf_fail("%s failed (%s) without a message", call, tb_strerror(rc));
    if (what && !strstr(msg, what))
        tbf_fail("%s failed (%s) with a message that does not name %s: '%s'", call,
                 tb_strerror(rc), what, msg);
}

/* Where tbf_touch's values go, so they are computed. */
volatile uint64_t tbf_sink;

uint64_t tbf_touch(const void *data, size_t size)
{
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    tbf_sink += h;
    return h;
}

void tbf_mir_split(const struct tb_annotations **ann, const struct tb_mir_sentences **sent)
{
    static struct tb_annotations *a;
    static struct tb_mir_sentences *s;
    if (!a) {
        const struct tb_ann_opts o = {.format = TB_ANN_EPIC};
        if (tb_ann_load(&a, TBF_DATA_DIR "/mir_split.csv", &o) < 0 ||
            tb_mir_sentences_build(&s, a) < 0)
            tbf_fail("the MIR split: %s", tb_errmsg());
    }
    *ann = a;
    *sent = s;
}

void tbf_check_npy_header(const struct tbi_npy *h)
{
    int64_t n = 1;
    for (int d = 0; d >= 0 && d < h->n_dims && d < TBI_NPY_MAX_DIMS; d++)
        n *= h->shape[d];
    if (h->n_dims < 0 || h->n_dims > TBI_NPY_MAX_DIMS || n != h->n ||
        (h->item_bytes != 4 && h->item_bytes != 8))
        tbf_fail("%d dimensions of %lld elements, n = %lld, %d-byte items", h->n_dims,
                 (long long)n, (long long)h->n, h->item_bytes);
}
