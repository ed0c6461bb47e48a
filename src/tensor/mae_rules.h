/* src/tensor/mae_rules.h - VideoMAE's ops per element and row, written once for the CPU backend
 * (src/tensor/cpu/model_ops.c) and the CUDA one (src/tensor/cuda/mae.cu): the mask token's
 * gradient summed over a column's fill rows, the pixel target (un-normalised, then per tube
 * (u - mean) / (unbiased std + 1e-6) with the mean and squares in double), and the weighted
 * MSE's row term and gradient. How a row's or tube's sums are added (a loop on the CPU, block
 * trees on CUDA) is each backend's. (TBI_HD: backend.h.) Tests: tests/test_backend.c (parity),
 * tests/test_mae.c. */
#ifndef TUBELET_TENSOR_MAE_RULES_H
#define TUBELET_TENSOR_MAE_RULES_H

#include <math.h>
#include <stddef.h>

#include "tensor/backend.h"

/* Column d of dx (B, NS + NF, D) summed over the clips and fill rows (NS..NS+NF-1), in order. */
static inline TBI_HD float tbi_fill_dcol_rule(const float *dx, int B, int NS, int NF, int D,
                                              int d)
{
    int NT = NS + NF;
    float acc = 0;
    for (int b = 0; b < B; b++)
        for (int t = NS; t < NT; t++)
            acc += dx[((size_t)b * NT + t) * D + d];
    return acc;
}

/* A pixel of the target, un-normalised: x std + mean. */
static inline TBI_HD float tbi_target_pixel_rule(float x, float s, float m)
{
    return x * s + m;
}

/* One term of a tube's sum of squares about its mean mu. */
static inline TBI_HD double tbi_target_sq_rule(float u, double mu)
{
    double e = u - mu;
    return e * e;
}

/* 1 / (the unbiased std + 1e-6) of PP values from their sum of squares sq. */
static inline TBI_HD float tbi_target_inv_rule(double sq, int PP)
{
    return (float)(1.0 / (sqrt(sq / (PP > 1 ? PP - 1 : 1)) + 1e-6));
}

static inline TBI_HD float tbi_target_norm_rule(float u, float fmu, float inv)
{
    return (u - fmu) * inv;
}

/* One term of a row's squared error, in double. */
static inline TBI_HD double tbi_mse_sq_rule(float p, float t)
{
    double e = (double)p - t;
    return e * e;
}

/* Row r's term of the loss: w_r times its mean squared error (acc: the row's sum of C). */
static inline TBI_HD double tbi_mse_row_rule(float w, double acc, int C)
{
    return w * (acc / C);
}

/* The gradient's factor for a row of weight w, C columns, the weights' sum W. */
static inline TBI_HD float tbi_mse_grad_k_rule(float w, int C, double W)
{
    return (float)(2.0 * w / ((double)C * W));
}

#endif /* TUBELET_TENSOR_MAE_RULES_H */
