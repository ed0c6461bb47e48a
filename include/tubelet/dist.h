/* include/tubelet/dist.h - data parallelism across processes: one process per device (or per
 * CPU socket) under mpirun, gradients averaged with MPI all-reduce. Without mpirun (or in a
 * build without MPI) there is one process and every call is a no-op. Tests:
 * tests/test_dist.c (two processes with batch b equal one process with batch 2b). */
#ifndef TUBELET_DIST_H
#define TUBELET_DIST_H

#include <stddef.h>

#include "tubelet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Join the job mpirun started (MPI_Init) when this process was started by one; else a job
 * of one. Call once, before any thread is started; returns 0 or a TB_E* code. */
TB_API int tb_dist_init(int *argc, char ***argv);
/* Leave the job (MPI_Finalize). */
TB_API void tb_dist_finalize(void);
TB_API int tb_dist_rank(void);
TB_API int tb_dist_world(void);

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
