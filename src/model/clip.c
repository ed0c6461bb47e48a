/* src/model/clip.c - the video-text dual encoder (contract in model.h): one backend and one
 * parameter registry holding the video ViT in its CLIP layout ("visual.") and the text tower
 * (text.c), and the symmetric InfoNCE loss on their features, in double on the host (its
 * inputs are N x E floats; under MPI they are gathered from every process first).
 * Tests: tests/test_clip.c. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "model/text.h"
#include "model/vit_internal.h"

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
                                 .causal = c->text_causal};
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
    if (rc == 0 && (rc = tbi_vit_open_in(&m->video, &vc, m->be, &m->reg, "visual.")) == 0 &&
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
    if (m->be)
        tbi_plan_clear(&m->plan);
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

int tb_clip_plan(tb_clip *m, int B, int64_t *bytes)
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
        *bytes = (int64_t)m->plan.peak;
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

int tb_clip_logit_scale(tb_clip *m, double *scale)
{
    if (m->i_scale < 0) {
        *scale = 1 / m->c.temperature;
        return 0;
    }
    float ls;
    TBI_TRY(tb_params_read(&m->reg, m->i_scale, &ls));
    float clamped = ls < 0 ? 0 : ls > 4.6052f ? 4.6052f : ls; /* LaViLa's clamp_(0, 4.6052) */
    if (clamped != ls)
        TBI_TRY(tb_params_write(&m->reg, m->i_scale, &clamped));
    *scale = exp((double)clamped);
    return 0;
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
    if (dvideo) {
        m->video_ready = 0;
        TBI_TRY(tb_vit_backward_features(m->video, dvideo));
    }
    if (dtext) {
        m->text_ready = 0;
        /* the gradient of the last forward's captions */
        TBI_TRY(m->be->ops->to_device(m->be, tbi_text_demb(m->text), dtext,
                                      sizeof(float) * (size_t)tbi_text_batch(m->text) *
                                          m->c.embed));
        TBI_TRY(tbi_text_backward(m->text));
    }
    if (m->i_scale >= 0) {
        /* d loss / d logit_scale = d loss / d scale x scale */
        double scale;
        TBI_TRY(tb_clip_logit_scale(m, &scale));
        float g = (float)(dscale * scale);
        TBI_TRY(m->be->ops->to_device(m->be, m->reg.home[m->span_scale], &g, sizeof(float)));
        TBI_TRY(tbi_span_done(&m->reg, m->span_scale));
    }
    return 0;
}

/* ---- the loss ---------------------------------------------------------------------------- */

/* Rows of x (N, E) normalised into u (double), their norms (floored) into norm. */
static void l2_normalise(const float *x, int N, int E, double *u, double *norm)
{
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int e = 0; e < E; e++)
            s += (double)x[(size_t)i * E + e] * x[(size_t)i * E + e];
        norm[i] = fmax(sqrt(s), 1e-12);
        for (int e = 0; e < E; e++)
            u[(size_t)i * E + e] = x[(size_t)i * E + e] / norm[i];
    }
}

/* dx from du through u = x / max(|x|, 1e-12): (du - u (u . du)) / |x| above the floor. */
static void l2_backward(float *dx, const double *du, const double *u, const double *norm, int N,
                        int E)
{
    for (int i = 0; i < N; i++) {
        const double *ui = u + (size_t)i * E, *gi = du + (size_t)i * E;
        double dot = 0;
        for (int e = 0; e < E; e++)
            dot += ui[e] * gi[e];
        int floored = norm[i] <= 1e-12;
        for (int e = 0; e < E; e++)
            dx[(size_t)i * E + e] = (float)((gi[e] - (floored ? 0 : ui[e] * dot)) / norm[i]);
    }
}

/* From g (N, N), the loss's gradient on scale x a_i . b_j (a, b: rows normalised, norms na,
 * nb): into da, db (double scratch, zeroed) and then through the normalisations into the
 * float gradients xa, xb (either may be NULL). */
static void pair_backward(const double *g, double scale, const double *a, const double *na,
                          double *da, float *xa, const double *b, const double *nb, double *db,
                          float *xb, int N, int E)
{
    if (!xa && !xb)
        return;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double gij = scale * g[(size_t)i * N + j];
            if (gij == 0)
                continue;
            for (int e = 0; e < E; e++) {
                da[(size_t)i * E + e] += gij * b[(size_t)j * E + e];
                db[(size_t)j * E + e] += gij * a[(size_t)i * E + e];
            }
        }
    if (xa)
        l2_backward(xa, da, a, na, N, E);
    if (xb)
        l2_backward(xb, db, b, nb, N, E);
}

/* Mean cross-entropy of the rows of s (N, N; logits, row i's target i) taken along rows
 * (stride_r, stride_c pick rows or columns); g += its gradient / 2. */
static double xent_diag(const double *s, int N, size_t stride_r, size_t stride_c, double *g)
{
    double loss = 0;
    for (int i = 0; i < N; i++) {
        double mx = -INFINITY, z = 0;
        for (int j = 0; j < N; j++)
            mx = fmax(mx, s[i * stride_r + j * stride_c]);
        for (int j = 0; j < N; j++)
            z += exp(s[i * stride_r + j * stride_c] - mx);
        double lse = mx + log(z);
        loss += lse - s[i * stride_r + i * stride_c];
        for (int j = 0; j < N; j++) {
            double p = exp(s[i * stride_r + j * stride_c] - lse);
            g[i * stride_r + j * stride_c] += (p - (i == j)) / (2.0 * N);
        }
    }
    return loss / N;
}

int tb_clip_infonce(const float *v, const float *t, int N, int E, double scale, double *loss,
                    float *dv, float *dt, double *dscale)
{
    size_t ne = (size_t)N * E, nn = (size_t)N * N;
    double *buf = tbi_calloc(4 * ne + 2 * nn + 2 * (size_t)N, sizeof(double));
    if (!buf)
        return tbi_err(TB_ENOMEM, "out of memory for the loss of %d pairs", N);
    double *u = buf, *w = u + ne, *du = w + ne, *dw = du + ne, *s = dw + ne, *g = s + nn;
    double *nu = g + nn, *nw = nu + N;
    l2_normalise(v, N, E, u, nu);
    l2_normalise(t, N, E, w, nw);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double d = 0;
            for (int e = 0; e < E; e++)
                d += u[(size_t)i * E + e] * w[(size_t)j * E + e];
            s[(size_t)i * N + j] = scale * d;
        }
    /* video -> text along rows, text -> video along columns */
    *loss = (xent_diag(s, N, N, 1, g) + xent_diag(s, N, 1, N, g)) / 2;
    if (dscale) {
        /* logits = scale x cosine: d loss / d scale = sum g_ij cosine_ij */
        double d = 0;
        for (size_t k = 0; k < nn; k++)
            d += g[k] * s[k] / scale;
        *dscale = d;
    }
    pair_backward(g, scale, u, nu, du, dv, w, nw, dw, dt, N, E);
    free(buf);
    return 0;
}

int tb_clip_max_margin(const float *v, const float *t, int N, int E, double margin,
                       double *loss, float *dv, float *dt)
{
    size_t ne = (size_t)N * E, nn = (size_t)N * N;
    if (N < 2)
        return tbi_err(TB_EINVAL, "the max-margin loss needs 2 pairs, not %d", N);
    double *buf = tbi_calloc(4 * ne + 2 * nn + 2 * (size_t)N, sizeof(double));
    if (!buf)
        return tbi_err(TB_ENOMEM, "out of memory for the loss of %d pairs", N);
    double *u = buf, *w = u + ne, *du = w + ne, *dw = du + ne, *x = dw + ne, *g = x + nn;
    double *nu = g + nn, *nw = nu + N;
    l2_normalise(v, N, E, u, nu);
    l2_normalise(t, N, E, w, nw);
    /* x[i][j] = cos(text i, video j), as AVION's sim_matrix(text, video) */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double d = 0;
            for (int e = 0; e < E; e++)
                d += w[(size_t)i * E + e] * u[(size_t)j * E + e];
            x[(size_t)i * N + j] = d;
        }
    /* relu(margin - (x_ii - x_ij)) and relu(margin - (x_ii - x_ji)) over i != j, averaged; a
     * NaN similarity makes the loss NaN, as PyTorch's relu passes NaN on (never a flattering 0) */
    double sum = 0, inv = 1.0 / (2.0 * N * (N - 1));
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            if (i == j)
                continue;
            double a = margin - (x[(size_t)i * N + i] - x[(size_t)i * N + j]);
            double b = margin - (x[(size_t)i * N + i] - x[(size_t)j * N + i]);
            if (!(a <= 0)) {
                sum += a;
                g[(size_t)i * N + i] -= inv, g[(size_t)i * N + j] += inv;
            }
            if (!(b <= 0)) {
                sum += b;
                g[(size_t)i * N + i] -= inv, g[(size_t)j * N + i] += inv;
            }
        }
    /* x's rows are the texts: the same backward with the towers' roles swapped */
    pair_backward(g, 1, w, nw, dw, dt, u, nu, du, dv, N, E);
    free(buf);
    *loss = sum * inv;
    return 0;
}
