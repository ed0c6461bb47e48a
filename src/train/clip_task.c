/* src/train/clip_task.c - video-text contrastive pretraining (`--task clip`, LaViLa's dual
 * encoder with AVION's towers) on the training loop, and its zero-shot evaluation
 * (train.h's tb_eval_clip): EK-100 multi-instance retrieval and classification by prompts.
 * Every caption of the training split is tokenized once, at the start (bad text is an error
 * naming its CSV line; captions cut to the context are counted in the log). A step encodes
 * the batch's clips and captions, gathers both towers' features from every process, computes
 * the symmetric InfoNCE over all of them (the same loss on every process) and backpropagates
 * each process's own rows: the loop's mean of the gradients then equals the gradient of one
 * process with the whole batch. With relevant captions (AVION's EK-100 MIR fine-tuning) a
 * clip's caption is a sentence drawn for (epoch, sample) among those relevant to it, taken
 * from the tokenized split (every sentence is a clip's narration). With caption lists (LaViLa's
 * LLM-augmented narrations) a clip's caption is one of its list drawn for (epoch, sample)
 * (tb_ann_caption_draw) and tokenized as the batch loads: every caption is checked at the
 * start, none is kept tokenized. Tests: tests/test_train.c, tests/test_dist.c,
 * tests/test_captions.c. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "data/csv.h"
#include "model/vit_internal.h"
#include "train/task.h"
#include "tubelet/dist.h"
#include "tubelet/metrics.h"
#include "tubelet/safetensors.h"
#include "tubelet/rng.h"

struct clip {
    tb_clip *m;
    tb_tokenizer *tok;
    int B, E, ctx, world;
    int lists;                /* the split has caption lists: a visit's caption is drawn from
                                 its clip's list and tokenized as the batch loads */
    int32_t *item_ids;        /* (items, ctx): every training caption, tokenized (no lists) */
    struct tb_mir_sentences *sent; /* relevant captions: the sentences, and for each clip */
    tb_mir_captions *caps;         /* those above the threshold; both NULL: off */
    int32_t *ids;             /* (B, ctx) of the loaded batch */
    struct tb_step_input in;      /* the inputs of the next step */
    int capture;              /* the next step keeps its features in v, t (tubelet step) */
    float *v, *t;             /* (B, E): this process's features (max-margin, capture) */
    float *all_v, *all_t;     /* (world B, E) */
    float *dv_all, *dt_all;   /* (world B, E): max-margin's gradients, on the host */
    /* InfoNCE on the backend: the gathered features, v then t (2, world B, E), and the loss's
     * work (tbi_infonce_work doubles) */
    float *d_feat;
    double *d_work;
};

static void clip_close(void **state)
{
    struct clip *t = *state;
    if (!t)
        return;
    tb_tokenizer_close(&t->tok);
    tb_mir_captions_close(&t->caps);
    tb_mir_sentences_free(&t->sent);
    void *bufs[] = {t->item_ids, t->ids, t->v, t->t, t->all_v, t->all_t, t->dv_all, t->dt_all};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        free(bufs[i]);
    if (t->m) {
        tbi_backend *be = tb_clip_params(t->m)->be;
        be->ops->free(be, t->d_feat);
        be->ops->free(be, t->d_work);
    }
    tb_clip_close(&t->m);
    free(t);
    *state = NULL;
}

/* One caption of item it into ids (ctx); an empty one, or one that is not UTF-8, is an error
 * naming its line; *n_cut counts it when longer than the context. */
static int tokenize_caption(tb_tokenizer *tok, const struct tb_annotations *ann,
                            const struct tb_ann_item *it, const char *caption, int ctx,
                            int32_t *ids, int *n_cut)
{
    const char *s = caption ? caption : "";
    while (*s == ' ' || *s == '\t')
        s++;
    if (!*s)
        return tbi_err(TB_EFORMAT, "%s:%d: empty caption (video-text training needs the "
                       "narration of every clip)", ann->path, it->line);
    int n = 0, rc = tb_tokenize(tok, caption, ids, ctx, &n);
    if (rc < 0)
        return tbi_err_prefix(rc, "%s:%d: the narration", ann->path, it->line);
    *n_cut += n > ctx;
    return 0;
}

/* Every caption of ann checked by tokenizing it, each into ids (n_items, ctx) where the split
 * has no caption lists (ids not NULL); with lists, into one scratch row (the drawn caption is
 * tokenized at each visit). *n_caps counts them, *n_cut those longer than the context. */
static int tokenize_split(tb_tokenizer *tok, const struct tb_annotations *ann, int ctx,
                          int32_t *ids, int *n_caps, int *n_cut)
{
    int32_t *row = ids ? NULL : tbi_malloc(sizeof(int32_t) * (size_t)ctx);
    int rc = ids || row ? 0 : tbi_err(TB_ENOMEM, "out of memory");
    *n_caps = *n_cut = 0;
    for (int i = 0; rc == 0 && i < ann->n_items; i++) {
        const struct tb_ann_item *it = &ann->items[i];
        int n = it->n_captions > 0 ? it->n_captions : 1;
        for (int k = 0; rc == 0 && k < n; k++, ++*n_caps)
            rc = tokenize_caption(tok, ann, it, tb_ann_caption(it, k), ctx,
                                  ids ? ids + (size_t)i * ctx : row, n_cut);
    }
    free(row);
    return rc;
}

/* Relevant captions: the training split's sentences and, for every clip, those whose
 * relevancy with it is above o->relevant_captions; logged with their memory. */
static int open_captions(struct clip *t, const struct tb_train_opts *o)
{
    const char *rel = o->train_relevancy, *sent = o->train_sentences;
    int has_rel = rel && rel[0], has_sent = sent && sent[0];
    if (!(o->relevant_captions > 0)) {
        if (has_rel || has_sent)
            return tbi_err(TB_EINVAL, "--train-relevancy and --train-sentences give the "
                           "relevancy of relevant captions: they need --relevant-captions");
        return 0;
    }
    double t0 = tbi_now_s();
    int rc = has_sent ? tb_mir_sentences_load(&t->sent, sent, o->train_ann)
                      : tb_mir_sentences_build(&t->sent, o->train_ann);
    if (rc < 0 ||
        (rc = tb_mir_captions_open(&t->caps, o->train_ann, t->sent, o->relevant_captions,
                                   rel)) < 0)
        return tbi_err_prefix(rc, "--relevant-captions %g", o->relevant_captions);
    struct tb_mir_captions_stats st;
    tb_mir_captions_stats(t->caps, &st);
    tbi_log(TB_LOG_INFO, "relevant captions: %lld clips x %lld sentences, %lld pairs of "
            "relevancy above %g (%s), %.1f a clip; %lld clips with none keep their own "
            "narration; %lld distinct rows, %lld entries, %.2f MB, %.1f s",
            (long long)st.n_items, (long long)st.n_sentences, (long long)st.n_pairs,
            o->relevant_captions, has_rel ? rel : "from the classes",
            (double)st.n_pairs / (double)st.n_items, (long long)st.n_empty,
            (long long)st.n_rows, (long long)st.n_entries, st.bytes / 1e6, tbi_now_s() - t0);
    return 0;
}

/* The training split's text: every caption tokenized (or, with caption lists, each drawn
 * and tokenized as its batch loads), and the relevant captions' sentences. */
static int open_text(struct clip *t, const struct tb_train_opts *o, int *n_caps, int *n_cut)
{
    const struct tb_annotations *a = o->train_ann;
    for (int i = 0; i < a->n_items; i++)
        t->lists |= a->items[i].n_captions > 1;
    if (t->lists && o->relevant_captions > 0)
        return tbi_err(TB_EINVAL, "%s has caption lists, a caption drawn from each clip's at "
                       "every visit: --relevant-captions draws EK-100's sentences instead; not "
                       "both", a->path);
    TBI_TRY(tb_tokenizer_open(&t->tok, NULL));
    if (!t->lists && !(t->item_ids = tbi_malloc(sizeof(int32_t) * (size_t)a->n_items * t->ctx)))
        return tbi_err(TB_ENOMEM, "out of memory");
    TBI_TRY(tokenize_split(t->tok, a, t->ctx, t->item_ids, n_caps, n_cut));
    return open_captions(t, o);
}

/* The host's and the backend's buffers of a step. */
static int open_buffers(struct clip *t, const struct tb_train_opts *o)
{
    size_t be = (size_t)t->B * t->E, all = be * (size_t)t->world;
    t->ids = tbi_malloc(sizeof(int32_t) * (size_t)t->B * t->ctx);
    t->v = tbi_malloc(sizeof(float) * be), t->t = tbi_malloc(sizeof(float) * be);
    t->all_v = tbi_malloc(sizeof(float) * all), t->all_t = tbi_malloc(sizeof(float) * all);
    t->dv_all = tbi_malloc(sizeof(float) * all), t->dt_all = tbi_malloc(sizeof(float) * all);
    if (!t->ids || !t->v || !t->t || !t->all_v || !t->all_t || !t->dv_all || !t->dt_all)
        return tbi_err(TB_ENOMEM, "out of memory");
    if (o->max_margin)
        return 0;
    tbi_backend *dev = tb_clip_params(t->m)->be;
    TBI_TRY(dev->ops->alloc(dev, sizeof(float) * 2 * all, (void **)&t->d_feat));
    return dev->ops->alloc(dev, sizeof(double) * tbi_infonce_work(t->B * t->world, t->E),
                           (void **)&t->d_work);
}

/* The dual encoder planned for o->batch pairs; the training split's text when o has one
 * (tubelet step gives the tokens of its batch). */
static int clip_open(void **state, const struct tb_train_opts *o)
{
    struct clip *t = tbi_calloc(1, sizeof(*t));
    int rc, n_cut = 0, n_caps = 0;
    *state = NULL;
    if (!t)
        return tbi_err(TB_ENOMEM, "out of memory");
    struct tb_clip_config c = o->clip;
    c.video = o->model;
    t->B = o->batch;
    t->E = c.embed;
    t->ctx = c.ctx;
    t->world = tb_dist_world();
    struct tb_plan_bytes bytes = {0};
    if ((rc = tb_clip_open(&t->m, &c)) == 0 &&
        (rc = tbi_task_fuse(tb_clip_params(t->m), o)) == 0 &&
        (rc = tb_clip_plan(t->m, t->B, &bytes)) == 0 && (rc = open_buffers(t, o)) == 0 &&
        o->train_ann)
        rc = open_text(t, o, &n_caps, &n_cut);
    if (rc < 0) {
        void *p = t;
        clip_close(&p);
        return rc;
    }
    tbi_log(TB_LOG_INFO, "clip: %lld parameters; memory plan of %d clips and captions: %.1f "
            "MB (activations at most %.1f MB at once); %d of %d captions longer than %d tokens, "
            "cut", (long long)tb_params_floats(tb_clip_params(t->m)), t->B, bytes.arena / 1e6,
            bytes.activations / 1e6, n_cut, n_caps, t->ctx);
    if (t->lists)
        tbi_log(TB_LOG_INFO, "clip: caption lists: %d captions for %d clips, one drawn from its "
                "clip's list at every visit", n_caps, o->train_ann->n_items);
    *state = t;
    return 0;
}

static tb_params *clip_params(void *state)
{
    return tb_clip_params(((struct clip *)state)->m);
}

/* The video tower as the dual encoder lays it out (AVION's: a class token, learned
 * positions, no head). */
static int clip_meta(void *state, const struct tb_train_opts *o, struct tbi_sb *sb)
{
    struct tb_ckpt_info s;
    tbi_settings_init(&s, "clip", o);
    s.clip = *tb_clip_config(((struct clip *)state)->m);
    s.model = s.clip.video;
    s.model.classes = 0;
    s.model.pool = TB_POOL_CLS;
    s.model.pos = TB_POS_LEARNED;
    s.model.layout = TB_LAYOUT_CLIP;
    return tbi_settings_meta(sb, &s);
}

/* Each clip's caption: its own narration's tokens, a relevant caption drawn for (epoch,
 * sample), or one of its list's, drawn and tokenized now - whatever process or worker loaded
 * the clip. */
static int clip_draw(void *state, const struct tb_train_opts *o, const struct tb_batch *b,
                     struct tb_step_input *in)
{
    struct clip *t = state;
    for (int j = 0; j < b->n && j < t->B; j++) {
        int64_t item = b->index[j];
        if (t->lists) {
            const struct tb_ann_item *it = &o->train_ann->items[item];
            int k = tb_ann_caption_draw(it, o->seed, b->epoch, item), n_cut = 0;
            TBI_TRY(tokenize_caption(t->tok, o->train_ann, it, tb_ann_caption(it, k), t->ctx,
                                     t->ids + (size_t)j * t->ctx, &n_cut));
            continue;
        }
        if (t->caps) {
            tb_rng g;
            tb_rng_init_for(&g, o->seed, TB_RNG_CAPTION, (uint64_t)b->epoch, (uint64_t)item);
            int k = tb_mir_captions_draw(t->caps, item, &g);
            if (k >= 0)
                item = t->sent->item[k];
        }
        memcpy(t->ids + (size_t)j * t->ctx, t->item_ids + (size_t)item * t->ctx,
               sizeof(int32_t) * (size_t)t->ctx);
    }
    *in = (struct tb_step_input){.n = b->n, .clips = b->video, .ids = t->ids};
    return 0;
}

static int clip_set(void *state, const struct tb_train_opts *o, const struct tb_step_input *in)
{
    struct clip *t = state;
    const float *mean, *std;
    tb_norm_values(o->norm, &mean, &std);
    if (in->n != t->B)
        return tbi_err(TB_EINVAL, "a batch of %d clips, the step takes %d", in->n, t->B);
    t->in = *in;
    if (in->clips)
        return tb_clip_set_clips(t->m, in->clips, NULL, in->n, mean, std);
    return tb_clip_set_video(t->m, in->video, in->n);
}

static int infonce_step(struct clip *t, float *loss)
{
    tbi_backend *be = tb_clip_params(t->m)->be;
    size_t all = (size_t)t->B * t->E * t->world, mine = (size_t)t->B * t->E;
    int N = t->B * t->world;
    float *v = t->d_feat, *tx = t->d_feat + all;
    double *sc, *ds;
    TBI_TRY(tb_clip_encode_video(t->m, NULL));
    TBI_TRY(tb_clip_encode_text(t->m, t->in.ids, t->in.n, NULL));
    TBI_TRY(be->ops->gather(be, v, tbi_clip_emb(t->m, 0), mine));
    TBI_TRY(be->ops->gather(be, tx, tbi_clip_emb(t->m, 1), mine));
    if (t->capture) { /* before the backward, whose gradients may take their space */
        TBI_TRY(be->ops->to_host(be, t->v, tbi_clip_emb(t->m, 0), sizeof(float) * mine));
        TBI_TRY(be->ops->to_host(be, t->t, tbi_clip_emb(t->m, 1), sizeof(float) * mine));
        t->capture = 0;
    }
    TBI_TRY(tbi_clip_scale(t->m, &sc, &ds));
    TBI_TRY(be->ops->infonce_fwd(be, loss, t->d_work, v, tx, N, t->E, sc));
    TBI_TRY(be->ops->infonce_bwd(be, tbi_clip_demb(t->m, 0), tbi_clip_demb(t->m, 1), ds,
                                 t->d_work, N, t->E, sc, tb_dist_rank() * t->B, t->B,
                                 (float)t->world));
    return tbi_clip_backward_dev(t->m);
}

/* AVION's max-margin loss, on the host (tb_clip_max_margin): the loss into *loss (backend),
 * this process's gradient rows (times the processes) out in *dv, *dt. */
static int max_margin(struct clip *t, const struct tb_train_opts *o, float *loss, float **dv,
                      float **dt)
{
    size_t be = (size_t)t->B * t->E;
    double l = 0;
    TBI_TRY(tb_clip_max_margin(t->all_v, t->all_t, t->B * t->world, t->E, o->margin, &l,
                               t->dv_all, t->dt_all));
    *dv = t->dv_all + (size_t)tb_dist_rank() * be, *dt = t->dt_all + (size_t)tb_dist_rank() * be;
    for (size_t i = 0; i < be; i++) {
        (*dv)[i] *= (float)t->world;
        (*dt)[i] *= (float)t->world;
    }
    return tbi_task_loss(tb_clip_params(t->m), loss, (float)l);
}

static int clip_step(void *state, const struct tb_train_opts *o, float *loss)
{
    struct clip *t = state;
    if (!o->max_margin) /* a non-finite loss is the loop's to catch, naming the step */
        return infonce_step(t, loss);
    size_t be = (size_t)t->B * t->E;
    TBI_TRY(tb_clip_encode_video(t->m, t->v));
    TBI_TRY(tb_clip_encode_text(t->m, t->in.ids, t->in.n, t->t));
    TBI_TRY(tb_dist_gather_f32(t->v, be, t->all_v));
    TBI_TRY(tb_dist_gather_f32(t->t, be, t->all_t));
    float *dv = t->dv_all, *dt = t->dt_all;
    TBI_TRY(max_margin(t, o, loss, &dv, &dt));
    return tb_clip_backward(t->m, dv, dt, 0);
}

/* Outputs 0 and 1: the step's video and text features (B, E), kept when asked before it. */
static int clip_output(void *state, int k, struct tb_st_tensor *out)
{
    struct clip *t = state;
    if (k > 1)
        return 1;
    if (!out) {
        t->capture = 1;
        return 0;
    }
    return tbi_task_out(out, k ? "text_emb" : "video_emb", k ? t->t : t->v, 2, t->B, t->E, 0);
}

static int clip_evaluate(void *state, const struct tb_train_opts *o, struct tb_eval_result *r)
{
    struct clip *t = state;
    return tb_eval_clip(t->m, t->tok, o->val_ann, o, 0, r);
}

/* Micro-batches are refused: the contrastive loss takes its negatives from one batch. */
static int clip_check(const struct tb_train_opts *o)
{
    if (o->accum_steps > 1)
        return tbi_err(TB_EINVAL, "--accum-steps %d: the contrastive loss takes its negatives "
                       "from one batch, so K micro-batches are not the loss of their union "
                       "(raise --batch or the processes)", o->accum_steps);
    return tbi_refuse_finetune(o, "clip");
}

const struct tbi_task tbi_task_clip = {
    .name = "clip",
    .check = clip_check,
    .open = clip_open,
    .close = clip_close,
    .params = clip_params,
    .meta = clip_meta,
    .draw = clip_draw,
    .set = clip_set,
    .step = clip_step,
    .output = clip_output,
    .evaluate = clip_evaluate,
};

/* ---- zero-shot evaluation ----------------------------------------------------------------- */

static void normalise_rows(float *x, int64_t n, int E)
{
    for (int64_t i = 0; i < n; i++) {
        float *row = x + (size_t)i * E;
        double s = 0;
        for (int e = 0; e < E; e++)
            s += (double)row[e] * row[e];
        double inv = 1 / fmax(sqrt(s), 1e-12);
        for (int e = 0; e < E; e++)
            row[e] = (float)(row[e] * inv);
    }
}

/* Each item's mean normalised video features (n_items, E), views and crops averaged, every
 * process its share of the clips, summed over processes. */
static int video_features(tb_clip *m, const struct tb_annotations *ann,
                          const struct tb_train_opts *o, float *feat)
{
    const struct tb_clip_config *c = tb_clip_config(m);
    int E = c->embed, B = o->batch, rc = 0;
    int per_item = o->val_views * (o->val_crops == 3 ? 3 : 1);
    struct tb_dataset_opts d = o->data;
    d.train = 0;
    d.n_views = o->val_views;
    d.n_crops = o->val_crops;
    d.n_frames = c->video.frames;
    d.width = c->video.width;
    d.height = c->video.height;
    struct tb_loader_opts lo = {.batch_size = B, .n_workers = o->workers, .prefetch = 2,
                                .rank = tb_dist_rank(), .world = tb_dist_world()};
    tb_dataset *ds = NULL;
    tb_loader *l = NULL;
    const float *mean, *std;
    tb_norm_values(o->norm, &mean, &std);
    double *acc = tbi_calloc((size_t)ann->n_items * E, sizeof(double));
    float *v = tbi_malloc(sizeof(float) * (size_t)B * E);
    if (!acc || !v) {
        rc = tbi_err(TB_ENOMEM, "out of memory for the evaluation");
        goto end;
    }
    if ((rc = tb_dataset_open(&ds, ann, &d)) < 0 || (rc = tb_loader_open(&l, ds, &lo)) < 0)
        goto end;
    int64_t nb = tb_loader_epoch(l, 0), n_samples = tb_dataset_size(ds);
    int rank = tb_dist_rank(), world = tb_dist_world();
    if (nb < 0)
        rc = (int)nb; /* and no batch */
    for (int64_t k = 0; k < nb && rc == 0; k++) {
        if (rank == 0 && nb >= 20 && k % (nb / 10) == 0 && k)
            tbi_log(TB_LOG_INFO, "evaluation: %lld of %lld batches of clips", (long long)k,
                    (long long)nb);
        struct tb_batch *b = NULL;
        if ((rc = tb_loader_next(l, &b)) < 0)
            break;
        if ((rc = tb_clip_set_clips(m, b->video, NULL, b->n, mean, std)) == 0)
            rc = tb_clip_encode_video(m, v);
        for (int j = 0; rc == 0 && j < b->n; j++) {
            /* the padding past the epoch's last clip (evening out the shards) skipped */
            int64_t position = rank + (b->number * (int64_t)B + j) * world;
            float *row = v + (size_t)j * E;
            for (int e = 0; e < E; e++)
                if (!isfinite(row[e]))
                    rc = tbi_err(TB_ERANGE, "%s:%d: clip %" PRId64 " has features that are "
                                 "not finite: the model is broken", ann->path,
                                 ann->items[b->index[j] / per_item].line, b->index[j]);
            if (rc < 0 || position >= n_samples)
                continue;
            normalise_rows(row, 1, E);
            double *a = acc + (size_t)(b->index[j] / per_item) * E;
            for (int e = 0; e < E; e++)
                a[e] += row[e] / per_item;
        }
        tb_loader_release(l, b);
    }
    if (tb_dist_max_int(rc < 0)) {
        if (rc == 0)
            rc = tbi_err(TB_EDIST, "another process failed in the evaluation");
        goto end;
    }
    if ((rc = tb_dist_sum_f64(acc, (size_t)ann->n_items * E)) < 0)
        goto end;
    for (size_t i = 0; i < (size_t)ann->n_items * E; i++)
        feat[i] = (float)acc[i];
    normalise_rows(feat, ann->n_items, E);
end:
    tb_loader_close(&l);
    tb_dataset_close(&ds);
    free(acc);
    free(v);
    return rc;
}

/* Normalised text features (n, E) of n texts, in batches of the model's plan. */
static int text_features(tb_clip *m, tb_tokenizer *tok, const char *const *texts, int n, int B,
                         float *feat)
{
    const struct tb_clip_config *c = tb_clip_config(m);
    int32_t *ids = tbi_malloc(sizeof(int32_t) * (size_t)B * c->ctx);
    int rc = ids ? 0 : tbi_err(TB_ENOMEM, "out of memory");
    for (int i0 = 0; rc == 0 && i0 < n; i0 += B) {
        int k = n - i0 < B ? n - i0 : B;
        for (int j = 0; rc == 0 && j < k; j++)
            if ((rc = tb_tokenize(tok, texts[i0 + j], ids + (size_t)j * c->ctx, c->ctx, NULL)) < 0)
                rc = tbi_err_prefix(rc, "text '%.60s'", texts[i0 + j]);
        if (rc == 0)
            rc = tb_clip_encode_text(m, ids, k, feat + (size_t)i0 * c->embed);
    }
    free(ids);
    if (rc == 0)
        normalise_rows(feat, n, c->embed);
    return rc;
}

/* A (rows, cols) float32 matrix as a .npy file (version 1.0, C order), written atomically. */
/* sim (nv, nt) = cosine similarities of normalised rows. */
static void similarities(const float *v, int64_t nv, const float *t, int64_t nt, int E,
                         float *sim)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < nv; i++)
        for (int64_t j = 0; j < nt; j++) {
            double d = 0;
            for (int e = 0; e < E; e++)
                d += (double)v[(size_t)i * E + e] * t[(size_t)j * E + e];
            sim[(size_t)i * nt + j] = (float)d;
        }
}

/* The class names of a classes CSV (tb_classes_load: row k names class k; '-' and '_' in the
 * key read as spaces) through the prompt ("{}" the name) into texts (n). */
static int class_prompts(const char *path, const char *prompt, char ***texts, int *n)
{
    char **keys = NULL;
    int rc;
    *texts = NULL;
    *n = 0;
    if (!strstr(prompt, "{}"))
        return tbi_err(TB_EINVAL, "prompt '%s' has no {} for the class name", prompt);
    if ((rc = tb_classes_load(path, &keys, n)) < 0)
        return rc;
    if (!(*texts = tbi_calloc((size_t)*n, sizeof(**texts))))
        rc = tbi_err(TB_ENOMEM, "out of memory");
    const char *slot = strstr(prompt, "{}");
    for (int k = 0; rc == 0 && k < *n; k++) {
        for (char *p = keys[k]; *p; p++)
            *p = *p == '-' || *p == '_' ? ' ' : *p;
        size_t len = strlen(prompt) + strlen(keys[k]) + 1;
        if (!((*texts)[k] = tbi_malloc(len)))
            rc = tbi_err(TB_ENOMEM, "out of memory");
        else
            snprintf((*texts)[k], len, "%.*s%s%s", (int)(slot - prompt), prompt, keys[k],
                     slot + 2);
    }
    int n_keys = *n;
    tb_classes_free(&keys, &n_keys); /* (n_keys is 0 after) */
    for (int k = 0; rc < 0 && *texts && k < *n; k++)
        free((*texts)[k]);
    if (rc < 0) {
        free(*texts);
        *texts = NULL;
        *n = 0;
    }
    return rc;
}

/* Zero-shot classification: each item's label against the classes' prompt features. */
static int zeroshot(tb_clip *m, tb_tokenizer *tok, const struct tb_annotations *ann,
                    const struct tb_train_opts *o, const float *vfeat, struct tb_eval_result *r)
{
    char **texts = NULL;
    int K = 0, E = tb_clip_config(m)->embed;
    int rc = class_prompts(o->class_names, o->prompt && o->prompt[0] ? o->prompt : "{}", &texts,
                           &K);
    float *cf = rc == 0 ? tbi_malloc(sizeof(float) * (size_t)K * E) : NULL;
    float *sim = rc == 0 ? tbi_malloc(sizeof(float) * (size_t)K) : NULL;
    if (rc == 0 && (!cf || !sim))
        rc = tbi_err(TB_ENOMEM, "out of memory");
    if (rc == 0)
        rc = text_features(m, tok, (const char *const *)texts, K, o->batch, cf);
    int64_t top1 = 0, top5 = 0;
    for (int i = 0; rc == 0 && i < ann->n_items; i++) {
        int y = tb_item_label(&ann->items[i], o->label);
        if (y < 0 || y >= K) {
            rc = tbi_err(TB_EINVAL, "%s:%d: class %d, but %s names %d classes", ann->path,
                         ann->items[i].line, y, o->class_names, K);
            break;
        }
        similarities(vfeat + (size_t)i * E, 1, cf, K, E, sim);
        int rank = 0; /* how many beat y; a tie goes to the lower class, as argmax */
        for (int q = 0; q < K; q++)
            rank += sim[q] > sim[y] || (sim[q] == sim[y] && q < y);
        top1 += rank < 1;
        top5 += rank < 5;
    }
    if (rc == 0) {
        r->zeroshot = 1;
        r->top1 = (double)top1 / ann->n_items;
        r->top5 = (double)top5 / ann->n_items;
    }
    for (int k = 0; k < K; k++)
        free(texts[k]);
    free(texts);
    free(cf);
    free(sim);
    return rc;
}

int tb_eval_clip(tb_clip *m, tb_tokenizer *tok, const struct tb_annotations *ann,
                 const struct tb_train_opts *o, int64_t epoch, struct tb_eval_result *res)
{
    int E = tb_clip_config(m)->embed, rc;
    struct tb_mir_sentences *s = NULL;
    struct tb_mir_scores sc, rnd;
    float *vf = NULL, *tf = NULL, *sim = NULL, *rel = NULL;
    memset(res, 0, sizeof(*res));
    res->epoch = epoch;
    int64_t nv = ann->n_items;
    if ((rc = tb_mir_sentences_build(&s, ann)) < 0)
        return rc;
    int64_t nt = s->n;
    vf = tbi_malloc(sizeof(float) * (size_t)nv * E);
    tf = tbi_malloc(sizeof(float) * (size_t)nt * E);
    sim = tbi_malloc(sizeof(float) * (size_t)nv * nt);
    rel = tbi_malloc(sizeof(float) * (size_t)nv * nt);
    if (!vf || !tf || !sim || !rel) {
        rc = tbi_err(TB_ENOMEM, "out of memory for the %lld x %lld retrieval matrices",
                     (long long)nv, (long long)nt);
        goto end;
    }
    if ((rc = video_features(m, ann, o, vf)) < 0 ||
        (rc = text_features(m, tok, s->text, (int)nt, o->batch, tf)) < 0)
        goto end;
    if (o->relevancy && o->relevancy[0])
        rc = tb_mir_relevancy_load(o->relevancy, ann, s, rel);
    else
        rc = tb_mir_relevancy(ann, s, 0, nv, rel);
    if (rc < 0)
        goto end;
    similarities(vf, nv, tf, nt, E, sim);
    if ((rc = tb_mir_evaluate(sim, rel, nv, nt, &sc)) < 0)
        goto end;
    if (o->similarity && o->similarity[0] && tb_dist_rank() == 0 &&
        (rc = tb_npy_write_f32(o->similarity, sim, nv, nt)) < 0)
        goto end;
    /* the baseline: the same scoring of random similarities */
    tb_rng g;
    tb_rng_init_for(&g, o->seed, TB_RNG_BASELINE, (uint64_t)epoch, 0);
    for (size_t i = 0; i < (size_t)nv * nt; i++)
        sim[i] = (float)tb_rng_uniform(&g);
    if ((rc = tb_mir_evaluate(sim, rel, nv, nt, &rnd)) < 0)
        goto end;
    res->retrieval = 1;
    res->n_items = nv;
    res->views = o->val_views > 1 ? o->val_views : 1;
    res->crops = o->val_crops == 3 ? 3 : 1;
    res->n_sentences = nt;
    memcpy(res->map, sc.map, sizeof(res->map));
    memcpy(res->ndcg, sc.ndcg, sizeof(res->ndcg));
    res->map_random = rnd.map[TB_MIR_AVG];
    res->ndcg_random = rnd.ndcg[TB_MIR_AVG];
    if (o->class_names && o->class_names[0])
        rc = zeroshot(m, tok, ann, o, vf, res);
end:
    tb_mir_sentences_free(&s);
    free(vf);
    free(tf);
    free(sim);
    free(rel);
    return rc;
}
