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
static MPI_Comm grads_ = MPI_COMM_NULL; /* the gradient buckets' own communicator */
/* Buckets waiting for tb_dist_bucket_wait, oldest first; each reduced in pieces of at most
 * INT_MAX / 2 floats (MPI's counts are int). */
#define PIECE ((size_t)INT_MAX / 2)
static struct bucket {
    float *x;
    size_t n;
} buckets_[TB_DIST_BUCKETS];
static int n_buckets_, first_bucket_;

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
    if (MPI_Comm_dup(MPI_COMM_WORLD, &grads_) != MPI_SUCCESS)
        return tbi_err(TB_EDIST, "MPI_Comm_dup failed");
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
    if (started_) {
        if (grads_ != MPI_COMM_NULL)
            MPI_Comm_free(&grads_);
        MPI_Finalize();
    }
    started_ = 0;
    n_buckets_ = first_bucket_ = 0;
    grads_ = MPI_COMM_NULL;
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

#ifdef TB_HAVE_MPI
/* Reduces the oldest bucket waiting and scales it to the mean. */
static int bucket_end(void)
{
    struct bucket *b = &buckets_[first_bucket_];
    for (size_t off = 0; off < b->n; off += PIECE) {
        int cnt = (int)(b->n - off < PIECE ? b->n - off : PIECE);
        if (MPI_Allreduce(MPI_IN_PLACE, b->x + off, cnt, MPI_FLOAT, MPI_SUM, grads_) !=
            MPI_SUCCESS)
            return tbi_err(TB_EDIST, "the all-reduce of a gradient bucket of %zu floats failed",
                           b->n);
    }
    float inv = 1.0f / (float)world_;
    for (size_t i = 0; i < b->n; i++)
        b->x[i] *= inv;
    first_bucket_ = (first_bucket_ + 1) % TB_DIST_BUCKETS;
    n_buckets_--;
    return 0;
}
#endif

int tb_dist_bucket_start(float *x, size_t n)
{
#ifdef TB_HAVE_MPI
    if (world_ < 2 || n == 0)
        return 0;
    if (n_buckets_ == TB_DIST_BUCKETS)
        TBI_TRY(bucket_end());
    struct bucket *b = &buckets_[(first_bucket_ + n_buckets_) % TB_DIST_BUCKETS];
    b->x = x, b->n = n;
    n_buckets_++;
    return 0;
#else
    (void)x;
    (void)n;
    return 0;
#endif
}

int tb_dist_bucket_wait(void)
{
#ifdef TB_HAVE_MPI
    while (n_buckets_ > 0)
        TBI_TRY(bucket_end());
#endif
    return 0;
}
