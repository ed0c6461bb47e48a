/* src/tensor/cpu/share.c - a fair share of a busy machine: the CPU backend's OpenMP team
 * follows the cores that other processes leave free. A team larger than the free cores
 * collapses: a step is hundreds of back-to-back parallel regions, each ending in a barrier that
 * waits for a thread the scheduler has parked while its partners spin away their slices (2
 * threads beside 2 busy loops on 2 cores: 0.07 of the unloaded rate; a team of one: 0.40).
 * A team that fits keeps its cores busy and wastes nothing, and an idle machine keeps the full
 * team and its spinning barriers, the fastest there. So every 0.25 s (checked from the thread
 * that calls the ops, at each product) the cores other processes used are measured: the busy
 * time of the CPUs this process may run on (/proc/stat) less this process's own (getrusage:
 * its loader threads are its own), smoothed; the team is then the ceiling (OpenMP's setting
 * at the first check) less the cores others use, rounded, and at least one. Only where the
 * products run on our own kernel (tbi_sgemm_uses_own: AVX-512), whose bits, like every other
 * kernel's, do not depend on the team's size, so this changes speed only; OpenBLAS (the
 * products elsewhere, and under TUBELET_CPU=portable or TUBELET_GEMM=openblas) gives other
 * bits on another thread count, so there the team stays fixed and a run stays reproducible.
 * It is an option of the backend's open (struct tbi_backend_opts: off in the library, which
 * must not change a caller's threads behind its back, on in the tubelet program), and
 * TUBELET_CPU_SHARE=off keeps the team fixed everywhere. Not here: the decision's arithmetic
 * alone is tbi_share_team, tested in tests/test_ops.c; its effect is measured by
 * bench/share_bench.sh. */
#define _GNU_SOURCE
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/internal.h"
#include "tensor/cpu/kernels.h"

#define SHARE_PERIOD 0.25 /* seconds between measurements: /proc/stat counts 10 ms ticks */

struct share {
    int state;                /* 0 not started, 1 measuring, -1 off */
    int ceiling, team;
    double t, busy, self;     /* the last measurement: wall, busy and own CPU seconds */
    double others;            /* cores used by other processes, smoothed */
};

static _Thread_local struct share st;

/* Busy seconds of the CPUs this process may run on (user, nice, system, irq, softirq and
 * steal of their cpuN lines; guest time is inside user), or -1 where /proc/stat cannot say. */
static double busy_seconds(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return -1;
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    char line[512];
    unsigned long long sum = 0;
    int seen = 0;
    while (fgets(line, sizeof(line), f)) {
        int cpu;
        unsigned long long v[8] = {0};
        if (strncmp(line, "cpu", 3) || line[3] < '0' || line[3] > '9')
            continue;
        if (sscanf(line + 3, "%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) < 9)
            continue;
        if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set))
            continue;
        sum += v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
        seen++;
    }
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    return seen && hz > 0 ? (double)sum / (double)hz : -1;
}

static double self_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

int tbi_share_team(int ceiling, double others)
{
    int n = ceiling - (int)(others + 0.5);
    return n < 1 ? 1 : n > ceiling ? ceiling : n;
}

static void measure(struct share *s, double t)
{
    double busy = busy_seconds(), self = self_seconds();
    if (busy < 0 || self < 0) {
        s->state = -1;
        return;
    }
    double used = (busy - s->busy - (self - s->self)) / (t - s->t);
    s->others = 0.5 * s->others + 0.5 * (used > 0 ? used : 0);
    s->t = t, s->busy = busy, s->self = self;
    int team = tbi_share_team(s->ceiling, s->others);
    if (team != s->team) {
        omp_set_num_threads(team);
        s->team = team;
    }
}

/* Back to the ceiling and not started, so that a backend opened with the share on measures
 * afresh. */
static void share_stop(struct share *s)
{
    if (s->team != s->ceiling)
        omp_set_num_threads(s->ceiling);
    s->state = 0;
    s->team = s->ceiling;
}

void tbi_share_tick(int on)
{
    struct share *s = &st;
    if (s->state < 0 || omp_get_level() > 0)
        return;
    if (!on) {
        if (s->state > 0)
            share_stop(s);
        return;
    }
    double t = tbi_now_s();
    if (s->state == 0) {
        const char *e = getenv("TUBELET_CPU_SHARE");
        s->ceiling = s->team = omp_get_max_threads();
        s->t = t, s->busy = busy_seconds(), s->self = self_seconds();
        s->state = (e && !strcmp(e, "off")) || s->ceiling < 2 || s->busy < 0 || s->self < 0 ||
                           !tbi_sgemm_uses_own()
                       ? -1 : 1;
        return;
    }
    if (t - s->t >= SHARE_PERIOD)
        measure(s, t);
}
