/* src/tensor/cuda/step.cu - a step's numbers: the gradient norm, the loss, the checks (not yet on
 * CUDA: each op says so, and the parity harness fails on it). */
#include "tensor/cuda/cuda_common.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define TBC_PENDING(op, params)                                                                    \
    static int tbc_##op params                                                                     \
    {                                                                                              \
        return tbi_err(TB_EUNSUPPORTED, "%s: %s has no CUDA kernel yet", be->name, #op);           \
    }
TBC_PENDING(sum_squares_acc, (tbi_backend * be, double *acc, const float *x, size_t n))
TBC_PENDING(step_loss, (tbi_backend * be, struct tbi_step_stats *st, const float *loss, int K))
TBC_PENDING(step_check, (tbi_backend * be, struct tbi_step_stats *st, int span, int fused,
                         double max_norm, int K, int64_t step, int64_t epoch, int64_t batch))
#undef TBC_PENDING
#pragma GCC diagnostic pop
