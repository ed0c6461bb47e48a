/* tests/test_crash.c - crash safety and full disks (docs/ROBUSTNESS.md), on a tiny model and a
 * synthetic dataset:
 * - kill -9: `tubelet train` is SIGKILLed at 8 moments drawn from a fixed seed (at start-up,
 *   after a drawn number of logged steps and a drawn delay, and inside checkpoint writes: the
 *   process is stopped the moment last.safetensors.part appears, and killed while the .part
 *   is still there), and started again each time. Every restart resumes from the last
 *   checkpoint complete when it was killed (its step read while the process stood stopped);
 *   in the end the last logged line of every step and evaluation equals the uninterrupted
 *   run's (timings aside), every line of metrics.jsonl is whole, no .part is left and the
 *   final checkpoint is the uninterrupted run's byte for byte;
 * - damaged checkpoints: a torn and a bit-flipped last.safetensors (data and header) refused
 *   by `tubelet train` (resuming) and `tubelet eval` with messages naming the file, the file
 *   left as it was; every bit of the first 64 bytes and 300 drawn ones flipped, every cut in
 *   the first and last 64 bytes and 100 drawn ones, each refused by tb_ckpt_info; a checkpoint
 *   of version 1 (before the checksum) still evaluates, the same scores; a version 2 one
 *   without its checksum refused; the header is JSON whose metadata values are all strings
 *   and whose tensors tile the data (PyTorch's safetensors reads it; checked in python3);
 * - a full disk: a small tmpfs in a private mount namespace where one can be made (root, or
 *   a user namespace), and always RLIMIT_FSIZE (writes past it fail with EFBIG): `tubelet prep`
 *   of a video, a checkpoint of `tubelet train` and `tubelet eval --predictions` fail with
 *   the file named and the system's reason, leave nothing partial under a final name (what
 *   exists equals a run with space, an earlier checkpoint or predictions file is untouched, no
 *   .part is left), and the same command completes once there is space, equal to a run that
 *   always had it; metrics.jsonl past RLIMIT_FSIZE (a line cut in the middle) stops the run
 *   naming it, and the rerun drops the cut line and logs the uninterrupted run's losses;
 * - every write of a short tb_train run failed in turn through the write-fault hook (as
 *   ENOSPC): each stops the run with the file named, leaves whole lines, a checkpoint that
 *   verifies or none, and no .part, and the same call then completes as the run without a
 *   fault did, line for line and byte for byte. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "tb_test.h"
#include "tubelet/data.h"
#include "tubelet/rng.h"
#include "tubelet/train.h"

#define PYTHON TB_TEST_PYTHON
#define MAX_STEPS 160
#define LINE_CAP 512

static char data[4200], syn[4200], train_csv[4400], val_csv[4400];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- processes ------------------------------------------------------------------------- */

static pid_t logger = -1; /* the copier of a limited process's output, while one runs */

/* Copy the pipe fd into log to its end, in a child of our own (a file limit of the program's
 * would cut its log short too). */
static int start_logger(const char *log)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    if ((logger = fork()) == 0) {
        close(p[1]);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        char buf[4096];
        ssize_t n;
        while ((n = read(p[0], buf, sizeof(buf))) > 0)
            if (fd < 0 || write(fd, buf, (size_t)n) != n)
                _exit(1);
        _exit(0);
    }
    close(p[0]);
    return p[1];
}

/* Start the tubelet program with args (NULL-terminated, without the program), stdout and
 * stderr into log; fsize > 0 caps every file it writes at fsize bytes (RLIMIT_FSIZE, with
 * SIGXFSZ ignored, so a write past it fails with EFBIG as on a full disk). */
static pid_t spawn(const char *log, long long fsize, const char *const *args)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = tbt_tubelet();
    for (; *args && n < 63; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    fflush(NULL);
    int to_log = fsize > 0 ? start_logger(log) : -1;
    pid_t pid = fork();
    if (pid != 0) {
        if (to_log >= 0)
            close(to_log);
        return pid;
    }
    int fd = to_log >= 0 ? to_log : open(log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0)
        _exit(126);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    if (fsize > 0) {
        struct rlimit lim;
        getrlimit(RLIMIT_FSIZE, &lim);
        lim.rlim_cur = (rlim_t)fsize;
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &lim);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
}

/* Wait for pid to end within timeout_s (killed after): its exit status, 128 + the signal
 * that ended it, or -1 on a timeout. */
static int wait_end(pid_t pid, double timeout_s)
{
    double end = now_s() + timeout_s;
    int st;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (now_s() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        sleep_s(0.002);
    }
}

/* Run tubelet with args to its end: its status, its output in *out (malloc'ed). */
static int run_args(char **out, long long fsize, const char *const *args)
{
    const char *log = tbt_path("run.log");
    int rc = wait_end(spawn(log, fsize, args), 600);
    if (logger > 0) {
        waitpid(logger, NULL, 0);
        logger = -1;
    }
    *out = tbt_read(log, NULL);
    return rc;
}

/* ---- runs and their logs --------------------------------------------------------------- */

/* The arguments of a tiny training run into out for epochs epochs, into a (64 slots). */
static const char *const *train_args(const char **a, const char *out, const char *epochs)
{
    static const char *const fixed[] = {
        "train", "--dim", "32", "--depth", "2", "--heads", "2", "--patch", "16", "--tubelet",
        "2", "--frames", "4", "--size", "32", "--batch", "4", "--workers", "2", "--flip",
        "false", "--log-every", "1", "--eval-every", "5", NULL};
    int n = 0;
    for (int i = 0; fixed[i]; i++)
        a[n++] = fixed[i];
    const char *more[] = {"--data", data, "--train", train_csv, "--val", val_csv, "--epochs",
                          epochs, "--out", out, NULL};
    for (int i = 0; more[i]; i++)
        a[n++] = more[i];
    a[n] = NULL;
    return a;
}

/* The number of "step" lines of a metrics file (0 if none). */
static int count_steps(const char *metrics)
{
    char *text = tbt_read(metrics, NULL);
    int n = 0;
    for (char *p = text; p && (p = strstr(p, "{\"step\": ")); p++)
        n++;
    free(text);
    return n;
}

/* The last line of every step (lines[step], without its timings: up to "clips_per_s") and of
 * every evaluation (evals[epoch], whole) of run's metrics.jsonl; the number of steps. Every
 * line must be whole: a '{' ... '}' line. */
static int read_lines(const char *run, char (*lines)[LINE_CAP], char (*evals)[LINE_CAP])
{
    char path[4400];
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run);
    char *text = tbt_read(path, NULL);
    int n = 0, bad = 0;
    for (int i = 0; i < MAX_STEPS; i++)
        lines[i][0] = evals[i][0] = '\0';
    for (char *ln = text, *next; ln && *ln; ln = next) {
        char *nl = strchr(ln, '\n');
        next = nl ? nl + 1 : NULL;
        size_t len = nl ? (size_t)(nl - ln) : strlen(ln);
        if (!nl || len < 2 || ln[0] != '{' || ln[len - 1] != '}') {
            bad++;
            continue;
        }
        int k = atoi(ln + 9);
        if (!strncmp(ln, "{\"step\": ", 9) && k >= 1 && k < MAX_STEPS) {
            char *t = strstr(ln, ", \"clips_per_s\"");
            size_t keep = t && t < ln + len ? (size_t)(t - ln) : len;
            snprintf(lines[k], LINE_CAP, "%.*s", (int)keep, ln);
            n = k > n ? k : n;
        } else if (!strncmp(ln, "{\"eval_epoch\": ", 15) && (k = atoi(ln + 15)) >= 0 &&
                   k < MAX_STEPS) {
            snprintf(evals[k], LINE_CAP, "%.*s", (int)len, ln);
        } else if (strncmp(ln, "{\"start_step\": ", 15)) { /* a start's line: skipped */
            bad++;
        }
    }
    CHECK_MSG(text && bad == 0, "%s: %d lines not whole or not known", path, bad);
    free(text);
    return n;
}

/* Every step's and evaluation's last line of run equal to ref's. */
static void same_lines(const char *ref, const char *run, const char *what)
{
    static char la[MAX_STEPS][LINE_CAP], lb[MAX_STEPS][LINE_CAP];
    static char ea[MAX_STEPS][LINE_CAP], eb[MAX_STEPS][LINE_CAP];
    int na = read_lines(ref, la, ea), nb = read_lines(run, lb, eb), n_eval = 0;
    CHECK_MSG(na > 4 && na == nb, "%s: %d steps uninterrupted, %d here", what, na, nb);
    for (int i = 1; i < MAX_STEPS; i++) {
        CHECK_MSG(!strcmp(la[i], lb[i]), "%s: step %d:\n  uninterrupted %s\n  here          %s",
                  what, i, la[i], lb[i]);
        CHECK_MSG(!strcmp(ea[i], eb[i]), "%s: evaluation %d:\n  uninterrupted %s\n  here      "
                  "    %s", what, i, ea[i], eb[i]);
        n_eval += ea[i][0] != '\0';
    }
    CHECK_MSG(n_eval > 0, "%s: no evaluation logged", what);
}

/* Two files hold the same bytes. */
static int same_file(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = tbt_read(a, &na), *y = tbt_read(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

/* Where a checkpoint stands in training (it must read and verify); step -1 without one. */
struct at {
    long epoch, step;
};

static long meta_long(const struct tb_st_file *f, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":\"", key);
    const char *s = f && f->metadata ? strstr(f->metadata, pat) : NULL;
    return s ? atol(s + strlen(pat)) : -2;
}

/* path = RUN/last.safetensors; path itself. */
static const char *ck_of(char *path, size_t size, const char *run)
{
    snprintf(path, size, "%s/last.safetensors", run);
    return path;
}

static struct at ckpt_at(const char *path)
{
    struct at at = {-1, -1};
    if (!tbt_exists(path))
        return at;
    struct tb_st_file *f = NULL;
    int rc = tb_st_read(&f, path);
    CHECK_MSG(rc == 0 && f && f->checksummed, "%s: %s", path, tb_errmsg());
    at.epoch = meta_long(f, "epoch");
    at.step = meta_long(f, "step");
    tb_st_free(&f);
    return at;
}

/* Names ending in ".part" under dir (recursively), counted. */
static int count_parts(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[4400];
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' && (len == 1 || (len == 2 && e->d_name[1] == '.')))
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        n += len > 5 && !strcmp(e->d_name + len - 5, ".part");
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            n += count_parts(p);
    }
    if (d)
        closedir(d);
    return n;
}

/* ---- kill -9 --------------------------------------------------------------------------- */

enum kill_kind { KILL_START, KILL_STEPS, KILL_CKPT };

/* Stop pid (SIGSTOP) and wait until it stands: 0, or -1 if it ended first (*status set). */
static int stop(pid_t pid, int *status)
{
    kill(pid, SIGSTOP);
    int st;
    if (waitpid(pid, &st, WUNTRACED) != pid || !WIFSTOPPED(st)) {
        *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return -1;
    }
    return 0;
}

/* Whether pid ended (its status in *status). */
static int ended(pid_t pid, int *status)
{
    int st;
    if (waitpid(pid, &st, WNOHANG) != pid)
        return 0;
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return 1;
}

/* What a sliced run (below) waits for: n_steps logged step lines, then `extra` more slices;
 * or the .part of a checkpoint write standing, in a write after the first `skip` ones. */
struct moment {
    const char *metrics, *part;
    int n_steps, extra, skip, ino, creates;
};

/* Creations of last.safetensors.part seen on the watch m->ino, counted into m->creates. */
static void count_creates(struct moment *m)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t len;
    while ((len = read(m->ino, buf, sizeof(buf))) > 0)
        for (char *p = buf; p < buf + len;) {
            struct inotify_event *ev = (struct inotify_event *)p;
            m->creates += ev->len && !strcmp(ev->name, "last.safetensors.part");
            p += sizeof(*ev) + ev->len;
        }
}

/* Whether the stopped process stands at m's moment. */
static int at_moment(struct moment *m)
{
    if (m->ino >= 0) {
        count_creates(m);
        return m->creates > m->skip && tbt_exists(m->part);
    }
    if (m->n_steps > 0 && count_steps(m->metrics) < m->n_steps)
        return 0;
    return m->extra-- <= 0;
}

/* Run pid in slices of about a fifth of a millisecond, stopped between them, until it stands
 * stopped at m's moment (0), ends (1, *status) or the deadline passes (-1, still stopped). The
 * run moves only a slice between looks, so a fast machine gets the same chances as a slow
 * one: a kill lands inside a checkpoint write that takes a millisecond. */
static int run_sliced(pid_t pid, struct moment *m, double deadline, int *status)
{
    if (stop(pid, status))
        return 1;
    while (!at_moment(m)) {
        if (now_s() > deadline)
            return -1;
        kill(pid, SIGCONT);
        sleep_s(0.0002);
        if (stop(pid, status))
            return 1;
    }
    return 0;
}

/* The moment of stop_at (below) for kind. */
static int stop_at_kind(pid_t pid, enum kill_kind kind, tb_rng *r, const char *run,
                        const char *metrics, double deadline, int *status)
{
    char part[4400];
    snprintf(part, sizeof(part), "%s/last.safetensors.part", run);
    struct moment m = {metrics, part, 0, 0, 0, -1, 0};
    if (kind == KILL_START)
        m.extra = (int)tb_rng_below(r, 200);
    if (kind == KILL_STEPS) {
        m.n_steps = count_steps(metrics) + 1 + (int)tb_rng_below(r, 6);
        m.extra = (int)tb_rng_below(r, 5);
    }
    if (kind == KILL_CKPT) {
        m.skip = (int)tb_rng_below(r, 2);
        m.ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        CHECK_MSG(m.ino >= 0 && inotify_add_watch(m.ino, run, IN_CREATE) >= 0, "inotify: %s",
                  strerror(errno));
    }
    int rc = run_sliced(pid, &m, deadline, status);
    if (m.ino >= 0)
        close(m.ino);
    return rc;
}

/* Bring pid to a stop at the moment drawn for kind (parameters from r): after a delay; after
 * more logged steps and a delay; the moment a checkpoint write's .part appears, skipping
 * some, and only while the .part is still there (else on to the next). 0 stopped; 1 it ended
 * first (*status); -1 timed out. *in_write: a .part stood there when it stopped. */
static int stop_at(pid_t pid, enum kill_kind kind, tb_rng *r, const char *run, int *status,
                   int *in_write)
{
    char metrics[4400], part[4400];
    snprintf(metrics, sizeof(metrics), "%s/metrics.jsonl", run);
    snprintf(part, sizeof(part), "%s/last.safetensors.part", run);
    double deadline = now_s() + 300;
    int rc = stop_at_kind(pid, kind, r, run, metrics, deadline, status);
    *in_write = rc == 0 && tbt_exists(part);
    return rc;
}

/* The log of a start after a kill with the last complete checkpoint at `at` (step -1: none)
 * resumes from there, or says nothing of resuming when there was none; a start killed before
 * it said anything proves nothing either way. */
static void check_resume(const char *log, const char *run, struct at at, int k)
{
    char *text = tbt_read(log, NULL), want[4600];
    const char *res = text ? strstr(text, "resuming from") : NULL;
    int progressed = text && strstr(text, " step ");
    if (at.step < 0) {
        CHECK_MSG(!res, "start %d: resumed with no checkpoint: %.300s", k, res);
    } else if (res || progressed) {
        snprintf(want, sizeof(want), "resuming from %s/last.safetensors: %ld steps done, epoch "
                 "%ld batch 1 next", run, at.step, at.epoch + 1);
        CHECK_MSG(res && !strncmp(res, want, strlen(want)), "start %d: wanted '%s', got "
                  "'%.200s'", k, want, res ? res : "(nothing)");
    }
    free(text);
}

static void test_kill9(const char *d, char *ref_out, size_t ref_size)
{
    tbt_case = "kill -9: the uninterrupted run";
    char ref[4300], run[4300], log[4400], ck[4400], ck_ref[4400];
    const char *a[64];
    snprintf(ref, sizeof(ref), "%s/k_ref", d);
    snprintf(run, sizeof(run), "%s/k_run", d);
    snprintf(ref_out, ref_size, "%s", ref);
    char *out = NULL;
    int rc = run_args(&out, 0, train_args(a, ref, "24"));
    CHECK_MSG(rc == 0, "%s", out);
    free(out);

    tbt_case = "kill -9: killed and restarted";
    static const enum kill_kind plan[] = {KILL_START, KILL_STEPS, KILL_CKPT, KILL_STEPS,
                                          KILL_CKPT, KILL_STEPS, KILL_CKPT, KILL_STEPS};
    const int n_plan = (int)(sizeof(plan) / sizeof(plan[0]));
    tb_rng r;
    tb_rng_init_for(&r, 2024, TB_RNG_TEST, 9, 0);
    mkdir(run, 0777);
    snprintf(ck, sizeof(ck), "%s/last.safetensors", run);
    struct at at = {-1, -1}; /* the last complete checkpoint at the last kill */
    int kills = 0, in_writes = 0, status = 0, finished = 0;
    for (int k = 0; k <= n_plan && !finished; k++) {
        snprintf(log, sizeof(log), "%s/k_run_%d.log", d, k);
        struct at from = at;
        pid_t pid = spawn(log, 0, train_args(a, run, "24"));
        if (k == n_plan) {
            status = wait_end(pid, 600);
            finished = 1;
        } else {
            int in_write = 0, s = stop_at(pid, plan[k], &r, run, &status, &in_write);
            if (s == 0) {
                at = ckpt_at(ck);
                kill(pid, SIGKILL);
                int st = wait_end(pid, 60);
                CHECK_MSG(st == 128 + SIGKILL, "kill %d: status %d", k, st);
                kills++;
                in_writes += in_write;
            } else {
                CHECK_MSG(s == 1, "kill %d: its moment never came", k);
                if (s < 0) {
                    kill(pid, SIGKILL);
                    wait_end(pid, 60);
                }
                finished = 1;
            }
        }
        check_resume(log, run, from, k);
    }
    CHECK_MSG(finished && status == 0, "the last run ended with status %d", status);
    CHECK_MSG(kills == n_plan, "%d of %d kills happened before the run was done", kills, n_plan);
    CHECK_MSG(in_writes >= 3, "only %d kills landed inside a checkpoint write", in_writes);
    same_lines(ref, run, "kill -9");
    snprintf(ck_ref, sizeof(ck_ref), "%s/last.safetensors", ref);
    CHECK_MSG(same_file(ck_ref, ck), "the final checkpoints differ");
    CHECK_EQ(count_parts(run), 0);
    fprintf(stderr, "kill -9: %d kills, %d inside a checkpoint write\n", kills, in_writes);
}

/* ---- damaged checkpoints --------------------------------------------------------------- */

static uint64_t le64(const char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | (uint8_t)p[i];
    return v;
}

static void write_bytes(const char *path, const char *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f && fwrite(p, 1, n, f) == n && fclose(f) == 0, "%s: cannot write", path);
}

/* The scores of an eval line (from "items" on): what two checkpoints of one model share. */
static const char *scores(const char *out)
{
    const char *s = out ? strstr(out, "\"items\": ") : NULL;
    return s ? s : "(no scores)";
}

static void test_damaged(const char *d, const char *ref)
{
    char src[4400], dir[4400], path[4500];
    const char *a[64];
    snprintf(src, sizeof(src), "%s/last.safetensors", ref);
    size_t len = 0;
    char *orig = tbt_read(src, &len), *buf = malloc(len + 1), *out = NULL;
    if (!orig || len < 64 || !buf) {
        CHECK_MSG(0, "%s: no checkpoint to damage", src);
        free(orig);
        free(buf);
        return;
    }
    size_t hlen = (size_t)le64(orig), data_len = len - 8 - hlen;
    const char *eval_args[] = {"eval", "--ckpt", path, "--data", data, "--val", val_csv,
                               "--batch", "4", NULL};
    snprintf(path, sizeof(path), "%s", src);
    int rc = run_args(&out, 0, eval_args);
    CHECK_MSG(rc == 0, "eval of the good checkpoint: %s", out);
    char good[1024];
    snprintf(good, sizeof(good), "%s", scores(out));
    free(out);

    tbt_case = "damaged checkpoints: tubelet train and eval refuse them";
    tb_rng r;
    tb_rng_init_for(&r, 2024, TB_RNG_TEST, 10, 0);
    const char *step_at = memmem(orig + 8, hlen, "\"step\":\"", 8);
    struct {
        const char *what, *msg;
        size_t cut, flip;
    } cases[] = {
        {"torn in the data", "truncated: tensor '", 8 + hlen + (size_t)tb_rng_below(&r, data_len),
         0},
        {"torn in the header", "truncated or not a safetensors file", 8 +
         (size_t)tb_rng_below(&r, hlen), 0},
        {"a bit flipped in the data", "damaged: its bytes do not match the checksum", len,
         8 + hlen + (size_t)tb_rng_below(&r, data_len)},
        {"a bit flipped in the step", "damaged: its bytes do not match the checksum", len,
         step_at ? (size_t)(step_at - orig) + 8 : 0},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        snprintf(dir, sizeof(dir), "%s/damaged_%zu", d, c);
        snprintf(path, sizeof(path), "%s/last.safetensors", dir);
        mkdir(dir, 0777);
        memcpy(buf, orig, len);
        if (cases[c].flip)
            buf[cases[c].flip] ^= (char)(1 << tb_rng_below(&r, 8));
        write_bytes(path, buf, cases[c].cut);
        char want[4700];
        snprintf(want, sizeof(want), "%s: %s", path, cases[c].msg);
        rc = run_args(&out, 0, train_args(a, dir, "25"));
        CHECK_MSG(rc == 1 && out && strstr(out, want), "%s: train (%d): wanted '%s' in: %.400s",
                  cases[c].what, rc, want, out);
        free(out);
        rc = run_args(&out, 0, eval_args);
        CHECK_MSG(rc == 1 && out && strstr(out, want), "%s: eval (%d): wanted '%s' in: %.400s",
                  cases[c].what, rc, want, out);
        free(out);
        size_t now = 0;
        char *left = tbt_read(path, &now);
        CHECK_MSG(left && now == cases[c].cut && !memcmp(left, buf, now), "%s: the file was "
                  "changed", cases[c].what);
        free(left);
    }

    /* Every single bit of the size, the checksum's place and its digits, and drawn ones
     * anywhere; every cut near either end and drawn ones: each refused. */
    tbt_case = "damaged checkpoints: flips and cuts swept";
    snprintf(path, sizeof(path), "%s/swept.safetensors", d);
    int tried = 0, passed = 0;
    for (int i = 0; i < 512 + 300 + 128 + 100; i++) {
        size_t cut = len;
        memcpy(buf, orig, len);
        if (i < 512)
            buf[i / 8] ^= (char)(1 << (i % 8));
        else if (i < 812)
            buf[tb_rng_below(&r, len)] ^= (char)(1 << tb_rng_below(&r, 8));
        else if (i < 940)
            cut = i - 812 < 64 ? (size_t)(i - 812) : len - 128 + (size_t)(i - 812);
        else
            cut = (size_t)tb_rng_below(&r, len);
        write_bytes(path, buf, cut);
        struct tb_ckpt_info info;
        tried++;
        if (tb_ckpt_info(path, &info) == 0 && passed++ < 5)
            TBT_FAIL("case %d (cut at %zu of %zu) passed as a checkpoint", i, cut, len);
    }
    CHECK_MSG(passed == 0 && tried == 1040, "%d of %d damaged files passed", passed, tried);

    /* Before the checksum: version 1 and no "crc32c" (the header keeps its length, padded
     * with spaces) evaluates the same; version 2 without one is damaged. */
    tbt_case = "damaged checkpoints: version 1, and 2 without its checksum";
    const size_t pre = strlen("{\"__metadata__\":{");
    memcpy(buf, orig, len);
    char *h = buf + 8, *v = memmem(h, hlen, "\"version\":\"2\"", 13);
    CHECK(!memcmp(h + pre, "\"crc32c\":\"", 10) && h[pre + 19] == ',' && v);
    if (v) {
        memmove(h + pre, h + pre + 20, hlen - pre - 20);
        memset(h + hlen - 20, ' ', 20);
        snprintf(path, sizeof(path), "%s/v2_unchecked.safetensors", d);
        write_bytes(path, buf, len);
        rc = run_args(&out, 0, eval_args);
        CHECK_MSG(rc == 1 && out && strstr(out, "damaged: a version 2 checkpoint without its "
                                                "checksum"), "%s", out);
        free(out);
        v = memmem(h, hlen, "\"version\":\"2\"", 13);
        v[11] = '1';
        snprintf(path, sizeof(path), "%s/v1.safetensors", d);
        write_bytes(path, buf, len);
        struct tb_st_file *f = NULL;
        CHECK_EQ(tb_st_read(&f, path), 0);
        CHECK(f && !f->checksummed && f->metadata && !strstr(f->metadata, "crc32c"));
        tb_st_free(&f);
        rc = run_args(&out, 0, eval_args);
        CHECK_MSG(rc == 0 && !strcmp(scores(out), good), "version 1: %s\nversion 2: %s", out,
                  good);
        free(out);
    }

    /* What PyTorch's safetensors needs: JSON, metadata of strings, tensors tiling the data. */
    tbt_case = "damaged checkpoints: the header as PyTorch reads it";
    if (access(PYTHON, X_OK) == 0) {
        rc = tbt_run(&out, 60, PYTHON " - %s <<'EOF'\n"
                     "import json, struct, sys\n"
                     "b = open(sys.argv[1], 'rb').read()\n"
                     "n = struct.unpack('<Q', b[:8])[0]\n"
                     "h = json.loads(b[8:8 + n])\n"
                     "m = h.pop('__metadata__')\n"
                     "assert all(type(k) is str and type(v) is str for k, v in m.items()), m\n"
                     "assert list(m)[0] == 'crc32c' and len(m['crc32c']) == 8, m\n"
                     "pos = 0\n"
                     "for s, e in sorted(tuple(t['data_offsets']) for t in h.values()):\n"
                     "    assert s == pos, (s, pos)\n"
                     "    pos = e\n"
                     "assert pos == len(b) - 8 - n and all(t['dtype'] == 'F32' for t in "
                     "h.values())\n"
                     "print('header ok', len(m), len(h))\n"
                     "EOF", src);
        CHECK_MSG(rc == 0 && out && strstr(out, "header ok"), "%s", out);
        free(out);
    } else {
        fprintf(stderr, "no %s: the header's JSON not checked there\n", PYTHON);
    }
    free(orig);
    free(buf);
}

/* ---- a full disk ----------------------------------------------------------------------- */

#define TMPFS_SIZE "8m"

static char tmpfs_dir[4300]; /* "" when no tmpfs could be made */

static int write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    size_t n = strlen(text);
    int ok = fd >= 0 && write(fd, text, n) == (ssize_t)n;
    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

/* A tmpfs at dir seen by this process and its children only: a private mount namespace
 * (as root, or as root of a new user namespace). Before any thread exists. 0 or -1. */
static int make_tmpfs(const char *dir)
{
    uid_t uid = getuid();
    gid_t gid = getgid();
    char map[64];
    if (unshare(CLONE_NEWNS) != 0) {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
            return -1;
        snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
        if (write_text("/proc/self/setgroups", "deny") < 0 ||
            write_text("/proc/self/uid_map", map) < 0)
            return -1;
        snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
        if (write_text("/proc/self/gid_map", map) < 0)
            return -1;
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 || mkdir(dir, 0777) != 0 ||
        mount("tubelet-test", dir, "tmpfs", 0, "size=" TMPFS_SIZE) != 0)
        return -1;
    return 0;
}

static void unmount_tmpfs(void)
{
    if (tmpfs_dir[0])
        umount2(tmpfs_dir, MNT_DETACH);
}

/* Fill the tmpfs until at most `left` bytes are free. */
static void fill_tmpfs(size_t left)
{
    char path[4400];
    snprintf(path, sizeof(path), "%s/filler", tmpfs_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0666);
    static char zeros[1 << 16];
    for (;;) {
        struct statvfs v;
        if (fd < 0 || statvfs(tmpfs_dir, &v) != 0)
            break;
        size_t avail = (size_t)v.f_bavail * v.f_frsize;
        if (avail <= left)
            break;
        size_t n = avail - left < sizeof(zeros) ? avail - left : sizeof(zeros);
        if (write(fd, zeros, n) <= 0)
            break;
    }
    if (fd >= 0)
        close(fd);
}

/* Where a case of a full disk writes: the tmpfs, or a plain directory under RLIMIT_FSIZE. */
struct disk {
    int tmpfs;
    char base[4300];
    const char *reason; /* the system's words for it */
};

/* Run args with `room` bytes of space (tmpfs: that much free; else no file past it), then
 * give the space back: the status, the output in *out. */
static int run_full(char **out, const struct disk *dk, size_t room, const char *const *args)
{
    if (!dk->tmpfs)
        return run_args(out, (long long)room, args);
    fill_tmpfs(room);
    int rc = run_args(out, 0, args);
    char path[4400];
    snprintf(path, sizeof(path), "%s/filler", tmpfs_dir);
    unlink(path);
    return rc;
}

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Every regular file under dir but .lock equals the one of its name under ref (both ways
 * when `all`: every file of ref is in dir). The number compared. */
static int same_tree(const char *dir, const char *ref, int all, const char *what)
{
    const char *from = all ? ref : dir;
    DIR *dd = opendir(from);
    int n = 0;
    for (struct dirent *e; dd && (e = readdir(dd));) {
        char a[4400], b[4400];
        if (e->d_name[0] == '.')
            continue;
        snprintf(a, sizeof(a), "%s/%s", dir, e->d_name);
        snprintf(b, sizeof(b), "%s/%s", ref, e->d_name);
        struct stat st;
        if (stat(all ? b : a, &st) == 0 && S_ISDIR(st.st_mode)) {
            n += same_tree(a, b, all, what);
            continue;
        }
        CHECK_MSG(same_file(a, b), "%s: %s is not the complete %s", what, a, b);
        n++;
    }
    if (dd)
        closedir(dd);
    return n;
}

/* A run of 5 epochs into run stopped by Ctrl-C once `lines` steps are logged: the start of
 * the uninterrupted run's schedule, with a checkpoint inside an epoch. */
static void start_run(const char *run, int lines)
{
    char metrics[4500], *out = NULL;
    const char *a[64];
    snprintf(metrics, sizeof(metrics), "%s/metrics.jsonl", run);
    const char *log = tbt_path("start.log");
    pid_t pid = spawn(log, 0, train_args(a, run, "5"));
    double end = now_s() + 300;
    int status = 0;
    while (count_steps(metrics) < lines && !ended(pid, &status) && now_s() < end)
        sleep_s(0.0005);
    kill(pid, SIGINT);
    status = wait_end(pid, 300);
    out = tbt_read(log, NULL);
    CHECK_MSG(status == 1 && out && strstr(out, "run the same command to resume"), "Ctrl-C "
              "after %d steps (%d): %s", lines, status, out);
    free(out);
}

/* prep of a video: chunks that fit are whole, the one that did not is not there, and the
 * rerun completes the same files as a prep that always had space. */
static void disk_prep(const struct disk *dk, const char *video, const char *ref)
{
    char out_dir[4400], ref_chunk[4600], ref_last[4600], *out = NULL;
    snprintf(out_dir, sizeof(out_dir), "%s/prep", dk->base);
    snprintf(ref_chunk, sizeof(ref_chunk), "%s/P01_01.mp4/0.mp4", ref);
    snprintf(ref_last, sizeof(ref_last), "%s/P01_01.mp4/0.idx", ref);
    const char *args[] = {"prep", video, "--out", out_dir, "--short-side", "48", "--preset",
                          "veryfast", NULL};
    /* tmpfs: room for the first chunk and its index, not the rest; a file limit: less than
     * the first chunk */
    long long first = file_size(ref_chunk), room = dk->tmpfs ? first + 12288 : first / 2;
    CHECK(first > 0 && file_size(ref_last) > 0);
    int rc = run_full(&out, dk, (size_t)room, args);
    char want[4500];
    snprintf(want, sizeof(want), "%s/P01_01.mp4/", out_dir);
    CHECK_MSG(rc == 1 && out && strstr(out, want) && strstr(out, dk->reason), "prep with %lld "
              "bytes (%d): %s", room, rc, out);
    free(out);
    CHECK_EQ(count_parts(out_dir), 0);
    int kept = same_tree(out_dir, ref, 0, "prep on a full disk");
    if (dk->tmpfs)
        CHECK_MSG(kept >= 2, "only %d finished files kept: the case proves little", kept);
    rc = run_args(&out, 0, args);
    CHECK_MSG(rc == 0, "prep with space again: %s", out);
    free(out);
    CHECK_MSG(same_tree(out_dir, ref, 1, "prep after space was freed") >= 5, "too few files");
}

/* A checkpoint that does not fit: the run stops naming it, the last one stays, no .part; then
 * the run completes as one that always had space (ref). */
static void disk_ckpt(const struct disk *dk, const char *ref)
{
    char run[4400], ck[4500], ck_ref[4500], *out = NULL;
    const char *a[64];
    snprintf(run, sizeof(run), "%s/run", dk->base);
    snprintf(ck, sizeof(ck), "%s/last.safetensors", run);
    snprintf(ck_ref, sizeof(ck_ref), "%s/last.safetensors", ref);
    start_run(run, 2);
    size_t n_old = 0;
    char *old = tbt_read(ck, &n_old);
    struct at at = ckpt_at(ck);
    CHECK_MSG(at.step > 0 && at.step < 16, "Ctrl-C's checkpoint is at step %ld", at.step);
    int rc = run_full(&out, dk, n_old / 2, train_args(a, run, "5"));
    char want[4700];
    snprintf(want, sizeof(want), "%s.part: write failed: %s", ck, dk->reason);
    CHECK_MSG(rc == 1 && out && strstr(out, want), "a checkpoint on a full disk (%d): wanted "
              "'%s' in: %s", rc, want, out);
    free(out);
    size_t n_now = 0;
    char *now = tbt_read(ck, &n_now);
    CHECK_MSG(old && now && n_old == n_now && !memcmp(old, now, n_now), "the last checkpoint "
              "changed");
    CHECK_EQ(ckpt_at(ck).step, at.step);
    CHECK_EQ(count_parts(run), 0);
    free(old);
    free(now);
    rc = run_args(&out, 0, train_args(a, run, "5"));
    CHECK_MSG(rc == 0 && out && strstr(out, "resuming from"), "%s", out);
    free(out);
    CHECK_MSG(same_file(ck, ck_ref), "the checkpoint after space was freed differs");
    same_lines(ref, run, "a checkpoint on a full disk");
}

/* eval --predictions on a full disk: an earlier file stays as it was, then the rerun writes
 * the same file as with space. */
static void disk_predictions(const struct disk *dk, const char *ckpt, const char *ref_pred)
{
    char pred[4400], part[4500], *out = NULL;
    snprintf(pred, sizeof(pred), "%s/pred.csv", dk->base);
    snprintf(part, sizeof(part), "%s.part", pred);
    CHECK_EQ(write_text(pred, "an earlier file\n"), 0);
    const char *args[] = {"eval", "--ckpt", ckpt, "--data", data, "--val", val_csv, "--batch",
                          "4", "--predictions", pred, NULL};
    int rc = run_full(&out, dk, dk->tmpfs ? 0 : 8, args);
    CHECK_MSG(rc == 1 && out && strstr(out, pred) && strstr(out, dk->reason), "predictions on "
              "a full disk (%d): %s", rc, out);
    free(out);
    char *left = tbt_read(pred, NULL);
    CHECK_MSG(left && !strcmp(left, "an earlier file\n"), "the earlier file became: %s", left);
    free(left);
    CHECK(!tbt_exists(part));
    rc = run_args(&out, 0, args);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    CHECK_MSG(same_file(pred, ref_pred), "the predictions after space was freed differ");
}

/* metrics.jsonl past the file limit in the middle of a line: the run stops naming it before
 * the epoch's checkpoint; the rerun drops the cut line and logs what an uninterrupted run
 * did. */
static void disk_metrics(const struct disk *dk, const char *ref)
{
    char run[4400], ck[4500], ck_ref[4500], mpath[4500], cfg[4500], *out = NULL;
    const char *a[64];
    snprintf(ck_ref, sizeof(ck_ref), "%s/last.safetensors", ref);
    /* 16 lines: metrics.jsonl then outgrows config.txt (2427 bytes: each setting's source
     * noted, the unread ones listed) whatever its numbers' widths (14 gave 2318 once; 12 gave
     * 1570 against an older 1471 + 100 under ASan). The case needs Ctrl-C to land
     * mid-epoch, so that the resumed run's first write is a step's line: one that lands after
     * an epoch's last batch (a busy machine lets the run go on a few steps) leaves the
     * epoch's checkpoint to be written first. Then the run is started again, in a new
     * directory (at most 4 times). */
    long per_epoch = ckpt_at(ck_ref).step / 5;
    struct at at = {-1, -1};
    for (int k = 0; k < 4 && (k == 0 || (per_epoch > 0 && at.step % per_epoch == 0)); k++) {
        snprintf(run, sizeof(run), "%s/runm%d", dk->base, k);
        start_run(run, 16);
        at = ckpt_at(ck_of(ck, sizeof(ck), run));
    }
    snprintf(mpath, sizeof(mpath), "%s/metrics.jsonl", run);
    snprintf(cfg, sizeof(cfg), "%s/config.txt", run);
    long long m = file_size(mpath);
    CHECK_MSG(per_epoch > 0 && at.step % per_epoch, "Ctrl-C after an epoch's last batch 4 "
              "times (step %ld)", at.step);
    CHECK_MSG(at.step >= 16 && at.step < 20, "Ctrl-C's checkpoint is at step %ld", at.step);
    CHECK_MSG(m > file_size(cfg) + 100, "metrics.jsonl (%lld bytes) must outgrow config.txt "
              "(%lld) for the case", m, file_size(cfg));
    /* The resumed run writes its start line first (its rows, at its step), whole: its length
     * is the first start's (at step 0) with the step's other digits */
    char *text = tbt_read(mpath, NULL), *nl = text ? strchr(text, '\n') : NULL;
    char digits[32];
    long long start = nl && !strncmp(text, "{\"start_step\": 0,", 16) ? nl + 1 - text : -1;
    CHECK_MSG(start > 0, "%s does not begin with a start line", mpath);
    start += snprintf(digits, sizeof(digits), "%ld", at.step) - 1;
    free(text);
    m += start;
    int rc = run_full(&out, dk, (size_t)m + 40, train_args(a, run, "5"));
    char want[4700];
    snprintf(want, sizeof(want), "%s: cannot write the line of step %ld: %s", mpath,
             at.step + 1, dk->reason);
    CHECK_MSG(rc == 1 && out && strstr(out, want), "metrics on a full disk (%d): wanted '%s' "
              "in: %s", rc, want, out);
    free(out);
    CHECK_EQ(file_size(mpath), m + 40);
    CHECK_EQ(ckpt_at(ck).step, at.step);
    rc = run_args(&out, 0, train_args(a, run, "5"));
    CHECK_MSG(rc == 0 && out && strstr(out, "dropped an unfinished last line (40 bytes)"), "%s",
              out);
    free(out);
    same_lines(ref, run, "metrics on a full disk");
    CHECK_MSG(same_file(ck, ck_ref), "the checkpoint after the metrics failure differs");
}

/* tb_train in this process, every write of it failing in turn (tbi_fault's TBI_FAULT_WRITE:
 * as a full disk), each followed by the same call with the disk back. */
static void test_write_faults(const char *d)
{
    tbt_case = "write faults: every write of a run";
    struct tb_annotations *ann = NULL, *val = NULL;
    struct tb_ann_opts ao = {.format = TB_ANN_EPIC};
    CHECK_EQ(tb_ann_load(&ann, train_csv, &ao), 0);
    CHECK_EQ(tb_ann_load(&val, val_csv, &ao), 0);
    if (!ann || !val) {
        tb_ann_free(&ann);
        return;
    }
    char ref[4300], run[4300], ck[4400], ck_ref[4400];
    struct tb_train_opts o = {
        .model = {.dim = 32, .depth = 2, .heads = 2, .patch = 16, .tubelet = 2, .frames = 4,
                  .height = 32, .width = 32, .classes = 8},
        .train_ann = ann, .val_ann = val, .val_views = 1, .val_crops = 1,
        .label = TB_LABEL_VERB, .norm = TB_NORM_OPENAI,
        .data = {.root = data, .ext = "mp4", .sampler = TB_SAMPLE_SEGMENTS, .stride = 4,
                 .crop = {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = 0.08, .scale_max = 1,
                          .ratio_min = 3.0 / 4, .ratio_max = 4.0 / 3}},
        .batch = 4, .workers = 2, .prefetch = 2, .epochs = 2, .lr = 1e-3, .min_lr = 1e-5,
        .warmup_epochs = 1, .weight_decay = 0.05, .clip_grad = 1, .beta1 = 0.9,
        .beta2 = 0.999, .adam_eps = 1e-8, .optimizer = TB_OPT_ADAMW, .seed = 5,
        .log_every = 2,
    };
    snprintf(ref, sizeof(ref), "%s/wf_ref", d);
    o.out_dir = ref;
    tbi_fault_count(TBI_FAULT_WRITE);
    int rc = tb_train(&o, NULL);
    int64_t n = tbi_fault_calls(TBI_FAULT_WRITE);
    tbi_fault_arm(TBI_FAULT_WRITE, 0);
    CHECK_MSG(rc == 0, "%s", tb_errmsg());
    CHECK_MSG(n >= 7, "%lld writes: 4 step lines, an evaluation's and 2 checkpoints at least",
              (long long)n);
    snprintf(ck_ref, sizeof(ck_ref), "%s/last.safetensors", ref);
    int stopped_metrics = 0, stopped_ckpt = 0;
    for (int64_t k = 1; k <= n; k++) {
        snprintf(run, sizeof(run), "%s/wf_%lld", d, (long long)k);
        snprintf(ck, sizeof(ck), "%s/last.safetensors", run);
        o.out_dir = run;
        tbi_fault_arm(TBI_FAULT_WRITE, k);
        rc = tb_train(&o, NULL);
        tbi_fault_arm(TBI_FAULT_WRITE, 0);
        const char *msg = tb_errmsg();
        int metrics = strstr(msg, "/metrics.jsonl: cannot write the line of step") != NULL;
        int ckpt = strstr(msg, "/last.safetensors.part: write failed") != NULL ||
                   strstr(msg, "/best.safetensors.part: write failed") != NULL;
        CHECK_MSG(rc == TB_EIO && (metrics || ckpt) && strstr(msg, run) &&
                  strstr(msg, "No space left on device"), "write %lld failed: %d, %s",
                  (long long)k, rc, msg);
        stopped_metrics += metrics;
        stopped_ckpt += ckpt;
        CHECK_EQ(count_parts(run), 0);
        ckpt_at(ck); /* a checkpoint there verifies */
        static char lines[MAX_STEPS][LINE_CAP], evals[MAX_STEPS][LINE_CAP];
        read_lines(run, lines, evals); /* every line whole */
        rc = tb_train(&o, NULL);
        CHECK_MSG(rc == 0, "after write %lld failed: %s", (long long)k, tb_errmsg());
        same_lines(ref, run, "write faults");
        CHECK_MSG(same_file(ck, ck_ref), "after write %lld failed: the checkpoint differs",
                  (long long)k);
        char best[4500], best_ref[4500];
        snprintf(best, sizeof(best), "%s/best.safetensors", run);
        snprintf(best_ref, sizeof(best_ref), "%s/best.safetensors", ref);
        CHECK_MSG(same_file(best, best_ref), "after write %lld failed: the best checkpoint "
                  "differs", (long long)k);
    }
    CHECK_MSG(stopped_metrics >= 5 && stopped_ckpt >= 2, "%d metrics and %d checkpoint faults",
              stopped_metrics, stopped_ckpt);
    tb_ann_free(&ann);
    tb_ann_free(&val);
}

static void test_disk(const char *d)
{
    tbt_case = "a full disk: references with space";
    char ref[4300], prep_ref[4300], pred_ref[4300], ck_ref[4400], video[4400], *out = NULL;
    const char *a[64];
    snprintf(ref, sizeof(ref), "%s/d_ref", d);
    snprintf(prep_ref, sizeof(prep_ref), "%s/prep_ref", d);
    snprintf(pred_ref, sizeof(pred_ref), "%s/pred_ref.csv", d);
    snprintf(ck_ref, sizeof(ck_ref), "%s/last.safetensors", ref);
    snprintf(video, sizeof(video), "%s/videos/P01_01.mp4", syn);
    int rc = run_args(&out, 0, train_args(a, ref, "5"));
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    const char *prep_args[] = {"prep", video, "--out", prep_ref, "--short-side", "48",
                               "--preset", "veryfast", NULL};
    rc = run_args(&out, 0, prep_args);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    const char *eval_args[] = {"eval", "--ckpt", ck_ref, "--data", data, "--val", val_csv,
                               "--batch", "4", "--predictions", pred_ref, NULL};
    rc = run_args(&out, 0, eval_args);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);

    struct disk dks[2] = {{.tmpfs = 0, .reason = "File too large"},
                          {.tmpfs = 1, .reason = "No space left on device"}};
    snprintf(dks[0].base, sizeof(dks[0].base), "%s/limited", d);
    snprintf(dks[1].base, sizeof(dks[1].base), "%s", tmpfs_dir);
    mkdir(dks[0].base, 0777);
    for (int k = 0; k < (tmpfs_dir[0] ? 2 : 1); k++) {
        const struct disk *dk = &dks[k];
        tbt_case = dk->tmpfs ? "a full disk (tmpfs): prep" : "a full disk (RLIMIT_FSIZE): prep";
        disk_prep(dk, video, prep_ref);
        tbt_case = dk->tmpfs ? "a full disk (tmpfs): checkpoint"
                             : "a full disk (RLIMIT_FSIZE): checkpoint";
        disk_ckpt(dk, ref);
        tbt_case = dk->tmpfs ? "a full disk (tmpfs): eval --predictions"
                             : "a full disk (RLIMIT_FSIZE): eval --predictions";
        disk_predictions(dk, ck_ref, pred_ref);
        if (!dk->tmpfs) {
            tbt_case = "a full disk (RLIMIT_FSIZE): metrics.jsonl";
            disk_metrics(dk, ref);
        }
    }
    if (!tmpfs_dir[0])
        fprintf(stderr, "no tmpfs could be mounted here: the full-disk cases ran under "
                "RLIMIT_FSIZE only\n");
}

/* Whether part is among those asked for (argv[1] or TBT_CRASH_PARTS, comma-separated; none:
 * all). ctest runs kill9,damaged and disk,faults as two tests. */
static int part_on(const char *parts, const char *part)
{
    return !parts || !parts[0] || strstr(parts, part) != NULL;
}

int main(int argc, char **argv)
{
    tbt_begin("crash");
    const char *d = tbt_dir(), *parts = argc > 1 ? argv[1] : getenv("TBT_CRASH_PARTS");
    char mnt[4300];
    snprintf(mnt, sizeof(mnt), "%s/tmpfs", d);
    if (make_tmpfs(mnt) == 0) {
        snprintf(tmpfs_dir, sizeof(tmpfs_dir), "%s", mnt);
        atexit(unmount_tmpfs); /* before the scratch directory goes (atexit runs backwards) */
    }
    snprintf(syn, sizeof(syn), "%s/syn", d);
    snprintf(data, sizeof(data), "%s/data", d);
    snprintf(train_csv, sizeof(train_csv), "%s/annotations/EPIC_100_train.csv", syn);
    snprintf(val_csv, sizeof(val_csv), "%s/annotations/EPIC_100_validation.csv", syn);
    char *out = NULL;
    int rc = tbt_run(&out, 300, "%s synth --out %s --videos 4 --seconds 20 --size 96x64 && "
                     "%s prep %s/videos/*.mp4 --out %s --short-side 48 --preset veryfast",
                     tbt_tubelet(), syn, tbt_tubelet(), syn, data);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    char ref[4300] = "";
    if (part_on(parts, "kill9") || part_on(parts, "damaged")) /* damaged needs its run */
        test_kill9(d, ref, sizeof(ref));
    if (part_on(parts, "damaged"))
        test_damaged(d, ref);
    if (part_on(parts, "disk"))
        test_disk(d);
    if (part_on(parts, "faults"))
        test_write_faults(d);
    TBT_EXIT();
}
