/* src/tensor/cuda/contrastive.cu - the contrastive loss and the logit scale (not yet on CUDA: each
 * op says so, and the parity harness fails on it). */
#include "tensor/cuda/cuda_common.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define TBC_PENDING(op, params)                                                                    \
    static int tbc_##op params                                                                     \
    {                                                                                              \
        return tbi_err(TB_EUNSUPPORTED, "%s: %s has no CUDA kernel yet", be->name, #op);           \
    }
TBC_PENDING(infonce_fwd, (tbi_backend * be, float *loss, double *work, const float *v,
                          const float *t, int N, int E, const double *scale))
TBC_PENDING(infonce_bwd, (tbi_backend * be, float *dv, float *dt, double *dscale, double *work,
                          int N, int E, const double *scale, int row0, int rows, float mult))
TBC_PENDING(logit_scale, (tbi_backend * be, double *scale, float *param))
TBC_PENDING(logit_scale_bwd,
            (tbi_backend * be, float *grad, const double *dscale, const double *scale))
#undef TBC_PENDING
#pragma GCC diagnostic pop
