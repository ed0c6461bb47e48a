/* src/core/cpu.h - what the processor offers, decided once per process for every layer (the
 * CPU backend's kernels, the reader's resize), so that one switch, TUBELET_CPU, turns paths off
 * everywhere alike. Not here: the paths themselves, which live with their kernels. Tests:
 * tests/test_core.c (the switches), tests/test_ops.c and tests/test_resize.c (the paths). */
#ifndef TUBELET_CORE_CPU_H
#define TUBELET_CORE_CPU_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 where the CPU has AVX-512 (the x86-64-v4 set: F, BW, CD, DQ, VL; with the OS saving its
 * registers) and the environment variable TUBELET_CPU is not "portable"; read once. Every
 * AVX-512 choice goes by it (the GEMM's own kernel, the attention's register tiles, GELU's
 * intrinsics, the elementwise loops' x86-64-v4 copies, the resize's horizontal pass), so
 * TUBELET_CPU=portable runs the portable code everywhere, as on a CPU without AVX-512. */
int tbi_cpu_avx512(void);

/* 1 where the CPU has avx512_bf16 besides tbi_cpu_avx512()'s set and TUBELET_CPU is not
 * "avx512" (AVX-512 without the bf16 paths: their f32-view twins run) nor "portable"; read
 * once. The bf16 products go by it. */
int tbi_cpu_avx512_bf16(void);

/* 1 where the CPU has AVX2, whatever TUBELET_CPU says (no switch turns the AVX2 paths off:
 * they give the plain C paths' bits, and x86-64-v3 is the build's floor anyway); read once. */
int tbi_cpu_avx2(void);

/* 1 where the GEMM runs its own AVX-512 kernel: tbi_cpu_avx512() and TUBELET_GEMM is not
 * "openblas" (the products outside OpenMP regions then go to OpenBLAS); read once. */
int tbi_cpu_gemm_own(void);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_CORE_CPU_H */
