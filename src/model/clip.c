/* src/model/clip.c - the video-text dual encoder (contract in model.h): one backend and one
 * parameter registry holding the video ViT in its CLIP layout ("visual.") and the text tower
 * (text.c), and the host's contrastive losses on their features (src/tensor/contrastive.h).
 * Tests: tests/test_clip.c. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "model/text.h"
#include "model/vit_internal.h"
#include "tensor/contrastive.h"

#define TEXT_EPS 1e-5f

struct tb_clip {
    struct tb_clip_config c;
    tbi_backend *be;
    struct tb_params reg;
    tb_vit *video;
    struct tbi_text *text;
    int B_plan;
    int video_ready, text_ready;      /* an encoding waits for its backward */
    int i_scale, span_scale;          /* logit_scale, learned: its index and gradient span */
    struct tbi_plan plan;             /* the arena of every buffer of the step, both towers' */
    double *scale;                    /* backend (2): this step's logit scale, the loss's
                                       * gradient on it */
};

/* CLIP's logit_scale, when learned: a gradient span of its own, after the towers'. */
static int add_logit_scale(tb_clip *m)
{
    m->i_scale = m->span_scale = -1;
    if (!m->c.learn_temperature)
        return 0;
    m->span_scale = m->reg.n_spans;
    int rc = tbi_params_span(&m->reg);
    if (rc < 0 || (rc = tbi_params_add(&m->reg, "", "logit_scale", TB_INIT_CONST, 0, NULL)) < 0)
        return rc;
    m->i_scale = rc;
    m->reg.p[rc].init_std = (float)log(1 / m->c.temperature);
    return 0;
}

int tb_clip_open(tb_clip **out, const struct tb_clip_config *c)
{
    *out = NULL;
    struct tb_vit_config vc = c->video;
    vc.layout = TB_LAYOUT_CLIP;
    vc.tubelet = vc.tubelet ? vc.tubelet : 1;
    vc.pool = TB_POOL_CLS;
    vc.pos = TB_POS_LEARNED;
    vc.classes = 0;
    vc.embed = c->embed;
    struct tbi_text_config tc = {.vocab = c->vocab, .ctx = c->ctx, .width = c->text_width,
                                 .heads = c->text_heads, .layers = c->text_layers,
                                 .embed = c->embed, .eps = TEXT_EPS, .act = TBI_ACT_GELU,
                                 .causal = c->text_causal, .dt = c->video.dtype};
    tb_clip *m = tbi_calloc(1, sizeof(*m));
    if (!m)
        return tbi_err(TB_ENOMEM, "out of memory");
    m->c = *c;
    if (m->c.temperature == 0)
        m->c.temperature = 0.07;
    int rc = m->c.temperature > 0 && m->c.temperature < 1e6
                 ? tbi_backend_open(&m->be, c->video.backend)
                 : tbi_err(TB_EINVAL, "temperature %g: it must be above 0", c->temperature);
    m->reg.be = m->be;
    if (rc == 0 && (rc = m->be->ops->alloc_zero(m->be, 2 * sizeof(double),
                                                (void **)&m->scale)) == 0 &&
        (rc = tbi_vit_open_in(&m->video, &vc, m->be, &m->reg, "visual.")) == 0 &&
        (rc = tbi_text_open_in(&m->text, &tc, m->be, &m->reg, "")) == 0 &&
        (rc = add_logit_scale(m)) == 0 && (rc = tbi_params_alloc(&m->reg)) == 0 &&
        (rc = m->be->ops->zero(m->be, m->reg.data, sizeof(float) * (size_t)m->reg.n_floats)) == 0)
        rc = tbi_vit_ready(m->video);
    if (rc < 0) {
        tb_clip_close(&m);
        return rc;
    }
    m->c.video = *tb_vit_config(m->video);
    *out = m;
    return 0;
}

void tb_clip_close(tb_clip **pm)
{
    if (!pm || !*pm)
        return;
    tb_clip *m = *pm;
    tb_vit_close(&m->video);
    tbi_text_close(&m->text);
    if (m->be) {
        tbi_plan_clear(&m->plan);
        m->be->ops->free(m->be, m->scale);
    }
    if (m->be)
        tbi_params_free(&m->reg);
    tbi_backend_close(&m->be);
    free(m);
    *pm = NULL;
}

const struct tb_clip_config *tb_clip_config(const tb_clip *m)
{
    return &m->c;
}

tb_params *tb_clip_params(tb_clip *m)
{
    return &m->reg;
}

int tb_clip_init(tb_clip *m, uint64_t seed)
{
    return tb_params_init(&m->reg, seed);
}

int tb_clip_plan(tb_clip *m, int B, struct tb_plan_bytes *bytes)
{
    int Lv = tb_vit_config(m->video)->depth, Lt = m->c.text_layers, rc;
    m->B_plan = 0;
    tbi_plan_clear(&m->plan);
    /* the video tower's forward, the text tower's, the loss, the video tower's backward, then
     * the text tower's (its gradients may take the video activations that backward reads) */
    int tf = Lv + 4, loss = tf + Lt + 2, vb = loss + 1, tb = vb + Lv + 2, end = tb + Lt + 3;
    struct tbi_ticks v = {.fwd = 0, .patches = 1, .bwd = vb, .grad_in = loss, .end = end};
    struct tbi_ticks t = {.fwd = tf, .bwd = tb, .grad_in = loss, .end = end};
    if ((rc = tbi_vit_declare(m->video, B, &m->plan, &v)) < 0 ||
        (rc = tbi_text_declare(m->text, B, &m->plan, &t)) < 0)
        return rc;
    if (m->span_scale >= 0) /* written after both backwards */
        tbi_plan_add(&m->plan, "logit scale's gradient", &m->reg.home[m->span_scale],
                     sizeof(float), end - 1, m->reg.fused ? end - 1 : end);
    tbi_plan_grad(&m->plan);
    char what[64];
    snprintf(what, sizeof(what), "the activations of %d clips and captions", B);
    if ((rc = tbi_plan_place(&m->plan)) < 0 ||
        (rc = tbi_plan_alloc(&m->plan, m->be, what, "lower --batch")) < 0) {
        tbi_plan_clear(&m->plan);
        return rc;
    }
    tbi_vit_bind(m->video, B);
    tbi_text_bind(m->text, B);
    m->B_plan = B;
    m->video_ready = m->text_ready = 0;
    if (bytes)
        *bytes = tbi_plan_bytes(&m->plan);
    return 0;
}

int tb_clip_set_video(tb_clip *m, const float *video, int B)
{
    return tb_vit_set_video(m->video, video, B);
}

int tb_clip_set_clips(tb_clip *m, const uint8_t *clips, const uint8_t *flip, int B,
                      const float mean[3], const float std[3])
{
    return tb_vit_set_clips(m->video, clips, flip, B, mean, std);
}

int tb_clip_encode_video(tb_clip *m, float *host)
{
    m->video_ready = 0;
    TBI_TRY(tb_vit_run(m->video, NULL, 0, NULL));
    m->video_ready = 1;
    return host ? tb_vit_features(m->video, host) : 0;
}

int tb_clip_encode_text(tb_clip *m, const int32_t *ids, int B, float *host)
{
    m->text_ready = 0;
    TBI_TRY(tbi_text_forward(m->text, ids, B));
    m->text_ready = 1;
    return host ? m->be->ops->to_host(m->be, host, tbi_text_emb(m->text),
                                      sizeof(float) * (size_t)B * m->c.embed)
                : 0;
}

int tbi_clip_scale(tb_clip *m, double **scale, double **dscale)
{
    *scale = m->scale;
    *dscale = m->scale + 1;
    if (m->i_scale >= 0)
        return m->be->ops->logit_scale(m->be, m->scale, tbi_param_data(&m->reg, m->i_scale));
    double fixed = 1 / m->c.temperature;
    return m->be->ops->to_device(m->be, m->scale, &fixed, sizeof(fixed));
}

int tb_clip_logit_scale(tb_clip *m, double *scale)
{
    double *sc, *ds;
    TBI_TRY(tbi_clip_scale(m, &sc, &ds));
    return m->be->ops->to_host(m->be, scale, sc, sizeof(double));
}

float *tbi_clip_emb(tb_clip *m, int text)
{
    return text ? tbi_text_emb(m->text) : tbi_vit_feat(m->video);
}

float *tbi_clip_demb(tb_clip *m, int text)
{
    return text ? tbi_text_demb(m->text) : tbi_vit_dfeat(m->video);
}

/* The towers' backwards (video, then text: its gradients may take the video activations
 * that backward reads), from their features' gradients in place, then the logit scale's from
 * the loss's gradient on the scale (m->scale[1]). */
static int backward(tb_clip *m, int video, int text)
{
    if (video) {
        m->video_ready = 0;
        TBI_TRY(tbi_vit_backward_dev(m->video));
    }
    if (text) {
        m->text_ready = 0;
        TBI_TRY(tbi_text_backward(m->text));
    }
    if (m->i_scale < 0)
        return 0;
    /* d loss / d logit_scale = d loss / d scale x scale */
    double *sc, *ds;
    TBI_TRY(tbi_clip_scale(m, &sc, &ds));
    TBI_TRY(m->be->ops->logit_scale_bwd(m->be, m->reg.home[m->span_scale], ds, sc));
    return tbi_span_done(&m->reg, m->span_scale);
}

int tbi_clip_backward_dev(tb_clip *m)
{
    if (!m->video_ready || !m->text_ready)
        return tbi_err(TB_EINVAL, "a backward needs both encodings first");
    return backward(m, 1, 1);
}

int tb_clip_backward(tb_clip *m, const float *dvideo, const float *dtext, double dscale)
{
    if ((dvideo && !m->video_ready) || (dtext && !m->text_ready))
        return tbi_err(TB_EINVAL, "a backward needs the %s encoding first",
                       dvideo && !m->video_ready ? "video" : "text");
    if (m->reg.fused && !(dvideo && dtext))
        return tbi_err(TB_EINVAL, "with fused updates a step's backward takes both towers' "
                       "gradients in one call (the logit scale's update comes once)");
    if (dtext && !dvideo && m->video_ready)
        return tbi_err(TB_EINVAL, "the text tower's backward comes after the video tower's "
                       "(its gradients live in the video activations that backward reads)");
    tbi_backend *be = m->be;
    size_t E = (size_t)m->c.embed;
    if (dvideo)
        TBI_TRY(be->ops->to_device(be, tbi_clip_demb(m, 0), dvideo,
                                   sizeof(float) * (size_t)tb_vit_feature_floats(m->video)));
    if (dtext) /* the gradient of the last forward's captions */
        TBI_TRY(be->ops->to_device(be, tbi_clip_demb(m, 1), dtext,
                                   sizeof(float) * (size_t)tbi_text_batch(m->text) * E));
    TBI_TRY(be->ops->to_device(be, m->scale + 1, &dscale, sizeof(dscale)));
    return backward(m, dvideo != NULL, dtext != NULL);
}

/* ---- the loss ---------------------------------------------------------------------------- */

/* The host's losses: src/tensor/contrastive.h's on host memory. */
int tb_clip_infonce(const float *v, const float *t, int N, int E, double scale, double *loss,
                    float *dv, float *dt, double *dscale)
{
    double *work = tbi_malloc(sizeof(double) * tbi_infonce_work(N, E));
    if (!work)
        return tbi_err(TB_ENOMEM, "out of memory for the loss of %d pairs", N);
    *loss = tbi_infonce_fwd(work, v, t, N, E, scale);
    tbi_infonce_bwd(dv, dt, dscale, work, N, E, scale, 0, N, 1.0f);
    free(work);
    return 0;
}

int tb_clip_max_margin(const float *v, const float *t, int N, int E, double margin,
                       double *loss, float *dv, float *dt)
{
    if (N < 2)
        return tbi_err(TB_EINVAL, "the max-margin loss needs 2 pairs, not %d", N);
    double *work = tbi_malloc(sizeof(double) * tbi_infonce_work(N, E));
    if (!work)
        return tbi_err(TB_ENOMEM, "out of memory for the loss of %d pairs", N);
    *loss = tbi_max_margin(work, v, t, N, E, margin, dv, dt);
    free(work);
    return 0;
}
