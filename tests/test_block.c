/* tests/test_block.c - the shared transformer block (src/model/block.c) as a text tower uses
 * it: a stack of 2 blocks, width 64, 4 heads, causal attention, QuickGELU and LayerNorm eps
 * 1e-5, parameters in OpenAI CLIP's names, against its PyTorch twin (tests/ref/block_ref.py:
 * nn.MultiheadAttention blocks as CLIP builds them). The same weights, input x and output
 * gradient dy; the output y, the input's gradient and every parameter's gradient agree to a
 * relative error of 1e-4 per tensor (float32). Also non-causal with exact GELU (a video
 * tower's block), and on the guarded backend to the bit. Skipped (77) without PyTorch. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "model/block.h"
#include "tb_test.h"
#include "tubelet/rng.h"
#include "tubelet/safetensors.h"

#define PYTHON TB_TEST_PYTHON

enum { L = 2, Bn = 3, S = 11 };

struct stack {
    tbi_backend *be;
    struct tb_params reg;
    struct tbi_block_cfg c;
    int first[L];
    float *acts, *x, *dres;              /* backend */
    struct tbi_block_acts a[L];
    struct tbi_block_scratch s;
};

static void stack_open(struct stack *st, const char *backend, const struct tbi_block_cfg *c)
{
    memset(st, 0, sizeof(*st));
    st->c = *c;
    CHECK_EQ(tbi_backend_open(&st->be, backend), 0);
    st->reg.be = st->be;
    for (int l = 0; l < L; l++) {
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "transformer.resblocks.%d.", l);
        st->first[l] = tbi_block_add(&st->reg, prefix, c);
        CHECK(st->first[l] >= 0);
    }
    CHECK_EQ(tbi_params_alloc(&st->reg), 0);
    size_t R = (size_t)Bn * S, D = (size_t)c->D;
    size_t per = tbi_block_acts_bytes(c, Bn, S, 1) / sizeof(float);
    size_t grads = (size_t)st->reg.n_floats;
    size_t n = L * per + (size_t)(L + 1) * R * D + R * D * 3 + R * tbi_block_dF_floats(c) + grads +
               3 * D;
    CHECK_EQ(st->be->ops->alloc(st->be, sizeof(float) * n, (void **)&st->acts), 0);
    float *p = st->acts;
    for (int l = 0; l < L; l++, p += per)
        tbi_block_acts_carve(&st->a[l], p, c, Bn, S, 1);
    st->x = p, p += (size_t)(L + 1) * R * D;
    st->dres = p, p += R * D;
    st->s.ln = p, p += R * D;
    st->s.dD = p, p += R * D;
    st->s.dF = p, p += R * tbi_block_dF_floats(c);
    st->s.bias3 = p, p += 3 * D;
    for (int s = 0; s < st->reg.n_spans; s++)
        st->reg.home[s] = p + st->reg.off[s];
}

static void stack_close(struct stack *st)
{
    st->be->ops->free(st->be, st->acts);
    tbi_params_free(&st->reg);
    tbi_backend_close(&st->be);
}

/* Forward x, backward dy; y, dx and the gradients into out (an st file's tensors). */
static void stack_run(struct stack *st, const struct tb_st_file *in, const char *out_path)
{
    const struct tbi_ops *o = st->be->ops;
    size_t R = (size_t)Bn * S, D = (size_t)st->c.D;
    CHECK_EQ(tb_params_load(&st->reg, in), 0);
    const struct tb_st_tensor *x = tb_st_find(in, "x"), *dy = tb_st_find(in, "dy");
    CHECK_EQ(o->to_device(st->be, st->x, x->data, sizeof(float) * R * D), 0);
    for (int l = 0; l < L; l++) {
        struct tbi_block_w w;
        tbi_block_bind(&st->reg, st->first[l], &st->c, &w, NULL);
        CHECK_EQ(tbi_block_forward(st->be, &st->c, &w, &st->a[l], &st->s, NULL, st->x + l * R * D,
                                   st->x + (l + 1) * R * D, Bn, S, 0), 0);
    }
    CHECK_EQ(o->to_device(st->be, st->dres, dy->data, sizeof(float) * R * D), 0);
    for (int l = L - 1; l >= 0; l--) {
        struct tbi_block_w w, g;
        tbi_block_bind(&st->reg, st->first[l], &st->c, &w, &g);
        CHECK_EQ(tbi_block_backward(st->be, &st->c, &w, &g, &st->a[l], &st->s, NULL, st->x + l * R * D,
                                    st->dres, Bn, S, TBI_FROM_SET), 0);
    }
    int np = tb_params_count(&st->reg);
    struct tb_st_tensor *ts = calloc((size_t)np + 2, sizeof(*ts));
    float *y = malloc(sizeof(float) * R * D), *dx = malloc(sizeof(float) * R * D);
    float *grads = malloc(sizeof(float) * (size_t)st->reg.n_floats);
    CHECK_EQ(o->to_host(st->be, y, st->x + L * R * D, sizeof(float) * R * D), 0);
    CHECK_EQ(o->to_host(st->be, dx, st->dres, sizeof(float) * R * D), 0);
    ts[0] = (struct tb_st_tensor){.name = "y", .dtype = TB_ST_F32, .n_dims = 3,
                                  .shape = {Bn, S, (int64_t)D}, .n = (int64_t)(R * D), .data = y};
    ts[1] = ts[0];
    snprintf(ts[1].name, sizeof(ts[1].name), "grad.x");
    ts[1].data = dx;
    for (int i = 0; i < np; i++) {
        const struct tb_param *p = tb_params_at(&st->reg, i);
        CHECK_EQ(tb_params_read_grad(&st->reg, i, grads + p->offset), 0);
        struct tb_st_tensor *t = &ts[2 + i];
        snprintf(t->name, sizeof(t->name), "grad.%s", p->name);
        t->dtype = TB_ST_F32;
        t->n_dims = p->n_dims;
        memcpy(t->shape, p->shape, sizeof(p->shape));
        t->n = p->n;
        t->data = grads + p->offset;
    }
    CHECK_EQ(tb_st_write(out_path, ts, np + 2, NULL), 0);
    free(ts), free(y), free(dx), free(grads);
}

/* The input file: metadata for block_ref.py, random weights in CLIP's names, x and dy. */
static void write_input(const struct tbi_block_cfg *c, const char *path, uint64_t seed)
{
    struct stack st;
    stack_open(&st, "cpu", c);
    tb_rng r;
    tb_rng_init_for(&r, seed, TB_RNG_TEST, 0, 0);
    int np = tb_params_count(&st.reg);
    size_t R = (size_t)Bn * S, D = (size_t)c->D;
    struct tb_st_tensor *ts = calloc((size_t)np + 2, sizeof(*ts));
    float *w = malloc(sizeof(float) * (size_t)st.reg.n_floats);
    for (int i = 0; i < np; i++) {
        const struct tb_param *p = tb_params_at(&st.reg, i);
        float base = p->init == TB_INIT_ONE ? 1.0f : 0.0f, scale = p->decay ? 0.1f : 0.05f;
        for (int64_t k = 0; k < p->n; k++)
            w[p->offset + k] = base + (float)tb_rng_normal(&r) * scale;
        snprintf(ts[i].name, sizeof(ts[i].name), "%s", p->name);
        ts[i].dtype = TB_ST_F32;
        ts[i].n_dims = p->n_dims;
        memcpy(ts[i].shape, p->shape, sizeof(p->shape));
        ts[i].n = p->n;
        ts[i].data = w + p->offset;
    }
    float *x = malloc(sizeof(float) * R * D), *dy = malloc(sizeof(float) * R * D);
    for (size_t i = 0; i < R * D; i++) {
        x[i] = (float)tb_rng_normal(&r);
        dy[i] = (float)tb_rng_normal(&r);
    }
    for (int k = 0; k < 2; k++)
        ts[np + k] = (struct tb_st_tensor){.dtype = TB_ST_F32, .n_dims = 3,
                                           .shape = {Bn, S, (int64_t)D}, .n = (int64_t)(R * D),
                                           .data = k ? dy : x};
    snprintf(ts[np].name, sizeof(ts[np].name), "x");
    snprintf(ts[np + 1].name, sizeof(ts[np + 1].name), "dy");
    char meta[512];
    snprintf(meta, sizeof(meta), "{\"width\":\"%d\",\"heads\":\"%d\",\"layers\":\"%d\","
             "\"mlp\":\"%d\",\"eps\":\"%g\",\"act\":\"%s\",\"causal\":\"%d\"}", c->D, c->NH, L,
             c->F, (double)c->eps, c->act == TBI_ACT_QUICKGELU ? "quickgelu" : "gelu",
             c->causal);
    CHECK_EQ(tb_st_write(path, ts, np + 2, meta), 0);
    free(ts), free(w), free(x), free(dy);
    stack_close(&st);
}


int main(void)
{
    tbt_begin("block");
    if (tbt_run(NULL, 60, PYTHON " -c 'import torch, numpy'") != 0) {
        fprintf(stderr, "skip: %s cannot import torch and numpy (python3-torch)\n", PYTHON);
        return TBT_SKIP;
    }
    const struct tbi_block_cfg cfgs[] = {
        {.D = 64, .NH = 4, .F = 256, .eps = 1e-5f, .act = TBI_ACT_QUICKGELU, .causal = 1,
         .names = TBI_NAMES_CLIP},
        {.D = 64, .NH = 4, .F = 256, .eps = 1e-6f, .act = TBI_ACT_GELU, .causal = 0,
         .names = TBI_NAMES_CLIP},
    };
    for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++) {
        const struct tbi_block_cfg *c = &cfgs[i];
        char what[128], in[4300], ours[4300], ref[4300], guarded[4300], *out = NULL;
        snprintf(what, sizeof(what), "%s, %s, eps %g", c->causal ? "causal" : "not causal",
                 c->act == TBI_ACT_QUICKGELU ? "QuickGELU" : "GELU", (double)c->eps);
        tbt_case = what;
        CHECK_EQ(tbi_block_check(c), 0);
        snprintf(in, sizeof(in), "%s/in%zu.safetensors", tbt_dir(), i);
        snprintf(ours, sizeof(ours), "%s/ours%zu.safetensors", tbt_dir(), i);
        snprintf(ref, sizeof(ref), "%s/ref%zu.safetensors", tbt_dir(), i);
        snprintf(guarded, sizeof(guarded), "%s/guarded%zu.safetensors", tbt_dir(), i);
        write_input(c, in, 100 + i);
        int rc = tbt_run(&out, 300, PYTHON " %s/tests/ref/block_ref.py --in %s --out %s",
                         TB_SOURCE_DIR, in, ref);
        CHECK_MSG(rc == 0, "block_ref.py: %s", out);
        free(out);
        struct tb_st_file *f = NULL;
        CHECK_EQ(tb_st_read(&f, in), 0);
        if (!f)
            continue;
        const char *backends[2] = {"cpu", "cpu-guarded"};
        for (int b = 0; b < 2; b++) {
            struct stack st;
            stack_open(&st, backends[b], c);
            stack_run(&st, f, b ? guarded : ours);
            stack_close(&st);
        }
        tb_st_free(&f);
        tbt_compare_st(ours, ref, what, 1e-4, NULL, 1);
        snprintf(what + strlen(what), sizeof(what) - strlen(what), ", guarded backend");
        tbt_compare_st(guarded, ours, what, 0, NULL, 1);
    }
    TBT_EXIT();
}
