/* src/video/synth.c - the synthetic EPIC-Kitchens-style dataset (see synth.h).
 *
 * Each video is planned first (a list of actions, each a coloured shape doing one verb over a
 * time span on the hundredth-of-a-second grid, so the CSV timestamps are exact), then rendered
 * frame by frame in RGB, converted to yuv420p and written with libx264. All randomness comes
 * from Philox streams keyed by (seed, purpose, video) (TB_RNG_SYNTH_*), so a seed gives the
 * same dataset on any machine and thread count. Tests: tests/test_synth.c. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libswscale/swscale.h>

#include "core/strbuf.h"
#include "tubelet/rng.h"
#include "tubelet/synth.h"
#include "video/av.h"
#include "video/internal.h"

#define PI 3.14159265358979323846
#define N_DISTRACTORS 3
#define N_WAVES 2
#define HOLD_CS 20 /* the actor stands still this long before and after its action */

enum { MOVE_LEFT, MOVE_RIGHT, MOVE_UP, MOVE_DOWN, ROTATE_CW, ROTATE_ACW, GROW, SHRINK };
enum { SQUARE, TRIANGLE, CROSS, BAR, CIRCLE };

static const char *const verb_keys[TB_SYNTH_N_VERBS] = {
    "move-left", "move-right", "move-up", "move-down",
    "rotate-clockwise", "rotate-anticlockwise", "grow", "shrink",
};
static const char *const shape_names[] = {"square", "triangle", "cross", "bar", "circle"};
static const char *const colour_names[TB_SYNTH_N_COLOURS] = {"red", "green", "blue", "yellow"};
static const uint8_t colour_rgb[TB_SYNTH_N_COLOURS][3] = {
    {220, 40, 40}, {40, 190, 60}, {50, 80, 230}, {235, 215, 40},
};
/* Distractors never take an actor's colour, so a noun is told by colour and shape. */
static const uint8_t distractor_rgb[][3] = {
    {245, 245, 245}, {30, 30, 30}, {150, 60, 170}, {240, 140, 40}, {60, 200, 210},
};

const char *tb_synth_verb(int v)
{
    return v >= 0 && v < TB_SYNTH_N_VERBS ? verb_keys[v] : NULL;
}

int tb_synth_noun_rgb(int n, uint8_t rgb[3])
{
    if (n < 0 || n >= TB_SYNTH_N_NOUNS)
        return TB_EINVAL;
    memcpy(rgb, colour_rgb[n % TB_SYNTH_N_COLOURS], 3);
    return 0;
}

const char *tb_synth_noun(int n, char *buf, size_t size)
{
    if (n < 0 || n >= TB_SYNTH_N_NOUNS)
        return NULL;
    snprintf(buf, size, "%s-%s", colour_names[n % TB_SYNTH_N_COLOURS],
             shape_names[n / TB_SYNTH_N_COLOURS]);
    return buf;
}

struct action {
    int verb, shape, colour;
    int start_cs, stop_cs;  /* hundredths of a second */
    double x0, y0;          /* centre at the start, pixels */
    double half;            /* half-size at scale 1, pixels */
    double angle0;          /* radians, clockwise on screen */
    double amount;          /* distance (px), rotation (rad) or unused for grow/shrink */
};

struct distractor {
    int shape;
    const uint8_t *rgb;
    double x, y, vx, vy, half, angle, spin;
};

struct video_plan {
    struct action *actions;
    int n_actions;
    struct distractor dis[N_DISTRACTORS];
    double base[3];                 /* background colour */
    double wave_k[N_WAVES][3];      /* kx, ky, angular speed */
    double wave_phase[N_WAVES];
    double wave_amp[N_WAVES][3];
    double light_period, light_amp;
    int8_t *texture;                /* W*H static grain */
};

struct synth {
    const struct tb_synth_opts *o;
    int w, h;
    uint8_t *rgb;                   /* (H, W, 3) */
    float *colx, *coly;             /* per-column/per-row sin and cos tables, N_WAVES each */
};

static double smoothstep(double u)
{
    u = u < 0 ? 0 : u > 1 ? 1 : u;
    return u * u * (3 - 2 * u);
}

static double uniform(tb_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * tb_rng_uniform(r);
}

/* ---- planning ---------------------------------------------------------------------------- */

static void plan_action(struct action *a, tb_rng *r, int w, int h, double scale)
{
    double s = (w < h ? w : h) * scale;
    a->verb = (int)tb_rng_below(r, TB_SYNTH_N_VERBS);
    a->shape = (int)tb_rng_below(r, TB_SYNTH_N_SHAPES);
    a->colour = (int)tb_rng_below(r, TB_SYNTH_N_COLOURS);
    a->half = s * uniform(r, 0.08, 0.10);
    a->angle0 = uniform(r, 0, 2 * PI);
    double margin = a->half * 1.6, lo_x = margin, hi_x = w - margin, lo_y = margin,
           hi_y = h - margin;
    if (a->verb == GROW || a->verb == SHRINK) {
        margin = a->half * 2.1; /* room for the largest size */
        lo_x = lo_y = margin;
        hi_x = w - margin;
        hi_y = h - margin;
    }
    switch (a->verb) {
    case MOVE_LEFT:
    case MOVE_RIGHT:
        a->amount = w * uniform(r, 0.30, 0.40);
        if (a->verb == MOVE_LEFT)
            lo_x += a->amount;
        else
            hi_x -= a->amount;
        break;
    case MOVE_UP:
    case MOVE_DOWN:
        a->amount = h * uniform(r, 0.30, 0.40);
        if (a->verb == MOVE_UP)
            lo_y += a->amount;
        else
            hi_y -= a->amount;
        break;
    case ROTATE_CW:
    case ROTATE_ACW:
        a->amount = uniform(r, 0.5 * PI, 1.0 * PI);
        break;
    default:
        a->amount = 0;
    }
    a->x0 = uniform(r, lo_x, hi_x > lo_x ? hi_x : lo_x);
    a->y0 = uniform(r, lo_y, hi_y > lo_y ? hi_y : lo_y);
}

static int plan_video(struct video_plan *v, const struct synth *s, int video)
{
    const struct tb_synth_opts *o = s->o;
    tb_rng r;
    tb_rng_init_for(&r, o->seed, TB_RNG_SYNTH_VIDEO, (uint64_t)video, 0);
    memset(v, 0, sizeof(*v));

    int total_cs = o->seconds * 100, cap = total_cs / 150 + 1;
    if (!(v->actions = tbi_calloc((size_t)cap, sizeof(*v->actions))))
        return TB_ENOMEM;
    int t = (int)uniform(&r, 30, 80);
    for (;;) {
        int dur = (int)uniform(&r, 150, 300);
        if (t + dur + HOLD_CS > total_cs || v->n_actions == cap)
            break;
        struct action *a = &v->actions[v->n_actions++];
        plan_action(a, &r, s->w, s->h, o->actor_scale > 0 ? o->actor_scale : 1.0);
        a->start_cs = t;
        a->stop_cs = t + dur;
        t += dur + 2 * HOLD_CS + (int)uniform(&r, 30, 90);
    }

    /* Muted colours: a grey with a small tint, and waves mostly of brightness, so no
     * background pixel comes near an actor's saturated colour. */
    double grey = uniform(&r, 95, 150);
    for (int c = 0; c < 3; c++)
        v->base[c] = grey + uniform(&r, -22, 22);
    for (int k = 0; k < N_WAVES; k++) {
        v->wave_k[k][0] = uniform(&r, 0.5, 3.0) * 2 * PI / s->w;
        v->wave_k[k][1] = uniform(&r, 0.5, 3.0) * 2 * PI / s->h;
        v->wave_k[k][2] = uniform(&r, 0.05, 0.25) * (tb_rng_below(&r, 2) ? 1 : -1);
        v->wave_phase[k] = uniform(&r, 0, 2 * PI);
        double amp = uniform(&r, 8, 24);
        for (int c = 0; c < 3; c++)
            v->wave_amp[k][c] = amp * uniform(&r, 0.8, 1.2);
    }
    v->light_period = uniform(&r, 15, 40);
    v->light_amp = uniform(&r, 4, 12);

    double side = (s->w < s->h ? s->w : s->h);
    for (int i = 0; i < N_DISTRACTORS; i++) {
        struct distractor *d = &v->dis[i];
        d->shape = (int)tb_rng_below(&r, 5);
        d->rgb = distractor_rgb[tb_rng_below(&r, sizeof(distractor_rgb) / 3)];
        d->half = side * uniform(&r, 0.04, 0.07);
        d->x = uniform(&r, d->half, s->w - d->half);
        d->y = uniform(&r, d->half, s->h - d->half);
        double speed = uniform(&r, 2, 8), dir = uniform(&r, 0, 2 * PI);
        d->vx = speed * cos(dir);
        d->vy = speed * sin(dir);
        d->angle = uniform(&r, 0, 2 * PI);
        d->spin = uniform(&r, -0.1, 0.1);
    }

    size_t n_px = (size_t)s->w * (size_t)s->h;
    if (!(v->texture = tbi_malloc(n_px)))
        return TB_ENOMEM;
    /* Grain: white noise smoothed along rows, so it reads as texture, not sensor noise. */
    double prev = 0;
    for (size_t i = 0; i < n_px; i++) {
        double g = uniform(&r, -18, 18);
        prev = (i % (size_t)s->w) ? 0.55 * prev + 0.45 * g : g;
        v->texture[i] = (int8_t)lrint(prev);
    }
    return 0;
}

/* ---- rendering --------------------------------------------------------------------------- */

/* Is (u, v), in the shape's own unit coordinates, inside it? */
static int inside(int shape, double u, double v)
{
    switch (shape) {
    case SQUARE:
        return fabs(u) <= 1 && fabs(v) <= 1;
    case TRIANGLE: /* pointing up, centroid at the origin */
        return v <= 0.8 && v >= -1.2 + 1.7 * fabs(u) - 0.0 && fabs(u) <= 1.2;
    case CROSS:
        return (fabs(u) <= 1 && fabs(v) <= 0.33) || (fabs(u) <= 0.33 && fabs(v) <= 1);
    case BAR:
        return fabs(u) <= 1.4 && fabs(v) <= 0.4;
    default: /* circle */
        return u * u + v * v <= 1;
    }
}

static void draw_shape(struct synth *s, int shape, const uint8_t rgb[3], double cx, double cy,
                       double half, double angle)
{
    double reach = half * 1.5;
    int x0 = (int)floor(cx - reach), x1 = (int)ceil(cx + reach);
    int y0 = (int)floor(cy - reach), y1 = (int)ceil(cy + reach);
    double c = cos(angle), sn = sin(angle);
    if (x0 < 0)
        x0 = 0;
    if (y0 < 0)
        y0 = 0;
    if (x1 > s->w - 1)
        x1 = s->w - 1;
    if (y1 > s->h - 1)
        y1 = s->h - 1;
    for (int y = y0; y <= y1; y++) {
        for (int x = x0; x <= x1; x++) {
            double dx = x + 0.5 - cx, dy = y + 0.5 - cy;
            /* Rotate the pixel back into the shape's frame; angle is clockwise on screen. */
            double u = (c * dx + sn * dy) / half, v = (-sn * dx + c * dy) / half;
            if (inside(shape, u, v)) {
                uint8_t *p = s->rgb + ((size_t)y * s->w + x) * 3;
                p[0] = rgb[0];
                p[1] = rgb[1];
                p[2] = rgb[2];
            }
        }
    }
}

static void draw_background(struct synth *s, const struct video_plan *v, double t)
{
    int w = s->w, h = s->h;
    /* sin(kx x + ky y + p) = sin(kx x) cos(ky y + p) + cos(kx x) sin(ky y + p): two tables per
     * wave instead of a sine per pixel. */
    for (int k = 0; k < N_WAVES; k++) {
        double p = v->wave_phase[k] + v->wave_k[k][2] * t;
        for (int x = 0; x < w; x++) {
            s->colx[(k * 2 + 0) * w + x] = (float)sin(v->wave_k[k][0] * x);
            s->colx[(k * 2 + 1) * w + x] = (float)cos(v->wave_k[k][0] * x);
        }
        for (int y = 0; y < h; y++) {
            s->coly[(k * 2 + 0) * h + y] = (float)cos(v->wave_k[k][1] * y + p);
            s->coly[(k * 2 + 1) * h + y] = (float)sin(v->wave_k[k][1] * y + p);
        }
    }
    double light = v->light_amp * sin(2 * PI * t / v->light_period);
    for (int y = 0; y < h; y++) {
        uint8_t *row = s->rgb + (size_t)y * w * 3;
        const int8_t *tex = v->texture + (size_t)y * w;
        for (int x = 0; x < w; x++) {
            float wave[N_WAVES];
            for (int k = 0; k < N_WAVES; k++)
                wave[k] = s->colx[(k * 2) * w + x] * s->coly[(k * 2) * h + y] +
                          s->colx[(k * 2 + 1) * w + x] * s->coly[(k * 2 + 1) * h + y];
            for (int c = 0; c < 3; c++) {
                double val = v->base[c] + light + tex[x];
                for (int k = 0; k < N_WAVES; k++)
                    val += v->wave_amp[k][c] * wave[k];
                row[x * 3 + c] = (uint8_t)(val < 0 ? 0 : val > 255 ? 255 : lrint(val));
            }
        }
    }
}

static void draw_actor(struct synth *s, const struct action *a, double t_cs)
{
    double u = smoothstep((t_cs - a->start_cs) / (double)(a->stop_cs - a->start_cs));
    double x = a->x0, y = a->y0, angle = a->angle0, scale = 1;
    switch (a->verb) {
    case MOVE_LEFT: x -= a->amount * u; break;
    case MOVE_RIGHT: x += a->amount * u; break;
    case MOVE_UP: y -= a->amount * u; break;
    case MOVE_DOWN: y += a->amount * u; break;
    case ROTATE_CW: angle += a->amount * u; break;
    case ROTATE_ACW: angle -= a->amount * u; break;
    case GROW: scale = 0.55 * pow(1.45 / 0.55, u); break;
    case SHRINK: scale = 1.45 * pow(0.55 / 1.45, u); break;
    }
    draw_shape(s, a->shape, colour_rgb[a->colour], x, y, a->half * scale, angle);
}

static void render(struct synth *s, const struct video_plan *v, double t)
{
    draw_background(s, v, t);
    for (int i = 0; i < N_DISTRACTORS; i++) {
        const struct distractor *d = &v->dis[i];
        /* Drift, reflected at the edges (a triangle wave in each coordinate). */
        double span_x = s->w - 2 * d->half, span_y = s->h - 2 * d->half;
        double px = fmod(fabs(d->x - d->half + d->vx * t), 2 * span_x);
        double py = fmod(fabs(d->y - d->half + d->vy * t), 2 * span_y);
        px = px > span_x ? 2 * span_x - px : px;
        py = py > span_y ? 2 * span_y - py : py;
        draw_shape(s, d->shape, d->rgb, d->half + px, d->half + py, d->half,
                   d->angle + d->spin * t);
    }
    double t_cs = t * 100;
    for (int i = 0; i < v->n_actions; i++) {
        const struct action *a = &v->actions[i];
        if (t_cs >= a->start_cs - HOLD_CS && t_cs <= a->stop_cs + HOLD_CS)
            draw_actor(s, a, t_cs);
    }
}

/* ---- files ------------------------------------------------------------------------------- */

static void video_id(char *buf, size_t size, int video)
{
    snprintf(buf, size, "P%02d_%02d", video / 4 + 1, video % 4 + 1);
}

static int write_video(struct synth *s, const struct video_plan *v, const char *path)
{
    const struct tb_synth_opts *o = s->o;
    struct tbi_writer_opts wo = {
        .width = s->w, .height = s->h, .fps_num = o->fps_num, .fps_den = o->fps_den,
        .gop = 0, .crf = o->crf, .preset = o->preset, .n_threads = o->n_threads,
    };
    struct tbi_writer *w = NULL;
    struct SwsContext *sws = NULL;
    AVFrame *f = av_frame_alloc();
    int64_t n_out, bytes, *kf = NULL;
    int n_kf, rc;
    int64_t n_frames = (int64_t)o->seconds * o->fps_num / o->fps_den;

    if (!f)
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    f->format = AV_PIX_FMT_YUV420P;
    f->width = s->w;
    f->height = s->h;
    sws = sws_getContext(s->w, s->h, AV_PIX_FMT_RGB24, s->w, s->h, AV_PIX_FMT_YUV420P,
                         SWS_BICUBIC, NULL, NULL, NULL);
    if (!sws || av_frame_get_buffer(f, 0) < 0) {
        rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
        goto end;
    }
    if ((rc = tbi_writer_open(&w, path, &wo)) < 0)
        goto end;
    for (int64_t i = 0; i < n_frames; i++) {
        if (o->cancel && *o->cancel) {
            rc = tbi_err(TB_ECANCELED, "%s: canceled", path);
            goto end;
        }
        render(s, v, (double)i * o->fps_den / o->fps_num);
        if (av_frame_make_writable(f) < 0) {
            rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
            goto end;
        }
        const uint8_t *src[1] = {s->rgb};
        int src_ls[1] = {s->w * 3};
        sws_scale(sws, src, src_ls, 0, s->h, f->data, f->linesize);
        if ((rc = tbi_writer_write(w, f)) < 0)
            goto end;
    }
    rc = tbi_writer_finish(&w, &n_out, &kf, &n_kf, &bytes);
    free(kf);
end:
    tbi_writer_abort(&w);
    sws_freeContext(sws);
    av_frame_free(&f);
    return rc;
}

static void timestamp(char *buf, size_t size, int cs)
{
    snprintf(buf, size, "%02d:%02d:%02d.%02d", cs / 360000, cs / 6000 % 60, cs / 100 % 60,
             cs % 100);
}

static const char *const ek_header =
    "narration_id,participant_id,video_id,narration_timestamp,start_timestamp,stop_timestamp,"
    "start_frame,stop_frame,narration,verb,verb_class,noun,noun_class,all_nouns,"
    "all_noun_classes\n";

static void csv_actions(struct tbi_sb *sb, const struct synth *s, const struct video_plan *v,
                        int video)
{
    char vid[32], start[32], stop[32], noun[64];
    const struct tb_synth_opts *o = s->o;
    video_id(vid, sizeof(vid), video);
    for (int i = 0; i < v->n_actions; i++) {
        const struct action *a = &v->actions[i];
        int noun_class = a->shape * TB_SYNTH_N_COLOURS + a->colour;
        char narration[128];
        const char *col = colour_names[a->colour], *shp = shape_names[a->shape];
        switch (a->verb) {
        case MOVE_LEFT: case MOVE_RIGHT: case MOVE_UP: case MOVE_DOWN:
            snprintf(narration, sizeof(narration), "move %s %s %s", col, shp,
                     verb_keys[a->verb] + 5);
            break;
        case ROTATE_CW: case ROTATE_ACW:
            snprintf(narration, sizeof(narration), "rotate %s %s %s", col, shp,
                     verb_keys[a->verb] + 7);
            break;
        default:
            snprintf(narration, sizeof(narration), "%s %s %s", verb_keys[a->verb], col, shp);
        }
        tb_synth_noun(noun_class, noun, sizeof(noun));
        timestamp(start, sizeof(start), a->start_cs);
        timestamp(stop, sizeof(stop), a->stop_cs);
        int64_t f0 = ((int64_t)a->start_cs * o->fps_num + 50 * o->fps_den) / (100 * o->fps_den);
        int64_t f1 = ((int64_t)a->stop_cs * o->fps_num + 50 * o->fps_den) / (100 * o->fps_den);
        tbi_sb_printf(sb, "%s_%d,%.3s,%s,%s,%s,%s,%lld,%lld,%s,%s,%d,%s,%d,\"['%s']\",\"[%d]\"\n",
                      vid, i, vid, vid, start, start, stop, (long long)f0, (long long)f1,
                      narration, verb_keys[a->verb], a->verb, noun, noun_class, noun,
                      noun_class);
    }
}

static int write_sb(struct tbi_sb *sb, const char *path)
{
    int rc = sb->failed ? tbi_err(TB_ENOMEM, "%s: out of memory", path)
                        : tbi_write_file_atomic(path, sb->buf, sb->len);
    tbi_sb_free(sb);
    return rc;
}

static int write_class_lists(const char *ann_dir)
{
    struct tbi_sb sb = {0};
    char path[4096], noun[64];
    int rc;
    tbi_sb_printf(&sb, "id,key,instances,category\n");
    for (int v = 0; v < TB_SYNTH_N_VERBS; v++)
        tbi_sb_printf(&sb, "%d,%s,\"['%s']\",%s\n", v, verb_keys[v], verb_keys[v],
                      v < 4 ? "move" : v < 6 ? "rotate" : "scale");
    if ((rc = tbi_fmt(path, sizeof(path), "%s/EPIC_100_verb_classes.csv", ann_dir)) < 0 ||
        (rc = write_sb(&sb, path)) < 0)
        return rc;
    tbi_sb_printf(&sb, "id,key,instances,category\n");
    for (int n = 0; n < TB_SYNTH_N_NOUNS; n++)
        tbi_sb_printf(&sb, "%d,%s,\"['%s']\",%s\n", n, tb_synth_noun(n, noun, sizeof(noun)),
                      noun, shape_names[n / TB_SYNTH_N_COLOURS]);
    if ((rc = tbi_fmt(path, sizeof(path), "%s/EPIC_100_noun_classes.csv", ann_dir)) < 0 ||
        (rc = write_sb(&sb, path)) < 0)
        return rc;
    return 0;
}

static int check_opts(const struct tb_synth_opts *o)
{
    if (!o->out_dir || !o->out_dir[0])
        return tbi_err(TB_EINVAL, "no output directory given");
    if (o->n_videos < 1 || o->n_videos > 4 * 99)
        return tbi_err(TB_EINVAL, "number of videos must be in 1..396, not %d", o->n_videos);
    if (o->seconds < 5)
        return tbi_err(TB_EINVAL, "videos must last at least 5 s, not %d", o->seconds);
    if (o->width < 64 || o->height < 64 || o->width % 2 || o->height % 2 || o->width > 4096 ||
        o->height > 4096)
        return tbi_err(TB_EINVAL, "size must be even and between 64 and 4096, not %dx%d",
                       o->width, o->height);
    if (o->fps_num <= 0 || o->fps_den <= 0 || o->fps_num > 240 * o->fps_den)
        return tbi_err(TB_EINVAL, "bad frame rate %d/%d", o->fps_num, o->fps_den);
    if (o->actor_scale != 0 && !(o->actor_scale >= 0.5 && o->actor_scale <= 2.5))
        return tbi_err(TB_EINVAL, "actor scale must be in 0.5..2.5, not %g", o->actor_scale);
    return 0;
}

/* One video's work, done by whichever worker takes it. */
struct synth_job {
    struct video_plan plan;
    int rc;
    char err[512];
};

struct synth_pool {
    const struct tb_synth_opts *o;
    const char *vid_dir;
    struct synth_job *jobs;
    atomic_int next;
};

static int synth_one(struct synth *s, struct synth_job *job, int video, const char *vid_dir)
{
    char vid[32], path[4096 + 64];
    int rc = plan_video(&job->plan, s, video);
    video_id(vid, sizeof(vid), video);
    if (rc == TB_ENOMEM)
        return tbi_err(rc, "%s: out of memory", vid);
    if (rc == 0)
        rc = tbi_fmt(path, sizeof(path), "%s/%s.mp4", vid_dir, vid);
    if (rc == 0)
        rc = write_video(s, &job->plan, path);
    return rc;
}

static void *synth_worker(void *arg)
{
    struct synth_pool *pool = arg;
    const struct tb_synth_opts *o = pool->o;
    struct synth s = {.o = o, .w = o->width, .h = o->height};
    s.rgb = tbi_malloc((size_t)s.w * s.h * 3);
    s.colx = tbi_malloc(sizeof(float) * 2 * N_WAVES * (size_t)s.w);
    s.coly = tbi_malloc(sizeof(float) * 2 * N_WAVES * (size_t)s.h);
    for (;;) {
        int i = atomic_fetch_add(&pool->next, 1);
        if (i >= o->n_videos)
            break;
        struct synth_job *job = &pool->jobs[i];
        tb_errclear();
        job->rc = s.rgb && s.colx && s.coly ? synth_one(&s, job, i, pool->vid_dir)
                                           : tbi_err(TB_ENOMEM, "out of memory");
        if (job->rc < 0)
            snprintf(job->err, sizeof(job->err), "%s", tb_errmsg());
    }
    free(s.rgb);
    free(s.colx);
    free(s.coly);
    return NULL;
}

/* Split by video: a quarter (at least one, when there are two or more) for validation, marked
 * in is_val (zeroed, one per video). */
static void pick_val(const struct tb_synth_opts *o, int *is_val)
{
    int n_val = o->n_videos < 2 ? 0 : (o->n_videos + 2) / 4;
    if (n_val < 1 && o->n_videos >= 2)
        n_val = 1;
    tb_rng r;
    tb_rng_init_for(&r, o->seed, TB_RNG_SYNTH_SPLIT, 0, 0);
    for (int picked = 0; picked < n_val;) {
        int i = (int)tb_rng_below(&r, (uint64_t)o->n_videos);
        if (!is_val[i]) {
            is_val[i] = 1;
            picked++;
        }
    }
}

/* Every video of the pool on up to n_threads workers (on this thread when none starts). 0, or
 * the error of the first video that failed. */
static int run_pool(struct synth_pool *pool, int n_threads)
{
    pthread_t threads[64];
    int n_started = 0;
    /* Videos in parallel; each is a function of (seed, video) alone, so the files do not
     * depend on the number of workers. */
    atomic_init(&pool->next, 0);
    for (; n_started < n_threads; n_started++)
        if (pthread_create(&threads[n_started], NULL, synth_worker, pool) != 0)
            break;
    if (n_started == 0)
        synth_worker(pool);
    for (int i = 0; i < n_started; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < pool->o->n_videos; i++)
        if (pool->jobs[i].rc < 0)
            return tbi_err(pool->jobs[i].rc, "%s", pool->jobs[i].err);
    return 0;
}

/* The train and validation annotation files of the planned videos (is_val: which are for
 * validation) and the class lists, into ann_dir; the counts into res. */
static int write_annotations(const struct tb_synth_opts *o, const struct synth_job *jobs,
                             const int *is_val, const char *ann_dir, struct tb_synth_result *res)
{
    struct synth s = {.o = o, .w = o->width, .h = o->height};
    struct tbi_sb train = {0}, val = {0};
    char path[4096 + 64];
    int rc;
    tbi_sb_printf(&train, "%s", ek_header);
    tbi_sb_printf(&val, "%s", ek_header);
    for (int i = 0; i < o->n_videos; i++) {
        const struct video_plan *v = &jobs[i].plan;
        csv_actions(is_val[i] ? &val : &train, &s, v, i);
        if (is_val[i]) {
            res->n_val_videos++;
            res->n_val_actions += v->n_actions;
        } else {
            res->n_train_videos++;
            res->n_train_actions += v->n_actions;
        }
        res->n_videos++;
    }
    if ((rc = tbi_fmt(path, sizeof(path), "%s/EPIC_100_train.csv", ann_dir)) >= 0 &&
        (rc = write_sb(&train, path)) >= 0 &&
        (rc = tbi_fmt(path, sizeof(path), "%s/EPIC_100_validation.csv", ann_dir)) >= 0 &&
        (rc = write_sb(&val, path)) >= 0)
        rc = write_class_lists(ann_dir);
    tbi_sb_free(&train);
    tbi_sb_free(&val);
    return rc;
}

int tb_synth(const struct tb_synth_opts *o, struct tb_synth_result *res)
{
    struct tb_synth_result scratch;
    char vid_dir[4096], ann_dir[4096];
    int *is_val = NULL, rc;
    struct synth_pool pool = {.o = o, .vid_dir = vid_dir};
    int n_threads = o->n_jobs < 1 ? 1 : o->n_jobs > 64 ? 64 : o->n_jobs;

    if (!res)
        res = &scratch;
    memset(res, 0, sizeof(*res));
    if ((rc = check_opts(o)) < 0)
        return rc;
    if ((rc = tbi_fmt(vid_dir, sizeof(vid_dir), "%s/videos", o->out_dir)) < 0 ||
        (rc = tbi_fmt(ann_dir, sizeof(ann_dir), "%s/annotations", o->out_dir)) < 0 ||
        (rc = tbi_mkdirs(vid_dir)) < 0 || (rc = tbi_mkdirs(ann_dir)) < 0)
        return rc;
    is_val = tbi_calloc((size_t)o->n_videos, sizeof(*is_val));
    pool.jobs = tbi_calloc((size_t)o->n_videos, sizeof(*pool.jobs));
    if (!is_val || !pool.jobs) {
        rc = tbi_err(TB_ENOMEM, "out of memory");
        goto end;
    }
    pick_val(o, is_val);
    if ((rc = run_pool(&pool, n_threads)) == 0)
        rc = write_annotations(o, pool.jobs, is_val, ann_dir, res);
end:
    for (int i = 0; pool.jobs && i < o->n_videos; i++) {
        free(pool.jobs[i].plan.actions);
        free(pool.jobs[i].plan.texture);
    }
    free(pool.jobs);
    free(is_val);
    return rc;
}
