/* src/tensor/xent_rules.h - one row of softmax cross-entropy and its gradient, written once for
 * the CPU backend (src/tensor/cpu/xent.c, a row per loop iteration) and the CUDA one
 * (src/tensor/cuda/xent.cu, a row or an element per thread): the row's max in float, its
 * exponentials' sum, log-sum-exp and loss in double, its probabilities stored as float; the
 * gradients in float. */
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

/* The hard targets' gradient: dlogits = (p - q) / B, q the smoothed one-hot of the target (on
 * at the target, off elsewhere). */
struct tbi_xent_q {
    float off, on, inv_b;
};

static inline TBI_HD struct tbi_xent_q tbi_xent_q_rule(int B, int K, float smoothing)
{
    struct tbi_xent_q q;
    q.off = smoothing / K;
    q.on = 1.0f - smoothing + q.off;
    q.inv_b = 1.0f / B;
    return q;
}

static inline TBI_HD float tbi_xent_hard_grad_rule(float p, float q, float inv_b)
{
    return (p - q) * inv_b;
}

/* The soft targets' gradient on row p (K) with targets t (K): d = (p sum_k t - t) / B. */
static inline TBI_HD void tbi_xent_soft_grad_row(float *d, const float *p, const float *t, int K,
                                                 float inv_b)
{
    float mass = 0;
    for (int k = 0; k < K; k++)
        mass += t[k];
    for (int k = 0; k < K; k++)
        d[k] = (p[k] * mass - t[k]) * inv_b;
}

#endif /* TUBELET_TENSOR_XENT_RULES_H */
