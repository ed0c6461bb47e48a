/* src/tensor/cuda/lt.h - cuBLASLt as a table of the functions matmul.cu calls, so the code that
 * turns a product record into descriptors, preferences, the heuristic call and the product is
 * one code on both devices: on a GPU the table is cuBLASLt's own functions, found with dlopen
 * when the backend opens (libcublasLt.so.13, else .so.12: the functions and constants used
 * here are the same in both), so nothing else of tubelet maps the library; on the emulated
 * device it is emu/emulate_lt.h's cuBLASLt, which checks every call against cuBLASLt's
 * documented rules and computes the product from the descriptors. C++ only. */
#ifndef TUBELET_TENSOR_CUDA_LT_H
#define TUBELET_TENSOR_CUDA_LT_H

#include <cublasLt.h>

struct tbc_lt {
    cublasStatus_t (*create)(cublasLtHandle_t *);
    cublasStatus_t (*destroy)(cublasLtHandle_t);
    cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
    cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t);
    cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t,
                               const void *, size_t);
    cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t,
                                    int64_t);
    cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t);
    cublasStatus_t (*pref_create)(cublasLtMatmulPreference_t *);
    cublasStatus_t (*pref_destroy)(cublasLtMatmulPreference_t);
    cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                               const void *, size_t);
    cublasStatus_t (*heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                                cublasLtMatmulHeuristicResult_t *, int *);
    cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                             cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t,
                             const void *, const void *, cublasLtMatrixLayout_t, void *,
                             cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *, size_t,
                             cudaStream_t);
    const char *(*status_name)(cublasStatus_t);
    size_t (*version)(void);
};

/* The functions by their names, in the table's order. */
#define TBC_LT_NAMES                                                                               \
    "cublasLtCreate", "cublasLtDestroy", "cublasLtMatmulDescCreate", "cublasLtMatmulDescDestroy",  \
        "cublasLtMatmulDescSetAttribute", "cublasLtMatrixLayoutCreate",                            \
        "cublasLtMatrixLayoutDestroy", "cublasLtMatmulPreferenceCreate",                           \
        "cublasLtMatmulPreferenceDestroy", "cublasLtMatmulPreferenceSetAttribute",                 \
        "cublasLtMatmulAlgoGetHeuristic", "cublasLtMatmul", "cublasLtGetStatusName",               \
        "cublasLtGetVersion"

#endif /* TUBELET_TENSOR_CUDA_LT_H */
