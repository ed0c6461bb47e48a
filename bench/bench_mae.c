/* bench/bench_mae.c - VideoMAE pretraining-step throughput on the CPU: random weights and a
 * random batch of uint8 clips (normalised by the model's backend, as training does), each
 * step's tube masks (and running-cell decoder masks) from tb_mae_make_mask, forward + backward
 * + AdamW or Lion (betas 0.9/0.95, wd 0.05, no clipping), timed over STEPS steps after one warm-up
 * step; prints one JSON line with clips/s and peak RSS. Patch 16, tubelet 2. The PyTorch side
 * is bench/mae_peer.py; bench/mae_pairs.sh runs both (docs/PERFORMANCE.md, section 6).
 * Usage: bench_mae DIM DEPTH HEADS FRAMES SIZE BATCH [STEPS=3] [MASK_RATIO=0.9]
 *        [DECODER_MASK=none|running-cell] [DEC_DIM=384] [DEC_DEPTH=4] [DEC_HEADS=6]
 *        [OPTIM=adamw|lion] [FUSED=0|1] [RECOMPUTE_MLP=0] [PRECISION=fp32|bf16]
 * FUSED 1: the update of each gradient span applied as the backward completes it
 * (tb_params_fuse); RECOMPUTE_MLP K: the encoder's first K blocks recompute their MLP input. */
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

/* Fused updates: the backward's word that a span is complete. */
static int apply_span(void *ctx, int span)
{
    return tb_optim_update_span(ctx, span, 1.0f);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: bench_mae DIM DEPTH HEADS FRAMES SIZE BATCH [STEPS] [MASK_RATIO] "
                "[DECODER_MASK] [DEC_DIM] [DEC_DEPTH] [DEC_HEADS] [OPTIM] [FUSED] [RECOMPUTE_MLP]\n");
        return 2;
    }
    const char *dmode = argc > 9 ? argv[9] : "none";
    int running = !strcmp(dmode, "running-cell");
    if (!running && strcmp(dmode, "none")) {
        fprintf(stderr, "bench_mae: DECODER_MASK is none or running-cell\n");
        return 2;
    }
    int optim = tb_optimizer_parse(argc > 13 ? argv[13] : "adamw");
    if (optim != TB_OPT_ADAMW && optim != TB_OPT_LION) {
        fprintf(stderr, "bench_mae: OPTIM is adamw or lion\n");
        return 2;
    }
    struct tb_mae_config c = {
        .enc = {.dim = atoi(argv[1]), .depth = atoi(argv[2]), .heads = atoi(argv[3]),
                .frames = atoi(argv[4]), .height = atoi(argv[5]), .width = atoi(argv[5]),
                .patch = 16, .tubelet = 2, .recompute_mlp = argc > 15 ? atoi(argv[15]) : 0,
                .dtype = argc > 16 && !strcmp(argv[16], "bf16") ? TB_DTYPE_BF16 : TB_DTYPE_F32},
        .mask_ratio = argc > 8 ? atof(argv[8]) : 0.9,
        .decoder_mask = running ? TB_DECODER_MASK_RUNNING_CELL : TB_DECODER_MASK_NONE,
        .decoder_ratio = 0.5,
        .dec_dim = argc > 10 ? atoi(argv[10]) : 384,
        .dec_depth = argc > 11 ? atoi(argv[11]) : 4,
        .dec_heads = argc > 12 ? atoi(argv[12]) : 6,
        .norm_target = 1,
    };
    int B = atoi(argv[6]), steps = argc > 7 ? atoi(argv[7]) : 3;
    int fused = argc > 14 && atoi(argv[14]);
    tb_mae *m = NULL;
    struct tb_plan_bytes plan = {0};
    struct tb_optim opt = {.kind = (enum tb_optimizer)optim, .lr = 1.5e-4f, .beta1 = 0.9f, .beta2 = 0.95f,
                           .eps = 1e-8f, .weight_decay = 0.05f};
    if (tb_mae_open(&m, &c) < 0)  {
        fprintf(stderr, "bench_mae: %s\n", tb_errmsg());
        return 1;
    }
    if (fused)
        tb_params_fuse(tb_mae_params(m), apply_span, &opt);
    if (tb_mae_plan(m, B, &plan) < 0 || tb_optim_init(&opt, tb_mae_params(m)) < 0 ||
        tb_mae_init(m, 1) < 0) {
        fprintf(stderr, "bench_mae: %s\n", tb_errmsg());
        return 1;
    }
    int N;
    tb_mae_sizes(m, &N, NULL, NULL, NULL);
    size_t nv = (size_t)B * 3 * c.enc.frames * c.enc.height * c.enc.width;
    uint8_t *clips = malloc(nv), *mask = malloc((size_t)B * N);
    uint8_t *drop = running ? malloc((size_t)B * N) : NULL;
    if (!clips || !mask || (running && !drop)) {
        fprintf(stderr, "bench_mae: out of memory\n");
        return 1;
    }
    tb_rng r;
    tb_rng_init(&r, 2, 0);
    for (size_t i = 0; i < nv; i++)
        clips[i] = (uint8_t)tb_rng_below(&r, 256);
    double t0 = 0;
    float loss = 0;
    for (int s = 0; s <= steps; s++) {
        if (s == 1)
            t0 = now();
        /* Each step masks each clip afresh, as an epoch of training would. */
        for (int b = 0; b < B; b++)
            tb_mae_make_mask(m, 0, s, b, mask + (size_t)b * N, drop ? drop + (size_t)b * N : NULL);
        if (tb_mae_set_clips(m, clips, NULL, B, tb_mean_imagenet, tb_std_imagenet) < 0 ||
            tb_mae_set_mask(m, mask, drop) < 0 || tb_mae_run(m, &loss) < 0 ||
            (fused ? (tb_optim_begin_step(&opt), tb_mae_backward(m))
                   : tb_mae_backward(m) < 0 ? -1 : tb_optim_update(&opt, 1.0f)) < 0) {
            fprintf(stderr, "bench_mae: %s\n", tb_errmsg());
            return 1;
        }
    }
    double secs = now() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"impl\": \"%s\", \"task\": \"mae\", \"dim\": %d, \"depth\": %d, "
           "\"frames\": %d, \"size\": %d, \"batch\": %d, \"steps\": %d, \"mask_ratio\": %g, "
           "\"decoder_mask\": \"%s\", \"dec_dim\": %d, \"dec_depth\": %d, \"optim\": \"%s\", "
           "\"fused\": %d, \"recompute_mlp\": %d, \"seconds\": %.3f, "
           "\"clips_per_s\": %.3f, \"peak_rss_mb\": %.1f, \"plan_mb\": %.1f, \"acts_mb\": %.1f, "
           "\"loss\": %.4f}\n",
           c.enc.dtype == TB_DTYPE_BF16 ? "tubelet-bf16" : "tubelet", c.enc.dim,
           c.enc.depth, c.enc.frames, c.enc.height, B, steps, c.mask_ratio, dmode, c.dec_dim,
           c.dec_depth, tb_optimizer_name(opt.kind), fused,
           c.enc.recompute_mlp, secs, B * steps / secs, ru.ru_maxrss / 1024.0,
           plan.arena / 1048576.0, plan.activations / 1048576.0, loss);
    tb_optim_free(&opt);
    tb_mae_close(&m);
    free(clips);
    free(mask);
    free(drop);
    return 0;
}
