/* src/tensor/cuda/tokens.cu - tokens, positions, pooling, gathers and the embedding backward (not
 * yet on CUDA: each op says so, and the parity harness fails on it). */
#include "tensor/cuda/cuda_common.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define TBC_PENDING(op, params)                                                                    \
    static int tbc_##op params                                                                     \
    {                                                                                              \
        return tbi_err(TB_EUNSUPPORTED, "%s: %s has no CUDA kernel yet", be->name, #op);           \
    }
TBC_PENDING(tokens_fwd, (tbi_backend * be, float *x, const float *tokens, const float *cls,
                         const float *pos, const int32_t *idx, int B, int N, int NC, int D))
TBC_PENDING(tokens_bwd,
            (tbi_backend * be, float *dtokens, float *dcls, float *dpos, const float *dx,
             const int32_t *idx, int B, int N, int NC, int NPOS, int D))
TBC_PENDING(pos_tile_fwd, (tbi_backend * be, float *pos, const float *spatial,
                           const float *temporal, int T, int S, int D))
TBC_PENDING(pos_tile_bwd, (tbi_backend * be, float *dspatial, float *dtemporal, const float *dpos,
                           int T, int S, int D))
TBC_PENDING(pool_fwd,
            (tbi_backend * be, int pool, float *pooled, const float *x, int B, int N, int D))
TBC_PENDING(pool_bwd,
            (tbi_backend * be, int pool, float *dx, const float *dpooled, int B, int N, int D))
TBC_PENDING(transpose, (tbi_backend * be, float *out, const float *in, int R, int C))
TBC_PENDING(embed_bwd, (tbi_backend * be, float *dtable, const float *dx, const int32_t *ids, int R,
                        int V, int D))
TBC_PENDING(gather_rows, (tbi_backend * be, float *dst, const float *src, const int32_t *idx, int B,
                          int N, int NK, int len))
TBC_PENDING(scatter_rows, (tbi_backend * be, float *dst, const float *src, const int32_t *idx,
                           int B, int N, int NK, int len))
#undef TBC_PENDING
#pragma GCC diagnostic pop
