/* tests/test_collectives.c - the backends' collectives across processes, on every backend of
 * the build: reduce_start/reduce_wait (the mean, in place, several buckets in flight), gather
 * (every process's rows in rank order) and bcast (from each rank), at sizes of 1 float to more
 * than the TCP group's buffer, against the values computed here. The test starts itself as 2
 * and 3 processes under torchrun's variables (tests/launch_env.sh: the TCP group; on cuda-emu
 * NCCL's stand-in), and under mpirun where it works; each process checks its own results.
 * On a GPU machine with two GPUs, bench/gpu-check.sh runs it on "cuda" (NCCL itself):
 *   TBT_COLL_BACKENDS=cuda sh tests/launch_env.sh 2 torchrun test_collectives --worker */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tb_test.h"
#include "tensor/backend.h"
#include "tubelet/dist.h"

#define MPIRUN "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe"

/* Rank r's element i: values whose sums round differently in other orders. */
static float value(int r, size_t i)
{
    return (float)((double)(i % 89 + 1) / (3.0 + r) * (i % 3 ? 1e-3 : 7.0));
}

/* The mean over world processes as dist.h computes it: the sum in rank order times 1/world.
 * MPI and NCCL may sum in another order: compared within 2 ulps of the sum's terms. */
static double mean_of(int world, size_t i, double *mag)
{
    double s = 0;
    *mag = 0;
    for (int r = 0; r < world; r++) {
        s += value(r, i);
        *mag += fabs(value(r, i));
    }
    return s / world;
}

static int bad; /* this process's mismatches */

static void expect(int ok, const char *what, size_t i, double got, double want)
{
    if (!ok && bad++ < 5)
        fprintf(stderr, "rank %d: %s: element %zu is %.9g, not %.9g\n", tb_dist_rank(), what,
                i, got, want);
}

/* Every collective on backend name, as one process of the group. */
static void collectives(const char *name)
{
    int rank = tb_dist_rank(), world = tb_dist_world();
    tbi_backend *be = NULL;
    if (tbi_backend_open(&be, name) < 0) {
        fprintf(stderr, "rank %d: backend %s: %s\n", rank, name, tb_errmsg());
        bad++;
        return;
    }
    static const size_t sizes[] = {1, 1000, 300 * 1024 + 7};
    enum { N_SIZES = sizeof(sizes) / sizeof(sizes[0]) };
    float *dev[N_SIZES] = {0}, *all = NULL, *host = malloc(sizeof(float) * sizes[N_SIZES - 1]);
    float *ghost = malloc(sizeof(float) * 1000 * (size_t)world);
    /* reduce: three buckets in flight, awaited together */
    for (int k = 0; k < N_SIZES; k++) {
        for (size_t i = 0; i < sizes[k]; i++)
            host[i] = value(rank, i);
        if (be->ops->alloc(be, sizeof(float) * sizes[k], (void **)&dev[k]) < 0 ||
            be->ops->to_device(be, dev[k], host, sizeof(float) * sizes[k]) < 0 ||
            be->ops->reduce_start(be, dev[k], sizes[k]) < 0) {
            fprintf(stderr, "rank %d: %s: reduce_start: %s\n", rank, name, tb_errmsg());
            bad++;
            goto end;
        }
    }
    if (be->ops->reduce_wait(be) < 0) {
        fprintf(stderr, "rank %d: %s: reduce_wait: %s\n", rank, name, tb_errmsg());
        bad++;
        goto end;
    }
    for (int k = 0; k < N_SIZES; k++) {
        if (be->ops->to_host(be, host, dev[k], sizeof(float) * sizes[k]) < 0) {
            bad++;
            goto end;
        }
        for (size_t i = 0; i < sizes[k]; i++) {
            double mag, want = mean_of(world, i, &mag);
            expect(fabs(host[i] - want) <= 2 * 1.2e-7 * mag, name, i, host[i], want);
        }
    }
    /* gather: 1000 floats a process */
    if (be->ops->alloc(be, sizeof(float) * 1000 * (size_t)world, (void **)&all) < 0)
        goto end;
    for (size_t i = 0; i < 1000; i++)
        host[i] = value(rank, i) + (float)rank;
    if (be->ops->to_device(be, dev[1], host, sizeof(float) * 1000) < 0 ||
        be->ops->gather(be, all, dev[1], 1000) < 0 ||
        be->ops->to_host(be, ghost, all, sizeof(float) * 1000 * (size_t)world) < 0) {
        fprintf(stderr, "rank %d: %s: gather: %s\n", rank, name, tb_errmsg());
        bad++;
        goto end;
    }
    for (int r = 0; r < world; r++)
        for (size_t i = 0; i < 1000; i++) {
            float want = value(r, i) + (float)r;
            expect(ghost[(size_t)r * 1000 + i] == want, "gather", i, ghost[r * 1000 + i], want);
        }
    /* bcast: from each rank in turn, the largest size */
    size_t n = sizes[N_SIZES - 1];
    for (int root = 0; root < world; root++) {
        for (size_t i = 0; i < n; i++)
            host[i] = rank == root ? value(root, i) : NAN;
        if (be->ops->to_device(be, dev[2], host, sizeof(float) * n) < 0 ||
            be->ops->bcast(be, dev[2], n, root) < 0 ||
            be->ops->to_host(be, host, dev[2], sizeof(float) * n) < 0) {
            fprintf(stderr, "rank %d: %s: bcast from %d: %s\n", rank, name, root, tb_errmsg());
            bad++;
            goto end;
        }
        for (size_t i = 0; i < n; i++)
            expect(host[i] == value(root, i), "bcast", i, host[i], value(root, i));
    }
end:
    for (int k = 0; k < N_SIZES; k++)
        if (dev[k])
            be->ops->free(be, dev[k]);
    if (all)
        be->ops->free(be, all);
    free(host);
    free(ghost);
    tbi_backend_close(&be);
}

/* One process of the group: the backends in TBT_COLL_BACKENDS (comma-separated), else every
 * one of the build; exit 0 when all matched. */
static int worker(void)
{
    if (tb_dist_init(NULL, NULL) < 0) {
        fprintf(stderr, "worker: %s\n", tb_errmsg());
        return 2;
    }
    const char *list = getenv("TBT_COLL_BACKENDS");
    char names[256];
    snprintf(names, sizeof(names), "%s", list && *list ? list : "");
    int ran = 0;
    if (names[0]) {
        for (char *save = NULL, *b = strtok_r(names, ",", &save); b; b = strtok_r(NULL, ",", &save))
            collectives(b), ran++;
    } else {
        for (int i = 0; tbi_backend_names[i]; i++)
            if (strcmp(tbi_backend_names[i], "cuda")) /* a GPU's: asked for by name */
                collectives(tbi_backend_names[i]), ran++;
    }
    if (tb_dist_rank() == 0)
        printf("collectives: %d processes (%s), %d backends, %s\n", tb_dist_world(),
               tb_dist_transport(), ran, bad ? "MISMATCHES" : "all matched");
    if (bad) {
        tb_dist_finalize_failed();
        return 1;
    }
    tb_dist_finalize();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--worker"))
        return worker();
    tbt_begin("collectives");
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
        TBT_FAIL("cannot find this program");
    self[len] = '\0';
    char *out = NULL;
    for (int world = 2; world <= 3; world++) {
        char what[64];
        snprintf(what, sizeof(what), "%d processes over TCP (torchrun's variables)", world);
        tbt_case = what;
        int rc = tbt_run(&out, 300, "sh " TB_SOURCE_DIR "/tests/launch_env.sh %d torchrun %s "
                         "--worker", world, self);
        CHECK_MSG(rc == 0 && out && strstr(out, "all matched") && strstr(out, "(TCP)"),
                  "exit %d: %s", rc, out);
        fprintf(stderr, "%s", out ? out : "");
        free(out);
    }
    if (tbt_run(&out, 60, MPIRUN " -np 2 true") != 0) {
        fprintf(stderr, "no working mpirun here: the MPI case not run\n");
        free(out);
        TBT_EXIT();
    }
    free(out);
    tbt_case = "3 processes under mpirun";
    int rc = tbt_run(&out, 300, "ASAN_OPTIONS=detect_leaks=0 " MPIRUN " -np 3 %s --worker", self);
    CHECK_MSG(rc == 0 && out && strstr(out, "all matched") && strstr(out, "(MPI)"), "exit %d: %s",
              rc, out);
    fprintf(stderr, "%s", out ? out : "");
    free(out);
    TBT_EXIT();
}
