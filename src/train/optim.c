/* src/train/optim.c - AdamW, Lion and SGD, the gradient norm, clipping and the learning-rate schedule
 * (train.h), over a parameter registry: the optimizer's moments live on the model's backend
 * and every update and norm is a backend op (the loop's read their factor and non-finite flag
 * on the backend: the *_checked functions). Tests: tests/test_vit.c (three AdamW steps
 * against PyTorch's), tests/test_mae.c (AdamW and Lion). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "model/params.h"
#include "train/task.h"
#include "tubelet/dist.h"
#include "tubelet/train.h"

/* --zero: span s to process owner[s], consecutive spans a process, split where a span's
 * middle float falls (so each holds about 1 / world of the floats); [base, end) this
 * process's. */
static int shard(struct tb_optim *opt, const tb_params *r)
{
    int world = tb_dist_world(), rank = tb_dist_rank();
    if (!(opt->owner = tbi_calloc((size_t)r->n_spans, sizeof(int))))
        return tbi_err(TB_ENOMEM, "out of memory");
    int64_t total = r->off[r->n_spans] - r->off[0];
    opt->base = opt->end = 0;
    int first = 1;
    for (int s = 0; s < r->n_spans; s++) {
        int64_t mid = r->off[s] - r->off[0] + tbi_span_floats(r, s) / 2;
        int k = (int)(mid * world / (total > 0 ? total : 1));
        opt->owner[s] = k < world ? k : world - 1;
        if (opt->owner[s] == rank) {
            opt->base = first ? r->off[s] : opt->base;
            opt->end = r->off[s + 1];
            first = 0;
        }
    }
    return 0;
}

int tb_optim_init(struct tb_optim *opt, tb_params *r)
{
    tbi_backend *be = r->be;
    int rc;
    opt->params = r;
    opt->step = 0;
    opt->m = opt->v = opt->full = NULL;
    opt->owner = NULL;
    opt->base = 0, opt->end = r->n_floats;
    if (opt->zero && tb_dist_world() > 1 && (rc = shard(opt, r)) < 0)
        return rc;
    size_t bytes = sizeof(float) * (size_t)(opt->end - opt->base);
    int adam = opt->kind == TB_OPT_ADAMW;
    /* alloc_zero: rows no gradient ever reaches (a token table's unused tokens) never cost
     * their moments' memory (the update leaves zero runs unwritten). A process of a sharded
     * state may own nothing. */
    if (bytes && ((rc = be->ops->alloc_zero(be, bytes, (void **)&opt->m)) < 0 ||
                  (adam && (rc = be->ops->alloc_zero(be, bytes, (void **)&opt->v)) < 0))) {
        tb_optim_free(opt);
        return tbi_err_prefix(rc, "the optimizer state");
    }
    return 0;
}

void tb_optim_free(struct tb_optim *opt)
{
    if (opt->params) {
        tbi_backend *be = opt->params->be;
        if (opt->m)
            be->ops->free(be, opt->m);
        if (opt->v)
            be->ops->free(be, opt->v);
    }
    free(opt->owner);
    free(opt->full);
    opt->m = opt->v = opt->full = NULL;
    opt->owner = NULL;
    opt->params = NULL; /* a second free (or one after the model's close) reads nothing */
}

float *tbi_optim_state(const struct tb_optim *opt, int k, int64_t offset)
{
    float *s = k ? opt->v : opt->m;
    return offset >= opt->base && offset < opt->end && s ? s + (offset - opt->base) : NULL;
}

void tbi_optim_release(struct tb_optim *opt)
{
    free(opt->full);
    opt->full = NULL;
}

int tbi_optim_gather(struct tb_optim *opt)
{
    if (!opt->owner)
        return 0;
    tb_params *r = opt->params;
    int states = tb_optimizer_states(opt->kind), lead = tb_dist_rank() == 0;
    int64_t most = 0;
    for (int s = 0; s < r->n_spans; s++)
        most = tbi_span_floats(r, s) > most ? tbi_span_floats(r, s) : most;
    float *scratch = NULL;
    if (lead && !opt->full &&
        !(opt->full = malloc(sizeof(float) * (size_t)r->n_floats * (size_t)states)))
        return tbi_err(TB_ENOMEM, "the optimizer state for a checkpoint (%" PRId64 " floats)",
                       r->n_floats * states);
    if (!lead && !(scratch = malloc(sizeof(float) * (size_t)(most > 0 ? most : 1))))
        return tbi_err(TB_ENOMEM, "out of memory");
    int rc = 0;
    for (int k = 0; k < states && rc == 0; k++)
        for (int s = 0; s < r->n_spans && rc == 0; s++) {
            size_t n = (size_t)tbi_span_floats(r, s);
            float *buf = lead ? opt->full + (size_t)k * (size_t)r->n_floats + r->off[s] : scratch;
            if (opt->owner[s] == tb_dist_rank())
                rc = r->be->ops->to_host(r->be, buf, tbi_optim_state(opt, k, r->off[s]),
                                         sizeof(float) * n);
            if (rc == 0)
                rc = tb_dist_bcast(buf, sizeof(float) * n, opt->owner[s]);
        }
    free(scratch);
    return rc;
}

void tb_optim_begin_step(struct tb_optim *opt)
{
    opt->step++;
}

/* --zero: span's weights from the process that updated them, to every other. */
static int bcast_span(struct tb_optim *opt, int span)
{
    tb_params *r = opt->params;
    if (!opt->owner)
        return 0;
    return r->be->ops->bcast(r->be, r->data + r->off[span], (size_t)tbi_span_floats(r, span),
                             opt->owner[span]);
}

/* One span's update from grad x grad_scale, or (st not NULL) from grad x st->scale with
 * nothing written once st->bad is set: both read on the backend (the loop's updates). */
static int update_span(struct tb_optim *opt, int span, float grad_scale,
                       const struct tbi_step_stats *st)
{
    tb_params *r = opt->params;
    tbi_backend *be = r->be;
    if (opt->owner && opt->owner[span] != tb_dist_rank())
        return bcast_span(opt, span); /* another process's: its weights from there */
    for (int i = r->first[span]; i < r->first[span + 1]; i++) {
        const struct tb_param *p = &r->p[i];
        float wd = p->decay ? opt->weight_decay : 0.0f, lr = opt->lr * p->lr_scale;
        float *w = tbi_param_data(r, i), *m = tbi_optim_state(opt, 0, p->offset);
        const float *g = tbi_param_grad(r, i);
        size_t n = (size_t)p->n;
        int rc;
        if (opt->kind == TB_OPT_LION)
            rc = st ? be->ops->lion_checked(be, w, g, st, m, n, lr, opt->beta1, opt->beta2, wd)
                    : be->ops->lion(be, w, g, grad_scale, m, n, lr, opt->beta1, opt->beta2, wd);
        else if (opt->kind == TB_OPT_SGD)
            rc = st ? be->ops->sgd_checked(be, w, g, st, m, n, lr, opt->beta1, wd)
                    : be->ops->sgd(be, w, g, grad_scale, m, n, lr, opt->beta1, wd);
        else if (st)
            rc = be->ops->adamw_checked(be, w, g, st, m, tbi_optim_state(opt, 1, p->offset), n, lr,
                                        opt->beta1, opt->beta2, opt->eps, wd, opt->step);
        else
            rc = be->ops->adamw(be, w, g, grad_scale, m, tbi_optim_state(opt, 1, p->offset), n, lr,
                                opt->beta1, opt->beta2, opt->eps, wd, opt->step);
        if (rc < 0)
            return rc;
    }
    return bcast_span(opt, span);
}

int tb_optim_update_span(struct tb_optim *opt, int span, float grad_scale)
{
    return update_span(opt, span, grad_scale, NULL);
}

int tbi_optim_update_span_checked(struct tb_optim *opt, int span,
                                  const struct tbi_step_stats *st)
{
    return update_span(opt, span, 0, st);
}

/* Every span's update (update_span's arguments), after the backward. */
static int update_all(struct tb_optim *opt, float grad_scale, const struct tbi_step_stats *st)
{
    tb_params *r = opt->params;
    TBI_TRY(tbi_params_check_kept(r, "the optimizer's update after the backward"));
    tb_optim_begin_step(opt);
    for (int s = 0; s < r->n_spans; s++)
        TBI_TRY(update_span(opt, s, grad_scale, st));
    return 0;
}

int tb_optim_update(struct tb_optim *opt, float grad_scale)
{
    return update_all(opt, grad_scale, NULL);
}

int tbi_optim_update_checked(struct tb_optim *opt, const struct tbi_step_stats *st)
{
    return update_all(opt, 0, st);
}

const char *tb_optimizer_name(enum tb_optimizer kind)
{
    return kind == TB_OPT_LION ? "lion" : kind == TB_OPT_SGD ? "sgd" : "adamw";
}

int tb_optimizer_parse(const char *name)
{
    return !strcmp(name, "adamw") ? TB_OPT_ADAMW : !strcmp(name, "lion") ? TB_OPT_LION
           : !strcmp(name, "sgd") ? TB_OPT_SGD : -1;
}

int tb_optimizer_states(enum tb_optimizer kind)
{
    return kind == TB_OPT_ADAMW ? 2 : 1;
}

const char *tb_optimizer_state_name(enum tb_optimizer kind, int k)
{
    return kind == TB_OPT_SGD ? "momentum_buffer" : k ? "exp_avg_sq" : "exp_avg";
}

int tbi_grad_sum_squares_acc(tb_params *r, double *acc)
{
    TBI_TRY(tbi_params_check_kept(r, "the gradient norm after the backward"));
    for (int s = 0; s < r->n_spans; s++) {
        if (!r->home[s])
            return tbi_err(TB_EINVAL, "no gradients before the model is planned");
        TBI_TRY(r->be->ops->sum_squares_acc(r->be, acc, r->home[s],
                                            (size_t)tbi_span_floats(r, s)));
    }
    return 0;
}

/* The sum of squares on the backend (one double), read back once. */
int tb_grad_norm(tb_params *r, double *norm)
{
    tbi_backend *be = r->be;
    double *acc = NULL, ss = 0;
    int rc = be->ops->alloc(be, sizeof(double), (void **)&acc);
    if (rc == 0 && (rc = tbi_grad_sum_squares_acc(r, acc)) == 0)
        rc = be->ops->to_host(be, &ss, acc, sizeof(double));
    if (acc)
        be->ops->free(be, acc);
    *norm = sqrt(ss);
    return rc;
}

float tb_clip_factor(double norm, double max_norm)
{
    return max_norm > 0 && norm > max_norm ? (float)(max_norm / (norm + 1e-6)) : 1.0f;
}

float tb_lr_schedule(int64_t step, int64_t total, int64_t warmup, float warmup_lr, float base_lr,
                     float min_lr)
{
    if (warmup > 0 && step < warmup)
        return warmup_lr + (base_lr - warmup_lr) * (float)(step + 1) / (float)warmup;
    int64_t span = total - warmup;
    if (span <= 0)
        return base_lr;
    double t = (double)(step - warmup) / (double)span;
    if (t > 1)
        t = 1;
    return (float)(min_lr + 0.5 * (base_lr - min_lr) * (1 + cos(3.14159265358979323846 * t)));
}
