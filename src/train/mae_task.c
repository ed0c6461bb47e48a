/* src/train/mae_task.c - VideoMAE pretraining (`--task mae`) on the training loop: the task
 * table's entries over the MAE model (model.h's tb_mae). Each clip's masks come from its own
 * generator, keyed by (seed, epoch, the sample the loader delivered), so they are the same for
 * any number of workers or processes. No evaluation of its own: a pretrained encoder is
 * measured by fine-tuning it (`--task cls --init`). Tests: tests/test_train.c,
 * tests/test_dist.c. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "model/vit_internal.h"
#include "train/task.h"

struct mae {
    tb_mae *m;
    uint8_t *mask, *drop; /* (B, N) of the loaded batch */
    float *pred;          /* (B, decoded, values): output 0, on the host */
    int N, n;             /* tokens a clip; clips of the step */
};

static void mae_close(void **state)
{
    struct mae *t = *state;
    if (!t)
        return;
    tb_mae_close(&t->m);
    free(t->mask);
    free(t->drop);
    free(t->pred);
    free(t);
    *state = NULL;
}

static int mae_open(void **state, const struct tb_train_opts *o)
{
    struct mae *t = tbi_calloc(1, sizeof(*t));
    int rc;
    *state = NULL;
    if (!t)
        return tbi_err(TB_ENOMEM, "out of memory");
    struct tb_mae_config c = o->mae;
    c.enc = o->model;
    struct tb_plan_bytes bytes = {0};
    if ((rc = tb_mae_open(&t->m, &c)) == 0) {
        tb_mae_sizes(t->m, &t->N, NULL, NULL, NULL);
        if ((rc = tbi_task_fuse(tb_mae_params(t->m), o)) == 0)
            rc = tb_mae_plan(t->m, o->batch, &bytes);
    }
    size_t n = (size_t)o->batch * (size_t)t->N;
    if (rc == 0 && (!(t->mask = tbi_malloc(n)) || !(t->drop = tbi_malloc(n))))
        rc = tbi_err(TB_ENOMEM, "out of memory");
    if (rc < 0) {
        void *p = t;
        mae_close(&p);
        return rc;
    }
    int visible, decoded;
    tb_mae_sizes(t->m, NULL, &visible, &decoded, NULL);
    tbi_log(TB_LOG_INFO, "MAE: %lld parameters; %d of %d tokens visible, %d decoded; "
            "memory plan of %d clips: %.1f MB (activations at most %.1f MB at once)",
            (long long)tb_params_floats(tb_mae_params(t->m)), visible, t->N, decoded, o->batch,
            bytes.arena / 1e6, bytes.activations / 1e6);
    *state = t;
    return 0;
}

static tb_params *mae_params(void *state)
{
    return tb_mae_params(((struct mae *)state)->m);
}

static int mae_meta(void *state, const struct tb_train_opts *o, struct tbi_sb *sb)
{
    struct tb_ckpt_info s;
    tbi_settings_init(&s, "mae", o);
    s.mae = *tb_mae_config(((struct mae *)state)->m);
    s.model = s.mae.enc;
    return tbi_settings_meta(sb, &s);
}

/* Each clip's masks, from its own generator. */
static int mae_draw(void *state, const struct tb_train_opts *o, const struct tb_batch *b,
                    struct tb_step_input *in)
{
    struct mae *t = state;
    int running = tb_mae_config(t->m)->decoder_mask != TB_DECODER_MASK_NONE;
    for (int j = 0; j < b->n; j++)
        TBI_TRY(tb_mae_make_mask(t->m, o->seed, b->epoch, b->index[j],
                                 t->mask + (size_t)j * t->N, t->drop + (size_t)j * t->N));
    *in = (struct tb_step_input){.n = b->n, .clips = b->video, .mask = t->mask,
                             .dmask = running ? t->drop : NULL};
    return 0;
}

/* The input (its normalisation undone for the target), then its masks. */
static int mae_set(void *state, const struct tb_train_opts *o, const struct tb_step_input *in)
{
    struct mae *t = state;
    const float *mean, *std;
    tb_norm_values(o->norm, &mean, &std);
    if (in->clips)
        TBI_TRY(tb_mae_set_clips(t->m, in->clips, NULL, in->n, mean, std));
    else
        TBI_TRY(tb_mae_set_video(t->m, in->video, in->n, mean, std));
    t->n = in->n;
    return tb_mae_set_mask(t->m, in->mask, in->dmask);
}

static int mae_step(void *state, const struct tb_train_opts *o, float *loss)
{
    struct mae *t = state;
    tbi_backend *be = tb_mae_params(t->m)->be;
    (void)o;
    TBI_TRY(tb_mae_run(t->m, NULL));
    TBI_TRY(be->ops->copy(be, loss, tbi_mae_loss(t->m), sizeof(float)));
    return tb_mae_backward(t->m);
}

/* Output 0: the last step's predictions (B, decoded, values). */
static int mae_output(void *state, int k, struct tb_st_tensor *out)
{
    struct mae *t = state;
    int Nq, V;
    if (k > 0)
        return 1;
    if (!out)
        return 0;
    tb_mae_sizes(t->m, NULL, NULL, &Nq, &V);
    if (!t->pred && !(t->pred = tbi_malloc(sizeof(float) * (size_t)t->n * Nq * V)))
        return tbi_err(TB_ENOMEM, "out of memory");
    TBI_TRY(tb_mae_pred(t->m, t->pred));
    return tbi_task_out(out, "pred", t->pred, 3, t->n, Nq, V);
}

static int mae_check(const struct tb_train_opts *o)
{
    TBI_TRY(tbi_refuse_finetune(o, "mae"));
    return tbi_refuse_captions(o, "mae");
}

const struct tbi_task tbi_task_mae = {
    .name = "mae",
    .check = mae_check,
    .open = mae_open,
    .close = mae_close,
    .params = mae_params,
    .meta = mae_meta,
    .draw = mae_draw,
    .set = mae_set,
    .step = mae_step,
    .output = mae_output,
    .evaluate = NULL,
};
