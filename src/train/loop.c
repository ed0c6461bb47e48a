/* src/train/loop.c - the one training loop (train.h's tb_train), behind the task table
 * (task.h): loader -> task step -> data-parallel mean -> non-finite checks -> gradient
 * clipping -> AdamW with warmup + cosine, evaluation at its epochs, a checkpoint after every
 * epoch (after its evaluation: a run killed before the checkpoint redoes both) and on Ctrl-C,
 * metrics.jsonl (and, with --tensorboard, the same numbers as TensorBoard scalars:
 * tfevents.c). Resuming continues with the very batches an uninterrupted run would have seen:
 * the loader is keyed by (seed, epoch, sample) and can start an epoch at any batch; the steps
 * redone after a kill are logged again (the later line of a step is the one that counts) and
 * a line the kill cut short is dropped. A metrics.jsonl that cannot be written (a full disk)
 * stops the run. Under mpirun every process runs this loop on its shard; a failure on one
 * stops all of them (no process is left waiting in a reduction). A step's loss, gradient norm
 * and non-finite flag stay on the backend (the update ops read the flag there) and are read
 * once per log interval and before a checkpoint (docs/DEVELOPING.md, "Syncs in a step").
 * Tests: tests/test_train.c, tests/test_dist.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "core/strbuf.h"
#include "model/params.h"
#include "train/task.h"
#include "metrics/tfevents.h"
#include "tubelet/dist.h"


static const struct tbi_task *const tasks[] = {&tbi_task_cls, &tbi_task_mae, &tbi_task_clip};

/* Where a run's numbers go: metrics.jsonl, and with --tensorboard an event file (rank 0's;
 * both NULL elsewhere). */
struct run_log {
    FILE *metrics;
    const char *metrics_path;
    tbi_tfevents *events;
};

/* One field of a metrics line: its key and text in metrics.jsonl (printf's fmt of v, or a
 * count i when fmt is NULL), and its TensorBoard tag (NULL: not a scalar there). */
struct field {
    const char *key, *fmt;
    double v;
    int64_t i;
    const char *tag;
    const char *s; /* a string (fmt and tag NULL) */
};

static struct field count(const char *key, int64_t i, const char *tag)
{
    return (struct field){key, NULL, 0, i, tag};
}

static struct field num(const char *key, const char *fmt, double v, const char *tag)
{
    return (struct field){key, fmt, v, 0, tag};
}

static struct field text(const char *key, const char *s)
{
    return (struct field){key, NULL, 0, 0, NULL, s};
}

/* s as a JSON string literal */
static void sb_json(struct tbi_sb *sb, const char *s)
{
    tbi_sb_printf(sb, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p == '"' || *p == '\\')
            tbi_sb_printf(sb, "\\%c", *p);
        else if (*p < 0x20)
            tbi_sb_printf(sb, "\\u%04x", *p);
        else
            tbi_sb_printf(sb, "%c", *p);
    tbi_sb_printf(sb, "\"");
}

/* The event file's scalars of a line, flushed; a write error stops the event file (with a
 * warning naming it), not the run: metrics.jsonl stays the record. */
static void log_events(struct run_log *lg, int64_t step, const struct field *f, int n)
{
    int rc = 0;
    for (int k = 0; k < n && rc == 0; k++)
        if (f[k].tag)
            rc = tbi_tfevents_scalar(lg->events, f[k].tag, step,
                                     (float)(f[k].fmt ? f[k].v : (double)f[k].i));
    if (rc == 0)
        rc = tbi_tfevents_flush(lg->events);
    if (rc < 0) {
        tbi_log(TB_LOG_WARN, "%s; no more TensorBoard events in this run", tb_errmsg());
        tbi_tfevents_close(&lg->events);
    }
}

/* One line of n fields into metrics.jsonl (one write, flushed), and its scalars into the
 * event file at step. 0, or TB_EIO naming metrics.jsonl (the run stops: it would go on
 * without its record, and the disk that refused the line would refuse the next checkpoint). */
static int log_line(struct run_log *lg, int64_t step, const struct field *f, int n)
{
    if (lg->metrics) {
        struct tbi_sb line = {0};
        for (int k = 0; k < n; k++) {
            tbi_sb_printf(&line, "%s\"%s\": ", k ? ", " : "{", f[k].key);
            if (f[k].s)
                sb_json(&line, f[k].s);
            else if (f[k].fmt)
                tbi_sb_printf(&line, f[k].fmt, f[k].v);
            else
                tbi_sb_printf(&line, "%" PRId64, f[k].i);
        }
        tbi_sb_printf(&line, "}\n");
        int failed = line.failed ? ENOMEM : (errno = 0);
        if (!failed && (tbi_fwrite(line.buf, 1, line.len, lg->metrics) != line.len ||
                        fflush(lg->metrics) != 0))
            failed = errno ? errno : EIO;
        tbi_sb_free(&line);
        if (failed)
            return tbi_err(failed == ENOMEM ? TB_ENOMEM : TB_EIO, "%s: cannot write the line "
                           "of step %" PRId64 ": %s; stopping (run the same command to resume "
                           "from the last checkpoint once it can be written)", lg->metrics_path,
                           step, strerror(failed));
    }
    if (lg->events)
        log_events(lg, step, f, n);
    return 0;
}

/* A run killed while writing a metrics line leaves it unfinished: cut it off before the
 * resumed run appends, so every line stays whole. 0 or TB_EIO. */
static int drop_unfinished_line(const char *path)
{
    int fd = tbi_fault(TBI_FAULT_OPEN) ? (errno = EMFILE, -1) : open(path, O_RDWR);
    if (fd < 0)
        return errno == ENOENT ? 0 : tbi_err(TB_EIO, "%s: cannot open: %s", path,
                                             strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st) == 0 ? 0 : -1;
    off_t keep = rc == 0 ? st.st_size : 0;
    char buf[4096];
    while (rc == 0 && keep > 0) {
        size_t n = keep < (off_t)sizeof(buf) ? (size_t)keep : sizeof(buf);
        if (pread(fd, buf, n, keep - (off_t)n) != (ssize_t)n) {
            rc = -1;
            break;
        }
        size_t i = n;
        while (i > 0 && buf[i - 1] != '\n')
            i--;
        keep -= (off_t)(n - i);
        if (i > 0)
            break;
    }
    if (rc == 0 && keep < st.st_size) {
        rc = ftruncate(fd, keep);
        if (rc == 0)
            tbi_log(TB_LOG_WARN, "%s: dropped an unfinished last line (%lld bytes) that an "
                    "interrupted run left", path, (long long)(st.st_size - keep));
    }
    int e = errno;
    close(fd);
    return rc == 0 ? 0 : tbi_err(TB_EIO, "%s: cannot read or cut: %s", path, strerror(e));
}

/* An evaluation's line (retrieval's or classification's) at step; 0 or log_line's error. */
static int log_eval(struct run_log *lg, int64_t step, const struct tb_eval_result *r)
{
    if (r->retrieval) {
        const char *t1 = r->zeroshot ? "eval/zeroshot_top1" : NULL;
        const char *t5 = r->zeroshot ? "eval/zeroshot_top5" : NULL;
        const struct field f[] = {
            count("eval_epoch", r->epoch, "eval/epoch"),
            num("map", "%.4f", r->map[2], "eval/map"),
            num("ndcg", "%.4f", r->ndcg[2], "eval/ndcg"),
            num("map_v2t", "%.4f", r->map[0], "eval/map_v2t"),
            num("map_t2v", "%.4f", r->map[1], "eval/map_t2v"),
            num("ndcg_v2t", "%.4f", r->ndcg[0], "eval/ndcg_v2t"),
            num("ndcg_t2v", "%.4f", r->ndcg[1], "eval/ndcg_t2v"),
            num("map_random", "%.4f", r->map_random, "eval/map_random"),
            num("ndcg_random", "%.4f", r->ndcg_random, "eval/ndcg_random"),
            num("zeroshot_top1", "%.4f", r->zeroshot ? r->top1 : -1.0, t1),
            num("zeroshot_top5", "%.4f", r->zeroshot ? r->top5 : -1.0, t5),
            count("items", r->n_items, NULL),
            count("sentences", r->n_sentences, NULL),
            count("views", r->views, NULL),
            count("crops", r->crops, NULL),
        };
        return log_line(lg, step, f, (int)(sizeof(f) / sizeof(f[0])));
    }
    /* The classifier: then its levels' scores for both averagings, in tb_eval_cls_json's
     * order and names. */
    enum { N_BASE = 8, N_MAX = N_BASE + 2 * 3 * 3 };
    static const char *const level[3] = {"verb", "noun", "action"}; /* enum tb_label_kind */
    static const enum tb_cls_avg modes[2] = {TB_CLS_AVG_PROBS, TB_CLS_AVG_LOGITS};
    struct field f[N_MAX] = {
        count("eval_epoch", r->epoch, "eval/epoch"),
        num("top1", "%.4f", r->top1, "eval/top1"),
        num("top5", "%.4f", r->top5, "eval/top5"),
        num("val_loss", "%.6f", r->loss, "eval/val_loss"),
        num("val_loss_logits", "%.6f", r->loss_logits, "eval/val_loss_logits"),
        count("items", r->n_items, NULL),
        count("views", r->views, NULL),
        count("crops", r->crops, NULL),
    };
    char keys[N_MAX - N_BASE][32], tags[N_MAX - N_BASE][40]; /* "eval/" + a key */
    int n = N_BASE;
    for (int k = 0; k < 2; k++) {
        const struct tb_cls_scores *sc = &r->cls[modes[k]];
        const struct tb_cls_part *part[3] = {&sc->verb, &sc->noun, &sc->action};
        const char *sfx = modes[k] == TB_CLS_AVG_LOGITS ? "_logits" : "";
        for (int v = 0; v < 3; v++) {
            if (!(r->cls_parts & 1 << v))
                continue;
            const double val[3] = {part[v]->top1, part[v]->top5, part[v]->mean_class};
            for (int q = 0; q < 3; q++, n++) {
                char *key = keys[n - N_BASE], *tag = tags[n - N_BASE];
                if (q == 2)
                    snprintf(key, 32, "mean_class_%s%s", level[v], sfx);
                else
                    snprintf(key, 32, "%s_top%d%s", level[v], q ? 5 : 1, sfx);
                snprintf(tag, 40, "eval/%s", key);
                f[n] = num(key, "%.4f", val[q], tag);
            }
        }
    }
    return log_line(lg, step, f, n);
}

/* The backward's span hook: each complete gradient span's data-parallel mean starts at once
 * (a bucket, reduced while the backward goes on; every process starts the same spans in the
 * same order). With fused updates the span's mean is awaited (the next span may reuse its
 * buffer), its sum of squares goes into the step's numbers on the backend (for the log), and
 * the update is applied unless that sum (or an earlier one) is not finite: step_check flags
 * it and the checked update ops skip the span and every one after it (the spans before it
 * have taken theirs: the weights in memory are then part-updated, the last checkpoint on disk
 * is untouched), and the run stops at the next read of the flag, naming the span and step. */
struct spans {
    tb_params *r;
    struct tb_optim *opt;                /* fused updates: the optimizer; else NULL */
    int world;
    unsigned char *started;              /* (spans): this step's buckets started */
    int defer;                           /* accumulating: no bucket until the sum is whole */
    struct tbi_step_stats *stats;        /* the step's numbers (backend) */
    int64_t step;
};

static int span_hook(void *ctx, int span)
{
    struct spans *f = ctx;
    tb_params *r = f->r;
    tbi_backend *be = r->be;
    if (f->world > 1 && !f->defer) {
        TBI_TRY(be->ops->reduce_start(be, r->home[span], (size_t)tbi_span_floats(r, span)));
        f->started[span] = 1;
    }
    if (!f->opt)
        return 0;
    if (f->world > 1)
        TBI_TRY(be->ops->reduce_wait(be));
    TBI_TRY(be->ops->zero(be, &f->stats->span_sumsq, sizeof(double)));
    TBI_TRY(be->ops->sum_squares_acc(be, &f->stats->span_sumsq, r->home[span],
                                     (size_t)tbi_span_floats(r, span)));
    TBI_TRY(be->ops->step_check(be, f->stats, span, 1, 0, 1, f->step, 0, 0));
    return tbi_optim_update_span_checked(f->opt, span, f->stats);
}

/* Gradient accumulation (--accum-steps K): after micro-batch j's backward its gradients (in
 * the spans' homes, which the next forward may reuse) go into acc (the gradients' layout);
 * after the last one's, acc goes into the homes, which then hold the sum of all K (the
 * optimizer scales it by 1 / K). */
static int accumulate(tb_params *r, float *acc, int j, int last)
{
    tbi_backend *be = r->be;
    for (int s = 0; s < r->n_spans; s++) {
        float *g = r->home[s], *a = acc + r->off[s];
        size_t n = (size_t)tbi_span_floats(r, s);
        if (last)
            TBI_TRY(be->ops->add(be, g, g, a, n));
        else if (j == 0)
            TBI_TRY(be->ops->copy(be, a, g, sizeof(float) * n));
        else
            TBI_TRY(be->ops->add(be, a, a, g, n));
    }
    return 0;
}

/* After a backward on every process: the buckets a backward did not start (unfused: none,
 * as the models are written; fused: the spans were awaited one by one), then the step's loss
 * (a bucket of one float), and the end of all of them; every gradient is then the mean, and
 * the loss the processes' mean. */
static int reduce_step(struct spans *f)
{
    tb_params *r = f->r;
    tbi_backend *be = r->be;
    if (f->world < 2)
        return 0;
    for (int s = 0; !f->opt && s < r->n_spans; s++) {
        if (!f->started[s])
            TBI_TRY(be->ops->reduce_start(be, r->home[s], (size_t)tbi_span_floats(r, s)));
        f->started[s] = 0;
    }
    TBI_TRY(be->ops->reduce_start(be, &f->stats->loss, 1));
    return be->ops->reduce_wait(be);
}

/* The step's numbers read back (the one read of a step's results: docs/DEVELOPING.md, "Syncs
 * in a step"), into *h. A non-finite step recorded since the last read stops the run here,
 * named as it was found: its weights are those before it (the updates from it on were
 * skipped on the backend). 0 or TB_ERANGE. */
static int read_stats(tb_params *r, const struct tbi_step_stats *dev, struct tbi_step_stats *h)
{
    TBI_TRY(r->be->ops->to_host(r->be, h, dev, sizeof(*h)));
    switch (h->bad) {
    case TBI_BAD_LOSS:
        return tbi_err(TB_ERANGE, "the loss is %f at step %" PRId64 " (epoch %" PRId64 ", batch %"
                       PRId64 "); stopping (lower --lr?)", h->bad_loss, h->bad_step,
                       h->bad_epoch, h->bad_batch);
    case TBI_BAD_NORM:
        return tbi_err(TB_ERANGE, "the gradient norm is %f at step %" PRId64 " (epoch %" PRId64
                       ", batch %" PRId64 ", loss %f); stopping", h->bad_norm, h->bad_step,
                       h->bad_epoch, h->bad_batch, h->bad_loss);
    case TBI_BAD_SPAN: {
        int first, end;
        tb_params_span_range(r, h->bad_span, &first, &end);
        return tbi_err(TB_ERANGE, "the gradient of %s (and the rest of its span) is not finite "
                       "at step %" PRId64 "; stopping (the last checkpoint is untouched)",
                       tb_params_at(r, first)->name, h->bad_step);
    }
    case TBI_BAD_NONE:
        return 0;
    default:
        return tbi_err(TB_EINVAL, "the step's numbers on the %s backend hold flag %d: memory "
                       "written by something else?", r->be->name, (int)h->bad);
    }
}

/* A step that failed (rc) after a non-finite one that no read has seen yet: the non-finite
 * one is named, as it stopped the run first (its error, the same on every process); else
 * rc, with its message. */
static int first_failure(tb_params *r, const struct tbi_step_stats *dev, int rc)
{
    struct tbi_step_stats h;
    if (r->be->ops->to_host(r->be, &h, dev, sizeof(h)) < 0 || h.bad == TBI_BAD_NONE)
        return rc;
    return read_stats(r, dev, &h);
}

/* Whether any process failed (rc < 0 here, or elsewhere): then all stop, each with its own
 * message or one saying another process failed. */
static int any_failed(int rc, int64_t step)
{
    if (!tb_dist_max_int(rc < 0))
        return 0;
    return rc < 0 ? rc : tbi_err(TB_EDIST, "another process failed at step %" PRId64
                                 " (its log says why); stopping", step);
}

/* What one optimizer step needs of the run (optimizer_step). */
struct stepper {
    const struct tbi_task *task;
    void *st;
    const struct tb_train_opts *o;
    tb_loader *l;
    struct tb_optim *opt;                /* its lr set for this step */
    struct spans *fu;
    float *acc;                          /* K > 1: the micro-batches' gradient sum */
    float *micro;                        /* a micro-batch's loss (backend, 1) */
    int K;
};

/* One optimizer step: K micro-batches from batch *k of epoch e on (*k advanced past them),
 * each loaded and run by the task, their gradients summed, reduced over the processes,
 * checked on the backend (step_check: a non-finite loss or norm flags the step, naming it,
 * and the update ops then skip it) and applied. Nothing is read back: the loss and the norm of
 * the mean gradient stay in s->fu->stats for the loop's next read. */
static int optimizer_step(struct stepper *s, const struct tb_train_pos *pos, int64_t e,
                          int64_t *k)
{
    const struct tb_train_opts *o = s->o;
    tb_params *params = s->task->params(s->st);
    tbi_backend *be = params->be;
    struct tbi_step_stats *stats = s->fu->stats;
    int K = s->K, rc;
    /* this step's numbers to zero; a non-finite step's record (from bad on) stays */
    TBI_TRY(be->ops->zero(be, stats, offsetof(struct tbi_step_stats, bad)));
    if (o->fused_update) { /* the backward applies the update */
        tb_optim_begin_step(s->opt);
        s->fu->step = pos->step;
    }
    for (int j = 0; j < K; j++, (*k)++) { /* the micro-batches */
        struct tb_batch *b = NULL;
        struct tb_step_input in;
        rc = tb_loader_next(s->l, &b);
        if (rc == 0) {
            if ((rc = s->task->draw(s->st, o, b, &in)) == 0)
                rc = s->task->set(s->st, o, &in);
            tb_loader_release(s->l, b);
        }
        TBI_TRY(any_failed(rc, pos->step));
        rc = s->task->step(s->st, o, s->micro);
        if (rc == 0 && K > 1)
            rc = accumulate(params, s->acc, j, j == K - 1);
        /* a process that failed mid-backward handed over fewer buckets: none is reduced */
        TBI_TRY(any_failed(rc, pos->step));
        TBI_TRY(be->ops->step_loss(be, stats, s->micro, K));
    }
    TBI_TRY(reduce_step(s->fu));
    if (!o->fused_update)
        TBI_TRY(tbi_grad_sum_squares_acc(params, &stats->sumsq));
    TBI_TRY(be->ops->step_check(be, stats, -1, o->fused_update, o->clip_grad, K,
                                pos->step + 1, e + 1, *k));
    return o->fused_update ? 0 : tbi_optim_update_checked(s->opt, stats);
}

/* One annotation set's rows into crc: what the run reads of each, in order. */
static uint32_t items_crc(const struct tb_annotations *a)
{
    uint32_t crc = 0;
    for (int i = 0; i < a->n_items; i++) {
        const struct tb_ann_item *it = &a->items[i];
        const char *s[3] = {it->video, it->text, it->id};
        for (int k = 0; k < 3; k++)
            crc = tbi_crc32c_extend(crc, s[k] ? s[k] : "", s[k] ? strlen(s[k]) + 1 : 1);
        double w[2] = {it->start_s, it->end_s};
        int64_t n[3] = {it->n_frames, it->verb, it->noun};
        crc = tbi_crc32c_extend(crc, w, sizeof(w));
        crc = tbi_crc32c_extend(crc, n, sizeof(n));
        if (it->n_nouns > 0)
            crc = tbi_crc32c_extend(crc, it->nouns, sizeof(int) * (size_t)it->n_nouns);
        for (int k = 0; k < it->n_captions; k++) { /* a caption list, each with its NUL */
            const char *c = tb_ann_caption(it, k);
            crc = tbi_crc32c_extend(crc, c, strlen(c) + 1);
        }
    }
    return crc;
}

void tb_train_data_id(const struct tb_train_opts *o, char out[TB_DATA_ID_MAX])
{
    int n = snprintf(out, TB_DATA_ID_MAX, "train %d rows %08x", o->train_ann->n_items,
                     items_crc(o->train_ann));
    if (o->val_ann && n > 0 && n < TB_DATA_ID_MAX)
        snprintf(out + n, TB_DATA_ID_MAX - (size_t)n, "; val %d rows %08x", o->val_ann->n_items,
                 items_crc(o->val_ann));
}

/* The best evaluation so far (AVION's best_acc1: retrieval's mean mAP, else top-1), kept in
 * every checkpoint so a resume goes on comparing with it; epoch 0: none yet. */
struct best {
    double score;
    int64_t epoch;
};

static double eval_score(const struct tb_eval_result *r)
{
    return r->retrieval ? r->map[2] : r->top1;
}

static int save(const char *path, const struct tbi_task *t, void *st,
                const struct tb_train_opts *o, const struct tb_optim *opt,
                const struct tb_train_pos *pos, const struct best *best)
{
    struct tbi_sb meta = {0};
    char data[TB_DATA_ID_MAX];
    int rc = t->meta(st, o, &meta);
    tb_train_data_id(o, data);
    tbi_sb_printf(&meta, "%s\"data\":\"%s\"", tbi_sb_str(&meta)[0] ? "," : "", data);
    /* the batch a resume may deal out to another number of processes */
    tbi_sb_printf(&meta, ",\"global_batch\":\"%d\"",
                  tb_dist_world() * o->accum_steps * o->batch);
    if (best->epoch > 0)
        tbi_sb_printf(&meta, ",\"best\":\"%.17g\",\"best_epoch\":\"%" PRId64 "\"",
                      best->score, best->epoch);
    if (rc == 0)
        rc = meta.failed ? tbi_err(TB_ENOMEM, "out of memory")
                         : tb_ckpt_save(path, t->params(st), opt, pos, meta.buf);
    tbi_sb_free(&meta);
    return rc;
}

/* The evaluation after `done` epochs: its line in the log, on_eval, final_eval; *improved
 * when it beats best (then best is it). */
static int evaluate(const struct tbi_task *t, void *st, const struct tb_train_opts *o,
                    struct run_log *lg, int64_t done, int64_t step,
                    struct tb_eval_result *final_eval, struct best *best, int *improved)
{
    struct tb_eval_result r;
    int rc = t->evaluate(st, o, &r);
    if (rc < 0)
        return rc;
    r.epoch = done;
    *improved = best->epoch == 0 || eval_score(&r) > best->score;
    if (*improved)
        *best = (struct best){eval_score(&r), done};
    if ((rc = any_failed(log_eval(lg, step, &r), step)) < 0)
        return rc;
    if (tb_dist_rank() == 0 && o->on_eval)
        o->on_eval(o->user, &r);
    if (final_eval)
        *final_eval = r;
    return 0;
}

/* Fine-tuning's start: the weights of o->init that the model has (by name, or its
 * encoder's); the rest keep their initialisation. A file with none of them is an error. */
static int init_from(const struct tb_train_opts *o, tb_params *r)
{
    if (!o->init || !o->init[0])
        return 0;
    struct tb_st_file *f = NULL;
    int loaded = 0, rc = tb_st_read(&f, o->init);
    if (rc < 0)
        return rc;
    rc = tb_params_load_from(r, f, o->inflate, &loaded);
    tb_st_free(&f);
    if (rc < 0)
        return tbi_err_prefix(rc, "%s", o->init);
    int n = tb_params_count(r), blocks = 0;
    for (int i = 0; i < n; i++)
        blocks += tb_params_at(r, i)->loaded && strstr(tb_params_at(r, i)->name, "blocks.");
    if (!blocks)
        return tbi_err(TB_EFORMAT, "%s holds none of this model's block weights (blocks.N.* or "
                       "encoder.blocks.N.*): a checkpoint of another model?", o->init);
    struct tbi_sb fresh = {0};
    for (int i = 0; i < n; i++)
        if (!tb_params_at(r, i)->loaded)
            tbi_sb_printf(&fresh, "%s%s", fresh.len ? ", " : "", tb_params_at(r, i)->name);
    tbi_log(TB_LOG_INFO, "init: %d of %d tensors from %s; new: %s", loaded, n, o->init,
            fresh.len ? fresh.buf : "none");
    tbi_sb_free(&fresh);
    return 0;
}

/* The tasks' shared refusals (task.h): settings that only another task reads. */
int tbi_refuse_finetune(const struct tb_train_opts *o, const char *task)
{
    if (o->drop_path > 0 || o->mix.mixup > 0 || o->mix.cutmix > 0 || o->erase > 0 ||
        o->head_dropout > 0 || o->data.rand_augment.n_ops > 0)
        return tbi_err(TB_EINVAL, "drop path, mixup, cutmix, random erasing, RandAugment and "
                       "head dropout are for fine-tuning a classifier (--task cls), not --task "
                       "%s", task);
    if (o->layer_decay > 0 && o->layer_decay < 1)
        return tbi_err(TB_EINVAL, "layer-wise lr decay (%g) is for fine-tuning a classifier "
                       "(--task cls), not --task %s", o->layer_decay, task);
    return 0;
}

int tbi_refuse_captions(const struct tb_train_opts *o, const char *task)
{
    if (o->relevant_captions > 0)
        return tbi_err(TB_EINVAL, "relevant captions (%g) draw a caption for video-text "
                       "training (--task clip), not --task %s", o->relevant_captions, task);
    return 0;
}

int tbi_task_find(const char *name, const struct tbi_task **out)
{
    char names[64] = "";
    if (!name || !name[0])
        name = "cls";
    *out = NULL;
    for (size_t i = 0; i < sizeof(tasks) / sizeof(tasks[0]); i++) {
        if (!strcmp(tasks[i]->name, name))
            *out = tasks[i];
        snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? ", " : "",
                 tasks[i]->name);
    }
    return *out ? 0 : tbi_err(TB_EUNSUPPORTED, "no task '%s' (the tasks: %s)", name, names);
}

/* The task o names, and what the loop itself refuses of o before anything is written. */
static int find_task(const struct tb_train_opts *o, const struct tbi_task **out)
{
    TBI_TRY(tbi_task_find(o->task, out));
    if (o->accum_steps > 1 && o->fused_update)
        return tbi_err(TB_EINVAL, "--accum-steps %d: --fused-update applies each gradient as "
                       "the backward completes it, before the micro-batches are summed",
                       o->accum_steps);
    if (o->fused_update && o->clip_grad > 0)
        return tbi_err(TB_EINVAL, "--fused-update applies each gradient as the backward "
                       "completes it, before there is a global norm to clip by (--clip-grad "
                       "%g): add --clip-grad 0", o->clip_grad);
    return (*out)->check(o);
}

/* A run of tb_train: what it holds from its start to its end (run_open, run_close). */
struct run {
    const struct tb_train_opts *o;
    const struct tbi_task *task;
    void *st;
    tb_params *params;
    struct tb_optim opt;
    tb_dataset *ds;
    tb_loader *l;
    struct run_log lg;
    struct spans fu;
    float *acc;                          /* --accum-steps: the micro-batches' gradient sum */
    float *micro;                        /* a micro-batch's loss (backend) */
    char ckpt[4096], mpath[4096];
    struct tb_train_pos pos;
    struct best best;
    int K, lead;
    int64_t per_epoch, total, warmup;    /* optimizer steps: an epoch's, the run's, warmup's */
    struct tb_eval_result *final_eval;
};

/* The task's model initialised (o->init's weights over it), the optimizer, the buffers of a
 * step and the gradient hooks (fused updates, the data-parallel reduction). */
static int run_model(struct run *r)
{
    const struct tb_train_opts *o = r->o;
    tb_params *p = r->params;
    tbi_backend *be = p->be;
    r->opt.kind = o->optimizer;
    r->opt.zero = o->zero;
    TBI_TRY(tb_params_init(p, o->seed));
    TBI_TRY(init_from(o, p));
    TBI_TRY(tb_optim_init(&r->opt, p));
    r->fu = (struct spans){.r = p, .opt = o->fused_update ? &r->opt : NULL,
                           .world = tb_dist_world(), .defer = r->K > 1};
    if (r->fu.world > 1 && !(r->fu.started = tbi_calloc((size_t)tb_params_spans(p), 1)))
        return tbi_err(TB_ENOMEM, "out of memory");
    if (r->K > 1)
        TBI_TRY(be->ops->alloc(be, sizeof(float) * (size_t)p->n_floats, (void **)&r->acc));
    TBI_TRY(be->ops->alloc(be, sizeof(*r->fu.stats), (void **)&r->fu.stats));
    TBI_TRY(be->ops->zero(be, r->fu.stats, sizeof(*r->fu.stats)));
    TBI_TRY(be->ops->alloc(be, sizeof(float), (void **)&r->micro));
    if (o->fused_update)
        tb_params_fuse(p, span_hook, &r->fu);
    else if (r->fu.world > 1)
        tb_params_on_span(p, span_hook, &r->fu);
    if (o->layer_decay > 0 && o->layer_decay < 1)
        tb_params_layer_decay(p, o->model.depth, o->layer_decay);
    r->opt.beta1 = (float)o->beta1;
    r->opt.beta2 = (float)o->beta2;
    r->opt.eps = (float)o->adam_eps;
    r->opt.weight_decay = (float)o->weight_decay;
    return 0;
}

/* out_dir/last.safetensors, when there is one: the weights, the optimizer, the position and
 * the best evaluation to go on from. */
static int run_resume(struct run *r)
{
    struct tb_ckpt_info info;
    if (!tbi_is_file(r->ckpt))
        return 0;
    TBI_TRY(tb_ckpt_load(r->ckpt, r->params, &r->opt, &r->pos));
    TBI_TRY(tb_ckpt_info(r->ckpt, &info));
    r->best = (struct best){info.best, info.best_epoch};
    tbi_log(TB_LOG_INFO, "resuming from %s: %" PRId64 " steps done, epoch %" PRId64 " batch %"
            PRId64 " next", r->ckpt, r->pos.step, r->pos.epoch + 1, r->pos.batch + 1);
    return 0;
}

/* The training clips: this process's shard of every global batch, and the schedule's
 * length in optimizer steps (K loader batches each, the batches left over dropped). */
static int run_data(struct run *r)
{
    const struct tb_train_opts *o = r->o;
    int world = tb_dist_world(), B = o->batch;
    struct tb_dataset_opts d = o->data;
    d.train = 1;
    d.n_frames = o->model.frames;
    d.width = o->model.width;
    d.height = o->model.height;
    struct tb_loader_opts lo = {.batch_size = B, .n_workers = o->workers,
                                .prefetch = o->prefetch, .seed = o->seed, .shuffle = 1,
                                .drop_last = 1, .rank = tb_dist_rank(), .world = world,
                                .max_failure_rate = 0.05};
    TBI_TRY(tb_dataset_open(&r->ds, o->train_ann, &d));
    TBI_TRY(tb_loader_open(&r->l, r->ds, &lo));
    r->per_epoch = tb_dataset_size(r->ds) / world / B / r->K;
    r->total = r->per_epoch * o->epochs;
    r->warmup = (int64_t)(o->warmup_epochs * (double)r->per_epoch);
    if (r->per_epoch < 1)
        return tbi_err(TB_EINVAL, "%s: %lld clips make no batch of %d x %d processes x %d "
                       "micro-batches", o->train_ann->path, (long long)tb_dataset_size(r->ds),
                       B, world, r->K);
    if (r->pos.batch % r->K)
        return tbi_err(TB_EINVAL, "%s stopped after batch %" PRId64 " of its epoch, which is "
                       "not a whole number of %d micro-batches: resume with the run's own "
                       "--accum-steps", r->ckpt, r->pos.batch, r->K);
    return 0;
}

/* The run accepted (its checkpoint fits the model, its data and position the flags): only now
 * does the run directory change - config.txt, metrics.jsonl (a line a kill cut short
 * dropped), the event file, and every start's line: what its annotation files lost. Rank 0. */
static int run_start_log(struct run *r)
{
    const struct tb_train_opts *o = r->o;
    if (o->config_text) {
        char cpath[4200];
        TBI_TRY(tbi_fmt(cpath, sizeof(cpath), "%s/config.txt", o->out_dir));
        TBI_TRY(tb_file_write_atomic(cpath, o->config_text, strlen(o->config_text)));
    }
    r->lg.metrics_path = r->mpath;
    TBI_TRY(drop_unfinished_line(r->mpath));
    if (!(r->lg.metrics = tbi_fopen(r->mpath, "a")))
        return tbi_err(TB_EIO, "%s: cannot open: %s", r->mpath, strerror(errno));
    if (o->tensorboard)
        TBI_TRY(tbi_tfevents_open(&r->lg.events, o->out_dir));
    const struct tb_annotations *t = o->train_ann, *v = o->val_ann;
    const struct field f[] = {
        count("start_step", r->pos.step, NULL), count("train_rows", t->n_items, NULL),
        count("train_rows_skipped", t->n_skipped, NULL),
        count("train_rows_unreadable", t->n_unreadable, NULL),
        count("train_rows_clamped", t->n_clamped, NULL),
        count("val_rows", v ? v->n_items : 0, NULL),
        count("val_rows_skipped", v ? v->n_skipped : 0, NULL),
        count("val_rows_clamped", v ? v->n_clamped : 0, NULL),
        text("resume_changed", o->resume_note ? o->resume_note : ""),
    };
    int n = (int)(sizeof(f) / sizeof(f[0])) - !(o->resume_note && o->resume_note[0]);
    return log_line(&r->lg, r->pos.step, f, n);
}

/* Progress since the last log line, for on_step and the metrics (rank 0). */
struct pace {
    double t_start, t_log;
    int64_t clips, step0;
};

/* After step pos.step of epoch e: on_step, and every log_every steps a metrics line (the
 * step's numbers seen are those of the last read). */
static int log_step(struct run *r, struct pace *pc, int64_t e, float lr,
                    const struct tbi_step_stats *seen)
{
    const struct tb_train_opts *o = r->o;
    int log_now = o->log_every > 0 && r->pos.step % o->log_every == 0;
    double t = tbi_now_s();
    double rate = pc->clips / (t - pc->t_log > 1e-9 ? t - pc->t_log : 1e-9);
    struct tb_train_progress pr = {
        .epoch = e, .epochs = o->epochs, .step = r->pos.step, .steps = r->total,
        .loss = seen->loss, .lr = lr, .grad_norm = seen->norm, .clips_per_s = rate,
        .elapsed_s = t - pc->t_start,
        .eta_s = (t - pc->t_start) / (double)(r->pos.step - pc->step0) *
                 (double)(r->total - r->pos.step),
    };
    if (o->on_step)
        o->on_step(o->user, &pr);
    if (!log_now)
        return 0;
    struct tb_loader_stats ls;
    tb_loader_get_stats(r->l, &ls);
    const struct field f[] = {
        count("step", r->pos.step, NULL), count("epoch", e + 1, NULL),
        num("loss", "%.6f", seen->loss, "train/loss"), num("lr", "%.6g", lr, "train/lr"),
        num("grad_norm", "%.4f", seen->norm, "train/grad_norm"),
        num("clips_per_s", "%.2f", rate, "train/clips_per_s"),
        num("elapsed_s", "%.1f", t - pc->t_start, NULL),
        count("clips_replaced", ls.failures, NULL),
    };
    pc->t_log = t;
    pc->clips = 0;
    return log_line(&r->lg, r->pos.step, f, (int)(sizeof(f) / sizeof(f[0])));
}

/* Ctrl-C at batch k of epoch e: the run saved where it stands, then TB_ECANCELED. */
static int run_cancel(struct run *r, int64_t e, int64_t k)
{
    r->pos.epoch = e;
    r->pos.batch = k;
    TBI_TRY(tbi_optim_gather(&r->opt));
    if (r->lead)
        TBI_TRY(save(r->ckpt, r->task, r->st, r->o, &r->opt, &r->pos, &r->best));
    return tbi_err(TB_ECANCELED, "stopped at step %" PRId64 "; %s holds the run, run the same "
                   "command to resume", r->pos.step, r->ckpt);
}

/* Epoch e's optimizer steps, from its batch pos.batch on when it is the resumed one. The
 * step's numbers are read at a log line, before a checkpoint (the epoch's last step, Ctrl-C)
 * and nowhere else. */
static int run_epoch(struct run *r, struct pace *pc, int64_t e)
{
    const struct tb_train_opts *o = r->o;
    struct stepper sr = {.task = r->task, .st = r->st, .o = o, .l = r->l, .opt = &r->opt,
                         .fu = &r->fu, .acc = r->acc, .micro = r->micro, .K = r->K};
    struct tbi_step_stats seen = {0};
    int64_t nb = tb_loader_epoch_from(r->l, e, e == r->pos.epoch ? r->pos.batch : 0);
    int K = r->K, rc;
    TBI_TRY(any_failed(nb < 0 ? (int)nb : 0, r->pos.step));
    for (int64_t k0 = e == r->pos.epoch ? r->pos.batch : 0, k = k0; k0 + K <= nb; k0 = k) {
        float lr = tb_lr_schedule(r->pos.step, r->total, r->warmup, (float)o->warmup_lr,
                                  (float)o->lr, (float)o->min_lr);
        r->opt.lr = lr;
        if ((rc = optimizer_step(&sr, &r->pos, e, &k)) < 0)
            return first_failure(r->params, r->fu.stats, rc);
        r->pos.step++;
        pc->clips += (int64_t)o->batch * tb_dist_world() * K;
        int log_now = o->log_every > 0 && r->pos.step % o->log_every == 0;
        int stop = tb_dist_max_int(o->cancel && *o->cancel);
        if (log_now || stop || k + K > nb)
            TBI_TRY(read_stats(r->params, r->fu.stats, &seen));
        rc = 0;
        if (r->lead && (log_now || o->on_step))
            rc = log_step(r, pc, e, lr, &seen);
        TBI_TRY(any_failed(rc, r->pos.step));
        if (stop)
            return run_cancel(r, e, k);
    }
    return 0;
}

/* After epoch e: its evaluation when due, then best.safetensors after an evaluation that
 * beats the earlier ones (AVION's checkpoint_best.pt), checkpoint_EPOCH.safetensors every
 * --save-every epochs (AVION's --save-freq), then last.safetensors: a write that fails
 * leaves the resume point before this epoch, and the epoch run again writes them all. */
static int run_epoch_end(struct run *r, int64_t e)
{
    const struct tb_train_opts *o = r->o;
    char extra[4096];
    int last = e + 1 == o->epochs, improved = 0, rc;
    if (o->val_ann && r->task->evaluate &&
        (last || (o->eval_every > 0 && (e + 1) % o->eval_every == 0)))
        TBI_TRY(evaluate(r->task, r->st, o, &r->lg, e + 1, r->pos.step, r->final_eval,
                         &r->best, &improved));
    r->pos.epoch = e + 1;
    r->pos.batch = 0;
    rc = tbi_optim_gather(&r->opt);
    if (rc == 0 && r->lead && improved &&
        (rc = tbi_fmt(extra, sizeof(extra), "%s/best.safetensors", o->out_dir)) == 0)
        rc = save(extra, r->task, r->st, o, &r->opt, &r->pos, &r->best);
    if (rc == 0 && r->lead && o->save_every > 0 && (e + 1) % o->save_every == 0 &&
        (rc = tbi_fmt(extra, sizeof(extra), "%s/checkpoint_%05" PRId64 ".safetensors",
                      o->out_dir, e + 1)) == 0)
        rc = save(extra, r->task, r->st, o, &r->opt, &r->pos, &r->best);
    if (rc == 0 && r->lead)
        rc = save(r->ckpt, r->task, r->st, o, &r->opt, &r->pos, &r->best);
    tbi_optim_release(&r->opt);
    return any_failed(rc, r->pos.step);
}

static void run_close(struct run *r)
{
    if (r->lg.metrics)
        fclose(r->lg.metrics);
    tbi_tfevents_close(&r->lg.events);
    tb_loader_close(&r->l);
    tb_dataset_close(&r->ds);
    tb_optim_free(&r->opt);
    if (r->params) {
        r->params->be->ops->free(r->params->be, r->acc); /* NULL-safe */
        r->params->be->ops->free(r->params->be, r->fu.stats);
        r->params->be->ops->free(r->params->be, r->micro);
    }
    r->task->close(&r->st);
    free(r->fu.started);
}

/* Data parallel under mpirun: each process reads its shard of every global batch of world * B
 * clips; gradients are averaged, so all hold the same weights; rank 0 alone writes the
 * checkpoint and the metrics. */
int tb_train(const struct tb_train_opts *o, struct tb_eval_result *final_eval)
{
    struct run r = {.o = o, .K = o->accum_steps > 1 ? o->accum_steps : 1,
                    .lead = tb_dist_rank() == 0, .final_eval = final_eval};
    int rc;
    TBI_TRY(find_task(o, &r.task));
    TBI_TRY(tbi_mkdirs(o->out_dir));
    TBI_TRY(tbi_fmt(r.ckpt, sizeof(r.ckpt), "%s/last.safetensors", o->out_dir));
    TBI_TRY(tbi_fmt(r.mpath, sizeof(r.mpath), "%s/metrics.jsonl", o->out_dir));
    TBI_TRY(r.task->open(&r.st, o));
    r.params = r.task->params(r.st);
    if ((rc = run_model(&r)) < 0 || (rc = run_resume(&r)) < 0 || (rc = run_data(&r)) < 0)
        goto end;
    rc = r.lead ? run_start_log(&r) : 0;
    if ((rc = any_failed(rc, r.pos.step)) < 0)
        goto end;
    struct pace pc = {.t_start = tbi_now_s(), .step0 = r.pos.step};
    pc.t_log = pc.t_start;
    for (int64_t e = r.pos.epoch; e < o->epochs; e++)
        if ((rc = run_epoch(&r, &pc, e)) < 0 || (rc = run_epoch_end(&r, e)) < 0)
            break;
end:
    run_close(&r);
    return rc;
}
