/* src/tensor/cuda/xent.cu - softmax cross-entropy with label smoothing (PyTorch's) or soft
 * targets (timm's SoftTargetCrossEntropy): one thread per row runs the CPU's own row
 * (src/tensor/xent_rules.h: max in float, exponentials, log-sum-exp and loss in double,
 * probabilities as float); the rows' losses into scratch, then one thread adds them in
 * row order and writes the mean to *loss on the device; the gradients by the CPU's rules too.
 * No atomics. A label outside the
 * classes (the CPU op refuses it; here the labels are device memory) makes its row's loss and
 * gradient NaN, which the step's check reports as a non-finite loss: never a silent answer.
 * Tests: tests/test_backend.c (parity). */
#include "tensor/cuda/cuda_common.h"
#include "tensor/xent_rules.h"

enum { XENT_THREADS = 128 };

/* Row b of logits (B, K): its probabilities, and its loss into rows[b]. Hard targets (targets)
 * with smoothing, or soft ones (soft, (B, K)). */
__global__ void xent_rows_kernel(double *rows, float *probs, const float *logits,
                                 const int64_t *targets, const float *soft, int B, int K,
                                 float smoothing)
{
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B)
        return;
    const float *z = logits + (size_t)b * K;
    float *p = probs + (size_t)b * K;
    if (soft) {
        GL_ST(&rows[b], tbi_xent_soft_row(p, z, soft + (size_t)b * K, K));
        return;
    }
    const int64_t t = GL_LD(&targets[b]);
    GL_ST(&rows[b], t >= 0 && t < K ? tbi_xent_hard_row(p, z, t, K, smoothing) : nan(""));
}

/* *loss = the mean of rows (B), added in order. */
__global__ void xent_mean_kernel(float *loss, const double *rows, int B)
{
    double total = 0;
    for (int b = 0; b < B; b++)
        total += GL_LD(&rows[b]);
    GL_ST(loss, (float)(total / B));
}

/* dlogits = (probs - q) / B, q the smoothed one-hot of the target (NaN for a bad label). */
__global__ void xent_bwd_kernel(float *dlogits, const float *probs, const int64_t *targets, int B,
                                int K, tbi_xent_q q)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)B * K;
         i += (size_t)gridDim.x * blockDim.x) {
        const int64_t t = GL_LD(&targets[i / K]);
        const float qi = t < 0 || t >= K ? nanf("") : (int64_t)(i % K) == t ? q.on : q.off;
        GL_ST(&dlogits[i], tbi_xent_hard_grad_rule(GL_LD(&probs[i]), qi, q.inv_b));
    }
}

/* dlogits = (probs * sum_k targets - targets) / B, one thread per row. */
__global__ void xent_soft_bwd_kernel(float *dlogits, const float *probs, const float *targets,
                                     int B, int K, float inv_b)
{
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B)
        return;
    tbi_xent_soft_grad_row(dlogits + (size_t)b * K, probs + (size_t)b * K,
                           targets + (size_t)b * K, K, inv_b);
}

static int xent_args(tbi_backend *be, const char *op, int B, int K)
{
    if (B <= 0 || K <= 0)
        return tbi_err(TB_EINVAL, "%s %s: B %d K %d", be->name, op, B, K);
    return 0;
}

static int xent_fwd(tbi_backend *be, const char *op, float *loss, float *probs,
                    const float *logits, const int64_t *targets, const float *soft, int B, int K,
                    float smoothing)
{
    TBI_TRY(xent_args(be, op, B, K));
    void *rows = NULL;
    TBI_TRY(tbc_scratch(be, sizeof(double) * (size_t)B, &rows));
    const unsigned blocks = (unsigned)((B + XENT_THREADS - 1) / XENT_THREADS);
    TBC_LAUNCH(xent_rows_kernel, blocks, XENT_THREADS, 0, tbc_stream(be), (double *)rows, probs,
               logits, targets, soft, B, K, smoothing);
    TBI_TRY(tbc_launched(be, op));
    TBC_LAUNCH(xent_mean_kernel, 1, 1, 0, tbc_stream(be), loss, (const double *)rows, B);
    return tbc_launched(be, op);
}

static int tbc_xent_fwd(tbi_backend *be, float *loss, float *probs, const float *logits,
                        const int64_t *targets, int B, int K, float smoothing)
{
    return xent_fwd(be, "xent_fwd", loss, probs, logits, targets, NULL, B, K, smoothing);
}

static int tbc_xent_bwd(tbi_backend *be, float *dlogits, const float *probs,
                        const int64_t *targets, int B, int K, float smoothing)
{
    TBI_TRY(xent_args(be, "xent_bwd", B, K));
    TBC_LAUNCH(xent_bwd_kernel, tbc_blocks((size_t)B * K, 256), 256, 0, tbc_stream(be), dlogits,
               probs, targets, B, K, tbi_xent_q_rule(B, K, smoothing));
    return tbc_launched(be, "xent_bwd");
}

static int tbc_xent_soft_fwd(tbi_backend *be, float *loss, float *probs, const float *logits,
                             const float *targets, int B, int K)
{
    return xent_fwd(be, "xent_soft_fwd", loss, probs, logits, NULL, targets, B, K, 0);
}

static int tbc_xent_soft_bwd(tbi_backend *be, float *dlogits, const float *probs,
                             const float *targets, int B, int K)
{
    TBI_TRY(xent_args(be, "xent_soft_bwd", B, K));
    const unsigned blocks = (unsigned)((B + XENT_THREADS - 1) / XENT_THREADS);
    TBC_LAUNCH(xent_soft_bwd_kernel, blocks, XENT_THREADS, 0, tbc_stream(be), dlogits, probs,
               targets, B, K, 1.0f / B);
    return tbc_launched(be, "xent_soft_bwd");
}
