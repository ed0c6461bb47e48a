/* include/tubelet/train.h - optimisation: AdamW over a model's parameters (PyTorch's update;
 * no decay on biases, norms, position and class embeddings), global gradient-norm clipping,
 * and the learning-rate schedule (linear warmup, cosine decay). Training loops and
 * checkpoints come with `tubelet train`. Tests: tests/test_vit.c. */
#ifndef TUBELET_TRAIN_H
#define TUBELET_TRAIN_H

#include "tubelet/model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tb_adamw {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step;           /* updates done */
    float *m, *v;           /* first and second moments, the model's parameter layout */
    int64_t n;
};

/* Allocate zero moments for m's parameters. Hyper-parameters are the caller's to set. */
TB_API int tb_adamw_init(struct tb_adamw *opt, tb_vit *m);
TB_API void tb_adamw_free(struct tb_adamw *opt);
/* One update of every parameter from the model's gradients times grad_scale (1, or
 * tb_clip_factor's: clipping folded into the update, PyTorch's clip_grad_norm_ + step to the
 * bit), at opt->lr. */
TB_API void tb_adamw_update(struct tb_adamw *opt, tb_vit *m, float grad_scale);

/* The global L2 norm of the gradients. */
TB_API double tb_grad_norm(tb_vit *m);
/* torch.nn.utils.clip_grad_norm_'s factor for gradients of that norm: max_norm / (norm +
 * 1e-6) when norm > max_norm > 0, else 1. */
TB_API float tb_clip_factor(double norm, double max_norm);

/* Learning rate at step (0-based) of total: linear warmup from 0 over warmup steps, then
 * cosine decay to min_lr. */
TB_API float tb_lr_schedule(int64_t step, int64_t total, int64_t warmup, float base_lr,
                            float min_lr);

/* ---- checkpoints ------------------------------------------------------------------------ */

/* Where training is: the next batch to run is batch `batch` of epoch `epoch`; `step` counts
 * the updates done. */
struct tb_train_pos {
    int64_t epoch, batch, step;
};

/* Save the model's parameters under their timm names, the AdamW moments as
 * "optimizer.exp_avg.<name>" / "optimizer.exp_avg_sq.<name>" (opt may be NULL), and the
 * model config, position and extra "key":"value" pairs (extra may be NULL) as metadata, in one
 * safetensors file written atomically. PyTorch loads the model with
 * {k: v for k, v in f.items() if not k.startswith("optimizer.")}. */
TB_API int tb_ckpt_save(const char *path, tb_vit *m, const struct tb_adamw *opt,
                        const struct tb_train_pos *pos, const char *extra);
/* The model config stored in a checkpoint. */
TB_API int tb_ckpt_config(const char *path, struct tb_vit_config *cfg);
/* Load parameters (and, when opt is not NULL, the moments and step) and the position. */
TB_API int tb_ckpt_load(const char *path, tb_vit *m, struct tb_adamw *opt,
                        struct tb_train_pos *pos);

/* ---- classification training ------------------------------------------------------------- */

#include "tubelet/data.h"

enum tb_label_kind { TB_LABEL_VERB = 0, TB_LABEL_NOUN = 1, TB_LABEL_ACTION = 2 };

/* The class of an annotation item for a label kind (its verb, noun or action id). */
TB_API int tb_item_label(const struct tb_ann_item *it, enum tb_label_kind k);

struct tb_train_progress {
    int64_t epoch, epochs, step, steps; /* steps: all of the run */
    float loss, lr;
    double grad_norm;
    double clips_per_s;                 /* over the last logging interval */
    double elapsed_s, eta_s;
};

struct tb_eval_result {
    int64_t epoch;
    int64_t n_items;
    double top1, top5;                  /* fractions, views and crops averaged */
    double loss;                        /* mean cross-entropy of the averaged prediction */
};

struct tb_train_opts {
    struct tb_vit_config model;         /* frames/height/width are the clips' */
    const struct tb_annotations *train_ann, *val_ann; /* val may be NULL */
    enum tb_label_kind label;
    struct tb_dataset_opts data;        /* root, ext, sampler, stride, crop (train) */
    int batch, workers, prefetch;
    int64_t epochs;
    double lr, min_lr, warmup_epochs, weight_decay, smoothing, clip_grad;
    uint64_t seed;
    int eval_every;                     /* epochs; 0: only at the end */
    int val_views, val_crops;
    int log_every;                      /* steps between metrics lines */
    const char *out_dir;                /* checkpoints and metrics.jsonl go here */
    const char *config_text;            /* stored in checkpoints, may be NULL */
    const volatile int *cancel;         /* Ctrl-C: save a checkpoint and return TB_ECANCELED */
    void (*on_step)(void *user, const struct tb_train_progress *p);
    void (*on_eval)(void *user, const struct tb_eval_result *r);
    void *user;
};

/* Train (resuming from out_dir/last.safetensors when it exists), evaluating every eval_every
 * epochs and at the end; checkpoints after every epoch and on cancel. A loss that is not
 * finite stops the run with TB_ERANGE naming the step. */
TB_API int tb_train_cls(const struct tb_train_opts *o, struct tb_eval_result *final_eval);

/* Evaluate m on annotations: views x crops per item, probabilities averaged. predicted, when
 * not NULL, has ann->n_items places and receives each item's top-1 class. */
TB_API int tb_eval_cls(tb_vit *m, const struct tb_annotations *ann,
                       const struct tb_dataset_opts *data, enum tb_label_kind label, int views,
                       int crops, int batch, int workers, struct tb_eval_result *res,
                       int *predicted);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_TRAIN_H */
