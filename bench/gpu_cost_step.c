/* bench/gpu_cost_step.c - one ViT classifier training step (forward, backward, gradient norm,
 * AdamW) on the emulated CUDA device, bf16, with the emulator's cost count on for that step
 * alone: each kernel launch and cuBLASLt product of the step appends a line to COST_FILE
 * (src/tensor/cuda/emu/emulate_cost.h). Random weights and clips, as bench_train.c's.
 * bench/gpu_cost.sh runs it at a few depths and batches and scales the counts to a full step.
 * The class token pools (N = tokens + 1, the cls recipe).
 * Usage: gpu_cost_step COST_FILE DIM DEPTH HEADS FRAMES SIZE BATCH [PATCH=16] [TUBELET=2] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "tubelet/data.h"
#include "tubelet/model.h"
#include "tubelet/rng.h"
#include "tubelet/train.h"

int main(int argc, char **argv)
{
    if (argc < 8) {
        fprintf(stderr, "usage: gpu_cost_step COST_FILE DIM DEPTH HEADS FRAMES SIZE BATCH "
                        "[PATCH] [TUBELET]\n");
        return 2;
    }
    struct tb_vit_config c = {
        .dim = atoi(argv[2]), .depth = atoi(argv[3]), .heads = atoi(argv[4]),
        .frames = atoi(argv[5]), .height = atoi(argv[6]), .width = atoi(argv[6]),
        .patch = argc > 8 ? atoi(argv[8]) : 16, .tubelet = argc > 9 ? atoi(argv[9]) : 2,
        .classes = 400, .pool = TB_POOL_CLS, .pos = TB_POS_SINCOS, .dtype = TB_DTYPE_BF16,
        .backend = "cuda-emu",
    };
    const int B = atoi(argv[7]);
    tb_vit *m = NULL;
    struct tb_optim opt = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                           .weight_decay = 0.05f};
    struct tb_plan_bytes plan = {0};
    if (tb_vit_open(&m, &c) < 0 || tb_vit_plan(m, B, &plan) < 0 || tb_optim_init(&opt, tb_vit_params(m)) < 0 ||
        tb_vit_init(m, 1) < 0) {
        fprintf(stderr, "gpu_cost_step: %s\n", tb_errmsg());
        return 1;
    }
    const size_t nv = (size_t)B * 3 * c.frames * c.height * c.width;
    uint8_t *clips = malloc(nv);
    int64_t *labels = malloc(sizeof(int64_t) * (size_t)B);
    if (!clips || !labels)
        return 1;
    tb_rng r;
    tb_rng_init(&r, 2, 0);
    for (size_t i = 0; i < nv; i++)
        clips[i] = (uint8_t)tb_rng_below(&r, 256);
    for (int b = 0; b < B; b++)
        labels[b] = (int64_t)tb_rng_below(&r, 400);
    /* The emulator reads TBC_EMU_COST as each launch is queued: on for the step alone. */
    setenv("TBC_EMU_COST", argv[1], 1);
    double gnorm = 0;
    float loss = 0;
    int rc = 0;
    if (tb_vit_forward_clips(m, clips, NULL, B, tb_mean_openai, tb_std_openai, labels, 0.1f,
                             &loss) < 0 ||
        tb_vit_backward(m) < 0 || tb_grad_norm(tb_vit_params(m), &gnorm) < 0 ||
        tb_optim_update(&opt, tb_clip_factor(gnorm, 1.0)) < 0) {
        fprintf(stderr, "gpu_cost_step: %s\n", tb_errmsg());
        rc = 1;
    }
    unsetenv("TBC_EMU_COST");
    tb_optim_free(&opt);
    tb_vit_close(&m); /* runs what is still queued */
    free(clips);
    free(labels);
    return rc;
}
