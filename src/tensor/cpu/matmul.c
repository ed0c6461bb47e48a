/* src/tensor/cpu/matmul.c - Linear layers through tbi_sgemm (gemm.c); the bias and its gradient
 * by hand (OpenMP), or from the weight gradient's pass over dout. The backward's two products
 * run side by side only on the AVX-512 kernel with two threads (a tuning for it, not a
 * general scheme). Tests: tests/test_ops.c (finite differences; the backward on 2, 3 and 8
 * threads and on a team of one against one thread, to the bit where the kernel promises it). */
#include <omp.h>
#include <string.h>

#include "tensor/cpu/kernels.h"

void tbi_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int M,
                    int K, int N)
{
    /* out (M, N) = inp (M, K) @ w (N, K)^T + bias */
    tbi_sgemm_bias(0, 1, M, N, K, inp, K, w, K, bias, out, N);
}

static void dinp_of(float *dinp, const float *dout, const float *w, int M, int K, int N)
{
    /* dinp (M, K) = dout (M, N) @ w (N, K) */
    tbi_sgemm(0, 0, M, K, N, 1.0f, dout, N, w, K, 0.0f, dinp, K);
}

static void dw_of(float *dw, float *dbias, const float *dout, const float *inp, int M, int K,
                  int N)
{
    /* dw (N, K) = dout^T (N, M) @ inp (M, K), with dbias from the same pass over dout */
    if (dw && dbias)
        tbi_sgemm_tn_colsum(N, K, M, dout, N, inp, K, dw, K, dbias);
    else if (dw)
        tbi_sgemm(1, 0, N, K, M, 1.0f, dout, N, inp, K, 0.0f, dw, K);
    else if (dbias)
        tbi_colsum(dbias, dout, M, N);
}

/* With two threads, the input and weight gradients run side by side, one product a thread:
 * the two have the same FLOPs, and a product on one thread has no barrier to wait at (shared
 * between two, each waits at two per K block, and for the other's last row block): ViT-S's step
 * 2-4% faster. With more threads each product keeps all of them (two teams would need nested
 * OpenMP regions, and a product's barriers cost less against a bigger team's speed-up). The
 * bits are the same either way: every element sums over K in the same order.
 * Only where both products run on the AVX-512 kernel (tbi_sgemm_uses_own): a product inside
 * the pair's region keeps to its thread on our own kernels, so with OpenBLAS outside regions
 * (TUBELET_GEMM=openblas, or no AVX-512) the pair would swap OpenBLAS's threads for our
 * portable kernel, slower and with other bits than the same call on one thread. */
void tbi_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                    const float *w, int M, int K, int N)
{
    if (dinp && dw && omp_get_level() == 0 && omp_get_max_threads() == 2 && tbi_sgemm_uses_own()) {
#pragma omp parallel num_threads(2)
        {
            /* The team can come out smaller than asked (OMP_THREAD_LIMIT, OMP_DYNAMIC): then
             * its one thread runs both. */
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            if (t == 0)
                dinp_of(dinp, dout, w, M, K, N);
            if (t == nt - 1)
                dw_of(dw, dbias, dout, inp, M, K, N);
        }
        return;
    }
    if (dinp)
        dinp_of(dinp, dout, w, M, K, N);
    dw_of(dw, dbias, dout, inp, M, K, N);
}
