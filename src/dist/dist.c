/* src/dist/dist.c - the process group behind dist.h: MPI when the build has it and mpirun
 * started us, else a group of one. MPI is started only under a launcher (OpenMPI's, or any
 * PMI one), so a plain `tubelet train` never pays MPI's start-up or prints its warnings.
 * Tests: tests/test_dist.c. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "tubelet/dist.h"

#ifdef TB_HAVE_MPI
#include <mpi.h>
#endif

static int rank_, world_ = 1;

#ifdef TB_HAVE_MPI
static int started_;

static int under_launcher(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}
#endif

int tb_dist_init(int *argc, char ***argv)
{
#ifdef TB_HAVE_MPI
    if (started_ || !under_launcher())
        return 0;
    int provided = 0;
    /* Only the training thread calls MPI; the loader's threads never do. */
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return tbi_err(TB_EDIST, "MPI_Init_thread failed");
    started_ = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    return 0;
#else
    (void)argc;
    (void)argv;
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (size && atoi(size) > 1)
        return tbi_err(TB_EUNSUPPORTED, "started by mpirun, but this tubelet was built without MPI "
                       "(install libopenmpi-dev and rebuild)");
    return 0;
#endif
}

void tb_dist_finalize(void)
{
#ifdef TB_HAVE_MPI
    if (started_)
        MPI_Finalize();
    started_ = 0;
#endif
    rank_ = 0;
    world_ = 1;
}

int tb_dist_rank(void)
{
    return rank_;
}

int tb_dist_world(void)
{
    return world_;
}

int tb_dist_mean_f32(float *x, size_t n)
{
#ifdef TB_HAVE_MPI
    if (world_ > 1) {
        for (size_t off = 0; off < n; off += INT_MAX / 2) {
            int cnt = (int)(n - off < (size_t)INT_MAX / 2 ? n - off : (size_t)INT_MAX / 2);
            if (MPI_Allreduce(MPI_IN_PLACE, x + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) !=
                MPI_SUCCESS)
                return tbi_err(TB_EDIST, "MPI_Allreduce of %zu floats failed", n);
        }
        float inv = 1.0f / (float)world_;
        for (size_t i = 0; i < n; i++)
            x[i] *= inv;
    }
#else
    (void)x;
    (void)n;
#endif
    return 0;
}

int tb_dist_sum_f64(double *x, size_t n)
{
#ifdef TB_HAVE_MPI
    for (size_t off = 0; world_ > 1 && off < n; off += INT_MAX / 2) {
        int cnt = (int)(n - off < (size_t)INT_MAX / 2 ? n - off : (size_t)INT_MAX / 2);
        if (MPI_Allreduce(MPI_IN_PLACE, x + off, cnt, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) !=
            MPI_SUCCESS)
            return tbi_err(TB_EDIST, "MPI_Allreduce of %zu doubles failed", n);
    }
#else
    (void)x;
    (void)n;
#endif
    return 0;
}

int tb_dist_gather_f32(const float *x, size_t n, float *all)
{
    if (n >= (size_t)INT_MAX)
        return tbi_err(TB_EINVAL, "gathering %zu floats a process: more than MPI's count", n);
#ifdef TB_HAVE_MPI
    if (world_ > 1) {
        if (MPI_Allgather(x, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, MPI_COMM_WORLD) !=
            MPI_SUCCESS)
            return tbi_err(TB_EDIST, "MPI_Allgather of %zu floats failed", n);
        return 0;
    }
#endif
    memcpy(all, x, sizeof(float) * n);
    return 0;
}

int tb_dist_max_int(int flag)
{
#ifdef TB_HAVE_MPI
    if (world_ > 1) {
        int all = flag;
        if (MPI_Allreduce(&flag, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) == MPI_SUCCESS)
            return all;
    }
#endif
    return flag;
}
