/* src/tensor/cuda/video.cu - the input op and the clip augmentations (not yet on CUDA: each op says
 * so, and the parity harness fails on it). */
#include "tensor/cuda/cuda_common.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define TBC_PENDING(op, params)                                                                    \
    static int tbc_##op params                                                                     \
    {                                                                                              \
        return tbi_err(TB_EUNSUPPORTED, "%s: %s has no CUDA kernel yet", be->name, #op);           \
    }
TBC_PENDING(normalize, (tbi_backend * be, float *out, const uint8_t *clips, const uint8_t *flip,
                        int B, int T, int H, int W, const float *host_mean, const float *host_std))
TBC_PENDING(patchify, (tbi_backend * be, float *cols, const float *video, int B, int C, int T,
                       int H, int W, int TU, int P))
TBC_PENDING(mix_clips, (tbi_backend * be, float *x, int B, int CT, int H, int W, float lam,
                        const int *host_box))
TBC_PENDING(erase_boxes, (tbi_backend * be, float *x, int B, int C, int T, int H, int W,
                          const int32_t *host_boxes, uint64_t seed, const uint64_t *host_streams))
#undef TBC_PENDING
#pragma GCC diagnostic pop
