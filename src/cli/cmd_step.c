/* src/cli/cmd_step.c - `tubelet step`: training steps of a video ViT (--task cls), of
 * VideoMAE pretraining (--task mae) or of the video-text dual encoder (--task clip) on given
 * weights and a given batch, writing the losses, the first step's logits, predictions or
 * features and gradients, and the final weights - for checking against PyTorch
 * (tests/ref/vit_ref.py, mae_ref.py, clip_ref.py) and for debugging a model.
 * Tests: tests/test_vit.c, tests/test_mae.c, tests/test_clip.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tubelet/model.h"
#include "tubelet/safetensors.h"
#include "tubelet/train.h"
#include "train/settings.h"

struct step_config {
    int dim, depth, heads, patch, tubelet, frames;
    struct cli_size size;
    int classes;
    char *pool, *pos;
    char *weights, *batch, *out, *device, *backend, *precision;
    const char *use_backend; /* --device and --backend resolved (cli_device) */
    int steps, recompute, recompute_mlp, feature_grad;
    double lr, wd, smoothing, beta1, beta2, eps;
    char *task, *optim, *decoder_mask;
    int dec_dim, dec_depth, dec_heads, norm_target;
    char *qv_bias;
    double mask_ratio, decoder_ratio, layer_decay;
    int embed, vocab, ctx, text_width, text_heads, text_layers;
    double temperature, margin;
    char *loss;
    int learn_temperature;
    struct tb_ckpt_info set; /* the settings chosen by flag (train/settings.h) */
};

#define F(name, type, field, def, meta, help, ...)                                            \
    CLI_FLAG(name, type, struct step_config, field, def, meta, help, __VA_ARGS__)
#define SETTING(...) CLI_SETTING(struct step_config, __VA_ARGS__),
static const struct cli_flag step_flags[] = {
    F("dim", CLI_INT, dim, "192", "D", "embedding width", 1, 65536),
    F("depth", CLI_INT, depth, "12", "L", "blocks", 1, 1024),
    F("heads", CLI_INT, heads, "3", "NH", "attention heads", 1, 1024),
    F("patch", CLI_INT, patch, "16", "P", "patch size (pixels)", 1, 1024),
    F("tubelet", CLI_INT, tubelet, "0", "TU", "frames per patch (0: 2; clip: 1, CLIP's)", 0, 64),
    F("frames", CLI_INT, frames, "8", "T", "frames per clip", 1, 1024),
    F("size", CLI_SIZE, size, "112x112", "WxH", "frame width x height", 1, 8192),
    F("classes", CLI_INT, classes, "10", "K", "classes (0: no head, with --feature-grad)", 0,
      1000000),
    F("pool", CLI_STR, pool, "mean", "mean|cls|none",
      "cls (class token, norm), mean (fc_norm) or none "
      "(every token normed; with --feature-grad and --classes 0)", CLI_NO_RANGE),
    F("pos", CLI_STR, pos, "sincos", "sincos|learned", "learned or sincos positions", CLI_NO_RANGE),
    TBI_SETTING_FLAGS(SETTING)
    F("weights", CLI_STR, weights, NULL, "W.safetensors", "the model's parameters",
      CLI_NO_RANGE),
    F("batch-file", CLI_STR, batch, NULL, "B.safetensors",
      "video float32 (B,3,T,H,W) and label int64 (B)", CLI_NO_RANGE),
    F("out", CLI_STR, out, NULL, "O.safetensors",
      "loss (S), logits and grad.<name> of the first step, the final weights", CLI_NO_RANGE),
    F("steps", CLI_INT, steps, "1", "S", "AdamW steps on the same batch", 1, 100000),
    F("device", CLI_STR, device, "auto", "cpu|cuda|auto", CLI_DEVICE_HELP, CLI_NO_RANGE),
    F("backend", CLI_STR, backend, "", "NAME", CLI_BACKEND_HELP, CLI_NO_RANGE),
    F("precision", CLI_STR, precision, "auto", "auto|fp32|bf16", CLI_PRECISION_HELP, CLI_NO_RANGE),
    F("feature-grad", CLI_BOOL, feature_grad, "false", "",
      "one backward from the batch's 'dfeat' (B, D) on the features (the head's input): "
      "writes 'feat' and every gradient but the head's", CLI_NO_RANGE),
    F("recompute", CLI_BOOL, recompute, "false", "",
      "keep only block inputs; the backward reruns each block's forward", CLI_NO_RANGE),
    F("recompute-mlp", CLI_INT, recompute_mlp, "0", "K",
      "the first K blocks keep no MLP hidden layer and residual sum; the backward recomputes "
      "them", 0, 1000000),
    F("lr", CLI_DOUBLE, lr, "0.001", "X", "learning rate", 0, 10),
    F("wd", CLI_DOUBLE, wd, "0.05", "Y", "weight decay (not on biases, norms, position and "
      "class embeddings)", 0, 10),
    F("label-smoothing", CLI_DOUBLE, smoothing, "0.1", "Z", "label smoothing", 0, 1),
    F("beta1", CLI_DOUBLE, beta1, "0.9", "B1", "AdamW beta1", 0, 1),
    F("beta2", CLI_DOUBLE, beta2, "0.999", "B2", "AdamW beta2", 0, 1),
    F("eps", CLI_DOUBLE, eps, "1e-08", "E", "AdamW epsilon", 0, 1),
    F("task", CLI_STR, task, "cls", "cls|mae|clip",
      "cls (a classifier), mae (VideoMAE pretraining: "
      "the batch holds 'video' and 'mask' int64 (B,N), 1 = masked; 'dmask' (B,N), 1 = not "
      "decoded, with --decoder-mask running-cell) or clip (the video-text dual encoder: "
      "'video' and 'text' int64 (B,ctx) token ids; the tubelet is 1)", CLI_NO_RANGE),
    F("optim", CLI_STR, optim, "adamw", "adamw|sgd|lion",
      "adamw, lion or sgd (momentum --beta1; cls "
      "only)", CLI_NO_RANGE),
    F("qv-bias", CLI_STR, qv_bias, "false", "true|false", "cls: VideoMAE's q/v attention biases: "
      "true or false", CLI_NO_RANGE),
    F("layer-decay", CLI_DOUBLE, layer_decay, "1", "X", "cls: layer-wise lr decay (1: none)",
      0.01, 1),
    F("mask-ratio", CLI_DOUBLE, mask_ratio, "0.9", "R",
      "mae: the masked share of each frame's positions (the batch's masks must match it)", 0, 1),
    F("decoder-mask", CLI_STR, decoder_mask, "none", "none|running-cell",
      "mae: none or running-cell",
      CLI_NO_RANGE),
    F("decoder-ratio", CLI_DOUBLE, decoder_ratio, "0.5", "R",
      "mae: the share of each 2x2 cell the running cell drops", 0, 1),
    F("dec-dim", CLI_INT, dec_dim, "384", "D", "mae: decoder width", 1, 65536),
    F("dec-depth", CLI_INT, dec_depth, "4", "L", "mae: decoder blocks", 1, 1024),
    F("dec-heads", CLI_INT, dec_heads, "6", "NH", "mae: decoder heads", 1, 1024),
    F("norm-target", CLI_BOOL, norm_target, "true", "",
      "mae: each tube's target pixels normalised per channel (VideoMAE's)", CLI_NO_RANGE),
    F("embed", CLI_INT, embed, "256", "E", "clip: the projections' width", 1, 65536),
    F("vocab", CLI_INT, vocab, "49408", "V", "clip: token ids", 2, 1 << 24),
    F("context", CLI_INT, ctx, "77", "N", "clip: tokens a caption", 2, 4096),
    F("text-width", CLI_INT, text_width, "512", "D", "clip: text tower width", 1, 65536),
    F("text-heads", CLI_INT, text_heads, "8", "NH", "clip: text tower heads", 1, 1024),
    F("text-depth", CLI_INT, text_layers, "12", "L", "clip: text tower blocks", 1, 1024),
    F("temperature", CLI_DOUBLE, temperature, "0.07", "X",
      "clip: InfoNCE's temperature (logits = cosine / X)", 1e-4, 100),
    F("learn-temperature", CLI_BOOL, learn_temperature, "false", "", "clip: learn the "
      "logit_scale (a parameter; the weights need it)", CLI_NO_RANGE),
    F("loss", CLI_STR, loss, "infonce", "infonce|max-margin",
      "clip: infonce or max-margin (AVION's MIR "
      "fine-tuning)", CLI_NO_RANGE),
    F("margin", CLI_DOUBLE, margin, "0.2", "M", "clip: the max-margin loss's margin", 0, 10),
};
#undef F

/* The outputs of one run: name, shape and host data (owned by the caller's buffers). */
static void out_tensor(struct tb_st_tensor *t, const char *prefix, const struct tb_param *p,
                       float *data)
{
    snprintf(t->name, sizeof(t->name), "%s%s", prefix, p->name);
    t->dtype = TB_ST_F32;
    t->n_dims = p->n_dims;
    memcpy(t->shape, p->shape, sizeof(p->shape));
    t->n = p->n;
    t->data = data;
}

/* The optimizer's hyper-parameters from the flags (its kind is set before tb_optim_init). */
static void set_hyper(struct tb_optim *opt, const struct step_config *c)
{
    opt->lr = (float)c->lr;
    opt->weight_decay = (float)c->wd;
    opt->beta1 = (float)c->beta1;
    opt->beta2 = (float)c->beta2;
    opt->eps = (float)c->eps;
}

/* Every parameter's gradient into grads (the registry's layout). */
static int read_grads(tb_params *params, float *grads)
{
    for (int i = 0; i < tb_params_count(params); i++) {
        int rc = tb_params_read_grad(params, i, grads + tb_params_at(params, i)->offset);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* grad.<name> (from grads) and <name> (the weights now, read into weights) of every
 * parameter, appended to outs. */
static int add_weights(struct tb_st_tensor *outs, int *n_out, tb_params *params, float *grads,
                       float *weights)
{
    for (int i = 0; i < tb_params_count(params); i++) {
        const struct tb_param *p = tb_params_at(params, i);
        int rc = tb_params_read(params, i, weights + p->offset);
        if (rc < 0)
            return rc;
        out_tensor(&outs[(*n_out)++], "grad.", p, grads + p->offset);
        out_tensor(&outs[(*n_out)++], "", p, weights + p->offset);
    }
    return 0;
}

enum { STEP_SAID = 1 };   /* a failure whose message was printed */
enum { STEP_OUTPUTS = 4 }; /* the most outputs of a task's step */

#define STEP_TRY(expr)                                                                         \
    do {                                                                                       \
        int rc_ = (expr);                                                                      \
        if (rc_ < 0)                                                                           \
            return rc_;                                                                        \
    } while (0)

struct step_run;
static void step_out(struct step_run *r, const char *name, float *data, int n_dims, int64_t d0,
                     int64_t d1, int64_t d2);

/* The batch's int64 (B, N) 0/1 mask called name as bytes, or NULL (with a message) when it
 * is absent or malformed. */
static uint8_t *batch_mask(const struct tb_st_file *bf, const char *path, const char *name,
                           int B, int N)
{
    const struct tb_st_tensor *t = tb_st_find(bf, name);
    if (!t || t->dtype != TB_ST_I64 || t->n_dims != 2 || t->shape[0] != B || t->shape[1] != N) {
        fprintf(stderr, "tubelet step: %s: '%s' must be int64 (%d, %d)\n", path, name, B, N);
        return NULL;
    }
    uint8_t *m = malloc((size_t)B * N);
    for (int64_t i = 0; m && i < t->n; i++) {
        int64_t v = ((const int64_t *)t->data)[i];
        if (v != 0 && v != 1) {
            fprintf(stderr, "tubelet step: %s: '%s' holds %lld at %lld: 0 or 1 only\n", path,
                    name, (long long)v, (long long)i);
            free(m);
            return NULL;
        }
        m[i] = (uint8_t)v;
    }
    return m;
}

/* What one run of `tubelet step` holds, whichever task it steps (step_close): the batch and
 * weights files, the parameters' registry, the optimizer, the host copies of the losses, the
 * first step's gradients and outputs and the final weights, and the tensors written to --out. */
struct step_run {
    const struct step_config *c;
    struct tb_st_file *wf, *bf;
    tb_params *params;
    struct tb_optim opt;
    const struct tb_st_tensor *video; /* the batch's (B, 3, T, H, W) */
    struct tb_st_tensor *outs;
    int n_out, B;
    float *losses, *grads, *weights;
    float *first[STEP_OUTPUTS];       /* the first step's outputs, copied */
    char backend[64];                 /* where it ran */
};

/* The batch file (unless read already) and its video (B, 3, frames, H, W); need names the
 * rest of what the task needs, for the message. 0, STEP_SAID or rc < 0. */
static int step_batch(struct step_run *r, int H, int W, const char *need)
{
    const struct step_config *c = r->c;
    int rc = r->bf ? 0 : tb_st_read(&r->bf, c->batch);
    if (rc < 0)
        return rc;
    const struct tb_st_tensor *v = r->video = tb_st_find(r->bf, "video");
    if (!v || v->dtype != TB_ST_F32 || v->n_dims != 5 || v->shape[0] < 1 ||
        v->shape[0] > 65536 || v->shape[1] != 3 || v->shape[2] != c->frames ||
        v->shape[3] != H || v->shape[4] != W) {
        fprintf(stderr, "tubelet step: %s: needs 'video' float32 (B,3,%d,%d,%d)%s\n", c->batch,
                c->frames, H, W, need);
        return STEP_SAID;
    }
    r->B = (int)v->shape[0];
    return 0;
}

/* The weights into params, and the host buffers of the outputs (the losses first). */
static int step_weights(struct step_run *r, tb_params *params)
{
    const struct step_config *c = r->c;
    int rc = tb_st_read(&r->wf, c->weights);
    r->params = params;
    if (rc < 0)
        return rc;
    if (tb_params_load(params, r->wf) < 0) {
        fprintf(stderr, "tubelet step: %s: %s\n", c->weights, tb_errmsg());
        return STEP_SAID;
    }
    int64_t nf = tb_params_floats(params);
    r->losses = calloc((size_t)c->steps, sizeof(float));
    r->grads = malloc(sizeof(float) * (size_t)nf);
    r->weights = malloc(sizeof(float) * (size_t)nf);
    r->outs = calloc((size_t)(1 + STEP_OUTPUTS + 2 * tb_params_count(params)), sizeof(*r->outs));
    if (!r->losses || !r->grads || !r->weights || !r->outs) {
        fprintf(stderr, "tubelet step: out of memory\n");
        return STEP_SAID;
    }
    step_out(r, "loss", r->losses, 1, c->steps, 0, 0);
    return 0;
}

/* The optimizer over the parameters, once the model is planned (kind: --optim's, checked). */
static int step_optim(struct step_run *r, int kind)
{
    r->opt.kind = (enum tb_optimizer)kind;
    int rc = tb_optim_init(&r->opt, r->params);
    if (rc == 0)
        set_hyper(&r->opt, r->c);
    return rc;
}

/* After step s's backward: the first step's gradients kept, then the update. */
static int step_update(struct step_run *r, int s)
{
    int rc = s == 0 ? read_grads(r->params, r->grads) : 0;
    return rc < 0 ? rc : tb_optim_update(&r->opt, 1.0f);
}

static void step_out(struct step_run *r, const char *name, float *data, int n_dims, int64_t d0,
                     int64_t d1, int64_t d2)
{
    struct tb_st_tensor *t = &r->outs[r->n_out++];
    int64_t shape[3] = {d0, d1, d2};
    *t = (struct tb_st_tensor){.dtype = TB_ST_F32, .n_dims = n_dims, .n = 1, .data = data};
    snprintf(t->name, sizeof(t->name), "%s", name);
    for (int k = 0; k < n_dims; k++) {
        t->shape[k] = shape[k];
        t->n *= shape[k];
    }
}

/* --out: the losses, what the caller added, every gradient and final weight. */
static int step_write(struct step_run *r)
{
    int rc = add_weights(r->outs, &r->n_out, r->params, r->grads, r->weights);
    if (rc == 0)
        rc = tb_st_write(r->c->out, r->outs, r->n_out, NULL);
    return rc < 0 ? rc : 0;
}

/* rc: 0, STEP_SAID or a code to report; the exit status. Before the model's close (the
 * optimizer's memory is its backend's). */
static int step_close(struct step_run *r, int rc)
{
    if (rc < 0)
        cli_report("step", rc);
    tb_optim_free(&r->opt);
    tb_st_free(&r->wf);
    tb_st_free(&r->bf);
    free(r->outs);
    free(r->losses);
    free(r->grads);
    free(r->weights);
    for (int k = 0; k < STEP_OUTPUTS; k++)
        free(r->first[k]);
    return rc != 0;
}

/* The stepper's outputs of the first step, copied (a later step reuses its buffers). */
static int step_outputs(struct step_run *r, tb_stepper *st)
{
    struct tb_st_tensor t;
    for (int k = 0, rc; k < STEP_OUTPUTS && (rc = tb_stepper_output(st, k, &t)) != 1; k++) {
        if (rc < 0)
            return rc;
        if (!(r->first[k] = malloc(sizeof(float) * (size_t)t.n)))
            return TB_ENOMEM;
        memcpy(r->first[k], t.data, sizeof(float) * (size_t)t.n);
        t.data = r->first[k];
        r->outs[r->n_out++] = t;
    }
    return 0;
}

/* S steps of the task o names (o->batch = the batch's clips) on the inputs in, by the
 * training loop's own task code (tb_stepper); layer decay (cls) before the optimizer; then
 * --out written. 0, STEP_SAID or rc < 0. */
static int step_task(struct step_run *r, const struct tb_train_opts *o,
                     const struct tb_step_input *in, double layer_decay)
{
    const struct step_config *c = r->c;
    tb_stepper *st = NULL;
    int rc = tb_stepper_open(&st, o);
    if (rc == 0)
        snprintf(r->backend, sizeof(r->backend), "%s", tb_stepper_backend(st));
    if (rc == 0 && (rc = step_weights(r, tb_stepper_params(st))) == 0) {
        if (layer_decay < 1)
            tb_params_layer_decay(r->params, o->model.depth, layer_decay);
        rc = step_optim(r, tb_optimizer_parse(c->optim));
    }
    for (int k = 0; rc == 0 && k < STEP_OUTPUTS && tb_stepper_output(st, k, NULL) == 0; k++)
        ; /* the first step keeps every output */
    for (int s = 0; rc == 0 && s < c->steps; s++)
        if ((rc = tb_stepper_run(st, in, &r->losses[s])) == 0 &&
            (s > 0 || (rc = step_outputs(r, st)) == 0))
            rc = step_update(r, s);
    if (rc == 0)
        rc = step_write(r);
    tb_optim_free(&r->opt); /* before its backend goes */
    tb_stepper_close(&st);
    return rc;
}

/* --task mae: S steps of VideoMAE pretraining on the batch with its masks; the target undoes
 * ImageNet's normalisation. */
static int run_mae(struct step_config *c, enum tb_dtype dtype)
{
    struct step_run r = {.c = c};
    uint8_t *mask = NULL, *drop = NULL;
    int running = !strcmp(c->decoder_mask, "running-cell"), rc;
    if (tb_optimizer_parse(c->optim) < 0 || (!running && strcmp(c->decoder_mask, "none"))) {
        fprintf(stderr, "tubelet step: --optim is adamw or lion, --decoder-mask none or "
                "running-cell\n");
        return 2;
    }
    struct tb_train_opts o = {
        .task = "mae", .norm = TB_NORM_IMAGENET,
        .model = {.dim = c->dim, .depth = c->depth, .heads = c->heads, .patch = c->patch,
                  .tubelet = c->tubelet ? c->tubelet : 2, .frames = c->frames,
                  .height = c->size.h, .width = c->size.w, .recompute = c->recompute,
                  .recompute_mlp = c->recompute_mlp, .backend = c->use_backend, .dtype = dtype},
        .mae = {.mask_ratio = c->mask_ratio, .decoder_ratio = c->decoder_ratio,
                .decoder_mask = running ? TB_DECODER_MASK_RUNNING_CELL : TB_DECODER_MASK_NONE,
                .dec_dim = c->dec_dim, .dec_depth = c->dec_depth, .dec_heads = c->dec_heads,
                .norm_target = c->norm_target},
    };
    tbi_settings_take(&o, &c->set);
    o.mae.enc = o.model;
    /* the tokens a clip: (T / TU) (H / P) (W / P) */
    int N = c->frames / o.model.tubelet * (c->size.h / c->patch) * (c->size.w / c->patch);
    cli_device_say();
    if ((rc = step_batch(&r, c->size.h, c->size.w, "")) == 0) {
        o.batch = r.B;
        if (!(mask = batch_mask(r.bf, c->batch, "mask", r.B, N)) ||
            (running && !(drop = batch_mask(r.bf, c->batch, "dmask", r.B, N))))
            rc = STEP_SAID;
    }
    struct tb_step_input in = {.n = r.B, .video = r.video ? r.video->data : NULL, .mask = mask,
                               .dmask = drop};
    if (rc == 0 && (rc = step_task(&r, &o, &in, 1)) == 0)
        printf("step: %d %s steps of MAE pretraining on %d clips, loss %.6f -> %.6f, wrote "
               "%s\n", c->steps, c->optim, r.B, r.losses[0], r.losses[c->steps - 1], c->out);
    free(mask);
    free(drop);
    return step_close(&r, rc);
}

/* The batch's int64 (B, ctx) token ids called 'text' as int32, or NULL with a message. */
static int32_t *batch_ids(const struct tb_st_file *bf, const char *path, int B, int ctx)
{
    const struct tb_st_tensor *t = tb_st_find(bf, "text");
    if (!t || t->dtype != TB_ST_I64 || t->n_dims != 2 || t->shape[0] != B || t->shape[1] != ctx) {
        fprintf(stderr, "tubelet step: %s: 'text' must be int64 (%d, %d) token ids\n", path, B,
                ctx);
        return NULL;
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)t->n);
    for (int64_t i = 0; ids && i < t->n; i++) {
        int64_t v = ((const int64_t *)t->data)[i];
        ids[i] = v < INT32_MIN || v > INT32_MAX ? -1 : (int32_t)v;
    }
    return ids;
}

/* --task clip: S steps of the dual encoder's InfoNCE (or max-margin loss) on the batch's
 * clips and captions. */
static int run_clip(struct step_config *c, enum tb_dtype dtype)
{
    struct step_run r = {.c = c};
    int32_t *ids = NULL;
    int rc, max_margin = !strcmp(c->loss, "max-margin");
    if (tb_optimizer_parse(c->optim) < 0 || (!max_margin && strcmp(c->loss, "infonce"))) {
        fprintf(stderr, "tubelet step: --optim is adamw or lion, --loss infonce or max-margin\n");
        return 2;
    }
    struct tb_train_opts o = {
        .task = "clip", .max_margin = max_margin, .margin = c->margin,
        .model = {.dim = c->dim, .depth = c->depth, .heads = c->heads, .patch = c->patch,
                  .tubelet = c->tubelet, .frames = c->frames, .height = c->size.h,
                  .width = c->size.w, .recompute = c->recompute,
                  .recompute_mlp = c->recompute_mlp, .backend = c->use_backend, .dtype = dtype},
        .clip = {.embed = c->embed, .vocab = c->vocab, .ctx = c->ctx,
                 .text_width = c->text_width, .text_heads = c->text_heads,
                 .text_layers = c->text_layers, .text_causal = 1,
                 .temperature = c->temperature, .learn_temperature = c->learn_temperature},
    };
    tbi_settings_take(&o, &c->set);
    cli_device_say();
    if ((rc = step_batch(&r, c->size.h, c->size.w, "")) == 0 &&
        !(ids = batch_ids(r.bf, c->batch, r.B, c->ctx)))
        rc = STEP_SAID;
    o.batch = r.B;
    struct tb_step_input in = {.n = r.B, .video = r.video ? r.video->data : NULL, .ids = ids};
    if (rc == 0 && (rc = step_task(&r, &o, &in, 1)) == 0)
        printf("step: %d %s steps of video-text contrastive training on %d pairs, loss %.6f -> "
               "%.6f, wrote %s\n", c->steps, c->optim, r.B, r.losses[0], r.losses[c->steps - 1],
               c->out);
    free(ids);
    return step_close(&r, rc);
}

/* The batch's tensors for --task cls beyond its video, checked against the model. */
struct vit_batch {
    const struct tb_st_tensor *keep, *label, *dfeat, *drop, *mix, *hmask;
    int64_t feat_floats; /* the features' floats: (B, D), or (B, N, D) with pool none */
    int box[4];          /* cutmix's box, from mix */
};

/* What --task cls and --feature-grad need of the batch, and what they do not take; 0 or
 * STEP_SAID. */
static int vit_batch_check(struct step_run *r, const struct tb_vit_config *vc,
                           struct vit_batch *b, const char *need)
{
    const struct step_config *c = r->c;
    const struct tb_st_file *bf = r->bf;
    int64_t B = r->B, N = vc->keep ? vc->keep : (int64_t)(c->frames / vc->tubelet) *
                                                   (vc->height / c->patch) *
                                                   (vc->width / c->patch);
    b->label = tb_st_find(bf, "label");
    b->dfeat = tb_st_find(bf, "dfeat");
    b->feat_floats = B * c->dim * (vc->pool == TB_POOL_NONE ? N : 1);
    const struct tb_st_tensor *l = b->label, *d = b->dfeat;
    if (c->feature_grad ? !d || d->dtype != TB_ST_F32 || d->shape[0] != B ||
                              d->n != b->feat_floats || (b->keep && b->keep->shape[0] != B)
                        : !l || l->dtype != TB_ST_I64 || l->n_dims != 1 || l->shape[0] != B) {
        fprintf(stderr, "tubelet step: %s: needs 'video' float32 (B,3,%d,%d,%d)%s\n", c->batch,
                c->frames, vc->height, vc->width, need);
        return STEP_SAID;
    }
    /* Drop path's factors, when the batch has them: 'drop' float32 (L, 2, B). */
    const struct tb_st_tensor *dp = b->drop = tb_st_find(bf, "drop");
    if (dp && (dp->dtype != TB_ST_F32 || dp->n_dims != 3 || dp->shape[0] != c->depth ||
               dp->shape[1] != 2 || dp->shape[2] != B || c->feature_grad)) {
        fprintf(stderr, "tubelet step: %s: 'drop' must be float32 (%d, 2, B), not with "
                "--feature-grad\n", c->batch, c->depth);
        return STEP_SAID;
    }
    /* Batch mixing and head dropout, when the batch has them: 'mix' float32 (5): lam, y0, y1,
     * x0, x1 (y0 < 0: mixup, else cutmix's box), soft targets with --label-smoothing;
     * 'hmask' float32 (B, D). */
    const struct tb_st_tensor *mix = b->mix = tb_st_find(bf, "mix");
    const struct tb_st_tensor *hm = b->hmask = tb_st_find(bf, "hmask");
    if ((mix && (mix->dtype != TB_ST_F32 || mix->n != 5 || c->feature_grad)) ||
        (hm && (hm->dtype != TB_ST_F32 || hm->n != B * c->dim || c->feature_grad))) {
        fprintf(stderr, "tubelet step: %s: 'mix' must be float32 (5), 'hmask' float32 (B, %d), "
                "neither with --feature-grad\n", c->batch, c->dim);
        return STEP_SAID;
    }
    for (int q = 0; mix && q < 4; q++)
        b->box[q] = (int)((const float *)mix->data)[1 + q];
    return 0;
}

/* --feature-grad's forward and backward on the planned encoder m, and its outputs. */
static int features_run(struct step_run *r, tb_vit *m, const struct vit_batch *b,
                        const int32_t *kept, float *feat)
{
    const struct step_config *c = r->c;
    int64_t N = b->feat_floats / r->B / c->dim;
    STEP_TRY(tb_vit_plan(m, r->B, NULL));
    STEP_TRY(tb_vit_set_video(m, r->video->data, r->B));
    if (kept)
        STEP_TRY(tb_vit_set_keep(m, kept));
    STEP_TRY(tb_vit_run(m, NULL, 0, NULL));
    STEP_TRY(tb_vit_features(m, feat));
    STEP_TRY(tb_vit_backward_features(m, b->dfeat->data));
    r->n_out = 0; /* no loss: the gradient on the features is given */
    if (tb_vit_config(m)->pool == TB_POOL_NONE)
        step_out(r, "feat", feat, 3, r->B, N, c->dim);
    else
        step_out(r, "feat", feat, 2, r->B, c->dim, 0);
    for (int i = 0; i < tb_params_count(r->params); i++) {
        const struct tb_param *p = tb_params_at(r->params, i);
        if (strncmp(p->name, "head.", 5)) {
            STEP_TRY(tb_params_read_grad(r->params, i, r->grads + p->offset));
            out_tensor(&r->outs[r->n_out++], "grad.", p, r->grads + p->offset);
        }
    }
    int rc = tb_st_write(c->out, r->outs, r->n_out, NULL);
    return rc < 0 ? rc : 0;
}

/* --feature-grad: the encoder alone (no task: no loss of its own), one forward to the
 * features, one backward from the given gradient on them; 'feat' and every gradient but the
 * head's. */
static int vit_feature_grad(struct step_run *r, const struct tb_vit_config *vc,
                            const struct vit_batch *b, const int32_t *kept)
{
    tb_vit *m = NULL;
    float *feat = malloc(sizeof(float) * (size_t)b->feat_floats);
    int rc = feat ? tb_vit_open(&m, vc) : TB_ENOMEM;
    if (rc == 0 && (rc = step_weights(r, tb_vit_params(m))) == 0 &&
        (rc = features_run(r, m, b, kept, feat)) == 0)
        printf("step: features and gradients of %d clips on %s, wrote %s\n", r->B,
               tb_vit_backend(m), r->c->out);
    tb_vit_close(&m);
    free(feat);
    return rc;
}

/* --task cls's model from the flags; 0, or the exit status 2 with the message printed. */
static int vit_config(const struct step_config *c, enum tb_dtype dtype,
                      struct tb_vit_config *vc)
{
    if (tb_optimizer_parse(c->optim) < 0 ||
        (strcmp(c->qv_bias, "true") && strcmp(c->qv_bias, "false"))) {
        fprintf(stderr, "tubelet step: --task is cls, mae or clip, --optim adamw, lion or "
                "sgd, --qv-bias true or false\n");
        return 2;
    }
    if ((strcmp(c->pool, "cls") && strcmp(c->pool, "mean") && strcmp(c->pool, "none")) ||
        (strcmp(c->pos, "learned") && strcmp(c->pos, "sincos")) ||
        (!c->feature_grad && (c->classes < 1 || !strcmp(c->pool, "none")))) {
        fprintf(stderr, "tubelet step: --pool is cls, mean or none (none and --classes 0 only "
                "with --feature-grad), --pos learned or sincos\n");
        return 2;
    }
    *vc = (struct tb_vit_config){
        .dim = c->dim, .depth = c->depth, .heads = c->heads, .patch = c->patch,
        .tubelet = c->tubelet ? c->tubelet : 2, .frames = c->frames, .height = c->size.h,
        .width = c->size.w, .classes = c->classes,
        .pool = !strcmp(c->pool, "cls") ? TB_POOL_CLS : !strcmp(c->pool, "none") ? TB_POOL_NONE
                                                                                 : TB_POOL_MEAN,
        .pos = !strcmp(c->pos, "learned") ? TB_POS_LEARNED : TB_POS_SINCOS,
        .recompute = c->recompute, .recompute_mlp = c->recompute_mlp, .backend = c->use_backend,
        .qv_bias = !strcmp(c->qv_bias, "true"), .dtype = dtype,
    };
    struct tb_train_opts o = {.model = *vc};
    tbi_settings_take(&o, &c->set);
    *vc = o.model;
    return 0;
}

/* Kept tokens (MAE's visible ones), when the batch has them: 'keep' int64 (B, K), as int32
 * into *kept; vc->keep their count. 0, STEP_SAID or rc < 0. */
static int vit_keep(struct step_run *r, struct tb_vit_config *vc, struct vit_batch *b,
                    int32_t **kept)
{
    const struct tb_st_tensor *k;
    int rc = tb_st_read(&r->bf, r->c->batch);
    if (rc < 0 || !(k = b->keep = tb_st_find(r->bf, "keep")))
        return rc < 0 ? rc : 0;
    if (k->dtype != TB_ST_I64 || k->n_dims != 2 || k->shape[1] < 1 || k->shape[1] > 1 << 24) {
        fprintf(stderr, "tubelet step: %s: 'keep' must be int64 (B, K)\n", r->c->batch);
        return STEP_SAID;
    }
    vc->keep = (int)k->shape[1];
    if (!(*kept = malloc(sizeof(int32_t) * (size_t)k->n)))
        return TB_ENOMEM;
    for (int64_t i = 0; i < k->n; i++) {
        int64_t v = ((const int64_t *)k->data)[i];
        (*kept)[i] = v < 0 || v > INT32_MAX ? -1 : (int32_t)v;
    }
    return 0;
}

/* --task cls: S steps of the classifier task on the batch (with its mixing, drop path and
 * head dropout when it has them), or with --feature-grad one backward from the features. */
static int run_vit(struct step_config *c, enum tb_dtype dtype)
{
    struct step_run r = {.c = c};
    struct tb_vit_config vc;
    struct vit_batch b = {0};
    float *soft = NULL;
    int32_t *kept = NULL;
    int rc;
    if ((rc = vit_config(c, dtype, &vc)) != 0)
        return rc;
    const char *need = c->feature_grad ? " and 'dfeat' float32 (B,D), or (B,N,D) with --pool none"
                                       : " and 'label' int64 (B)";
    cli_device_say();
    if ((rc = vit_keep(&r, &vc, &b, &kept)) != 0 ||
        (rc = step_batch(&r, vc.height, vc.width, need)) != 0 ||
        (rc = vit_batch_check(&r, &vc, &b, need)) != 0)
        goto end;
    if (c->feature_grad) {
        rc = vit_feature_grad(&r, &vc, &b, kept);
        goto end;
    }
    const float *mv = b.mix ? b.mix->data : NULL;
    if (mv && !(soft = malloc(sizeof(float) * (size_t)r.B * c->classes))) {
        rc = TB_ENOMEM;
        goto end;
    }
    if (mv)
        tb_mix_targets(soft, b.label->data, r.B, c->classes, mv[0], c->smoothing);
    struct tb_train_opts o = {.task = "cls", .model = vc, .batch = r.B,
                              .smoothing = c->smoothing};
    struct tb_step_input in = {
        .n = r.B, .video = r.video->data, .labels = b.label->data, .soft = soft,
        .lam = mv ? mv[0] : 1, .box = mv && mv[1] >= 0 ? b.box : NULL,
        .drop = b.drop ? b.drop->data : NULL, .hmask = b.hmask ? b.hmask->data : NULL};
    if ((rc = step_task(&r, &o, &in, c->layer_decay)) == 0)
        printf("step: %d steps on %d clips on %s, loss %.6f -> %.6f, wrote %s\n", c->steps, r.B,
               r.backend, r.losses[0], r.losses[c->steps - 1], c->out);
end:
    free(soft);
    free(kept);
    return step_close(&r, rc);
}

static int run_step(void *config, int n_args, char **args)
{
    struct step_config *c = config;
    enum tb_dtype dtype;
    (void)n_args;
    (void)args;
    if (!c->weights[0] || !c->batch[0] || !c->out[0]) {
        fprintf(stderr, "tubelet step: --weights, --batch-file and --out are required\n");
        return 2;
    }
    if (cli_device("step", c->device, c->backend, c->precision, &c->use_backend, &dtype))
        return 2;
    if (!strcmp(c->task, "mae"))
        return run_mae(c, dtype);
    if (!strcmp(c->task, "clip"))
        return run_clip(c, dtype);
    if (!strcmp(c->task, "cls"))
        return run_vit(c, dtype);
    fprintf(stderr, "tubelet step: --task is cls, mae or clip, --optim adamw, lion or sgd, "
            "--qv-bias true or false\n");
    return 2;
}

const struct cli_command cli_cmd_step = {
    .name = "step",
    .args = "",
    .summary = "run training steps of --task cls, mae or clip on given weights and batch (for "
               "checking)",
    .details = "Writes to --out: 'loss' (S), the first step's 'logits' (B,K) or, with --task\n"
               "mae, 'pred' (B,Nq,3*TU*P*P) and 'grad.<name>' for every parameter, and the\n"
               "weights after S optimizer steps under their own names (PyTorch's AdamW or\n"
               "AVION's Lion; no decay on biases, norms, position and class embeddings:\n"
               "AVION's rule, docs/RECIPES.md).\n"
               "The MAE target undoes ImageNet's normalisation. --size is width x height.",
    .flags = step_flags,
    .n_flags = (int)(sizeof(step_flags) / sizeof(step_flags[0])),
    .config_size = sizeof(struct step_config),
    .min_args = 0,
    .max_args = 0,
    .run = run_step,
};
