/* src/tensor/cuda/step.cu - a training step's numbers on the device (backend.h's struct
 * tbi_step_stats, in device memory): the gradient's sum of squares in double, and the
 * micro-batches' loss and the non-finite check with the clipping factor, the rules of
 * src/tensor/step_rules.h (the CPU's own code) run by a kernel of one thread, so the host
 * never waits inside a step. The sum of squares: a fixed grid for a given n, each thread's
 * grid-stride partial, a tree in shared memory per block, then one thread adds the blocks'
 * partials in order to *acc: the same bits every run, no atomics. Tests: tests/test_backend.c
 * (parity). */
#include "tensor/cuda/cuda_common.h"
#include "tensor/step_rules.h"

enum { SS_THREADS = 256, SS_MAX_BLOCKS = 1024 };

/* part[blockIdx.x] = the block's sum of x[i]^2 in double */
__global__ void __launch_bounds__(SS_THREADS)
    step_squares_kernel(double *part, const float *x, size_t n)
{
    DYNAMIC_SMEM(smem);
    double *tree = (double *)smem;
    double s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float v = GL_LD(&x[i]);
        s += (double)v * v;
    }
    SH_ST(&tree[threadIdx.x], s);
    __syncthreads();
    for (int half = SS_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half)
            SH_ST(&tree[threadIdx.x], SH_LD(&tree[threadIdx.x]) + SH_LD(&tree[threadIdx.x + half]));
        __syncthreads();
    }
    if (threadIdx.x == 0)
        GL_ST(&part[blockIdx.x], SH_LD(&tree[0]));
}

__global__ void step_squares_total_kernel(double *acc, const double *part, int blocks)
{
    double s = 0;
    for (int b = 0; b < blocks; b++)
        s += GL_LD(&part[b]);
    GL_ST(acc, GL_LD(acc) + s);
}

__global__ void step_loss_kernel(struct tbi_step_stats *st, const float *loss, int K)
{
    tbi_step_loss_rule(st, loss, K);
}

__global__ void step_check_kernel(struct tbi_step_stats *st, int span, int fused, double max_norm,
                                  int K, int64_t step, int64_t epoch, int64_t batch)
{
    tbi_step_check_rule(st, span, fused, max_norm, K, step, epoch, batch);
}

static int tbc_sum_squares_acc(tbi_backend *be, double *acc, const float *x, size_t n)
{
    if (!acc || (n && !x))
        return tbi_err(TB_EINVAL, "%s sum_squares_acc: no accumulator or no data", be->name);
    if (!n)
        return 0;
    unsigned blocks = tbc_blocks(n, SS_THREADS);
    blocks = blocks < (unsigned)SS_MAX_BLOCKS ? blocks : (unsigned)SS_MAX_BLOCKS;
    void *part = NULL;
    TBI_TRY(tbc_scratch(be, sizeof(double) * blocks, &part));
    TBC_LAUNCH(step_squares_kernel, blocks, SS_THREADS, sizeof(double) * SS_THREADS,
               tbc_stream(be), (double *)part, x, n);
    TBI_TRY(tbc_launched(be, "sum_squares_acc"));
    TBC_LAUNCH(step_squares_total_kernel, 1, 1, 0, tbc_stream(be), acc, (const double *)part,
               (int)blocks);
    return tbc_launched(be, "sum_squares_acc");
}

static int tbc_step_loss(tbi_backend *be, struct tbi_step_stats *st, const float *loss, int K)
{
    if (!st || !loss || K <= 0)
        return tbi_err(TB_EINVAL, "%s step_loss: K %d", be->name, K);
    TBC_LAUNCH(step_loss_kernel, 1, 1, 0, tbc_stream(be), st, loss, K);
    return tbc_launched(be, "step_loss");
}

static int tbc_step_check(tbi_backend *be, struct tbi_step_stats *st, int span, int fused,
                          double max_norm, int K, int64_t step, int64_t epoch, int64_t batch)
{
    if (!st || K <= 0)
        return tbi_err(TB_EINVAL, "%s step_check: K %d", be->name, K);
    TBC_LAUNCH(step_check_kernel, 1, 1, 0, tbc_stream(be), st, span, fused, max_norm, K, step,
               epoch, batch);
    return tbc_launched(be, "step_check");
}
