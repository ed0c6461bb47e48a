/* src/tensor/cuda/mae.cu - VideoMAE's ops (not yet on CUDA: each op says so, and the parity
 * harness fails on it). */
#include "tensor/cuda/cuda_common.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define TBC_PENDING(op, params)                                                                    \
    static int tbc_##op params                                                                     \
    {                                                                                              \
        return tbi_err(TB_EUNSUPPORTED, "%s: %s has no CUDA kernel yet", be->name, #op);           \
    }
TBC_PENDING(tokens_fill_fwd, (tbi_backend * be, float *x, const float *src, const float *fill,
                              const float *pos, const int32_t *idx, int B, int NS, int NF, int D))
TBC_PENDING(tokens_fill_bwd, (tbi_backend * be, float *dsrc, float *dfill, const float *dx, int B,
                              int NS, int NF, int D))
TBC_PENDING(patch_target, (tbi_backend * be, float *out, const float *cols, int R, int C, int PP,
                           const float *host_mean, const float *host_std, int norm))
TBC_PENDING(mse_fwd, (tbi_backend * be, float *loss, tbi_t pred, const float *tgt, const float *w,
                      int R, int C))
TBC_PENDING(mse_bwd, (tbi_backend * be, float *dpred, tbi_t pred, const float *tgt, const float *w,
                      int R, int C))
#undef TBC_PENDING
#pragma GCC diagnostic pop
