/* bench/bench_captions.c - memory and time of the relevant captions (metrics.h's
 * tb_mir_captions_*) for a split of EK-100's training size: a synthetic EPIC CSV of N clips
 * (default 67,217) with 97 verb and 300 noun classes drawn long-tailed (Zipf, exponent 1:
 * flatter than EK-100's, so more distinct classes than its 3,806 verb-noun pairs), one clip in
 * ten with a second noun. Narrations are distinct per clip (N sentences: the N x N case) or one
 * per class (about as many sentences as EK-100's 15,990). Builds from the classes, or from a
 * float64 .npy of the split's relevancy that it writes first (a row at a time, exact values:
 * the shape of EK-100's caption_relevancy_EPIC_100_retrieval_train.pkl). Prints one JSON line:
 * the structure's counts and bytes, the build's seconds, the process's RSS before the build and
 * its peak, and the time of one draw. docs/PERFORMANCE.md quotes it.
 * Usage: bench_captions classes DIR [N=67217] [THRESHOLD=0.1] [NARR=distinct|classes]
 *        bench_captions file DIR [N=67217] [THRESHOLD=0.1]   (narrations one per class) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ek100_split.h"
#include "metrics/mir_internal.h"
#include "tubelet/data.h"
#include "tubelet/metrics.h"
#include "tubelet/rng.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double rss_mb(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * (double)sysconf(_SC_PAGESIZE) / 1e6;
}

static double peak_mb(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss * 1024.0 / 1e6; /* kB on Linux */
}

/* The split's relevancy as a float64 .npy, a row at a time. */
static int write_npy(const char *path, const struct tb_annotations *a,
                     const struct tb_mir_sentences *s)
{
    FILE *f = fopen(path, "wb");
    double *row = malloc(sizeof(double) * (size_t)s->n);
    if (!f || !row) {
        free(row);
        if (f)
            fclose(f);
        return -1;
    }
    char h[160];
    int len = snprintf(h, sizeof(h), "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, "
                       "%d), }", a->n_items, s->n);
    int pad = (64 - (10 + len + 1) % 64) % 64;
    unsigned hl = (unsigned)(len + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc((int)(hl & 255), f);
    fputc((int)(hl >> 8), f);
    fwrite(h, 1, (size_t)len, f);
    for (int k = 0; k < pad; k++)
        fputc(' ', f);
    fputc('\n', f);
    int rc = 0;
    for (int i = 0; i < a->n_items && !rc; i++) {
        for (int j = 0; j < s->n; j++)
            row[j] = tbi_mir_relevancy_of(&a->items[i], &a->items[s->item[j]]);
        rc = fwrite(row, sizeof(double), (size_t)s->n, f) == (size_t)s->n ? 0 : -1;
    }
    free(row);
    return fclose(f) || rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "classes") && strcmp(argv[1], "file"))) {
        fprintf(stderr, "usage: bench_captions classes|file DIR [N=67217] [THRESHOLD=0.1] "
                "[NARR=distinct|classes]\n");
        return 2;
    }
    int from_file = !strcmp(argv[1], "file");
    int n = argc > 3 ? atoi(argv[3]) : 67217;
    double thr = argc > 4 ? atof(argv[4]) : 0.1;
    int distinct = from_file ? 0 : !(argc > 5 && !strcmp(argv[5], "classes"));
    char csv[4096], npy[4096];
    snprintf(csv, sizeof(csv), "%s/bench_captions_%d_%s.csv", argv[2], n,
             distinct ? "distinct" : "classes");
    snprintf(npy, sizeof(npy), "%s/bench_captions_%d.npy", argv[2], n);
    if (tbt_write_ek100_split(csv, n, distinct)) {
        fprintf(stderr, "bench_captions: cannot write %s\n", csv);
        return 1;
    }
    struct tb_annotations *a = NULL;
    struct tb_ann_opts o = {.format = TB_ANN_EPIC};
    struct tb_mir_sentences *s = NULL;
    tb_mir_captions *c = NULL;
    if (tb_ann_load(&a, csv, &o) < 0 || tb_mir_sentences_build(&s, a) < 0) {
        fprintf(stderr, "bench_captions: %s\n", tb_errmsg());
        return 1;
    }
    double write_s = 0;
    if (from_file && access(npy, R_OK) != 0) {
        double t0 = now();
        if (write_npy(npy, a, s)) {
            fprintf(stderr, "bench_captions: cannot write %s\n", npy);
            return 1;
        }
        write_s = now() - t0;
    }
    double before = rss_mb(), t0 = now();
    if (tb_mir_captions_open(&c, a, s, thr, from_file ? npy : NULL) < 0) {
        fprintf(stderr, "bench_captions: %s\n", tb_errmsg());
        return 1;
    }
    double build_s = now() - t0, after = rss_mb(), peak = peak_mb();
    /* draws: a batch of 64 clips for 200 steps, as the clip task draws them */
    int sink = 0, n_draws = 64 * 200;
    t0 = now();
    for (int k = 0; k < n_draws; k++) {
        tb_rng g;
        tb_rng_init_for(&g, 0, TB_RNG_CAPTION, (uint64_t)(k / 64), (uint64_t)(k * 7919 % n));
        sink += tb_mir_captions_draw(c, k * 7919 % n, &g);
    }
    double draw_us = (now() - t0) / n_draws * 1e6;
    struct tb_mir_captions_stats st;
    tb_mir_captions_stats(c, &st);
    printf("{\"source\": \"%s\", \"clips\": %lld, \"sentences\": %lld, \"threshold\": %g, "
           "\"pairs\": %lld, \"rows\": %lld, \"groups\": %lld, \"entries\": %lld, \"empty\": "
           "%lld, \"bytes\": %lld, \"dense_f32_bytes\": %lld, \"build_s\": %.2f, "
           "\"npy_write_s\": %.1f, \"rss_before_mb\": %.1f, \"rss_after_mb\": %.1f, "
           "\"rss_peak_mb\": %.1f, \"draw_us\": %.1f, \"sink\": %d}\n",
           from_file ? "npy" : "classes", (long long)st.n_items, (long long)st.n_sentences, thr,
           (long long)st.n_pairs, (long long)st.n_rows, (long long)st.n_groups,
           (long long)st.n_entries, (long long)st.n_empty, (long long)st.bytes,
           4LL * st.n_items * st.n_sentences, build_s, write_s, before, after, peak, draw_us,
           sink & 1);
    tb_mir_captions_close(&c);
    tb_mir_sentences_free(&s);
    tb_ann_free(&a);
    return 0;
}
