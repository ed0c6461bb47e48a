/* src/dist/dist.c - the process group behind dist.h: MPI where MPI's runtime started this
 * process (and the build has MPI), the TCP group of star.h where another launcher started
 * several, else a group of one. MPI is started only under its launcher, so a plain
 * `tubelet train` never pays MPI's start-up or prints its warnings. Every collective below is
 * one function over both transports. Tests: tests/test_launch.c, tests/test_dist.c. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "dist/star.h"
#include "tubelet/dist.h"

#ifdef TB_HAVE_MPI
#include <mpi.h>
#endif

static int joined_, rank_, world_ = 1, local_rank_;
static const char *transport_ = "";
static struct tbi_star *star_;

/* Buckets waiting for tb_dist_bucket_wait, oldest first. */
static struct bucket {
    float *x;
    size_t n;
} buckets_[TB_DIST_BUCKETS];
static int n_buckets_, first_bucket_;

#ifdef TB_HAVE_MPI
static int mpi_started_;
static MPI_Comm grads_ = MPI_COMM_NULL; /* the gradient buckets' own communicator */
/* MPI's counts are int: a collective goes in pieces of at most PIECE elements. */
#define PIECE ((size_t)INT_MAX / 2)

static int mpi_join(void)
{
    int provided = 0;
    /* Only the training thread calls MPI; the loader's threads never do. */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return tbi_err(TB_EDIST, "MPI_Init_thread failed");
    mpi_started_ = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    if (MPI_Comm_dup(MPI_COMM_WORLD, &grads_) != MPI_SUCCESS)
        return tbi_err(TB_EDIST, "MPI_Comm_dup failed");
    transport_ = "MPI";
    return 0;
}

static MPI_Datatype mpi_type(enum tbi_star_type t)
{
    return t == TBI_STAR_F32 ? MPI_FLOAT : t == TBI_STAR_F64 ? MPI_DOUBLE : MPI_INT;
}
#endif

int tb_dist_init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (joined_)
        return 0;
    struct tb_launch l;
    TBI_TRY(tb_launch_detect(&l));
    local_rank_ = l.local_rank;
    if (l.mpi) {
#ifdef TB_HAVE_MPI
        TBI_TRY(mpi_join());
#else
        if (l.world != 1)
            return tbi_err(TB_EUNSUPPORTED, "started by %s, but this tubelet was built without "
                           "MPI (install libopenmpi-dev and rebuild, or start it with torchrun)",
                           l.name);
#endif
    } else if (l.world > 1) {
        if (!l.addr[0] || !l.port)
            return tbi_err(TB_EINVAL, "%s started %d processes that no MPI connects: they meet "
                           "at MASTER_ADDR:MASTER_PORT, which are not both set (set them to the "
                           "first node's address and a free port%s)", l.name, l.world,
                           l.kind == TB_LAUNCH_SLURM ? ", or run srun --mpi=pmix" : "");
        TBI_TRY(tbi_star_open(&star_, l.rank, l.world, l.addr, l.port));
        rank_ = l.rank, world_ = l.world;
        transport_ = "TCP";
    }
    joined_ = 1;
    return 0;
}

void tb_dist_finalize(void)
{
#ifdef TB_HAVE_MPI
    if (mpi_started_) {
        if (grads_ != MPI_COMM_NULL)
            MPI_Comm_free(&grads_);
        MPI_Finalize();
    }
    mpi_started_ = 0;
    grads_ = MPI_COMM_NULL;
#endif
    tbi_star_close(&star_);
    n_buckets_ = first_bucket_ = 0;
    joined_ = rank_ = local_rank_ = 0;
    world_ = 1;
    transport_ = "";
}

void tb_dist_finalize_failed(void)
{
#ifdef TB_HAVE_MPI
    mpi_started_ = 0; /* no MPI_Finalize: see dist.h */
    grads_ = MPI_COMM_NULL;
#endif
    tb_dist_finalize();
}

int tb_dist_rank(void)
{
    return rank_;
}

int tb_dist_world(void)
{
    return world_;
}

int tb_dist_local_rank(void)
{
    return local_rank_;
}

const char *tb_dist_transport(void)
{
    return transport_;
}

/* x (n elements) = op over all processes, in place; grads: the buckets' communicator. */
static int all_reduce(void *x, size_t n, enum tbi_star_type t, enum tbi_star_op op, int grads)
{
    if (world_ < 2 || !n)
        return 0;
    if (star_)
        return tbi_star_reduce(star_, x, n, t, op);
#ifdef TB_HAVE_MPI
    size_t es = t == TBI_STAR_F64 ? 8 : 4;
    for (size_t off = 0; off < n; off += PIECE) {
        int cnt = (int)(n - off < PIECE ? n - off : PIECE);
        if (MPI_Allreduce(MPI_IN_PLACE, (char *)x + off * es, cnt, mpi_type(t),
                          op == TBI_STAR_SUM ? MPI_SUM : MPI_MAX,
                          grads ? grads_ : MPI_COMM_WORLD) != MPI_SUCCESS)
            return tbi_err(TB_EDIST, "MPI_Allreduce of %zu elements failed", n);
    }
#else
    (void)grads;
#endif
    return 0;
}

static void scale(float *x, size_t n)
{
    float inv = 1.0f / (float)world_;
    for (size_t i = 0; i < n; i++)
        x[i] *= inv;
}

int tb_dist_mean_f32(float *x, size_t n)
{
    if (world_ < 2)
        return 0;
    TBI_TRY(all_reduce(x, n, TBI_STAR_F32, TBI_STAR_SUM, 0));
    scale(x, n);
    return 0;
}

int tb_dist_sum_f64(double *x, size_t n)
{
    return all_reduce(x, n, TBI_STAR_F64, TBI_STAR_SUM, 0);
}

int tb_dist_gather_f32(const float *x, size_t n, float *all)
{
    if (n >= (size_t)INT_MAX)
        return tbi_err(TB_EINVAL, "gathering %zu floats a process: more than MPI's count", n);
    if (world_ < 2) {
        memcpy(all, x, sizeof(float) * n);
        return 0;
    }
    if (star_)
        return tbi_star_gather(star_, x, sizeof(float) * n, all);
#ifdef TB_HAVE_MPI
    if (MPI_Allgather(x, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, MPI_COMM_WORLD) !=
        MPI_SUCCESS)
        return tbi_err(TB_EDIST, "MPI_Allgather of %zu floats failed", n);
#endif
    return 0;
}

int tb_dist_bcast(void *x, size_t bytes, int root)
{
    if (world_ < 2 || !bytes)
        return 0;
    if (root < 0 || root >= world_)
        return tbi_err(TB_EINVAL, "a broadcast from rank %d of %d", root, world_);
    if (star_)
        return tbi_star_bcast(star_, x, bytes, root);
#ifdef TB_HAVE_MPI
    for (size_t off = 0; off < bytes; off += PIECE) {
        int cnt = (int)(bytes - off < PIECE ? bytes - off : PIECE);
        if (MPI_Bcast((char *)x + off, cnt, MPI_BYTE, root, MPI_COMM_WORLD) != MPI_SUCCESS)
            return tbi_err(TB_EDIST, "MPI_Bcast of %zu bytes failed", bytes);
    }
#endif
    return 0;
}

int tb_dist_max_int(int flag)
{
    int32_t v = flag;
    if (all_reduce(&v, 1, TBI_STAR_I32, TBI_STAR_MAX, 0) < 0)
        return flag;
    return v;
}

/* Reduces the oldest bucket waiting and scales it to the mean. */
static int bucket_end(void)
{
    struct bucket *b = &buckets_[first_bucket_];
    first_bucket_ = (first_bucket_ + 1) % TB_DIST_BUCKETS;
    n_buckets_--;
    if (all_reduce(b->x, b->n, TBI_STAR_F32, TBI_STAR_SUM, 1) < 0)
        return tbi_err_prefix(TB_EDIST, "the all-reduce of a gradient bucket of %zu floats",
                              b->n);
    scale(b->x, b->n);
    return 0;
}

int tb_dist_bucket_start(float *x, size_t n)
{
    if (world_ < 2 || n == 0)
        return 0;
    if (n_buckets_ == TB_DIST_BUCKETS)
        TBI_TRY(bucket_end());
    struct bucket *b = &buckets_[(first_bucket_ + n_buckets_) % TB_DIST_BUCKETS];
    b->x = x, b->n = n;
    n_buckets_++;
    return 0;
}

int tb_dist_bucket_wait(void)
{
    while (n_buckets_ > 0)
        TBI_TRY(bucket_end());
    return 0;
}
