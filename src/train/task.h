/* src/train/task.h - the task table: what a training task (cls, mae, clip) gives
 * the one training loop (loop.c), which owns everything else - the schedule, clipping,
 * logging and progress, Ctrl-C, the non-finite stop, checkpoints and exact resume, the
 * data-parallel reduction. A task owns its model and what it computes from a batch. */
#ifndef TUBELET_TRAIN_TASK_H
#define TUBELET_TRAIN_TASK_H

#include <stdio.h>

#include "core/strbuf.h"
#include "model/params.h"
#include "tubelet/safetensors.h"
#include "tubelet/train.h"

/* A label space as checkpoint metadata (,"label_space":"...") and back (labels.c). */
void tbi_label_space_meta(struct tbi_sb *sb, const struct tb_label_space *s);
int tbi_label_space_parse(struct tb_label_space **out, const char *text, const char *path);

/* The settings a checkpoint records, from one table (settings.c): s for the task of that
 * name from o (sampler, stride, normalisation, label, loss), its model's configs for the task
 * to fill; written into sb as "key":"value" pairs in the task's order; read back from a
 * checkpoint's metadata (path for messages): 0 or TB_EFORMAT naming the key. */
void tbi_settings_init(struct tb_ckpt_info *s, const char *task, const struct tb_train_opts *o);
int tbi_settings_meta(struct tbi_sb *sb, const struct tb_ckpt_info *s);
int tbi_settings_read(const char *meta, const char *path, struct tb_ckpt_info *s);
/* The string value of "key" in a checkpoint's metadata (a flat JSON object of strings) into
 * out (size bytes); 0, or -1 where it is absent or longer (checkpoint.c). */
int tbi_meta_get(const char *meta, const char *key, char *out, size_t size);

struct tbi_task {
    const char *name;
    /* What the task refuses of o (another task's settings, what its loss cannot take): 0, or
     * TB_EINVAL naming the setting; the loop asks before it writes anything. */
    int (*check)(const struct tb_train_opts *o);
    /* Build the model for o, planned for o->batch clips; *state is the task's. */
    int (*open)(void **state, const struct tb_train_opts *o);
    void (*close)(void **state);
    /* The model's parameter registry (initialised by the loop, or loaded on resume). */
    tb_params *(*params)(void *state);
    /* The run's settings as "key":"value" pairs for the checkpoint (model config, sampler,
     * normalisation, ...): what evaluation and resumption need. */
    int (*meta)(void *state, const struct tb_train_opts *o, struct tbi_sb *sb);
    /* Batch b's inputs (its clips, and the draws its samples' keys give: labels, masks,
     * mixing, drop path, captions) into *in, in the task's own buffers. */
    int (*draw)(void *state, const struct tb_train_opts *o, const struct tb_batch *b,
                struct tb_step_input *in);
    /* The inputs onto the model (the loop releases the batch right after), then one forward
     * and backward: the mean loss of this process's clips into *loss (backend memory, 1
     * float: the loop reads it once per log interval), gradients of every parameter. */
    int (*set)(void *state, const struct tb_train_opts *o, const struct tb_step_input *in);
    int (*step)(void *state, const struct tb_train_opts *o, float *loss);
    /* What `tubelet step` writes beside the gradients: output k of the last step (cls: its
     * logits; mae: its predictions; clip: both towers' features) into *t, host memory the
     * task owns; 1 past the last one. t NULL: keep output k of the next step (what the
     * backward would overwrite). */
    int (*output)(void *state, int k, struct tb_st_tensor *t);
    /* Evaluate on o->val_ann (every process runs it: it is sharded and reduced inside); NULL
     * for a task without an evaluation of its own (mae: its measure is the fine-tuning). */
    int (*evaluate)(void *state, const struct tb_train_opts *o, struct tb_eval_result *r);
};

extern const struct tbi_task tbi_task_cls, tbi_task_mae, tbi_task_clip;
/* The task called name (NULL or "": cls); TB_EUNSUPPORTED naming the tasks (loop.c). */
int tbi_task_find(const char *name, const struct tbi_task **out);

/* The refusals tasks share (loop.c): fine-tuning's augmentations and layer decay (cls's), the
 * relevant captions (clip's), named as --task `task` does not read them. */
int tbi_refuse_finetune(const struct tb_train_opts *o, const char *task);
int tbi_refuse_captions(const struct tb_train_opts *o, const char *task);

/* The loop's updates and norm on the backend (optim.c): as tb_optim_update(_span), with the
 * factor and the non-finite flag read from st (backend memory) by the update ops - nothing is
 * written once st->bad is set; the squares of every gradient span added to *acc (backend). */
struct tbi_step_stats;
int tbi_optim_update_checked(struct tb_optim *opt, const struct tbi_step_stats *st);
/* Moment k's backend memory for the parameter at offset, NULL where this process holds none
 * (--zero: another process's span). */
float *tbi_optim_state(const struct tb_optim *opt, int k, int64_t offset);
/* --zero: the whole state into opt->full on rank 0 (for a checkpoint), each span's moments
 * from its process; every process calls it. Without zero: nothing. */
int tbi_optim_gather(struct tb_optim *opt);
/* Frees what tbi_optim_gather put on the host. */
void tbi_optim_release(struct tb_optim *opt);
int tbi_optim_update_span_checked(struct tb_optim *opt, int span,
                                  const struct tbi_step_stats *st);
int tbi_grad_sum_squares_acc(tb_params *r, double *acc);

/* A loss the model read back to the host (tb_vit_run, tb_mae_run, tb_clip_max_margin give
 * it there) into the step's backend float: a copy onto the device, no read (the model's own
 * read is the sync docs/DEVELOPING.md lists as the models' to remove). */
static inline int tbi_task_loss(tb_params *r, float *loss, float host)
{
    return r->be->ops->to_device(r->be, loss, &host, sizeof(host));
}

/* What a task's open does between opening its model (registry r) and planning it: fused
 * updates when o asks for them (the loop gives the update itself later). 0. */
static inline int tbi_task_fuse(tb_params *r, const struct tb_train_opts *o)
{
    if (o->fused_update)
        tb_params_fuse(r, NULL, NULL);
    return 0;
}

/* A task's output tensor (float32, up to 3 dimensions, d_k > 0) over data. 0. */
static inline int tbi_task_out(struct tb_st_tensor *t, const char *name, float *data, int n_dims,
                               int64_t d0, int64_t d1, int64_t d2)
{
    const int64_t d[3] = {d0, d1, d2};
    *t = (struct tb_st_tensor){.dtype = TB_ST_F32, .n_dims = n_dims, .n = 1, .data = data};
    snprintf(t->name, sizeof(t->name), "%s", name);
    for (int k = 0; k < n_dims; k++) {
        t->shape[k] = d[k];
        t->n *= d[k];
    }
    return 0;
}

#endif /* TUBELET_TRAIN_TASK_H */
