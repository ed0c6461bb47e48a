/* src/video/prep.c - source video -> prepared video (see prep.h for the contract).
 *
 * One pass over the source: decode in presentation order, map each frame's timestamp to an
 * output frame number at the constant rate, emit the held frame for every output number it
 * covers, and route output frame n to chunk n / chunk_frames. Only frames that are emitted
 * into a chunk being written are scaled; chunks finished by an earlier run are only counted.
 * Not here: the parallel driver (prep_many.c), the index format (index.c).
 * Tests: tests/test_prep.c. */
#define _DEFAULT_SOURCE /* flock */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#include "tubelet/prep.h"
#include "video/av.h"
#include "video/internal.h"

struct prep {
    const struct tb_prep_opts *o;
    const char *src;
    struct tb_prep_result *res;
    char dir[4096];           /* ROOT/<name> */
    int lock_fd;              /* holds the lock on dir/.lock while we write, or -1 */
    char params[512];         /* settings that must match for a chunk to be reused */

    struct tbi_input in;
    AVPacket *pkt;
    AVFrame *frame;           /* decoder output */
    AVFrame *held;            /* the source frame waiting to be emitted */
    AVFrame *upright;         /* held, turned upright (rotated sources only) */
    AVFrame *wide;            /* held as yuv444p, for rotating formats that cannot be turned */
    AVFrame *scaled;          /* held (upright), scaled to the chunk size */
    int held_ready;           /* scaled holds the current `held` */
    struct SwsContext *sws, *sws_wide;
    int out_w, out_h;         /* chunk frame size */
    int colorspace, primaries, trc; /* the chunks' colour tags (the first frame's) */

    /* Resampling to the constant rate (see take_frame). */
    int fps_num, fps_den;     /* the chunks' rate: --fps, or this video's own (source_rate) */
    AVRational out_tb;
    int64_t ts_offset;        /* container start time, stream time base */
    int64_t base;             /* output number of the first frame's timestamp */
    int64_t next_out;         /* next output frame number to emit */
    int64_t first_ts, last_ts, last_dur;
    int64_t n_decoded;        /* source frames decoded */
    int started;

    /* Chunks. */
    int64_t chunk_frames;     /* chunk_seconds of frames, or the frames starting in it */
    int chunk_whole;          /* chunk_seconds is a whole number of frames at the rate */
    struct tb_chunk_info *chunks;
    int n_chunks, cap_chunks;
    int cur;                  /* chunk receiving frames, -1 before the first */
    int cur_reused;           /* cur was finished by an earlier run */
    int64_t cur_count;        /* frames routed into cur so far */
    struct tbi_writer *w;
};

int tb_prep_video_name(char *buf, size_t size, const char *src, const char *ext)
{
    const char *base = strrchr(src, '/');
    base = base ? base + 1 : src;
    const char *dot = strrchr(base, '.');
    size_t stem = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    if (stem == 0)
        return tbi_err(TB_EINVAL, "%s: cannot name a video after an empty file name", src);
    return tbi_fmt(buf, size, "%.*s.%s", (int)stem, base, ext);
}

/* ---- sizes, rotation, scaling ----------------------------------------------------------- */

/* Round num/den to the nearest even number, as ffmpeg's scale=-2 does. */
static int even_round(int64_t num, int64_t den)
{
    return (int)(av_rescale(num, 1, 2 * den) * 2);
}

/* Chunk size from the first frame's size as displayed (after rotation). */
static void pick_size(struct prep *p, int w, int h)
{
    int rot = p->in.rotation == 90 || p->in.rotation == 270;
    int dw = rot ? h : w, dh = rot ? w : h;
    int s = p->o->short_side;
    if (s <= 0) {
        p->out_w = dw & ~1;
        p->out_h = dh & ~1;
    } else if (dw <= dh) {
        p->out_w = s;
        p->out_h = even_round((int64_t)dh * s, dw);
    } else {
        p->out_h = s;
        p->out_w = even_round((int64_t)dw * s, dh);
    }
}

/* Turn one plane of sw x sh pixels of step bytes by deg clockwise (90, 180 or 270). */
static void rotate_plane(uint8_t *dst, int dls, const uint8_t *src, int sls, int sw, int sh,
                         int step, int deg)
{
    int dw = deg == 180 ? sw : sh, dh = deg == 180 ? sh : sw;
    for (int y = 0; y < dh; y++) {
        uint8_t *d = dst + (size_t)y * dls;
        for (int x = 0; x < dw; x++) {
            int sx, sy;
            if (deg == 90) {        /* the left column, read bottom-up, becomes the top row */
                sx = y;
                sy = sh - 1 - x;
            } else if (deg == 270) { /* the right column, read top-down, becomes the top row */
                sx = sw - 1 - y;
                sy = x;
            } else {
                sx = sw - 1 - x;
                sy = sh - 1 - y;
            }
            memcpy(d + (size_t)x * step, src + (size_t)sy * sls + (size_t)sx * step,
                   (size_t)step);
        }
    }
}

/* Can frames of this format be turned plane by plane? Every plane must hold whole pixels of a
 * fixed byte size, and a quarter turn must not change the chroma subsampling. */
static int rotatable(enum AVPixelFormat fmt, int deg, int steps[4])
{
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(fmt);
    if (!d || d->flags & (AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_HWACCEL | AV_PIX_FMT_FLAG_PAL))
        return 0;
    if (deg != 180 && d->log2_chroma_w != d->log2_chroma_h)
        return 0;
    memset(steps, 0, 4 * sizeof(int));
    for (int c = 0; c < d->nb_components; c++) {
        const AVComponentDescriptor *cd = &d->comp[c];
        if (cd->shift || cd->depth % 8 || cd->step < 1)
            return 0;
        if (cd->step > steps[cd->plane])
            steps[cd->plane] = cd->step;
    }
    /* Packed formats with subsampled chroma (YUYV) share a plane between sizes. */
    if (!(d->flags & AV_PIX_FMT_FLAG_PLANAR) && (d->log2_chroma_w || d->log2_chroma_h))
        return 0;
    return 1;
}

/* Turn src upright into p->upright, as ffmpeg's autorotate does before any scaling. A format
 * that cannot be turned plane by plane is first converted to yuv444p at its own size. */
static int turn_upright(struct prep *p, const AVFrame *src, const AVFrame **out)
{
    int deg = p->in.rotation, steps[4];
    const AVFrame *f = src;
    if (!rotatable(src->format, deg, steps)) {
        if (!p->wide || p->wide->width != src->width || p->wide->height != src->height) {
            av_frame_free(&p->wide);
            if (!(p->wide = av_frame_alloc()))
                return TB_ENOMEM;
            p->wide->format = AV_PIX_FMT_YUV444P;
            p->wide->width = src->width;
            p->wide->height = src->height;
            if (av_frame_get_buffer(p->wide, 0) < 0)
                return TB_ENOMEM;
        }
        p->sws_wide = sws_getCachedContext(p->sws_wide, src->width, src->height, src->format,
                                           src->width, src->height, AV_PIX_FMT_YUV444P,
                                           SWS_BICUBIC, NULL, NULL, NULL);
        if (!p->sws_wide)
            return TB_EDECODE;
        sws_scale(p->sws_wide, (const uint8_t *const *)src->data, src->linesize, 0, src->height,
                  p->wide->data, p->wide->linesize);
        f = p->wide;
        rotatable(f->format, deg, steps);
    }
    int rw = deg == 180 ? f->width : f->height, rh = deg == 180 ? f->height : f->width;
    if (!p->upright || p->upright->format != f->format || p->upright->width != rw ||
        p->upright->height != rh) {
        av_frame_free(&p->upright);
        if (!(p->upright = av_frame_alloc()))
            return TB_ENOMEM;
        p->upright->format = f->format;
        p->upright->width = rw;
        p->upright->height = rh;
        if (av_frame_get_buffer(p->upright, 0) < 0)
            return TB_ENOMEM;
    }
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(f->format);
    for (int i = 0; i < 4 && f->data[i]; i++) {
        int chroma = (i == 1 || i == 2) && (d->flags & AV_PIX_FMT_FLAG_PLANAR);
        int pw = chroma ? AV_CEIL_RSHIFT(f->width, d->log2_chroma_w) : f->width;
        int ph = chroma ? AV_CEIL_RSHIFT(f->height, d->log2_chroma_h) : f->height;
        rotate_plane(p->upright->data[i], p->upright->linesize[i], f->data[i], f->linesize[i], pw,
                     ph, steps[i], deg);
    }
    p->upright->color_range = src->color_range;
    *out = p->upright;
    return 0;
}

static int alloc_yuv(AVFrame **f, int w, int h)
{
    if (!(*f = av_frame_alloc()))
        return TB_ENOMEM;
    (*f)->format = AV_PIX_FMT_YUV420P;
    (*f)->width = w;
    (*f)->height = h;
    return av_frame_get_buffer(*f, 0) < 0 ? TB_ENOMEM : 0;
}

/* Scale the held frame once, however many output frames it fills. */
static int prepare_held(struct prep *p, AVFrame **out)
{
    const AVFrame *h = p->held;
    int rc;
    if (p->held_ready) {
        *out = p->scaled;
        return 0;
    }
    if (p->in.rotation && (rc = turn_upright(p, p->held, &h)) < 0)
        return tbi_err(rc, "%s: cannot turn %s frames upright", p->src,
                       av_get_pix_fmt_name(p->held->format));
    /* --short-side 0 keeps the source's pixels: an odd width or height loses its last column
     * or row (H.264 4:2:0 needs even sizes) rather than the frame being resized by a pixel. */
    int sw = h->width, sh = h->height;
    if (p->o->short_side <= 0 && (sw - p->out_w == 0 || sw - p->out_w == 1) &&
        (sh - p->out_h == 0 || sh - p->out_h == 1)) {
        sw = p->out_w;
        sh = p->out_h;
    }
    p->sws = sws_getCachedContext(p->sws, sw, sh, h->format, p->out_w, p->out_h,
                                  AV_PIX_FMT_YUV420P, SWS_BICUBIC, NULL, NULL, NULL);
    if (!p->sws)
        return tbi_err(TB_EDECODE, "%s: cannot convert %s %dx%d frames", p->src,
                       av_get_pix_fmt_name(h->format), h->width, h->height);
    tbi_sws_set_colors(p->sws, h);
    /* The encoder may still hold a reference to the last buffers. */
    if (av_frame_make_writable(p->scaled) < 0)
        return tbi_err(TB_ENOMEM, "%s: out of memory", p->src);
    sws_scale(p->sws, (const uint8_t *const *)h->data, h->linesize, 0, sh, p->scaled->data,
              p->scaled->linesize);
    p->held_ready = 1;
    *out = p->scaled;
    return 0;
}

/* ---- chunks ------------------------------------------------------------------------------ */

static int chunk_paths(struct prep *p, int k, char *file, size_t file_size, char *path,
                       size_t path_size, char *idx_path, size_t idx_size)
{
    int64_t start_s = (int64_t)k * p->o->chunk_seconds;
    int rc;
    if ((rc = tbi_fmt(file, file_size, "%" PRId64 ".%s", start_s, p->o->ext)) < 0 ||
        (rc = tbi_fmt(path, path_size, "%s/%s", p->dir, file)) < 0 ||
        (rc = tbi_fmt(idx_path, idx_size, "%s/%" PRId64 ".idx", p->dir, start_s)) < 0)
        return rc;
    return 0;
}

static struct tb_chunk_info *new_chunk(struct prep *p)
{
    if (p->n_chunks == p->cap_chunks) {
        int cap = p->cap_chunks ? 2 * p->cap_chunks : 16;
        struct tb_chunk_info *grown = tbi_realloc(p->chunks, sizeof(*grown) * (size_t)cap);
        if (!grown)
            return NULL;
        p->chunks = grown;
        p->cap_chunks = cap;
    }
    struct tb_chunk_info *c = &p->chunks[p->n_chunks++];
    memset(c, 0, sizeof(*c));
    return c;
}

/* A chunk an earlier run finished is reused when its index matches our settings and its file
 * still has the size the index recorded. */
static int try_reuse(struct prep *p, int k, const char *path, const char *idx_path,
                     struct tb_chunk_info *c)
{
    struct tb_video_index *old = NULL;
    struct stat st;
    int no = -1, ok = 0;
    if (!tbi_is_file(idx_path))
        return 0;
    if (tbi_index_read(&old, idx_path, TBI_INDEX_CHUNK, &no) == 0 && no == k &&
        !strcmp(old->params, p->params) && old->fps_num == p->fps_num &&
        old->fps_den == p->fps_den && stat(path, &st) == 0 &&
        st.st_size == old->chunks[0].bytes &&
        old->chunks[0].start_frame == (int64_t)k * p->chunk_frames) {
        *c = old->chunks[0];
        old->chunks[0].keyframes = NULL;
        ok = 1;
    }
    tb_index_free(&old);
    tb_errclear();
    return ok;
}

static int begin_chunk(struct prep *p, int k)
{
    char file[64], path[4096], idx_path[4096];
    struct tb_chunk_info *c;
    int rc = chunk_paths(p, k, file, sizeof(file), path, sizeof(path), idx_path,
                         sizeof(idx_path));
    if (rc < 0)
        return rc;
    if (!(c = new_chunk(p)))
        return tbi_err(TB_ENOMEM, "%s: out of memory", p->src);
    p->cur = k;
    p->cur_count = 0;
    p->cur_reused = try_reuse(p, k, path, idx_path, c);
    if (p->cur_reused) {
        p->res->n_chunks_skipped++;
        return 0;
    }
    snprintf(c->file, sizeof(c->file), "%s", file);
    c->start_frame = (int64_t)k * p->chunk_frames;
    /* A stale index must not outlive the chunk it described. */
    if (unlink(idx_path) != 0 && errno != ENOENT)
        return tbi_err(TB_EIO, "%s: cannot remove: %s", idx_path, strerror(errno));
    struct tbi_writer_opts wo = {
        .width = p->out_w, .height = p->out_h, .fps_num = p->fps_num,
        .fps_den = p->fps_den, .gop = p->o->gop, .crf = p->o->crf,
        .preset = p->o->preset, .tune = p->o->tune, .no_bframes = p->o->no_bframes,
        .n_threads = p->o->n_threads, .colorspace = p->colorspace, .primaries = p->primaries,
        .trc = p->trc,
    };
    if ((rc = tbi_writer_open(&p->w, path, &wo)) < 0)
        return tbi_err_prefix(rc, "%s", p->src);
    return 0;
}

static void index_header(const struct prep *p, struct tb_video_index *idx)
{
    idx->width = p->out_w;
    idx->height = p->out_h;
    idx->fps_num = p->fps_num;
    idx->fps_den = p->fps_den;
    idx->chunk_seconds = p->o->chunk_seconds;
    idx->chunk_frames = p->chunk_frames;
    snprintf(idx->params, sizeof(idx->params), "%s", p->params);
    snprintf(idx->source, sizeof(idx->source), "%s", p->src);
}

static int write_index(const char *path, enum tbi_index_kind kind, struct tb_video_index *idx,
                       int chunk_no)
{
    struct tbi_sb sb = {0};
    tbi_index_format(&sb, kind, idx, chunk_no);
    int rc = sb.failed ? tbi_err(TB_ENOMEM, "%s: out of memory", path)
                       : tbi_write_file_atomic(path, sb.buf, sb.len);
    tbi_sb_free(&sb);
    return rc;
}

static int end_chunk(struct prep *p)
{
    char file[64], path[4096], idx_path[4096];
    int rc;
    if (p->cur < 0)
        return 0;
    struct tb_chunk_info *c = &p->chunks[p->n_chunks - 1];
    if (p->cur_reused) {
        if (p->cur_count != c->n_frames)
            return tbi_err(TB_EFORMAT, "%s: chunk %s from an earlier run holds %" PRId64
                           " frames but the source now gives %" PRId64 "; delete %s and run "
                           "again", p->src, c->file, c->n_frames, p->cur_count, p->dir);
        return 0;
    }
    if ((rc = tbi_writer_finish(&p->w, &c->n_frames, &c->keyframes, &c->n_keyframes,
                                &c->bytes)) < 0)
        return tbi_err_prefix(rc, "%s", p->src);
    if (c->n_keyframes < 1 || c->keyframes[0] != 0)
        return tbi_err(TB_EENCODE, "%s: chunk %s does not start with a keyframe", p->src, c->file);
    if ((rc = chunk_paths(p, p->cur, file, sizeof(file), path, sizeof(path), idx_path,
                          sizeof(idx_path))) < 0)
        return rc;
    struct tb_video_index one = {0};
    index_header(p, &one);
    one.n_chunks = 1;
    one.chunks = c;
    one.n_frames = c->n_frames;
    return write_index(idx_path, TBI_INDEX_CHUNK, &one, p->cur);
}

/* Where chunk_seconds is not a whole number of frames at the video's rate (--fps source: 15 s
 * at 30000/1001 is 449.55 frames), chunk k > 0 cannot start at second k * chunk_seconds on a
 * frame, and its name (its start second) would not say where it starts: only a video of one
 * chunk, the frames that start within chunk_seconds, can be prepared. The length named works: the shortest from chunk_seconds up that is
 * whole frames (a multiple of the reduced rate's denominator: 1001 s for NTSC rates). */
static int refuse_chunk_length(const struct prep *p)
{
    int64_t works = ((int64_t)p->o->chunk_seconds + p->fps_den - 1) / p->fps_den * p->fps_den;
    char alt[96] = "";
    if (works <= 86400)
        snprintf(alt, sizeof(alt), "--chunk-seconds %" PRId64 " (whole frames at this rate, as "
                 "is any multiple), or ", works);
    return tbi_err(TB_EINVAL, "%s: longer than one %d s chunk (the %" PRId64 " frames that "
                   "start in it at its own %d/%d fps; %d s is %.2f frames), so the next chunk "
                   "cannot start on a frame; give %sone --fps F for every video", p->src,
                   p->o->chunk_seconds, p->chunk_frames, p->fps_num, p->fps_den,
                   p->o->chunk_seconds, (double)p->o->chunk_seconds * p->fps_num / p->fps_den,
                   alt);
}

/* Route output frame n (a copy of the held source frame) to its chunk. */
static int emit(struct prep *p, int64_t n)
{
    int k = (int)(n / p->chunk_frames);
    int rc;
    if (p->o->max_frames > 0 && n >= p->o->max_frames)
        return 0; /* past the sample */
    if (k != p->cur) {
        TB_ASSERT(k == p->cur + 1);
        if (k > 0 && !p->chunk_whole)
            return refuse_chunk_length(p);
        if ((rc = end_chunk(p)) < 0 || (rc = begin_chunk(p, k)) < 0)
            return rc;
    }
    p->cur_count++;
    if (p->cur_reused)
        return 0;
    AVFrame *f = NULL;
    if ((rc = prepare_held(p, &f)) < 0)
        return rc;
    if ((rc = tbi_writer_write(p->w, f)) < 0)
        return tbi_err_prefix(rc, "%s", p->src);
    return 0;
}

/* ---- resampling -------------------------------------------------------------------------- */

static int64_t to_out(const struct prep *p, int64_t ts)
{
    return av_rescale_q_rnd(ts - p->ts_offset, p->in.st->time_base, p->out_tb,
                            AV_ROUND_NEAR_INF | AV_ROUND_PASS_MINMAX);
}

/* A frame's duration in stream time base: its own, else the stream's nominal rate, else one
 * output period. */
static int64_t frame_duration(const struct prep *p, const AVFrame *f)
{
    int64_t d = tbi_frame_duration(&p->in, f);
    return d > 0 ? d : av_rescale_q(1, p->out_tb, p->in.st->time_base);
}

/* Take a new decoded frame: emit the held frame for every output number before this frame's,
 * then hold this one. A frame whose number is not past the last emitted one replaces the held
 * frame without emitting (ffmpeg's fps filter drops it the same way). */
static int take_frame(struct prep *p, AVFrame *f)
{
    int64_t ts = f->best_effort_timestamp;
    int rc;
    if (ts == AV_NOPTS_VALUE)
        ts = p->started ? p->last_ts + p->last_dur : 0;
    int64_t o = to_out(p, ts);
    if (!p->started) {
        p->started = 1;
        p->base = o;
        p->first_ts = ts;
        pick_size(p, f->width, f->height);
        /* The chunks hold YCbCr in the matrix the conversion kept (tbi_sws_set_colors): a
         * YCbCr source's own, tagged as the source is, so that readers (tubelet's, ffmpeg's)
         * convert them back as they convert the source; RGB becomes untagged BT.601. */
        p->colorspace = f->colorspace == AVCOL_SPC_RGB ? AVCOL_SPC_UNSPECIFIED : f->colorspace;
        p->primaries = f->color_primaries;
        p->trc = f->color_trc;
        if ((rc = alloc_yuv(&p->scaled, p->out_w, p->out_h)) < 0)
            return tbi_err(rc, "%s: out of memory", p->src);
        p->res->width = p->out_w;
        p->res->height = p->out_h;
    } else {
        for (; p->next_out < o - p->base; p->next_out++)
            if ((rc = emit(p, p->next_out)) < 0)
                return rc;
    }
    p->n_decoded++;
    av_frame_unref(p->held);
    av_frame_move_ref(p->held, f);
    p->held_ready = 0;
    p->last_ts = ts;
    p->last_dur = frame_duration(p, p->held);
    return 0;
}

/* End of stream: the last frame fills the output up to its end time (and a video of one
 * frame still gives one). */
static int finish_frames(struct prep *p)
{
    int64_t end = to_out(p, p->last_ts + p->last_dur) - p->base;
    int rc;
    if (end < 1)
        end = 1;
    if (p->o->max_frames > 0 && end > p->o->max_frames)
        end = p->o->max_frames;
    for (; p->next_out < end; p->next_out++)
        if ((rc = emit(p, p->next_out)) < 0)
            return rc;
    return end_chunk(p);
}

/* ---- whole video ------------------------------------------------------------------------- */

/* Remove what an earlier run with other settings may have left: chunk files and indexes not
 * part of this video, and temporary files. */
static void remove_leftovers(struct prep *p)
{
    DIR *d = opendir(p->dir);
    struct dirent *e;
    char path[4096 + 256];
    if (!d)
        return;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        size_t len = strlen(name);
        int ours = 0, keep = 0;
        if (len > 5 && !strcmp(name + len - 5, ".part"))
            ours = 1;
        char *end;
        long long start = strtoll(name, &end, 10);
        if (end != name && *end == '.' && start >= 0 &&
            (!strcmp(end + 1, "idx") || !strcmp(end + 1, p->o->ext))) {
            ours = 1;
            keep = start % p->o->chunk_seconds == 0 &&
                   start / p->o->chunk_seconds < p->n_chunks;
        }
        if (ours && !keep && snprintf(path, sizeof(path), "%s/%s", p->dir, name) <
                                 (int)sizeof(path))
            unlink(path);
    }
    closedir(d);
}

static int make_params(struct prep *p)
{
    struct stat st;
    int rc = tbi_source_check(p->src);
    if (rc < 0)
        return rc;
    if (stat(p->src, &st) != 0)
        return tbi_err(errno == ENOENT ? TB_ENOENT : TB_EIO, "%s: %s", p->src, strerror(errno));
    char sample[40] = "", fps[32] = "source";
    if (p->o->max_frames > 0)
        snprintf(sample, sizeof(sample), " max_frames=%lld", (long long)p->o->max_frames);
    /* --fps source is a setting of its own (each video's rate is its index's fps line). */
    if (!p->o->fps_source)
        snprintf(fps, sizeof(fps), "%d/%d", p->o->fps_num, p->o->fps_den);
    return tbi_fmt(p->params, sizeof(p->params),
                   "chunk_seconds=%d fps=%s short_side=%d gop=%d crf=%d preset=%s tune=%s%s%s "
                   "src_bytes=%lld src_mtime=%lld",
                   p->o->chunk_seconds, fps, p->o->short_side,
                   p->o->gop, p->o->crf, p->o->preset,
                   p->o->tune && p->o->tune[0] ? p->o->tune : "none",
                   /* Named only when set, so videos prepared before the option stay done. */
                   p->o->no_bframes ? " bframes=0" : "", sample, (long long)st.st_size,
                   (long long)st.st_mtime);
}

/* A finished video.idx with our settings, every chunk file still there with the size it
 * recorded, means there is nothing to do. */
static int already_done(struct prep *p)
{
    struct tb_video_index *old = NULL;
    if (!tb_index_exists(p->dir))
        return 0;
    int ok = tb_index_load(&old, p->dir) == 0 && !strcmp(old->params, p->params);
    for (int k = 0; ok && k < old->n_chunks; k++) {
        char file[64], path[4096], idx_path[4096];
        struct stat st;
        ok = chunk_paths(p, k, file, sizeof(file), path, sizeof(path), idx_path,
                         sizeof(idx_path)) == 0 &&
             stat(path, &st) == 0 && st.st_size == old->chunks[k].bytes;
    }
    if (ok) {
        p->res->n_frames = old->n_frames;
        p->res->n_chunks = p->res->n_chunks_skipped = old->n_chunks;
        p->res->width = old->width;
        p->res->height = old->height;
    }
    tb_index_free(&old);
    tb_errclear();
    return ok;
}

/* Whether src is the source old was prepared from: the same path as given, the same file
 * once both paths are resolved, or a file of the size and modification time old recorded
 * (moved or copied with them). */
static int same_source(const struct tb_video_index *old, const char *src)
{
    char a[PATH_MAX], b[PATH_MAX];
    struct stat st;
    const char *q;
    long long bytes, mtime;
    if (!strcmp(old->source, src))
        return 1;
    if (realpath(old->source, a) && realpath(src, b) && !strcmp(a, b))
        return 1;
    return (q = strstr(old->params, "src_bytes=")) && sscanf(q, "src_bytes=%lld", &bytes) == 1 &&
           (q = strstr(old->params, "src_mtime=")) && sscanf(q, "src_mtime=%lld", &mtime) == 1 &&
           stat(src, &st) == 0 && (long long)st.st_size == bytes &&
           (long long)st.st_mtime == mtime;
}

/* The value of key in a params line ("key=value ..."), into buf; "" when absent. */
static const char *param(const char *params, const char *key, char *buf, size_t size)
{
    size_t n = strlen(key);
    buf[0] = '\0';
    for (const char *q = params; (q = strstr(q, key)); q += n)
        if ((q == params || q[-1] == ' ') && q[n] == '=') {
            size_t len = strcspn(q + n + 1, " ");
            snprintf(buf, size, "%.*s", (int)(len < size ? len : size - 1), q + n + 1);
            break;
        }
    return buf;
}

/* The encoding settings in which params a and b differ, as the flags that give them: "--short-
 * side 320" into in_a, "--short-side 288" into in_b. 0 when they agree (the source's size and
 * time are not settings: a changed source is prepared again). */
static int settings_differ(const char *a, const char *b, char *in_a, char *in_b, size_t size)
{
    static const char *const keys[][2] = {
        {"chunk_seconds", "--chunk-seconds"}, {"fps", "--fps"}, {"short_side", "--short-side"},
        {"gop", "--gop"}, {"crf", "--crf"}, {"preset", "--preset"}, {"tune", "--tune"},
        {"bframes", ""}, {"max_frames", "max_frames"}};
    size_t la = 0, lb = 0;
    in_a[0] = in_b[0] = '\0';
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        char va[64], vb[64];
        param(a, keys[i][0], va, sizeof(va));
        param(b, keys[i][0], vb, sizeof(vb));
        if (!strcmp(va, vb))
            continue;
        const char *sep = la ? " " : "";
        if (!keys[i][1][0]) { /* bframes=0 is --no-bframes; absent, the preset's */
            la += (size_t)snprintf(in_a + la, size - la, "%s%s", sep, va[0] ? "--no-bframes"
                                                                             : "--bframes");
            lb += (size_t)snprintf(in_b + lb, size - lb, "%s%s", sep, vb[0] ? "--no-bframes"
                                                                             : "--bframes");
        } else {
            la += (size_t)snprintf(in_a + la, size - la, "%s%s %s", sep, keys[i][1],
                                   va[0] ? va : "(none)");
            lb += (size_t)snprintf(in_b + lb, size - lb, "%s%s %s", sep, keys[i][1],
                                   vb[0] ? vb : "(none)");
        }
        if (la >= size || lb >= size)
            break;
    }
    return in_a[0] != '\0';
}

/* A prepared video belongs to one source and one set of encoding settings: a later prep of
 * another file with the same stem, or of the same file with other settings (another
 * --short-side into the same root), would replace it without a word. Its video.idx names
 * both; either change is refused unless opts->overwrite. An unfinished video (no video.idx:
 * interrupted, or refused as truncated) holds nothing finished and is replaced as before. */
static int check_owner(struct prep *p)
{
    struct tb_video_index *old = NULL;
    char was[256], asks[256];
    int rc = 0;
    if (p->o->overwrite || !tb_index_exists(p->dir))
        return 0;
    if (tb_index_load(&old, p->dir) < 0)
        old = NULL;
    tb_errclear();
    if (old && old->source[0] && !same_source(old, p->src))
        rc = tbi_err(TB_EINVAL, "%s: %s already holds the video prepared from %s (the same "
                     "stem); give --overwrite to replace it, or rename one of the files (a "
                     "video's name is its file's stem)", p->src, p->dir, old->source);
    else if (old && settings_differ(old->params, p->params, was, asks, sizeof(was)))
        rc = tbi_err(TB_EINVAL, "%s: %s was prepared with %s, this run asks %s; give "
                     "--overwrite to encode it again with the new settings, or another --out",
                     p->src, p->dir, was, asks);
    tb_index_free(&old);
    return rc;
}

static int check_opts(const struct tb_prep_opts *o)
{
    if (!o->out_root || !o->out_root[0])
        return tbi_err(TB_EINVAL, "no output directory given");
    if (o->chunk_seconds < 1)
        return tbi_err(TB_EINVAL, "chunk length must be at least 1 s, not %d", o->chunk_seconds);
    if (!o->fps_source && (o->fps_num <= 0 || o->fps_den <= 0 || o->fps_num / o->fps_den > 1000))
        return tbi_err(TB_EINVAL, "bad frame rate %d/%d", o->fps_num, o->fps_den);
    if (!o->fps_source && ((int64_t)o->chunk_seconds * o->fps_num) % o->fps_den)
        return tbi_err(TB_EINVAL, "%d s at %d/%d fps is not a whole number of frames; pick "
                       "another chunk length", o->chunk_seconds, o->fps_num, o->fps_den);
    if (o->short_side < 0 || o->short_side % 2 || o->short_side > 8192)
        return tbi_err(TB_EINVAL, "short side must be an even number of pixels (or 0), not %d",
                       o->short_side);
    if (o->gop < 1)
        return tbi_err(TB_EINVAL, "keyframe interval must be at least 1 frame, not %d", o->gop);
    if (o->crf < 0 || o->crf > 51)
        return tbi_err(TB_EINVAL, "crf must be in 0..51, not %d", o->crf);
    if (!o->ext || !o->ext[0] || strchr(o->ext, '/') || strlen(o->ext) > 16)
        return tbi_err(TB_EINVAL, "bad chunk extension '%s'", o->ext ? o->ext : "");
    static const char *const tunes[] = {"", "none", "film", "animation", "grain", "stillimage",
                                        "fastdecode", "zerolatency"};
    int tune_ok = !o->tune;
    for (size_t i = 0; o->tune && i < sizeof(tunes) / sizeof(tunes[0]); i++)
        tune_ok |= !strcmp(o->tune, tunes[i]);
    if (!tune_ok)
        return tbi_err(TB_EINVAL, "unknown x264 tune '%s' (film, animation, grain, stillimage, "
                       "fastdecode, zerolatency)", o->tune);
    /* Checked here, before anything on disk changes, not when the first encoder opens. */
    static const char *const presets[] = {"ultrafast", "superfast", "veryfast", "faster", "fast",
                                          "medium", "slow", "slower", "veryslow", "placebo"};
    for (size_t i = 0; o->preset && i < sizeof(presets) / sizeof(presets[0]); i++)
        if (!strcmp(o->preset, presets[i]))
            return 0;
    return tbi_err(TB_EINVAL, "unknown x264 preset '%s' (ultrafast, superfast, veryfast, "
                   "faster, fast, medium, slow, slower, veryslow, placebo)",
                   o->preset ? o->preset : "");
}

static void prep_free(struct prep *p)
{
    if (p->lock_fd >= 0)
        close(p->lock_fd); /* releases the lock */
    tbi_writer_abort(&p->w);
    for (int i = 0; i < p->n_chunks; i++)
        free(p->chunks[i].keyframes);
    free(p->chunks);
    sws_freeContext(p->sws);
    sws_freeContext(p->sws_wide);
    av_frame_free(&p->wide);
    av_frame_free(&p->frame);
    av_frame_free(&p->held);
    av_frame_free(&p->scaled);
    av_frame_free(&p->upright);
    av_packet_free(&p->pkt);
    tbi_input_close(&p->in);
}

/* One writer per video directory: a second prep of the same video (another process, or the
 * same source given twice) would share temporary names with the first and clean away its
 * files. flock, not fcntl, so threads of one process exclude each other too. */
static int lock_dir(struct prep *p)
{
    char path[4096 + 16];
    int rc = tbi_fmt(path, sizeof(path), "%s/.lock", p->dir);
    if (rc < 0)
        return rc;
    p->lock_fd = tbi_fault(TBI_FAULT_OPEN) ? (errno = EMFILE, -1)
                                           : open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (p->lock_fd < 0)
        return tbi_err(TB_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (flock(p->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == EWOULDBLOCK)
            return tbi_err(TB_EIO, "%s: another tubelet prep is writing %s right now", p->src,
                           p->dir);
        return tbi_err(TB_EIO, "%s: cannot lock: %s", path, strerror(e));
    }
    return 0;
}

/* --fps source: the rate this video keeps. A constant-rate stream's timestamps lie on the grid
 * of its r_frame_rate (ffprobe's), so every frame is kept as it is; the container's average
 * (avg_frame_rate: frames over duration) can be a little off that grid (a last frame of
 * another length, a dropped frame, Matroska's millisecond clock), and a resample to it would
 * drop or repeat a frame now and then. Where the two differ by more than 1%, or r_frame_rate
 * is unknown, the frames come at varying intervals: the video is resampled to its average, as
 * `ffmpeg -vf fps=AVG` does, rather than refused (a dataset of short clips holds a few). */
static int source_rate(struct prep *p, AVRational *out)
{
    AVRational r = p->in.st->r_frame_rate, a = p->in.st->avg_frame_rate, q;
    int r_ok = r.num > 0 && r.den > 0, a_ok = a.num > 0 && a.den > 0;
    if (r_ok && (!a_ok || fabs(av_q2d(r) / av_q2d(a) - 1) <= 0.01))
        q = r;
    else if (a_ok)
        q = a;
    else
        return tbi_err(TB_EINVAL, "%s: FFmpeg reports no frame rate for it; give --fps F",
                       p->src);
    av_reduce(&q.num, &q.den, q.num, q.den, INT_MAX);
    if (av_q2d(q) > 1000)
        return tbi_err(TB_EINVAL, "%s: its frame rate, %d/%d fps, is over 1000; give --fps F",
                       p->src, q.num, q.den);
    *out = q;
    return 0;
}

/* The chunks' rate and length in frames. */
static int set_rate(struct prep *p)
{
    AVRational q = {p->o->fps_num, p->o->fps_den};
    int rc;
    if (p->o->fps_source && (rc = source_rate(p, &q)) < 0)
        return rc;
    p->fps_num = q.num;
    p->fps_den = q.den;
    p->out_tb = av_inv_q(q);
    /* The frames that start within chunk_seconds: all of chunk 0 where that is not whole. */
    p->chunk_frames = ((int64_t)p->o->chunk_seconds * q.num + q.den - 1) / q.den;
    p->chunk_whole = (int64_t)p->o->chunk_seconds * q.num % q.den == 0;
    return 0;
}

static int run(struct prep *p)
{
    char name[256], idx_path[4096 + 32];
    int rc;

    if ((rc = check_opts(p->o)) < 0 || (rc = make_params(p)) < 0)
        return rc;
    if ((rc = tb_prep_video_name(name, sizeof(name), p->src, p->o->ext)) < 0 ||
        (rc = tbi_fmt(p->dir, sizeof(p->dir), "%s/%s", p->o->out_root, name)) < 0)
        return rc;
    snprintf(p->res->name, sizeof(p->res->name), "%s", name);
    if ((rc = check_owner(p)) < 0)
        return rc;
    if (already_done(p))
        return 0;
    if ((rc = tbi_input_open(&p->in, p->src, p->o->n_threads)) < 0 || (rc = set_rate(p)) < 0)
        return rc;
    if ((rc = tbi_mkdirs(p->dir)) < 0 || (rc = lock_dir(p)) < 0)
        return rc;
    snprintf(idx_path, sizeof(idx_path), "%s/%s", p->dir, TB_VIDEO_INDEX_NAME);
    if (unlink(idx_path) != 0 && errno != ENOENT)
        return tbi_err(TB_EIO, "%s: cannot remove: %s", idx_path, strerror(errno));

    p->ts_offset = p->in.fmt->start_time == AV_NOPTS_VALUE
                       ? 0
                       : av_rescale_q(p->in.fmt->start_time, AV_TIME_BASE_Q,
                                      p->in.st->time_base);
    p->cur = -1;
    if (!(p->pkt = av_packet_alloc()) || !(p->frame = av_frame_alloc()) ||
        !(p->held = av_frame_alloc()))
        return tbi_err(TB_ENOMEM, "%s: out of memory", p->src);

    for (;;) {
        if (p->o->cancel && *p->o->cancel)
            return tbi_err(TB_ECANCELED, "%s: canceled", p->src);
        rc = tbi_input_next_frame(&p->in, p->pkt, p->frame, &p->res->n_bad_packets, p->src);
        if (rc == TB_EOF)
            break;
        if (rc < 0)
            return rc;
        if ((rc = take_frame(p, p->frame)) < 0)
            return rc;
        if (p->o->max_frames > 0 && p->next_out >= p->o->max_frames)
            break;
    }
    if (!p->started)
        return tbi_err(TB_EDECODE, "%s: no decodable video frames", p->src);
    /* A file decoding to much less than it declares is cut short or broken. */
    if ((rc = finish_frames(p)) < 0 ||
        (!p->o->max_frames &&
         (rc = tbi_check_truncation(&p->in, p->first_ts, p->last_ts + p->last_dur,
                                    p->n_decoded, p->src, NULL, NULL)) < 0))
        return rc;

    struct tb_video_index idx = {0};
    index_header(p, &idx);
    idx.n_chunks = p->n_chunks;
    idx.chunks = p->chunks;
    idx.n_frames = p->o->max_frames > 0 && p->next_out > p->o->max_frames ? p->o->max_frames
                                                                           : p->next_out;
    p->res->n_frames = idx.n_frames;
    p->res->n_chunks = p->n_chunks;
    remove_leftovers(p);
    return write_index(idx_path, TBI_INDEX_VIDEO, &idx, 0);
}

int tb_prep_video(const struct tb_prep_opts *opts, const char *src, struct tb_prep_result *res)
{
    struct tb_prep_result scratch;
    struct prep p;
    memset(&p, 0, sizeof(p));
    p.o = opts;
    p.src = src;
    p.res = res ? res : &scratch;
    memset(p.res, 0, sizeof(*p.res));
    p.in.stream_index = -1;
    p.lock_fd = -1;
    int rc = run(&p);
    prep_free(&p);
    return rc;
}
