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
};

#define F(name, type, field, def, meta, help, ...)                                            \
    CLI_FLAG(name, type, struct step_config, field, def, meta, help, __VA_ARGS__)
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

/* --task mae: S steps of VideoMAE pretraining on the batch with its masks. */
static int run_mae(struct step_config *c, enum tb_dtype dtype)
{
    struct tb_st_file *wf = NULL, *bf = NULL;
    tb_mae *m = NULL;
    struct tb_optim opt = {0};
    struct tb_st_tensor *outs = NULL;
    float *losses = NULL, *pred = NULL, *grads = NULL, *weights = NULL;
    uint8_t *mask = NULL, *drop = NULL;
    int rc, status = 1, n_out = 0, kind = tb_optimizer_parse(c->optim);
    int running = !strcmp(c->decoder_mask, "running-cell");
    if (kind < 0 || (!running && strcmp(c->decoder_mask, "none"))) {
        fprintf(stderr, "tubelet step: --optim is adamw or lion, --decoder-mask none or "
                "running-cell\n");
        return 2;
    }
    struct tb_mae_config mc = {
        .enc = {.dim = c->dim, .depth = c->depth, .heads = c->heads, .patch = c->patch,
                .tubelet = c->tubelet ? c->tubelet : 2, .frames = c->frames,
                .height = c->size.h, .width = c->size.w, .recompute = c->recompute,
                .recompute_mlp = c->recompute_mlp, .backend = c->use_backend, .dtype = dtype},
        .mask_ratio = c->mask_ratio,
        .decoder_mask = running ? TB_DECODER_MASK_RUNNING_CELL : TB_DECODER_MASK_NONE,
        .decoder_ratio = c->decoder_ratio, .dec_dim = c->dec_dim, .dec_depth = c->dec_depth,
        .dec_heads = c->dec_heads, .norm_target = c->norm_target,
    };
    cli_device_say();
    if ((rc = tb_mae_open(&m, &mc)) < 0 || (rc = tb_st_read(&bf, c->batch)) < 0 ||
        (rc = tb_st_read(&wf, c->weights)) < 0)
        goto fail;
    tb_params *params = tb_mae_params(m);
    if ((rc = tb_params_load(params, wf)) < 0) {
        fprintf(stderr, "tubelet step: %s: %s\n", c->weights, tb_errmsg());
        goto end;
    }
    int N, Nq, V;
    tb_mae_sizes(m, &N, NULL, &Nq, &V);
    const struct tb_st_tensor *video = tb_st_find(bf, "video");
    if (!video || video->dtype != TB_ST_F32 || video->n_dims != 5 || video->shape[0] < 1 ||
        video->shape[0] > 65536 || video->shape[1] != 3 || video->shape[2] != c->frames ||
        video->shape[3] != mc.enc.height || video->shape[4] != mc.enc.width) {
        fprintf(stderr, "tubelet step: %s: needs 'video' float32 (B,3,%d,%d,%d)\n", c->batch,
                c->frames, mc.enc.height, mc.enc.width);
        goto end;
    }
    int B = (int)video->shape[0], np = tb_params_count(params);
    if (!(mask = batch_mask(bf, c->batch, "mask", B, N)) ||
        (running && !(drop = batch_mask(bf, c->batch, "dmask", B, N))))
        goto end;
    int64_t nf = tb_params_floats(params);
    opt.kind = (enum tb_optimizer)kind;
    if ((rc = tb_mae_plan(m, B, NULL)) < 0 || (rc = tb_optim_init(&opt, params)) < 0)
        goto fail;
    set_hyper(&opt, c);
    losses = malloc(sizeof(float) * (size_t)c->steps);
    pred = malloc(sizeof(float) * (size_t)B * Nq * V);
    grads = malloc(sizeof(float) * (size_t)nf);
    weights = malloc(sizeof(float) * (size_t)nf);
    outs = calloc((size_t)(2 + 2 * np), sizeof(*outs));
    if (!losses || !pred || !grads || !weights || !outs) {
        fprintf(stderr, "tubelet step: out of memory\n");
        goto end;
    }
    for (int s = 0; s < c->steps; s++) {
        if ((rc = tb_mae_set_video(m, video->data, B, tb_mean_imagenet, tb_std_imagenet)) < 0 ||
            (rc = tb_mae_set_mask(m, mask, drop)) < 0 || (rc = tb_mae_run(m, &losses[s])) < 0 ||
            (rc = tb_mae_backward(m)) < 0)
            goto fail;
        if (s == 0 && ((rc = tb_mae_pred(m, pred)) < 0 || (rc = read_grads(params, grads)) < 0))
            goto fail;
        if ((rc = tb_optim_update(&opt, 1.0f)) < 0)
            goto fail;
    }
    outs[n_out++] = (struct tb_st_tensor){.name = "loss", .dtype = TB_ST_F32, .n_dims = 1,
                                          .shape = {c->steps}, .n = c->steps, .data = losses};
    outs[n_out++] = (struct tb_st_tensor){.name = "pred", .dtype = TB_ST_F32, .n_dims = 3,
                                          .shape = {B, Nq, V}, .n = (int64_t)B * Nq * V,
                                          .data = pred};
    if ((rc = add_weights(outs, &n_out, params, grads, weights)) < 0 ||
        (rc = tb_st_write(c->out, outs, n_out, NULL)) < 0)
        goto fail;
    printf("step: %d %s steps of MAE pretraining on %d clips, loss %.6f -> %.6f, wrote %s\n",
           c->steps, c->optim, B, losses[0], losses[c->steps - 1], c->out);
    status = 0;
    goto end;
fail:
    cli_report("step", rc);
end:
    tb_optim_free(&opt);
    tb_mae_close(&m);
    tb_st_free(&wf);
    tb_st_free(&bf);
    free(outs);
    free(losses);
    free(pred);
    free(grads);
    free(weights);
    free(mask);
    free(drop);
    return status;
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

/* --task clip: S steps of the dual encoder's InfoNCE on the batch's clips and captions. */
static int run_clip(struct step_config *c, enum tb_dtype dtype)
{
    struct tb_st_file *wf = NULL, *bf = NULL;
    tb_clip *m = NULL;
    struct tb_optim opt = {0};
    struct tb_st_tensor *outs = NULL;
    float *losses = NULL, *emb = NULL, *grads = NULL, *weights = NULL;
    int32_t *ids = NULL;
    int rc, status = 1, n_out = 0, kind = tb_optimizer_parse(c->optim);
    int max_margin = !strcmp(c->loss, "max-margin");
    if (kind < 0 || (!max_margin && strcmp(c->loss, "infonce"))) {
        fprintf(stderr, "tubelet step: --optim is adamw or lion, --loss infonce or max-margin\n");
        return 2;
    }
    struct tb_clip_config cc = {
        .video = {.dim = c->dim, .depth = c->depth, .heads = c->heads, .patch = c->patch,
                  .tubelet = c->tubelet, .frames = c->frames, .height = c->size.h,
                  .width = c->size.w,
                  .recompute = c->recompute, .recompute_mlp = c->recompute_mlp,
                  .backend = c->use_backend, .dtype = dtype},
        .embed = c->embed, .vocab = c->vocab, .ctx = c->ctx, .text_width = c->text_width,
        .text_heads = c->text_heads, .text_layers = c->text_layers, .text_causal = 1,
        .temperature = c->temperature, .learn_temperature = c->learn_temperature,
    };
    cli_device_say();
    if ((rc = tb_clip_open(&m, &cc)) < 0 || (rc = tb_st_read(&bf, c->batch)) < 0 ||
        (rc = tb_st_read(&wf, c->weights)) < 0)
        goto fail;
    tb_params *params = tb_clip_params(m);
    if ((rc = tb_params_load(params, wf)) < 0) {
        fprintf(stderr, "tubelet step: %s: %s\n", c->weights, tb_errmsg());
        goto end;
    }
    const struct tb_st_tensor *video = tb_st_find(bf, "video");
    if (!video || video->dtype != TB_ST_F32 || video->n_dims != 5 || video->shape[0] < 1 ||
        video->shape[0] > 65536 || video->shape[1] != 3 || video->shape[2] != c->frames ||
        video->shape[3] != cc.video.height || video->shape[4] != cc.video.width) {
        fprintf(stderr, "tubelet step: %s: needs 'video' float32 (B,3,%d,%d,%d)\n", c->batch,
                c->frames, cc.video.height, cc.video.width);
        goto end;
    }
    int B = (int)video->shape[0], E = c->embed, np = tb_params_count(params);
    if (!(ids = batch_ids(bf, c->batch, B, c->ctx)))
        goto end;
    int64_t nf = tb_params_floats(params);
    opt.kind = (enum tb_optimizer)kind;
    if ((rc = tb_clip_plan(m, B, NULL)) < 0 || (rc = tb_optim_init(&opt, params)) < 0)
        goto fail;
    set_hyper(&opt, c);
    losses = malloc(sizeof(float) * (size_t)c->steps);
    emb = malloc(sizeof(float) * (size_t)B * E * 6); /* first and later features, gradients */
    grads = malloc(sizeof(float) * (size_t)nf);
    weights = malloc(sizeof(float) * (size_t)nf);
    outs = calloc((size_t)(3 + 2 * np), sizeof(*outs));
    if (!losses || !emb || !grads || !weights || !outs) {
        fprintf(stderr, "tubelet step: out of memory\n");
        goto end;
    }
    size_t be = (size_t)B * E;
    float *ve = emb, *te = ve + be, *dv = te + be, *dt = dv + be, *v = dt + be, *t = v + be;
    for (int s = 0; s < c->steps; s++) {
        if ((rc = tb_clip_set_video(m, video->data, B)) < 0 ||
            (rc = tb_clip_encode_video(m, v)) < 0 || (rc = tb_clip_encode_text(m, ids, B, t)) < 0)
            goto fail;
        if (s == 0) {
            memcpy(ve, v, sizeof(float) * be);
            memcpy(te, t, sizeof(float) * be);
        }
        double scale = 0, dscale = 0;
        if ((rc = tb_clip_logit_scale(m, &scale)) < 0)
            goto fail;
        double l = 0;
        if ((rc = max_margin ? tb_clip_max_margin(v, t, B, E, c->margin, &l, dv, dt)
                             : tb_clip_infonce(v, t, B, E, scale, &l, dv, dt, &dscale)) < 0)
            goto fail;
        losses[s] = (float)l;
        if ((rc = tb_clip_backward(m, dv, dt, dscale)) < 0)
            goto fail;
        if (s == 0 && (rc = read_grads(params, grads)) < 0)
            goto fail;
        if ((rc = tb_optim_update(&opt, 1.0f)) < 0)
            goto fail;
    }
    outs[n_out++] = (struct tb_st_tensor){.name = "loss", .dtype = TB_ST_F32, .n_dims = 1,
                                          .shape = {c->steps}, .n = c->steps, .data = losses};
    outs[n_out++] = (struct tb_st_tensor){.name = "video_emb", .dtype = TB_ST_F32, .n_dims = 2,
                                          .shape = {B, E}, .n = (int64_t)B * E, .data = ve};
    outs[n_out++] = (struct tb_st_tensor){.name = "text_emb", .dtype = TB_ST_F32, .n_dims = 2,
                                          .shape = {B, E}, .n = (int64_t)B * E, .data = te};
    if ((rc = add_weights(outs, &n_out, params, grads, weights)) < 0 ||
        (rc = tb_st_write(c->out, outs, n_out, NULL)) < 0)
        goto fail;
    printf("step: %d %s steps of video-text contrastive training on %d pairs, loss %.6f -> "
           "%.6f, wrote %s\n", c->steps, c->optim, B, losses[0], losses[c->steps - 1], c->out);
    status = 0;
    goto end;
fail:
    cli_report("step", rc);
end:
    tb_optim_free(&opt);
    tb_clip_close(&m);
    tb_st_free(&wf);
    tb_st_free(&bf);
    free(outs);
    free(losses);
    free(emb);
    free(grads);
    free(weights);
    free(ids);
    return status;
}

static int run_step(void *config, int n_args, char **args)
{
    struct step_config *c = config;
    struct tb_st_file *wf = NULL, *bf = NULL;
    tb_vit *m = NULL;
    struct tb_optim opt = {0};
    struct tb_st_tensor *outs = NULL;
    float *losses = NULL, *logits = NULL, *grads = NULL, *weights = NULL, *soft = NULL;
    int32_t *kept = NULL;
    int rc, status = 1, n_out = 0;
    (void)n_args;
    (void)args;
    if (!c->weights[0] || !c->batch[0] || !c->out[0]) {
        fprintf(stderr, "tubelet step: --weights, --batch-file and --out are required\n");
        return 2;
    }
    enum tb_dtype dtype;
    if (cli_device("step", c->device, c->backend, c->precision, &c->use_backend,
                   &dtype))
        return 2;
    if (!strcmp(c->task, "mae"))
        return run_mae(c, dtype);
    if (!strcmp(c->task, "clip"))
        return run_clip(c, dtype);
    int kind = tb_optimizer_parse(c->optim);
    if (strcmp(c->task, "cls") || kind < 0 ||
        (strcmp(c->qv_bias, "true") && strcmp(c->qv_bias, "false"))) {
        fprintf(stderr, "tubelet step: --task is cls, mae or clip, --optim adamw, lion or "
                "sgd, --qv-bias true or false\n");
        return 2;
    }
    opt.kind = (enum tb_optimizer)kind;
    struct tb_vit_config vc = {
        .dim = c->dim, .depth = c->depth, .heads = c->heads, .patch = c->patch,
        .tubelet = c->tubelet ? c->tubelet : 2, .frames = c->frames, .height = c->size.h,
        .width = c->size.w, .classes = c->classes,
        .pool = !strcmp(c->pool, "cls") ? TB_POOL_CLS : !strcmp(c->pool, "none") ? TB_POOL_NONE
                                                                                 : TB_POOL_MEAN,
        .pos = !strcmp(c->pos, "learned") ? TB_POS_LEARNED : TB_POS_SINCOS,
        .recompute = c->recompute, .recompute_mlp = c->recompute_mlp, .backend = c->use_backend,
        .qv_bias = !strcmp(c->qv_bias, "true"), .dtype = dtype,
    };
    if ((strcmp(c->pool, "cls") && strcmp(c->pool, "mean") && strcmp(c->pool, "none")) ||
        (strcmp(c->pos, "learned") && strcmp(c->pos, "sincos")) ||
        (!c->feature_grad && (c->classes < 1 || !strcmp(c->pool, "none")))) {
        fprintf(stderr, "tubelet step: --pool is cls, mean or none (none and --classes 0 only "
                "with --feature-grad), --pos learned or sincos\n");
        return 2;
    }
    /* Kept tokens (MAE's visible ones), when the batch has them: 'keep' int64 (B, K). */
    if ((rc = tb_st_read(&bf, c->batch)) < 0)
        goto fail;
    const struct tb_st_tensor *keep = tb_st_find(bf, "keep");
    if (keep) {
        if (keep->dtype != TB_ST_I64 || keep->n_dims != 2 || keep->shape[1] < 1 ||
            keep->shape[1] > 1 << 24) {
            fprintf(stderr, "tubelet step: %s: 'keep' must be int64 (B, K)\n", c->batch);
            goto end;
        }
        vc.keep = (int)keep->shape[1];
    }
    cli_device_say();
    if ((rc = tb_vit_open(&m, &vc)) < 0 || (rc = tb_st_read(&wf, c->weights)) < 0)
        goto fail;
    tb_params *params = tb_vit_params(m);
    if ((rc = tb_params_load(params, wf)) < 0) {
        fprintf(stderr, "tubelet step: %s: %s\n", c->weights, tb_errmsg());
        goto end;
    }
    const struct tb_st_tensor *video = tb_st_find(bf, "video"), *label = tb_st_find(bf, "label");
    const struct tb_st_tensor *dfeat = tb_st_find(bf, "dfeat");
    int64_t B0 = video && video->n_dims == 5 ? video->shape[0] : 0;
    int bad_video = !video || video->dtype != TB_ST_F32 || video->n_dims != 5 ||
                    video->shape[1] != 3 || video->shape[2] != c->frames ||
                    video->shape[3] != vc.height || video->shape[4] != vc.width;
    int64_t feat_floats = B0 * c->dim * (vc.pool == TB_POOL_NONE
                                             ? (vc.keep ? vc.keep
                                                        : (int64_t)(c->frames / vc.tubelet) *
                                                              (vc.height / c->patch) *
                                                              (vc.width / c->patch))
                                             : 1);
    int bad_target = c->feature_grad
                         ? !dfeat || dfeat->dtype != TB_ST_F32 || dfeat->shape[0] != B0 ||
                               dfeat->n != feat_floats || (keep && keep->shape[0] != B0)
                         : !label || label->dtype != TB_ST_I64 || label->n_dims != 1 ||
                               label->shape[0] != B0;
    if (bad_video || bad_target || B0 < 1 || B0 > 65536) {
        fprintf(stderr, "tubelet step: %s: needs 'video' float32 (B,3,%d,%d,%d) and %s\n",
                c->batch, c->frames, vc.height, vc.width,
                c->feature_grad ? "'dfeat' float32 (B,D), or (B,N,D) with --pool none"
                                : "'label' int64 (B)");
        goto end;
    }
    /* Drop path's factors, when the batch has them: 'drop' float32 (L, 2, B). */
    const struct tb_st_tensor *drop = tb_st_find(bf, "drop");
    if (drop && (drop->dtype != TB_ST_F32 || drop->n_dims != 3 || drop->shape[0] != c->depth ||
                 drop->shape[1] != 2 || drop->shape[2] != B0 || c->feature_grad)) {
        fprintf(stderr, "tubelet step: %s: 'drop' must be float32 (%d, 2, B), not with "
                "--feature-grad\n", c->batch, c->depth);
        goto end;
    }
    /* Batch mixing and head dropout, when the batch has them: 'mix' float32 (5): lam, y0, y1,
     * x0, x1 (y0 < 0: mixup, else cutmix's box), soft targets with --label-smoothing;
     * 'hmask' float32 (B, D). */
    const struct tb_st_tensor *mix = tb_st_find(bf, "mix"), *hmask = tb_st_find(bf, "hmask");
    if ((mix && (mix->dtype != TB_ST_F32 || mix->n != 5 || c->feature_grad)) ||
        (hmask && (hmask->dtype != TB_ST_F32 || hmask->n != B0 * c->dim || c->feature_grad))) {
        fprintf(stderr, "tubelet step: %s: 'mix' must be float32 (5), 'hmask' float32 (B, %d), "
                "neither with --feature-grad\n", c->batch, c->dim);
        goto end;
    }
    int box[4];
    if (mix) {
        const float *mv = mix->data;
        for (int q = 0; q < 4; q++)
            box[q] = (int)mv[1 + q];
        if (!(soft = malloc(sizeof(float) * (size_t)B0 * c->classes))) {
            fprintf(stderr, "tubelet step: out of memory\n");
            goto end;
        }
        tb_mix_targets(soft, label->data, (int)B0, c->classes, mv[0], c->smoothing);
    }
    if (c->layer_decay < 1)
        tb_params_layer_decay(params, c->depth, c->layer_decay);
    int B = (int)B0, K = c->classes, np = tb_params_count(params);
    int64_t nf = tb_params_floats(params);
    if ((rc = tb_vit_plan(m, B, NULL)) < 0 || (rc = tb_optim_init(&opt, params)) < 0)
        goto fail;
    set_hyper(&opt, c);
    losses = malloc(sizeof(float) * (size_t)c->steps);
    logits = malloc(sizeof(float) * (size_t)(K * B > feat_floats ? K * B : feat_floats));
    kept = keep ? malloc(sizeof(int32_t) * (size_t)keep->n) : NULL;
    for (int64_t i = 0; kept && i < keep->n; i++) {
        int64_t v = ((const int64_t *)keep->data)[i];
        kept[i] = v < 0 || v > INT32_MAX ? -1 : (int32_t)v;
    }
    grads = malloc(sizeof(float) * (size_t)nf);
    weights = malloc(sizeof(float) * (size_t)nf);
    outs = calloc((size_t)(2 + 2 * np), sizeof(*outs));
    if (!losses || !logits || !grads || !weights || !outs) {
        fprintf(stderr, "tubelet step: out of memory\n");
        goto end;
    }
    if (c->feature_grad) {
        /* One forward to the features, one backward from the given gradient on them. */
        if ((rc = tb_vit_set_video(m, video->data, B)) < 0 ||
            (kept && (rc = tb_vit_set_keep(m, kept)) < 0) ||
            (rc = tb_vit_run(m, NULL, 0, NULL)) < 0 || (rc = tb_vit_features(m, logits)) < 0 ||
            (rc = tb_vit_backward_features(m, dfeat->data)) < 0)
            goto fail;
        outs[n_out] = (struct tb_st_tensor){.name = "feat", .dtype = TB_ST_F32, .n_dims = 2,
                                            .shape = {B, c->dim}, .n = feat_floats,
                                            .data = logits};
        if (vc.pool == TB_POOL_NONE) {
            outs[n_out].n_dims = 3;
            outs[n_out].shape[1] = feat_floats / B / c->dim;
            outs[n_out].shape[2] = c->dim;
        }
        n_out++;
        for (int i = 0; i < np; i++) {
            const struct tb_param *p = tb_params_at(params, i);
            if (!strncmp(p->name, "head.", 5))
                continue;
            if ((rc = tb_params_read_grad(params, i, grads + p->offset)) < 0)
                goto fail;
            out_tensor(&outs[n_out++], "grad.", p, grads + p->offset);
        }
    } else {
        for (int s = 0; s < c->steps; s++) {
            const float *mv = mix ? mix->data : NULL;
            if ((rc = tb_vit_set_video(m, video->data, B)) < 0 ||
                (mv && (rc = tb_vit_mix(m, mv[0], mv[1] < 0 ? NULL : box)) < 0) ||
                (drop && (rc = tb_vit_set_drop_path(m, drop->data)) < 0) ||
                (hmask && (rc = tb_vit_set_head_dropout(m, hmask->data)) < 0) ||
                (rc = soft ? tb_vit_run_soft(m, soft, &losses[s])
                           : tb_vit_run(m, label->data, (float)c->smoothing, &losses[s])) < 0 ||
                (rc = tb_vit_backward(m)) < 0)
                goto fail;
            if (s == 0 && ((rc = tb_vit_logits(m, logits)) < 0 ||
                           (rc = read_grads(params, grads)) < 0))
                goto fail;
            if ((rc = tb_optim_update(&opt, 1.0f)) < 0)
                goto fail;
        }
        outs[n_out++] = (struct tb_st_tensor){.name = "loss", .dtype = TB_ST_F32, .n_dims = 1,
                                              .shape = {c->steps}, .n = c->steps,
                                              .data = losses};
        outs[n_out++] = (struct tb_st_tensor){.name = "logits", .dtype = TB_ST_F32,
                                              .n_dims = 2, .shape = {B, K},
                                              .n = (int64_t)B * K, .data = logits};
        if ((rc = add_weights(outs, &n_out, params, grads, weights)) < 0)
            goto fail;
    }
    if ((rc = tb_st_write(c->out, outs, n_out, NULL)) < 0)
        goto fail;
    if (c->feature_grad)
        printf("step: features and gradients of %d clips on %s, wrote %s\n", B,
               tb_vit_backend(m), c->out);
    else
        printf("step: %d steps on %d clips on %s, loss %.6f -> %.6f, wrote %s\n", c->steps, B,
               tb_vit_backend(m), losses[0], losses[c->steps - 1], c->out);
    status = 0;
    goto end;
fail:
    cli_report("step", rc);
end:
    tb_optim_free(&opt);
    tb_vit_close(&m);
    tb_st_free(&wf);
    tb_st_free(&bf);
    free(outs);
    free(losses);
    free(logits);
    free(grads);
    free(weights);
    free(kept);
    free(soft);
    return status;
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
