/* src/tensor/cuda/cuda_attention.h - FlashAttention-2 forward and backward on NVIDIA tensor
 * cores (sm_80 and later), bf16 in and out, fp32 softmax and accumulation: the CUDA twin of
 * tbi_attention_fwd/bwd (src/tensor/cpu/kernels.h), same layouts and scale. Not yet wired into
 * the backend table. Tests: tests/gpu/attention_check.cu (needs a GPU), attention_emulate.cpp
 * and bench/cuda_check.sh (no GPU). Compiles as C11 and C++17. dQ: fp32 atomicAdd into a
 * caller's workspace, so its low bits may differ from run to run; dK, dV and the forward are
 * deterministic. */
#ifndef TUBELET_TENSOR_CUDA_ATTENTION_H
#define TUBELET_TENSOR_CUDA_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
#include <cuda_bf16.h>
typedef __nv_bfloat16 tbc_bf16;
extern "C" {
#else
/* C callers only pass the pointers on: the same 16 bits, bf16's storage. */
typedef uint16_t tbc_bf16;
#endif

/* qkv (B, N, 3, NH, HS) bf16 -> out (B, N, D) bf16 and lse (B, NH, N) fp32, the natural-log
 * log-sum-exp of each query row's scores scaled by HS^-0.5. causal != 0: key j > query i is
 * masked. HS is 64 or 128; qkv 16-byte aligned, out and lse 4-byte. Queued on s; returns 0,
 * TB_EINVAL (bad shape, HS, alignment, B * NH > 65535) or TB_ECUDA (the launch failed). */
int tbc_flash_fwd(cudaStream_t s, tbc_bf16 *out, float *lse, const tbc_bf16 *qkv, int B, int N,
                      int NH, int HS, int causal);

/* Bytes of device workspace tbc_attention_bwd needs: dQ in fp32 (B, N, NH, HS) and the row
 * terms D (B, NH, N). */
size_t tbc_flash_bwd_workspace_bytes(int B, int N, int NH, int HS);

/* dqkv (B, N, 3, NH, HS) bf16 = the gradients of q, k, v (written, not accumulated) given
 * dout (B, N, D), the forward's qkv, out and lse, and causal as the forward's. work: device
 * memory of tbc_flash_bwd_workspace_bytes (4-byte aligned; its contents on entry do not
 * matter). dout 16-byte aligned. Returns as tbc_attention_fwd. */
int tbc_flash_bwd(cudaStream_t s, tbc_bf16 *dqkv, float *work, const tbc_bf16 *dout,
                      const tbc_bf16 *qkv, const tbc_bf16 *out, const float *lse, int B, int N,
                      int NH, int HS, int causal);

/* Dynamic shared memory of the forward (backward = 0) or backward kernel for HS, in bytes;
 * 0 for an unsupported HS. Host-only arithmetic: needs no GPU. */
size_t tbc_flash_smem_bytes(int HS, int backward);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_TENSOR_CUDA_ATTENTION_H */
