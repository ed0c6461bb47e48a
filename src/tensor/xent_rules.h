/* src/tensor/xent_rules.h - one row of softmax cross-entropy, written once for the CPU backend
 * (src/tensor/cpu/xent.c, a row per loop iteration) and the CUDA one (src/tensor/cuda/xent.cu,
 * a row per thread): the row's max in float, its exponentials' sum, log-sum-exp and loss in
 * double, its probabilities stored as float. */
#ifndef TUBELET_TENSOR_XENT_RULES_H
#define TUBELET_TENSOR_XENT_RULES_H

#include <math.h>
#include <stdint.h>

#include "tensor/backend.h"

/* Row z (K) with a hard target and label smoothing (PyTorch's): its probabilities into p, its
 * loss returned. */
static inline TBI_HD double tbi_xent_hard_row(float *p, const float *z, int64_t target, int K,
                                              float smoothing)
{
    float mx = z[0];
    for (int k = 1; k < K; k++)
        mx = z[k] > mx ? z[k] : mx;
    double sum = 0;
    for (int k = 0; k < K; k++)
        sum += exp((double)z[k] - mx);
    double lse = mx + log(sum), mean_nll = 0;
    for (int k = 0; k < K; k++) {
        p[k] = (float)exp((double)z[k] - lse);
        mean_nll += lse - z[k];
    }
    mean_nll /= K;
    double nll = lse - z[target];
    return (1.0 - smoothing) * nll + smoothing * mean_nll;
}

/* The same on soft targets t (K) (timm's SoftTargetCrossEntropy). */
static inline TBI_HD double tbi_xent_soft_row(float *p, const float *z, const float *t, int K)
{
    float mx = z[0];
    for (int k = 1; k < K; k++)
        mx = z[k] > mx ? z[k] : mx;
    double sum = 0, row = 0;
    for (int k = 0; k < K; k++)
        sum += exp((double)z[k] - mx);
    double lse = mx + log(sum);
    for (int k = 0; k < K; k++) {
        p[k] = (float)exp((double)z[k] - lse);
        row += t[k] * (lse - z[k]);
    }
    return row;
}

#endif /* TUBELET_TENSOR_XENT_RULES_H */
