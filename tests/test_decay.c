/* tests/test_decay.c - which parameters each task decays, against AVION's scripts.
 *
 * For each model tubelet trains (cls on the timm-layout ViT and on AVION's CLIP video tower,
 * mae, clip), the registry's decay flags against the rule of the AVION script that trains it
 * (tests/ref/decay_ref.py, the rules written out as the scripts write them, applied to the
 * PyTorch twins' named_parameters): the same parameter names, each decayed or not alike.
 * Both lists are printed. A decay rule is invisible in a gradient check; the optimizer steps
 * under it are checked by test_clip, test_mae and test_vit against the same rules. Also how a
 * classifier's head starts: VideoMAE's init_scale (--head-init-scale) scales its weights. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "tb_test.h"
#include "tubelet/model.h"

#ifndef PYTHON
#define PYTHON TB_TEST_PYTHON
#endif

enum { DIM = 64, DEPTH = 2, HEADS = 2, PATCH = 8, CLASSES = 5 };

/* Compare the registry r with decay_ref.py's listing for model + flags. */
static void compare(const char *what, tb_params *r, const char *model, const char *flags)
{
    tbt_case = what;
    char *out = NULL;
    int rc = tbt_run(&out, 120, PYTHON " %s/tests/ref/decay_ref.py %s %s", TB_SOURCE_DIR, model,
                     flags);
    CHECK_MSG(rc == 0, "decay_ref.py %s %s: %s", model, flags, out ? out : "");
    if (rc != 0) {
        free(out);
        return;
    }
    int n = tb_params_count(r), listed = 0, decayed_ours = 0, decayed_ref = 0;
    printf("%s: name, tubelet's decay, AVION's\n", what);
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char name[256];
        int decay;
        if (sscanf(line, "%255s %d", name, &decay) != 2) {
            TBT_FAIL("decay_ref.py wrote '%s'", line);
            continue;
        }
        listed++;
        decayed_ref += decay;
        int i = tb_params_find(r, name);
        CHECK_MSG(i >= 0, "AVION's parameter %s is not in tubelet's model", name);
        if (i < 0)
            continue;
        int ours = tb_params_at(r, i)->decay;
        printf("  %-48s %d %d\n", name, ours, decay);
        CHECK_MSG(ours == decay, "%s: tubelet %s it, AVION's script %s it", name,
                  ours ? "decays" : "spares", decay ? "decays" : "spares");
    }
    for (int i = 0; i < n; i++)
        decayed_ours += tb_params_at(r, i)->decay;
    CHECK_MSG(listed == n, "tubelet's model has %d parameters, AVION's %d", n, listed);
    CHECK_EQ(decayed_ours, decayed_ref);
    /* a rule that decays everything or nothing would pass a vacuous model: not these */
    CHECK(decayed_ref > 0 && decayed_ref < listed);
    free(out);
}

static struct tb_vit_config vit_config(enum tb_layout layout)
{
    struct tb_vit_config c = {.dim = DIM, .depth = DEPTH, .heads = HEADS, .patch = PATCH,
                              .tubelet = layout == TB_LAYOUT_CLIP ? 1 : 2, .frames = 4,
                              .height = 32, .width = 32, .classes = CLASSES,
                              .pool = TB_POOL_CLS, .pos = TB_POS_LEARNED, .layout = layout};
    return c;
}

static void test_cls(void)
{
    static const char *const what[2] = {"cls, ViT (VideoMAE fine-tuning)",
                                        "cls, ViT with q/v biases (VideoMAE fine-tuning)"};
    for (int qv = 0; qv < 2; qv++) {
        struct tb_vit_config c = vit_config(TB_LAYOUT_TIMM);
        c.qv_bias = qv;
        tb_vit *m = NULL;
        CHECK_EQ(tb_vit_open(&m, &c), 0);
        if (!m)
            continue;
        char flags[200];
        snprintf(flags, sizeof(flags), "--dim %d --depth %d --heads %d --patch %d --tubelet 2 "
                 "--frames 4 --size 32x32 --classes %d --pool cls --pos learned%s", DIM, DEPTH,
                 HEADS, PATCH, CLASSES, qv ? " --qv-bias true" : "");
        compare(what[qv], tb_vit_params(m), "vit", flags);
        tb_vit_close(&m);
    }
}

static void test_cls_clip_backbone(void)
{
    struct tb_vit_config c = vit_config(TB_LAYOUT_CLIP);
    tb_vit *m = NULL;
    CHECK_EQ(tb_vit_open(&m, &c), 0);
    if (!m)
        return;
    char flags[200];
    snprintf(flags, sizeof(flags), "--dim %d --depth %d --heads %d --patch %d --tubelet 1 "
             "--frames 4 --size 32x32 --classes %d", DIM, DEPTH, HEADS, PATCH, CLASSES);
    compare("cls, AVION's CLIP video tower (main_lavila_finetune_cls.py)", tb_vit_params(m),
            "vit-clip", flags);
    tb_vit_close(&m);
}

/* head_init_scale multiplies the head's initial weights, and nothing else, in both layouts
 * (VideoMAE's `head.weight.data.mul_(init_scale)`): the same draws, scaled. */
static void test_head_init(void)
{
    for (int k = 0; k < 2; k++) {
        tbt_case = k ? "head init scale, CLIP tower" : "head init scale, ViT";
        tb_vit *m[2] = {NULL, NULL};
        for (int s = 0; s < 2; s++) {
            struct tb_vit_config c = vit_config(k ? TB_LAYOUT_CLIP : TB_LAYOUT_TIMM);
            c.head_init_scale = s ? 0.001 : 0; /* 0: the default, 1 */
            CHECK_EQ(tb_vit_open(&m[s], &c), 0);
            CHECK_EQ(m[s] ? tb_vit_init(m[s], 7) : -1, 0);
        }
        if (!m[0] || !m[1])
            goto next;
        tb_params *a = tb_vit_params(m[0]), *b = tb_vit_params(m[1]);
        int head = tb_params_find(a, "head.weight"), n_scaled = 0, n_same = 0;
        CHECK(head >= 0);
        for (int i = 0; i < tb_params_count(a); i++) {
            int64_t n = tb_params_at(a, i)->n;
            float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
            CHECK_EQ(tb_params_read(a, i, x), 0);
            CHECK_EQ(tb_params_read(b, i, y), 0);
            double worst = 0, sum2 = 0;
            for (int64_t j = 0; j < n; j++) {
                double want = i == head ? x[j] * 0.001 : x[j];
                double err = fabs(y[j] - want) / (fabs(want) + 1e-30);
                worst = err > worst && want != 0 ? err : worst;
                sum2 += (double)x[j] * x[j];
            }
            CHECK_MSG(worst < 1e-6, "%s: %.3g from %s", tb_params_at(a, i)->name, worst,
                      i == head ? "the default's x 0.001" : "the default's");
            if (i == head) /* a draw, not zeros: timm's std 0.02, AVION's fc_cls 0.01 */
                CHECK_MSG(fabs(sqrt(sum2 / (double)n) - (k ? 0.01 : 0.02 * 0.88)) < 0.004,
                          "head.weight's rms %.4f", sqrt(sum2 / (double)n));
            n_scaled += i == head;
            n_same += i != head;
            free(x);
            free(y);
        }
        CHECK(n_scaled == 1 && n_same > 10);
    next:
        tb_vit_close(&m[0]);
        tb_vit_close(&m[1]);
    }
}

static void test_mae(void)
{
    struct tb_mae_config c = {.enc = {.dim = DIM, .depth = DEPTH, .heads = HEADS,
                                      .patch = PATCH, .tubelet = 2, .frames = 4, .height = 32,
                                      .width = 32},
                              .mask_ratio = 0.75, .dec_dim = 32, .dec_depth = 2, .dec_heads = 2,
                              .norm_target = 1};
    tb_mae *m = NULL;
    CHECK_EQ(tb_mae_open(&m, &c), 0);
    if (!m)
        return;
    char flags[200];
    snprintf(flags, sizeof(flags), "--dim %d --depth %d --heads %d --patch %d --tubelet 2 "
             "--frames 4 --size 32x32 --dec-dim 32 --dec-depth 2 --dec-heads 2", DIM, DEPTH,
             HEADS, PATCH);
    compare("mae (main_videomae_pretrain.py)", tb_mae_params(m), "mae", flags);
    tb_mae_close(&m);
}

static void test_clip(void)
{
    for (int learn = 0; learn < 2; learn++) {
        struct tb_clip_config c = {
            .video = {.dim = DIM, .depth = DEPTH, .heads = HEADS, .patch = PATCH, .tubelet = 1,
                      .frames = 4, .height = 32, .width = 32},
            .embed = 32, .vocab = 1000, .ctx = 16, .text_width = 32, .text_heads = 2,
            .text_layers = 2, .text_causal = 1, .temperature = 0.07,
            .learn_temperature = learn};
        tb_clip *m = NULL;
        CHECK_EQ(tb_clip_open(&m, &c), 0);
        if (!m)
            continue;
        char flags[300];
        snprintf(flags, sizeof(flags), "--dim %d --depth %d --heads %d --patch %d --tubelet 1 "
                 "--frames 4 --size 32x32 --embed 32 --vocab 1000 --context 16 "
                 "--text-width 32 --text-heads 2 --text-depth 2%s", DIM, DEPTH, HEADS, PATCH,
                 learn ? " --learn-temperature" : "");
        compare(learn ? "clip, learned temperature (main_lavila_pretrain.py)"
                      : "clip (main_lavila_pretrain.py)",
                tb_clip_params(m), "clip", flags);
        tb_clip_close(&m);
    }
}

int main(int argc, char **argv)
{
    tbt_begin("decay");
    const char *only = argc > 1 ? argv[1] : NULL;
#define RUN(name) if (!only || !strcmp(only, #name)) test_##name()
    RUN(cls);
    RUN(cls_clip_backbone);
    RUN(head_init);
    RUN(mae);
    RUN(clip);
    TBT_EXIT();
}
