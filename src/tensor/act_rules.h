/* src/tensor/act_rules.h - the MLP activations per element, written once for the CPU backend
 * (src/tensor/cpu/elementwise.c's portable loops) and the CUDA one (src/tensor/cuda/
 * elementwise.cu): exact GELU(x) = x Phi(x) = 0.5 x erfc(-x / sqrt 2), GELU'(x) = Phi(x) +
 * x phi(x); QuickGELU(x) = x s, s = sigmoid(1.702 x), its derivative s + 1.702 x s (1 - s).
 * erfc and exp are each backend's own (the CPU's vectorisable fits, src/tensor/cpu/vmath.h;
 * CUDA's erfcf and expf), so TBI_ACT_RULES(NS, ERFC, EXP) writes the rules that call them
 * once, and each backend instantiates them over its functions. The CPU's AVX-512 GELU
 * (intrinsics) is not these: tests/test_ops.c compares it with them. (TBI_HD: backend.h.) */
#ifndef TUBELET_TENSOR_ACT_RULES_H
#define TUBELET_TENSOR_ACT_RULES_H

#include "tensor/backend.h"

#define TBI_INV_SQRT2 0.70710678118654752440f
#define TBI_INV_SQRT_2PI 0.39894228040143267794f
#define TBI_QUICK_K 1.702f

/* GELU(x) given e = erfc(-x / sqrt 2): the forward and the backward share e, so their bits
 * agree. */
static inline TBI_HD float tbi_gelu_rule(float x, float e)
{
    return 0.5f * x * e;
}

/* QuickGELU(x) and its derivative given s = sigmoid(1.702 x). */
static inline TBI_HD float tbi_quickgelu_rule(float x, float s)
{
    return x * s;
}

static inline TBI_HD float tbi_quickgelu_grad_rule(float x, float s)
{
    return s + TBI_QUICK_K * x * s * (1.0f - s);
}

/* NS##_gelu_erfc(x) = e above, NS##_gelu_grad(x, e) = GELU'(x), NS##_quick_sigmoid(x) = s
 * above, on the backend's ERFC and EXP (float to float). */
#define TBI_ACT_RULES(NS, ERFC, EXP)                                                               \
    static inline TBI_HD float NS##_gelu_erfc(float x)                                             \
    {                                                                                              \
        return ERFC(-x * TBI_INV_SQRT2);                                                           \
    }                                                                                              \
    static inline TBI_HD float NS##_gelu_grad(float x, float e)                                    \
    {                                                                                              \
        return 0.5f * e + x * (TBI_INV_SQRT_2PI * EXP(-0.5f * x * x));                             \
    }                                                                                              \
    static inline TBI_HD float NS##_quick_sigmoid(float x)                                         \
    {                                                                                              \
        return 1.0f / (1.0f + EXP(-TBI_QUICK_K * x));                                              \
    }

#endif /* TUBELET_TENSOR_ACT_RULES_H */
