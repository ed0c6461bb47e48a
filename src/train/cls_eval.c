/* src/train/cls_eval.c - evaluation of a classifier (train.h's tb_eval_cls): views x crops
 * averaged, sharded over processes and reduced, top-k under a fixed tie rule, non-finite logits
 * an error. Tests: tests/test_train.c. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
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
