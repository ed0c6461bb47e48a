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

int tb_eval_cls(tb_vit *m, const struct tb_annotations *ann, const struct tb_dataset_opts *data,
                enum tb_label_kind label, enum tb_norm norm, int views, int crops, int batch,
                int workers, const struct tb_cls_action_list *actions, struct tb_eval_result *res,
                float *probs)
{
    const struct tb_vit_config *c = tb_vit_config(m);
    struct tb_dataset_opts o = *data;
    tb_dataset *ds = NULL;
    tb_loader *l = NULL;
    double *sum[2] = {NULL, NULL}; /* (n_items, K) by enum tb_cls_avg: sums, then means */
    double *pv = NULL;             /* (K) a view's softmax */
    double *seen = NULL; /* the views each item got (summed over processes: doubles) */
    int *truth = NULL;   /* (n_items, 3) with the action list, else (n_items) */
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
                                .rank = tb_dist_rank(), .world = tb_dist_world()};
    memset(res, 0, sizeof(*res));
    if (K < 1)
        return tbi_err(TB_EINVAL, "evaluating classes needs a model with a head");
    if (actions && label != TB_LABEL_ACTION)
        return tbi_err(TB_EINVAL, "an action list scores a model of actions, not of %ss",
                       label == TB_LABEL_VERB ? "verb" : "noun");
    if (actions && actions->n_actions != K)
        return tbi_err(TB_EINVAL, "the action list has %d actions, the model %d classes (is it "
                       "the list of the run's training and validation sets?)",
                       actions->n_actions, K);
    if ((rc = tb_dataset_open(&ds, ann, &o)) < 0 || (rc = tb_loader_open(&l, ds, &lo)) < 0)
        goto end;
    int per_item = views * (crops == 3 ? 3 : 1);
    int64_t n_items = ann->n_items;
    sum[0] = tbi_calloc((size_t)n_items * K, sizeof(double));
    sum[1] = tbi_calloc((size_t)n_items * K, sizeof(double));
    seen = tbi_calloc((size_t)n_items, sizeof(*seen));
    truth = tbi_malloc(sizeof(int) * 3 * (size_t)n_items);
    pv = tbi_malloc(sizeof(double) * (size_t)K);
    logits = tbi_malloc(sizeof(float) * (size_t)batch * K);
    if (!sum[0] || !sum[1] || !seen || !truth || !pv || !logits) {
        rc = tbi_err(TB_ENOMEM, "out of memory for the evaluation");
        goto end;
    }
    int64_t nb = tb_loader_epoch(l, 0), n_samples = tb_dataset_size(ds);
    if (nb < 0)
        rc = (int)nb; /* and no batch */
    for (int64_t k = 0; k < nb && rc == 0; k++) {
        struct tb_batch *b = NULL;
        if ((rc = tb_loader_next(l, &b)) < 0)
            break;
        if ((rc = tb_vit_forward_clips(m, b->video, NULL, b->n, mean, std, NULL, 0, NULL)) == 0 &&
            (rc = tb_vit_logits(m, logits)) == 0)
            rc = accumulate(ann, b, batch, logits, K, per_item, n_samples, sum, seen, pv);
        tb_loader_release(l, b);
    }
    /* Every process stops here, failed or not, before the reduction. */
    if (tb_dist_max_int(rc < 0)) {
        if (rc == 0)
            rc = tbi_err(TB_EDIST, "another process failed in the evaluation");
        goto end;
    }
    /* Sums over views reduce by adding: the logits' softmax waits for the whole sum. */
    for (int mode = 0; mode < 2; mode++)
        if ((rc = tb_dist_sum_f64(sum[mode], (size_t)n_items * K)) < 0)
            goto end;
    if ((rc = tb_dist_sum_f64(seen, (size_t)n_items)) < 0)
        goto end;
    double top1 = 0, top5 = 0, loss[2] = {0, 0};
    for (int64_t i = 0; i < n_items; i++)
        if (seen[i] != per_item) {
            rc = tbi_err(TB_EINVAL, "%s:%d: the evaluation saw %.0f of the item's %d views",
                         ann->path, ann->items[i].line, seen[i], per_item);
            goto end;
        }
    for (int64_t i = 0; i < n_items; i++) {
        const struct tb_ann_item *it = &ann->items[i];
        int y = tb_item_label(it, label);
        if (y < 0 || y >= K) {
            rc = tbi_err(TB_ERANGE, "%s:%d: label %d is not one of the model's %d classes",
                         ann->path, it->line, y, K);
            goto end;
        }
        for (int mode = 0; mode < 2; mode++) {
            double *row = sum[mode] + (size_t)i * K;
            for (int q = 0; q < K; q++)
                row[q] /= per_item;
            if (mode == TB_CLS_AVG_LOGITS)
                tbi_softmax_f64(row, K, row);
            loss[mode] += -log(row[y] > 1e-12 ? row[y] : 1e-12);
        }
        if (actions) {
            truth[3 * i] = it->verb;
            truth[3 * i + 1] = it->noun;
            truth[3 * i + 2] = it->action;
        } else {
            truth[i] = y;
        }
        const double *p = sum[TB_CLS_AVG_PROBS] + (size_t)i * K;
        int r = rank_of(p, K, y);
        for (int q = 0; probs && q < K; q++)
            probs[(size_t)i * K + q] = (float)p[q];
        top1 += r < 1;
        top5 += r < 5;
    }
    if ((rc = score_modes(ann, sum, K, label, actions, truth, res)) < 0)
        goto end;
    res->n_items = n_items;
    res->views = views;
    res->crops = crops == 3 ? 3 : 1;
    res->top1 = top1 / n_items;
    res->top5 = top5 / n_items;
    res->loss = loss[TB_CLS_AVG_PROBS] / n_items;
    res->loss_logits = loss[TB_CLS_AVG_LOGITS] / n_items;
end:
    tb_loader_close(&l);
    tb_dataset_close(&ds);
    free(sum[0]);
    free(sum[1]);
    free(seen);
    free(truth);
    free(pv);
    free(logits);
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
