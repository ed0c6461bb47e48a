/* src/tensor/cuda/xent.cu - softmax cross-entropy, hard and soft targets (not yet on CUDA: each op
 * says so, and the parity harness fails on it). */
#include "tensor/cuda/cuda_common.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define TBC_PENDING(op, params)                                                                    \
    static int tbc_##op params                                                                     \
    {                                                                                              \
        return tbi_err(TB_EUNSUPPORTED, "%s: %s has no CUDA kernel yet", be->name, #op);           \
    }
TBC_PENDING(xent_fwd, (tbi_backend * be, float *loss, float *probs, const float *logits,
                       const int64_t *targets, int B, int K, float smoothing))
TBC_PENDING(xent_bwd, (tbi_backend * be, float *dlogits, const float *probs, const int64_t *targets,
                       int B, int K, float smoothing))
TBC_PENDING(xent_soft_fwd, (tbi_backend * be, float *loss, float *probs, const float *logits,
                            const float *targets, int B, int K))
TBC_PENDING(xent_soft_bwd, (tbi_backend * be, float *dlogits, const float *probs,
                            const float *targets, int B, int K))
#undef TBC_PENDING
#pragma GCC diagnostic pop
