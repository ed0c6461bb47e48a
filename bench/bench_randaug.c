/* bench/bench_randaug.c - RandAugment alone, as the loader's workers run it: WORKERS threads
 * take sample numbers in turn, copy a decoded clip (from CLIPS.rgb: K clips of T x H x W x 3)
 * into their buffer, draw the sample's plan and apply it. bench/randaug_bench.sh runs it beside
 * bench/randaug_peer.py (the same on PyTorch's DataLoader and Pillow). Prints one JSON line.
 * Usage: bench_randaug CLIPS.rgb K T H W WORKERS N_CLIPS [SPEC=m7-n4] */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tubelet/data.h"

static struct {
    const uint8_t *clips;
    int k, t, h, w;
    int64_t n;
    struct tb_randaug_opts o;
    atomic_llong next;
    atomic_int failed;
} job;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *worker(void *arg)
{
    (void)arg;
    size_t bytes = (size_t)job.t * job.h * job.w * 3;
    uint8_t *buf = malloc(bytes);
    for (int64_t i; buf && (i = atomic_fetch_add(&job.next, 1)) < job.n;) {
        memcpy(buf, job.clips + bytes * (size_t)(i % job.k), bytes);
        struct tb_ra_plan plan;
        tb_randaug_draw(&job.o, 0, 0, i, &plan);
        if (tb_randaug_apply(&plan, &job.o, buf, job.t, job.w, job.h) < 0)
            atomic_store(&job.failed, 1);
    }
    if (!buf)
        atomic_store(&job.failed, 1);
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 8) {
        fprintf(stderr, "usage: bench_randaug CLIPS.rgb K T H W WORKERS N_CLIPS [SPEC]\n");
        return 2;
    }
    job.k = atoi(argv[2]);
    job.t = atoi(argv[3]);
    job.h = atoi(argv[4]);
    job.w = atoi(argv[5]);
    int workers = atoi(argv[6]);
    job.n = atoll(argv[7]);
    const char *spec = argc > 8 ? argv[8] : "m7-n4";
    if (job.k < 1 || job.t < 1 || job.h < 1 || job.w < 1 || workers < 1 || workers > 256 ||
        job.n < 1 || tb_randaug_parse(spec, &job.o) < 0) {
        fprintf(stderr, "bench_randaug: bad arguments: %s\n", tb_errmsg());
        return 2;
    }
    size_t bytes = (size_t)job.k * job.t * job.h * job.w * 3;
    uint8_t *clips = malloc(bytes);
    FILE *f = fopen(argv[1], "rb");
    if (!clips || !f || fread(clips, 1, bytes, f) != bytes) {
        fprintf(stderr, "bench_randaug: cannot read %zu bytes of %s\n", bytes, argv[1]);
        return 1;
    }
    fclose(f);
    job.clips = clips;
    pthread_t th[256];
    double t0 = now();
    for (int i = 0; i < workers; i++)
        pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < workers; i++)
        pthread_join(th[i], NULL);
    double secs = now() - t0;
    printf("{\"augment\": \"tubelet\", \"spec\": \"%s\", \"workers\": %d, \"clips\": %lld, "
           "\"frames\": %d, \"size\": \"%dx%d\", \"seconds\": %.3f, \"clips_per_s\": %.2f}\n",
           spec, workers, (long long)job.n, job.t, job.w, job.h, secs, job.n / secs);
    free(clips);
    return atomic_load(&job.failed);
}
