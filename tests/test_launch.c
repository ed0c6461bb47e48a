/* tests/test_launch.c - who started a process, and the TCP process group (src/dist/launch.c,
 * src/dist/star.c):
 * - each launcher's variables (Open MPI's, MPICH's, srun --mpi=pmix's, torchrun's, srun's)
 *   give its rank, size and local rank; MPI's win over torchrun's, torchrun's over Slurm's; a
 *   batch script's Slurm variables alone are no launcher; bad values are refused by name;
 * - N forked processes (2 and 3) meeting at a port: sums and maxima in rank order (the same
 *   bits on every process as the rank-order sum computed here), gathers, broadcasts, a
 *   reduction larger than the group's buffer;
 * - failures are errors, never hangs: a peer that stops (the others' next collective names
 *   it), a peer that never comes (the timeout), a process of another job at the port. */
#define _POSIX_C_SOURCE 200809L
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dist/star.h"
#include "tb_test.h"
#include "tubelet/dist.h"

static const char *const all_vars[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "PMIX_RANK", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID",
    "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NTASKS", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
    "TUBELET_PORT"};

/* The environment of "VAR=value VAR=value ..." alone among the launchers' variables. */
static void env_of(const char *assignments)
{
    for (size_t i = 0; i < sizeof(all_vars) / sizeof(all_vars[0]); i++)
        unsetenv(all_vars[i]);
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", assignments);
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(t, '=');
        *eq = '\0';
        setenv(t, eq + 1, 1);
    }
}

static void detect_cases(void)
{
    static const struct {
        const char *env;
        enum tb_launcher kind;
        int rank, world, local_rank, local_world, mpi;
    } cases[] = {
        {"", TB_LAUNCH_NONE, 0, 1, 0, 1, 0},
        {"OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=0 "
         "OMPI_COMM_WORLD_LOCAL_SIZE=2 PMIX_RANK=2",
         TB_LAUNCH_MPI, 2, 4, 0, 2, 1},
        {"PMI_RANK=1 PMI_SIZE=3 MPI_LOCALRANKID=1 MPI_LOCALNRANKS=3", TB_LAUNCH_MPI, 1, 3, 1, 3,
         1},
        {"PMIX_RANK=5 SLURM_PROCID=5 SLURM_STEP_NUM_TASKS=8 SLURM_LOCALID=1", TB_LAUNCH_MPI, 5, 8,
         1, 0, 1},
        {"PMIX_RANK=0", TB_LAUNCH_MPI, 0, 0, 0, 0, 1},
        {"RANK=3 WORLD_SIZE=4 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=n1 MASTER_PORT=29500",
         TB_LAUNCH_TORCHRUN, 3, 4, 1, 2, 0},
        /* torchrun inside a Slurm allocation: torchrun's processes */
        {"SLURM_PROCID=0 SLURM_NTASKS=1 RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2",
         TB_LAUNCH_TORCHRUN, 1, 2, 1, 2, 0},
        {"SLURM_PROCID=3 SLURM_STEP_NUM_TASKS=4 SLURM_LOCALID=1", TB_LAUNCH_SLURM, 3, 4, 1, 0, 0},
        /* a batch script: Slurm's job variables, no job step; RANK alone: no torchrun */
        {"SLURM_PROCID=0 SLURM_NTASKS=4", TB_LAUNCH_NONE, 0, 1, 0, 1, 0},
        {"RANK=3", TB_LAUNCH_NONE, 0, 1, 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tbt_case = cases[i].env;
        env_of(cases[i].env);
        struct tb_launch l;
        CHECK_MSG(tb_launch_detect(&l) == 0, "%s: %s", tbt_case, tb_errmsg());
        CHECK_EQ((int)l.kind, (int)cases[i].kind);
        CHECK_EQ(l.rank, cases[i].rank);
        CHECK_EQ(l.world, cases[i].world);
        CHECK_EQ(l.local_rank, cases[i].local_rank);
        CHECK_EQ(l.local_world, cases[i].local_world);
        CHECK_EQ(l.mpi, cases[i].mpi);
    }
    tbt_case = "torchrun's meeting point";
    env_of("RANK=0 WORLD_SIZE=2 MASTER_ADDR=node-7.cluster MASTER_PORT=29500");
    struct tb_launch l;
    CHECK_EQ(tb_launch_detect(&l), 0);
    CHECK(!strcmp(l.addr, "node-7.cluster") && l.port == 29500);
    /* newer torchrun's agent serves its store at MASTER_PORT: the group takes the next */
    env_of("RANK=0 WORLD_SIZE=2 MASTER_PORT=29500 TORCHELASTIC_USE_AGENT_STORE=True");
    CHECK(tb_launch_detect(&l) == 0 && l.port == 29501);
    env_of("RANK=0 WORLD_SIZE=2 MASTER_PORT=29500 TORCHELASTIC_USE_AGENT_STORE=False "
           "TUBELET_PORT=31000");
    CHECK(tb_launch_detect(&l) == 0 && l.port == 31000);

    static const char *const bad[][2] = {
        {"RANK=x WORLD_SIZE=2", "RANK"},
        {"RANK=2 WORLD_SIZE=2", "WORLD_SIZE"},
        {"RANK=0 WORLD_SIZE=0", "WORLD_SIZE"},
        {"RANK=-1 WORLD_SIZE=2", "RANK"},
        {"RANK=1 WORLD_SIZE=2 LOCAL_RANK=2 LOCAL_WORLD_SIZE=2", "LOCAL_RANK"},
        {"OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=99999999999", "OMPI_COMM_WORLD_SIZE"},
        {"RANK=0 WORLD_SIZE=2 MASTER_PORT=70000", "MASTER_PORT"},
        {"RANK=0 WORLD_SIZE=2 MASTER_PORT=29500x", "MASTER_PORT"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tbt_case = bad[i][0];
        env_of(bad[i][0]);
        int rc = tb_launch_detect(&l);
        CHECK_MSG(rc < 0 && strstr(tb_errmsg(), bad[i][1]), "%s: %s", bad[i][0],
                  rc < 0 ? tb_errmsg() : "accepted");
    }
    env_of("");
}

/* A TCP port free a moment ago (the kernel's choice). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
        getsockname(fd, (struct sockaddr *)&sa, &len))
        TBT_FAIL("no free port");
    int port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* Rank r's contribution: values that round differently in other orders. */
static float value(int r, size_t i)
{
    return (float)((double)(i % 97 + 1) / (3.0 + r) * (i % 2 ? 1e-3 : 1e3));
}

#define N_BIG (300 * 1024) /* floats: more than the group's 256 KiB buffer */

/* One process of the group: every collective, checked; returns its exit status (0 ok, the
 * number of mismatches else). */
static int member(int rank, int world, int port)
{
    struct tbi_star *s = NULL;
    if (tbi_star_open(&s, rank, world, "127.0.0.1", port) < 0) {
        fprintf(stderr, "rank %d: %s\n", rank, tb_errmsg());
        return 100;
    }
    int bad = 0;
    float *x = malloc(sizeof(float) * N_BIG), *all = malloc(sizeof(float) * 3 * world);
    for (size_t i = 0; i < N_BIG; i++)
        x[i] = value(rank, i);
    bad += tbi_star_reduce(s, x, N_BIG, TBI_STAR_F32, TBI_STAR_SUM) < 0;
    for (size_t i = 0; i < N_BIG; i++) {
        float want = value(0, i);
        for (int r = 1; r < world; r++)
            want += value(r, i);
        bad += memcmp(&want, &x[i], sizeof(float)) != 0;
    }
    double d[2] = {rank + 0.25, -rank};
    bad += tbi_star_reduce(s, d, 2, TBI_STAR_F64, TBI_STAR_MAX) < 0;
    bad += d[0] != world - 1 + 0.25 || d[1] != 0;
    int32_t k = 10 * rank + 1;
    bad += tbi_star_reduce(s, &k, 1, TBI_STAR_I32, TBI_STAR_SUM) < 0;
    bad += k != 10 * world * (world - 1) / 2 + world;
    float mine[3] = {(float)rank, (float)(rank * 2), -1};
    bad += tbi_star_gather(s, mine, sizeof(mine), all) < 0;
    for (int r = 0; r < world; r++)
        bad += all[3 * r] != r || all[3 * r + 1] != 2 * r || all[3 * r + 2] != -1;
    for (int root = 0; root < world; root++) {
        char id[128];
        memset(id, rank == root ? 'a' + root : 0, sizeof(id));
        bad += tbi_star_bcast(s, id, sizeof(id), root) < 0;
        for (size_t i = 0; i < sizeof(id); i++)
            bad += id[i] != 'a' + root;
    }
    tbi_star_close(&s);
    free(x);
    free(all);
    if (bad)
        fprintf(stderr, "rank %d of %d: %d mismatches\n", rank, world, bad);
    return bad > 99 ? 99 : bad;
}

/* world processes, forked; the exit statuses in st[]. mode 1: the last rank stops before
 * the first collective; mode 2: it never joins. */
static void run_group(int world, int port, int mode, int *st)
{
    pid_t pid[8];
    for (int r = 0; r < world; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            int last = r == world - 1;
            if (mode == 2 && last)
                _exit(0);
            if (mode == 1 && last) {
                struct tbi_star *s = NULL;
                _exit(tbi_star_open(&s, r, world, "127.0.0.1", port) < 0 ? 100 : 0);
            }
            if (mode) {
                struct tbi_star *s = NULL;
                int rc = tbi_star_open(&s, r, world, "127.0.0.1", port);
                if (rc < 0) {
                    fprintf(stderr, "rank %d: %s\n", r, tb_errmsg());
                    _exit(rc == TB_ETIMEDOUT ? 3 : 100);
                }
                float x = 1;
                rc = tbi_star_reduce(s, &x, 1, TBI_STAR_F32, TBI_STAR_SUM);
                if (rc < 0)
                    fprintf(stderr, "rank %d: %s\n", r, tb_errmsg());
                _exit(rc < 0 && strstr(tb_errmsg(), "stopped") ? 4 : 100);
            }
            _exit(member(r, world, port));
        }
    }
    for (int r = 0; r < world; r++) {
        int w = 0;
        waitpid(pid[r], &w, 0);
        st[r] = WIFEXITED(w) ? WEXITSTATUS(w) : 200;
    }
}

int main(void)
{
    tbt_begin("launch");
    detect_cases();

    for (int world = 2; world <= 3; world++) {
        char what[64];
        snprintf(what, sizeof(what), "a TCP group of %d", world);
        tbt_case = what;
        int st[8];
        run_group(world, free_port(), 0, st);
        for (int r = 0; r < world; r++)
            CHECK_MSG(st[r] == 0, "rank %d of %d: exit %d", r, world, st[r]);
    }

    tbt_case = "a peer that stops";
    int st[8];
    run_group(3, free_port(), 1, st);
    CHECK_MSG(st[0] == 4 && st[1] == 4, "the others' reduction: exits %d %d (4: an error "
              "saying a peer stopped)", st[0], st[1]);

    tbt_case = "a peer that never comes";
    setenv("TUBELET_DIST_TIMEOUT", "2", 1);
    run_group(3, free_port(), 2, st);
    CHECK_MSG(st[0] == 3, "rank 0: exit %d (3: timed out waiting)", st[0]);
    unsetenv("TUBELET_DIST_TIMEOUT");

    tbt_case = "a process of another job at the port";
    int port = free_port();
    pid_t p = fork();
    if (p == 0) {
        struct tbi_star *s = NULL;
        _exit(tbi_star_open(&s, 0, 2, "127.0.0.1", port) < 0 && strstr(tb_errmsg(), "another")
                  ? 5
                  : 100);
    }
    struct tbi_star *s = NULL;
    setenv("TUBELET_DIST_TIMEOUT", "10", 1);
    int rc = tbi_star_open(&s, 1, 3, "127.0.0.1", port); /* thinks the job has 3 */
    unsetenv("TUBELET_DIST_TIMEOUT");
    int w = 0;
    waitpid(p, &w, 0);
    CHECK_MSG(rc < 0, "rank 1 of 3 joined rank 0 of 2");
    CHECK_MSG(WIFEXITED(w) && WEXITSTATUS(w) == 5, "rank 0: exit %d (5: refused, naming another "
              "job)", WIFEXITED(w) ? WEXITSTATUS(w) : -1);
    tbi_star_close(&s);
    TBT_EXIT();
}
