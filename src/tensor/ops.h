/* src/tensor/ops.h - the op table a model calls through (being replaced by backend.h). */
#ifndef TUBELET_TENSOR_OPS_H
#define TUBELET_TENSOR_OPS_H

#include "tensor/cpu/kernels.h"

/* The op table a model calls through; one per backend, same signatures. */
struct tbi_ops {
    const char *name;
    void (*matmul_fwd)(float *, const float *, const float *, const float *, int, int, int);
    void (*matmul_bwd)(float *, float *, float *, const float *, const float *, const float *,
                       int, int, int);
    void (*layernorm_fwd)(float *, float *, float *, const float *, const float *, const float *,
                          int, int, float);
    void (*layernorm_bwd)(float *, float *, float *, const float *, const float *, const float *,
                          const float *, const float *, int, int);
    void (*gelu_fwd)(float *, const float *, size_t);
    void (*gelu_bwd)(float *, float *, const float *, const float *, size_t);
    void (*add_fwd)(float *, const float *, const float *, size_t);
    void (*attention_fwd)(float *, float *, const float *, int, int, int, int);
    void (*attention_bwd)(float *, const float *, const float *, const float *, const float *,
                          int, int, int, int);
    float (*xent_fwd)(float *, const float *, const int64_t *, int, int, float);
    void (*xent_bwd)(float *, const float *, const int64_t *, int, int, float);
    void (*patchify)(float *, const float *, int, int, int, int, int, int, int);
    void (*adamw)(float *, const float *, float, float *, float *, size_t, float, float, float,
                  float, float, int64_t);
    double (*sum_squares)(const float *, size_t);
};

extern const struct tbi_ops tbi_ops_cpu;

#endif /* TUBELET_TENSOR_OPS_H */
