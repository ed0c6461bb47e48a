/* src/train/cls_eval.c - evaluation of a classifier (train.h's tb_eval_cls): views x crops
 * averaged both ways (the logits, the probabilities), sharded over processes and reduced,
 * top-k under a fixed tie rule, the label's scores and, given the action list, EK-100's verb,
 * noun and action scores (cls_metrics.c); non-finite logits an error. It writes no file: the
 * training loop and the CLI print what it returns (tb_eval_cls_json). Tests:
 * tests/test_train.c, tests/test_dist.c. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "metrics/cls_internal.h"
#include "train/task.h"
#include "tubelet/dist.h"

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

/* Each clip added to its item's rows of the two sums (n_items, K), indexed by enum
 * tb_cls_avg: its logits, and their softmax; the padding a process gets past the epoch's last
 * clip (to even out the shards) skipped. The means come after the reduction, in the order
 * tb_cls_average_views takes them, so one process gives its bits. */
static int accumulate(const struct tb_annotations *ann, const struct tb_batch *b, int batch,
                      const float *logits, int K, int per_item, int64_t n_samples,
                      double *const sum[2], double *seen, double *pv)
{
    int rank = tb_dist_rank(), world = tb_dist_world();
    for (int j = 0; j < b->n; j++) {
        /* The loader deals the epoch's order out rank, rank + world, ... */
        int64_t position = rank + (b->number * (int64_t)batch + j) * world;
        int64_t item = b->index[j] / per_item;
        const float *z = logits + (size_t)j * K;
        for (int q = 0; q < K; q++)
            if (!isfinite(z[q]))
                return tbi_err(TB_ERANGE, "%s:%d: clip %" PRId64 " (view %" PRId64 ") has a "
                               "logit that is %f: the model is broken (NaN or infinite "
                               "weights?)", ann->path, ann->items[item].line, b->index[j],
                               b->index[j] % per_item, z[q]);
        if (position >= n_samples)
            continue;
        double *zl = sum[TB_CLS_AVG_LOGITS] + (size_t)item * K;
        double *zp = sum[TB_CLS_AVG_PROBS] + (size_t)item * K;
        for (int q = 0; q < K; q++) {
            pv[q] = z[q];
            zl[q] += z[q];
        }
        tbi_softmax_f64(pv, K, pv);
        for (int q = 0; q < K; q++)
            zp[q] += pv[q];
        seen[item]++;
    }
    return 0;
}

/* The label's scores for both averaging modes into res->cls: with the action list EK-100's
 * three levels, else the label's own. truth is (n_items, 3) verb, noun, action with the
 * list, else (n_items) labels. */
static int score_modes(const struct tb_annotations *ann, double *const prob[2], int K,
                       enum tb_label_kind label, const struct tb_cls_action_list *actions,
                       const int *truth, struct tb_eval_result *res)
{
    for (int mode = 0; mode < 2; mode++) {
        struct tb_cls_scores *s = &res->cls[mode];
        struct tb_cls_part *own = label == TB_LABEL_VERB   ? &s->verb
                                  : label == TB_LABEL_NOUN ? &s->noun
                                                           : &s->action;
        int rc = actions ? tb_cls_evaluate(prob[mode], ann->n_items, K, actions->verb,
                                           actions->noun, truth, s)
                         : tb_cls_evaluate_level(prob[mode], ann->n_items, K, truth, own);
        if (rc < 0)
            return tbi_err_prefix(rc, "%s", ann->path);
        s->n_items = ann->n_items;
    }
    res->cls_parts =
        actions ? 1 << TB_LABEL_VERB | 1 << TB_LABEL_NOUN | 1 << TB_LABEL_ACTION : 1 << label;
    return 0;
}

/* One evaluation: what it scores, and its buffers (eval_alloc, eval_free). */
struct eval {
    const struct tb_annotations *ann;
    enum tb_label_kind label;
    const struct tb_cls_action_list *actions; /* NULL: the label's own scores */
    int K, per_item, batch;                   /* classes, views x crops, clips a batch */
    int64_t n_items;
    double *sum[2]; /* (n_items, K) by enum tb_cls_avg: sums, then means */
    double *pv;     /* (K) a view's softmax */
    double *seen;   /* (n_items) the views each item got (summed over processes: doubles) */
    int *truth;     /* (n_items, 3) with the action list, else (n_items) */
    float *logits;  /* (batch, K) */
};

/* The counts over the items that tb_eval_cls divides by n_items at the end. */
struct tally {
    double top1, top5;
    double loss[2]; /* by enum tb_cls_avg */
};

/* The requests that cannot be scored, refused before any clip is read. */
static int check_request(int K, enum tb_label_kind label, const struct tb_cls_action_list *actions)
{
    if (K < 1)
        return tbi_err(TB_EINVAL, "evaluating classes needs a model with a head");
    if (actions && label != TB_LABEL_ACTION)
        return tbi_err(TB_EINVAL, "an action list scores a model of actions, not of %ss",
                       label == TB_LABEL_VERB ? "verb" : "noun");
    if (actions && actions->n_actions != K)
        return tbi_err(TB_EINVAL, "the action list has %d actions, the model %d classes (is it "
                       "the list of the run's training and validation sets?)",
                       actions->n_actions, K);
    return 0;
}

/* The evaluation's dataset: data's, unaugmented, with the model's clip shape and the views and
 * crops asked for. */
static struct tb_dataset_opts eval_data(const struct tb_dataset_opts *data,
                                        const struct tb_vit_config *c, int views, int crops)
{
    struct tb_dataset_opts o = *data;
    o.train = 0;
    o.n_views = views;
    o.n_crops = crops;
    o.n_frames = c->frames;
    o.width = c->width;
    o.height = c->height;
    return o;
}

static void eval_free(struct eval *e)
{
    free(e->sum[0]);
    free(e->sum[1]);
    free(e->seen);
    free(e->truth);
    free(e->pv);
    free(e->logits);
}

static int eval_alloc(struct eval *e)
{
    e->sum[0] = tbi_calloc((size_t)e->n_items * e->K, sizeof(double));
    e->sum[1] = tbi_calloc((size_t)e->n_items * e->K, sizeof(double));
    e->seen = tbi_calloc((size_t)e->n_items, sizeof(*e->seen));
    e->truth = tbi_malloc(sizeof(int) * 3 * (size_t)e->n_items);
    e->pv = tbi_malloc(sizeof(double) * (size_t)e->K);
    e->logits = tbi_malloc(sizeof(float) * (size_t)e->batch * e->K);
    if (!e->sum[0] || !e->sum[1] || !e->seen || !e->truth || !e->pv || !e->logits)
        return tbi_err(TB_ENOMEM, "out of memory for the evaluation");
    return 0;
}

/* This process's share of the epoch through the model, into the sums; stops at the first
 * error, which it returns. */
static int run_batches(struct eval *e, tb_vit *m, tb_loader *l, const tb_dataset *ds,
                       enum tb_norm norm)
{
    const float *mean, *std;
    int rc = 0;
    tb_norm_values(norm, &mean, &std);
    int64_t nb = tb_loader_epoch(l, 0), n_samples = tb_dataset_size(ds);
    if (nb < 0)
        rc = (int)nb; /* and no batch */
    for (int64_t k = 0; k < nb && rc == 0; k++) {
        struct tb_batch *b = NULL;
        if ((rc = tb_loader_next(l, &b)) < 0)
            break;
        if ((rc = tb_vit_forward_clips(m, b->video, NULL, b->n, mean, std, NULL, 0, NULL)) == 0 &&
            (rc = tb_vit_logits(m, e->logits)) == 0)
            rc = accumulate(e->ann, b, e->batch, e->logits, e->K, e->per_item, n_samples, e->sum,
                            e->seen, e->pv);
        tb_loader_release(l, b);
    }
    return rc;
}

/* Every process's sums added up: the logits' softmax waits for the whole sum over views. */
static int reduce_sums(struct eval *e)
{
    int rc;
    for (int mode = 0; mode < 2; mode++)
        if ((rc = tb_dist_sum_f64(e->sum[mode], (size_t)e->n_items * e->K)) < 0)
            return rc;
    return tb_dist_sum_f64(e->seen, (size_t)e->n_items);
}

/* Every item must have had all its views, or the means below would average fewer. */
static int check_views(const struct eval *e)
{
    for (int64_t i = 0; i < e->n_items; i++)
        if (e->seen[i] != e->per_item)
            return tbi_err(TB_EINVAL, "%s:%d: the evaluation saw %.0f of the item's %d views",
                           e->ann->path, e->ann->items[i].line, e->seen[i], e->per_item);
    return 0;
}

/* Item i's two rows of sums turned into means, the logits' through a softmax, so that both
 * are probabilities; their losses against label y added to t. */
static void item_means(struct eval *e, int64_t i, int y, struct tally *t)
{
    for (int mode = 0; mode < 2; mode++) {
        double *row = e->sum[mode] + (size_t)i * e->K;
        for (int q = 0; q < e->K; q++)
            row[q] /= e->per_item;
        if (mode == TB_CLS_AVG_LOGITS)
            tbi_softmax_f64(row, e->K, row);
        t->loss[mode] += -log(row[y] > 1e-12 ? row[y] : 1e-12);
    }
}

/* Each item's means, losses and rank, in item order (the sums' order, so the bits do not
 * depend on the processes); its truth for score_modes and, given probs (n_items, K), its
 * averaged probabilities. */
static int tally_items(struct eval *e, float *probs, struct tally *t)
{
    const int K = e->K;
    for (int64_t i = 0; i < e->n_items; i++) {
        const struct tb_ann_item *it = &e->ann->items[i];
        int y = tb_item_label(it, e->label);
        if (y < 0 || y >= K)
            return tbi_err(TB_ERANGE, "%s:%d: label %d is not one of the model's %d classes",
                           e->ann->path, it->line, y, K);
        item_means(e, i, y, t);
        if (e->actions) {
            e->truth[3 * i] = it->verb;
            e->truth[3 * i + 1] = it->noun;
            e->truth[3 * i + 2] = it->action;
        } else {
            e->truth[i] = y;
        }
        const double *p = e->sum[TB_CLS_AVG_PROBS] + (size_t)i * K;
        int r = rank_of(p, K, y);
        for (int q = 0; probs && q < K; q++)
            probs[(size_t)i * K + q] = (float)p[q];
        t->top1 += r < 1;
        t->top5 += r < 5;
    }
    return 0;
}

int tb_eval_cls(tb_vit *m, const struct tb_annotations *ann, const struct tb_dataset_opts *data,
                enum tb_label_kind label, enum tb_norm norm, int views, int crops, int batch,
                int workers, const struct tb_cls_action_list *actions, struct tb_eval_result *res,
                float *probs)
{
    const struct tb_vit_config *c = tb_vit_config(m);
    struct tb_dataset_opts o = eval_data(data, c, views, crops);
    struct tb_loader_opts lo = {.batch_size = batch, .n_workers = workers, .prefetch = 2,
                                .rank = tb_dist_rank(), .world = tb_dist_world()};
    struct eval e = {.ann = ann, .label = label, .actions = actions, .K = c->classes,
                     .per_item = views * (crops == 3 ? 3 : 1), .batch = batch,
                     .n_items = ann->n_items};
    struct tally t = {0, 0, {0, 0}};
    tb_dataset *ds = NULL;
    tb_loader *l = NULL;
    memset(res, 0, sizeof(*res));
    int rc = check_request(e.K, label, actions);
    if (rc < 0)
        return rc;
    if ((rc = tb_dataset_open(&ds, ann, &o)) < 0 || (rc = tb_loader_open(&l, ds, &lo)) < 0 ||
        (rc = eval_alloc(&e)) < 0)
        goto end;
    rc = run_batches(&e, m, l, ds, norm);
    /* Every process stops here, failed or not, before the reduction. */
    if (tb_dist_max_int(rc < 0)) {
        if (rc == 0)
            rc = tbi_err(TB_EDIST, "another process failed in the evaluation");
        goto end;
    }
    if ((rc = reduce_sums(&e)) < 0 || (rc = check_views(&e)) < 0 ||
        (rc = tally_items(&e, probs, &t)) < 0 ||
        (rc = score_modes(ann, e.sum, e.K, label, actions, e.truth, res)) < 0)
        goto end;
    res->n_items = e.n_items;
    res->views = views;
    res->crops = crops == 3 ? 3 : 1;
    res->top1 = t.top1 / e.n_items;
    res->top5 = t.top5 / e.n_items;
    res->loss = t.loss[TB_CLS_AVG_PROBS] / e.n_items;
    res->loss_logits = t.loss[TB_CLS_AVG_LOGITS] / e.n_items;
end:
    tb_loader_close(&l);
    tb_dataset_close(&ds);
    eval_free(&e);
    return rc;
}

int tb_eval_cls_json(const struct tb_eval_result *res, char *buf, size_t size)
{
    static const char *const level[3] = {"verb", "noun", "action"}; /* enum tb_label_kind */
    static const enum tb_cls_avg modes[2] = {TB_CLS_AVG_PROBS, TB_CLS_AVG_LOGITS};
    size_t len = 0;
    if (!buf || size < 1)
        return tbi_err(TB_EINVAL, "the scores' JSON needs a buffer");
    buf[0] = '\0';
    for (int k = 0; k < 2; k++) {
        const struct tb_cls_scores *s = &res->cls[modes[k]];
        const struct tb_cls_part *part[3] = {&s->verb, &s->noun, &s->action};
        const char *suffix = modes[k] == TB_CLS_AVG_LOGITS ? "_logits" : "";
        for (int v = 0; v < 3; v++) {
            if (!(res->cls_parts & 1 << v))
                continue;
            int n = snprintf(buf + len, size - len, ", \"%s_top1%s\": %.4f, \"%s_top5%s\": "
                             "%.4f, \"mean_class_%s%s\": %.4f", level[v], suffix,
                             part[v]->top1, level[v], suffix, part[v]->top5, level[v], suffix,
                             part[v]->mean_class);
            if (n < 0 || (size_t)n >= size - len)
                return tbi_err(TB_ERANGE, "the scores' JSON needs more than %zu bytes", size);
            len += (size_t)n;
        }
    }
    return (int)len;
}
