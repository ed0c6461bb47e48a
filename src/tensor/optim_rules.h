/* src/tensor/optim_rules.h - one element of AdamW (PyTorch's), Lion (AVION's) and SGD with
 * momentum (torch.optim.SGD, dampening 0), and the per-call constants they take, written once
 * for the CPU backend (src/tensor/cpu/elementwise.c, a vectorised loop per thread) and the CUDA
 * one (src/tensor/cuda/optim.cu, a grid-stride loop), so both run the same expressions in the
 * same order (TBI_HD: backend.h). The CPU's skipping of all-zero runs is its own, not a rule.
 * Tests: tests/test_ops.c (PyTorch's AdamW), tests/gpu/ops_emulate.cpp (parity). */
#ifndef TUBELET_TENSOR_OPTIM_RULES_H
#define TUBELET_TENSOR_OPTIM_RULES_H

#include <math.h>
#include <stdint.h>

#include "tensor/backend.h"

/* AdamW's constants for one step (>= 1): the bias corrections as a step size and the square
 * root of the second's, the decoupled weight decay as a factor. */
struct tbi_adamw_k {
    float beta1, beta2, eps, step_size, bc2_sqrt, decay;
};

static inline TBI_HD struct tbi_adamw_k tbi_adamw_k_rule(float lr, float beta1, float beta2,
                                                         float eps, float weight_decay,
                                                         int64_t step)
{
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    struct tbi_adamw_k k;
    k.beta1 = beta1;
    k.beta2 = beta2;
    k.eps = eps;
    k.step_size = lr / bc1;
    k.bc2_sqrt = sqrtf(bc2);
    k.decay = 1.0f - lr * weight_decay;
    return k;
}

/* One weight *p with its moments *m, *v, from its gradient g times gs (the torch order:
 * decay, moments, then the step). */
static inline TBI_HD void tbi_adamw_rule(float *p, float *m, float *v, float g, float gs,
                                         struct tbi_adamw_k k)
{
    float gi = g * gs;
    float pi = *p * k.decay;
    float mi = *m + (gi - *m) * (1.0f - k.beta1);
    float vi = *v * k.beta2 + (1.0f - k.beta2) * gi * gi;
    float denom = sqrtf(vi) / k.bc2_sqrt + k.eps;
    *p = pi - k.step_size * mi / denom;
    *m = mi;
    *v = vi;
}

/* Lion's constants: p *= decay; p -= lr sign(m beta1 + a1 g); m = m beta2 + a2 g. */
struct tbi_lion_k {
    float lr, beta1, beta2, decay, a1, a2;
};

static inline TBI_HD struct tbi_lion_k tbi_lion_k_rule(float lr, float beta1, float beta2,
                                                       float weight_decay)
{
    struct tbi_lion_k k;
    k.lr = lr;
    k.beta1 = beta1;
    k.beta2 = beta2;
    k.decay = 1.0f - lr * weight_decay;
    k.a1 = 1.0f - beta1;
    k.a2 = 1.0f - beta2;
    return k;
}

static inline TBI_HD void tbi_lion_rule(float *p, float *m, float g, float gs, struct tbi_lion_k k)
{
    float gi = g * gs;
    float c = *m * k.beta1 + k.a1 * gi;
    float u = (float)((c > 0) - (c < 0));
    *p = *p * k.decay - k.lr * u;
    *m = *m * k.beta2 + k.a2 * gi;
}

/* SGD: g = grad gs + wd p; buf = momentum buf + g (its first buf is g, which momentum * 0 + g
 * is); p = p - lr buf. */
static inline TBI_HD void tbi_sgd_rule(float *p, float *m, float g, float gs, float lr,
                                       float momentum, float weight_decay)
{
    float gi = g * gs + weight_decay * *p;
    *m = momentum * *m + gi;
    *p = *p - lr * *m;
}

#endif /* TUBELET_TENSOR_OPTIM_RULES_H */
