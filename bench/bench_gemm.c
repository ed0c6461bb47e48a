/* bench/bench_gemm.c - GFLOP/s of tubelet's AVX-512 sgemm against OpenBLAS's cblas_sgemm on
 * the shapes of a ViT training step, both in this one process (same threads, same inputs);
 * then, on one thread, the portable kernel against the AVX-512 one on the portable attention's
 * tile products (where the portable kernel runs: inside OpenMP regions, without AVX-512).
 * With a second argument, bf16, and where the CPU has avx512_bf16, only the bf16 mode's
 * products instead: the f32-view twin (both operands rounded into copies, then the AVX-512
 * sgemm) against gemm_bf16.c's kernel reading f32 operands and bf16 ones.
 * OpenBLAS runs whatever kernels OPENBLAS_CORETYPE selects; the script that calls this says
 * which. Usage: bench_gemm [SECONDS_PER_CASE=1 [bf16]] (bf16: the bf16 products alone) */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tensor/cpu/kernels.h"
#include "tubelet/tensor.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct shape {
    const char *what;
    int ta, tb, M, N, K;
};

/* The operands: A, B as f32; their rounded copies (the bf16 twin's views) and bf16 bits. */
static float *A, *B, *C, *Ar, *Br;
static uint16_t *Ah, *Bh;

enum engine { OPENBLAS, OWN, PORTABLE, BF16_VIEW, BF16_F32, BF16_BF16 };

static void product(enum engine e, const struct shape *s)
{
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N;
    switch (e) {
    case PORTABLE:
        tbi_sgemm_portable(s->ta, s->tb, s->M, s->N, s->K, 1, A, lda, B, ldb, 0, C, s->N);
        break;
    case OWN:
        tbi_sgemm_own(s->ta, s->tb, s->M, s->N, s->K, 1, A, lda, B, ldb, 0, C, s->N);
        break;
    case BF16_VIEW: /* backend_cpu.c's twin: the views made, then the f32 product */
        tbi_round_bf16_copy(Ar, A, na);
        tbi_round_bf16_copy(Br, B, nb);
        tbi_sgemm_own(s->ta, s->tb, s->M, s->N, s->K, 1, Ar, lda, Br, ldb, 0, C, s->N);
        break;
    case BF16_F32:
    case BF16_BF16: {
        int dt = e == BF16_F32 ? TB_DTYPE_F32 : TB_DTYPE_BF16;
        const void *a = e == BF16_F32 ? (const void *)A : Ah;
        const void *b = e == BF16_F32 ? (const void *)B : Bh;
        tbi_gemm_bf16(s->ta, s->tb, s->M, s->N, s->K, a, dt, lda, b, dt, ldb, NULL, C, s->N, NULL);
        break;
    }
    default:
        cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                    s->tb ? CblasTrans : CblasNoTrans, s->M, s->N, s->K, 1, A, lda, B, ldb, 0, C,
                    s->N);
    }
}

/* GFLOP/s of one engine. */
static double run(enum engine e, const struct shape *s, double secs)
{
    int reps = 0;
    double t0 = now(), t;
    do {
        product(e, s);
        reps++;
    } while ((t = now() - t0) < secs);
    return 2.0 * s->M * s->N * s->K * reps / t / 1e9;
}

/* The bf16 products of a ViT-S (16 frames of 112, batch 4: 1568 tokens) and ViT-B step. */
static void bench_bf16(double secs)
{
    static const struct shape shapes[] = {
        {"ViT-S qkv fwd", 0, 1, 1568, 1152, 384},  {"ViT-S fc1 fwd", 0, 1, 1568, 1536, 384},
        {"ViT-S fc2 fwd", 0, 1, 1568, 384, 1536},  {"ViT-S fc2 dinp", 0, 0, 1568, 1536, 384},
        {"ViT-S fc1 dinp", 0, 0, 1568, 384, 1536}, {"ViT-S fc1 dw", 1, 0, 1536, 384, 1568},
        {"ViT-B fc1 fwd", 0, 1, 3136, 3072, 768},  {"ViT-B fc2 dw", 1, 0, 768, 3072, 3136},
    };
    printf("\n| bf16 product | M N K | f32 view GFLOP/s | bf16 kernel, f32 in | bf16 kernel, "
           "bf16 in | ratio (f32 in) |\n|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const struct shape *s = &shapes[i];
        double r[3];
        for (int e = 0; e < 3; e++) {
            run(BF16_VIEW + e, s, 0.1);
            r[e] = run(BF16_VIEW + e, s, secs);
        }
        printf("| %s | %d %d %d | %.1f | %.1f | %.1f | %.2fx |\n", s->what, s->M, s->N, s->K,
               r[0], r[1], r[2], r[1] / r[0]);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 1;
    static const struct shape shapes[] = {
        {"ViT-T qkv fwd", 0, 1, 1568, 576, 192},   {"ViT-T fc1 fwd", 0, 1, 1568, 768, 192},
        {"ViT-T fc2 fwd", 0, 1, 1568, 192, 768},   {"ViT-T fc1 dinp", 0, 0, 1568, 192, 768},
        {"ViT-T fc1 dw", 1, 0, 768, 192, 1568},    {"ViT-S fc1 fwd", 0, 1, 3136, 1536, 384},
        {"ViT-S fc2 fwd", 0, 1, 3136, 384, 1536},  {"ViT-B qkv fwd", 0, 1, 3136, 2304, 768},
        {"ViT-B fc2 dw", 1, 0, 768, 3072, 3136},   {"ViT-B fc2 fwd", 0, 1, 3136, 768, 3072},
        {"ViT-T proj fwd", 0, 1, 1568, 192, 192},
    };
    if (!tbi_cpu_avx512()) {
        fprintf(stderr, "bench_gemm: this CPU has no AVX-512 (or TUBELET_CPU=portable)\n");
        return 1;
    }
    size_t big = (size_t)3136 * 3072;
    A = malloc(sizeof(float) * big), B = malloc(sizeof(float) * big);
    C = malloc(sizeof(float) * big);
    for (size_t i = 0; i < big; i++) {
        A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    }
    if (argc > 2 && tbi_cpu_avx512_bf16()) { /* "bf16": the bf16 products alone */
        Ar = malloc(sizeof(float) * big), Br = malloc(sizeof(float) * big);
        Ah = malloc(sizeof(uint16_t) * big), Bh = malloc(sizeof(uint16_t) * big);
        tbi_bf16_from_f32(Ah, A, big);
        tbi_bf16_from_f32(Bh, B, big);
        bench_bf16(secs);
        free(Ar), free(Br), free(Ah), free(Bh), free(A), free(B), free(C);
        return 0;
    }
    printf("| shape | M N K | OpenBLAS GFLOP/s | tubelet GFLOP/s | ratio |\n"
           "|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const struct shape *s = &shapes[i];
        run(OPENBLAS, s, 0.1);
        run(OWN, s, 0.1);
        double ob = run(OPENBLAS, s, secs), own = run(OWN, s, secs);
        printf("| %s | %d %d %d | %.1f | %.1f | %.2fx |\n", s->what, s->M, s->N, s->K, ob, own,
               own / ob);
        fflush(stdout);
    }
    /* The attention tiles (BR 256 queries, BC 128 keys, head size 64): scores, P V, and the
     * backward's P^T dO; inside a region of one, where each kernel keeps to its thread. */
    static const struct shape tiles[] = {{"scores Q K^T", 0, 1, 256, 128, 64},
                                         {"P V", 0, 0, 256, 64, 128},
                                         {"P^T dO", 1, 0, 128, 64, 256}};
    printf("\n| attention tile, one thread | M N K | AVX-512 GFLOP/s | portable GFLOP/s | ratio |\n"
           "|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof(tiles) / sizeof(tiles[0]); i++) {
        const struct shape *s = &tiles[i];
        double own = 0, port = 0;
#pragma omp parallel num_threads(1)
        {
            run(OWN, s, 0.1);
            run(PORTABLE, s, 0.1);
            own = run(OWN, s, secs);
            port = run(PORTABLE, s, secs);
        }
        printf("| %s | %d %d %d | %.1f | %.1f | %.2fx |\n", s->what, s->M, s->N, s->K, own, port,
               port / own);
        fflush(stdout);
    }
    free(A);
    free(B);
    free(C);
    return 0;
}
