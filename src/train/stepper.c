/* src/train/stepper.c - a task's steps outside the training loop (train.h's tb_stepper): the
 * task table's open, set, step and output, as tb_train runs them, on inputs the caller gives
 * (tubelet step's batch file) and weights it loads. No data, optimizer, reduction or
 * checkpoint: the caller's. Tests: tests/test_vit.c, test_mae.c, test_clip.c (through
 * tubelet step, against the PyTorch references). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "core/internal.h"
#include "train/task.h"

struct tb_stepper {
    const struct tbi_task *task;
    void *st;
    struct tb_train_opts o;   /* the task's settings (borrowed strings) */
    tb_params *params;
    float *loss;              /* backend (1) */
};

int tb_stepper_open(tb_stepper **out, const struct tb_train_opts *o)
{
    tb_stepper *s = tbi_calloc(1, sizeof(*s));
    int rc;
    *out = NULL;
    if (!s)
        return tbi_err(TB_ENOMEM, "out of memory");
    s->o = *o;
    if ((rc = tbi_task_find(o->task, &s->task)) == 0 && (rc = s->task->check(o)) == 0 &&
        (rc = s->task->open(&s->st, o)) == 0) {
        s->params = s->task->params(s->st);
        rc = s->params->be->ops->alloc(s->params->be, sizeof(float), (void **)&s->loss);
    }
    if (rc < 0) {
        tb_stepper_close(&s);
        return rc;
    }
    *out = s;
    return 0;
}

void tb_stepper_close(tb_stepper **ps)
{
    tb_stepper *s = *ps;
    if (!s)
        return;
    if (s->params)
        s->params->be->ops->free(s->params->be, s->loss);
    if (s->task)
        s->task->close(&s->st);
    free(s);
    *ps = NULL;
}

tb_params *tb_stepper_params(tb_stepper *s)
{
    return s->params;
}

const char *tb_stepper_backend(const tb_stepper *s)
{
    return s->params->be->name;
}

int tb_stepper_run(tb_stepper *s, const struct tb_step_input *in, float *loss)
{
    tbi_backend *be = s->params->be;
    TBI_TRY(s->task->set(s->st, &s->o, in));
    TBI_TRY(s->task->step(s->st, &s->o, s->loss));
    return be->ops->to_host(be, loss, s->loss, sizeof(float));
}

int tb_stepper_output(tb_stepper *s, int k, struct tb_st_tensor *t)
{
    return s->task->output(s->st, k, t);
}
