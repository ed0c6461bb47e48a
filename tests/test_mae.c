/* tests/test_mae.c - VideoMAE pretraining (src/model/mae.c).
 * - Against PyTorch (tests/ref/mae_ref.py, VideoMAE's model and loss): the loss, the decoder's
 *   predictions, every gradient and the weights after 3 steps of AdamW and of Lion agree to a
 *   relative error of 1e-4 per tensor (float32), for mask ratios 0.9 and 0.75, with and
 *   without v2's running-cell decoder masking, tubelet 2 and 1, non-square frames, and the
 *   raw-pixel target; the guarded backend gives the same bits.
 * - The masks: tube masks mask int(ratio HW) positions of every slice alike, are a function
 *   of (seed, epoch, index) alone and cover the positions evenly; the running cell drops k of
 *   every 2x2 cell, rotating one step a slice.
 * - Fused updates (tb_params_fuse: each gradient span applied as the backward completes it,
 *   the spans sharing one buffer) give the same bits as a backward and then the update: 3
 *   steps of AdamW and Lion, with and without decoder masking; what needs the kept gradients
 *   refuses, and a fused plan's backward without the update fails.
 * - bf16 mode against its exact emulation (mae_ref.py --precision bf16): within tolerances
 *   and nearer to it than the fp32 mode; the guarded backend and --recompute, the same bits;
 *   against PyTorch's bf16 autocast (mae_ref.py --precision autocast) on the CPU where its
 *   products round once, and on the GPU in bench/gpu-check.sh's phase (b).
 * - Bad settings and inputs: clear errors. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "tb_test.h"
#include "tubelet/model.h"
#include "tubelet/rng.h"
#include "tubelet/safetensors.h"
#include "tubelet/train.h"

#ifndef PYTHON
#define PYTHON TB_TEST_PYTHON
#endif

enum { DIM = 64, DEPTH = 2, HEADS = 2, PATCH = 8, FRAMES = 4, DEC_DIM = 32, DEC_DEPTH = 2,
       DEC_HEADS = 2, B = 3 };

struct variant {
    double ratio;
    int running_cell, tubelet, height, width, norm_target;
    const char *optim;
};

static struct tb_mae_config config(const struct variant *v)
{
    struct tb_mae_config c = {
        .enc = {.dim = DIM, .depth = DEPTH, .heads = HEADS, .patch = PATCH,
                .tubelet = v->tubelet, .frames = FRAMES, .height = v->height,
                .width = v->width},
        .mask_ratio = v->ratio,
        .decoder_mask = v->running_cell ? TB_DECODER_MASK_RUNNING_CELL : TB_DECODER_MASK_NONE,
        .decoder_ratio = 0.5, .dec_dim = DEC_DIM, .dec_depth = DEC_DEPTH, .dec_heads = DEC_HEADS,
        .norm_target = v->norm_target,
    };
    return c;
}

/* Weights (the initialisation, perturbed so every tensor carries signal) and a batch: random
 * normalised video, the masks of samples 0..B-1 of epoch 3. */
static void write_inputs(const struct tb_mae_config *c, const char *wpath, const char *bpath,
                         uint64_t seed)
{
    tb_mae *m = NULL;
    CHECK_EQ(tb_mae_open(&m, c), 0);
    if (!m)
        return;
    CHECK_EQ(tb_mae_init(m, seed), 0);
    tbt_write_weights(tb_mae_params(m), wpath, seed, "test_mae");
    tb_rng r;
    tb_rng_init_for(&r, seed, TB_RNG_TEST, 2, 0);

    int N;
    tb_mae_sizes(m, &N, NULL, NULL, NULL);
    const struct tb_vit_config *e = &c->enc;
    int64_t nv = (int64_t)B * 3 * e->frames * e->height * e->width;
    float *video = malloc(sizeof(float) * (size_t)nv);
    uint8_t *mask = malloc((size_t)N), *drop = malloc((size_t)N);
    int64_t *mask64 = malloc(sizeof(int64_t) * (size_t)B * N);
    int64_t *drop64 = malloc(sizeof(int64_t) * (size_t)B * N);
    for (int64_t i = 0; i < nv; i++)
        video[i] = (float)tb_rng_normal(&r);
    for (int b = 0; b < B; b++) {
        tb_mae_make_mask(m, seed, 3, b, mask, drop);
        for (int t = 0; t < N; t++) {
            mask64[(size_t)b * N + t] = mask[t];
            drop64[(size_t)b * N + t] = drop[t];
        }
    }
    const int64_t vshape[5] = {B, 3, e->frames, e->height, e->width}, mshape[2] = {B, N};
    struct tb_st_tensor bt[3] = {
        tbt_tensor("video", TB_ST_F32, 5, vshape, video),
        tbt_tensor("mask", TB_ST_I64, 2, mshape, mask64),
        tbt_tensor("dmask", TB_ST_I64, 2, mshape, drop64),
    };
    CHECK_EQ(tb_st_write(bpath, bt, c->decoder_mask ? 3 : 2, NULL), 0);
    free(video);
    free(mask);
    free(drop);
    free(mask64);
    free(drop64);
    tb_mae_close(&m);
}

static void test_against_pytorch(void)
{
    const struct variant vs[] = {
        {0.9, 0, 2, 32, 48, 1, "adamw"},
        {0.75, 0, 2, 48, 32, 1, "lion"},
        {0.9, 1, 2, 32, 48, 1, "lion"},
        {0.75, 1, 1, 32, 32, 1, "adamw"},
        {0.75, 0, 2, 32, 48, 0, "adamw"},
    };
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        const struct variant *v = &vs[i];
        struct tb_mae_config c = config(v);
        char what[160], w[4300], b[4300], o[4300], r[4300], g[4300], flags[1400], *out = NULL;
        snprintf(what, sizeof(what), "ratio %.2f, %s decoder, tubelet %d, %dx%d, %s target, %s",
                 v->ratio, v->running_cell ? "running-cell" : "full", v->tubelet, v->height,
                 v->width, v->norm_target ? "normalised" : "raw", v->optim);
        tbt_case = what;
        snprintf(w, sizeof(w), "%s/w%zu.safetensors", tbt_dir(), i);
        snprintf(b, sizeof(b), "%s/b%zu.safetensors", tbt_dir(), i);
        snprintf(o, sizeof(o), "%s/o%zu.safetensors", tbt_dir(), i);
        snprintf(r, sizeof(r), "%s/r%zu.safetensors", tbt_dir(), i);
        snprintf(g, sizeof(g), "%s/g%zu.safetensors", tbt_dir(), i);
        write_inputs(&c, w, b, 500 + i);
        const char *model = "--dim 64 --depth 2 --heads 2 --patch 8 --frames 4 --dec-dim 32 "
                            "--dec-depth 2 --dec-heads 2";
        snprintf(flags, sizeof(flags), "%s --tubelet %d --size %dx%d %s --optim %s --steps 3 "
                 "--lr 0.001 --wd 0.05 --beta1 0.9 --beta2 0.95 --weights %s --batch %s", model,
                 v->tubelet, v->width, v->height, v->norm_target ? "" : "--no-norm-target",
                 v->optim, w, b);
        int rc = tbt_run(&out, 120, "%s step --task mae %s --mask-ratio %g %s --out %s",
                         tbt_tubelet(), flags, v->ratio,
                         v->running_cell ? "--decoder-mask running-cell" : "", o);
        CHECK_MSG(rc == 0, "tubelet step --task mae: %s", out);
        free(out);
        rc = tbt_run(&out, 300, PYTHON " %s/tests/ref/mae_ref.py %s --out %s", TB_SOURCE_DIR,
                     flags, r);
        CHECK_MSG(rc == 0, "mae_ref.py: %s", out);
        free(out);
        tbt_compare_st(o, r, what, 1e-4, NULL, 1);
        if (i == 0 || i == 2) { /* the guarded backend: memory unreadable outside its ops */
            rc = tbt_run(&out, 120, "%s step --task mae %s --mask-ratio %g %s --backend "
                         "cpu-guarded --out %s", tbt_tubelet(), flags, v->ratio,
                         v->running_cell ? "--decoder-mask running-cell" : "", g);
            CHECK_MSG(rc == 0, "tubelet step --backend cpu-guarded: %s", out);
            free(out);
            tbt_compare_st(o, g, what, 0, NULL, 1);
        }
    }
}

static void test_masks(void)
{
    tbt_case = "tube masks";
    const struct variant v = {0.75, 1, 2, 32, 48, 1, "adamw"};
    struct tb_mae_config c = config(&v);
    tb_mae *m = NULL;
    CHECK_EQ(tb_mae_open(&m, &c), 0);
    if (!m)
        return;
    int N, Nv, Nq;
    tb_mae_sizes(m, &N, &Nv, &Nq, NULL);
    const int Tp = FRAMES / 2, hw = N / Tp, masked = (int)(0.75 * hw);
    CHECK_EQ(Nv, Tp * (hw - masked));
    CHECK_EQ(Nq, N / 2); /* 2 of each cell's 4 decoded */
    uint8_t mask[64], drop[64], again[64], again_drop[64];
    int *hits = calloc((size_t)hw, sizeof(int)), differ = 0, draws = 3000;
    uint8_t first[64];
    for (int s = 0; s < draws; s++) {
        int64_t epoch = s % 7, index = s / 7;
        tb_mae_make_mask(m, 11, epoch, index, mask, drop);
        tb_mae_make_mask(m, 11, epoch, index, again, again_drop);
        CHECK(!memcmp(mask, again, (size_t)N) && !memcmp(drop, again_drop, (size_t)N));
        int count = 0;
        for (int p = 0; p < hw; p++) {
            count += mask[p];
            hits[p] += mask[p];
            for (int t = 1; t < Tp; t++)
                CHECK(mask[t * hw + p] == mask[p]);
        }
        CHECK_EQ(count, masked);
        if (s == 0)
            memcpy(first, mask, (size_t)N);
        else
            differ += memcmp(first, mask, (size_t)N) != 0;
        /* Running cell: 2 of every 2x2 cell dropped; the next slice's cell is this one's read
         * one step further round the queue [1, 1, 0, 0]. */
        int Hp = 32 / PATCH, Wp = 48 / PATCH;
        for (int t = 0; t < Tp; t++)
            for (int y = 0; y < Hp; y += 2)
                for (int x = 0; x < Wp; x += 2) {
                    const uint8_t *d = drop + ((size_t)t * Hp + y) * Wp + x;
                    CHECK_EQ(d[0] + d[1] + d[Wp] + d[Wp + 1], 2);
                    if (t + 1 < Tp) {
                        const uint8_t *n = d + (size_t)Hp * Wp;
                        /* cell position i reads queue[(i + ptr) % 4]: position i of the next
                         * slice holds what position i + 1 held */
                        const uint8_t cur[4] = {d[0], d[1], d[Wp], d[Wp + 1]};
                        const uint8_t nxt[4] = {n[0], n[1], n[Wp], n[Wp + 1]};
                        for (int k = 0; k < 3; k++)
                            CHECK(nxt[k] == cur[k + 1]);
                        CHECK(nxt[3] == cur[0]);
                    }
                }
    }
    CHECK_MSG(differ > draws * 9 / 10, "only %d of %d masks differ from the first", differ,
              draws);
    /* Each position is masked with probability masked / hw: within 5 standard deviations. */
    double p = (double)masked / hw, sd = sqrt(draws * p * (1 - p));
    for (int q = 0; q < hw; q++)
        CHECK_MSG(fabs(hits[q] - draws * p) < 5 * sd, "position %d masked %d times of %d "
                  "(expected %.0f)", q, hits[q], draws, draws * p);
    free(hits);
    tb_mae_close(&m);
}

static int apply_span(void *ctx, int span)
{
    return tb_optim_update_span(ctx, span, 1.0f);
}

/* Model k of two built alike (k 1 fused), planned, with an optimizer. */
static tb_mae *fused_pair(const struct tb_mae_config *c, struct tb_optim *opt, int fused)
{
    tb_mae *m = NULL;
    CHECK_EQ(tb_mae_open(&m, c), 0);
    if (!m)
        return NULL;
    if (fused)
        tb_params_fuse(tb_mae_params(m), apply_span, opt);
    CHECK_EQ(tb_mae_init(m, 7), 0);
    CHECK_EQ(tb_mae_plan(m, B, NULL), 0);
    CHECK_EQ(tb_optim_init(opt, tb_mae_params(m)), 0);
    return m;
}

static void test_fused(void)
{
    tbt_case = "fused updates";
    for (int k = 0; k < 4; k++) {
        struct variant v = {0.75, k % 2, 2, 32, 32, 1, k < 2 ? "adamw" : "lion"};
        struct tb_mae_config c = config(&v);
        struct tb_optim opt[2] = {
            {.kind = (enum tb_optimizer)tb_optimizer_parse(v.optim), .lr = 3e-3f,
             .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.05f},
        };
        opt[1] = opt[0];
        tb_mae *m[2] = {fused_pair(&c, &opt[0], 0), fused_pair(&c, &opt[1], 1)};
        if (!m[0] || !m[1])
            return;
        int N;
        tb_mae_sizes(m[0], &N, NULL, NULL, NULL);
        size_t nv = (size_t)B * 3 * FRAMES * 32 * 32;
        uint8_t *clips = malloc(nv), mask[B * 64], drop[B * 64];
        tb_rng r;
        tb_rng_init(&r, 5, 0);
        for (size_t i = 0; i < nv; i++)
            clips[i] = (uint8_t)tb_rng_below(&r, 256);
        for (int s = 0; s < 3; s++) {
            float loss[2];
            for (int b = 0; b < B; b++)
                tb_mae_make_mask(m[0], 1, s, b, mask + b * N, drop + b * N);
            for (int f = 0; f < 2; f++) {
                if (f)
                    tb_optim_begin_step(&opt[1]);
                CHECK_EQ(tb_mae_set_clips(m[f], clips, NULL, B, tb_mean_imagenet,
                                          tb_std_imagenet), 0);
                CHECK_MSG(tb_mae_set_mask(m[f], mask, v.running_cell ? drop : NULL) == 0, "%s",
                          tb_errmsg());
                CHECK_EQ(tb_mae_run(m[f], &loss[f]), 0);
                CHECK_EQ(tb_mae_backward(m[f]), 0);
                if (!f)
                    CHECK_EQ(tb_optim_update(&opt[0], 1.0f), 0);
            }
            CHECK_MSG(!memcmp(&loss[0], &loss[1], sizeof(float)), "%s, decoder mask %d, step "
                      "%d: loss %.9g fused, %.9g not", v.optim, v.running_cell, s, loss[1],
                      loss[0]);
        }
        /* every weight after 3 steps, to the bit */
        tb_params *pr[2] = {tb_mae_params(m[0]), tb_mae_params(m[1])};
        int differ = 0;
        for (int i = 0; i < tb_params_count(pr[0]); i++) {
            size_t n = (size_t)tb_params_at(pr[0], i)->n;
            float *w0 = malloc(sizeof(float) * n), *w1 = malloc(sizeof(float) * n);
            CHECK_EQ(tb_params_read(pr[0], i, w0), 0);
            CHECK_EQ(tb_params_read(pr[1], i, w1), 0);
            if (memcmp(w0, w1, sizeof(float) * n) && differ++ < 3)
                CHECK_MSG(0, "%s, decoder mask %d: %s differs after 3 fused steps", v.optim,
                          v.running_cell, tb_params_at(pr[0], i)->name);
            free(w0);
            free(w1);
        }
        /* the gradients are not kept */
        double norm;
        float g;
        CHECK(tb_optim_update(&opt[1], 1.0f) < 0);
        CHECK_STR_HAS(tb_errmsg(), "fused updates");
        CHECK(tb_grad_norm(pr[1], &norm) < 0);
        CHECK(tb_params_read_grad(pr[1], tb_params_find(pr[1], "mask_token"), &g) < 0);
        CHECK_STR_HAS(tb_errmsg(), "mask_token");
        free(clips);
        for (int f = 0; f < 2; f++) {
            tb_optim_free(&opt[f]);
            tb_mae_close(&m[f]);
        }
    }
    /* a fused plan whose backward has no update to apply */
    struct variant v = {0.75, 0, 2, 32, 32, 1, "adamw"};
    struct tb_mae_config c = config(&v);
    tb_mae *m = NULL;
    CHECK_EQ(tb_mae_open(&m, &c), 0);
    tb_params_fuse(tb_mae_params(m), NULL, NULL);
    CHECK_EQ(tb_mae_plan(m, 1, NULL), 0);
    int N;
    tb_mae_sizes(m, &N, NULL, NULL, NULL);
    float *video = calloc((size_t)3 * FRAMES * 32 * 32, sizeof(float)), loss;
    uint8_t mask[64], drop[64];
    tb_mae_make_mask(m, 0, 0, 0, mask, drop);
    CHECK_EQ(tb_mae_set_video(m, video, 1, tb_mean_imagenet, tb_std_imagenet), 0);
    CHECK_EQ(tb_mae_set_mask(m, mask, NULL), 0);
    CHECK_EQ(tb_mae_run(m, &loss), 0);
    CHECK(tb_mae_backward(m) < 0);
    CHECK_STR_HAS(tb_errmsg(), "tb_params_fuse");
    /* a new input may take the space of the forward's activations: no backward after it */
    CHECK_EQ(tb_mae_set_video(m, video, 1, tb_mean_imagenet, tb_std_imagenet), 0);
    CHECK_EQ(tb_mae_set_mask(m, mask, NULL), 0);
    CHECK_EQ(tb_mae_run(m, &loss), 0);
    CHECK_EQ(tb_mae_set_video(m, video, 1, tb_mean_imagenet, tb_std_imagenet), 0);
    CHECK(tb_mae_backward(m) < 0);
    CHECK_STR_HAS(tb_errmsg(), "since the last backward and input");
    free(video);
    tb_mae_close(&m);
}

static void expect_open_error(const struct tb_mae_config *c, const char *needle)
{
    tb_mae *m = NULL;
    int rc = tb_mae_open(&m, c);
    CHECK_MSG(rc < 0 && strstr(tb_errmsg(), needle), "open: rc %d, message '%s' (want '%s')", rc,
              rc < 0 ? tb_errmsg() : "", needle);
    tb_mae_close(&m);
}

static void test_bad_input(void)
{
    tbt_case = "bad settings and inputs";
    const struct variant v = {0.9, 0, 2, 32, 48, 1, "adamw"};
    struct tb_mae_config c = config(&v);
    c.mask_ratio = 1.0;
    expect_open_error(&c, "mask ratio 1 masks 24 of the 24 positions");
    c.mask_ratio = 0.02;
    expect_open_error(&c, "mask ratio 0.02 masks 0 of the 24");
    c = config(&v);
    c.enc.height = c.enc.width = 40; /* a 5x5 grid */
    c.decoder_mask = TB_DECODER_MASK_RUNNING_CELL;
    expect_open_error(&c, "5x5 grid of patches: it must be even");
    c = config(&v);
    c.decoder_mask = TB_DECODER_MASK_RUNNING_CELL;
    c.decoder_ratio = 0.1;
    expect_open_error(&c, "drops 0 of a cell's 4");
    /* A batch whose masks do not match the model's ratio, and one without its mask. */
    char w[4300], b[4300], o[4300], *out = NULL;
    c = config(&v);
    snprintf(w, sizeof(w), "%s/bad_w.safetensors", tbt_dir());
    snprintf(b, sizeof(b), "%s/bad_b.safetensors", tbt_dir());
    snprintf(o, sizeof(o), "%s/bad_o.safetensors", tbt_dir());
    write_inputs(&c, w, b, 7);
    const char *model = "--dim 64 --depth 2 --heads 2 --patch 8 --frames 4 --tubelet 2 --size "
                        "48x32 --dec-dim 32 --dec-depth 2 --dec-heads 2";
    int rc = tbt_run(&out, 60, "%s step --task mae %s --mask-ratio 0.75 --weights %s --batch %s "
                     "--out %s", tbt_tubelet(), model, w, b, o);
    CHECK_MSG(rc != 0 && out && strstr(out, "clip 0: its mask leaves 6 of 48 tokens visible"),
              "a mask of another ratio: rc %d: %s", rc, out);
    free(out);
    rc = tbt_run(&out, 60, "%s step --task mae %s --decoder-mask running-cell --weights %s "
                 "--batch %s --out %s", tbt_tubelet(), model, w, b, o);
    CHECK_MSG(rc != 0 && out && strstr(out, "'dmask' must be int64 (3, 48)"),
              "no decoder mask: rc %d: %s", rc, out);
    free(out);
    /* Weights of a classifier are not an MAE's. */
    rc = tbt_run(&out, 60, "%s step --task mae %s --weights %s --batch %s --out %s",
                 tbt_tubelet(), model, b, b, o);
    CHECK_MSG(rc != 0 && out && strstr(out, "bad_b.safetensors") && strstr(out, "encoder."),
              "weights without the MAE's tensors: rc %d: %s", rc, out);
    free(out);
}

/* bf16 mode (docs/PRECISION.md) against its exact emulation (mae_ref.py --precision bf16),
 * 3 steps, as test_vit's test_bf16 for the classification ViT: relative errors within
 * tolerances, and the bf16 mode nearer the emulation than the fp32 mode (outputs and median
 * gradient); the guarded backend and recomputation give the same bits. Where this PyTorch's
 * bf16 autocast rounds once (tbt_autocast_rounds_once), the bf16 mode is also within a looser
 * tolerance of VideoMAE's model under autocast, whose encoder stream is bf16 (mae_ref.py). */
static void test_bf16(void)
{
    /* Measured (the two variants): against the emulation, bf16: outputs 1.2e-6 and 5.6e-4,
     * gradients worst 4.0e-3 and 3.7e-3 (medians 1.8e-3 and 1.0e-3), weights 6.7e-4 and
     * 1.2e-2; fp32: outputs 2.9e-3, 2.9e-3, median gradients 5.5e-3, 3.9e-3. */
    const double tol[3] = {1e-2, 2e-2, 1.5e-1}; /* outputs, gradients, weights */
    /* Against CPU autocast (AVX-512 with avx512_bf16), bf16: outputs 1.3e-3 and 1.2e-3,
     * gradients 9.3e-3 and 6.1e-3 (medians 2.9e-3 and 1.7e-3), weights 1.3e-2 and 6.8e-3:
     * test_vit's tolerance for eager autocast holds; the GPU's autocast is held to it too. */
    const double tol_autocast[2] = {2e-2, 2e-2}; /* outputs, gradients */
    const char *ref = PYTHON " " TB_SOURCE_DIR "/tests/ref/mae_ref.py";
    int autocast = tbt_autocast_rounds_once();
    if (!autocast)
        fprintf(stderr,
                "bf16: note: this PyTorch's bf16 products do not round once on this "
                "CPU; the comparison with its autocast is left out (the emulation is not)\n");
    /* The emulated CUDA device (tbt_cuda_emu_step) against the CPU's bf16 mode: the same
     * rounding points, f32 sums in other orders (a bf16 result may flip one step and carry).
     * Measured over the vit, mae and clip cases (AVX-512 with avx512_bf16): outputs 2.7e-4,
     * gradients 2.8e-3, weights after 3 steps 4.5e-3 at worst; 76-100% of values to the bit. */
    const double tol_emu[3] = {2e-3, 2e-2, 5e-2};
    const struct variant vs[] = {{0.9, 0, 2, 32, 48, 1, "adamw"}, {0.75, 1, 2, 48, 32, 0, "lion"}};
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        const struct variant *v = &vs[i];
        struct tb_mae_config c = config(v);
        char what[160], flags[1400];
        snprintf(what, sizeof(what), "bf16, ratio %.2f, %s decoder, %s target, %s", v->ratio,
                 v->running_cell ? "running-cell" : "full", v->norm_target ? "normalised" : "raw",
                 v->optim);
        tbt_case = what;
        struct tbt_bf16_files f;
        tbt_bf16_files(&f, i);
        write_inputs(&c, f.w, f.b, 900 + i);
        snprintf(flags, sizeof(flags), "--dim 64 --depth 2 --heads 2 --patch 8 --frames 4 "
                 "--dec-dim 32 --dec-depth 2 --dec-heads 2 --tubelet %d --size %dx%d %s "
                 "--optim %s --steps 3 --lr 0.001 --wd 0.05 --beta1 0.9 --beta2 0.95 "
                 "--weights %s --batch %s", v->tubelet, v->width, v->height,
                 v->norm_target ? "" : "--no-norm-target", v->optim, f.w, f.b);
        char mae[128];
        snprintf(mae, sizeof(mae), "--task mae --mask-ratio %g %s", v->ratio,
                 v->running_cell ? "--decoder-mask running-cell" : "");
        if (!tbt_bf16_runs(&f, mae, ref, flags))
            continue;
        tbt_bf16_verdict(what, f.bf16, f.fp32, f.emu, NULL, tol);
        if (autocast)
            tbt_autocast_compare(what, "bf16", ref, flags, "cpu", f.bf16, f.emu, NULL,
                                 tol_autocast);
        tbt_cuda_emu_step(what, mae, ref, flags, f.bf16, f.other, NULL, tol_emu, tol, tol_autocast);
    }
}

int main(void)
{
    tbt_begin("mae");
    test_masks();
    test_bad_input();
    test_fused();
    if (tbt_run(NULL, 60, PYTHON " -c 'import torch, numpy'") != 0) {
        fprintf(stderr, "skip: %s cannot import torch and numpy (python3-torch)\n", PYTHON);
        return tbt_failures ? 1 : TBT_SKIP;
    }
    test_against_pytorch();
    test_bf16();
    TBT_EXIT();
}
