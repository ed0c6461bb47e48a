/* include/tubelet/dist.h - data parallelism across processes: one process per device (or per
 * CPU socket), started by mpirun/mpiexec, srun or torchrun; gradients averaged over all.
 * Processes that MPI started talk through MPI; the others (torchrun's, srun's without MPI)
 * through TCP, meeting at MASTER_ADDR:MASTER_PORT (src/dist/star.h). Without a launcher
 * there is one process and every call is a no-op. Tests: tests/test_launch.c (the launchers'
 * variables, the TCP group), tests/test_dist.c (N processes with batch b equal one process
 * with batch N b, under each launcher). */
#ifndef TUBELET_DIST_H
#define TUBELET_DIST_H

#include <stddef.h>

#include "tubelet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Who started this process, from the launchers' variables (the only place that reads them):
 * Open MPI's OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}; MPICH's PMI_RANK, PMI_SIZE,
 * MPI_LOCALRANKID, MPI_LOCALNRANKS; srun --mpi=pmix's PMIX_RANK with SLURM_STEP_NUM_TASKS and
 * SLURM_LOCALID; torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; srun's
 * SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID (a batch script itself is no launcher);
 * and MASTER_ADDR, MASTER_PORT. MPI's variables win over torchrun's, torchrun's over Slurm's
 * (torchrun inside an allocation). */
enum tb_launcher { TB_LAUNCH_NONE, TB_LAUNCH_MPI, TB_LAUNCH_TORCHRUN, TB_LAUNCH_SLURM };
struct tb_launch {
    enum tb_launcher kind;
    const char *name;        /* "mpirun (Open MPI)", "torchrun", "srun", ...; "" for none */
    int rank, world;         /* world 0: MPI says (PMIx without Slurm's count) */
    int local_rank;          /* this process's index on its machine: it picks the GPU */
    int local_world;         /* processes on this machine; 0 where the launcher does not say */
    int mpi;                 /* MPI's runtime started it: MPI_Init joins the job */
    char addr[256];          /* MASTER_ADDR ("" unset) */
    int port;                /* TUBELET_PORT, else MASTER_PORT (its successor where torchrun's
                              * agent serves its store there); 0 unset */
};
/* Fills l (a lone process where no launcher's variable is set); TB_EINVAL naming the variable
 * where one is not a number or a rank is out of its range. */
TB_API int tb_launch_detect(struct tb_launch *l);

/* Join the job the launcher started: MPI_Init where MPI started this process, the TCP group at
 * MASTER_ADDR:MASTER_PORT where another launcher started more than one; else a job of one.
 * Call once, before any thread is started; returns 0 or a TB_E* code (MPI's variables in a
 * build without MPI, or processes without MPI and without a meeting point, are refused: never
 * N lone runs). */
TB_API int tb_dist_init(int *argc, char ***argv);
/* Leave the job (MPI_Finalize, or the TCP group closed). */
TB_API void tb_dist_finalize(void);
/* Leave it after a failure the other processes may not know of: the TCP group closed (their
 * next collective fails, naming this rank), MPI left unfinalised (MPI_Finalize would wait for
 * processes stuck in a collective; the launcher ends the whole job once this process exits
 * with a failure). The CLI's error path. */
TB_API void tb_dist_finalize_failed(void);
TB_API int tb_dist_rank(void);
TB_API int tb_dist_world(void);
/* The launcher's local rank (0 alone): which of the machine's GPUs this process takes. */
TB_API int tb_dist_local_rank(void);
/* How the processes talk: "MPI", "TCP" or "" (one process). */
TB_API const char *tb_dist_transport(void);
/* x (bytes) = root's x. */
TB_API int tb_dist_bcast(void *x, size_t bytes, int root);

/* x (n) = the mean of x over all processes, in place (one call: one bucket). */
TB_API int tb_dist_mean_f32(float *x, size_t n);
/* x (n) = the sum of x over all processes, in place. */
TB_API int tb_dist_sum_f64(double *x, size_t n);
/* all (world n) = every process's x (n), in rank order (all may not be x; one process: a
 * copy). n below 2^31. */
TB_API int tb_dist_gather_f32(const float *x, size_t n, float *all);
/* The largest flag of all processes (so all stop at the same step). */
TB_API int tb_dist_max_int(int flag);

/* Gradient buckets: tb_dist_bucket_start hands over x (n floats) as the next bucket, and
 * tb_dist_bucket_wait replaces every bucket handed over by its mean over all processes (in
 * place, in the order given, on a communicator of its own, so a process that stopped early
 * never mismatches the others' collectives). x must stay untouched in between. Every
 * process hands over the same buckets in the same order. The all-reduces run in the wait,
 * blocking: MPI's non-blocking one (OpenMPI's, which moves data only inside MPI calls) made a
 * two-process step 6% slower here, where the blocking ones made it 7% faster than one
 * staged all-reduce (docs/PERFORMANCE.md, section 10). A bucket past TB_DIST_BUCKETS first
 * reduces the oldest. One process: nothing to do. Returns 0 or TB_EDIST. */
#define TB_DIST_BUCKETS 64
TB_API int tb_dist_bucket_start(float *x, size_t n);
TB_API int tb_dist_bucket_wait(void);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_DIST_H */
