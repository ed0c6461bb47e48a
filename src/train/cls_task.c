/* src/train/cls_task.c - supervised classification (`--task cls`) on the training loop: the task
 * table's entries (a ViT with a head, cross-entropy with label smoothing on the batch's verb,
 * noun or action, or on mixup's soft targets; random erasing, drop path, dropout before the
 * head); its evaluation is cls_eval.c.
 * Tests: tests/test_train.c. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "model/vit_internal.h"
#include "train/task.h"
#include "tubelet/dist.h"

int tb_item_label(const struct tb_ann_item *it, enum tb_label_kind k)
{
    return k == TB_LABEL_VERB ? it->verb : k == TB_LABEL_NOUN ? it->noun : it->action;
}

void tb_norm_values(enum tb_norm n, const float **mean, const float **std)
{
    *mean = n == TB_NORM_IMAGENET ? tb_mean_imagenet : tb_mean_openai;
    *std = n == TB_NORM_IMAGENET ? tb_std_imagenet : tb_std_openai;
}

/* ---- the task ----------------------------------------------------------------------------- */

struct cls {
    tb_vit *m;
    int64_t *labels;    /* (B) of the loaded batch */
    float *drop;        /* (L, 2, B): its drop path factors */
    float *soft;        /* (B, K): its mixed targets, when mixing */
    float *hmask;       /* (B, D): its head dropout masks */
    int32_t *boxes;     /* (B, T, 4): its erasing boxes */
    int box[4];         /* its cutmix box */
    uint64_t *streams;  /* (B): their values' streams */
    float *logits;      /* (B, K): output 0, on the host */
    struct tb_step_input in; /* the inputs of the next step */
};

static int mixing(const struct tb_train_opts *o)
{
    return o->mix.mixup > 0 || o->mix.cutmix > 0;
}

static void cls_close(void **state)
{
    struct cls *t = *state;
    if (!t)
        return;
    tb_vit_close(&t->m);
    free(t->labels);
    free(t->drop);
    free(t->soft);
    free(t->hmask);
    free(t->boxes);
    free(t->streams);
    free(t->logits);
    free(t);
    *state = NULL;
}

static int cls_open(void **state, const struct tb_train_opts *o)
{
    struct cls *t = tbi_calloc(1, sizeof(*t));
    int rc;
    *state = NULL;
    if (!t)
        return tbi_err(TB_ENOMEM, "out of memory");
    if (o->model.classes < 1) {
        free(t);
        return tbi_err(TB_EINVAL, "--task cls needs classes (%d)", o->model.classes);
    }
    if (mixing(o) && o->batch % 2) {
        free(t);
        return tbi_err(TB_EINVAL, "mixup and cutmix pair each clip with the batch's reverse: "
                       "the batch (%d) must be even, as timm's", o->batch);
    }
    struct tb_plan_bytes bytes = {0};
    size_t B = (size_t)o->batch;
    if ((rc = tb_vit_open(&t->m, &o->model)) < 0 ||
        (rc = tbi_task_fuse(tb_vit_params(t->m), o)) < 0 ||
        (rc = tb_vit_plan(t->m, o->batch, &bytes)) < 0 ||
        !(t->labels = tbi_malloc(sizeof(*t->labels) * B)) ||
        !(t->drop = tbi_malloc(sizeof(float) * 2 * (size_t)o->model.depth * B)) ||
        (mixing(o) && !(t->soft = tbi_malloc(sizeof(float) * B * (size_t)o->model.classes))) ||
        (o->head_dropout > 0 && !(t->hmask = tbi_malloc(sizeof(float) * B * (size_t)o->model.dim))) ||
        (o->erase > 0 && !(t->boxes = tbi_malloc(sizeof(int32_t) * 4 * B * (size_t)o->model.frames))) ||
        (o->erase > 0 && !(t->streams = tbi_malloc(sizeof(uint64_t) * B)))) {
        if (rc == 0)
            rc = tbi_err(TB_ENOMEM, "out of memory");
        void *p = t;
        cls_close(&p);
        return rc;
    }
    tbi_log(TB_LOG_INFO, "model: %lld parameters; memory plan of %d clips: %.1f MB "
            "(activations at most %.1f MB at once; gradients among them)",
            (long long)tb_params_floats(tb_vit_params(t->m)), o->batch, bytes.arena / 1e6,
            bytes.activations / 1e6);
    *state = t;
    return 0;
}

static tb_params *cls_params(void *state)
{
    return tb_vit_params(((struct cls *)state)->m);
}

static int cls_meta(void *state, const struct tb_train_opts *o, struct tbi_sb *sb)
{
    struct tb_ckpt_info s;
    tbi_settings_init(&s, "cls", o);
    s.model = *tb_vit_config(((struct cls *)state)->m);
    TBI_TRY(tbi_settings_meta(sb, &s));
    if (o->labels)
        tbi_label_space_meta(sb, o->labels);
    return 0;
}

/* The labels of the batch, and the draws of its clips' own keys - erasing, drop path and
 * dropout, like their crops - and of the batch's: mixing (VideoMAE's order: erase each clip,
 * then mix the batch). */
static int cls_draw(void *state, const struct tb_train_opts *o, const struct tb_batch *b,
                    struct tb_step_input *in)
{
    struct cls *t = state;
    const struct tb_vit_config *c = &o->model;
    *in = (struct tb_step_input){.n = b->n, .clips = b->video, .labels = t->labels, .lam = 1};
    for (int j = 0; j < b->n; j++)
        t->labels[j] = b->label[j * 3 + o->label];
    if (o->erase > 0) {
        tb_erase_draw(t->boxes, t->streams, b->n, c->frames, c->height, c->width, o->erase,
                      o->erase_mode, o->seed, b->epoch, b->index);
        in->erase = t->boxes;
        in->erase_streams = t->streams;
    }
    if (mixing(o)) {
        struct tb_mix mx;
        tb_mix_draw(&mx, &o->mix, o->seed, b->epoch, b->number, tb_dist_rank(), c->height,
                    c->width);
        tb_mix_targets(t->soft, t->labels, b->n, c->classes, mx.lam, o->smoothing);
        in->soft = t->soft;
        in->lam = mx.lam;
        in->box = mx.cutmix ? t->box : NULL;
        memcpy(t->box, mx.box, sizeof(t->box));
    }
    if (o->drop_path > 0) {
        tb_vit_drop_path_draw(t->drop, c->depth, b->n, o->drop_path, o->seed, b->epoch,
                              b->index);
        in->drop = t->drop;
    }
    if (o->head_dropout > 0) {
        tb_dropout_draw(t->hmask, b->n, c->dim, o->head_dropout, o->seed, b->epoch, b->index);
        in->hmask = t->hmask;
    }
    return 0;
}

/* The clips go to the model's input now (the loader gets its buffer back), with what was
 * drawn for them; the forward runs from there in step. */
static int cls_set(void *state, const struct tb_train_opts *o, const struct tb_step_input *in)
{
    struct cls *t = state;
    const float *mean, *std;
    tb_norm_values(o->norm, &mean, &std);
    if (in->clips)
        TBI_TRY(tb_vit_set_clips(t->m, in->clips, NULL, in->n, mean, std));
    else
        TBI_TRY(tb_vit_set_video(t->m, in->video, in->n));
    if (in->erase)
        TBI_TRY(tb_vit_erase(t->m, in->erase, o->seed, in->erase_streams));
    if (in->soft && in->lam < 1)
        TBI_TRY(tb_vit_mix(t->m, in->lam, in->box));
    if (in->drop)
        TBI_TRY(tb_vit_set_drop_path(t->m, in->drop));
    if (in->hmask)
        TBI_TRY(tb_vit_set_head_dropout(t->m, in->hmask));
    t->in = *in;
    return 0;
}

static int cls_step(void *state, const struct tb_train_opts *o, float *loss)
{
    struct cls *t = state;
    tbi_backend *be = tb_vit_params(t->m)->be;
    TBI_TRY(t->in.soft ? tb_vit_run_soft(t->m, t->in.soft, NULL)
                       : tb_vit_run(t->m, t->in.labels, (float)o->smoothing, NULL));
    TBI_TRY(be->ops->copy(be, loss, tbi_vit_loss(t->m), sizeof(float)));
    return tb_vit_backward(t->m);
}

/* Output 0: the last step's logits (B, K). */
static int cls_output(void *state, int k, struct tb_st_tensor *out)
{
    struct cls *t = state;
    int K = tb_vit_config(t->m)->classes;
    if (k > 0)
        return 1;
    if (!out)
        return 0;
    if (!t->logits && !(t->logits = tbi_malloc(sizeof(float) * (size_t)t->in.n * K)))
        return tbi_err(TB_ENOMEM, "out of memory");
    TBI_TRY(tb_vit_logits(t->m, t->logits));
    return tbi_task_out(out, "logits", t->logits, 2, t->in.n, K, 0);
}

/* With --label action, the label space's action list (AVION's, over the training and
 * validation sets as the run numbered them, before any row was dropped), so the evaluation
 * adds EK-100's verb and noun scores. */
static int cls_evaluate(void *state, const struct tb_train_opts *o, struct tb_eval_result *r)
{
    tb_vit *m = ((struct cls *)state)->m;
    const struct tb_label_space *s = o->labels;
    struct tb_cls_action_list list = {0};
    int with_list = o->label == TB_LABEL_ACTION && s && s->kind == TB_LABEL_ACTION;
    for (int y = 0; with_list && y < s->n_classes; y++)
        with_list = s->verb[y] >= 0; /* --classes above the actions: by number only */
    if (with_list)
        list = (struct tb_cls_action_list){s->n_classes, s->verb, s->noun};
    return tb_eval_cls(m, o->val_ann, &o->data, o->label, o->norm, o->val_views, o->val_crops,
                       o->batch, o->workers, with_list ? &list : NULL, r, NULL);
}

static int cls_check(const struct tb_train_opts *o)
{
    return tbi_refuse_captions(o, "cls");
}

const struct tbi_task tbi_task_cls = {
    .name = "cls",
    .check = cls_check,
    .open = cls_open,
    .close = cls_close,
    .params = cls_params,
    .meta = cls_meta,
    .draw = cls_draw,
    .set = cls_set,
    .step = cls_step,
    .output = cls_output,
    .evaluate = cls_evaluate,
};
