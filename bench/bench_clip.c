/* bench/bench_clip.c - video-text contrastive training-step throughput on the CPU: the dual
 * encoder (model.h's tb_clip_*) with random weights, a random batch of uint8 clips (normalised
 * by the backend with OpenAI CLIP's mean and std, as training does) and random 77-token
 * captions laid out as the tokenizer's; each step encodes both, takes the symmetric InfoNCE
 * (temperature 0.07), runs the backward and AdamW (betas 0.9/0.98, wd 0.01, lr 3e-5: AVION's
 * pretraining). Timed over STEPS steps after one warm-up step; prints one JSON line with
 * clips/s, peak RSS and the seconds each phase took. The PyTorch side is bench/clip_peer.py;
 * bench/clip_pairs.sh runs both (docs/PERFORMANCE.md, section 9).
 * RECOMPUTE / RECOMPUTE_MLP are the video tower's (model.h's tb_vit_config).
 * Usage: bench_clip DIM DEPTH HEADS PATCH FRAMES SIZE BATCH EMBED TEXT_WIDTH TEXT_HEADS
 *        TEXT_DEPTH [STEPS=3] [RECOMPUTE=0] [RECOMPUTE_MLP=0] [PRECISION=fp32|bf16] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "tubelet/data.h"
#include "tubelet/model.h"
#include "tubelet/rng.h"
#include "tubelet/train.h"

enum { VOCAB = 49408, CTX = 77, SOT = 49406, EOT = 49407 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Captions as the CLIP tokenizer lays them out: the start token, 8-16 word ids (12 on
 * average), the end token (the largest id, where the text tower reads its features), zero
 * padding. Every row costs the same whatever its length: the tower runs all CTX positions. */
static void make_captions(int32_t *ids, int B, tb_rng *r)
{
    for (int b = 0; b < B; b++) {
        int32_t *row = ids + (size_t)b * CTX;
        int words = 8 + (int)tb_rng_below(r, 9);
        for (int j = 0; j < CTX; j++)
            row[j] = j == 0           ? SOT
                     : j <= words     ? 1 + (int32_t)tb_rng_below(r, SOT - 1)
                     : j == words + 1 ? EOT
                                      : 0;
    }
}

/* The phases of one step, timed separately (their sum is the step). */
enum { PH_VIDEO, PH_TEXT, PH_LOSS, PH_VIDEO_BWD, PH_TEXT_BWD, PH_OPTIM, N_PH };
static const char *const phase_names[N_PH] = {"video_fwd", "text_fwd", "loss",
                                              "video_bwd", "text_bwd", "optim"};

int main(int argc, char **argv)
{
    if (argc < 12) {
        fprintf(stderr, "usage: bench_clip DIM DEPTH HEADS PATCH FRAMES SIZE BATCH EMBED "
                "TEXT_WIDTH TEXT_HEADS TEXT_DEPTH [STEPS] [RECOMPUTE] [RECOMPUTE_MLP]\n");
        return 2;
    }
    struct tb_clip_config c = {
        .video = {.dim = atoi(argv[1]), .depth = atoi(argv[2]), .heads = atoi(argv[3]),
                  .patch = atoi(argv[4]), .frames = atoi(argv[5]), .height = atoi(argv[6]),
                  .width = atoi(argv[6]), .recompute = argc > 13 ? atoi(argv[13]) : 0,
                  .recompute_mlp = argc > 14 ? atoi(argv[14]) : 0,
                  .dtype = argc > 15 && !strcmp(argv[15], "bf16") ? TB_DTYPE_BF16 : TB_DTYPE_F32},
        .embed = atoi(argv[8]), .vocab = VOCAB, .ctx = CTX, .text_width = atoi(argv[9]),
        .text_heads = atoi(argv[10]), .text_layers = atoi(argv[11]), .text_causal = 1,
    };
    int B = atoi(argv[7]), E = c.embed, steps = argc > 12 ? atoi(argv[12]) : 3;
    if (B < 1 || E < 1 || steps < 1) {
        fprintf(stderr, "bench_clip: BATCH, EMBED and STEPS must be positive\n");
        return 2;
    }
    tb_clip *m = NULL;
    struct tb_plan_bytes plan = {0};
    struct tb_optim opt = {.kind = TB_OPT_ADAMW, .lr = 3e-5f, .beta1 = 0.9f, .beta2 = 0.98f,
                           .eps = 1e-8f, .weight_decay = 0.01f};
    if (tb_clip_open(&m, &c) < 0 || tb_clip_plan(m, B, &plan) < 0 ||
        tb_optim_init(&opt, tb_clip_params(m)) < 0 || tb_clip_init(m, 1) < 0) {
        fprintf(stderr, "bench_clip: %s\n", tb_errmsg());
        return 1;
    }
    size_t nv = (size_t)B * c.video.frames * c.video.height * c.video.width * 3;
    size_t be = (size_t)B * E;
    uint8_t *clips = malloc(nv);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)B * CTX);
    float *emb = malloc(sizeof(float) * be * 4);
    if (!clips || !ids || !emb) {
        fprintf(stderr, "bench_clip: out of memory\n");
        return 1;
    }
    float *v = emb, *t = v + be, *dv = t + be, *dt = dv + be;
    tb_rng r;
    tb_rng_init(&r, 2, 0);
    for (size_t i = 0; i < nv; i++)
        clips[i] = (uint8_t)tb_rng_below(&r, 256);
    make_captions(ids, B, &r);
    double t0 = 0, ph[N_PH] = {0}, loss = 0;
    for (int s = 0; s <= steps; s++) {
        if (s == 1) {
            t0 = now();
            for (int k = 0; k < N_PH; k++)
                ph[k] = 0;
        }
        /* The two backward calls do what one tb_clip_backward(m, dv, dt, 0) does, in its order. */
        double tk[N_PH + 1];
        tk[0] = now();
        int rc = tb_clip_set_clips(m, clips, NULL, B, tb_mean_openai, tb_std_openai);
        if (rc >= 0)
            rc = tb_clip_encode_video(m, v);
        tk[1] = now();
        if (rc >= 0)
            rc = tb_clip_encode_text(m, ids, B, t);
        tk[2] = now();
        if (rc >= 0) {
            rc = tb_clip_infonce(v, t, B, E, 1 / 0.07, &loss, dv, dt, NULL);
        }
        tk[3] = now();
        if (rc >= 0)
            rc = tb_clip_backward(m, dv, NULL, 0);
        tk[4] = now();
        if (rc >= 0)
            rc = tb_clip_backward(m, NULL, dt, 0);
        tk[5] = now();
        if (rc >= 0)
            rc = tb_optim_update(&opt, 1.0f);
        tk[6] = now();
        if (rc < 0) {
            fprintf(stderr, "bench_clip: %s\n", tb_errmsg());
            return 1;
        }
        for (int k = 0; k < N_PH; k++)
            ph[k] += tk[k + 1] - tk[k];
    }
    double secs = now() - t0;
    char impl[64] = "tubelet";
    if (c.video.recompute)
        snprintf(impl, sizeof(impl), "tubelet-recompute");
    else if (c.video.recompute_mlp)
        snprintf(impl, sizeof(impl), "tubelet-recompute-mlp%d", c.video.recompute_mlp);
    if (c.video.dtype == TB_DTYPE_BF16)
        strcat(impl, "-bf16");
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"impl\": \"%s\", \"task\": \"clip\", \"dim\": %d, \"depth\": %d, "
           "\"heads\": %d, \"patch\": %d, \"frames\": %d, \"size\": %d, \"batch\": %d, "
           "\"embed\": %d, \"text_width\": %d, \"text_heads\": %d, \"text_depth\": %d, "
           "\"steps\": %d, \"seconds\": %.3f, \"clips_per_s\": %.4f, \"peak_rss_mb\": %.1f, "
           "\"params\": %lld, \"plan_mb\": %.1f, \"acts_mb\": %.1f, \"loss\": %.4f, "
           "\"phase_s\": {",
           impl, c.video.dim, c.video.depth, c.video.heads, c.video.patch, c.video.frames,
           c.video.height, B, E, c.text_width, c.text_heads, c.text_layers, steps, secs,
           B * steps / secs, ru.ru_maxrss / 1024.0,
           (long long)tb_params_floats(tb_clip_params(m)), plan.arena / 1048576.0,
           plan.activations / 1048576.0, loss);
    for (int k = 0; k < N_PH; k++)
        printf("%s\"%s\": %.3f", k ? ", " : "", phase_names[k], ph[k] / steps);
    printf("}}\n");
    tb_optim_free(&opt);
    tb_clip_close(&m);
    free(clips);
    free(ids);
    free(emb);
    return 0;
}
