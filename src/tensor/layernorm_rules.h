/* src/tensor/layernorm_rules.h - LayerNorm's arithmetic per row and per element, written once
 * for the CPU backend (src/tensor/cpu/elementwise.c: a row per loop iteration, its sums by a
 * vectorised reduction) and the CUDA one (src/tensor/cuda/layernorm.cu: a row per warp, its
 * sums by shuffles): the two-pass mean and biased variance, rstd = 1 / sqrt(var + eps), the
 * normalised output, and the backward dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),
 * dxhat = dy w. How a row's sums are added (the order) is each backend's own. (TBI_HD:
 * backend.h.) Tests: tests/test_ops.c, tests/gpu/ops_emulate.cpp (parity). */
#ifndef TUBELET_TENSOR_LAYERNORM_RULES_H
#define TUBELET_TENSOR_LAYERNORM_RULES_H

#include <math.h>

#include "tensor/backend.h"

/* The mean of a row (C) from its sum (and mean(dxhat), mean(dxhat xhat) in the backward). */
static inline TBI_HD float tbi_ln_mean_rule(float sum, int C)
{
    return sum / C;
}

/* One term of the variance's sum: (x - mean)^2. */
static inline TBI_HD float tbi_ln_sq_rule(float x, float m)
{
    float d = x - m;
    return d * d;
}

/* rstd from the sum of squared deviations of a row (C). */
static inline TBI_HD float tbi_ln_rstd_rule(float sumsq, int C, float eps)
{
    return 1.0f / sqrtf(sumsq / C + eps);
}

/* y = (x - mean) rstd w + b. */
static inline TBI_HD float tbi_ln_out_rule(float x, float m, float s, float w, float b)
{
    return (x - m) * s * w + b;
}

/* xhat = (x - mean) rstd. */
static inline TBI_HD float tbi_ln_xhat_rule(float x, float m, float s)
{
    return (x - m) * s;
}

/* What the backward adds to dx, given xhat, dxhat and the row's means mean_d = mean(dxhat),
 * mean_dx = mean(dxhat xhat). */
static inline TBI_HD float tbi_ln_dx_rule(float s, float dxhat, float xhat, float mean_d,
                                          float mean_dx)
{
    return s * (dxhat - mean_d - xhat * mean_dx);
}

/* One row's term of dw: dy (x - mean) rstd (db's is dy). */
static inline TBI_HD float tbi_ln_dw_rule(float dy, float x, float m, float s)
{
    return dy * (x - m) * s;
}

#endif /* TUBELET_TENSOR_LAYERNORM_RULES_H */
