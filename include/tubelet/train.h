/* include/tubelet/train.h - optimisation and training: AdamW over a model's parameter
 * registry (PyTorch's update; no decay on biases, norms, position and class embeddings),
 * global gradient-norm clipping, the learning-rate schedule (linear warmup, cosine decay),
 * checkpoints, and the one training loop every task runs on (tb_train: schedule, clipping,
 * logging, Ctrl-C, non-finite stop, checkpoint and exact resume, data parallelism), with
 * classification (`cls`) as its first task. Optimizer state lives on the model's backend.
 * Tests: tests/test_vit.c (AdamW against PyTorch), tests/test_train.c. */
#ifndef TUBELET_TRAIN_H
#define TUBELET_TRAIN_H

#include "tubelet/data.h"
#include "tubelet/metrics.h"
#include "tubelet/model.h"
#include "tubelet/safetensors.h"
#include "tubelet/text.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tb_optimizer {
    TB_OPT_ADAMW,           /* PyTorch's AdamW */
    TB_OPT_LION,            /* AVION's Lion: the sign of an interpolated momentum, decoupled
                             * weight decay (lr about a tenth of AdamW's, decay ten times) */
    TB_OPT_SGD,             /* PyTorch's SGD with momentum (beta1) and coupled weight decay:
                             * AVION's EK-100 classification */
};

struct tb_optim {
    enum tb_optimizer kind;
    float lr, beta1, beta2, eps, weight_decay; /* eps: AdamW's only; SGD: beta1 is the
                                                * momentum, beta2 unused */
    int64_t step;           /* updates done */
    tb_params *params;      /* borrowed */
    float *m, *v;           /* backend memory: the moments, in the parameters' layout from
                             * float base (v: AdamW's only; SGD's m: its momentum buffer) */
    /* ZeRO stage 1 (--zero, AVION's --use-zero, PyTorch's ZeroRedundancyOptimizer): with more
     * than one process each updates the gradient spans it owns (consecutive spans, about equal
     * floats a process) and holds only their moments, then every span's weights are broadcast
     * from its owner. Gradients are averaged whole as without it (DDP's all-reduce). */
    int zero;          /* set before tb_optim_init */
    int *owner;        /* sharded: each span's process; NULL otherwise */
    int64_t base, end; /* the floats [base, end) of the parameters this process updates */
    float *full;       /* the whole state on the host (rank 0, tbi_optim_gather) */
};

/* Allocate zero moments for r's parameters (this process's share with zero); opt->kind and
 * opt->zero are read (the caller sets them first, as every hyper-parameter). */
TB_API int tb_optim_init(struct tb_optim *opt, tb_params *r);
/* Frees the moments and forgets the parameters: a second call does nothing (it reads no
 * registry, which may be gone with its model by then). */
TB_API void tb_optim_free(struct tb_optim *opt);
/* One update of every parameter from its gradient times grad_scale (1, or tb_clip_factor's:
 * clipping folded into the update, PyTorch's clip_grad_norm_ + step to the bit), at opt->lr. */
TB_API int tb_optim_update(struct tb_optim *opt, float grad_scale);
/* The same in pieces, for fused updates (tb_params_fuse): the step's count once, then each
 * gradient span's parameters as the backward completes it (each element's update is its
 * own, so the pieces give tb_optim_update's bits). */
TB_API void tb_optim_begin_step(struct tb_optim *opt);
TB_API int tb_optim_update_span(struct tb_optim *opt, int span, float grad_scale);
/* "adamw", "lion" or "sgd", and back (-1 for an unknown name). */
TB_API const char *tb_optimizer_name(enum tb_optimizer kind);
TB_API int tb_optimizer_parse(const char *name);
/* The optimizer's state tensors a parameter has (AdamW 2, Lion and SGD 1), and state k's name
 * in a checkpoint ("exp_avg", "exp_avg_sq"; SGD: PyTorch's "momentum_buffer"). */
TB_API int tb_optimizer_states(enum tb_optimizer kind);
TB_API const char *tb_optimizer_state_name(enum tb_optimizer kind, int k);

/* The global L2 norm of r's gradients, into *norm. */
TB_API int tb_grad_norm(tb_params *r, double *norm);
/* torch.nn.utils.clip_grad_norm_'s factor for gradients of that norm: max_norm / (norm +
 * 1e-6) when norm > max_norm > 0, else 1. */
TB_API float tb_clip_factor(double norm, double max_norm);

/* Learning rate at step (0-based) of total: a linear warmup over warmup steps, from
 * warmup_lr toward base_lr (step s: warmup_lr + (base_lr - warmup_lr) (s + 1) / warmup), then
 * cosine decay to min_lr. */
TB_API float tb_lr_schedule(int64_t step, int64_t total, int64_t warmup, float warmup_lr,
                            float base_lr, float min_lr);

/* ---- fine-tuning's batch augmentation and regularisation ----------------------------------
 *
 * timm's Mixup in batch mode (one draw per batch: every clip mixed with the batch's reverse),
 * its soft targets, timm's RandomErasing (VideoMAE's fine-tuning) and dropout before the head;
 * each draw keyed by the batch or the clip (rng.h's purposes), never by a thread, so any
 * worker count gives the same batch. Tests: tests/test_mixup.c (tests/ref/mixup_ref.py). */

struct tb_mix_opts {
    double mixup, cutmix;   /* Beta(alpha, alpha)'s alpha of each; 0: off (both: no mixing) */
    double prob;            /* a batch is mixed with this probability (timm's mix_prob: 1) */
    double switch_prob;     /* both on: the share of mixed batches that cutmix (0.5) */
};

/* One batch's draw: lam 1 is no mixing; cutmix: box (y0, y1, x0, x1, end exclusive). */
struct tb_mix {
    float lam;
    int cutmix;
    int box[4];
};

/* Batch `batch` of epoch's draw on process rank, for frames of H x W: timm's
 * _params_per_batch (mixed with probability prob; both on: cutmix with switch_prob; lam from
 * Beta(alpha, alpha)), then for cutmix tb_mix_box at a uniform centre. */
TB_API void tb_mix_draw(struct tb_mix *out, const struct tb_mix_opts *o, uint64_t seed,
                        int64_t epoch, int64_t batch, int rank, int H, int W);
/* timm's rand_bbox with correct_lam: a box of sides int(H sqrt(1 - lam)), int(W sqrt(1 -
 * lam)) centred at (cy, cx), clipped to the frame; *lam_out = 1 - its area / (H W). */
TB_API void tb_mix_box(int box[4], float *lam_out, double lam, int cy, int cx, int H, int W);
/* timm's mixup_target: targets (B, K) = lam y(b) + (1 - lam) y(B-1-b), y the one-hot rows
 * of labels smoothed (off smoothing / K, on 1 - smoothing + off). */
TB_API void tb_mix_targets(float *targets, const int64_t *labels, int B, int K, float lam,
                           double smoothing);

enum tb_erase_mode {
    TB_ERASE_CLIP,          /* VideoMAE's cube: one draw per clip, the box through every frame
                             * (100 attempts) */
    TB_ERASE_FRAME,         /* timm's per image: every frame its own draw (10 attempts) */
};

/* RandomErasing (mode pixel: normal noise; one box, area 0.02-1/3 of the frame, aspect
 * 0.3-1/0.3) for clips that are dataset samples index (B) of epoch: boxes (B, T, 4) as
 * tb_vit_erase takes them, a clip (or frame) erased with probability prob; streams (B) the
 * values' streams. Each clip's draws from (seed, TB_RNG_ERASE, epoch, index) alone. */
TB_API void tb_erase_draw(int32_t *boxes, uint64_t *streams, int B, int T, int H, int W,
                          double prob, enum tb_erase_mode mode, uint64_t seed, int64_t epoch,
                          const int64_t *index);
/* Dropout masks (B, D) for tb_vit_set_head_dropout: each value 0 with probability rate, else
 * 1 / (1 - rate); clip b's from (seed, TB_RNG_DROPOUT, epoch, index[b]) alone. */
TB_API void tb_dropout_draw(float *mask, int B, int D, double rate, uint64_t seed,
                            int64_t epoch, const int64_t *index);

/* ---- settings a run stores in its checkpoint ---------------------------------------------- */

enum tb_label_kind { TB_LABEL_VERB = 0, TB_LABEL_NOUN = 1, TB_LABEL_ACTION = 2 };
/* The class of an annotation item for a label kind (its verb, noun or action id). */
TB_API int tb_item_label(const struct tb_ann_item *it, enum tb_label_kind k);

/* A classifier's label space: what each output of its head means, carried in its checkpoint
 * (src/train/labels.c). names[i]: class i's name where the run's files named it (EPIC's verb
 * and noun columns; an action's "verb:noun"), else NULL; actions: the (verb, noun) pair of
 * each id, AVION's numbering over train + val. */
struct tb_label_space {
    enum tb_label_kind kind;
    int n_classes;
    char **names;             /* (n_classes) */
    int *verb, *noun;         /* (n_classes) for actions, else NULL */
};
/* From the items of sets (their labels of kind numbered already: tb_ann_map_actions for
 * actions); a class named two ways is TB_EINVAL naming the row. */
TB_API int tb_label_space_build(struct tb_label_space **out, enum tb_label_kind kind,
                                int n_classes, const struct tb_annotations *const *sets,
                                int n_sets);
TB_API void tb_label_space_free(struct tb_label_space **s);
/* Every item of a inside s: its class one of s's, its name (where both name it) and, for
 * actions, its pair the same; else an error naming the file, line and both meanings. */
TB_API int tb_label_space_check(const struct tb_label_space *s, const struct tb_annotations *a);
/* Number a's actions as s does (an evaluation without the run's training file); a pair s
 * lacks is TB_EINVAL naming its line. */
TB_API int tb_label_space_map_actions(const struct tb_label_space *s, struct tb_annotations *a);
/* The label space a checkpoint carries: *out NULL (and 0) when it carries none (a
 * checkpoint of another task, or one written before tubelet recorded them). */
TB_API int tb_ckpt_label_space(const char *path, struct tb_label_space **out);

/* Normalisation presets (data.h's constants, 0-255 scale). */
enum tb_norm { TB_NORM_OPENAI, TB_NORM_IMAGENET };
TB_API void tb_norm_values(enum tb_norm n, const float **mean, const float **std);

/* What a run trains and validates on, as every checkpoint records it (its "data" metadata):
 * each annotation set's rows and a CRC-32C of what the run reads of them, in order (video,
 * window, frame count, classes, noun set, text, captions, narration id), e.g. "train 102 rows
 * 1a2b3c4d; val 25 rows 0f0e0d0c". A resume compares it with the checkpoint's. */
#define TB_DATA_ID_MAX 96
struct tb_train_opts;
TB_API void tb_train_data_id(const struct tb_train_opts *o, char out[TB_DATA_ID_MAX]);

/* What a checkpoint says of the run that wrote it: the model, and how clips were made. */
struct tb_ckpt_info {
    struct tb_vit_config model;  /* backend: NULL */
    char task[16];
    enum tb_sampler sampler;
    int stride;
    enum tb_norm norm;
    int norm_recorded;           /* 1: the checkpoint names its normalisation */
    enum tb_label_kind label;    /* the classes its head was trained on (verb: unrecorded) */
    int label_recorded;          /* 1: the checkpoint names its label kind */
    struct tb_clip_config clip;  /* task clip: the text tower, projections, temperature */
    int max_margin;              /* task clip: its loss was the max-margin one (else InfoNCE) */
    double margin;               /* and its margin */
    struct tb_mae_config mae;    /* task mae: masks, decoder, target (enc: model) */
    char data[TB_DATA_ID_MAX];   /* tb_train_data_id of the run's data; "" when unrecorded */
    int64_t global_batch;        /* processes x micro-batches x clips a step; 0 unrecorded */
    double best;                 /* the run's best evaluation so far (retrieval's mean mAP,
                                  * else top-1) and after which epoch; best_epoch 0: none */
    int64_t best_epoch;
};
TB_API int tb_ckpt_info(const char *path, struct tb_ckpt_info *info);
/* info's settings, as its checkpoint records them (its task's keys, then the settings chosen
 * by flag where they are not their default: src/train/settings.c's one table), as one JSON
 * object with numbers as numbers, into *json (malloc'd; the caller frees it). 0 or TB_ENOMEM.
 * Python's tubelet.checkpoint_settings reads it. */
TB_API int tb_ckpt_settings_json(const struct tb_ckpt_info *info, char **json);

/* ---- checkpoints ------------------------------------------------------------------------ */

/* Where training is: the next batch to run is batch `batch` of epoch `epoch`; `step` counts
 * the updates done. */
struct tb_train_pos {
    int64_t epoch, batch, step;
};

/* Save the parameters under their names, the optimizer's state as "optimizer.<state>.<name>"
 * (tb_optimizer_state_name's; opt may be NULL), the position and meta (more "key":"value"
 * pairs, or NULL: the run's settings) as metadata, in one safetensors file written
 * atomically. PyTorch loads the model with
 * {k: v for k, v in f.items() if not k.startswith("optimizer.")}. */
TB_API int tb_ckpt_save(const char *path, tb_params *r, const struct tb_optim *opt,
                        const struct tb_train_pos *pos, const char *meta);
/* Load parameters (and, when opt is not NULL, the moments and step) and the position (pos may
 * be NULL). */
TB_API int tb_ckpt_load(const char *path, tb_params *r, struct tb_optim *opt,
                        struct tb_train_pos *pos);

/* ---- the training loop ------------------------------------------------------------------- */

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
    int views, crops;                   /* the clips of each item: temporal views x crops */
    double top1, top5;                  /* fractions, views and crops averaged (clip: zero-shot
                                         * classification by class-name prompts) */
    double loss;                        /* mean cross-entropy of the averaged prediction */
    double loss_logits;                 /* cls: the same of the averaged logits' softmax */
    /* --task cls: the label's scores (metrics.h: top-k ties as the mean over their orders,
     * mean class accuracy) for each way of averaging the views, indexed by enum tb_cls_avg
     * (top1/top5 above are cls[TB_CLS_AVG_PROBS]'s views with argmax's tie rule). cls_parts
     * says which of verb, noun, action are set, bit 1 << enum tb_label_kind: the label's own,
     * and with an action list (label action) all three, verbs and nouns by marginalisation. */
    int cls_parts;
    struct tb_cls_scores cls[2];
    /* --task clip: zero-shot multi-instance retrieval over the split's sentences (EK-100's
     * definitions, metrics.h), and the same code on random similarities (the baseline a
     * model must beat) */
    int retrieval, zeroshot;            /* 1: the retrieval fields, top1/top5 are set */
    int64_t n_sentences;
    double map[3], ndcg[3];             /* video->text, text->video, their mean */
    double map_random, ndcg_random;     /* the means, for random similarities */
};

struct tb_train_opts {
    const char *task;                   /* "cls" (NULL: cls), "mae" or "clip" */
    struct tb_vit_config model;         /* frames/height/width are the clips' */
    const struct tb_annotations *train_ann, *val_ann; /* val may be NULL */
    enum tb_label_kind label;
    struct tb_dataset_opts data;        /* root, ext, sampler, stride, crop (train) */
    enum tb_norm norm;
    int batch, workers, prefetch;       /* batch: clips per process and step */
    int64_t epochs;
    double lr, min_lr, warmup_epochs, weight_decay, smoothing, clip_grad;
    int fused_update;                   /* 1: each gradient span's update as the backward
                                         * completes it (tb_params_fuse); clip_grad 0 */
    int zero;                           /* 1: the optimizer state sharded across processes
                                         * (struct tb_optim's zero) */
    const char *config_text;            /* NULL, or written to out_dir/config.txt (atomically)
                                         * once the run is accepted: a refused resume leaves
                                         * the run's own */
    const struct tb_label_space *labels; /* cls: the head's label space, recorded in the
                                         * checkpoint; its action list scores EK-100's verbs
                                         * and nouns (NULL: the classes by number only) */
    int save_every;                     /* also keep out_dir/checkpoint_EPOCH.safetensors
                                         * (5 digits) every N epochs (AVION's --save-freq);
                                         * 0: none. Every run keeps last.safetensors, and
                                         * best.safetensors where an evaluation beat the
                                         * earlier ones (retrieval's mean mAP, else top-1) */
    const char *resume_note;            /* NULL, or what a resume changed ("key old -> new;
                                         * ..."): recorded in metrics.jsonl's start line */
    int accum_steps;                    /* micro-batches of `batch` clips per optimizer step,
                                         * their gradients averaged (0 or 1: one); cls, mae */
    double beta1, beta2, adam_eps;      /* the optimizer's (eps: AdamW's) */
    enum tb_optimizer optimizer;
    double warmup_lr;                   /* the warmup starts here (VideoMAE: 1e-6) */
    const char *init;                   /* fine-tuning: weights to start from (tb_params_load_from:
                                         * a checkpoint, or its encoder); NULL: none */
    enum tb_inflate inflate;            /* init: fitting a CLIP tower's temporal embedding */
    double layer_decay;                 /* cls: layer-wise lr decay (0 or 1: none; VideoMAE 0.75) */
    double drop_path;                   /* cls: stochastic depth's top rate (VideoMAE 0.1) */
    struct tb_mix_opts mix;             /* cls: mixup / cutmix (soft targets with smoothing) */
    double erase;                       /* cls: random erasing's probability (VideoMAE 0.25) */
    enum tb_erase_mode erase_mode;
    double head_dropout;                /* cls: dropout before the head (AVION 0.5) */
    struct tb_mae_config mae;           /* --task mae: masks, decoder, target (its enc is
                                         * ignored: the encoder is model) */
    struct tb_clip_config clip;         /* --task clip: the text tower and projections (its
                                         * video is ignored: the video tower is model) */
    int max_margin;                     /* clip: AVION's max-margin ranking loss (its MIR
                                         * fine-tuning) instead of InfoNCE */
    double margin;                      /* its margin (0.2) */
    const char *class_names;            /* clip: a classes CSV (id,key,...: EK-100's
                                         * EPIC_100_verb_classes.csv) for zero-shot
                                         * classification of the label; NULL or "": none */
    const char *prompt;                 /* clip: its template, "{}" the class name ("{}") */
    const char *relevancy;              /* clip: the validation split's relevancy (.npy);
                                         * NULL or "": computed from its classes */
    const char *similarity;             /* clip evaluation: also write the (clips, sentences)
                                         * similarity matrix here (.npy, float32); NULL: no */
    double relevant_captions;           /* clip: each training clip's caption drawn from the
                                         * training sentences whose relevancy with it is above
                                         * this (tb_mir_captions_open; AVION's EK-100 MIR
                                         * fine-tuning: 0.1); 0: its own narration */
    const char *train_relevancy;        /* their relevancy: a .npy or pickled array of (train
                                         * clips, sentences); NULL or "": from the classes */
    const char *train_sentences;        /* its columns: a sentence CSV (EK-100's
                                         * EPIC_100_retrieval_train_sentence.csv); NULL or "":
                                         * tb_mir_sentences_build's order */
    uint64_t seed;
    int eval_every;                     /* epochs; 0: only at the end */
    int val_views, val_crops;
    int log_every;                      /* steps between metrics lines */
    int tensorboard;                    /* 1: metrics.jsonl's numbers also as TensorBoard
                                         * scalars, in an event file of out_dir (rank 0) */
    const char *out_dir;                /* checkpoints and metrics.jsonl go here */
    const volatile int *cancel;         /* Ctrl-C: save a checkpoint and return TB_ECANCELED */
    void (*on_step)(void *user, const struct tb_train_progress *p);
    void (*on_eval)(void *user, const struct tb_eval_result *r);
    void *user;
};

/* One step's inputs to a task's model, every per-call choice explicit: what a batch of the
 * loader and the run's draws give (the task's draw), or what `tubelet step`'s batch file
 * gives. Host memory, borrowed until the step; NULL where the task or the batch has none. */
struct tb_step_input {
    int n;                           /* clips */
    const uint8_t *clips;            /* (n, T, H, W, 3): the loader's, normalised by o->norm */
    const float *video;              /* (n, 3, T, H, W), normalised (when clips is NULL) */
    const int64_t *labels;           /* cls (n) */
    const float *soft;               /* cls: soft targets (n, K), when the batch is mixed */
    float lam;                       /* cls: its mixing (< 1: mixed) */
    const int *box;                  /* and cutmix's box (NULL: mixup) */
    const int32_t *erase;            /* cls: random erasing's boxes (n, T, 4) */
    const uint64_t *erase_streams;   /* and their values' streams (n) */
    const float *drop;               /* cls: drop path's factors (L, 2, n) */
    const float *hmask;              /* cls: head dropout's masks (n, D) */
    const uint8_t *mask, *dmask;     /* mae: tube mask, running cell's (n, N); dmask NULL:
                                      * no decoder masking */
    const int32_t *ids;              /* clip: the captions' tokens (n, ctx) */
};

/* A task's steps outside the training loop, on given weights and inputs - what `tubelet
 * step` checks against PyTorch - by the very code tb_train runs: open o->task's model for
 * o->batch clips (o's model, mae, clip, norm, smoothing, loss; no data), load its parameters
 * (tb_stepper_params), then each run sets the inputs, runs one forward and backward (the
 * gradients replaced) and reads the loss. The optimizer is the caller's. */
typedef struct tb_stepper tb_stepper;
TB_API int tb_stepper_open(tb_stepper **out, const struct tb_train_opts *o);
TB_API void tb_stepper_close(tb_stepper **s);
TB_API tb_params *tb_stepper_params(tb_stepper *s);
/* The name of the backend it runs on. */
TB_API const char *tb_stepper_backend(const tb_stepper *s);
TB_API int tb_stepper_run(tb_stepper *s, const struct tb_step_input *in, float *loss);
/* Output k of the last run (cls: "logits" (B, K); mae: "pred" (B, decoded, values); clip:
 * "video_emb", "text_emb" (B, E)) into *t, host memory the stepper owns until its next run;
 * 1 past the last one. Call with t NULL before a run to keep output k of it (clip's features,
 * which its backward may overwrite). */
TB_API int tb_stepper_output(tb_stepper *s, int k, struct tb_st_tensor *t);

/* Train o->task (resuming from out_dir/last.safetensors when it exists), evaluating every
 * eval_every epochs and at the end; checkpoints after every epoch and on cancel. A loss or
 * gradient norm that is not finite stops the run with TB_ERANGE naming the step; a loader
 * failure on any process stops every process with its message. */
TB_API int tb_train(const struct tb_train_opts *o, struct tb_eval_result *final_eval);

/* Evaluate m on annotations: views x crops per item, averaged both ways (metrics.h's enum
 * tb_cls_avg: the logits, then one softmax; the views' probabilities); under mpirun each
 * process takes its share of the clips and the sums are reduced (the logits' softmax taken
 * after). top1/top5/loss are of the averaged probabilities, top-k counting an item right only
 * when its class is strictly among the k best (ties go to the lower class index, as argmax);
 * loss_logits is the cross-entropy of the averaged logits' softmax; res->cls has the label's
 * scores for both modes. actions, when not NULL, is the action list the label's action ids
 * come from (label action only, as many actions as m has classes): then res->cls has EK-100's
 * verb and noun scores too, from the marginals. A logit that is not finite is TB_ERANGE
 * naming the clip. probs, when not NULL, (ann->n_items, classes), receives each item's
 * probabilities averaged over its views and crops (float32 of the double sums; its top-1 is
 * the first largest). Memory: two (n_items, classes) arrays of doubles. */
TB_API int tb_eval_cls(tb_vit *m, const struct tb_annotations *ann,
                       const struct tb_dataset_opts *data, enum tb_label_kind label,
                       enum tb_norm norm, int views, int crops, int batch, int workers,
                       const struct tb_cls_action_list *actions, struct tb_eval_result *res,
                       float *probs);

/* res's classification scores as JSON members, each written as `, "key": value` into buf
 * (size bytes): for each level cls_parts sets, "<level>_top1", "<level>_top5" and
 * "mean_class_<level>" of the averaged probabilities, then the same keys with "_logits" of
 * the averaged logits (level: verb, noun, action). "" when none is set. TB_ERANGE when buf is
 * too small (1024 bytes always suffice). */
TB_API int tb_eval_cls_json(const struct tb_eval_result *res, char *buf, size_t size);

/* Zero-shot evaluation of a dual encoder on EPIC annotations with narrations: each item's
 * video features (views x crops of normalised features averaged; sharded over processes),
 * the split's sentences (tb_mir_sentences_build) through the text tower, cosine
 * similarities, EK-100's mAP and nDCG against the relevancy (o->relevancy's file, or
 * computed), and the same on random similarities; with o->class_names, zero-shot
 * classification of o->label by the prompt's text features (top-1/top-5, argmax's tie rule).
 * Uses o's data, norm, batch, workers, val_views, val_crops, seed, tokenized with tok's
 * context (m's). */
TB_API int tb_eval_clip(tb_clip *m, tb_tokenizer *tok, const struct tb_annotations *ann,
                        const struct tb_train_opts *o, int64_t epoch, struct tb_eval_result *res);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_TRAIN_H */
