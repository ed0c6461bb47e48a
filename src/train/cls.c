/* src/train/cls.c - supervised classification (`--task cls`) on the training loop: the task
 * table's entries (a ViT with a head, cross-entropy with label smoothing on the batch's verb,
 * noun or action), and evaluation (train.h's tb_eval_cls: views x crops averaged, sharded
 * over processes, top-k under a fixed tie rule, non-finite logits an error).
 * Tests: tests/test_train.c. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
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

static const char *const label_names[] = {"verb", "noun", "action"};

/* ---- evaluation ------------------------------------------------------------------------- */

/* Rank of class y among the scores p (K): how many beat it, a tie going to the lower class
 * index (argmax's rule); so a model whose scores are all equal is right only for class 0. */
static int rank_of(const double *p, int K, int y)
{
    int rank = 0;
    for (int q = 0; q < K; q++)
        rank += p[q] > p[y] || (p[q] == p[y] && q < y);
    return rank;
}

/* The softmax of each clip's logits added, 1 / per_item each, to its item's row of acc;
 * the padding a process gets past the epoch's last clip (to even out the shards) skipped. */
static int accumulate(const struct tb_annotations *ann, const struct tb_batch *b, int batch,
                      const float *logits, int K, int per_item, int64_t n_samples, double *acc,
                      double *seen, double *ez)
{
    int rank = tb_dist_rank(), world = tb_dist_world();
    for (int j = 0; j < b->n; j++) {
        /* The loader deals the epoch's order out rank, rank + world, ... */
        int64_t position = rank + (b->number * (int64_t)batch + j) * world;
        int64_t item = b->index[j] / per_item;
        const float *z = logits + (size_t)j * K;
        double mx = z[0], sum = 0;
        for (int q = 0; q < K; q++)
            if (!isfinite(z[q]))
                return tbi_err(TB_ERANGE, "%s:%d: clip %" PRId64 " (view %" PRId64 ") has a "
                               "logit that is %f: the model is broken (NaN or infinite "
                               "weights?)", ann->path, ann->items[item].line, b->index[j],
                               b->index[j] % per_item, z[q]);
        if (position >= n_samples)
            continue;
        for (int q = 1; q < K; q++)
            mx = z[q] > mx ? z[q] : mx;
        for (int q = 0; q < K; q++)
            sum += ez[q] = exp(z[q] - mx);
        double *p = acc + (size_t)item * K;
        for (int q = 0; q < K; q++)
            p[q] += ez[q] / sum / per_item;
        seen[item]++;
    }
    return 0;
}

int tb_eval_cls(tb_vit *m, const struct tb_annotations *ann, const struct tb_dataset_opts *data,
                enum tb_label_kind label, enum tb_norm norm, int views, int crops, int batch,
                int workers, struct tb_eval_result *res, int *predicted)
{
    const struct tb_vit_config *c = tb_vit_config(m);
    struct tb_dataset_opts o = *data;
    tb_dataset *ds = NULL;
    tb_loader *l = NULL;
    double *acc = NULL, *ez = NULL;
    double *seen = NULL; /* the views each item got (summed over processes: doubles) */
    float *logits = NULL;
    const float *mean, *std;
    int K = c->classes, rc = 0;
    tb_norm_values(norm, &mean, &std);
    o.train = 0;
    o.n_views = views;
    o.n_crops = crops;
    o.n_frames = c->frames;
    o.width = c->width;
    o.height = c->height;
    struct tb_loader_opts lo = {.batch_size = batch, .n_workers = workers, .prefetch = 2,
                                .rank = tb_dist_rank(), .world = tb_dist_world(),
                                .max_failure_rate = 0.05};
    memset(res, 0, sizeof(*res));
    if (K < 1)
        return tbi_err(TB_EINVAL, "evaluating classes needs a model with a head");
    if ((rc = tb_dataset_open(&ds, ann, &o)) < 0 || (rc = tb_loader_open(&l, ds, &lo)) < 0)
        goto end;
    int per_item = views * (crops == 3 ? 3 : 1);
    int64_t n_items = ann->n_items;
    acc = calloc((size_t)n_items * K, sizeof(double));
    seen = calloc((size_t)n_items, sizeof(*seen));
    ez = malloc(sizeof(double) * (size_t)K);
    logits = malloc(sizeof(float) * (size_t)batch * K);
    if (!acc || !seen || !ez || !logits) {
        rc = tbi_err(TB_ENOMEM, "out of memory for the evaluation");
        goto end;
    }
    int64_t nb = tb_loader_epoch(l, 0), n_samples = tb_dataset_size(ds);
    for (int64_t k = 0; k < nb && rc == 0; k++) {
        struct tb_batch *b = NULL;
        if ((rc = tb_loader_next(l, &b)) < 0)
            break;
        if ((rc = tb_vit_forward_clips(m, b->video, NULL, b->n, mean, std, NULL, 0, NULL)) == 0 &&
            (rc = tb_vit_logits(m, logits)) == 0)
            rc = accumulate(ann, b, batch, logits, K, per_item, n_samples, acc, seen, ez);
        tb_loader_release(l, b);
    }
    /* Every process stops here, failed or not, before the reduction. */
    if (tb_dist_max_int(rc < 0)) {
        if (rc == 0)
            rc = tbi_err(TB_EDIST, "another process failed in the evaluation");
        goto end;
    }
    if ((rc = tb_dist_sum_f64(acc, (size_t)n_items * K)) < 0)
        goto end;
    if ((rc = tb_dist_sum_f64(seen, (size_t)n_items)) < 0)
        goto end;
    double top1 = 0, top5 = 0, loss = 0;
    for (int64_t i = 0; i < n_items; i++)
        if (seen[i] != per_item) {
            rc = tbi_err(TB_EINVAL, "%s:%d: the evaluation saw %.0f of the item's %d views",
                         ann->path, ann->items[i].line, seen[i], per_item);
            goto end;
        }
    for (int64_t i = 0; i < n_items; i++) {
        int y = tb_item_label(&ann->items[i], label);
        if (y < 0 || y >= K) {
            rc = tbi_err(TB_ERANGE, "%s:%d: label %d is not one of the model's %d classes",
                         ann->path, ann->items[i].line, y, K);
            goto end;
        }
        const double *p = acc + (size_t)i * K;
        int r = rank_of(p, K, y);
        if (predicted) {
            int best = 0;
            for (int q = 1; q < K; q++)
                best = p[q] > p[best] ? q : best;
            predicted[i] = best;
        }
        top1 += r < 1;
        top5 += r < 5;
        loss += -log(p[y] > 1e-12 ? p[y] : 1e-12);
    }
    res->n_items = n_items;
    res->top1 = top1 / n_items;
    res->top5 = top5 / n_items;
    res->loss = loss / n_items;
end:
    tb_loader_close(&l);
    tb_dataset_close(&ds);
    free(acc);
    free(seen);
    free(ez);
    free(logits);
    return rc;
}

/* ---- the task ----------------------------------------------------------------------------- */

struct cls {
    tb_vit *m;
    int64_t *labels;    /* (B) of the loaded batch */
    float *drop;        /* (L, 2, B): its drop path factors */
    int n;
};

static void cls_close(void **state)
{
    struct cls *t = *state;
    if (!t)
        return;
    tb_vit_close(&t->m);
    free(t->labels);
    free(t->drop);
    free(t);
    *state = NULL;
}

static int cls_open(void **state, const struct tb_train_opts *o)
{
    struct cls *t = calloc(1, sizeof(*t));
    int rc;
    *state = NULL;
    if (!t)
        return tbi_err(TB_ENOMEM, "out of memory");
    if (o->model.classes < 1) {
        free(t);
        return tbi_err(TB_EINVAL, "--task cls needs classes (%d)", o->model.classes);
    }
    int64_t bytes = 0;
    if ((rc = tb_vit_open(&t->m, &o->model)) < 0 || (rc = tb_vit_plan(t->m, o->batch, &bytes)) < 0 ||
        !(t->labels = malloc(sizeof(*t->labels) * (size_t)o->batch)) ||
        !(t->drop = malloc(sizeof(float) * 2 * (size_t)o->model.depth * o->batch))) {
        if (rc == 0)
            rc = tbi_err(TB_ENOMEM, "out of memory");
        void *p = t;
        cls_close(&p);
        return rc;
    }
    tbi_log(TB_LOG_INFO, "model: %lld parameters; activations of %d clips: %.1f MB",
            (long long)tb_params_floats(tb_vit_params(t->m)), o->batch, bytes / 1e6);
    *state = t;
    return 0;
}

static tb_params *cls_params(void *state)
{
    return tb_vit_params(((struct cls *)state)->m);
}

static int cls_meta(void *state, const struct tb_train_opts *o, struct tbi_sb *sb)
{
    const struct tb_vit_config *c = tb_vit_config(((struct cls *)state)->m);
    tbi_sb_printf(sb, "\"task\":\"cls\",\"dim\":\"%d\",\"depth\":\"%d\",\"heads\":\"%d\","
                  "\"patch\":\"%d\",\"tubelet\":\"%d\",\"frames\":\"%d\",\"height\":\"%d\","
                  "\"width\":\"%d\",\"classes\":\"%d\",\"pool\":\"%s\",\"pos\":\"%s\","
                  "\"qv_bias\":\"%d\",\"sampler\":\"%s\",\"stride\":\"%d\",\"norm\":\"%s\","
                  "\"label\":\"%s\"",
                  c->dim, c->depth, c->heads, c->patch, c->tubelet, c->frames, c->height,
                  c->width, c->classes,
                  c->pool == TB_POOL_CLS ? "cls" : c->pool == TB_POOL_NONE ? "none" : "mean",
                  c->pos == TB_POS_LEARNED ? "learned" : "sincos", c->qv_bias,
                  o->data.sampler == TB_SAMPLE_DENSE ? "dense" : "segments", o->data.stride,
                  o->norm == TB_NORM_IMAGENET ? "imagenet" : "openai", label_names[o->label]);
    return 0;
}

static int cls_load(void *state, const struct tb_train_opts *o, const struct tb_batch *b)
{
    struct cls *t = state;
    const float *mean, *std;
    tb_norm_values(o->norm, &mean, &std);
    for (int j = 0; j < b->n; j++)
        t->labels[j] = b->label[j * 3 + o->label];
    t->n = b->n;
    /* The clips go to the model's input now (the loader gets its buffer back); the forward
     * runs from there in step. Drop path's draws are the clips' own, like their crops. */
    TBI_TRY(tb_vit_set_clips(t->m, b->video, NULL, b->n, mean, std));
    if (!(o->drop_path > 0))
        return 0;
    tb_vit_drop_path_draw(t->drop, o->model.depth, b->n, o->drop_path, o->seed, b->epoch,
                          b->index);
    return tb_vit_set_drop_path(t->m, t->drop);
}

static int cls_step(void *state, const struct tb_train_opts *o, float *loss)
{
    struct cls *t = state;
    int rc = tb_vit_run(t->m, t->labels, (float)o->smoothing, loss);
    return rc < 0 ? rc : tb_vit_backward(t->m);
}

static int cls_evaluate(void *state, const struct tb_train_opts *o, struct tb_eval_result *r)
{
    return tb_eval_cls(((struct cls *)state)->m, o->val_ann, &o->data, o->label, o->norm,
                       o->val_views, o->val_crops, o->batch, o->workers, r, NULL);
}

const struct tbi_task tbi_task_cls = {
    .name = "cls",
    .open = cls_open,
    .close = cls_close,
    .params = cls_params,
    .meta = cls_meta,
    .load = cls_load,
    .step = cls_step,
    .evaluate = cls_evaluate,
};
