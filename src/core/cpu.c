/* src/core/cpu.c - the processor's features and the TUBELET_CPU switch, decided once per
 * process (contract in cpu.h). Not here: any choice of code path, which stays with the
 * kernels that have one. Tests: tests/test_core.c. */
#include "core/cpu.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* A switch decided once (any thread may ask first: the answer is kept atomically; two threads
 * asking first at once both decide, alike). */
static int once(atomic_int *flag, int (*decide)(void))
{
    int h = atomic_load(flag);
    if (h < 0) {
        h = decide();
        atomic_store(flag, h);
    }
    return h;
}

/* Whether the environment variable name is value. */
static int env_is(const char *name, const char *value)
{
    const char *e = getenv(name);
    return e && !strcmp(e, value);
}

#if defined(__x86_64__) || defined(__i386__)
/* The whole x86-64-v4 set, not AVX-512F alone: elementwise.c's wrappers are compiled for it
 * (only the Xeon Phis had F without BW, DQ and VL). libgcc also checks that the OS saves the
 * zmm registers. */
static int decide_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd") && !env_is("TUBELET_CPU", "portable");
}

static int decide_avx512_bf16(void)
{
    return tbi_cpu_avx512() && __builtin_cpu_supports("avx512bf16") &&
           !env_is("TUBELET_CPU", "avx512");
}

static int decide_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
}
#else
static int decide_avx512(void)
{
    return 0;
}

static int decide_avx512_bf16(void)
{
    return 0;
}

static int decide_avx2(void)
{
    return 0;
}
#endif

int tbi_cpu_avx512(void)
{
    static atomic_int have = -1;
    return once(&have, decide_avx512);
}

int tbi_cpu_avx512_bf16(void)
{
    static atomic_int have = -1;
    return once(&have, decide_avx512_bf16);
}

int tbi_cpu_avx2(void)
{
    static atomic_int have = -1;
    return once(&have, decide_avx2);
}

/* The GEMM's own AVX-512 kernel, unless TUBELET_GEMM=openblas sends the products to OpenBLAS. */
static int decide_gemm_own(void)
{
    return tbi_cpu_avx512() && !env_is("TUBELET_GEMM", "openblas");
}

int tbi_cpu_gemm_own(void)
{
    static atomic_int use = -1;
    return once(&use, decide_gemm_own);
}
