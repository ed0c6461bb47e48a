/* bench/bench_train.c - training-step throughput of the video ViT on the CPU: random weights
 * and a random batch of uint8 clips (as the loader gives them: normalised by the model's
 * backend), forward + backward + gradient clipping + AdamW, timed over STEPS steps
 * after one warm-up step; prints one JSON line with clips/s, the planned arena (activations,
 * scratch and gradients: tb_vit_plan's bytes) and peak RSS. The PyTorch side is
 * bench/train_peer.py; bench/train_bench.sh runs both.
 * Usage: bench_train DIM DEPTH HEADS FRAMES SIZE BATCH [STEPS=3] [PATCH=16] [TUBELET=2]
 *        [RECOMPUTE=0] [RECOMPUTE_MLP=0] [PRECISION=fp32|bf16] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "tubelet/data.h"
#include "tubelet/model.h"
#include "tubelet/rng.h"
#include "tubelet/train.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: bench_train DIM DEPTH HEADS FRAMES SIZE BATCH [STEPS] [PATCH] "
                "[TUBELET] [RECOMPUTE] [RECOMPUTE_MLP] [PRECISION]\n");
        return 2;
    }
    struct tb_vit_config c = {
        .dim = atoi(argv[1]), .depth = atoi(argv[2]), .heads = atoi(argv[3]),
        .frames = atoi(argv[4]), .height = atoi(argv[5]), .width = atoi(argv[5]),
        .patch = argc > 8 ? atoi(argv[8]) : 16, .tubelet = argc > 9 ? atoi(argv[9]) : 2,
        .classes = 400, .pool = TB_POOL_MEAN, .pos = TB_POS_SINCOS,
        .recompute = argc > 10 ? atoi(argv[10]) : 0,
        .recompute_mlp = argc > 11 ? atoi(argv[11]) : 0,
        .dtype = argc > 12 && !strcmp(argv[12], "bf16") ? TB_DTYPE_BF16 : TB_DTYPE_F32,
    };
    int B = atoi(argv[6]), steps = argc > 7 ? atoi(argv[7]) : 3;
    tb_vit *m = NULL;
    struct tb_optim opt = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                           .weight_decay = 0.05f};
    struct tb_plan_bytes plan = {0};
    if (tb_vit_open(&m, &c) < 0 || tb_vit_plan(m, B, &plan) < 0 ||
        tb_optim_init(&opt, tb_vit_params(m)) < 0 || tb_vit_init(m, 1) < 0) {
        fprintf(stderr, "%s\n", tb_errmsg());
        return 1;
    }
    size_t nv = (size_t)B * 3 * c.frames * c.height * c.width;
    uint8_t *clips = malloc(nv);
    int64_t *labels = malloc(sizeof(int64_t) * (size_t)B);
    tb_rng r;
    tb_rng_init(&r, 2, 0);
    for (size_t i = 0; i < nv; i++)
        clips[i] = (uint8_t)tb_rng_below(&r, 256);
    for (int b = 0; b < B; b++)
        labels[b] = (int64_t)tb_rng_below(&r, 400);
    double t0 = 0;
    float loss = 0;
    for (int s = 0; s <= steps; s++) {
        if (s == 1)
            t0 = now();
        double gnorm = 0;
        if (tb_vit_forward_clips(m, clips, NULL, B, tb_mean_openai, tb_std_openai, labels, 0.1f,
                                 &loss) < 0 ||
            tb_vit_backward(m) < 0 || tb_grad_norm(tb_vit_params(m), &gnorm) < 0 ||
            tb_optim_update(&opt, tb_clip_factor(gnorm, 1.0)) < 0) {
            fprintf(stderr, "%s\n", tb_errmsg());
            return 1;
        }
    }
    double secs = now() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    char impl[64] = "tubelet";
    if (c.recompute)
        snprintf(impl, sizeof(impl), "tubelet-recompute");
    else if (c.recompute_mlp)
        snprintf(impl, sizeof(impl), "tubelet-recompute-mlp%d", c.recompute_mlp);
    if (c.dtype == TB_DTYPE_BF16)
        strcat(impl, "-bf16");
    printf("{\"impl\": \"%s\", \"dim\": %d, \"depth\": %d, \"frames\": %d, \"size\": %d, "
           "\"batch\": %d, \"steps\": %d, \"seconds\": %.3f, \"clips_per_s\": %.3f, "
           "\"plan_mb\": %.1f, \"acts_mb\": %.1f, \"peak_rss_mb\": %.1f, \"loss\": %.4f}\n", impl,
           c.dim, c.depth, c.frames, c.height, B, steps, secs, B * steps / secs,
           plan.arena / 1048576.0, plan.activations / 1048576.0,
           ru.ru_maxrss / 1024.0, loss);
    return 0;
}
