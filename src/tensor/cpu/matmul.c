/* src/tensor/cpu/matmul.c - Linear layers through tbi_sgemm (gemm.c); the bias and its gradient
 * by hand (OpenMP). Tests: tests/test_ops.c (finite differences). */
#include <string.h>

#include "tensor/ops.h"

void tbi_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int M,
                    int K, int N)
{
    /* out (M, N) = inp (M, K) @ w (N, K)^T + bias */
    tbi_sgemm_bias(0, 1, M, N, K, inp, K, w, K, bias, out, N);
}

void tbi_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                    const float *w, int M, int K, int N)
{
    /* dinp (M, K) = dout (M, N) @ w (N, K) */
    if (dinp)
        tbi_sgemm(0, 0, M, K, N, 1.0f, dout, N, w, K, 0.0f, dinp, K);
    /* dw (N, K) = dout^T (N, M) @ inp (M, K), with dbias from the same pass over dout */
    if (dw && dbias)
        tbi_sgemm_tn_colsum(N, K, M, dout, N, inp, K, dw, K, dbias);
    else if (dw)
        tbi_sgemm(1, 0, N, K, M, 1.0f, dout, N, inp, K, 0.0f, dw, K);
    else if (dbias)
        tbi_colsum(dbias, dout, M, N);
}
