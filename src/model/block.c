/* src/model/block.c - the shared pre-LN transformer block (block.h): its parameters, its saved
 * activations, forward and backward through the backend's ops. Not here: where the tokens
 * come from or go (the towers). Tests: tests/test_block.c, tests/test_vit.c. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#include "core/internal.h"
#include "model/block.h"

int tbi_block_check(const struct tbi_block_cfg *c)
{
    if (c->D < 1 || c->NH < 1 || c->D % c->NH || c->F < 1 || !(c->eps > 0) ||
        (c->act != TBI_ACT_GELU && c->act != TBI_ACT_QUICKGELU) ||
        (c->qv_bias && c->names != TBI_NAMES_TIMM) || c->attention < 0 ||
        c->attention >= TB_ATTENTION_N)
        return tbi_err(TB_EINVAL, "bad transformer block: width %d, %d heads (must divide the "
                       "width), MLP width %d, eps %g, activation %d, attention %d", c->D, c->NH,
                       c->F, (double)c->eps, c->act, c->attention);
    return 0;
}

int tbi_block_supported(const tbi_backend *be, const struct tbi_block_cfg *c)
{
    /* what every block runs: typed ops at the block's dtype, then f32 ones; then its
     * attention's pair (by enum tb_attention) */
    static const int typed[] = {TBI_OP_layernorm_fwd, TBI_OP_layernorm_bwd, TBI_OP_matmul_fwd,
                                TBI_OP_matmul_bwd, TBI_OP_act_fwd, TBI_OP_act_bwd,
                                TBI_OP_scale_add, TBI_OP_residual_add};
    static const int f32[] = {TBI_OP_copy, TBI_OP_zero};
    static const int attention[TB_ATTENTION_N][2] = {
        [TB_ATTENTION_GLOBAL] = {TBI_OP_attention_fwd, TBI_OP_attention_bwd}};
    enum { NT = sizeof(typed) / sizeof(typed[0]), NF = sizeof(f32) / sizeof(f32[0]) };
    int ops[NT + NF + 2], n = 0;
    for (int i = 0; i < NT; i++)
        ops[n++] = typed[i];
    ops[n++] = attention[c->attention][0];
    ops[n++] = attention[c->attention][1];
    for (int i = 0; i < NF; i++)
        ops[n++] = f32[i];
    for (int i = 0; i < n; i++) {
        int dt = i < NT + 2 ? c->dt : TB_DTYPE_F32;
        if (!tbi_backend_supports(be, ops[i], dt))
            return tbi_err(TB_EUNSUPPORTED, "the %s backend has no %s op for %s tensors, which "
                           "a transformer block runs", be->name, tbi_op_name(ops[i]),
                           dt == TB_DTYPE_BF16 ? "bf16" : "f32");
    }
    return 0;
}

int tbi_block_add(struct tb_params *r, const char *prefix, const struct tbi_block_cfg *c)
{
    static const char *const timm[TBI_BLK_N] = {
        "norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
        "attn.proj.bias", "norm2.weight", "norm2.bias", "mlp.fc1.weight", "mlp.fc1.bias",
        "mlp.fc2.weight", "mlp.fc2.bias"};
    static const char *const clip[TBI_BLK_N] = {
        "ln_1.weight", "ln_1.bias", "attn.in_proj_weight", "attn.in_proj_bias",
        "attn.out_proj.weight", "attn.out_proj.bias", "ln_2.weight", "ln_2.bias",
        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    const char *const *names = c->names == TBI_NAMES_CLIP ? clip : timm;
    int64_t D = c->D, F = c->F;
    const int64_t shapes[TBI_BLK_N][2] = {{D}, {D}, {3 * D, D}, {c->qv_bias ? D : 3 * D},
                                          {D, D}, {D}, {D}, {D}, {F, D}, {F}, {D, F}, {D}, {D}};
    int rc = tbi_params_span(r), first = r->n;
    for (int k = 0; rc >= 0 && k < (c->qv_bias ? TBI_BLK_N : TBI_BLK_V_B); k++) {
        int matrix = k == TBI_BLK_QKV_W || k == TBI_BLK_PROJ_W || k == TBI_BLK_FC1_W ||
                     k == TBI_BLK_FC2_W;
        int norm_w = k == TBI_BLK_LN1_W || k == TBI_BLK_LN2_W;
        const char *name = !c->qv_bias       ? names[k]
                           : k == TBI_BLK_QKV_B ? "attn.q_bias"
                           : k == TBI_BLK_V_B   ? "attn.v_bias"
                                                : timm[k];
        rc = tbi_params_add(r, prefix, name,
                            matrix ? TB_INIT_TRUNC_NORMAL : norm_w ? TB_INIT_ONE : TB_INIT_ZERO,
                            matrix ? 2 : 1, shapes[k]);
    }
    return rc < 0 ? rc : first;
}

void tbi_block_bind(const struct tb_params *r, int first, const struct tbi_block_cfg *c,
                    struct tbi_block_w *w, struct tbi_block_w *g)
{
    for (int k = 0; k < TBI_BLK_N; k++) {
        int have = k != TBI_BLK_V_B || c->qv_bias;
        w->p[k] = have ? tbi_param_data(r, first + k) : NULL;
        if (g)
            g->p[k] = have ? tbi_param_grad(r, first + k) : NULL;
    }
}

/* A block's activation as a tensor of its dtype; an f32 one. */
static tbi_t act(const struct tbi_block_cfg *c, const void *p)
{
    return tbi_t_of(p, c->dt);
}

/* A branch's output gradient, given the residual gradient dres (B N rows of D): dres itself
 * (f32: a bf16 product rounds it as it reads it), or with drop path dres times the branch's
 * factors (B) in buf, of the blocks' dtype. */
static int branch_grad(tbi_backend *be, const struct tbi_block_cfg *c, void *buf,
                       const float *dres, const float *factors, int B, int N, tbi_t *out)
{
    *out = factors ? act(c, buf) : tbi_f32(dres);
    return factors ? be->ops->scale_add(be, *out, NULL, dres, factors, B, (size_t)N * c->D) : 0;
}

/* The qkv bias the product takes: the whole one, or (q, 0, v) assembled in scratch. */
static int qkv_bias(tbi_backend *be, const struct tbi_block_cfg *c, const struct tbi_block_w *w,
                    const struct tbi_block_scratch *s, const float **bias)
{
    const struct tbi_ops *o = be->ops;
    size_t row = sizeof(float) * (size_t)c->D;
    *bias = w->p[TBI_BLK_QKV_B];
    if (!c->qv_bias)
        return 0;
    TBI_TRY(o->copy(be, s->bias3, w->p[TBI_BLK_QKV_B], row));
    TBI_TRY(o->zero(be, s->bias3 + c->D, row));
    TBI_TRY(o->copy(be, s->bias3 + 2 * c->D, w->p[TBI_BLK_V_B], row));
    *bias = s->bias3;
    return 0;
}

void tbi_tower_grads_declare(struct tbi_plan *p, struct tb_params *r, int s0, int L, int b,
                             int end)
{
    for (int i = 0; i < L + 2; i++) {
        int at = i == 0 ? b + L + 1 : i <= L ? b + L - (i - 1) : b;
        tbi_plan_add(p, "gradient span", &r->home[s0 + i],
                     sizeof(float) * (size_t)tbi_span_floats(r, s0 + i), at, r->fused ? at : end);
        tbi_plan_grad(p);
    }
}

void tbi_block_scratch_declare(struct tbi_plan *p, struct tbi_block_scratch *s,
                               const struct tbi_block_cfg *c, size_t R, int f0, int f1, int b0,
                               int b1)
{
    /* ln also holds proj's and fc2's products until their residual adds: within the same
     * block's call, so within these ticks */
    void *bufs[] = {&s->ln, &s->dF, &s->bias3, &s->res1};
    size_t h = tbi_dt_size(c->dt), D = (size_t)c->D, f = sizeof(float);
    size_t bytes[] = {R * D * h, R * tbi_block_dF_floats(c) * h, 3 * D * f,
                      tbi_block_keeps_res1(c) ? 0 : R * D * f};
    for (int k = 0; k < 3 + !tbi_block_keeps_res1(c); k++) {
        tbi_plan_add(p, "block scratch", bufs[k], bytes[k], f0, f1);
        tbi_plan_also(p, b0, b1);
    }
    /* a gradient's: the backward's alone */
    tbi_plan_add(p, "block scratch", &s->dD, R * D * h, b0, b1);
}

/* The parts of a set in order (kept: with fc1, and res1 where sets keep it): bytes, 64-byte
 * aligned. */
static size_t acts_parts(const struct tbi_block_cfg *c, int B, int N, int kept, size_t part[9])
{
    size_t R = (size_t)B * N, D = (size_t)c->D, f = sizeof(float), h = tbi_dt_size(c->dt);
    size_t sizes[9] = {R * f, R * f, R * 3 * D * h, R * D * h, (size_t)B * c->NH * N * f,
                       kept && tbi_block_keeps_res1(c) ? R * D * f : 0, R * f, R * f,
                       kept ? R * (size_t)c->F * h : 0};
    size_t total = 0;
    for (int k = 0; k < 9; k++)
        total += part[k] = (sizes[k] + 63) & ~(size_t)63;
    return total;
}

size_t tbi_block_acts_bytes(const struct tbi_block_cfg *c, int B, int N, int kept)
{
    size_t part[9];
    return acts_parts(c, B, N, kept, part);
}

void tbi_block_acts_carve(struct tbi_block_acts *a, void *p, const struct tbi_block_cfg *c, int B,
                          int N, int kept)
{
    size_t part[9];
    acts_parts(c, B, N, kept, part);
    char *q = p;
    int k = 0;
#define TAKE(field)                                                                            \
    do {                                                                                       \
        a->field = part[k] ? (void *)q : NULL;                                                 \
        q += part[k++];                                                                        \
    } while (0)
    TAKE(ln1_mean);
    TAKE(ln1_rstd);
    TAKE(qkv);
    TAKE(att);
    TAKE(lse);
    TAKE(res1);
    TAKE(ln2_mean);
    TAKE(ln2_rstd);
    TAKE(fc1);
#undef TAKE
}

/* res1 = x + proj(att) into r1, drop path's factors on the branch: the forward's, and the
 * backward's again for a block that recomputes it (the same bits). The product goes to ln (not
 * needed once qkv has read it), of the block's dtype: in bf16 mode stored as the bf16 it is
 * rounded to, with no f32 copy and no rounding pass, and the add widens it as it reads it. */
static int residual1(tbi_backend *be, const struct tbi_block_cfg *c, const struct tbi_block_w *w,
                     const struct tbi_block_acts *a, const struct tbi_block_scratch *s, float *r1,
                     const float *drop, const float *x, int B, int N)
{
    const struct tbi_ops *o = be->ops;
    int D = c->D, R = B * N;
    TBI_TRY(o->matmul_fwd(be, c->dt, act(c, s->ln), act(c, a->att), f32(w->p[TBI_BLK_PROJ_W]),
                          f32(w->p[TBI_BLK_PROJ_B]), R, D, D));
    return o->residual_add(be, r1, x, act(c, s->ln), drop, B, (size_t)N * D);
}

int tbi_block_forward(tbi_backend *be, const struct tbi_block_cfg *c, const struct tbi_block_w *w,
                      const struct tbi_block_acts *a, const struct tbi_block_scratch *s,
                      const float *drop, const float *x, float *y, int B, int N,
                      int for_backward)
{
    const struct tbi_ops *o = be->ops;
    float *const *p = w->p;
    int D = c->D, F = c->F, R = B * N, HS = D / c->NH;
    /* r = x + proj(attention(qkv(norm1(x)))) */
    const float *bias;
    TBI_TRY(qkv_bias(be, c, w, s, &bias));
    TBI_TRY(o->layernorm_fwd(be, act(c, s->ln), a->ln1_mean, a->ln1_rstd, x, p[TBI_BLK_LN1_W],
                             p[TBI_BLK_LN1_B], R, D, c->eps));
    TBI_TRY(o->matmul_fwd(be, c->dt, act(c, a->qkv), act(c, s->ln), f32(p[TBI_BLK_QKV_W]),
                          f32(bias), R, D, 3 * D));
    TBI_TRY(o->attention_fwd(be, act(c, a->att), a->lse, act(c, a->qkv), B, N, c->NH, HS,
                             c->causal));
    float *r1 = a->res1 ? a->res1 : s->res1;
    TBI_TRY(residual1(be, c, w, a, s, r1, drop, x, B, N));
    /* y = r + fc2(act(fc1(norm2(r)))) */
    TBI_TRY(o->layernorm_fwd(be, act(c, s->ln), a->ln2_mean, a->ln2_rstd, r1,
                             p[TBI_BLK_LN2_W], p[TBI_BLK_LN2_B], R, D, c->eps));
    TBI_TRY(o->matmul_fwd(be, c->dt, act(c, a->fc1), act(c, s->ln), f32(p[TBI_BLK_FC1_W]),
                          f32(p[TBI_BLK_FC1_B]), R, D, F));
    if (for_backward)
        return 0;
    TBI_TRY(o->act_fwd(be, c->act, act(c, s->dF), act(c, a->fc1), (size_t)R * F));
    /* fc2's product in ln as proj's (norm2's output is not needed once fc1 has read it) */
    TBI_TRY(o->matmul_fwd(be, c->dt, act(c, s->ln), act(c, s->dF), f32(p[TBI_BLK_FC2_W]),
                          f32(p[TBI_BLK_FC2_B]), R, F, D));
    return o->residual_add(be, y, r1, act(c, s->ln), drop ? drop + B : NULL, B, (size_t)N * D);
}

int tbi_block_backward(tbi_backend *be, const struct tbi_block_cfg *c, const struct tbi_block_w *w,
                       const struct tbi_block_w *g, const struct tbi_block_acts *a,
                       const struct tbi_block_scratch *s, const float *drop, const float *x,
                       float *dres, int B, int N, int from)
{
    const struct tbi_ops *o = be->ops;
    float *const *p = w->p, *const *gp = g->p;
    int D = c->D, F = c->F, R = B * N, HS = D / c->NH, dt = c->dt;
    tbi_t dF = act(c, s->dF), d3D = dF, dD = act(c, s->dD), none = {0};
    /* The LayerNorm outputs are not kept (two rows of D per token): recomputed from the
     * block's input and the saved statistics, to the bit. */
    float *r1 = a->res1 ? a->res1 : s->res1;
    if (from == TBI_FROM_MLP || (from == TBI_FROM_SET && !a->res1))
        TBI_TRY(residual1(be, c, w, a, s, r1, drop, x, B, N));
    TBI_TRY(o->layernorm_fwd(be, act(c, s->ln), a->ln2_mean, a->ln2_rstd, r1,
                             p[TBI_BLK_LN2_W], p[TBI_BLK_LN2_B], R, D, c->eps));
    if (from == TBI_FROM_MLP)
        TBI_TRY(o->matmul_fwd(be, dt, act(c, a->fc1), act(c, s->ln), f32(p[TBI_BLK_FC1_W]),
                              f32(p[TBI_BLK_FC1_B]), R, D, F));
    /* MLP branch. fc2's input gradient first: the activation's backward then also gives
     * act(fc1) again, in place of fc1 (not needed after it), for fc2's weight gradient: one
     * pass instead of two, and no buffer of its own. With drop path, the branch's output
     * gradient is dres times its factors: in dD until fc1's backward writes dD. */
    tbi_t dmlp;
    TBI_TRY(branch_grad(be, c, s->dD, dres, drop ? drop + B : NULL, B, N, &dmlp));
    TBI_TRY(o->matmul_bwd(be, dt, dF, none, none, dmlp, act(c, a->fc1),
                          f32(p[TBI_BLK_FC2_W]), R, F, D));
    TBI_TRY(o->act_bwd(be, c->act, dF, act(c, a->fc1), act(c, a->fc1), dF, (size_t)R * F));
    TBI_TRY(o->matmul_bwd(be, dt, none, f32(gp[TBI_BLK_FC2_W]), f32(gp[TBI_BLK_FC2_B]),
                          dmlp, act(c, a->fc1), f32(p[TBI_BLK_FC2_W]), R, F, D));
    TBI_TRY(o->matmul_bwd(be, dt, dD, f32(gp[TBI_BLK_FC1_W]), f32(gp[TBI_BLK_FC1_B]), dF,
                          act(c, s->ln), f32(p[TBI_BLK_FC1_W]), R, D, F));
    TBI_TRY(o->layernorm_bwd(be, dres, gp[TBI_BLK_LN2_W], gp[TBI_BLK_LN2_B], dD, r1,
                             p[TBI_BLK_LN2_W], a->ln2_mean, a->ln2_rstd, R, D));
    /* Attention branch (its scaled output gradient in ln: norm1's output is recomputed
     * after). */
    tbi_t datt;
    TBI_TRY(branch_grad(be, c, s->ln, dres, drop, B, N, &datt));
    TBI_TRY(o->matmul_bwd(be, dt, dD, f32(gp[TBI_BLK_PROJ_W]), f32(gp[TBI_BLK_PROJ_B]),
                          datt, act(c, a->att), f32(p[TBI_BLK_PROJ_W]), R, D, D));
    TBI_TRY(o->attention_bwd(be, d3D, dD, act(c, a->qkv), act(c, a->att), a->lse, B, N, c->NH,
                             HS, c->causal));
    TBI_TRY(o->layernorm_fwd(be, act(c, s->ln), a->ln1_mean, a->ln1_rstd, x, p[TBI_BLK_LN1_W],
                             p[TBI_BLK_LN1_B], R, D, c->eps));
    float *dbias = c->qv_bias ? s->bias3 : gp[TBI_BLK_QKV_B];
    TBI_TRY(o->matmul_bwd(be, dt, dD, f32(gp[TBI_BLK_QKV_W]), f32(dbias), d3D, act(c, s->ln),
                          f32(p[TBI_BLK_QKV_W]), R, D, 3 * D));
    if (c->qv_bias) { /* the k bias's gradient is dropped: there is none */
        size_t row = sizeof(float) * (size_t)D;
        TBI_TRY(o->copy(be, gp[TBI_BLK_QKV_B], s->bias3, row));
        TBI_TRY(o->copy(be, gp[TBI_BLK_V_B], s->bias3 + 2 * D, row));
    }
    return o->layernorm_bwd(be, dres, gp[TBI_BLK_LN1_W], gp[TBI_BLK_LN1_B], dD, x,
                            p[TBI_BLK_LN1_W], a->ln1_mean, a->ln1_rstd, R, D);
}
