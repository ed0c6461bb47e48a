/* src/train/cls.c - supervised classification training (train.h): loader -> normalisation ->
 * ViT -> cross-entropy -> gradient clipping -> AdamW with warmup + cosine, an evaluation with
 * views x crops averaged, a checkpoint after every epoch and on Ctrl-C, metrics.jsonl.
 * Resuming continues with the very batches an uninterrupted run would have seen: the loader
 * is keyed by (seed, epoch, sample) and can start an epoch at any batch.
 * Tests: tests/test_train.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"
#include "tubelet/dist.h"
#include "tubelet/train.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int tb_item_label(const struct tb_ann_item *it, enum tb_label_kind k)
{
    return k == TB_LABEL_VERB ? it->verb : k == TB_LABEL_NOUN ? it->noun : it->action;
}

int tb_eval_cls(tb_vit *m, const struct tb_annotations *ann, const struct tb_dataset_opts *data,
                enum tb_label_kind label, int views, int crops, int batch, int workers,
                struct tb_eval_result *res, int *predicted)
{
    const struct tb_vit_config *c = tb_vit_config(m);
    struct tb_dataset_opts o = *data;
    tb_dataset *ds = NULL;
    tb_loader *l = NULL;
    double *acc = NULL, *ez = NULL;
    float *video = NULL;
    int K = c->classes, T = c->frames, rc;
    o.train = 0;
    o.n_views = views;
    o.n_crops = crops;
    o.n_frames = T;
    o.width = c->width;
    o.height = c->height;
    struct tb_loader_opts lo = {.batch_size = batch, .n_workers = workers, .prefetch = 2,
                                .world = 1, .max_failure_rate = 0.05};
    memset(res, 0, sizeof(*res));
    if ((rc = tb_dataset_open(&ds, ann, &o)) < 0 || (rc = tb_loader_open(&l, ds, &lo)) < 0)
        goto end;
    int per_item = views * (crops == 3 ? 3 : 1);
    int64_t n_items = ann->n_items;
    acc = calloc((size_t)n_items * K, sizeof(double));
    ez = malloc(sizeof(double) * (size_t)K);
    video = malloc(sizeof(float) * (size_t)batch * 3 * T * c->height * c->width);
    if (!acc || !ez || !video) {
        rc = tbi_err(TB_ENOMEM, "out of memory for the evaluation");
        goto end;
    }
    int64_t nb = tb_loader_epoch(l, 0);
    for (int64_t k = 0; k < nb; k++) {
        struct tb_batch *b = NULL;
        if ((rc = tb_loader_next(l, &b)) < 0)
            goto end;
        tb_augment_normalize(b->video, b->n, T, c->height, c->width, NULL, tb_mean_openai,
                             tb_std_openai, video);
        rc = tb_vit_forward(m, video, b->n, NULL, 0, NULL);
        if (rc < 0) {
            tb_loader_release(l, b);
            goto end;
        }
        const float *logits = tb_vit_logits(m);
        for (int j = 0; j < b->n; j++) {
            int64_t item = b->index[j] / per_item;
            const float *z = logits + (size_t)j * K;
            double *p = acc + (size_t)item * K, mx = z[0], sum = 0;
            for (int q = 1; q < K; q++)
                mx = z[q] > mx ? z[q] : mx;
            for (int q = 0; q < K; q++)
                sum += ez[q] = exp(z[q] - mx);
            for (int q = 0; q < K; q++)
                p[q] += ez[q] / sum / per_item;
        }
        tb_loader_release(l, b);
    }
    double top1 = 0, top5 = 0, loss = 0;
    for (int64_t i = 0; i < n_items; i++) {
        int y = tb_item_label(&ann->items[i], label);
        if (y < 0 || y >= K) {
            rc = tbi_err(TB_ERANGE, "%s:%d: label %d is not one of the model's %d classes",
                         ann->path, ann->items[i].line, y, K);
            goto end;
        }
        const double *p = acc + (size_t)i * K;
        int rank = 0, best = 0;
        for (int q = 0; q < K; q++) {
            rank += p[q] > p[y];
            best = p[q] > p[best] ? q : best;
        }
        if (predicted)
            predicted[i] = best;
        top1 += rank < 1;
        top5 += rank < 5;
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
    free(ez);
    free(video);
    return rc;
}

static void metrics_line(FILE *f, const char *fmt, ...) TB_PRINTF(2, 3);
static void metrics_line(FILE *f, const char *fmt, ...)
{
    va_list ap;
    if (!f)
        return;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fflush(f);
}

int tb_train_cls(const struct tb_train_opts *o, struct tb_eval_result *final_eval)
{
    tb_vit *m = NULL;
    struct tb_adamw opt = {0};
    tb_dataset *ds = NULL;
    tb_loader *l = NULL;
    float *video = NULL;
    int64_t *labels = NULL;
    FILE *metrics = NULL;
    char ckpt[4096], mpath[4096];
    struct tb_train_pos pos = {0, 0, 0};
    const struct tb_vit_config *c = &o->model;
    int rc, B = o->batch, T = c->frames;
    /* Data parallel under mpirun: each process reads its shard of every global batch of
     * world * B clips; gradients are averaged, so all hold the same weights; rank 0 alone
     * writes the checkpoint and the metrics. */
    int rank = tb_dist_rank(), world = tb_dist_world(), lead = rank == 0;

    if ((rc = tbi_mkdirs(o->out_dir)) < 0 ||
        (rc = tbi_fmt(ckpt, sizeof(ckpt), "%s/last.safetensors", o->out_dir)) < 0 ||
        (rc = tbi_fmt(mpath, sizeof(mpath), "%s/metrics.jsonl", o->out_dir)) < 0)
        return rc;
    if ((rc = tb_vit_open(&m, c)) < 0)
        return rc;
    tb_vit_init(m, o->seed);
    if ((rc = (int)tb_vit_plan(m, B)) < 0 || (rc = tb_adamw_init(&opt, m)) < 0)
        goto end;
    opt.beta1 = 0.9f;
    opt.beta2 = 0.999f;
    opt.eps = 1e-8f;
    opt.weight_decay = (float)o->weight_decay;
    if (tbi_is_file(ckpt)) {
        if ((rc = tb_ckpt_load(ckpt, m, &opt, &pos)) < 0)
            goto end;
        tbi_log(TB_LOG_INFO, "resuming from %s: epoch %" PRId64 ", batch %" PRId64 ", step %"
                PRId64, ckpt, pos.epoch, pos.batch, pos.step);
    }

    struct tb_dataset_opts d = o->data;
    d.train = 1;
    d.n_frames = T;
    d.width = c->width;
    d.height = c->height;
    struct tb_loader_opts lo = {.batch_size = B, .n_workers = o->workers,
                                .prefetch = o->prefetch, .seed = o->seed, .shuffle = 1,
                                .drop_last = 1, .rank = rank, .world = world,
                                .max_failure_rate = 0.05};
    if ((rc = tb_dataset_open(&ds, o->train_ann, &d)) < 0 || (rc = tb_loader_open(&l, ds, &lo)) < 0)
        goto end;
    int64_t per_epoch = tb_dataset_size(ds) / world / B, total = per_epoch * o->epochs;
    int64_t warmup = (int64_t)(o->warmup_epochs * (double)per_epoch);
    if (per_epoch < 1) {
        rc = tbi_err(TB_EINVAL, "%s: %lld clips make no batch of %d x %d processes",
                     o->train_ann->path, (long long)tb_dataset_size(ds), B, world);
        goto end;
    }
    video = malloc(sizeof(float) * (size_t)B * 3 * T * c->height * c->width);
    labels = malloc(sizeof(*labels) * (size_t)B);
    if (!video || !labels) {
        rc = tbi_err(TB_ENOMEM, "out of memory");
        goto end;
    }
    if (lead && !(metrics = fopen(mpath, "a"))) {
        rc = tbi_err(TB_EIO, "%s: cannot open: %s", mpath, strerror(errno));
        goto end;
    }

    double t_start = now_s(), t_log = t_start;
    int64_t clips_log = 0, step0 = pos.step;
    for (int64_t e = pos.epoch; e < o->epochs; e++) {
        int64_t nb = tb_loader_epoch_from(l, e, e == pos.epoch ? pos.batch : 0);
        for (int64_t k = e == pos.epoch ? pos.batch : 0; k < nb; k++) {
            struct tb_batch *b = NULL;
            if ((rc = tb_loader_next(l, &b)) < 0)
                goto end;
            tb_augment_normalize(b->video, b->n, T, c->height, c->width, NULL, tb_mean_openai,
                                 tb_std_openai, video);
            for (int j = 0; j < b->n; j++)
                labels[j] = b->label[j * 3 + o->label];
            tb_loader_release(l, b);
            float lr = tb_lr_schedule(pos.step, total, warmup, (float)o->lr, (float)o->min_lr);
            float loss = 0;
            if ((rc = tb_vit_forward(m, video, B, labels, (float)o->smoothing, &loss)) < 0 ||
                (rc = tb_dist_mean_f32(&loss, 1)) < 0)
                goto end;
            if (!isfinite(loss)) {
                rc = tbi_err(TB_ERANGE, "the loss is %f at step %" PRId64 " (epoch %" PRId64
                             ", batch %" PRId64 "); stopping (lower --lr?)", loss, pos.step, e,
                             k);
                goto end;
            }
            if ((rc = tb_vit_backward(m)) < 0)
                goto end;
            for (int i = 0; i < tb_vit_n_grad_spans(m); i++) {
                int64_t n;
                float *g = tb_vit_grad_span(m, i, &n);
                if ((rc = tb_dist_mean_f32(g, (size_t)n)) < 0)
                    goto end;
            }
            double gnorm = tb_grad_norm(m);
            if (!isfinite(gnorm)) { /* stop before the update spreads it into the weights */
                rc = tbi_err(TB_ERANGE, "the gradient norm is %f at step %" PRId64 " (epoch %"
                             PRId64 ", batch %" PRId64 ", loss %f); stopping", gnorm, pos.step,
                             e, k, loss);
                goto end;
            }
            opt.lr = lr;
            tb_adamw_update(&opt, m, tb_clip_factor(gnorm, o->clip_grad));
            pos.step++;
            clips_log += (int64_t)B * world;
            double t = now_s();
            int log_now = o->log_every > 0 && pos.step % o->log_every == 0;
            if (lead && (log_now || o->on_step)) {
                double rate = clips_log / (t - t_log > 1e-9 ? t - t_log : 1e-9);
                struct tb_train_progress pr = {
                    .epoch = e, .epochs = o->epochs, .step = pos.step, .steps = total,
                    .loss = loss, .lr = lr, .grad_norm = gnorm, .clips_per_s = rate,
                    .elapsed_s = t - t_start,
                    .eta_s = (t - t_start) / (double)(pos.step - step0) *
                             (double)(total - pos.step),
                };
                if (o->on_step)
                    o->on_step(o->user, &pr);
                if (log_now) {
                    metrics_line(metrics, "{\"step\": %" PRId64 ", \"epoch\": %" PRId64
                                 ", \"loss\": %.6f, \"lr\": %.6g, \"grad_norm\": %.4f, "
                                 "\"clips_per_s\": %.2f, \"elapsed_s\": %.1f}", pos.step, e,
                                 loss, lr, gnorm, rate, t - t_start);
                    t_log = t;
                    clips_log = 0;
                }
            }
            if (tb_dist_max_int(o->cancel && *o->cancel)) {
                pos.epoch = e;
                pos.batch = k + 1;
                if (lead && (rc = tb_ckpt_save(ckpt, m, &opt, &pos, NULL)) < 0)
                    goto end;
                rc = tbi_err(TB_ECANCELED, "stopped at step %" PRId64 "; %s holds the run, "
                             "run the same command to resume", pos.step, ckpt);
                goto end;
            }
        }
        pos.epoch = e + 1;
        pos.batch = 0;
        if (lead && (rc = tb_ckpt_save(ckpt, m, &opt, &pos, NULL)) < 0)
            goto end;
        int last = e + 1 == o->epochs;
        if (o->val_ann && (last || (o->eval_every > 0 && (e + 1) % o->eval_every == 0))) {
            struct tb_eval_result r;
            if ((rc = tb_eval_cls(m, o->val_ann, &o->data, o->label, o->val_views, o->val_crops,
                                  B, o->workers, &r, NULL)) < 0)
                goto end;
            r.epoch = e + 1;
            metrics_line(metrics, "{\"eval_epoch\": %" PRId64 ", \"top1\": %.4f, \"top5\": %.4f, "
                         "\"val_loss\": %.6f, \"items\": %" PRId64 "}", r.epoch, r.top1, r.top5,
                         r.loss, r.n_items);
            if (lead && o->on_eval)
                o->on_eval(o->user, &r);
            if (final_eval)
                *final_eval = r;
        }
    }
end:
    if (metrics)
        fclose(metrics);
    tb_loader_close(&l);
    tb_dataset_close(&ds);
    tb_adamw_free(&opt);
    tb_vit_close(&m);
    free(video);
    free(labels);
    return rc;
}
