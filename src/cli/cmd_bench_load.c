/* src/cli/cmd_bench_load.c - `tubelet bench-load`: how fast the loader turns annotations into
 * batches on this machine: clips/s, decoded frames/s, CPU use, and resident memory early and
 * late in the run (it must stay flat); with --every N, the open descriptors and resident
 * memory every N clips too (bench/long_run.sh: 100,000 clips). bench/loader_bench.sh runs it
 * beside PyTorch DataLoader baselines. Tests: tests/test_cli_data.c. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tubelet/data.h"

struct bench_config {
    char *root;
    char *ann;
    char *format;
    char *workload;
    int workers;
    int batch;
    int clips;
    int prefetch;
    int size;
    int frames;
    int seed;
    int every;
    char *rand_augment;
};

#define F(name, type, field, def, meta, help, ...)                                            \
    CLI_FLAG(name, type, struct bench_config, field, def, meta, help, __VA_ARGS__)
static const struct cli_flag bench_flags[] = {
    F("data", CLI_STR, root, NULL, "DIR", "prepared videos (tubelet prep --out)", CLI_NO_RANGE),
    F("ann", CLI_STR, ann, NULL, "FILE", "annotations", CLI_NO_RANGE),
    F("format", CLI_STR, format, "epic", "epic|kinetics|narration",
      "annotation format: epic, kinetics, narration",
      CLI_NO_RANGE),
    F("workload", CLI_STR, workload, "w1", "w1|w2",
      "w1: 4 frames per clip; w2: 16 frames (AVION's), random-resized-crop", CLI_NO_RANGE),
    F("workers", CLI_INT, workers, "2", "N", "decoding threads", 1, 256),
    F("batch", CLI_INT, batch, "16", "B", "clips per batch", 1, 4096),
    F("clips", CLI_INT, clips, "2000", "N", "clips to load and count (the batch that reaches N "
      "counts up to N)", 1, 100000000),
    F("prefetch", CLI_INT, prefetch, "2", "N", "batches decoded ahead", 0, 64),
    F("size", CLI_INT, size, "224", "PX", "output frame size (square)", 8, 4096),
    F("frames", CLI_INT, frames, "0", "T", "frames per clip (0: the workload's, 4 or 16)", 0,
      1024),
    F("seed", CLI_INT, seed, "0", "K", "random seed", 0, 2147483647),
    F("every", CLI_INT, every, "0", "N", "also print a line of clips, open descriptors and "
      "resident memory every N clips (0: none)", 0, 100000000),
    F("rand-augment", CLI_STR, rand_augment, "none", "mM-nN", "RandAugment on every clip, as "
      "train's (e.g. m7-n4); none: off", CLI_NO_RANGE),
};
#undef F

static double rss_mb(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = 0;
    if (f)
        fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1 << 20);
}

/* Descriptors this process has open (entries of /proc/self/fd but the one reading it). */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - 1;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

int cli_ann_format(const char *name, enum tb_ann_format *out)
{
    if (!strcmp(name, "epic"))
        *out = TB_ANN_EPIC;
    else if (!strcmp(name, "kinetics"))
        *out = TB_ANN_KINETICS;
    else if (!strcmp(name, "narration"))
        *out = TB_ANN_NARRATION;
    else
        return -1;
    return 0;
}

/* What one run measured: the clips counted over secs seconds of the clock (pauses for the
 * --every lines left out) and cpu seconds of CPU, the resident memory a tenth of the way in,
 * and the fewest and most open descriptors at the --every lines. */
struct bench_result {
    int64_t clips;
    double secs, cpu, rss_early;
    int fds_min, fds_max;
};

/* The line printed every --every clips, t0 the run's start. Returns the seconds it took, which
 * the caller leaves out of the run's time. */
static double print_every(int64_t clips, double t0, struct bench_result *res)
{
    /* Counted once the workers have finished the batches in flight and wait for a buffer: the
     * steady count, not a reader between closing an evicted file and opening the next (its
     * decode stays out of the clips/s as well). */
    double pause = cli_now();
    nanosleep(&(struct timespec){0, 250 * 1000 * 1000}, NULL);
    int fds = open_fds();
    res->fds_min = fds < res->fds_min ? fds : res->fds_min;
    res->fds_max = fds > res->fds_max ? fds : res->fds_max;
    printf("{\"clips\": %lld, \"open_fds\": %d, \"rss_mb\": %.1f, \"seconds\": %.1f}\n",
           (long long)clips, fds, rss_mb(), pause - t0);
    fflush(stdout);
    return cli_now() - pause;
}

/* Load --clips clips (epoch after epoch) until done or cancelled, into *res. 0 or the loader's
 * negative TB_E*. */
static int measure(const struct bench_config *c, tb_loader *l, struct bench_result *res)
{
    double t0 = cli_now(), cpu0 = cpu_s(), t_early = 0;
    int64_t target = c->clips, next = c->every;
    int rc;
    *res = (struct bench_result){.fds_min = 1 << 30, .fds_max = -1};
    for (int64_t epoch = 0; res->clips < target && !cli_cancel; epoch++) {
        int64_t nb = tb_loader_epoch(l, epoch);
        if (nb < 0)
            return (int)nb;
        for (int64_t k = 0; k < nb && res->clips < target && !cli_cancel; k++) {
            struct tb_batch *b = NULL;
            if ((rc = tb_loader_next(l, &b)) < 0)
                return rc;
            res->clips += b->n < target - res->clips ? b->n : target - res->clips;
            tb_loader_release(l, b);
            if (!t_early && res->clips >= target / 10) {
                t_early = cli_now();
                res->rss_early = rss_mb();
            }
            if (c->every && res->clips >= next) {
                double paused = print_every(res->clips, t0, res);
                next += c->every;
                t0 += paused;
            }
        }
    }
    res->secs = cli_now() - t0;
    res->cpu = cpu_s() - cpu0;
    return 0;
}

/* The run's JSON line; n_frames is the frames per clip loaded. */
static void print_result(const struct bench_config *c, int n_frames, tb_loader *l,
                         const struct bench_result *res)
{
    struct tb_loader_stats st;
    tb_loader_get_stats(l, &st);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double secs = res->secs;
    printf("{\"loader\": \"tubelet\", \"workload\": \"%s\", \"frames\": %d, "
           "\"rand_augment\": \"%s\", \"workers\": %d, \"batch\": %d, "
           "\"clips\": %lld, \"seconds\": %.3f, \"clips_per_s\": %.2f, "
           "\"decoded_frames_per_s\": %.1f, \"cpu_percent\": %.0f, \"rss_mb_at_10pct\": %.1f, "
           "\"rss_mb_at_end\": %.1f, \"peak_rss_mb\": %.1f, ", c->workload, n_frames,
           c->rand_augment[0] ? c->rand_augment : "none", c->workers,
           c->batch, (long long)res->clips, secs, res->clips / secs, st.frames_decoded / secs,
           100 * res->cpu / secs, res->rss_early, rss_mb(), ru.ru_maxrss / 1024.0);
    if (c->every)
        printf("\"open_fds_min\": %d, \"open_fds_max\": %d, ", res->fds_min, res->fds_max);
    printf("\"failures\": %lld}\n", (long long)st.failures);
}

static int run_bench(void *config, int n_args, char **args)
{
    struct bench_config *c = config;
    struct tb_annotations *ann = NULL;
    tb_dataset *ds = NULL;
    tb_loader *l = NULL;
    struct tb_ann_opts ao = {0};
    struct bench_result res;
    int rc, status = 1;
    (void)n_args;
    (void)args;
    if (!c->root[0] || !c->ann[0]) {
        fprintf(stderr, "tubelet bench-load: --data DIR and --ann FILE are required\n");
        return 2;
    }
    cli_ann_format(c->format, &ao.format); /* the parser checked the names */
    struct tb_dataset_opts dopts = {
        .root = c->root, .ext = "mp4", .sampler = TB_SAMPLE_SEGMENTS,
        .n_frames = c->frames ? c->frames : strcmp(c->workload, "w2") ? 4 : 16, .train = 1,
        .width = c->size,
        .height = c->size,
        .crop = {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = 0.08, .scale_max = 1,
                 .ratio_min = 3.0 / 4, .ratio_max = 4.0 / 3, .flip = TB_FLIP_RANDOM},
    };
    if (tb_randaug_parse(c->rand_augment, &dopts.rand_augment) < 0) {
        fprintf(stderr, "tubelet bench-load: --rand-augment: %s\n", tb_errmsg());
        return 2;
    }
    struct tb_loader_opts lo = {.batch_size = c->batch, .n_workers = c->workers,
                                .prefetch = c->prefetch, .seed = (uint64_t)c->seed,
                                .shuffle = 1, .world = 1, .max_failure_rate = 0.05};
    if (cli_ann_load(&ann, "bench-load", c->ann, ao.format) < 0 ||
        cli_ann_check(ann, "bench-load", c->root, "mp4", CLI_ROWS_REPORT, 0) < 0)
        goto end;
    if ((rc = tb_dataset_open(&ds, ann, &dopts)) < 0 || (rc = tb_loader_open(&l, ds, &lo)) < 0 ||
        (rc = measure(c, l, &res)) < 0)
        goto fail;
    print_result(c, dopts.n_frames, l, &res);
    status = 0;
    goto end;
fail:
    cli_report("bench-load", rc);
end:
    tb_loader_close(&l);
    tb_dataset_close(&ds);
    tb_ann_free(&ann);
    return status;
}

const struct cli_command cli_cmd_bench_load = {
    .name = "bench-load",
    .args = "",
    .summary = "measure the loader: clips/s, decoded frames/s, CPU use, memory over the run",
    .details = "Loads --clips clips of --workload from --ann over the videos prepared in --root\n"
               "with --workers threads, and prints one JSON line.",
    .flags = bench_flags,
    .n_flags = (int)(sizeof(bench_flags) / sizeof(bench_flags[0])),
    .config_size = sizeof(struct bench_config),
    .min_args = 0,
    .max_args = 0,
    .run = run_bench,
};
