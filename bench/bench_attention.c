/* bench/bench_attention.c - GFLOP/s of the attention op's two CPU paths on the shapes of the
 * training benchmark's ViTs, in this one process (same threads, same inputs): the portable
 * one (tile products through tbi_sgemm) and the AVX-512 register tiles. Forward FLOPs are
 * 4 B NH N^2 HS (Q K^T and P V); the backward is counted as 2.5x that (scores again, dP, and
 * three gradient products). Non-causal only (the ViTs'). Usage: bench_attention
 * [SECONDS_PER_CASE=1] */
#define _POSIX_C_SOURCE 200809L
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
    int B, N, NH, HS;
};

struct io {
    float *qkv, *dqkv, *out, *dout, *lse;
};

/* Seconds per call of the forward (bwd 0) or backward (bwd 1) of one path. */
static double run(int avx512, int bwd, const struct shape *s, struct io *x, double secs)
{
    int reps = 0;
    double t0 = now(), t;
    do {
        if (!bwd && avx512)
            tbi_attention_fwd_avx512(x->out, x->lse, x->qkv, s->B, s->N, s->NH, s->HS, 0);
        else if (!bwd)
            tbi_attention_fwd_tiles(x->out, x->lse, x->qkv, s->B, s->N, s->NH, s->HS, 0);
        else if (avx512)
            tbi_attention_bwd_avx512(x->dqkv, x->dout, x->qkv, x->out, x->lse, s->B, s->N, s->NH,
                                     s->HS, 0);
        else
            tbi_attention_bwd_tiles(x->dqkv, x->dout, x->qkv, x->out, x->lse, s->B, s->N, s->NH,
                                    s->HS, 0);
        reps++;
        t = now() - t0;
    } while (t < secs);
    return t / reps;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 1.0;
    static const struct shape shapes[] = {{"ViT-T (8x112x112, batch 8)", 8, 196, 3, 64},
                                          {"ViT-S (16x112x112, batch 4)", 4, 392, 6, 64},
                                          {"ViT-B (16x224x224, batch 2)", 2, 1568, 12, 64}};
    if (!tbi_cpu_avx512()) {
        printf("no AVX-512 on this CPU (or TUBELET_CPU=portable): only the portable path runs\n");
        return 0;
    }
    printf("| shape | B N NH HS | tiles fwd | AVX-512 fwd | tiles bwd | AVX-512 bwd |\n"
           "|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const struct shape *s = &shapes[i];
        size_t n3 = (size_t)s->B * s->N * 3 * s->NH * s->HS, n1 = n3 / 3;
        struct io x = {malloc(4 * n3), calloc(n3, 4), malloc(4 * n1), malloc(4 * n1),
                       malloc(4 * (size_t)s->B * s->NH * s->N)};
        if (!x.qkv || !x.dqkv || !x.out || !x.dout || !x.lse)
            return 1;
        for (size_t j = 0; j < n3; j++)
            x.qkv[j] = (float)((j * 2654435761u) % 1000) / 1000.0f - 0.5f;
        for (size_t j = 0; j < n1; j++)
            x.dout[j] = (float)((j * 40503u) % 1000) / 1000.0f - 0.5f;
        double fl = 4.0 * s->B * s->NH * (double)s->N * s->N * s->HS / 1e9;
        double g[4];
        for (int k = 0; k < 4; k++) /* tiles fwd, AVX-512 fwd, tiles bwd, AVX-512 bwd */
            g[k] = fl * (k >= 2 ? 2.5 : 1.0) / run(k & 1, k >= 2, s, &x, secs);
        printf("| %s | %d %d %d %d | %.1f | %.1f | %.1f | %.1f |\n", s->what, s->B, s->N, s->NH,
               s->HS, g[0], g[1], g[2], g[3]);
        free(x.qkv), free(x.dqkv), free(x.out), free(x.dout), free(x.lse);
    }
    return 0;
}
