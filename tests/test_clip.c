/* tests/test_clip.c - the video-text dual encoder (src/model/clip.c, text.c, vit.c's CLIP
 * layout).
 * - Against PyTorch (tests/ref/clip_ref.py: AVION's towers on nn.MultiheadAttention and its
 *   ClipLoss): the loss, both towers' features, every gradient and the weights after 3 steps
 *   of AdamW agree to a relative error of 1e-4 per tensor (float32), for several frames and
 *   one (no temporal embedding), non-square frames, and AVION's max-margin loss; with Lion
 *   and max-margin the losses of 3 steps, the features and gradients; the guarded backend
 *   gives the same bits. The reference's own self-test (finite differences, an independent loss,
 *   the causal mask) runs first.
 * - bf16 mode against its exact emulation (clip_ref.py --precision bf16): within tolerances and
 *   nearer to it than the fp32 mode; the guarded backend and --recompute, the same bits; the
 *   features and losses against PyTorch's bf16 autocast (clip_ref.py --precision autocast) on
 *   the CPU where its products round once, and on the GPU in bench/gpu-check.sh's phase (b).
 * - The loss alone: tb_clip_infonce against finite differences, and its value for perfectly
 *   aligned and for swapped pairs.
 * - The loss as the backend's ops (infonce_fwd, infonce_bwd: the clip task's) against
 *   tb_clip_infonce to the bit, on the CPU and guarded backends.
 * - Bad settings and inputs: clear errors. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "tb_test.h"
#include "tensor/backend.h"
#include "tubelet/model.h"
#include "tubelet/rng.h"
#include "tubelet/safetensors.h"

#ifndef PYTHON
#define PYTHON TB_TEST_PYTHON
#endif

enum { DIM = 64, DEPTH = 2, HEADS = 2, PATCH = 8, EMBED = 32, VOCAB = 1000, CTX = 16,
       TW = 32, TH = 2, TL = 2, B = 3 };

struct variant {
    int frames, tubelet, height, width;
    const char *optim, *loss;
    int learn_temperature;
    double wd; /* 0: 0.05 */
};

static struct tb_clip_config config(const struct variant *v)
{
    struct tb_clip_config c = {
        .video = {.dim = DIM, .depth = DEPTH, .heads = HEADS, .patch = PATCH,
                  .tubelet = v->tubelet, .frames = v->frames, .height = v->height,
                  .width = v->width},
        .embed = EMBED, .vocab = VOCAB, .ctx = CTX, .text_width = TW, .text_heads = TH,
        .text_layers = TL, .text_causal = 1, .temperature = 0.07,
        .learn_temperature = v->learn_temperature,
    };
    return c;
}

/* Captions as the tokenizer lays them out: start, words, the end token (the largest id) at a
 * position of each row's own, zero padding after it. */
static void make_ids(int64_t *ids, tb_rng *r)
{
    for (int b = 0; b < B; b++) {
        int end = 3 + b * 4;
        for (int j = 0; j < CTX; j++)
            ids[b * CTX + j] = j == 0     ? VOCAB - 2
                               : j < end  ? 1 + (int64_t)tb_rng_below(r, VOCAB - 3)
                               : j == end ? VOCAB - 1
                                          : 0;
    }
}

/* Weights (the initialisation, perturbed so every tensor - the zero temporal embedding and
 * biases too - carries signal) and a batch: random normalised video and captions. */
static void write_inputs(const struct tb_clip_config *c, const char *wpath, const char *bpath,
                         uint64_t seed)
{
    tb_clip *m = NULL;
    CHECK_EQ(tb_clip_open(&m, c), 0);
    if (!m)
        return;
    CHECK_EQ(tb_clip_init(m, seed), 0);
    tbt_write_weights(tb_clip_params(m), wpath, seed, "test_clip");
    tb_rng r;
    tb_rng_init_for(&r, seed, TB_RNG_TEST, 2, 0);
    const struct tb_vit_config *v = &c->video;
    int64_t nv = (int64_t)B * 3 * v->frames * v->height * v->width;
    float *video = malloc(sizeof(float) * (size_t)nv);
    int64_t ids[B * CTX];
    for (int64_t i = 0; i < nv; i++)
        video[i] = (float)tb_rng_normal(&r);
    make_ids(ids, &r);
    const int64_t vshape[5] = {B, 3, v->frames, v->height, v->width}, tshape[2] = {B, CTX};
    struct tb_st_tensor bt[2] = {tbt_tensor("video", TB_ST_F32, 5, vshape, video),
                                 tbt_tensor("text", TB_ST_I64, 2, tshape, ids)};
    CHECK_EQ(tb_st_write(bpath, bt, 2, NULL), 0);
    free(video);
    tb_clip_close(&m);
}

/* The key bias's gradient is zero but for rounding (softmax ignores a constant per query);
 * AdamW's and Lion's steps turn that noise into O(lr) steps of arbitrary sign, so those
 * weights are compared after the steps only in their query and value parts. */
static int skip_key_bias(const char *name, int64_t k, int64_t n)
{
    static const char tail[] = "attn.in_proj_bias";
    size_t len = strlen(name), k_len = sizeof(tail) - 1;
    return len > k_len && !strcmp(name + len - k_len, tail) &&
           strncmp(name, "grad.", 5) && k >= n / 3 && k < 2 * (n / 3);
}

/* Lion's update is the sign of a momentum, and AdamW's first one the sign of the gradient:
 * where rounding leaves an element within float noise of zero either sign is right, and one
 * element's flip moves a tensor by 2 lr. With Lion, and with the max-margin loss (whose
 * hinges leave many small gradients), only the losses of all steps (which such a flip moves
 * far less than the tolerance), the features and the first step's gradients are compared;
 * the updates themselves are checked with InfoNCE here and in tests/test_backend.c. */
static int skip_weights(const char *name, int64_t k, int64_t n)
{
    return strncmp(name, "grad.", 5) && strcmp(name, "loss") && strcmp(name, "video_emb") &&
           strcmp(name, "text_emb") ? 1 : skip_key_bias(name, k, n);
}

static void test_reference_self_test(void)
{
    tbt_case = "clip_ref.py --self-test";
    char *out = NULL;
    int rc = tbt_run(&out, 300, PYTHON " %s/tests/ref/clip_ref.py --self-test", TB_SOURCE_DIR);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "self-test: OK");
    free(out);
}

static void test_against_pytorch(void)
{
    const struct variant vs[] = {
        {4, 1, 32, 48, "adamw", "infonce"},
        {1, 1, 48, 32, "lion", "infonce"},
        {2, 1, 32, 32, "adamw", "infonce"},
        {2, 1, 32, 48, "adamw", "max-margin"},
        {4, 2, 32, 48, "adamw", "infonce"},
        {2, 1, 32, 32, "adamw", "infonce", 1},
        /* a decay large enough that a wrong decay set moves a tensor by 1% in 3 steps */
        {4, 1, 32, 32, "adamw", "infonce", 1, 5.0},
    };
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        const struct variant *v = &vs[i];
        struct tb_clip_config c = config(v);
        char what[160], w[4300], b[4300], o[4300], r[4300], g[4300], flags[1400], *out = NULL;
        double wd = v->wd > 0 ? v->wd : 0.05;
        snprintf(what, sizeof(what), "%d frames of %dx%d, tubelet %d, %s, %s%s, decay %g",
                 v->frames, v->height, v->width, v->tubelet, v->optim, v->loss,
                 v->learn_temperature ? ", learned temperature" : "", wd);
        tbt_case = what;
        snprintf(w, sizeof(w), "%s/w%zu.safetensors", tbt_dir(), i);
        snprintf(b, sizeof(b), "%s/b%zu.safetensors", tbt_dir(), i);
        snprintf(o, sizeof(o), "%s/o%zu.safetensors", tbt_dir(), i);
        snprintf(r, sizeof(r), "%s/r%zu.safetensors", tbt_dir(), i);
        snprintf(g, sizeof(g), "%s/g%zu.safetensors", tbt_dir(), i);
        write_inputs(&c, w, b, 700 + i);
        snprintf(flags, sizeof(flags), "--dim %d --depth %d --heads %d --patch %d --tubelet %d "
                 "--frames %d "
                 "--size %dx%d --embed %d --vocab %d --context %d --text-width %d "
                 "--text-heads %d --text-depth %d --optim %s --steps 3 --lr 0.001 --wd %g "
                 "--beta1 0.9 --beta2 0.98 --loss %s %s --weights %s --batch %s", DIM, DEPTH,
                 HEADS, PATCH, v->tubelet, v->frames, v->width, v->height, EMBED, VOCAB, CTX, TW,
                 TH, TL, v->optim, wd, v->loss, v->learn_temperature ? "--learn-temperature" : "", w,
                 b);
        int rc = tbt_run(&out, 120, "%s step --task clip %s --out %s", tbt_tubelet(), flags, o);
        CHECK_MSG(rc == 0, "tubelet step --task clip: %s", out);
        free(out);
        /* max-margin's hinges leave gradients near float32's noise: its reference runs in
         * float64, so the comparison measures tubelet's error alone */
        rc = tbt_run(&out, 300, PYTHON " %s/tests/ref/clip_ref.py %s --out %s%s", TB_SOURCE_DIR,
                     flags, r, strcmp(v->loss, "max-margin") ? "" : " --double");
        CHECK_MSG(rc == 0, "clip_ref.py: %s", out);
        free(out);
        int sign_like = !strcmp(v->optim, "lion") || !strcmp(v->loss, "max-margin");
        tbt_compare_st(o, r, what, 1e-4, sign_like ? skip_weights : skip_key_bias, 1);
        if (i == 0) { /* the guarded backend: memory unreadable outside its ops */
            rc = tbt_run(&out, 120, "%s step --task clip %s --backend cpu-guarded --out %s",
                         tbt_tubelet(), flags, g);
            CHECK_MSG(rc == 0, "tubelet step --backend cpu-guarded: %s", out);
            free(out);
            tbt_compare_st(o, g, what, 0, NULL, 1);
        }
    }
}

/* bf16 mode (docs/PRECISION.md) against its exact emulation (clip_ref.py --precision bf16),
 * 3 AdamW steps, as test_vit's test_bf16: relative errors within tolerances and the bf16 mode
 * nearer the emulation than the fp32 mode (outputs and median gradient); the guarded backend
 * and recomputation give the same bits. Where this PyTorch's bf16 autocast rounds once
 * (tbt_autocast_rounds_once), the features and losses are also within a looser tolerance of
 * AVION's towers under autocast; their gradients are reported only. */
static void test_bf16(void)
{
    /* Measured (the two variants): see the message each prints. */
    const double tol[3] = {1e-2, 2e-2, 1.5e-1}; /* outputs, gradients, weights */
    /* Against CPU autocast (AVX-512 with avx512_bf16), bf16: outputs 9.6e-3 and 1.3e-2 (the
     * losses of steps 2 and 3), gradients 3.0e-2 and 4.0e-1 (medians 2.3e-2 and 2.8e-1). The
     * gradients are not comparable: these cases' first-step gradients move with any bf16
     * rounding (the fp32 mode's are 2.1e-2 and 1.3e-1 from the emulation, medians 1.4e-2 and
     * 6.0e-2), and autocast rounds more than tubelet (eager attention's scores and
     * probabilities on the CPU; the normalised features and the similarity logits of the loss),
     * so they are reported only, here and against the GPU's autocast. */
    const double tol_autocast[2] = {2e-2, -1}; /* outputs; gradients reported only */
    const char *ref = PYTHON " " TB_SOURCE_DIR "/tests/ref/clip_ref.py";
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
    const struct variant vs[] = {{4, 1, 32, 48, "adamw", "infonce"},
                                 {4, 2, 32, 32, "adamw", "infonce", 1}};
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        const struct variant *v = &vs[i];
        struct tb_clip_config c = config(v);
        char what[160], flags[1400];
        snprintf(what, sizeof(what), "bf16, %d frames of %dx%d, tubelet %d%s", v->frames,
                 v->height, v->width, v->tubelet,
                 v->learn_temperature ? ", learned temperature" : "");
        tbt_case = what;
        struct tbt_bf16_files f;
        tbt_bf16_files(&f, i);
        write_inputs(&c, f.w, f.b, 950 + i);
        snprintf(flags, sizeof(flags), "--dim %d --depth %d --heads %d --patch %d --tubelet %d "
                 "--frames %d --size %dx%d --embed %d --vocab %d --context %d --text-width %d "
                 "--text-heads %d --text-depth %d --optim adamw --steps 3 --lr 0.001 --wd 0.05 "
                 "--beta1 0.9 --beta2 0.98 --loss infonce %s --weights %s --batch %s", DIM,
                 DEPTH, HEADS, PATCH, v->tubelet, v->frames, v->width, v->height, EMBED, VOCAB,
                 CTX, TW, TH, TL, v->learn_temperature ? "--learn-temperature" : "", f.w, f.b);
        if (!tbt_bf16_runs(&f, "--task clip", ref, flags))
            continue;
        tbt_bf16_verdict(what, f.bf16, f.fp32, f.emu, skip_key_bias, tol);
        if (autocast)
            tbt_autocast_compare(what, "bf16", ref, flags, "cpu", f.bf16, f.emu, skip_key_bias,
                                 tol_autocast);
        tbt_cuda_emu_step(what, "--task clip", ref, flags, f.bf16, f.other, skip_key_bias, tol_emu,
                          tol, tol_autocast);
    }
}

/* The loss against finite differences of itself, and two values known in closed form. */
/* tb_clip_infonce's loss (it must succeed) */
static double infonce(const float *v, const float *t, int N, int E, double scale, float *dv,
                      float *dt, double *dscale)
{
    double loss = NAN;
    CHECK_EQ(tb_clip_infonce(v, t, N, E, scale, &loss, dv, dt, dscale), 0);
    return loss;
}

static void test_infonce(void)
{
    tbt_case = "InfoNCE";
    enum { N = 5, E = 7 };
    tb_rng r;
    tb_rng_init_for(&r, 4, TB_RNG_TEST, 2, 0);
    float v[N * E], t[N * E], dv[N * E], dt[N * E];
    for (int i = 0; i < N * E; i++)
        v[i] = (float)tb_rng_normal(&r), t[i] = (float)tb_rng_normal(&r);
    double scale = 1 / 0.07, ds = 0;
    double l0 = infonce(v, t, N, E, scale, dv, dt, &ds), worst = 0;
    CHECK(isfinite(l0) && l0 > 0);
    for (int k = 0; k < 2 * N * E; k += 3) {
        float *x = k < N * E ? &v[k] : &t[k - N * E], saved = *x, h = 1e-3f;
        *x = saved + h;
        double lp = infonce(v, t, N, E, scale, NULL, NULL, NULL);
        *x = saved - h;
        double lm = infonce(v, t, N, E, scale, NULL, NULL, NULL);
        *x = saved;
        double num = (lp - lm) / (2.0 * ((double)(saved + h) - saved));
        double got = k < N * E ? dv[k] : dt[k - N * E];
        worst = fmax(worst, fabs(num - got) / (fabs(got) + 1e-2));
    }
    CHECK_MSG(worst < 1e-3, "finite differences: worst relative error %.3g", worst);
    double h = 1e-4, num = (infonce(v, t, N, E, scale + h, NULL, NULL, NULL) -
                            infonce(v, t, N, E, scale - h, NULL, NULL, NULL)) / (2 * h);
    CHECK_MSG(fabs(num - ds) <= 1e-6 * (fabs(ds) + 1e-3), "d loss / d scale %.9g, numeric %.9g",
              ds, num);
    /* Orthonormal pairs that match: the loss is log(1 + (N - 1) e^-scale); paired with the
     * wrong caption (a cyclic shift), scale more than that. */
    float a[N * E] = {0}, s[N * E] = {0};
    for (int i = 0; i < N; i++) {
        a[i * E + i] = 2.0f;
        s[((i + 1) % N) * E + i] = 0.5f;
    }
    double want = log(1 + (N - 1) * exp(-scale));
    double got = infonce(a, a, N, E, scale, NULL, NULL, NULL);
    CHECK_MSG(fabs(got - want) < 1e-9, "aligned: %.12g, want %.12g", got, want);
    got = infonce(a, s, N, E, scale, NULL, NULL, NULL);
    CHECK_MSG(fabs(got - (want + scale)) < 1e-9, "shifted: %.12g, want %.12g", got, want + scale);
    /* A NaN feature is a NaN loss, returned as such (the loop names the step), not a failure */
    a[3] = NAN;
    double l = 0;
    CHECK_EQ(tb_clip_infonce(a, a, N, E, scale, &l, NULL, NULL, NULL), 0);
    CHECK_MSG(isnan(l), "a NaN feature gives the loss %g", l);
    CHECK_EQ(tb_clip_max_margin(a, a, N, E, 0.2, &l, NULL, NULL), 0);
    CHECK_MSG(isnan(l), "a NaN feature gives the max-margin loss %g", l);
    CHECK_EQ(tb_clip_max_margin(a, a, 1, E, 0.2, &l, NULL, NULL), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "needs 2 pairs, not 1");
}

/* The backend's InfoNCE (infonce_fwd, infonce_bwd) against tb_clip_infonce, to the bit: the
 * loss, the scale's gradient, and the gradient rows of each process's share times the
 * processes (1, 2 and 4 of them: what the clip task asks for), for batches of 1 to 64 pairs,
 * a zero row (its norm floored) among them, on the CPU and the guarded backend. */
static void test_infonce_ops(void)
{
    tbt_case = "InfoNCE as backend ops, to the bit";
    static const int shapes[][2] = {{1, 16}, {5, 7}, {8, 16}, {12, 256}, {64, 32}};
    static const char *const names[] = {"cpu", "cpu-guarded"};
    tb_rng r;
    tb_rng_init_for(&r, 4, TB_RNG_TEST, 3, 0);
    for (int b = 0; b < 2; b++) {
        tbi_backend *be = NULL;
        CHECK_EQ(tbi_backend_open(&be, names[b]), 0);
        for (size_t k = 0; be && k < sizeof(shapes) / sizeof(shapes[0]); k++) {
            int N = shapes[k][0], E = shapes[k][1];
            size_t ne = (size_t)N * E, nw = tbi_infonce_work(N, E);
            float *v = malloc(sizeof(float) * ne), *t = malloc(sizeof(float) * ne);
            float *dv = malloc(sizeof(float) * ne), *dt = malloc(sizeof(float) * ne);
            float *got = malloc(sizeof(float) * 2 * ne), *dev = NULL, lossf = 0;
            double *work = NULL, ds = 0, got_ds = 0, l = 0, scale = k % 2 ? 1 / 0.07 : 3.7;
            for (size_t i = 0; i < ne; i++)
                v[i] = (float)tb_rng_normal(&r) * 3, t[i] = (float)tb_rng_normal(&r);
            if (N > 4)
                memset(t + 2 * E, 0, sizeof(float) * (size_t)E);
            CHECK_EQ(tb_clip_infonce(v, t, N, E, scale, &l, dv, dt, &ds), 0);
            CHECK_EQ(be->ops->alloc(be, sizeof(float) * (4 * ne + 1), (void **)&dev), 0);
            CHECK_EQ(be->ops->alloc(be, sizeof(double) * (nw + 2), (void **)&work), 0);
            CHECK_EQ(be->ops->to_device(be, work + nw + 1, &scale, sizeof(double)), 0);
            CHECK_EQ(be->ops->to_device(be, dev, v, sizeof(float) * ne), 0);
            CHECK_EQ(be->ops->to_device(be, dev + ne, t, sizeof(float) * ne), 0);
            const double *sc = work + nw + 1; /* the scale on the backend */
            CHECK_EQ(be->ops->infonce_fwd(be, dev + 4 * ne, work, dev, dev + ne, N, E, sc), 0);
            CHECK_EQ(be->ops->to_host(be, &lossf, dev + 4 * ne, sizeof(float)), 0);
            float want_l = (float)l;
            CHECK_MSG(!memcmp(&lossf, &want_l, sizeof(float)), "%s, %d x %d: loss %.9g, the "
                      "host's %.9g", names[b], N, E, lossf, want_l);
            for (int world = 1; world <= 4; world *= 2) {
                if (N % world)
                    continue;
                int rows = N / world, bad = 0;
                for (int rank = 0; rank < world; rank++) {
                    size_t mine = (size_t)rows * E, off = (size_t)rank * mine;
                    CHECK_EQ(be->ops->infonce_bwd(be, dev + 2 * ne, dev + 3 * ne, work + nw,
                                                  work, N, E, sc, rank * rows, rows,
                                                  (float)world), 0);
                    CHECK_EQ(be->ops->to_host(be, got, dev + 2 * ne, sizeof(float) * mine), 0);
                    CHECK_EQ(be->ops->to_host(be, got + ne, dev + 3 * ne, sizeof(float) * mine),
                             0);
                    CHECK_EQ(be->ops->to_host(be, &got_ds, work + nw, sizeof(double)), 0);
                    for (size_t i = 0; i < mine; i++) {
                        float wv = dv[off + i] * (float)world, wt = dt[off + i] * (float)world;
                        bad += memcmp(&wv, got + i, sizeof(float)) != 0;
                        bad += memcmp(&wt, got + ne + i, sizeof(float)) != 0;
                    }
                    bad += memcmp(&got_ds, &ds, sizeof(double)) != 0;
                }
                CHECK_MSG(bad == 0, "%s, %d x %d, %d processes: %d gradient values differ from "
                          "the host's", names[b], N, E, world, bad);
            }
            CHECK_EQ(be->ops->infonce_bwd(be, NULL, NULL, NULL, work, N, E, sc, 0, N + 1, 1),
                     TB_EINVAL);
            be->ops->free(be, dev);
            be->ops->free(be, work);
            free(v), free(t), free(dv), free(dt), free(got);
        }
        tbi_backend_close(&be);
    }
}

static void test_bad_input(void)
{
    tbt_case = "bad settings and inputs";
    struct variant v = {4, 1, 32, 48, "adamw", "infonce"};
    struct tb_clip_config c = config(&v);
    tb_clip *m = NULL;
    c.embed = 0;
    CHECK(tb_clip_open(&m, &c) < 0);
    CHECK_STR_HAS(tb_errmsg(), "projection width");
    c = config(&v);
    c.video.height = 30;
    CHECK(tb_clip_open(&m, &c) < 0);
    CHECK_STR_HAS(tb_errmsg(), "bad ViT config");
    c = config(&v);
    c.text_heads = 3;
    CHECK(tb_clip_open(&m, &c) < 0);
    CHECK_STR_HAS(tb_errmsg(), "3 heads");
    c = config(&v);
    CHECK_EQ(tb_clip_open(&m, &c), 0);
    if (!m)
        return;
    CHECK_EQ(tb_clip_init(m, 1), 0);
    CHECK_EQ(tb_clip_plan(m, B, NULL), 0);
    int32_t ids[B * CTX] = {0};
    ids[CTX + 5] = VOCAB;
    float emb[B * EMBED];
    CHECK(tb_clip_encode_text(m, ids, B, emb) < 0);
    CHECK_STR_HAS(tb_errmsg(), "caption 1, token 5: id 1000 outside the vocabulary of 1000");
    ids[CTX + 5] = 7;
    CHECK(tb_clip_encode_text(m, ids, B + 1, emb) < 0);
    CHECK_STR_HAS(tb_errmsg(), "planned for 3");
    CHECK(tb_clip_backward(m, NULL, emb, 0) < 0);
    CHECK_STR_HAS(tb_errmsg(), "text encoding first");
    CHECK_EQ(tb_clip_encode_text(m, ids, B, emb), 0);
    CHECK_EQ(tb_clip_backward(m, NULL, emb, 0), 0);
    CHECK(tb_clip_backward(m, NULL, emb, 0) < 0); /* once per encoding */
    /* the text tower's gradients may live in the video activations: video backward first */
    size_t nv = (size_t)B * 3 * c.video.frames * c.video.height * c.video.width;
    float *clip_px = calloc(nv, sizeof(float)), vemb[B * EMBED];
    CHECK_EQ(tb_clip_set_video(m, clip_px, B), 0);
    CHECK_EQ(tb_clip_encode_video(m, vemb), 0);
    CHECK_EQ(tb_clip_encode_text(m, ids, B, emb), 0);
    CHECK(tb_clip_backward(m, NULL, emb, 0) < 0);
    CHECK_STR_HAS(tb_errmsg(), "comes after the video tower's");
    CHECK_EQ(tb_clip_backward(m, vemb, NULL, 0), 0);
    CHECK_EQ(tb_clip_backward(m, NULL, emb, 0), 0);
    free(clip_px);
    tb_clip_close(&m);
    /* the CLI: a batch without captions, ids outside the vocabulary */
    char w[4300], b[4300], o[4300], *out = NULL;
    snprintf(w, sizeof(w), "%s/w0.safetensors", tbt_dir());
    snprintf(b, sizeof(b), "%s/bad.safetensors", tbt_dir());
    snprintf(o, sizeof(o), "%s/bad_out.safetensors", tbt_dir());
    float video[B * 3 * 4 * 32 * 48] = {0};
    const int64_t vshape[5] = {B, 3, 4, 32, 48};
    struct tb_st_tensor bt = tbt_tensor("video", TB_ST_F32, 5, vshape, video);
    CHECK_EQ(tb_st_write(b, &bt, 1, NULL), 0);
    int rc = tbt_run(&out, 60, "%s step --task clip --dim %d --depth %d --heads %d --patch %d "
                     "--frames 4 --size 48x32 --embed %d --vocab %d --context %d --text-width %d "
                     "--text-heads %d --text-depth %d --weights %s --batch %s --out %s",
                     tbt_tubelet(), DIM, DEPTH, HEADS, PATCH, EMBED, VOCAB, CTX, TW, TH, TL, w, b,
                     o);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "'text' must be int64 (3, 16) token ids");
    free(out);
}

int main(int argc, char **argv)
{
    tbt_begin("clip");
    const char *only = argc > 1 ? argv[1] : NULL;
#define RUN(name) if (!only || !strcmp(only, #name)) test_##name()
    RUN(reference_self_test);
    RUN(infonce);
    RUN(infonce_ops);
    RUN(against_pytorch);
    RUN(bf16);
    RUN(bad_input);
    TBT_EXIT();
}
