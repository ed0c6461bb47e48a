/* bench/bench_gemm.c - GFLOP/s of tubelet's AVX-512 sgemm against OpenBLAS's cblas_sgemm on
 * the shapes of a ViT training step, both in this one process (same threads, same inputs);
 * then, on one thread, the portable kernel against the AVX-512 one on the portable attention's
 * tile products (where the portable kernel runs: inside OpenMP regions, without AVX-512).
 * OpenBLAS runs whatever kernels OPENBLAS_CORETYPE selects; the script that calls this says
 * which. Usage: bench_gemm [SECONDS_PER_CASE=1] */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tensor/cpu/kernels.h"

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

/* GFLOP/s of one engine: 0 OpenBLAS, 1 the AVX-512 kernel, 2 the portable one. */
static double run(int own, const struct shape *s, const float *A, const float *B, float *C,
                  double secs)
{
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    int reps = 0;
    double t0 = now(), t;
    do {
        if (own == 2)
            tbi_sgemm_portable(s->ta, s->tb, s->M, s->N, s->K, 1, A, lda, B, ldb, 0, C, s->N);
        else if (own)
            tbi_sgemm_own(s->ta, s->tb, s->M, s->N, s->K, 1, A, lda, B, ldb, 0, C, s->N);
        else
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                        s->tb ? CblasTrans : CblasNoTrans, s->M, s->N, s->K, 1, A, lda, B, ldb,
                        0, C, s->N);
        reps++;
    } while ((t = now() - t0) < secs);
    return 2.0 * s->M * s->N * s->K * reps / t / 1e9;
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
    float *A = malloc(sizeof(float) * big), *B = malloc(sizeof(float) * big),
          *C = malloc(sizeof(float) * big);
    for (size_t i = 0; i < big; i++) {
        A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    }
    printf("| shape | M N K | OpenBLAS GFLOP/s | tubelet GFLOP/s | ratio |\n"
           "|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const struct shape *s = &shapes[i];
        run(0, s, A, B, C, 0.1);
        run(1, s, A, B, C, 0.1);
        double ob = run(0, s, A, B, C, secs), own = run(1, s, A, B, C, secs);
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
            run(1, s, A, B, C, 0.1);
            run(2, s, A, B, C, 0.1);
            own = run(1, s, A, B, C, secs);
            port = run(2, s, A, B, C, secs);
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
