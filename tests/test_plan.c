/* tests/test_plan.c - the step's memory planner (src/model/plan.c): on random declarations,
 * no two buffers live at a common tick share a byte, and the peak lies between the most
 * bytes live at one tick and the sum of all; buffers whose lifetimes nest as a model's do
 * reach that lower bound; the slots get their buffers, a zero-byte one NULL; a plan larger
 * than the backend's free memory is refused naming what and the advice, before any arena.
 * The models' declarations: a step of the classifier (plain, --recompute, --recompute-mlp,
 * fused updates), VideoMAE and the dual encoder gives the same bits - loss, outputs, every
 * gradient - with the buffers shared as planned and with every buffer apart
 * (TUBELET_PLAN=apart): a buffer used outside its declared ticks would have another's
 * values in it; and with every buffer apart and NaN outside its declared ticks
 * (TUBELET_PLAN_POISON=1, as on the guarded backend). A planted bug - a buffer declared dead
 * one tick before its last read - gives NaN on the guarded backend and the right values, by
 * luck of placement, on the plain one. Their parity tests (test_vit, test_mae, test_clip)
 * check the values. */
#define _POSIX_C_SOURCE 200809L
#include "model/plan.h"
#include "tb_test.h"
#include "tubelet/data.h"
#include "tubelet/rng.h"
#include "tubelet/train.h"

enum { N = 60, TICKS = 40 };

static int live_at(const struct tbi_plan_buf *b, int t)
{
    for (int i = 0; i < b->n; i++)
        if (b->live[i][0] <= t && t <= b->live[i][1])
            return 1;
    return 0;
}

/* The most bytes live at one tick: no placement can do with less. */
static size_t live_bound(const struct tbi_plan *p)
{
    size_t most = 0;
    for (int t = 0; t < TICKS; t++) {
        size_t sum = 0;
        for (int i = 0; i < p->n; i++)
            sum += live_at(&p->b[i], t) ? p->b[i].bytes : 0;
        most = sum > most ? sum : most;
    }
    return most;
}

/* Every pair live at a common tick in disjoint bytes; every buffer inside the peak. */
static int sound(const struct tbi_plan *p)
{
    int ok = 1;
    for (int i = 0; i < p->n; i++) {
        const struct tbi_plan_buf *a = &p->b[i];
        ok &= a->off + a->bytes <= p->peak && a->off % TBI_PLAN_ALIGN == 0;
        for (int j = i + 1; j < p->n; j++) {
            const struct tbi_plan_buf *b = &p->b[j];
            int together = 0;
            for (int t = 0; t < TICKS && !together; t++)
                together = live_at(a, t) && live_at(b, t);
            if (together && a->off < b->off + b->bytes && b->off < a->off + a->bytes) {
                TBT_FAIL("%s and %s are live together but share bytes", a->name, b->name);
                ok = 0;
            }
        }
    }
    return ok;
}

static void test_random(void)
{
    tbt_case = "random declarations: sound, between the bounds";
    float *slots[N];
    for (int round = 0; round < 50; round++) {
        tb_rng r;
        tb_rng_init(&r, (uint64_t)round, 0);
        struct tbi_plan p = {0};
        size_t sum = 0;
        for (int i = 0; i < N; i++) {
            size_t bytes = 1 + tb_rng_below(&r, 1 << 16);
            int a = (int)tb_rng_below(&r, TICKS), b = (int)tb_rng_below(&r, TICKS);
            tbi_plan_add(&p, "random", &slots[i], bytes, a < b ? a : b, a < b ? b : a);
            if (tb_rng_below(&r, 4) == 0) { /* a second range, after the first */
                int c = (a < b ? b : a) + 1 + (int)tb_rng_below(&r, 3);
                if (c < TICKS)
                    tbi_plan_also(&p, c, c + (int)tb_rng_below(&r, (uint64_t)(TICKS - c)));
            }
            sum += p.b[p.n - 1].bytes;
        }
        CHECK_EQ(tbi_plan_place(&p), 0);
        CHECK(sound(&p));
        size_t low = live_bound(&p);
        CHECK_MSG(p.peak >= low && p.peak <= sum, "round %d: peak %zu outside [%zu, %zu]", round,
                  p.peak, low, sum);
        if (round == 0)
            printf("random: peak %zu bytes, most live at once %zu, all %zu\n", p.peak, low, sum);
        tbi_plan_clear(&p);
    }
}

/* A tower's shape: L activation sets, each from its forward tick to its backward tick
 * (nested), then L gradients each from its backward tick to the end: the gradients go into
 * the dead sets, and the peak is the lower bound. */
static void test_tower(void)
{
    tbt_case = "a tower's lifetimes: gradients in dead activations, the peak at the bound";
    enum { L = 6 };
    float *acts[L], *grads[L];
    struct tbi_plan p = {0};
    int end = 2 * L + 1;
    for (int l = 0; l < L; l++)
        tbi_plan_add(&p, "acts", &acts[l], 100 * TBI_PLAN_ALIGN, l, 2 * L - l);
    for (int l = 0; l < L; l++)
        tbi_plan_add(&p, "grads", &grads[l], 40 * TBI_PLAN_ALIGN, 2 * L - l, end);
    CHECK_EQ(tbi_plan_place(&p), 0);
    CHECK(sound(&p));
    CHECK_EQ(p.peak, live_bound(&p));
    CHECK(p.peak < (size_t)L * 140 * TBI_PLAN_ALIGN);
    tbi_plan_clear(&p);
}

static void test_slots(void)
{
    tbt_case = "slots point into the arena; nothing for zero bytes";
    tbi_backend *be = NULL;
    CHECK_EQ(tbi_backend_open(&be, "cpu"), 0);
    if (!be)
        return;
    struct tbi_plan p = {0};
    float *a = NULL, *b = NULL, *none = (float *)&p;
    int32_t *c = NULL;
    tbi_plan_add(&p, "a", &a, 1000, 0, 1);
    tbi_plan_add(&p, "none", &none, 0, 0, 3);
    tbi_plan_add(&p, "b", &b, 1000, 2, 3);
    tbi_plan_add(&p, "c", &c, 10, 0, 3);
    CHECK(none == NULL);
    CHECK_EQ(tbi_plan_place(&p), 0);
    CHECK_EQ(tbi_plan_alloc(&p, be, "the test's buffers", "none"), 0);
    CHECK(a && b && c);
    CHECK(a == b); /* disjoint lifetimes, the same size: the same bytes */
    CHECK((char *)c >= (char *)p.arena && (char *)c + 10 <= (char *)p.arena + p.peak);
    CHECK((char *)a + 1000 <= (char *)c || (char *)c + 10 <= (char *)a);
    tbi_plan_clear(&p);

    tbt_case = "a plan larger than the free memory: refused, named";
    uint64_t have = 0;
    CHECK_EQ(be->ops->mem_avail(be, &have), 0);
    float *huge = NULL;
    tbi_plan_add(&p, "huge", &huge, (size_t)(have + (have >> 1) + 1), 0, 0);
    CHECK_EQ(tbi_plan_place(&p), 0);
    CHECK_EQ(tbi_plan_alloc(&p, be, "the activations of 99 clips", "lower --batch"), TB_ENOMEM);
    CHECK_STR_HAS(tb_errmsg(), "the activations of 99 clips need ");
    CHECK_STR_HAS(tb_errmsg(), "lower --batch");
    CHECK(p.arena == NULL);
    tbi_plan_clear(&p);
    tbi_backend_close(&be);
}

/* Random values for n floats. */
static void fill(float *x, size_t n, uint64_t seed)
{
    tb_rng r;
    tb_rng_init(&r, seed, 1);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(tb_rng_uniform(&r) * 2 - 1);
}

/* Every gradient of r after the step (with fused updates, which keep none: every weight after
 * the update), then the outputs (n_outs), into a new buffer of *n floats. */
static float *collect(tb_params *r, int fused, const float *outs, size_t n_outs, size_t *n)
{
    *n = (size_t)tb_params_floats(r) + n_outs;
    float *all = malloc(sizeof(float) * *n);
    for (int i = 0; all && i < tb_params_count(r); i++) {
        float *at = all + tb_params_at(r, i)->offset;
        CHECK_EQ(fused ? tb_params_read(r, i, at) : tb_params_read_grad(r, i, at), 0);
    }
    if (all)
        memcpy(all + tb_params_floats(r), outs, sizeof(float) * n_outs);
    return all;
}

enum { B = 3, DIM = 32, DEPTH = 3, K = 5 };

/* Fused updates: each span's AdamW update as the backward completes it. */
static int update_span(void *ctx, int span)
{
    return tb_optim_update_span(ctx, span, 1.0f);
}

/* One step of the classifier: loss, logits, gradients. */
static float *cls_step(int recompute, int recompute_mlp, int fused, int bf16, size_t *n)
{
    struct tb_vit_config c = {.dim = DIM, .depth = DEPTH, .heads = 2, .patch = 8, .tubelet = 2,
                              .frames = 4, .height = 32, .width = 24, .classes = K,
                              .pool = TB_POOL_MEAN, .pos = TB_POS_SINCOS,
                              .recompute = recompute, .recompute_mlp = recompute_mlp,
                              .dtype = bf16 ? TB_DTYPE_BF16 : TB_DTYPE_F32};
    tb_vit *m = NULL;
    size_t nv = (size_t)B * 3 * 4 * 32 * 24;
    float *video = malloc(sizeof(float) * nv), outs[1 + B * K];
    int64_t labels[B] = {0, 3, 4};
    float *all = NULL;
    struct tb_optim opt = {.kind = TB_OPT_ADAMW, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
                           .eps = 1e-8f, .weight_decay = 0.05f};
    if (video && tb_vit_open(&m, &c) == 0) {
        fill(video, nv, 2);
        CHECK_EQ(tb_vit_init(m, 1), 0);
        if (fused) {
            CHECK_EQ(tb_optim_init(&opt, tb_vit_params(m)), 0);
            tb_params_fuse(tb_vit_params(m), update_span, &opt);
            tb_optim_begin_step(&opt);
        }
        CHECK_EQ(tb_vit_plan(m, B, NULL), 0);
        if (bf16) { /* and drop path: its branch gradients are the blocks' dtype */
            float drop[DEPTH * 2 * B];
            int64_t index[B] = {0, 1, 2};
            tb_vit_drop_path_draw(drop, DEPTH, B, 0.5, 3, 0, index);
            CHECK_EQ(tb_vit_set_video(m, video, B), 0);
            CHECK_EQ(tb_vit_set_drop_path(m, drop), 0);
            CHECK_EQ(tb_vit_run(m, labels, 0.1f, &outs[0]), 0);
        } else {
            CHECK_EQ(tb_vit_forward(m, video, B, labels, 0.1f, &outs[0]), 0);
        }
        CHECK_EQ(tb_vit_backward(m), 0);
        CHECK_EQ(tb_vit_logits(m, outs + 1), 0);
        all = collect(tb_vit_params(m), fused, outs, 1 + B * K, n);
    }
    tb_optim_free(&opt);
    tb_vit_close(&m);
    free(video);
    return all;
}

static float *mae_step(int dtype, size_t *n)
{
    struct tb_mae_config c = {.enc = {.dim = DIM, .depth = DEPTH, .heads = 2, .patch = 8,
                                      .tubelet = 2, .frames = 4, .height = 32, .width = 32,
                                      .dtype = dtype},
                              .mask_ratio = 0.75, .dec_dim = 16, .dec_depth = 2,
                              .dec_heads = 2, .norm_target = 1};
    tb_mae *m = NULL;
    size_t nv = (size_t)B * 3 * 4 * 32 * 32;
    float *video = malloc(sizeof(float) * nv), *all = NULL;
    if (video && tb_mae_open(&m, &c) == 0) {
        int Np = 0, Nq = 0, V = 0;
        tb_mae_sizes(m, &Np, NULL, &Nq, &V);
        uint8_t *mask = malloc((size_t)B * Np);
        float *outs = malloc(sizeof(float) * (1 + (size_t)B * Nq * V));
        fill(video, nv, 3);
        CHECK_EQ(tb_mae_init(m, 1), 0);
        CHECK_EQ(tb_mae_plan(m, B, NULL), 0);
        CHECK_EQ(tb_mae_set_video(m, video, B, tb_mean_imagenet, tb_std_imagenet), 0);
        for (int b = 0; mask && b < B; b++)
            CHECK_EQ(tb_mae_make_mask(m, 5, 0, b, mask + (size_t)b * Np, NULL), 0);
        if (mask && outs && tb_mae_set_mask(m, mask, NULL) == 0) {
            CHECK_EQ(tb_mae_run(m, &outs[0]), 0);
            CHECK_EQ(tb_mae_backward(m), 0);
            CHECK_EQ(tb_mae_pred(m, outs + 1), 0);
            all = collect(tb_mae_params(m), 0, outs, 1 + (size_t)B * Nq * V, n);
        }
        free(mask);
        free(outs);
    }
    tb_mae_close(&m);
    free(video);
    return all;
}

static float *clip_step(int dtype, size_t *n)
{
    enum { E = 16, CTX = 8, VOCAB = 50 };
    struct tb_clip_config c = {.video = {.dim = DIM, .depth = DEPTH, .heads = 2, .patch = 8,
                                         .frames = 2, .height = 16, .width = 16,
                                         .dtype = dtype},
                               .embed = E, .vocab = VOCAB, .ctx = CTX, .text_width = 16,
                               .text_heads = 2, .text_layers = 2, .text_causal = 1,
                               .learn_temperature = 1};
    tb_clip *m = NULL;
    size_t nv = (size_t)B * 3 * 2 * 16 * 16;
    float *video = malloc(sizeof(float) * nv), outs[1 + 2 * B * E], dv[B * E], dt[B * E];
    int32_t ids[B * CTX];
    float *all = NULL;
    for (int i = 0; i < B * CTX; i++)
        ids[i] = (i * 7 + 3) % VOCAB;
    if (video && tb_clip_open(&m, &c) == 0) {
        fill(video, nv, 4);
        double loss = 0, scale = 0, dscale = 0;
        CHECK_EQ(tb_clip_init(m, 1), 0);
        CHECK_EQ(tb_clip_plan(m, B, NULL), 0);
        CHECK_EQ(tb_clip_set_video(m, video, B), 0);
        CHECK_EQ(tb_clip_encode_video(m, outs + 1), 0);
        CHECK_EQ(tb_clip_encode_text(m, ids, B, outs + 1 + B * E), 0);
        CHECK_EQ(tb_clip_logit_scale(m, &scale), 0);
        CHECK_EQ(tb_clip_infonce(outs + 1, outs + 1 + B * E, B, E, scale, &loss, dv, dt, &dscale),
                 0);
        CHECK_EQ(tb_clip_backward(m, dv, dt, dscale), 0);
        outs[0] = (float)loss;
        all = collect(tb_clip_params(m), 0, outs, 1 + 2 * B * E, n);
    }
    tb_clip_close(&m);
    free(video);
    return all;
}

/* How many of n values of a differ from b's, bit for bit; and whether a has a NaN. */
static size_t differing(const float *a, const float *b, size_t n, int *nan)
{
    size_t differ = 0;
    for (size_t i = 0; a && b && i < n; i++) {
        differ += memcmp(&a[i], &b[i], sizeof(float)) != 0;
        *nan |= isnan(a[i]);
    }
    return differ;
}

/* The step with the planned sharing, with every buffer apart, and with every buffer poisoned
 * when its life ends: the same bits. */
static void same_apart(const char *what, float *(*step)(void *arg, size_t *n), void *arg)
{
    tbt_case = what;
    size_t n_shared = 0, n_apart = 0, n_poisoned = 0;
    unsetenv("TUBELET_PLAN");
    float *shared = step(arg, &n_shared);
    setenv("TUBELET_PLAN", "apart", 1);
    float *alone = step(arg, &n_apart);
    unsetenv("TUBELET_PLAN");
    setenv("TUBELET_PLAN_POISON", "1", 1);
    float *poisoned = step(arg, &n_poisoned);
    unsetenv("TUBELET_PLAN_POISON");
    CHECK(shared && alone && poisoned && n_shared == n_apart && n_shared == n_poisoned &&
          n_shared > 0);
    int nan = 0;
    size_t differ = differing(alone, shared, n_shared, &nan);
    CHECK_MSG(differ == 0, "%zu of %zu values differ between the shared and apart plans", differ,
              n_shared);
    differ = differing(poisoned, shared, n_shared, &nan);
    CHECK_MSG(differ == 0 && !nan, "%zu of %zu values differ with dead buffers poisoned%s",
              differ, n_shared, nan ? " (NaN: a buffer read outside its declared ticks)" : "");
    printf("%s: %zu values (loss, outputs, gradients), shared, apart and poisoned alike\n", what,
           n_shared);
    free(shared);
    free(alone);
    free(poisoned);
}

/* A step of three ticks on backend: x uploaded (tick 0), y = x + x (tick 1), z = y + x
 * (tick 2), z read back into out (n). x is read at tick 2: x_last = 2 declares it so, 1 is the
 * planted bug (its life declared a tick short; z may then share x's bytes, and the add,
 * reading x before it writes z, gives the right sums where nothing poisons x). */
static int three_ticks(const char *backend, int x_last, float *out, int n)
{
    tbi_backend *be = NULL;
    struct tbi_plan p = {0};
    float *x = NULL, *y = NULL, *z = NULL, host[64];
    for (int i = 0; i < n; i++)
        host[i] = (float)i + 0.5f;
    int rc = tbi_backend_open(&be, backend);
    if (rc == 0) {
        TBI_BUF(&p, x, n, 0, x_last);
        TBI_BUF(&p, y, n, 1, 2);
        TBI_BUF(&p, z, n, 2, 2);
        rc = tbi_plan_place(&p);
    }
    rc = rc ? rc : tbi_plan_alloc(&p, be, "the test's buffers", "none");
    rc = rc ? rc : be->ops->to_device(be, x, host, sizeof(float) * (size_t)n);
    rc = rc ? rc : tbi_plan_tick(&p, 0);
    rc = rc ? rc : be->ops->add(be, y, x, x, (size_t)n);
    rc = rc ? rc : tbi_plan_tick(&p, 1);
    rc = rc ? rc : be->ops->add(be, z, y, x, (size_t)n);
    rc = rc ? rc : be->ops->to_host(be, out, z, sizeof(float) * (size_t)n);
    tbi_plan_clear(&p);
    tbi_backend_close(&be);
    return rc;
}

static void test_poison(void)
{
    enum { n = 64 };
    float out[n];
    const char *backends[] = {"cpu", "cpu-guarded"};
    for (int k = 0; k < 2; k++) {
        tbt_case = backends[k];
        CHECK_EQ(three_ticks(backends[k], 2, out, n), 0);
        int right = 0;
        for (int i = 0; i < n; i++)
            right += out[i] == 3 * ((float)i + 0.5f);
        CHECK_MSG(right == n, "%s, lifetimes as used: %d of %d sums right", backends[k], right,
                  n);
    }
    tbt_case = "a buffer declared dead one tick before its last read (planted)";
    CHECK_EQ(three_ticks("cpu", 1, out, n), 0);
    CHECK_MSG(out[n - 1] == 3 * ((float)n - 0.5f),
              "on cpu the planted bug should pass unseen (z sharing x's bytes): %g", out[n - 1]);
    CHECK_EQ(three_ticks("cpu-guarded", 1, out, n), 0);
    int nans = 0;
    for (int i = 0; i < n; i++)
        nans += isnan(out[i]);
    CHECK_MSG(nans == n, "on cpu-guarded the read of x after its declared life gave %d NaN of %d",
              nans, n);
    printf("planted lifetime bug: unseen on cpu, %d NaN of %d on cpu-guarded\n", nans, n);
}

struct cls_args {
    int recompute, recompute_mlp, fused, bf16;
};

static float *cls_arg(void *arg, size_t *n)
{
    const struct cls_args *a = arg;
    return cls_step(a->recompute, a->recompute_mlp, a->fused, a->bf16, n);
}

static float *mae_arg(void *dtype, size_t *n)
{
    return mae_step(*(int *)dtype, n);
}

static float *clip_arg(void *dtype, size_t *n)
{
    return clip_step(*(int *)dtype, n);
}

static void test_models(void)
{
    struct cls_args plain = {0, 0, 0, 0}, whole = {1, 0, 0, 0}, mlp = {0, 2, 0, 0};
    struct cls_args fused = {0, 1, 1, 0}, bf16 = {0, 1, 0, 1}, bf16_whole = {1, 0, 0, 1};
    int f32 = TB_DTYPE_F32, bf = TB_DTYPE_BF16;
    same_apart("cls: the planned lifetimes hold", cls_arg, &plain);
    same_apart("cls --recompute", cls_arg, &whole);
    same_apart("cls --recompute-mlp 2", cls_arg, &mlp);
    same_apart("cls --recompute-mlp 1, fused updates", cls_arg, &fused);
    same_apart("cls in bf16 with drop path, --recompute-mlp 1", cls_arg, &bf16);
    same_apart("cls in bf16 with drop path, --recompute", cls_arg, &bf16_whole);
    same_apart("mae", mae_arg, &f32);
    same_apart("mae in bf16", mae_arg, &bf);
    same_apart("clip, a learned temperature", clip_arg, &f32);
    same_apart("clip in bf16", clip_arg, &bf);
}

int main(void)
{
    tbt_begin("plan");
    test_random();
    test_tower();
    test_slots();
    test_poison();
    test_models();
    TBT_EXIT();
}
