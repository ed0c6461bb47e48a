/* src/cli/cmd_step.c - `tubelet step`: training steps of a video ViT on given weights and a
 * given batch, writing the losses, the first step's logits and gradients, and the final
 * weights - for checking against PyTorch (tests/ref/vit_ref.py) and for debugging a model.
 * Tests: tests/test_vit.c. */
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
    char *weights, *batch, *out, *backend;
    int steps, recompute, recompute_mlp, feature_grad;
    double lr, wd, smoothing, beta1, beta2, eps;
};

#define F(name, type, field, def, meta, help, ...)                                            \
    CLI_FLAG(name, type, struct step_config, field, def, meta, help, __VA_ARGS__)
static const struct cli_flag step_flags[] = {
    F("dim", CLI_INT, dim, "192", "D", "embedding width", 1, 65536),
    F("depth", CLI_INT, depth, "12", "L", "blocks", 1, 1024),
    F("heads", CLI_INT, heads, "3", "NH", "attention heads", 1, 1024),
    F("patch", CLI_INT, patch, "16", "P", "patch size (pixels)", 1, 1024),
    F("tubelet", CLI_INT, tubelet, "2", "TU", "frames per patch", 1, 64),
    F("frames", CLI_INT, frames, "8", "T", "frames per clip", 1, 1024),
    F("size", CLI_SIZE, size, "112x112", "HxW", "frame height x width", 1, 8192),
    F("classes", CLI_INT, classes, "10", "K", "classes (0: no head, with --feature-grad)", 0,
      1000000),
    F("pool", CLI_STR, pool, "mean", "NAME", "cls (class token, norm), mean (fc_norm) or none "
      "(every token normed; with --feature-grad and --classes 0)", CLI_NO_RANGE),
    F("pos", CLI_STR, pos, "sincos", "NAME", "learned or sincos positions", CLI_NO_RANGE),
    F("weights", CLI_STR, weights, NULL, "W.safetensors", "the model's parameters",
      CLI_NO_RANGE),
    F("batch", CLI_STR, batch, NULL, "B.safetensors",
      "video float32 (B,3,T,H,W) and label int64 (B)", CLI_NO_RANGE),
    F("out", CLI_STR, out, NULL, "O.safetensors",
      "loss (S), logits and grad.<name> of the first step, the final weights", CLI_NO_RANGE),
    F("steps", CLI_INT, steps, "1", "S", "AdamW steps on the same batch", 1, 100000),
    F("backend", CLI_STR, backend, "cpu", "NAME", "cpu, or cpu-guarded (a test backend)",
      CLI_NO_RANGE),
    F("feature-grad", CLI_BOOL, feature_grad, "false", "",
      "one backward from the batch's 'dfeat' (B, D) on the features (the head's input): "
      "writes 'feat' and every gradient but the head's", CLI_NO_RANGE),
    F("recompute", CLI_BOOL, recompute, "false", "",
      "keep only block inputs; the backward reruns each block's forward", CLI_NO_RANGE),
    F("recompute-mlp", CLI_INT, recompute_mlp, "0", "K",
      "the first K blocks keep no MLP hidden layer; the backward recomputes it", 0, 1000000),
    F("lr", CLI_DOUBLE, lr, "0.001", "X", "learning rate", 0, 10),
    F("wd", CLI_DOUBLE, wd, "0.05", "Y", "weight decay (not on biases, norms, embeddings)", 0,
      10),
    F("label-smoothing", CLI_DOUBLE, smoothing, "0.1", "Z", "label smoothing", 0, 1),
    F("beta1", CLI_DOUBLE, beta1, "0.9", "B1", "AdamW beta1", 0, 1),
    F("beta2", CLI_DOUBLE, beta2, "0.999", "B2", "AdamW beta2", 0, 1),
    F("eps", CLI_DOUBLE, eps, "1e-08", "E", "AdamW epsilon", 0, 1),
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

static int run_step(void *config, int n_args, char **args)
{
    struct step_config *c = config;
    struct tb_st_file *wf = NULL, *bf = NULL;
    tb_vit *m = NULL;
    struct tb_adamw opt = {0};
    struct tb_st_tensor *outs = NULL;
    float *losses = NULL, *logits = NULL, *grads = NULL, *weights = NULL;
    int32_t *kept = NULL;
    int rc, status = 1, n_out = 0;
    (void)n_args;
    (void)args;
    if (!c->weights[0] || !c->batch[0] || !c->out[0]) {
        fprintf(stderr, "tubelet step: --weights, --batch and --out are required\n");
        return 2;
    }
    struct tb_vit_config vc = {
        .dim = c->dim, .depth = c->depth, .heads = c->heads, .patch = c->patch,
        .tubelet = c->tubelet, .frames = c->frames, .height = c->size.w, .width = c->size.h,
        .classes = c->classes,
        .pool = !strcmp(c->pool, "cls") ? TB_POOL_CLS : !strcmp(c->pool, "none") ? TB_POOL_NONE
                                                                                 : TB_POOL_MEAN,
        .pos = !strcmp(c->pos, "learned") ? TB_POS_LEARNED : TB_POS_SINCOS,
        .recompute = c->recompute, .recompute_mlp = c->recompute_mlp, .backend = c->backend,
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
                                                        : (int64_t)(c->frames / c->tubelet) *
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
    int B = (int)B0, K = c->classes, np = tb_params_count(params);
    int64_t nf = tb_params_floats(params);
    if ((rc = tb_vit_plan(m, B, NULL)) < 0 || (rc = tb_adamw_init(&opt, params)) < 0)
        goto fail;
    opt.lr = (float)c->lr;
    opt.weight_decay = (float)c->wd;
    opt.beta1 = (float)c->beta1;
    opt.beta2 = (float)c->beta2;
    opt.eps = (float)c->eps;
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
            if ((rc = tb_vit_forward(m, video->data, B, label->data, (float)c->smoothing,
                                     &losses[s])) < 0 ||
                (rc = tb_vit_backward(m)) < 0)
                goto fail;
            if (s == 0) {
                if ((rc = tb_vit_logits(m, logits)) < 0)
                    goto fail;
                for (int i = 0; i < np; i++)
                    if ((rc = tb_params_read_grad(params, i,
                                                  grads + tb_params_at(params, i)->offset)) < 0)
                        goto fail;
            }
            if ((rc = tb_adamw_update(&opt, 1.0f)) < 0)
                goto fail;
        }
        outs[n_out++] = (struct tb_st_tensor){.name = "loss", .dtype = TB_ST_F32, .n_dims = 1,
                                              .shape = {c->steps}, .n = c->steps,
                                              .data = losses};
        outs[n_out++] = (struct tb_st_tensor){.name = "logits", .dtype = TB_ST_F32,
                                              .n_dims = 2, .shape = {B, K},
                                              .n = (int64_t)B * K, .data = logits};
        for (int i = 0; i < np; i++) {
            const struct tb_param *p = tb_params_at(params, i);
            if ((rc = tb_params_read(params, i, weights + p->offset)) < 0)
                goto fail;
            out_tensor(&outs[n_out++], "grad.", p, grads + p->offset);
            out_tensor(&outs[n_out++], "", p, weights + p->offset);
        }
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
    tb_adamw_free(&opt);
    tb_vit_close(&m);
    tb_st_free(&wf);
    tb_st_free(&bf);
    free(outs);
    free(losses);
    free(logits);
    free(grads);
    free(weights);
    free(kept);
    return status;
}

const struct cli_command cli_cmd_step = {
    .name = "step",
    .args = "",
    .summary = "run training steps of a video ViT on given weights and batch (for checking)",
    .details = "Writes to --out: 'loss' (S), the first step's 'logits' (B,K) and 'grad.<name>'\n"
               "for every parameter, and the weights after S AdamW steps under their own names\n"
               "(PyTorch's AdamW; no decay on biases, norms, pos/cls embeddings). --size is\n"
               "height x width.",
    .flags = step_flags,
    .n_flags = (int)(sizeof(step_flags) / sizeof(step_flags[0])),
    .config_size = sizeof(struct step_config),
    .min_args = 0,
    .max_args = 0,
    .run = run_step,
};
