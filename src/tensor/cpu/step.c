/* src/tensor/cpu/step.c - a training step's numbers on the backend (backend.h's struct
 * tbi_step_stats): the micro-batches' loss, the gradient's sum of squares, the non-finite
 * check and clipping factor, and the optimizers' updates that read that factor and flag in
 * backend memory, so the host learns of a non-finite step when it next reads the struct, not
 * by waiting inside every step. The arithmetic is the host loop's of before, operation for
 * operation (the same bits); the rules themselves are src/tensor/step_rules.h, shared with the
 * CUDA backend. Tests: tests/test_ops.c, tests/test_backend.c, tests/test_train.c. */
#include <math.h>

#include "tensor/backend.h"
#include "tensor/cpu/kernels.h"
#include "tensor/step_rules.h"

void tbi_step_loss(struct tbi_step_stats *st, const float *loss, int K)
{
    tbi_step_loss_rule(st, loss, K);
}

void tbi_step_check(struct tbi_step_stats *st, int span, int fused, double max_norm, int K,
                    int64_t step, int64_t epoch, int64_t batch)
{
    tbi_step_check_rule(st, span, fused, max_norm, K, step, epoch, batch);
}
