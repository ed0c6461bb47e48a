/* src/tensor/cpu/vmath.h - exp and erfc written so that the compiler vectorises the loops that
 * call them (libm's expf and erff are calls the vectoriser cannot see through).
 *
 * tbi_expf: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then Cephes' degree-6
 * polynomial for e^r, scaled by 2^n through the exponent bits; within 2 ulp of expf over
 * [-87, 88]; below -87 it returns 0, above 88 it saturates at e^88.
 * tbi_erfcf: the Chebyshev fit of Numerical Recipes (erfcc, fractional error < 1.2e-7 in
 * exact arithmetic), which stays relative-accurate in the tail where 1 + erf(x) would cancel;
 * in float, exp(-z^2) adds ~z^2 ulp there (1e-5 relative at |z| = 9, where erfc is 1e-37).
 * Tests: tests/test_ops.c (against libm in double). */
#ifndef TUBELET_TENSOR_CPU_VMATH_H
#define TUBELET_TENSOR_CPU_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float tbi_expf(float x)
{
    int under = x < -87.0f;
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return under ? 0.0f : p * scale;
}

static inline float tbi_erfcf(float x)
{
    float z = fabsf(x), t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    float r = t * tbi_expf(-z * z + p);
    return x >= 0 ? r : 2.0f - r;
}

#endif
