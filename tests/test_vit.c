/* tests/test_vit.c - the video ViT against its PyTorch twin (tests/ref/vit_ref.py, on Debian's
 * python3-torch): the same safetensors weights and batch through `tubelet step` and through
 * PyTorch; loss, logits and every gradient of the first step, and every weight after 3 AdamW
 * steps, agree to a relative error of 1e-4 per tensor (float32). For class-token and mean
 * pooling, learned and sin-cos positions, tubelets of 1 and 2 frames, non-square frames.
 * Skipped (77) where PyTorch cannot be imported. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "tb_test.h"
#include "tubelet/model.h"
#include "tubelet/rng.h"
#include "tubelet/safetensors.h"
#include "tubelet/train.h"

#define PYTHON "/usr/bin/python3"

struct variant {
    const char *pool, *pos;
    int tubelet, height, width;
};

static void write_inputs(const struct tb_vit_config *c, int B, const char *wpath,
                         const char *bpath, uint64_t seed)
{
    tb_vit *m = NULL;
    CHECK_EQ(tb_vit_open(&m, c), 0);
    tb_vit_init(m, seed);
    int np = tb_vit_n_params(m);
    struct tb_st_tensor *ts = calloc((size_t)np, sizeof(*ts));
    tb_rng r;
    tb_rng_init(&r, seed, 99);
    for (int i = 0; i < np; i++) {
        const struct tb_param *p = tb_vit_param(m, i);
        /* Perturb the zero and one initialisations so every tensor carries signal. */
        for (int64_t k = 0; k < p->n; k++)
            p->data[k] += (float)tb_rng_normal(&r) * 0.02f;
        snprintf(ts[i].name, sizeof(ts[i].name), "%s", p->name);
        ts[i].dtype = TB_ST_F32;
        ts[i].n_dims = p->n_dims;
        memcpy(ts[i].shape, p->shape, sizeof(p->shape));
        ts[i].n = p->n;
        ts[i].data = p->data;
    }
    CHECK_EQ(tb_st_write(wpath, ts, np, "{\"made_by\":\"test_vit\"}"), 0);
    free(ts);
    tb_vit_close(&m);

    int64_t nv = (int64_t)B * 3 * c->frames * c->height * c->width;
    float *video = malloc(sizeof(float) * (size_t)nv);
    int64_t *label = malloc(sizeof(int64_t) * (size_t)B);
    for (int64_t i = 0; i < nv; i++)
        video[i] = (float)tb_rng_normal(&r);
    for (int b = 0; b < B; b++)
        label[b] = (int64_t)tb_rng_below(&r, (uint64_t)c->classes);
    struct tb_st_tensor bt[2] = {
        {.name = "video", .dtype = TB_ST_F32, .n_dims = 5,
         .shape = {B, 3, c->frames, c->height, c->width}, .n = nv, .data = video},
        {.name = "label", .dtype = TB_ST_I64, .n_dims = 1, .shape = {B}, .n = B, .data = label},
    };
    CHECK_EQ(tb_st_write(bpath, bt, 2, NULL), 0);
    free(video);
    free(label);
}

static void compare(const char *ours_path, const char *ref_path, const char *what)
{
    struct tb_st_file *ours = NULL, *ref = NULL;
    CHECK_EQ(tb_st_read(&ours, ours_path), 0);
    CHECK_EQ(tb_st_read(&ref, ref_path), 0);
    if (!ours || !ref)
        return;
    CHECK_EQ(ours->n_tensors, ref->n_tensors);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < ref->n_tensors; i++) {
        const struct tb_st_tensor *r = &ref->tensors[i], *o = tb_st_find(ours, r->name);
        CHECK_MSG(o && o->n == r->n, "%s: tensor %s missing or of another size", what, r->name);
        if (!o || o->n != r->n)
            continue;
        /* The key third of the qkv bias adds the same amount to every score of a row, which
         * softmax ignores: its true gradient is 0 and the computed one is rounding noise, which
         * AdamW (dividing by its own size) turns into O(lr) steps of arbitrary sign. Those
         * weights are compared after the step only in their query and value parts. */
        size_t len = strlen(r->name);
        int skip_k = len > 13 && !strcmp(r->name + len - 13, "attn.qkv.bias") &&
                     strncmp(r->name, "grad.", 5);
        int64_t D = r->n / 3;
        double diff = 0, norm = 0;
        for (int64_t k = 0; k < r->n; k++) {
            if (skip_k && k >= D && k < 2 * D)
                continue;
            double a = ((const float *)o->data)[k], b = ((const float *)r->data)[k];
            diff += (a - b) * (a - b);
            norm += b * b;
        }
        double rel = sqrt(diff) / (sqrt(norm) + 1e-12);
        if (rel > worst) {
            worst = rel;
            worst_name = r->name;
        }
        CHECK_MSG(rel <= 1e-4, "%s: %s differs from PyTorch's by %.2e (relative L2)", what,
                  r->name, rel);
    }
    fprintf(stderr, "%s: %d tensors, worst relative error %.2e (%s)\n", what, ref->n_tensors,
            worst, worst_name);
    tb_st_free(&ours);
    tb_st_free(&ref);
}

/* Gradients live in activation space the backward is done with: they must equal, bit for bit,
 * those of the recomputing model (which keeps them apart) and of the one recomputing the MLP
 * hidden layer of its first blocks, two steps running (the second forward overwrites the first
 * step's gradients), and a second backward of one forward is refused rather than reading
 * gradients as activations. Needs no PyTorch. */
static void test_grad_homes(void)
{
    tbt_case = "gradients in activation space";
    struct tb_vit_config c = {.dim = 32, .depth = 4, .heads = 2, .patch = 8, .tubelet = 2,
                              .frames = 4, .height = 32, .width = 32, .classes = 5,
                              .pool = TB_POOL_MEAN, .pos = TB_POS_LEARNED};
    enum { N_MODELS = 3 };
    int B = 3; /* 96 tokens: fc1x fits beside the top block's hosted gradients */
    tb_vit *m[N_MODELS] = {NULL};
    struct tb_adamw opt[N_MODELS] = {{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f,
                                      .eps = 1e-8f, .weight_decay = 0.05f}};
    for (int k = 0; k < N_MODELS; k++) {
        opt[k] = opt[0];
        c.recompute = k == 1;
        c.recompute_mlp = k == 2 ? 3 : 0;
        CHECK_EQ(tb_vit_open(&m[k], &c), 0);
        if (!m[k])
            return;
        CHECK(tb_vit_plan(m[k], B) > 0);
        CHECK_EQ(tb_adamw_init(&opt[k], m[k]), 0);
        tb_vit_init(m[k], 7);
    }
    size_t nv = (size_t)B * 3 * 4 * 32 * 32;
    float *video = malloc(sizeof(float) * nv);
    int64_t labels[3] = {1, 4, 0};
    tb_rng r;
    tb_rng_init(&r, 3, 0);
    for (size_t i = 0; i < nv; i++)
        video[i] = (float)tb_rng_normal(&r);
    int np = tb_vit_n_params(m[0]), differ = 0;
    for (int step = 0; step < 2; step++) {
        for (int k = 0; k < N_MODELS; k++) {
            float loss;
            CHECK_EQ(tb_vit_forward(m[k], video, B, labels, 0.1f, &loss), 0);
            CHECK_EQ(tb_vit_backward(m[k]), 0);
        }
        for (int k = 1; k < N_MODELS; k++)
            for (int i = 0; i < np; i++) {
                const struct tb_param *a = tb_vit_param(m[0], i), *b = tb_vit_param(m[k], i);
                differ += memcmp(a->grad, b->grad, sizeof(float) * (size_t)a->n) != 0;
            }
        int64_t n_all = 0;
        for (int s = 0; s < tb_vit_n_grad_spans(m[0]); s++) {
            int64_t n;
            CHECK(tb_vit_grad_span(m[0], s, &n) != NULL);
            n_all += n;
        }
        CHECK_EQ(n_all, tb_vit_n_floats(m[0]));
        for (int k = 0; k < N_MODELS; k++)
            tb_adamw_update(&opt[k], m[k], tb_clip_factor(tb_grad_norm(m[k]), 0.5));
    }
    CHECK_EQ(differ, 0);
    for (int k = 1; k < N_MODELS; k++)
        CHECK(!memcmp(tb_vit_params(m[0]), tb_vit_params(m[k]),
                      sizeof(float) * (size_t)tb_vit_n_floats(m[0])));
    CHECK(tb_vit_backward(m[0]) < 0);
    CHECK_STR_HAS(tb_errmsg(), "backward needs a forward with labels");
    for (int k = 0; k < N_MODELS; k++) {
        tb_adamw_free(&opt[k]);
        tb_vit_close(&m[k]);
    }
    free(video);

    tbt_case = "recompute-mlp out of range";
    c.recompute = 0;
    c.recompute_mlp = 4;
    tb_vit *bad = NULL;
    CHECK(tb_vit_open(&bad, &c) < 0);
    CHECK_STR_HAS(tb_errmsg(), "fewer than the depth (4)");
    c.recompute = 1;
    c.recompute_mlp = 1;
    CHECK(tb_vit_open(&bad, &c) < 0);
    CHECK(bad == NULL);
}

int main(void)
{
    tbt_begin("vit");
    test_grad_homes();
    if (tbt_run(NULL, 60, PYTHON " -c 'import torch, numpy'") != 0) {
        fprintf(stderr, "skip: %s cannot import torch and numpy (python3-torch)\n", PYTHON);
        return TBT_SKIP;
    }
    const struct variant vs[] = {
        {"cls", "learned", 2, 32, 32},
        {"mean", "sincos", 1, 32, 48},
        {"cls", "sincos", 2, 48, 32},
        {"mean", "learned", 1, 48, 32},
    };
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        const struct variant *v = &vs[i];
        struct tb_vit_config c = {
            .dim = 64, .depth = 2, .heads = 2, .patch = 8, .tubelet = v->tubelet, .frames = 4,
            .height = v->height, .width = v->width, .classes = 5,
            .pool = strcmp(v->pool, "cls") ? TB_POOL_MEAN : TB_POOL_CLS,
            .pos = strcmp(v->pos, "learned") ? TB_POS_SINCOS : TB_POS_LEARNED,
        };
        char what[128], w[4300], b[4300], o[4300], r[4300], flags[1024], *out = NULL;
        snprintf(what, sizeof(what), "%s pool, %s positions, tubelet %d, %dx%d", v->pool, v->pos,
                 v->tubelet, v->height, v->width);
        tbt_case = what;
        snprintf(w, sizeof(w), "%s/w%zu.safetensors", tbt_dir(), i);
        snprintf(b, sizeof(b), "%s/b%zu.safetensors", tbt_dir(), i);
        snprintf(o, sizeof(o), "%s/o%zu.safetensors", tbt_dir(), i);
        snprintf(r, sizeof(r), "%s/r%zu.safetensors", tbt_dir(), i);
        write_inputs(&c, 3, w, b, 1000 + i);
        snprintf(flags, sizeof(flags), "--dim 64 --depth 2 --heads 2 --patch 8 --tubelet %d "
                 "--frames 4 --size %dx%d --classes 5 --pool %s --pos %s --steps 3 --lr 0.01 "
                 "--weights %s --batch %s", v->tubelet, v->height, v->width, v->pool, v->pos, w,
                 b);
        int rc = tbt_run(&out, 120, "%s step %s --out %s", tbt_tubelet(), flags, o);
        CHECK_MSG(rc == 0, "tubelet step: %s", out);
        free(out);
        rc = tbt_run(&out, 300, PYTHON " %s/tests/ref/vit_ref.py %s --out %s", TB_SOURCE_DIR,
                     flags, r);
        CHECK_MSG(rc == 0, "vit_ref.py: %s", out);
        free(out);
        compare(o, r, what);
        if (i < 2) { /* per-block recomputation, whole or the MLP's: the same numbers */
            snprintf(what, sizeof(what), "%s pool, %s positions, recomputed", v->pool, v->pos);
            rc = tbt_run(&out, 120, "%s step %s --recompute --out %s", tbt_tubelet(), flags, o);
            CHECK_MSG(rc == 0, "tubelet step --recompute: %s", out);
            free(out);
            compare(o, r, what);
            snprintf(what, sizeof(what), "%s pool, %s positions, MLP recomputed", v->pool, v->pos);
            rc = tbt_run(&out, 120, "%s step %s --recompute-mlp 1 --out %s", tbt_tubelet(), flags,
                         o);
            CHECK_MSG(rc == 0, "tubelet step --recompute-mlp 1: %s", out);
            free(out);
            compare(o, r, what);
        }
    }

    tbt_case = "bad weights";
    char w[4300], b[4300], *out = NULL;
    snprintf(w, sizeof(w), "%s/w0.safetensors", tbt_dir());
    snprintf(b, sizeof(b), "%s/b0.safetensors", tbt_dir());
    int rc = tbt_run(&out, 60, "%s step --dim 32 --depth 2 --heads 2 --patch 8 --frames 4 "
                     "--size 32x32 --classes 5 --pool cls --pos learned --weights %s --batch %s "
                     "--out %s/x.safetensors", tbt_tubelet(), w, b, tbt_dir());
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "tensor 'patch_embed.proj.weight' has shape (64,3,2,8,8), the model "
                       "needs (32,3,2,8,8)");
    free(out);
    TBT_EXIT();
}
