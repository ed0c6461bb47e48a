/* tests/test_backend.c - the backend boundary.
 * - Parity: every op of the op list (src/tensor/backend.h), on every backend this build has,
 *   against the CPU reference on the same random inputs, with a tolerance and a reason per op;
 *   an op of the list without a case here is a failure, so a new op cannot go unchecked.
 *   Backends that run the CPU kernels (cpu-guarded) must agree to the bit. A backend whose
 *   device is absent is skipped (the test exits 77 only if no backend but the reference could
 *   run at all).
 * - The guarded backend really guards: reading its memory outside an op kills the process.
 * - The token ops' backwards (tokens, pooling) against finite differences of their forwards;
 *   the uint8 normalisation against its formula. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tb_test.h"
#include "model/block.h"
#include "tensor/backend.h"
#include "tensor/cpu/kernels.h"
#include "tubelet/data.h"
#include "tubelet/rng.h"

static tb_rng rng;
static tbi_backend *cpu; /* the reference */

static float *randn(size_t n, float s)
{
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)tb_rng_normal(&rng) * s;
    return x;
}

/* ---- the cases: each runs its op on one backend from host inputs to host outputs ---------- */

/* Inputs and outputs of one case, in host memory; the same inputs go to both backends. */
#define MAX_IO 8
struct io {
    float *in[MAX_IO];
    size_t n_in[MAX_IO];
    int n_inputs;
    float *out[MAX_IO];
    size_t n_out[MAX_IO];
    int n_outputs;
    int64_t *labels;
    uint8_t *bytes;
    int32_t *idx;
    int n_labels, n_idx;
    size_t n_bytes;
};

/* Device copies of the inputs, and zeroed device outputs. */
struct dev {
    tbi_backend *be;
    float *in[MAX_IO], *out[MAX_IO];
    int64_t *labels;
    uint8_t *bytes;
    int32_t *idx;
};

static void *dev_alloc(tbi_backend *be, size_t bytes)
{
    void *p = NULL;
    CHECK_EQ(be->ops->alloc(be, bytes ? bytes : 4, &p), 0);
    return p;
}

static void dev_open(struct dev *d, tbi_backend *be, const struct io *io)
{
    memset(d, 0, sizeof(*d));
    d->be = be;
    for (int i = 0; i < io->n_inputs; i++) {
        d->in[i] = dev_alloc(be, sizeof(float) * io->n_in[i]);
        CHECK_EQ(be->ops->to_device(be, d->in[i], io->in[i], sizeof(float) * io->n_in[i]), 0);
    }
    for (int i = 0; i < io->n_outputs; i++) {
        d->out[i] = dev_alloc(be, sizeof(float) * io->n_out[i]);
        /* Outputs start as the inputs' first values where an op adds into them (dinp of
         * LayerNorm), else zero: the same start on both backends. */
        CHECK_EQ(be->ops->zero(be, d->out[i], sizeof(float) * io->n_out[i]), 0);
    }
    if (io->labels) {
        d->labels = dev_alloc(be, sizeof(int64_t) * (size_t)io->n_labels);
        CHECK_EQ(be->ops->to_device(be, d->labels, io->labels,
                                    sizeof(int64_t) * (size_t)io->n_labels), 0);
    }
    if (io->bytes) {
        d->bytes = dev_alloc(be, io->n_bytes);
        CHECK_EQ(be->ops->to_device(be, d->bytes, io->bytes, io->n_bytes), 0);
    }
    if (io->idx) {
        d->idx = dev_alloc(be, sizeof(int32_t) * (size_t)io->n_idx);
        CHECK_EQ(be->ops->to_device(be, d->idx, io->idx, sizeof(int32_t) * (size_t)io->n_idx), 0);
    }
}

/* Outputs back into host buffers (malloc'ed into res), and the device memory freed. */
static void dev_close(struct dev *d, const struct io *io, float **res)
{
    tbi_backend *be = d->be;
    CHECK_EQ(be->ops->sync(be), 0);
    for (int i = 0; i < io->n_outputs; i++) {
        res[i] = malloc(sizeof(float) * (io->n_out[i] ? io->n_out[i] : 1));
        CHECK_EQ(be->ops->to_host(be, res[i], d->out[i], sizeof(float) * io->n_out[i]), 0);
        CHECK_EQ(be->ops->free(be, d->out[i]), 0);
    }
    for (int i = 0; i < io->n_inputs; i++)
        CHECK_EQ(be->ops->free(be, d->in[i]), 0);
    if (d->labels)
        CHECK_EQ(be->ops->free(be, d->labels), 0);
    if (d->bytes)
        CHECK_EQ(be->ops->free(be, d->bytes), 0);
    if (d->idx)
        CHECK_EQ(be->ops->free(be, d->idx), 0);
}

static void add_in(struct io *io, size_t n, float scale)
{
    io->n_in[io->n_inputs] = n;
    io->in[io->n_inputs++] = randn(n, scale);
}

static void add_out(struct io *io, size_t n)
{
    io->n_out[io->n_outputs++] = n;
}

enum { M = 37, K = 29, N = 19, R = 23, C = 40, B = 3, T = 4, HH = 8, WW = 12 };
enum { NT = 33, NH = 2, HS = 16, D = NH * HS, NC = 1, NP = 20 };

typedef void (*case_fn)(struct io *io, struct dev *d, int prepare);

#define F tbi_f32
#define OP(name) static void case_##name(struct io *io, struct dev *d, int prepare)
#define RUN(call) CHECK_EQ((call), 0)

OP(matmul_fwd)
{
    if (prepare) {
        add_in(io, M * K, 1), add_in(io, N * K, 0.3f), add_in(io, N, 1), add_out(io, M * N);
        return;
    }
    RUN(d->be->ops->matmul_fwd(d->be, TB_DTYPE_F32, F(d->out[0]), F(d->in[0]), F(d->in[1]),
                               F(d->in[2]), M, K, N));
}

OP(matmul_bwd)
{
    if (prepare) {
        add_in(io, M * N, 1), add_in(io, M * K, 1), add_in(io, N * K, 0.3f);
        add_out(io, M * K), add_out(io, N * K), add_out(io, N);
        return;
    }
    RUN(d->be->ops->matmul_bwd(d->be, TB_DTYPE_F32, F(d->out[0]), F(d->out[1]), F(d->out[2]),
                               F(d->in[0]), F(d->in[1]), F(d->in[2]), M, K, N));
}

OP(layernorm_fwd)
{
    if (prepare) {
        add_in(io, R * C, 2), add_in(io, C, 1), add_in(io, C, 1);
        add_out(io, R * C), add_out(io, R), add_out(io, R);
        return;
    }
    RUN(d->be->ops->layernorm_fwd(d->be, F(d->out[0]), d->out[1], d->out[2], d->in[0], d->in[1],
                                  d->in[2], R, C, 1e-5f));
}

OP(layernorm_bwd)
{
    if (prepare) {
        add_in(io, R * C, 1), add_in(io, R * C, 2), add_in(io, C, 1), add_in(io, R, 0.1f);
        add_in(io, R, 0.2f);
        add_out(io, R * C), add_out(io, C), add_out(io, C);
        return;
    }
    RUN(d->be->ops->layernorm_bwd(d->be, d->out[0], d->out[1], d->out[2], F(d->in[0]), d->in[1],
                                  d->in[2], d->in[3], d->in[4], R, C));
}

static void act_case(struct io *io, struct dev *d, int prepare, int act, int bwd)
{
    if (prepare) {
        add_in(io, 1000, 3), add_in(io, 1000, 1), add_out(io, 1000);
        if (bwd)
            add_out(io, 1000);
        return;
    }
    if (bwd)
        RUN(d->be->ops->act_bwd(d->be, act, F(d->out[0]), F(d->out[1]), F(d->in[0]),
                                F(d->in[1]), 1000));
    else
        RUN(d->be->ops->act_fwd(d->be, act, F(d->out[0]), F(d->in[0]), 1000));
}
OP(act_fwd)
{
    act_case(io, d, prepare, TBI_ACT_GELU, 0);
}
static void case_act_fwd_quick(struct io *io, struct dev *d, int prepare)
{
    act_case(io, d, prepare, TBI_ACT_QUICKGELU, 0);
}
OP(act_bwd)
{
    act_case(io, d, prepare, TBI_ACT_GELU, 1);
}
static void case_act_bwd_quick(struct io *io, struct dev *d, int prepare)
{
    act_case(io, d, prepare, TBI_ACT_QUICKGELU, 1);
}

OP(add)
{
    if (prepare) {
        add_in(io, 999, 1), add_in(io, 999, 1), add_out(io, 999);
        return;
    }
    RUN(d->be->ops->add(d->be, d->out[0], d->in[0], d->in[1], 999));
}

static void attention_case(struct io *io, struct dev *d, int prepare, int causal, int bwd)
{
    size_t qkv = (size_t)B * NT * 3 * D, o = (size_t)B * NT * D, lse = (size_t)B * NH * NT;
    if (prepare) {
        add_in(io, qkv, 1);
        add_in(io, o, 1);
        add_out(io, o), add_out(io, lse);
        if (bwd)
            add_out(io, qkv);
        return;
    }
    /* The backward's inputs (out, lse) come from the same backend's forward. */
    RUN(d->be->ops->attention_fwd(d->be, F(d->out[0]), d->out[1], F(d->in[0]), B, NT, NH, HS,
                                  causal));
    if (bwd)
        RUN(d->be->ops->attention_bwd(d->be, F(d->out[2]), F(d->in[1]), F(d->in[0]),
                                      F(d->out[0]), d->out[1], B, NT, NH, HS, causal));
}
OP(attention_fwd)
{
    attention_case(io, d, prepare, 0, 0);
}
static void case_attention_fwd_causal(struct io *io, struct dev *d, int prepare)
{
    attention_case(io, d, prepare, 1, 0);
}
OP(attention_bwd)
{
    attention_case(io, d, prepare, 0, 1);
}
static void case_attention_bwd_causal(struct io *io, struct dev *d, int prepare)
{
    attention_case(io, d, prepare, 1, 1);
}

static int64_t labels_b[B] = {2, 0, 6};

static void xent_case(struct io *io, struct dev *d, int prepare, int bwd)
{
    if (prepare) {
        add_in(io, B * 7, 2), add_out(io, 1), add_out(io, B * 7);
        if (bwd)
            add_out(io, B * 7);
        io->labels = labels_b;
        io->n_labels = B;
        return;
    }
    RUN(d->be->ops->xent_fwd(d->be, d->out[0], d->out[1], d->in[0], d->labels, B, 7, 0.1f));
    if (bwd)
        RUN(d->be->ops->xent_bwd(d->be, d->out[2], d->out[1], d->labels, B, 7, 0.1f));
}
OP(xent_fwd)
{
    xent_case(io, d, prepare, 0);
}
OP(xent_bwd)
{
    xent_case(io, d, prepare, 1);
}

/* Soft targets: rows of random positive mass (not normalised: the backward's mass term). */
static void xent_soft_case(struct io *io, struct dev *d, int prepare, int bwd)
{
    if (prepare) {
        add_in(io, B * 7, 2), add_in(io, B * 7, 1), add_out(io, 1), add_out(io, B * 7);
        for (int i = 0; i < B * 7; i++)
            io->in[1][i] = io->in[1][i] * io->in[1][i] / 7;
        if (bwd)
            add_out(io, B * 7);
        return;
    }
    RUN(d->be->ops->xent_soft_fwd(d->be, d->out[0], d->out[1], d->in[0], d->in[1], B, 7));
    if (bwd)
        RUN(d->be->ops->xent_soft_bwd(d->be, d->out[2], d->out[1], d->in[1], B, 7));
}
OP(xent_soft_fwd)
{
    xent_soft_case(io, d, prepare, 0);
}
OP(xent_soft_bwd)
{
    xent_soft_case(io, d, prepare, 1);
}

/* Mixup, then cutmix, on an odd batch (its middle clip mixes with itself). */
OP(mix_clips)
{
    size_t n = (size_t)B * 3 * T * HH * WW;
    if (prepare) {
        add_in(io, n, 1), add_out(io, n), add_out(io, n);
        return;
    }
    static const int box[4] = {2, 7, 3, 12};
    tbi_backend *be = d->be;
    RUN(be->ops->copy(be, d->out[0], d->in[0], sizeof(float) * n));
    RUN(be->ops->mix_clips(be, d->out[0], B, 3 * T, HH, WW, 0.3f, NULL));
    RUN(be->ops->copy(be, d->out[1], d->in[0], sizeof(float) * n));
    RUN(be->ops->mix_clips(be, d->out[1], B, 3 * T, HH, WW, 0.3f, box));
}

OP(erase_boxes)
{
    size_t n = (size_t)B * 3 * T * HH * WW;
    if (prepare) {
        add_in(io, n, 1), add_out(io, n);
        return;
    }
    int32_t boxes[B * T * 4];
    for (int i = 0; i < B * T; i++) {
        int32_t *bx = boxes + i * 4;
        bx[0] = i % 3 == 1 ? -1 : i % HH / 2, bx[1] = bx[0] + 3, bx[2] = i % 5, bx[3] = WW;
    }
    static const uint64_t streams[B] = {11, 12, 13};
    RUN(d->be->ops->copy(d->be, d->out[0], d->in[0], sizeof(float) * n));
    RUN(d->be->ops->erase_boxes(d->be, d->out[0], B, 3, T, HH, WW, boxes, 5, streams));
}

static uint8_t clip_bytes[B * T * HH * WW * 3], flips[B] = {0, 1, 0};

OP(normalize)
{
    if (prepare) {
        for (size_t i = 0; i < sizeof(clip_bytes); i++)
            clip_bytes[i] = (uint8_t)tb_rng_below(&rng, 256);
        /* flips ride in the same byte buffer's tail */
        io->n_bytes = sizeof(clip_bytes) + B;
        io->bytes = malloc(io->n_bytes);
        memcpy(io->bytes, clip_bytes, sizeof(clip_bytes));
        memcpy(io->bytes + sizeof(clip_bytes), flips, B);
        add_out(io, (size_t)B * 3 * T * HH * WW);
        return;
    }
    static const float mean[3] = {100, 110, 120}, std[3] = {50, 60, 70};
    RUN(d->be->ops->normalize(d->be, d->out[0], d->bytes, d->bytes + sizeof(clip_bytes), B, T, HH,
                              WW, mean, std));
}

OP(patchify)
{
    if (prepare) {
        add_in(io, (size_t)B * 3 * T * HH * WW, 1), add_out(io, (size_t)B * 3 * T * HH * WW);
        return;
    }
    RUN(d->be->ops->patchify(d->be, d->out[0], d->in[0], B, 3, T, HH, WW, 2, 4));
}

/* Kept tokens for the gathering cases: NK of NP per clip, rising, a different subset each. */
enum { NK = 7 };
static int32_t kept[B * NK];

static void make_kept(void)
{
    for (int b = 0; b < B; b++) {
        int j = 0;
        for (int t = 0; t < NP && j < NK; t++)
            if ((int)tb_rng_below(&rng, (uint64_t)(NP - t)) < NK - j)
                kept[b * NK + j++] = t;
    }
}

static void tokens_case(struct io *io, struct dev *d, int prepare, int gather, int bwd)
{
    int n = gather ? NK : NP;
    if (prepare) {
        if (bwd) {
            add_in(io, (size_t)B * (NC + n) * D, 1);
            add_out(io, (size_t)B * n * D), add_out(io, NC * D), add_out(io, (NC + NP) * D);
        } else {
            add_in(io, (size_t)B * n * D, 1), add_in(io, NC * D, 1), add_in(io, (NC + NP) * D, 1);
            add_out(io, (size_t)B * (NC + n) * D);
        }
        if (gather) {
            io->idx = kept;
            io->n_idx = B * NK;
        }
        return;
    }
    if (bwd)
        RUN(d->be->ops->tokens_bwd(d->be, d->out[0], d->out[1], d->out[2], d->in[0], d->idx, B, n,
                                   NC, NC + NP, D));
    else
        RUN(d->be->ops->tokens_fwd(d->be, d->out[0], d->in[0], d->in[1], d->in[2], d->idx, B, n,
                                   NC, D));
}
OP(tokens_fwd)
{
    tokens_case(io, d, prepare, 0, 0);
}
static void case_tokens_fwd_kept(struct io *io, struct dev *d, int prepare)
{
    tokens_case(io, d, prepare, 1, 0);
}
OP(tokens_bwd)
{
    tokens_case(io, d, prepare, 0, 1);
}
static void case_tokens_bwd_kept(struct io *io, struct dev *d, int prepare)
{
    tokens_case(io, d, prepare, 1, 1);
}

OP(gather_rows)
{
    if (prepare) {
        add_in(io, (size_t)B * NP * 5, 1), add_out(io, (size_t)B * NK * 5);
        io->idx = kept;
        io->n_idx = B * NK;
        return;
    }
    RUN(d->be->ops->gather_rows(d->be, d->out[0], d->in[0], d->idx, B, NP, NK, 5));
}

OP(scale_add)
{
    if (prepare) {
        add_in(io, (size_t)B * 500, 1), add_in(io, (size_t)B * 500, 1), add_in(io, B, 1);
        add_out(io, (size_t)B * 500), add_out(io, (size_t)B * 500);
        return;
    }
    RUN(d->be->ops->scale_add(d->be, F(d->out[0]), d->in[0], d->in[1], d->in[2], B, 500));
    RUN(d->be->ops->scale_add(d->be, F(d->out[1]), NULL, d->in[1], d->in[2], B, 500));
}

/* with drop path's factors, and without (a plain add); segments of 500, not a multiple of 8 */
OP(residual_add)
{
    if (prepare) {
        add_in(io, (size_t)B * 500, 1), add_in(io, (size_t)B * 500, 1), add_in(io, B, 1);
        add_out(io, (size_t)B * 500), add_out(io, (size_t)B * 500);
        return;
    }
    RUN(d->be->ops->residual_add(d->be, d->out[0], d->in[0], F(d->in[1]), d->in[2], B, 500));
    RUN(d->be->ops->residual_add(d->be, d->out[1], d->in[0], F(d->in[1]), NULL, B, 500));
}

OP(scatter_rows)
{
    if (prepare) {
        add_in(io, (size_t)B * NK * 5, 1), add_out(io, (size_t)B * NP * 5);
        io->idx = kept;
        io->n_idx = B * NK;
        return;
    }
    RUN(d->be->ops->scatter_rows(d->be, d->out[0], d->in[0], d->idx, B, NP, NK, 5));
}

/* MAE's decoder tokens: NK encoded rows, then NP - NK mask tokens, at the positions of a
 * permutation of each clip's NP (kept ones first, as the decoder orders them). */
enum { NF = NP - NK };
static int32_t dec_order[B * NP];

static void make_dec_order(void)
{
    for (int b = 0; b < B; b++) {
        int j = 0, f = NK;
        for (int t = 0; t < NP; t++) {
            int is_kept = j < NK && kept[b * NK + j] == t;
            dec_order[b * NP + (is_kept ? j++ : f++)] = t;
        }
    }
}

OP(tokens_fill_fwd)
{
    if (prepare) {
        add_in(io, (size_t)B * NK * D, 1), add_in(io, D, 1), add_in(io, (size_t)NP * D, 1);
        add_out(io, (size_t)B * NP * D);
        io->idx = dec_order;
        io->n_idx = B * NP;
        return;
    }
    RUN(d->be->ops->tokens_fill_fwd(d->be, d->out[0], d->in[0], d->in[1], d->in[2], d->idx, B,
                                    NK, NF, D));
}

OP(tokens_fill_bwd)
{
    if (prepare) {
        add_in(io, (size_t)B * NP * D, 1), add_out(io, (size_t)B * NK * D), add_out(io, D);
        return;
    }
    RUN(d->be->ops->tokens_fill_bwd(d->be, d->out[0], d->out[1], d->in[0], B, NK, NF, D));
}

OP(patch_target)
{
    enum { PP = 2 * 4 * 4 };
    if (prepare) {
        add_in(io, (size_t)R * 3 * PP, 1), add_out(io, (size_t)R * 3 * PP);
        add_out(io, (size_t)R * 3 * PP);
        return;
    }
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    RUN(d->be->ops->patch_target(d->be, d->out[0], d->in[0], R, 3, PP, mean, std, 1));
    RUN(d->be->ops->patch_target(d->be, d->out[1], d->in[0], R, 3, PP, mean, std, 0));
}

/* Weights 0 or 1 (MAE's loss on the encoder-masked decoded tokens), a few of each. */
static void mse_case(struct io *io, struct dev *d, int prepare, int bwd)
{
    if (prepare) {
        add_in(io, (size_t)R * C, 1), add_in(io, (size_t)R * C, 1), add_in(io, R, 1);
        for (int r = 0; r < R; r++)
            io->in[2][r] = r % 3 != 1;
        add_out(io, bwd ? (size_t)R * C : 1);
        return;
    }
    if (bwd)
        RUN(d->be->ops->mse_bwd(d->be, d->out[0], tbi_f32(d->in[0]), d->in[1], d->in[2], R, C));
    else
        RUN(d->be->ops->mse_fwd(d->be, d->out[0], tbi_f32(d->in[0]), d->in[1], d->in[2], R, C));
}
OP(mse_fwd)
{
    mse_case(io, d, prepare, 0);
}
OP(mse_bwd)
{
    mse_case(io, d, prepare, 1);
}

OP(pool_fwd)
{
    if (prepare) {
        add_in(io, (size_t)B * NT * D, 1), add_out(io, B * D), add_out(io, B * D);
        return;
    }
    RUN(d->be->ops->pool_fwd(d->be, TBI_POOL_FIRST, d->out[0], d->in[0], B, NT, D));
    RUN(d->be->ops->pool_fwd(d->be, TBI_POOL_MEAN, d->out[1], d->in[0], B, NT, D));
}

OP(pool_bwd)
{
    if (prepare) {
        add_in(io, B * D, 1), add_out(io, (size_t)B * NT * D), add_out(io, (size_t)B * NT * D);
        return;
    }
    RUN(d->be->ops->pool_bwd(d->be, TBI_POOL_FIRST, d->out[0], d->in[0], B, NT, D));
    RUN(d->be->ops->pool_bwd(d->be, TBI_POOL_MEAN, d->out[1], d->in[0], B, NT, D));
}

/* CLIP's tiled positions: T frames of S spatial positions. */
enum { PT = 3, PS = 6 };
OP(pos_tile_fwd)
{
    if (prepare) {
        add_in(io, (1 + PS) * D, 1), add_in(io, PT * D, 1);
        add_out(io, (1 + PT * PS) * D), add_out(io, (1 + PT * PS) * D);
        return;
    }
    RUN(d->be->ops->pos_tile_fwd(d->be, d->out[0], d->in[0], d->in[1], PT, PS, D));
    RUN(d->be->ops->pos_tile_fwd(d->be, d->out[1], d->in[0], NULL, PT, PS, D));
}

OP(pos_tile_bwd)
{
    if (prepare) {
        add_in(io, (1 + PT * PS) * D, 1);
        add_out(io, (1 + PS) * D), add_out(io, PT * D), add_out(io, (1 + PS) * D);
        return;
    }
    RUN(d->be->ops->pos_tile_bwd(d->be, d->out[0], d->out[1], d->in[0], PT, PS, D));
    RUN(d->be->ops->pos_tile_bwd(d->be, d->out[2], NULL, d->in[0], PT, PS, D));
}

/* Token ids with repeats (a caption's padding): R rows of a table of V. */
enum { EV = 11, ER = 40 };
static int32_t embed_ids[ER];
OP(embed_bwd)
{
    if (prepare) {
        for (int r = 0; r < ER; r++)
            embed_ids[r] = r % 3 ? (int32_t)((r * 7) % EV) : 0;
        add_in(io, (size_t)ER * D, 1), add_out(io, (size_t)EV * D);
        io->idx = embed_ids;
        io->n_idx = ER;
        return;
    }
    RUN(d->be->ops->embed_bwd(d->be, d->out[0], d->in[0], d->idx, ER, EV, D));
}

OP(transpose)
{
    if (prepare) {
        add_in(io, (size_t)M * 70, 1), add_out(io, (size_t)M * 70);
        return;
    }
    RUN(d->be->ops->transpose(d->be, d->out[0], d->in[0], M, 70));
}

OP(adamw)
{
    if (prepare) {
        /* param, grad, m, v (v >= 0) as inputs; the updated three as outputs */
        add_in(io, 500, 1), add_in(io, 500, 1), add_in(io, 500, 0.1f), add_in(io, 500, 0.1f);
        for (int i = 0; i < 500; i++)
            io->in[3][i] *= io->in[3][i];
        add_out(io, 500), add_out(io, 500), add_out(io, 500);
        return;
    }
    tbi_backend *be = d->be;
    for (int i = 0; i < 3; i++)
        RUN(be->ops->copy(be, d->out[i], d->in[i == 0 ? 0 : i + 1], sizeof(float) * 500));
    RUN(be->ops->adamw(be, d->out[0], d->in[1], 0.7f, d->out[1], d->out[2], 500, 1e-3f, 0.9f,
                       0.999f, 1e-8f, 0.05f, 3));
}

/* An optimizer with one state tensor (Lion's momentum, SGD's buffer): weights, gradient and
 * state in; weights and state out. */
static void one_state_case(struct io *io, struct dev *d, int prepare, int sgd)
{
    if (prepare) {
        add_in(io, 500, 1), add_in(io, 500, 1), add_in(io, 500, 0.1f);
        add_out(io, 500), add_out(io, 500);
        return;
    }
    tbi_backend *be = d->be;
    RUN(be->ops->copy(be, d->out[0], d->in[0], sizeof(float) * 500));
    RUN(be->ops->copy(be, d->out[1], d->in[2], sizeof(float) * 500));
    if (sgd)
        RUN(be->ops->sgd(be, d->out[0], d->in[1], 0.7f, d->out[1], 500, 1e-2f, 0.9f, 4e-5f));
    else
        RUN(be->ops->lion(be, d->out[0], d->in[1], 0.7f, d->out[1], 500, 1e-3f, 0.9f, 0.99f,
                          0.05f));
}
OP(lion)
{
    one_state_case(io, d, prepare, 0);
}

OP(sgd)
{
    one_state_case(io, d, prepare, 1);
}

OP(sum_squares_acc)
{
    if (prepare) {
        add_in(io, 12345, 1), add_out(io, 1);
        return;
    }
    double *acc = dev_alloc(d->be, sizeof(double)), s = 0.5;
    RUN(d->be->ops->to_device(d->be, acc, &s, sizeof(s)));
    RUN(d->be->ops->sum_squares_acc(d->be, acc, d->in[0], 12345));
    RUN(d->be->ops->sum_squares_acc(d->be, acc, d->in[0] + 100, 1000));
    RUN(d->be->ops->to_host(d->be, &s, acc, sizeof(s)));
    RUN(d->be->ops->free(d->be, acc));
    float f = (float)s;
    RUN(d->be->ops->to_device(d->be, d->out[0], &f, sizeof(f)));
}

/* A step's numbers on the device, from h; the outputs get the fields after the ops. */
static struct tbi_step_stats *stats_on(tbi_backend *be, const struct tbi_step_stats *h)
{
    struct tbi_step_stats *st = dev_alloc(be, sizeof(*st));
    RUN(be->ops->to_device(be, st, h, sizeof(*h)));
    return st;
}

/* x, or a finite stand-in for NaN and infinities (the harness compares finite values) */
static float finite_as(double x)
{
    return isfinite(x) ? (float)x : isnan(x) ? 12345.0f : x > 0 ? 54321.0f : -54321.0f;
}

static void stats_out(struct dev *d, struct tbi_step_stats *st, float *out)
{
    struct tbi_step_stats h;
    RUN(d->be->ops->to_host(d->be, &h, st, sizeof(h)));
    RUN(d->be->ops->free(d->be, st));
    float f[12] = {finite_as(h.loss), h.scale, finite_as(h.sumsq), finite_as(h.span_sumsq),
                   finite_as(h.norm), (float)h.bad, (float)h.bad_span, (float)h.bad_step,
                   (float)h.bad_epoch, (float)h.bad_batch, finite_as(h.bad_loss),
                   finite_as(h.bad_norm)};
    RUN(d->be->ops->to_device(d->be, out, f, sizeof(f)));
}

/* Two micro-batches' losses into a step's */
OP(step_loss)
{
    if (prepare) {
        add_in(io, 2, 1), add_out(io, 12);
        return;
    }
    struct tbi_step_stats h = {0}, *st = stats_on(d->be, &h);
    RUN(d->be->ops->step_loss(d->be, st, d->in[0], 3));
    RUN(d->be->ops->step_loss(d->be, st, d->in[0] + 1, 3));
    stats_out(d, st, d->out[0]);
}

/* Clipping (a norm above the limit and one below), a fused span, and the flags: a NaN loss,
 * an infinite norm, a NaN span; a flag stays. */
OP(step_check)
{
    if (prepare) {
        add_out(io, 12), add_out(io, 12), add_out(io, 12), add_out(io, 12), add_out(io, 12);
        add_out(io, 12);
        return;
    }
    tbi_backend *be = d->be;
    struct tbi_step_stats h = {.loss = 2.5f, .sumsq = 9.0}, *st = stats_on(be, &h);
    RUN(be->ops->step_check(be, st, -1, 0, 1.0, 2, 7, 1, 3)); /* norm 1.5 > 1: clipped */
    stats_out(d, st, d->out[0]);
    st = stats_on(be, &h);
    RUN(be->ops->step_check(be, st, -1, 0, 5.0, 1, 7, 1, 3)); /* norm 3 < 5 */
    stats_out(d, st, d->out[1]);
    h.span_sumsq = 4;
    st = stats_on(be, &h);
    RUN(be->ops->step_check(be, st, 2, 1, 0, 1, 7, 0, 0));
    stats_out(d, st, d->out[2]);
    h.loss = NAN;
    st = stats_on(be, &h);
    RUN(be->ops->step_check(be, st, -1, 0, 1.0, 1, 8, 2, 4));
    RUN(be->ops->step_check(be, st, -1, 0, 1.0, 1, 9, 2, 5)); /* the first stays */
    stats_out(d, st, d->out[3]);
    h.loss = 1, h.sumsq = INFINITY;
    st = stats_on(be, &h);
    RUN(be->ops->step_check(be, st, -1, 0, 1.0, 1, 8, 2, 4));
    stats_out(d, st, d->out[4]);
    h.sumsq = 1, h.span_sumsq = NAN;
    st = stats_on(be, &h);
    RUN(be->ops->step_check(be, st, 3, 1, 0, 1, 8, 0, 0));
    stats_out(d, st, d->out[5]);
}

/* The checked updates: at st->scale as the plain op at that factor (outputs 0-2), and nothing
 * written with st->bad set (outputs 3-5: the inputs). */
static void checked_case(struct io *io, struct dev *d, int prepare, int kind)
{
    int states = kind == 0 ? 2 : 1;
    if (prepare) {
        add_in(io, 500, 1), add_in(io, 500, 1), add_in(io, 500, 0.1f), add_in(io, 500, 0.1f);
        for (int i = 0; i < 500; i++)
            io->in[3][i] *= io->in[3][i];
        for (int i = 0; i < 2 * (1 + states); i++)
            add_out(io, 500);
        return;
    }
    tbi_backend *be = d->be;
    for (int bad = 0; bad < 2; bad++) {
        float **o = d->out + bad * (1 + states);
        struct tbi_step_stats h = {.scale = 0.7f, .bad = bad ? TBI_BAD_NORM : 0};
        struct tbi_step_stats *st = stats_on(be, &h);
        for (int i = 0; i < 1 + states; i++)
            RUN(be->ops->copy(be, o[i], d->in[i == 0 ? 0 : i + 1], sizeof(float) * 500));
        if (kind == 0)
            RUN(be->ops->adamw_checked(be, o[0], d->in[1], st, o[1], o[2], 500, 1e-3f, 0.9f,
                                       0.999f, 1e-8f, 0.05f, 3));
        else if (kind == 1)
            RUN(be->ops->lion_checked(be, o[0], d->in[1], st, o[1], 500, 1e-3f, 0.9f, 0.99f,
                                      0.05f));
        else
            RUN(be->ops->sgd_checked(be, o[0], d->in[1], st, o[1], 500, 1e-2f, 0.9f, 4e-5f));
        RUN(be->ops->free(be, st));
    }
}
OP(adamw_checked)
{
    checked_case(io, d, prepare, 0);
}

OP(lion_checked)
{
    checked_case(io, d, prepare, 1);
}

OP(sgd_checked)
{
    checked_case(io, d, prepare, 2);
}

/* InfoNCE over 7 pairs of 24: the loss, the gradients of rows 2-5 times 3, the scale's. */
enum { IN = 7, IE = 24 };
static void infonce_case(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        add_in(io, IN * IE, 1), add_in(io, IN * IE, 1);
        add_out(io, 1), add_out(io, 4 * IE), add_out(io, 4 * IE), add_out(io, 1);
        return;
    }
    tbi_backend *be = d->be;
    double *work = dev_alloc(be, sizeof(double) * (tbi_infonce_work(IN, IE) + 2)), ds = 0;
    double *sc = work + tbi_infonce_work(IN, IE), scale = 14.3;
    RUN(be->ops->to_device(be, sc, &scale, sizeof(scale)));
    RUN(be->ops->infonce_fwd(be, d->out[0], work, d->in[0], d->in[1], IN, IE, sc));
    RUN(be->ops->infonce_bwd(be, d->out[1], d->out[2], sc + 1, work, IN, IE, sc, 2, 4, 3.0f));
    RUN(be->ops->to_host(be, &ds, sc + 1, sizeof(ds)));
    RUN(be->ops->free(be, work));
    float f = (float)ds;
    RUN(be->ops->to_device(be, d->out[3], &f, sizeof(f)));
}
OP(infonce_fwd)
{
    infonce_case(io, d, prepare);
}

OP(infonce_bwd)
{
    infonce_case(io, d, prepare);
}

/* One process: the gather is a copy of every element. */
OP(gather)
{
    if (prepare) {
        add_in(io, 1001, 1), add_out(io, 1001);
        return;
    }
    RUN(d->be->ops->gather(d->be, d->out[0], d->in[0], 1001));
}

/* The logit scale from a log below, inside and above the clamp, its gradient from a loss's
 * gradient on the scale; the clamped logs written back. */
static void logit_scale_case(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        add_out(io, 3), add_out(io, 3), add_out(io, 3);
        return;
    }
    tbi_backend *be = d->be;
    const float logs[3] = {-0.5f, 2.6593f, 7.0f};
    double *sd = dev_alloc(be, sizeof(double) * 2), scale = 0, ds = -0.37;
    RUN(be->ops->to_device(be, d->out[0], logs, sizeof(logs)));
    RUN(be->ops->to_device(be, sd + 1, &ds, sizeof(ds)));
    for (int i = 0; i < 3; i++) {
        RUN(be->ops->logit_scale(be, sd, d->out[0] + i));
        RUN(be->ops->logit_scale_bwd(be, d->out[2] + i, sd + 1, sd));
        RUN(be->ops->to_host(be, &scale, sd, sizeof(scale)));
        float f = (float)scale;
        RUN(be->ops->to_device(be, d->out[1] + i, &f, sizeof(f)));
    }
    RUN(be->ops->free(be, sd));
}
OP(logit_scale)
{
    logit_scale_case(io, d, prepare);
}

OP(logit_scale_bwd)
{
    logit_scale_case(io, d, prepare);
}

/* ---- bf16 storage: the typed ops with bf16 tensors, as bf16 mode's blocks pass them ------- */

#define BF(p) tbi_t_of((p), TB_DTYPE_BF16)

/* A bf16 tensor on d's backend: host floats x (n) rounded, or zeros (x NULL). */
static void *bf16_in(struct dev *d, const float *x, size_t n)
{
    uint16_t *h = calloc(n ? n : 1, sizeof(uint16_t));
    if (x)
        tbi_bf16_from_f32(h, x, n);
    void *p = dev_alloc(d->be, sizeof(uint16_t) * n);
    CHECK_EQ(d->be->ops->to_device(d->be, p, h, sizeof(uint16_t) * n), 0);
    free(h);
    return p;
}

/* A bf16 tensor p (n) widened into the case's f32 output out, and freed. */
static void bf16_out(struct dev *d, float *out, void *p, size_t n)
{
    uint16_t *h = malloc(sizeof(uint16_t) * (n ? n : 1));
    float *f = malloc(sizeof(float) * (n ? n : 1));
    CHECK_EQ(d->be->ops->to_host(d->be, h, p, sizeof(uint16_t) * n), 0);
    tbi_f32_from_bf16(f, h, n);
    CHECK_EQ(d->be->ops->to_device(d->be, out, f, sizeof(float) * n), 0);
    CHECK_EQ(d->be->ops->free(d->be, p), 0);
    free(h), free(f);
}

/* out, inp bf16; weights f32; a bf16 product */
static void case_matmul_fwd_bf16(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        case_matmul_fwd(io, d, 1);
        return;
    }
    void *x = bf16_in(d, io->in[0], M * K), *y = bf16_in(d, NULL, M * N);
    RUN(d->be->ops->matmul_fwd(d->be, TB_DTYPE_BF16, BF(y), BF(x), F(d->in[1]), F(d->in[2]), M,
                               K, N));
    bf16_out(d, d->out[0], y, M * N);
    CHECK_EQ(d->be->ops->free(d->be, x), 0);
}

/* dinp and inp bf16; dout (a branch's f32 gradient), weights and their gradients f32 */
static void case_matmul_bwd_bf16(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        case_matmul_bwd(io, d, 1);
        return;
    }
    void *x = bf16_in(d, io->in[1], M * K), *dx = bf16_in(d, NULL, M * K);
    RUN(d->be->ops->matmul_bwd(d->be, TB_DTYPE_BF16, BF(dx), F(d->out[1]), F(d->out[2]),
                               F(d->in[0]), BF(x), F(d->in[2]), M, K, N));
    bf16_out(d, d->out[0], dx, M * K);
    CHECK_EQ(d->be->ops->free(d->be, x), 0);
}

/* A device copy of the case's device tensor src (n floats) shift floats into a buffer of its
 * own: a tensor 4-byte aligned, as one carved from an arena may be. Free the returned base. */
static float *shifted(struct dev *d, const float *src, size_t n, int shift)
{
    float *p = dev_alloc(d->be, sizeof(float) * (n + (size_t)shift));
    if (src)
        CHECK_EQ(d->be->ops->copy(d->be, p + shift, src, sizeof(float) * n), 0);
    else
        CHECK_EQ(d->be->ops->zero(d->be, p, sizeof(float) * (n + (size_t)shift)), 0);
    return p;
}

/* A bf16 product into an f32 tensor with a bias (bf16 mode's attention projection and fc2 into
 * the f32 residual, the head): inp bf16, weights, bias and out f32, each at an odd offset. */
static void case_matmul_fwd_bf16_f32(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        case_matmul_fwd(io, d, 1);
        return;
    }
    void *x = bf16_in(d, io->in[0], M * K);
    float *w = shifted(d, d->in[1], N * K, 1), *b = shifted(d, d->in[2], N, 3);
    float *y = shifted(d, NULL, M * N, 1);
    RUN(d->be->ops->matmul_fwd(d->be, TB_DTYPE_BF16, F(y + 1), BF(x), F(w + 1), F(b + 3), M, K,
                               N));
    RUN(d->be->ops->copy(d->be, d->out[0], y + 1, sizeof(float) * M * N));
    CHECK_EQ(d->be->ops->free(d->be, x), 0);
    CHECK_EQ(d->be->ops->free(d->be, w), 0);
    CHECK_EQ(d->be->ops->free(d->be, b), 0);
    CHECK_EQ(d->be->ops->free(d->be, y), 0);
}

/* Its backward: the f32 weight and bias gradients (BGRADB beside an f32 dw) at odd offsets. */
static void case_matmul_bwd_bf16_f32(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        case_matmul_bwd(io, d, 1);
        return;
    }
    void *x = bf16_in(d, io->in[1], M * K), *dx = bf16_in(d, NULL, M * K);
    float *dw = shifted(d, NULL, N * K, 1), *db = shifted(d, NULL, N, 1);
    float *dy = shifted(d, d->in[0], M * N, 3);
    RUN(d->be->ops->matmul_bwd(d->be, TB_DTYPE_BF16, BF(dx), F(dw + 1), F(db + 1), F(dy + 3),
                               BF(x), F(d->in[2]), M, K, N));
    bf16_out(d, d->out[0], dx, M * K);
    RUN(d->be->ops->copy(d->be, d->out[1], dw + 1, sizeof(float) * N * K));
    RUN(d->be->ops->copy(d->be, d->out[2], db + 1, sizeof(float) * N));
    CHECK_EQ(d->be->ops->free(d->be, x), 0);
    CHECK_EQ(d->be->ops->free(d->be, dw), 0);
    CHECK_EQ(d->be->ops->free(d->be, db), 0);
    CHECK_EQ(d->be->ops->free(d->be, dy), 0);
}

static void case_layernorm_fwd_bf16(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        case_layernorm_fwd(io, d, 1);
        return;
    }
    void *y = bf16_in(d, NULL, R * C);
    RUN(d->be->ops->layernorm_fwd(d->be, BF(y), d->out[1], d->out[2], d->in[0], d->in[1],
                                  d->in[2], R, C, 1e-5f));
    bf16_out(d, d->out[0], y, R * C);
}

static void case_layernorm_bwd_bf16(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        case_layernorm_bwd(io, d, 1);
        return;
    }
    void *dy = bf16_in(d, io->in[0], R * C);
    RUN(d->be->ops->layernorm_bwd(d->be, d->out[0], d->out[1], d->out[2], BF(dy), d->in[1],
                                  d->in[2], d->in[3], d->in[4], R, C));
    CHECK_EQ(d->be->ops->free(d->be, dy), 0);
}

static void case_act_fwd_bf16(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        act_case(io, d, 1, TBI_ACT_GELU, 0);
        return;
    }
    void *x = bf16_in(d, io->in[0], 1000);
    RUN(d->be->ops->act_fwd(d->be, TBI_ACT_GELU, BF(x), BF(x), 1000)); /* in place */
    bf16_out(d, d->out[0], x, 1000);
}

/* in place, as a block's backward runs it: dinp over dout, out over inp */
static void case_act_bwd_bf16(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        act_case(io, d, 1, TBI_ACT_GELU, 1);
        return;
    }
    void *x = bf16_in(d, io->in[0], 1000), *dy = bf16_in(d, io->in[1], 1000);
    RUN(d->be->ops->act_bwd(d->be, TBI_ACT_GELU, BF(dy), BF(x), BF(x), BF(dy), 1000));
    bf16_out(d, d->out[0], dy, 1000);
    bf16_out(d, d->out[1], x, 1000);
}

/* out bf16: a drop path's branch gradient, as a block passes it */
static void case_scale_add_bf16(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        case_scale_add(io, d, 1);
        return;
    }
    void *y = bf16_in(d, NULL, B * 500);
    RUN(d->be->ops->scale_add(d->be, BF(y), d->in[0], d->in[1], d->in[2], B, 500));
    bf16_out(d, d->out[0], y, B * 500);
    RUN(d->be->ops->scale_add(d->be, F(d->out[1]), NULL, d->in[1], d->in[2], B, 500));
}

/* x bf16: a block's branch in bf16 mode, as the block passes it (in place, as the MLP's add
 * is not: out[1] first holds a) */
static void case_residual_add_bf16(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        case_residual_add(io, d, 1);
        return;
    }
    void *x = bf16_in(d, io->in[1], B * 500);
    RUN(d->be->ops->residual_add(d->be, d->out[0], d->in[0], BF(x), d->in[2], B, 500));
    RUN(d->be->ops->copy(d->be, d->out[1], d->in[0], sizeof(float) * B * 500));
    RUN(d->be->ops->residual_add(d->be, d->out[1], d->out[1], BF(x), NULL, B, 500));
    RUN(d->be->ops->free(d->be, x));
}

/* MAE's loss on bf16 predictions (the head's product in bf16 mode). */
static void mse_bf16(struct io *io, struct dev *d, int prepare, int bwd)
{
    if (prepare) {
        mse_case(io, d, 1, bwd);
        return;
    }
    void *pred = bf16_in(d, io->in[0], (size_t)R * C);
    if (bwd)
        RUN(d->be->ops->mse_bwd(d->be, d->out[0], BF(pred), d->in[1], d->in[2], R, C));
    else
        RUN(d->be->ops->mse_fwd(d->be, d->out[0], BF(pred), d->in[1], d->in[2], R, C));
    CHECK_EQ(d->be->ops->free(d->be, pred), 0);
}
static void case_mse_fwd_bf16(struct io *io, struct dev *d, int prepare)
{
    mse_bf16(io, d, prepare, 0);
}
static void case_mse_bwd_bf16(struct io *io, struct dev *d, int prepare)
{
    mse_bf16(io, d, prepare, 1);
}

static void attention_bf16(struct io *io, struct dev *d, int prepare, int bwd)
{
    size_t qkv = (size_t)B * NT * 3 * D, o = (size_t)B * NT * D;
    if (prepare) {
        attention_case(io, d, 1, 0, bwd);
        return;
    }
    void *q = bf16_in(d, io->in[0], qkv), *y = bf16_in(d, NULL, o);
    RUN(d->be->ops->attention_fwd(d->be, BF(y), d->out[1], BF(q), B, NT, NH, HS, 0));
    if (bwd) {
        void *dy = bf16_in(d, io->in[1], o), *dq = bf16_in(d, NULL, qkv);
        RUN(d->be->ops->attention_bwd(d->be, BF(dq), BF(dy), BF(q), BF(y), d->out[1], B, NT, NH,
                                      HS, 0));
        bf16_out(d, d->out[2], dq, qkv);
        CHECK_EQ(d->be->ops->free(d->be, dy), 0);
    }
    bf16_out(d, d->out[0], y, o);
    CHECK_EQ(d->be->ops->free(d->be, q), 0);
}
static void case_attention_fwd_bf16(struct io *io, struct dev *d, int prepare)
{
    attention_bf16(io, d, prepare, 0);
}

/* Heads of 64 in bf16, causal or not: on CUDA the flash kernels' shapes (the cases above take
 * its plain kernels). */
static void attention_bf16_64n(struct io *io, struct dev *d, int prepare, int bwd, int causal,
                               int nb, int nt)
{
    enum { H64 = 64, D64 = NH * H64 };
    size_t qkv = (size_t)nb * nt * 3 * D64, o = (size_t)nb * nt * D64, lse = (size_t)nb * NH * nt;
    if (prepare) {
        add_in(io, qkv, 1);
        add_in(io, o, 1);
        add_out(io, o), add_out(io, lse);
        if (bwd)
            add_out(io, qkv);
        return;
    }
    void *q = bf16_in(d, io->in[0], qkv), *y = bf16_in(d, NULL, o);
    RUN(d->be->ops->attention_fwd(d->be, BF(y), d->out[1], BF(q), nb, nt, NH, H64, causal));
    if (bwd) {
        void *dy = bf16_in(d, io->in[1], o), *dq = bf16_in(d, NULL, qkv);
        RUN(d->be->ops->attention_bwd(d->be, BF(dq), BF(dy), BF(q), BF(y), d->out[1], nb, nt, NH,
                                      H64, causal));
        bf16_out(d, d->out[2], dq, qkv);
        CHECK_EQ(d->be->ops->free(d->be, dy), 0);
    }
    bf16_out(d, d->out[0], y, o);
    CHECK_EQ(d->be->ops->free(d->be, q), 0);
}
/* NT tokens: one key tile of the flash kernels; NT3: three (64, 64 and a tail of 2), at
 * B * NH = 2 (the emulated backward takes seconds per batch element). */
enum { NT3 = 130 };
static void case_attention_fwd_bf16_64(struct io *io, struct dev *d, int prepare)
{
    attention_bf16_64n(io, d, prepare, 0, 0, B, NT);
}
static void case_attention_bwd_bf16_64_causal(struct io *io, struct dev *d, int prepare)
{
    attention_bf16_64n(io, d, prepare, 1, 1, B, NT);
}
static void case_attention_fwd_bf16_64_tiles(struct io *io, struct dev *d, int prepare)
{
    attention_bf16_64n(io, d, prepare, 0, 1, 1, NT3);
}
static void case_attention_bwd_bf16_64_tiles(struct io *io, struct dev *d, int prepare)
{
    attention_bf16_64n(io, d, prepare, 1, 0, 1, NT3);
}
static void case_attention_bwd_bf16(struct io *io, struct dev *d, int prepare)
{
    attention_bf16(io, d, prepare, 1);
}

/* The sum of the magnitudes of the terms of each element of a product case's output i (its
 * inputs rounded already): matmul_fwd's out = in0 (M, K) @ in1 (N, K)^T + in2; matmul_bwd's
 * dinp = in0 (M, N) @ in2 (N, K), dw = in0^T @ in1 (M, K), dbias = in0's column sums. */
static double product_mag(const struct io *io, int fwd, int i, size_t e)
{
    const float *a = io->in[0], *b = io->in[fwd || i == 1 ? 1 : 2];
    size_t r = e / (fwd ? N : K), c = e % (fwd ? N : K);
    double mag = 0;
    if (fwd) {
        mag = fabs(io->in[2][c]);
        for (int k = 0; k < K; k++)
            mag += fabs((double)a[r * K + k] * b[c * K + k]);
    } else if (i == 0) {
        for (int n = 0; n < N; n++)
            mag += fabs((double)a[r * N + n] * b[n * K + c]);
    } else if (i == 1) {
        for (int m = 0; m < M; m++)
            mag += fabs((double)a[m * N + r] * b[m * K + c]);
    } else {
        for (int m = 0; m < M; m++)
            mag += fabs(a[m * N + e]);
    }
    return mag;
}

/* What bf16 storage means, on the CPU backend: each bf16 case equals its f32 case run on the
 * rounded operands with the results rounded (the products round every operand and result;
 * the other ops the bf16 tensors alone), to the bit. in and out: the rounded ones, as bits.
 * The attention backward reads the forward's stored (rounded) output, which its f32 case
 * does not round: it is checked by parity alone, and the kernels' bf16 to the bit in
 * test_ops. The products on avx512_bf16 (gemm_bf16.c; prod: 1 fwd, 2 bwd) sum pairs of k
 * in another order: there each value is within two f32 sums' bound, (L + 2) 2^-23 times its
 * terms' magnitudes, plus one bf16 step (the two sums rounded on either side of a boundary)
 * of the f32 op's; the bits that agree are counted. */
static void test_bf16_storage(void)
{
    static const struct {
        case_fn bf16, f32;
        unsigned in, out;
        const char *name;
        int prod;
    } spec[] = {
        {case_matmul_fwd_bf16, case_matmul_fwd, 7, 1, "matmul_fwd in bf16", 1},
        {case_matmul_bwd_bf16, case_matmul_bwd, 7, 7, "matmul_bwd in bf16", 2},
        {case_layernorm_fwd_bf16, case_layernorm_fwd, 0, 1, "layernorm_fwd into bf16"},
        {case_layernorm_bwd_bf16, case_layernorm_bwd, 1, 0, "layernorm_bwd from bf16"},
        {case_act_fwd_bf16, case_act_fwd, 1, 1, "act_fwd in bf16, in place"},
        {case_act_bwd_bf16, case_act_bwd, 3, 3, "act_bwd in bf16, in place"},
        {case_attention_fwd_bf16, case_attention_fwd, 1, 1, "attention_fwd in bf16"},
        {case_scale_add_bf16, case_scale_add, 0, 1, "scale_add into bf16"},
        {case_residual_add_bf16, case_residual_add, 2, 0, "residual_add of a bf16 branch"},
        {case_mse_fwd_bf16, case_mse_fwd, 1, 0, "mse_fwd from bf16 predictions"},
        {case_mse_bwd_bf16, case_mse_bwd, 1, 0, "mse_bwd from bf16 predictions"},
    };
    for (size_t k = 0; k < sizeof(spec) / sizeof(spec[0]); k++) {
        tbt_case = spec[k].name;
        struct io io = {0};
        struct dev d;
        float *got[MAX_IO] = {0}, *want[MAX_IO] = {0};
        spec[k].bf16(&io, NULL, 1);
        dev_open(&d, cpu, &io);
        spec[k].bf16(&io, &d, 0);
        dev_close(&d, &io, got);
        for (int i = 0; i < io.n_inputs; i++)
            if (spec[k].in >> i & 1)
                tbi_round_bf16(io.in[i], io.n_in[i]);
        dev_open(&d, cpu, &io);
        spec[k].f32(&io, &d, 0);
        dev_close(&d, &io, want);
        for (int i = 0; i < io.n_outputs; i++) {
            if (spec[k].out >> i & 1)
                tbi_round_bf16(want[i], io.n_out[i]);
            size_t differ = 0, nonzero = 0, far = 0;
            int tol = spec[k].prod && tbi_cpu_avx512_bf16();
            for (size_t e = 0; e < io.n_out[i]; e++) {
                differ += memcmp(&got[i][e], &want[i][e], sizeof(float)) != 0;
                nonzero += want[i][e] != 0;
                if (tol) {
                    int len = spec[k].prod == 1 ? K : i == 0 ? N : M;
                    double bound = 2 * (len + 2) * ldexp(1, -23) *
                                       product_mag(&io, spec[k].prod == 1, i, e) +
                                   ldexp(fmax(fabs(got[i][e]), fabs(want[i][e])), -7);
                    far += !(fabs((double)got[i][e] - want[i][e]) <= bound);
                }
            }
            if (tol)
                fprintf(stderr, "%s, output %d on avx512_bf16: %zu of %zu values as the f32 "
                        "op's, %zu beyond the bound\n", spec[k].name, i, io.n_out[i] - differ,
                        io.n_out[i], far);
            CHECK_MSG((tol ? !far : !differ) && nonzero, "%s, output %d: %zu of %zu values differ "
                      "from the f32 op on rounded operands, rounded (%zu non-zero, %zu beyond "
                      "the bound)", spec[k].name, i, differ, io.n_out[i], nonzero, far);
            free(got[i]), free(want[i]);
        }
        for (int i = 0; i < io.n_inputs; i++)
            free(io.in[i]);
    }
}

/* The memory ops: copies both ways, zero, a device-to-device copy (into its middle). */
static void case_memory(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        add_in(io, 300, 1), add_out(io, 300), add_out(io, 300);
        return;
    }
    tbi_backend *be = d->be;
    RUN(be->ops->copy(be, d->out[0], d->in[0], sizeof(float) * 300));
    RUN(be->ops->zero(be, d->out[0] + 100, sizeof(float) * 50));
    RUN(be->ops->copy(be, d->out[1] + 10, d->out[0], sizeof(float) * 200));
    RUN(be->ops->sync(be));
}

/* A gradient bucket's mean over the processes: in one process, the values themselves. */
static void case_reduce(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        add_in(io, 300, 1), add_out(io, 300);
        return;
    }
    tbi_backend *be = d->be;
    RUN(be->ops->copy(be, d->out[0], d->in[0], sizeof(float) * 300));
    RUN(be->ops->reduce_start(be, d->out[0], 100));
    RUN(be->ops->reduce_start(be, d->out[0] + 100, 200));
    RUN(be->ops->reduce_wait(be));
}

/* bcast from rank 0 (one process: the values themselves; across processes:
 * tests/test_collectives.c). */
static void case_bcast(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        add_in(io, 300, 1), add_out(io, 300);
        return;
    }
    tbi_backend *be = d->be;
    RUN(be->ops->copy(be, d->out[0], d->in[0], sizeof(float) * 300));
    RUN(be->ops->bcast(be, d->out[0], 300, 0));
}

/* mem_avail: some memory, no more than the machine has. */
static void case_mem_avail(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        add_out(io, 1);
        return;
    }
    uint64_t avail = 0;
    RUN(d->be->ops->mem_avail(d->be, &avail));
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    float ok = avail > 0 && avail <= (uint64_t)pages * (uint64_t)size;
    RUN(d->be->ops->to_device(d->be, d->out[0], &ok, sizeof(ok)));
}

/* alloc_zero's memory reads zero, and takes writes as alloc's does. */
static void case_alloc_zero(struct io *io, struct dev *d, int prepare)
{
    if (prepare) {
        add_in(io, 300, 1), add_out(io, 300);
        return;
    }
    tbi_backend *be = d->be;
    float *z = NULL;
    RUN(be->ops->alloc_zero(be, sizeof(float) * 300, (void **)&z));
    RUN(be->ops->copy(be, z + 100, d->in[0], sizeof(float) * 100));
    RUN(be->ops->copy(be, d->out[0], z, sizeof(float) * 300));
    RUN(be->ops->free(be, z));
}

struct op_case {
    const char *name;          /* the op list's name it checks */
    case_fn fn;
    double tol;                /* relative to the largest reference value, for a device */
    const char *why;
};

static const struct op_case cases[] = {
    {"alloc", case_memory, 0, "copies are exact"},
    {"alloc_zero", case_alloc_zero, 0, "copies are exact"},
    {"free", case_memory, 0, "copies are exact"},
    {"zero", case_memory, 0, "copies are exact"},
    {"to_device", case_memory, 0, "copies are exact"},
    {"to_host", case_memory, 0, "copies are exact"},
    {"copy", case_memory, 0, "copies are exact"},
    {"sync", case_memory, 0, "copies are exact"},
    {"mem_avail", case_mem_avail, 0, "a yes or no"},
    {"reduce_start", case_reduce, 0, "one process: the values themselves"},
    {"reduce_wait", case_reduce, 0, "one process: the values themselves"},
    {"bcast", case_bcast, 0, "one process: the values themselves"},
    {"matmul_fwd", case_matmul_fwd, 1e-5, "float sums over K in another order"},
    {"matmul_bwd", case_matmul_bwd, 1e-5, "float sums over M or N in another order"},
    {"matmul_fwd", case_matmul_fwd_bf16, 1e-2, "bf16 results: a sum's order may move one bit"},
    {"matmul_bwd", case_matmul_bwd_bf16, 1e-2, "bf16 results: a sum's order may move one bit"},
    {"matmul_fwd", case_matmul_fwd_bf16_f32, 1e-2, "bf16 results: a sum's order may move one bit"},
    {"matmul_bwd", case_matmul_bwd_bf16_f32, 1e-2, "bf16 results: a sum's order may move one bit"},
    {"layernorm_fwd", case_layernorm_fwd_bf16, 1e-2, "bf16 results: one bit either way"},
    {"layernorm_bwd", case_layernorm_bwd_bf16, 1e-5, "row and column sums in another order"},
    {"act_fwd", case_act_fwd_bf16, 1e-2, "bf16 results: one bit either way"},
    {"act_bwd", case_act_bwd_bf16, 1e-2, "bf16 results: one bit either way"},
    {"attention_fwd", case_attention_fwd_bf16, 1e-2, "bf16 results: one bit either way"},
    {"attention_bwd", case_attention_bwd_bf16, 1e-2, "bf16 results: one bit either way"},
    {"attention_fwd", case_attention_fwd_bf16_64, 1e-2, "bf16 results; CUDA's flash kernels "
                                                        "also round the probabilities to bf16"},
    {"attention_bwd", case_attention_bwd_bf16_64_causal, 1e-2, "bf16 results; CUDA's flash "
                                                               "kernels round P and dS to bf16"},
    {"attention_fwd", case_attention_fwd_bf16_64_tiles, 1e-2, "bf16 results; CUDA's flash "
                                                              "kernels round P to bf16"},
    {"attention_bwd", case_attention_bwd_bf16_64_tiles, 1e-2, "bf16 results; CUDA's flash "
                                                              "kernels round P and dS to bf16"},
    {"layernorm_fwd", case_layernorm_fwd, 1e-5, "the mean and variance summed in another order"},
    {"layernorm_bwd", case_layernorm_bwd, 1e-5, "row and column sums in another order"},
    {"act_fwd", case_act_fwd, 1e-6, "erfc and exp approximated differently"},
    {"act_fwd", case_act_fwd_quick, 1e-6, "exp approximated differently"},
    {"act_bwd", case_act_bwd, 1e-6, "erfc and exp approximated differently"},
    {"act_bwd", case_act_bwd_quick, 1e-6, "exp approximated differently"},
    {"add", case_add, 0, "one rounding either way"},
    {"attention_fwd", case_attention_fwd, 1e-5, "online softmax tiles of other sizes"},
    {"attention_fwd", case_attention_fwd_causal, 1e-5, "online softmax tiles of other sizes"},
    {"attention_bwd", case_attention_bwd, 1e-4, "probabilities recomputed, sums over keys"},
    {"attention_bwd", case_attention_bwd_causal, 1e-4, "probabilities recomputed, sums over keys"},
    {"xent_fwd", case_xent_fwd, 1e-6, "the rows' losses summed in another order"},
    {"xent_bwd", case_xent_bwd, 1e-6, "the rows' losses summed in another order"},
    {"xent_soft_fwd", case_xent_soft_fwd, 1e-6, "the rows' losses summed in another order"},
    {"xent_soft_bwd", case_xent_soft_bwd, 1e-6, "the rows' losses summed in another order"},
    {"mix_clips", case_mix_clips, 1e-7, "a fused multiply-add may round once"},
    {"erase_boxes", case_erase_boxes, 1e-6, "normals from another log and cosine"},
    {"normalize", case_normalize, 1e-7, "a multiply by 1/std instead of a division"},
    {"patchify", case_patchify, 0, "a gather: exact"},
    {"tokens_fwd", case_tokens_fwd, 0, "one add per element"},
    {"tokens_fwd", case_tokens_fwd_kept, 0, "one add per element"},
    {"tokens_bwd", case_tokens_bwd, 1e-6, "sums over the batch in another order"},
    {"tokens_bwd", case_tokens_bwd_kept, 1e-6, "sums over the batch in another order"},
    {"gather_rows", case_gather_rows, 0, "a gather: exact"},
    {"scatter_rows", case_scatter_rows, 0, "a scatter: exact"},
    {"scale_add", case_scale_add, 0, "one multiply and add"},
    {"scale_add", case_scale_add_bf16, 1e-2, "bf16 results: one bit either way"},
    {"residual_add", case_residual_add, 0, "one multiply and add, or one add"},
    {"residual_add", case_residual_add_bf16, 0, "bf16 widens exactly: one multiply and add"},
    {"mse_fwd", case_mse_fwd_bf16, 1e-6, "bf16 predictions: double sums in another order"},
    {"mse_bwd", case_mse_bwd_bf16, 1e-6, "bf16 predictions: the weight sum in another order"},
    {"tokens_fill_fwd", case_tokens_fill_fwd, 0, "one add per element"},
    {"tokens_fill_bwd", case_tokens_fill_bwd, 1e-6, "sums over the batch in another order"},
    {"patch_target", case_patch_target, 1e-5, "the tube's mean and std summed in another order"},
    {"mse_fwd", case_mse_fwd, 1e-6, "double sums in another order"},
    {"mse_bwd", case_mse_bwd, 1e-6, "the weight sum in another order"},
    {"pos_tile_fwd", case_pos_tile_fwd, 0, "one add per element"},
    {"pos_tile_bwd", case_pos_tile_bwd, 1e-6, "sums over frames and positions in another order"},
    {"embed_bwd", case_embed_bwd, 1e-6, "sums over repeated ids in another order"},
    {"transpose", case_transpose, 0, "a copy: exact"},
    {"pool_fwd", case_pool_fwd, 1e-6, "the mean summed in another order"},
    {"pool_bwd", case_pool_bwd, 0, "a copy, or one multiply"},
    {"adamw", case_adamw, 1e-6, "sqrt and division rounded differently"},
    {"lion", case_lion, 1e-6, "a sign flips only where the interpolation rounds to zero"},
    {"sgd", case_sgd, 1e-6, "a fused multiply-add may round once"},
    {"sum_squares_acc", case_sum_squares_acc, 1e-6, "double sums in another order"},
    {"step_loss", case_step_loss, 0, "one division and add"},
    {"step_check", case_step_check, 1e-7, "a square root and a division"},
    {"adamw_checked", case_adamw_checked, 1e-6, "sqrt and division rounded differently"},
    {"lion_checked", case_lion_checked, 1e-6, "a sign flips only where the interpolation "
                                              "rounds to zero"},
    {"sgd_checked", case_sgd_checked, 1e-6, "a fused multiply-add may round once"},
    {"infonce_fwd", case_infonce_fwd, 1e-6, "double sums and exp in another order"},
    {"infonce_bwd", case_infonce_bwd, 1e-6, "double sums and exp in another order"},
    {"gather", case_gather, 0, "copies are exact"},
    {"logit_scale", case_logit_scale, 1e-12, "one exp, one product"},
    {"logit_scale_bwd", case_logit_scale_bwd, 1e-12, "one exp, one product"},
};
#define N_CASES ((int)(sizeof(cases) / sizeof(cases[0])))

/* Run case c on be and on the reference; compare every output. */
static void parity(const struct op_case *c, tbi_backend *be, tbi_backend *ref, int exact)
{
    struct io io = {0};
    c->fn(&io, NULL, 1);
    float *got[MAX_IO] = {0}, *want[MAX_IO] = {0};
    struct dev d;
    dev_open(&d, ref, &io);
    c->fn(&io, &d, 0);
    dev_close(&d, &io, want);
    dev_open(&d, be, &io);
    c->fn(&io, &d, 0);
    dev_close(&d, &io, got);
    double tol = exact ? 0 : c->tol, worst = 0;
    for (int i = 0; i < io.n_outputs; i++) {
        double mx = 0, diff = 0;
        for (size_t k = 0; k < io.n_out[i]; k++) {
            mx = fmax(mx, fabs(want[i][k]));
            double e = fabs((double)got[i][k] - want[i][k]);
            diff = e > diff || isnan(e) ? e : diff;
        }
        double rel = diff / (mx + 1e-30);
        worst = rel > worst || isnan(rel) ? rel : worst;
        CHECK_MSG(rel <= tol && mx > 0, "%s on %s, output %d: %.3g relative to the reference (%s "
                  "%.0e: %s; largest reference value %.3g)", c->name, be->name, i, rel,
                  exact ? "exact: it runs the reference kernels, tolerance" : "tolerance", tol,
                  exact ? "none" : c->why, mx);
        free(got[i]);
        free(want[i]);
    }
    for (int i = 0; i < io.n_inputs; i++)
        free(io.in[i]);
    if (io.bytes)
        free(io.bytes);
    fprintf(stderr, "%-14s %-12s worst %.2e\n", c->name, be->name, worst);
}

/* Whether be has op name (its own table: tbi_backend_supports); an op it leaves out is
 * listed, not run. The CPU backend, the reference, has every op (test_supports). */
static int has_op(const tbi_backend *be, const char *name)
{
    static const char *const ops[] = {
#define TBI_OP_NAME(name, params, args) #name,
        TBI_OP_LIST(TBI_OP_NAME)
#undef TBI_OP_NAME
    };
    for (int i = 0; i < TBI_OP_N; i++)
        if (!strcmp(ops[i], name)) {
            if (tbi_backend_supports(be, i, TB_DTYPE_F32))
                return 1;
            fprintf(stderr, "%-14s %-12s left out by the backend: no parity case run\n", name,
                    be->name);
            return 0;
        }
    return 1; /* a case of no op of the list (test_coverage's concern) */
}

/* Every op of the list has a case (a new op cannot go unchecked). */
static void test_coverage(void)
{
    tbt_case = "every op has a parity case";
    static const char *const ops[] = {
#define TBI_OP_NAME(name, params, args) #name,
        TBI_OP_LIST(TBI_OP_NAME)
#undef TBI_OP_NAME
    };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        int found = 0;
        for (int k = 0; k < N_CASES; k++)
            found |= !strcmp(cases[k].name, ops[i]);
        CHECK_MSG(found, "op '%s' has no parity case in tests/test_backend.c", ops[i]);
    }
}

/* Reading the guarded backend's memory outside an op: the process dies of SIGSEGV. */
static void test_guard(void)
{
    tbt_case = "the guarded backend guards";
    tbi_backend *be = NULL;
    CHECK_EQ(tbi_backend_open(&be, "cpu-guarded"), 0);
    if (!be)
        return;
    float *p = NULL, one = 1, back = 0;
    CHECK_EQ(be->ops->alloc(be, 4096, (void **)&p), 0);
    CHECK_EQ(be->ops->to_device(be, p, &one, sizeof(one)), 0);
    CHECK_EQ(be->ops->to_host(be, &back, p, sizeof(back)), 0);
    CHECK(back == 1);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* The default action, not a sanitizer's handler (which would abort instead). */
        struct sigaction sa = {.sa_handler = SIG_DFL};
        sigaction(SIGSEGV, &sa, NULL);
        volatile float v = p[0]; /* outside any op */
        (void)v;
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "a read outside the ops did not "
              "fault (status %d)", st);
    CHECK_EQ(be->ops->free(be, p), 0);
    tbi_backend_close(&be);
    CHECK(be == NULL);
    tbt_case = "an unknown backend";
    CHECK_EQ(tbi_backend_open(&be, "tpu"), TB_EUNSUPPORTED);
    CHECK_STR_HAS(tb_errmsg(), "no backend 'tpu'");
}

/* The CPU reference of normalize against its formula: out[b][c][t][y][x] = (in[b][t][y][x'][c]
 * - mean[c]) / std[c], x' mirrored where flip[b]. */

static void test_normalize(void)
{
    tbt_case = "normalize: the formula";
    enum { NB = 2, NT2 = 3, NH2 = 5, NW2 = 7 };
    uint8_t in[NB * NT2 * NH2 * NW2 * 3], flip[NB] = {0, 1};
    float out[NB * 3 * NT2 * NH2 * NW2];
    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (uint8_t)tb_rng_below(&rng, 256);
    CHECK_EQ(cpu->ops->normalize(cpu, out, in, flip, NB, NT2, NH2, NW2, tb_mean_openai,
                                 tb_std_openai), 0);
    double worst = 0;
    for (int b = 0; b < NB; b++)
        for (int c = 0; c < 3; c++)
            for (int t = 0; t < NT2; t++)
                for (int y = 0; y < NH2; y++)
                    for (int x = 0; x < NW2; x++) {
                        int xs = flip[b] ? NW2 - 1 - x : x;
                        double want = ((double)in[(((b * NT2 + t) * NH2 + y) * NW2 + xs) * 3 + c] -
                                       tb_mean_openai[c]) / tb_std_openai[c];
                        double got = out[(((b * 3 + c) * NT2 + t) * NH2 + y) * NW2 + x];
                        worst = fmax(worst, fabs(got - want));
                    }
    CHECK_MSG(worst < 1e-5, "worst difference %g", worst);
}

/* ---- finite differences of the token ops, on the CPU reference ---------------------------- */

/* L = sum(out * w) of tokens_fwd or pool_fwd at inputs x. */
static const int32_t *fd_idx; /* the kept tokens of the tokens case, or NULL */

static double token_loss(int which, const float *tokens, const float *cls, const float *pos,
                         const float *w)
{
    int n_tok = fd_idx ? NK : NP;
    size_t n = (size_t)B * (NC + n_tok) * D;
    float *out = malloc(sizeof(float) * n);
    if (which == 0)
        CHECK_EQ(cpu->ops->tokens_fwd(cpu, out, tokens, cls, pos, fd_idx, B, n_tok, NC, D), 0);
    else
        CHECK_EQ(cpu->ops->pool_fwd(cpu, which == 1 ? TBI_POOL_FIRST : TBI_POOL_MEAN, out, tokens,
                                    B, NC + NP, D), 0);
    size_t m = which == 0 ? n : (size_t)B * D;
    double s = 0;
    for (size_t i = 0; i < m; i++)
        s += (double)out[i] * w[i];
    free(out);
    return s;
}

static void fd(const char *what, int which, float *x, size_t n, const float *grad, float *tokens,
               float *cls, float *pos, const float *w)
{
    double worst = 0;
    for (int k = 0; k < 16; k++) {
        size_t i = (size_t)tb_rng_below(&rng, n);
        float saved = x[i], h = 1e-2f;
        x[i] = saved + h;
        double lp = token_loss(which, tokens, cls, pos, w);
        x[i] = saved - h;
        double lm = token_loss(which, tokens, cls, pos, w);
        x[i] = saved;
        double num = (lp - lm) / (2.0 * h), err = fabs(num - grad[i]) / (fabs(num) + 1e-2);
        worst = err > worst ? err : worst;
        CHECK_MSG(err < 1e-3, "%s: d/dx[%zu] analytic %.6g, numeric %.6g", what, i, grad[i], num);
    }
    fprintf(stderr, "%-22s worst relative error %.2e\n", what, worst);
}

static void test_token_grads(void)
{
    tbt_case = "token ops: finite differences";
    size_t nx = (size_t)B * (NC + NP) * D;
    float *tokens = randn((size_t)B * NP * D, 1), *cls = randn(NC * D, 1);
    float *pos = randn((NC + NP) * D, 1), *w = randn(nx, 1);
    float *dt = malloc(sizeof(float) * nx), *dc = malloc(sizeof(float) * D);
    float *dp = malloc(sizeof(float) * nx);
    CHECK_EQ(cpu->ops->tokens_bwd(cpu, dt, dc, dp, w, NULL, B, NP, NC, NC + NP, D), 0);
    fd("tokens d tokens", 0, tokens, (size_t)B * NP * D, dt, tokens, cls, pos, w);
    fd("tokens d cls", 0, cls, NC * D, dc, tokens, cls, pos, w);
    fd("tokens d pos", 0, pos, (NC + NP) * D, dp, tokens, cls, pos, w);
    /* A subset of the positions: rows nobody kept get exactly 0. */
    fd_idx = kept;
    CHECK_EQ(cpu->ops->tokens_bwd(cpu, dt, dc, dp, w, kept, B, NK, NC, NC + NP, D), 0);
    fd("kept tokens d tokens", 0, tokens, (size_t)B * NK * D, dt, tokens, cls, pos, w);
    fd("kept tokens d pos", 0, pos, (NC + NP) * D, dp, tokens, cls, pos, w);
    int unused_zero = 1, n_unused = 0;
    for (int t = 0; t < NP; t++) {
        int used = 0;
        for (int k = 0; k < B * NK; k++)
            used |= kept[k] == t;
        for (int q = 0; !used && q < D; q++)
            unused_zero &= dp[(size_t)(NC + t) * D + q] == 0.0f;
        n_unused += !used;
    }
    CHECK(unused_zero && n_unused > 0);
    fd_idx = NULL;
    /* pooling over the (B, NC + NP, D) tokens; its gradient is w's first B * D */
    float *x = randn(nx, 1);
    for (int pool = 1; pool <= 2; pool++) {
        CHECK_EQ(cpu->ops->pool_bwd(cpu, pool == 1 ? TBI_POOL_FIRST : TBI_POOL_MEAN, dt, w, B,
                                    NC + NP, D), 0);
        fd(pool == 1 ? "pool first d x" : "pool mean d x", pool, x, nx, dt, x, NULL, NULL, w);
    }
    free(tokens), free(cls), free(pos), free(w), free(dt), free(dc), free(dp), free(x);
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* The linear ops' backwards are their adjoints: <fwd(x), w> = <x, bwd(w)>; transpose moves
 * every element where it belongs. */
static void test_adjoints(void)
{
    tbt_case = "pos_tile, embed_bwd, transpose: adjoints";
    size_t np = (size_t)(1 + PT * PS) * D;
    float *sp = randn((1 + PS) * D, 1), *te = randn(PT * D, 1), *w = randn(np, 1);
    float *pos = malloc(sizeof(float) * np), *dsp = malloc(sizeof(float) * (1 + PS) * D);
    float *dte = malloc(sizeof(float) * PT * D);
    CHECK_EQ(cpu->ops->pos_tile_fwd(cpu, pos, sp, te, PT, PS, D), 0);
    CHECK_EQ(cpu->ops->pos_tile_bwd(cpu, dsp, dte, w, PT, PS, D), 0);
    double lhs = dot(pos, w, np), rhs = dot(sp, dsp, (1 + PS) * D) + dot(te, dte, PT * D);
    CHECK_MSG(fabs(lhs - rhs) <= 1e-5 * (fabs(lhs) + 1), "pos_tile: %.9g vs %.9g", lhs, rhs);

    int32_t ids[ER];
    for (int r = 0; r < ER; r++)
        ids[r] = (int32_t)tb_rng_below(&rng, EV);
    float *table = randn((size_t)EV * D, 1), *rows = malloc(sizeof(float) * ER * D);
    float *wr = randn((size_t)ER * D, 1), *dtab = malloc(sizeof(float) * EV * D);
    CHECK_EQ(cpu->ops->gather_rows(cpu, rows, table, ids, 1, EV, ER, D), 0);
    CHECK_EQ(cpu->ops->embed_bwd(cpu, dtab, wr, ids, ER, EV, D), 0);
    lhs = dot(rows, wr, (size_t)ER * D), rhs = dot(table, dtab, (size_t)EV * D);
    CHECK_MSG(fabs(lhs - rhs) <= 1e-5 * (fabs(lhs) + 1), "embed: %.9g vs %.9g", lhs, rhs);
    ids[3] = EV;
    CHECK(cpu->ops->embed_bwd(cpu, dtab, wr, ids, ER, EV, D) < 0);
    CHECK_STR_HAS(tb_errmsg(), "id 11");

    float *src = randn((size_t)M * 70, 1), *tr = malloc(sizeof(float) * M * 70);
    CHECK_EQ(cpu->ops->transpose(cpu, tr, src, M, 70), 0);
    int moved = 1;
    for (int r = 0; r < M; r++)
        for (int c = 0; c < 70; c++)
            moved &= tr[c * M + r] == src[r * 70 + c];
    CHECK(moved);
    free(sp), free(te), free(w), free(pos), free(dsp), free(dte), free(table), free(rows);
    free(wr), free(dtab), free(src), free(tr);
}

/* Copies to the device past the CUDA backend's pinned ring (two 16 MiB slots): a 40 MiB copy
 * takes three pieces, the third reusing the first slot, then the host overwrites its source
 * and copies again before anything waits; both arrive whole. On cuda-emu a copy from pinned
 * memory is read when the stream reaches it, so a slot written again before its copy ran
 * would show here. Every backend runs it. */
static void test_staged_copy(tbi_backend *be)
{
    tbt_case = "large copies to the device";
    const size_t n = (size_t)10 << 20; /* floats: 40 MiB */
    float *h = malloc(sizeof(float) * n), *back = malloc(sizeof(float) * n);
    float *d1 = NULL, *d2 = NULL;
    if (!h || !back || be->ops->alloc(be, sizeof(float) * n, (void **)&d1) < 0 ||
        be->ops->alloc(be, sizeof(float) * n, (void **)&d2) < 0) {
        TBT_FAIL("%s: memory for the copy", be->name);
        goto end;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = (float)i;
    CHECK_EQ(be->ops->to_device(be, d1, h, sizeof(float) * n), 0);
    for (size_t i = 0; i < n; i++)
        h[i] = -(float)i;
    CHECK_EQ(be->ops->to_device(be, d2, h, sizeof(float) * n), 0);
    size_t bad = 0;
    CHECK_EQ(be->ops->to_host(be, back, d1, sizeof(float) * n), 0);
    for (size_t i = 0; i < n; i++)
        bad += back[i] != (float)i;
    CHECK_EQ(be->ops->to_host(be, back, d2, sizeof(float) * n), 0);
    for (size_t i = 0; i < n; i++)
        bad += back[i] != -(float)i;
    CHECK_MSG(bad == 0, "%s: %zu of %zu floats copied wrong", be->name, bad, 2 * n);
end:
    if (d1)
        be->ops->free(be, d1);
    if (d2)
        be->ops->free(be, d2);
    free(h);
    free(back);
}

/* A backend opened and closed 100 times in one process (Python, test loops) gives back what
 * it takes (streams, events, cuBLASLt's handle) and still computes after. */
static void test_reopen(const char *name)
{
    static char what[64];
    snprintf(what, sizeof(what), "%s opened and closed 100 times", name);
    tbt_case = what;
    for (int i = 0; i < 100; i++) {
        tbi_backend *be = NULL;
        const int rc = tbi_backend_open(&be, name);
        CHECK_MSG(rc == 0 && be, "open %d of %s: %s", i + 1, name, tb_errmsg());
        if (!be)
            return;
        for (int k = 0; i == 99 && k < N_CASES; k++)
            if (cases[k].fn == case_matmul_fwd_bf16_f32) {
                tbt_case = "a bf16 product after 99 closes";
                parity(&cases[k], be, cpu, !strncmp(be->name, "cpu", 3));
            }
        tbi_backend_close(&be);
        CHECK(be == NULL);
    }
}

/* The registry's query (src/tensor/registry.c) agrees with be's table: an op it has, for f32,
 * and for bf16 exactly where the op's signature takes a tbi_t (TBI_OP_BF16_LIST is checked
 * against the list's own parameters); nothing out of range. Returns how many ops be has. */
static int supports_agrees(const tbi_backend *be)
{
    int n = 0;
#define TBT_SUPPORTS(op_, params, args)                                                           \
    do {                                                                                           \
        const struct tbi_ops *own_ = be->own ? be->own : be->ops; /* before the registry's fill */ \
        int has = own_->op_ != NULL, typed = strstr(#params, "tbi_t ") != NULL;                    \
        int bf16 = be->dtypes ? has && ((be->dtypes[TBI_OP_##op_] >> TB_DTYPE_BF16) & 1)          \
                              : has && typed;                                                      \
        n += has;                                                                                  \
        CHECK_MSG(tbi_backend_supports(be, TBI_OP_##op_, TB_DTYPE_F32) == has,                    \
                  "%s %s f32: the query says %d, the table %d", be->name, #op_,                   \
                  tbi_backend_supports(be, TBI_OP_##op_, TB_DTYPE_F32), has);                     \
        CHECK_MSG(tbi_backend_supports(be, TBI_OP_##op_, TB_DTYPE_BF16) == bf16,                  \
                  "%s %s bf16: the query says %d, want %d (takes tbi_t: %d)", be->name, #op_,     \
                  tbi_backend_supports(be, TBI_OP_##op_, TB_DTYPE_BF16), bf16, typed);            \
    } while (0);
    TBI_OP_LIST(TBT_SUPPORTS)
#undef TBT_SUPPORTS
    CHECK(!tbi_backend_supports(be, -1, TB_DTYPE_F32));
    CHECK(!tbi_backend_supports(be, TBI_OP_N, TB_DTYPE_F32));
    CHECK(!tbi_backend_supports(be, TBI_OP_matmul_fwd, 7));
    return n;
}

/* Every backend of this build: the query agrees with its own table, and the CPU's tables are
 * whole (another backend's count is listed: it may leave ops out). A backend with an op left
 * out, or a dtype it refuses, makes the query say no for that op alone; the guarded backend keeps the CPU's table's
 * holes. Not vacuous: the left-out op is one the full table has. */
static void test_supports(void)
{
    tbt_case = "the registry's query";
    for (int b = 0; tbi_backend_names[b]; b++) {
        tbi_backend *be = NULL;
        if (tbi_backend_open(&be, tbi_backend_names[b]) < 0) {
            fprintf(stderr, "skip: the query on %s: %s\n", tbi_backend_names[b], tb_errmsg());
            continue;
        }
        int n = supports_agrees(be);
        if (!strncmp(be->name, "cpu", 3)) /* the reference has every op */
            CHECK_MSG(n == TBI_OP_N, "%s has %d of the %d ops", be->name, n, (int)TBI_OP_N);
        else
            fprintf(stderr, "%s has %d of the %d ops\n", be->name, n, (int)TBI_OP_N);
        tbi_backend_close(&be);
    }
    struct tbi_ops holed = *cpu->ops;
    holed.attention_bwd = NULL;
    tbi_backend part = *cpu;
    part.ops = &holed;
    part.own = NULL; /* a table as a backend gives it, before the registry fills it */
    CHECK(tbi_backend_supports(cpu, TBI_OP_attention_bwd, TB_DTYPE_BF16));
    CHECK(!tbi_backend_supports(&part, TBI_OP_attention_bwd, TB_DTYPE_F32));
    CHECK(!tbi_backend_supports(&part, TBI_OP_attention_bwd, TB_DTYPE_BF16));
    CHECK(tbi_backend_supports(&part, TBI_OP_attention_fwd, TB_DTYPE_BF16));
    CHECK_EQ(supports_agrees(&part), TBI_OP_N - 1);
    /* a model's blocks ask before they plan: refused, naming the op */
    struct tbi_block_cfg bc = {8, 2, 32, 1e-6f, TBI_ACT_GELU}; /* D, NH, F (a macro here) */
    bc.dt = TB_DTYPE_F32;
    CHECK_EQ(tbi_block_supported(cpu, &bc), 0);
    CHECK_EQ(tbi_block_supported(&part, &bc), TB_EUNSUPPORTED);
    CHECK_STR_HAS(tb_errmsg(), "has no attention_bwd op for f32 tensors");
    /* made whole as the registry makes every backend: the hole fails, naming itself; the
     * query still says no; the ops it has are the backend's own */
    tbi_backend whole = part;
    tbi_backend_fill(&whole);
    CHECK(!tbi_backend_supports(&whole, TBI_OP_attention_bwd, TB_DTYPE_F32));
    CHECK(whole.ops->attention_fwd == cpu->ops->attention_fwd);
    CHECK_EQ(whole.ops->attention_bwd(&whole, tbi_f32(NULL), tbi_f32(NULL), tbi_f32(NULL),
                                      tbi_f32(NULL), NULL, 1, 1, 1, 1, 0),
             TB_EUNSUPPORTED);
    CHECK_STR_HAS(tb_errmsg(), "has no attention_bwd op");
    unsigned char dtypes[TBI_OP_N];
    memset(dtypes, 1 << TB_DTYPE_F32, sizeof(dtypes));
    part.ops = cpu->ops;
    part.dtypes = dtypes;
    CHECK(!tbi_backend_supports(&part, TBI_OP_matmul_fwd, TB_DTYPE_BF16));
    CHECK(tbi_backend_supports(&part, TBI_OP_matmul_fwd, TB_DTYPE_F32));
    CHECK_EQ(supports_agrees(&part), TBI_OP_N);
    CHECK(tbi_backend_supports(NULL, TBI_OP_alloc, TB_DTYPE_F32) == 0);
}

/* The open's options: the library's default leaves the CPU's team alone (share off), an
 * explicit option and the process default (tb_backend_set_share, the tubelet program's) turn
 * it on. */
static void test_open_opts(void)
{
    tbt_case = "the open's options";
    tbi_backend *be = NULL;
    CHECK_EQ(tbi_backend_open(&be, "cpu"), 0);
    CHECK(be && be->share == 0);
    tbi_backend_close(&be);
    struct tbi_backend_opts on = {.share = 1};
    CHECK_EQ(tbi_backend_open_opts(&be, "", &on), 0);
    CHECK(be && be->share == 1 && !strcmp(be->name, "cpu"));
    tbi_backend_close(&be);
    tb_backend_set_share(1);
    CHECK_EQ(tbi_backend_open(&be, "cpu-guarded"), 0);
    CHECK(be && be->share == 1 && !strcmp(be->name, "cpu-guarded"));
    tbi_backend_close(&be);
    tb_backend_set_share(0);
    CHECK_EQ(tbi_backend_open_opts(&be, "no-such", &on), TB_EUNSUPPORTED);
    CHECK(be == NULL);
    CHECK_STR_HAS(tb_errmsg(), "no-such");
}

/* The CUDA backend's cuBLASLt loader (dlopen; nvcc builds only), which runs here although no
 * GPU does: a library named that cannot be loaded is an error naming it (no other is taken
 * instead); a name of CUDA 12's (here a link to what this machine has) is taken; the default
 * search finds this machine's. Its cuBLASLt 12 or later, or the test says none is here. */
extern long tbi_cuda_lt_version(void) __attribute__((weak));

static void test_lt_loader(void)
{
    if (!tbi_cuda_lt_version) {
        fprintf(stderr, "skip: the cuBLASLt loader: no CUDA backend in this build\n");
        return;
    }
    tbt_case = "cuBLASLt loader: a named library missing";
    setenv("TUBELET_CUBLASLT", "/nonexistent/libcublasLt.so.12", 1);
    CHECK_EQ(tbi_cuda_lt_version(), TB_EUNSUPPORTED);
    CHECK_STR_HAS(tb_errmsg(), "cuBLASLt not found (/nonexistent/libcublasLt.so.12: ");
    unsetenv("TUBELET_CUBLASLT");
    void *found = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!found)
        found = dlopen("libcublasLt.so.12", RTLD_NOW | RTLD_LOCAL);
    void *sym = found ? dlsym(found, "cublasLtGetVersion") : NULL;
    Dl_info info;
    if (!sym || !dladdr(sym, &info) || !info.dli_fname) {
        fprintf(stderr, "skip: the cuBLASLt loader: no libcublasLt.so.13 or .so.12 here\n");
        return;
    }
    tbt_case = "cuBLASLt loader: a CUDA 12 name";
    char link[4200], target[4200];
    snprintf(link, sizeof(link), "%s", tbt_path("libcublasLt.so.12"));
    snprintf(target, sizeof(target), "%s", info.dli_fname);
    CHECK_EQ(symlink(target, link), 0);
    setenv("TUBELET_CUBLASLT", link, 1);
    const long v = tbi_cuda_lt_version();
    unsetenv("TUBELET_CUBLASLT");
    CHECK_MSG(v >= 120000, "cuBLASLt through %s: %ld (%s)", link, v, tb_errmsg());
    fprintf(stderr, "cuBLASLt loader: %s -> %s, version %ld\n", link, target, v);
    dlclose(found);
}

int main(void)
{
    tbt_begin("backend");
    tb_rng_init_for(&rng, 11, TB_RNG_TEST, 0, 0);
    make_kept();
    make_dec_order();
    CHECK_EQ(tbi_backend_open(&cpu, "cpu"), 0);
    if (!cpu)
        TBT_EXIT();
    test_coverage();
    test_supports();
    test_open_opts();
    test_lt_loader();
    test_guard();
    test_normalize();
    test_token_grads();
    test_adjoints();
    test_bf16_storage();
    int others = 0;
    for (int b = 0; tbi_backend_names[b]; b++) {
        if (!strcmp(tbi_backend_names[b], "cpu"))
            continue;
        tbi_backend *be = NULL;
        if (tbi_backend_open(&be, tbi_backend_names[b]) < 0) {
            fprintf(stderr, "skip: backend %s: %s\n", tbi_backend_names[b], tb_errmsg());
            continue;
        }
        others++;
        int exact = !strncmp(be->name, "cpu", 3);
        for (int k = 0; k < N_CASES; k++) {
            tbt_case = cases[k].name;
            if (has_op(be, cases[k].name))
                parity(&cases[k], be, cpu, exact);
        }
        test_staged_copy(be);
        tbi_backend_close(&be);
        test_reopen(tbi_backend_names[b]);
    }
    tbi_backend_close(&cpu);
    if (!others && !tbt_failures) {
        fprintf(stderr, "skip: no backend but the reference in this build\n");
        return TBT_SKIP;
    }
    TBT_EXIT();
}
