/* src/video/reader.c - the fused decode-crop clip reader (contract in video.h).
 *
 * A video is a list of segments: the chunks of a prepared directory (frame numbers from the
 * constant rate: no scanning) or one plain file (indexed once by reading its packets, or by
 * decoding it when its packets carry no presentation timestamps). A small LRU of open
 * decoders serves the clips; each remembers the next frame it will output, so a clip that
 * continues where the last one stopped does not seek; a slot taken over by another chunk of
 * the same stream keeps its decoder, flushed. Decoded frames are identified by their
 * timestamps, never by counting, so a seek that lands elsewhere cannot shift the numbering.
 * Not here: choosing which frames (sample.c) or crops (crop.c).
 * Tests: tests/test_reader.c. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#include "video/av.h"
#include "video/internal.h"
#include "video/resize.h"

#define N_VIDEOS_CACHED 64

struct segment {
    const char *file;         /* file name inside the video directory, or the plain path */
    int64_t first, n_frames;  /* absolute number of its frame 0; frames it holds */
    int n_keyframes;
    const int64_t *keyframes; /* relative, ascending */
    const int64_t *ts;        /* plain files: timestamp of each frame, ascending; else NULL */
    int sequential;           /* plain files without usable timestamps: frames are counted
                                 from the start, the only place a seek goes */
};

struct video {
    char *name;               /* as the caller named it: directory or file */
    struct tb_video_index *idx; /* prepared videos */
    struct segment *segs;
    int n_segs;
    struct tb_video_info info;
    int log2_cw, log2_ch;     /* chroma subsampling of its frames (the first frame's) */
    int64_t *plain_ts, *plain_kf; /* plain files: owned arrays behind segs[0] */
    uint64_t used;
};

struct decoder {
    struct video *v;          /* NULL: free slot */
    int seg;
    struct tbi_input in;
    char path[4096];
    int64_t next_out;         /* relative number of the next frame it will output; -1: unknown */
    int64_t dropped_hi;       /* highest frame skipped (not decoded) since the last seek */
    int64_t bad_lo, bad_key;  /* a packet failed at frame bad_lo; the next keyframe after it */
    int eof;                  /* the decoder is drained; it must seek before reuse */
    int nal_len;              /* H.264 in MP4: size of the NAL length prefix; 0: no skipping */
    int64_t ts0;              /* prepared chunks: timestamp of frame 0 */
    uint64_t used;
};

struct want {
    int64_t frame;            /* absolute */
    int slot;                 /* index into the caller's frame list */
};

struct tb_reader {
    struct tb_reader_opts o;
    struct video *videos[N_VIDEOS_CACHED];
    struct decoder *decs;
    int n_decs;
    uint64_t clock;
    AVPacket *pkt;
    AVFrame *frame;
    struct SwsContext *sws;
    struct tbi_resize *resize;  /* 8-bit 4:2:0 resized bilinear: our own (resize.h) */
    struct want *wants;
    int cap_wants;
    uint8_t *scratch;         /* swscale's output, padded: it may write past a row's end */
    size_t scratch_bytes;
};

/* ---- videos ------------------------------------------------------------------------------ */

static void video_free(struct video *v)
{
    if (!v)
        return;
    tb_index_free(&v->idx);
    free(v->segs);
    free(v->plain_ts);
    free(v->plain_kf);
    free(v->name);
    free(v);
}

/* Timestamps and keyframes of a plain file's frames, by decoding it once: frame n is what the
 * decoder returns n-th, whatever the packets claim (some files have packets that decode to
 * nothing). Sets *sequential when the timestamps cannot name frames (missing, repeated or
 * going backwards); such a file is then read from its start, counting frames. *w x *h and
 * *fmt: the first frame's size, which the container may not state (0x0) or state wrongly, and
 * pixel format. */
static int scan_frames(struct tbi_input *in, AVPacket *pkt, AVFrame *frame, int64_t **ts,
                       int64_t **kf, int64_t *n, int64_t *n_kf, int *sequential, int *w, int *h,
                       int *fmt, const char *path)
{
    int64_t cap = 1024, cap_kf = 64, n_bad = 0;
    int64_t *t = tbi_malloc(sizeof(*t) * (size_t)cap), *k = tbi_malloc(sizeof(*k) * (size_t)cap_kf);
    int rc;
    *n = *n_kf = 0;
    if (!t || !k) {
        rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    while ((rc = tbi_input_next_frame(in, pkt, frame, &n_bad, path)) == 0) {
        int64_t ts_f = frame->best_effort_timestamp;
#ifdef AV_FRAME_FLAG_KEY
        int key = !!(frame->flags & AV_FRAME_FLAG_KEY);
#else
        int key = frame->key_frame;
#endif
        if (*n == 0) {
            *w = frame->width;
            *h = frame->height;
            *fmt = frame->format;
        }
        av_frame_unref(frame);
        if (ts_f == AV_NOPTS_VALUE || (*n > 0 && ts_f <= t[*n - 1]))
            *sequential = 1;
        if (*n == cap) {
            int64_t *g = tbi_realloc(t, sizeof(*t) * (size_t)(cap *= 2));
            if (!g)
                goto oom;
            t = g;
        }
        if (key && *n_kf == cap_kf) {
            int64_t *g = tbi_realloc(k, sizeof(*k) * (size_t)(cap_kf *= 2));
            if (!g)
                goto oom;
            k = g;
        }
        if (key)
            k[(*n_kf)++] = ts_f;
        t[(*n)++] = ts_f;
    }
    if (rc != TB_EOF)
        goto fail;
    *ts = t;
    *kf = k;
    return 0;
oom:
    rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
fail:
    free(t);
    free(k);
    return rc;
}

/* Binary search: index of ts in the ascending array, or -1. */
static int64_t find_ts(const int64_t *t, int64_t n, int64_t ts)
{
    int64_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (t[mid] == ts)
            return mid;
        if (t[mid] < ts)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static int load_plain(struct video *v, const char *path, AVPacket *pkt, AVFrame *frame)
{
    struct tbi_input in;
    int64_t *ts = NULL, *kts = NULL, n = 0, n_kf = 0;
    int sequential = 0, fmt = AV_PIX_FMT_NONE;
    int rc = tbi_input_open(&in, path, 1);
    if (rc < 0)
        return rc;
    if (in.rotation) {
        tbi_input_close(&in);
        return tbi_err(TB_EUNSUPPORTED, "%s: rotated video (%d degrees); run tubelet prep on "
                       "it first, which turns it upright", path, in.rotation);
    }
    rc = scan_frames(&in, pkt, frame, &ts, &kts, &n, &n_kf, &sequential, &v->info.width,
                     &v->info.height, &fmt, path);
    const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(fmt);
    v->log2_cw = desc ? desc->log2_chroma_w : 0;
    v->log2_ch = desc ? desc->log2_chroma_h : 0;
    AVStream *st = in.st;
    AVRational r = st->avg_frame_rate.num ? st->avg_frame_rate : st->r_frame_rate;
    v->info.fps_num = r.num > 0 ? r.num : 0;
    v->info.fps_den = r.num > 0 ? r.den : 1;
    tbi_input_close(&in);
    if (rc < 0)
        return rc;
    if (n == 0 || v->info.width <= 0 || v->info.height <= 0) {
        free(ts);
        free(kts);
        return n ? tbi_err(TB_EDECODE, "%s: frame 0 is %dx%d pixels", path, v->info.width,
                           v->info.height)
                 : tbi_err(TB_EDECODE, "%s: no decodable video frames", path);
    }
    /* Keyframes as frame numbers; the first frame is always a place to start from. */
    int64_t n_k = 0;
    for (int64_t i = 0; !sequential && i < n_kf; i++) {
        int64_t f = find_ts(ts, n, kts[i]);
        if (f > 0)
            kts[n_k++] = f;
    }
    int64_t *k = tbi_malloc(sizeof(*k) * (size_t)(n_k + 1));
    if (!k) {
        free(ts);
        free(kts);
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    }
    k[0] = 0;
    memcpy(k + 1, kts, sizeof(*k) * (size_t)n_k);
    free(kts);
    v->plain_ts = ts;
    v->plain_kf = k;
    if (!(v->segs = tbi_calloc(1, sizeof(*v->segs))))
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    v->n_segs = 1;
    v->segs[0] = (struct segment){v->name, 0, n, (int)n_k + 1, k, sequential ? NULL : ts,
                                  sequential};
    v->info.n_frames = n;
    return 0;
}

static int load_prepared(struct video *v, const char *dir)
{
    int rc = tb_index_load(&v->idx, dir);
    if (rc < 0)
        return rc;
    struct tb_video_index *idx = v->idx;
    if (!(v->segs = tbi_calloc((size_t)idx->n_chunks, sizeof(*v->segs))))
        return tbi_err(TB_ENOMEM, "%s: out of memory", dir);
    v->n_segs = idx->n_chunks;
    for (int i = 0; i < idx->n_chunks; i++) {
        const struct tb_chunk_info *c = &idx->chunks[i];
        v->segs[i] = (struct segment){c->file, c->start_frame, c->n_frames, c->n_keyframes,
                                      c->keyframes, NULL, 0};
    }
    v->info = (struct tb_video_info){idx->width, idx->height, idx->n_frames, idx->fps_num,
                                     idx->fps_den};
    v->log2_cw = v->log2_ch = 1; /* prep writes yuv420p */
    return 0;
}

/* The cached video named name, loading it on first use (evicting the least recent). */
static int get_video(tb_reader *r, const char *name, struct video **out)
{
    int free_slot = -1, oldest = 0;
    for (int i = 0; i < N_VIDEOS_CACHED; i++) {
        struct video *v = r->videos[i];
        if (!v) {
            if (free_slot < 0)
                free_slot = i;
            continue;
        }
        if (!strcmp(v->name, name)) {
            v->used = ++r->clock;
            *out = v;
            return 0;
        }
        if (r->videos[oldest] == NULL || v->used < r->videos[oldest]->used)
            oldest = i;
    }
    int slot = free_slot >= 0 ? free_slot : oldest;
    if (r->videos[slot]) {
        for (int i = 0; i < r->n_decs; i++)
            if (r->decs[i].v == r->videos[slot]) {
                tbi_input_close(&r->decs[i].in);
                r->decs[i].v = NULL;
            }
        video_free(r->videos[slot]);
        r->videos[slot] = NULL;
    }
    struct video *v = tbi_calloc(1, sizeof(*v));
    if (!v || !(v->name = tbi_strdup(name))) {
        free(v);
        return tbi_err(TB_ENOMEM, "%s: out of memory", name);
    }
    int rc = tbi_is_dir(name) ? load_prepared(v, name) : load_plain(v, name, r->pkt, r->frame);
    if (rc < 0) {
        video_free(v);
        return rc;
    }
    v->used = ++r->clock;
    r->videos[slot] = v;
    *out = v;
    return 0;
}

/* ---- decoders ---------------------------------------------------------------------------- */

static int open_decoder(tb_reader *r, struct video *v, int seg, struct decoder **out,
                        struct tb_clip_stats *stats)
{
    struct decoder *d = NULL;
    for (int i = 0; i < r->n_decs; i++) {
        if (r->decs[i].v == v && r->decs[i].seg == seg) {
            d = &r->decs[i];
            d->used = ++r->clock;
            *out = d;
            return 0;
        }
    }
    for (int i = 0; i < r->n_decs; i++)
        if (!d || !r->decs[i].v || (d->v && r->decs[i].used < d->used))
            d = &r->decs[i];
    /* A chunk keeps the decoder of the one it replaces (tbi_input_switch_chunk). */
    if (!v->idx)
        tbi_input_close(&d->in);
    d->v = NULL;
    int rc;
    if (v->idx)
        rc = tbi_fmt(d->path, sizeof(d->path), "%s/%s", v->name, v->segs[seg].file);
    else
        rc = tbi_fmt(d->path, sizeof(d->path), "%s", v->name);
    if (rc >= 0 && v->idx && !tbi_is_file(d->path))
        rc = tbi_err(TB_ENOENT, "%s: chunk file is missing", d->path);
    if (rc < 0) {
        tbi_input_close(&d->in);
        return rc;
    }
    rc = v->idx ? tbi_input_switch_chunk(&d->in, d->path, r->o.n_threads)
                : tbi_input_open(&d->in, d->path, r->o.n_threads);
    if (rc < 0)
        return rc;
    /* A file just opened is at its start: frame 0 comes out first, so a clip from the first
     * keyframe needs no seek (a stream without an index, such as raw H.264, cannot seek). */
    d->v = v;
    d->seg = seg;
    d->next_out = 0;
    d->dropped_hi = -1;
    d->bad_lo = d->bad_key = -1;
    d->eof = 0;
    d->nal_len = r->o.decode_all ? 0 : tbi_h264_nal_length(d->in.st->codecpar);
    d->ts0 = d->in.st->start_time == AV_NOPTS_VALUE ? 0 : d->in.st->start_time;
    d->used = ++r->clock;
    if (v->idx && (d->in.st->codecpar->width != v->info.width ||
                   d->in.st->codecpar->height != v->info.height)) {
        rc = tbi_err(TB_EFORMAT, "%s: %dx%d frames, but the index says %dx%d", d->path,
                     d->in.st->codecpar->width, d->in.st->codecpar->height, v->info.width,
                     v->info.height);
        tbi_input_close(&d->in);
        d->v = NULL;
        return rc;
    }
    if (stats)
        stats->n_opens++;
    *out = d;
    return 0;
}

/* Relative frame number of a timestamp in segment s, or -1 if it is not a frame of it. */
static int64_t frame_of(const struct decoder *d, const struct segment *s, int64_t ts)
{
    if (ts == AV_NOPTS_VALUE)
        return -1;
    if (s->ts)
        return find_ts(s->ts, s->n_frames, ts);
    const struct video *v = d->v;
    int64_t f = av_rescale_q_rnd(ts - d->ts0, d->in.st->time_base,
                                 (AVRational){v->info.fps_den, v->info.fps_num},
                                 AV_ROUND_NEAR_INF | AV_ROUND_PASS_MINMAX);
    return f >= 0 && f < s->n_frames ? f : -1;
}

static int64_t ts_of(const struct decoder *d, const struct segment *s, int64_t f)
{
    if (s->ts)
        return s->ts[f];
    const struct video *v = d->v;
    return d->ts0 + av_rescale_q(f, (AVRational){v->info.fps_den, v->info.fps_num},
                                 d->in.st->time_base);
}

static int64_t key_before(const struct segment *s, int64_t f)
{
    int lo = 0, hi = s->n_keyframes - 1;
    while (lo < hi) { /* last keyframe <= f */
        int mid = (lo + hi + 1) / 2;
        if (s->keyframes[mid] <= f)
            lo = mid;
        else
            hi = mid - 1;
    }
    return s->keyframes[lo];
}

static int seek_to(struct decoder *d, const struct segment *s, int64_t key,
                   struct tb_clip_stats *stats)
{
    int ret;
    if (s->sequential) {
        /* Only the start is a known place: go back to the first packet. */
        key = 0;
        ret = avformat_seek_file(d->in.fmt, -1, INT64_MIN, INT64_MIN, INT64_MIN, 0);
        if (ret < 0)
            ret = av_seek_frame(d->in.fmt, -1, INT64_MIN, AVSEEK_FLAG_BACKWARD | AVSEEK_FLAG_ANY);
    } else {
        ret = av_seek_frame(d->in.fmt, d->in.stream_index, ts_of(d, s, key),
                            AVSEEK_FLAG_BACKWARD);
    }
    if (ret < 0)
        return tbi_av_err(ret, TB_EDECODE, "%s: cannot seek to frame %" PRId64, d->path, key);
    avcodec_flush_buffers(d->in.dec);
    d->next_out = key;
    d->dropped_hi = -1;
    d->bad_lo = d->bad_key = -1;
    d->eof = 0;
    if (stats)
        stats->n_seeks++;
    return 0;
}

/* ---- output ------------------------------------------------------------------------------ */

static int sws_flags(enum tb_scaler s)
{
    switch (s) {
    case TB_SCALE_BICUBIC: return SWS_BICUBIC;
    case TB_SCALE_AREA: return SWS_AREA;
    case TB_SCALE_POINT: return SWS_POINT;
    default: return SWS_BILINEAR;
    }
}

/* The crop as the planes can cut it by pointer offsets: a corner inside a chroma sample (an
 * odd x or y on 4:2:0) moves up and left onto the chroma grid, as ffmpeg's crop filter moves
 * it; the size stays. A crop starting on the grid needs nothing more: its chroma is the
 * ceil(w / 2) x ceil(h / 2) samples over it, as swscale reads a frame of that size, so the
 * whole frame (any size) is converted exactly as ffmpeg converts it. */
static struct tb_crop on_grid(const struct tb_crop *c, int log2_w, int log2_h)
{
    struct tb_crop g = *c;
    g.x &= ~((1 << log2_w) - 1);
    g.y &= ~((1 << log2_h) - 1);
    return g;
}

/* 0 if frame f (number abs_no, pixel format desc) can be cropped by pointer offsets and has the
 * video's size; else the error that says why not. */
static int check_frame(const struct decoder *d, const AVFrame *f, const AVPixFmtDescriptor *desc,
                       int64_t abs_no)
{
    if (!desc || desc->flags & (AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_HWACCEL) ||
        (!(desc->flags & AV_PIX_FMT_FLAG_PLANAR) && desc->log2_chroma_h))
        return tbi_err(TB_EUNSUPPORTED, "%s: cannot crop %s frames in place; run tubelet prep "
                       "on it first", d->path, desc ? desc->name : "unknown");
    if (f->width != d->v->info.width || f->height != d->v->info.height)
        return tbi_err(TB_EDECODE, "%s: frame %" PRId64 " is %dx%d, the video %dx%d", d->path,
                       abs_no, f->width, f->height, d->v->info.width, d->v->info.height);
    return 0;
}

/* Where the crop whose corner is (x, y), on the chroma grid, starts in each plane of f. */
static void crop_planes(const AVPixFmtDescriptor *desc, const AVFrame *f, int x, int y,
                        const uint8_t *src[4])
{
    int steps[4] = {0};
    for (int i = 0; i < desc->nb_components; i++)
        if (desc->comp[i].step > steps[desc->comp[i].plane])
            steps[desc->comp[i].plane] = desc->comp[i].step;
    /* Packed 4:2:2 (YUYV, UYVY, Y210) holds two pixels in two luma steps: a crop on the grid
     * starts at a whole pair. */
    if (!(desc->flags & AV_PIX_FMT_FLAG_PLANAR) && desc->log2_chroma_w)
        steps[0] = desc->comp[0].step;
    for (int p = 0; p < 4 && f->data[p]; p++) {
        int chroma = (p == 1 || p == 2) && (desc->flags & AV_PIX_FMT_FLAG_PLANAR);
        int px = chroma ? x >> desc->log2_chroma_w : x;
        int py = chroma ? y >> desc->log2_chroma_h : y;
        src[p] = f->data[p] + (ptrdiff_t)py * f->linesize[p] + (ptrdiff_t)px * steps[p];
    }
}

/* 8-bit 4:2:0 resized with the bilinear filter: our own resize (resize.h), faster than
 * swscale's C path where the CPU has AVX-512 (4.6x) or AVX2 (1.5x), the same bytes on both;
 * its plain C twin is slower than swscale, which runs elsewhere. The two differ by about 0.03
 * per byte. */
static int own_resize_takes(const tb_reader *r, const AVFrame *f, int cw, int ch, int out_w,
                            int out_h)
{
    return (f->format == AV_PIX_FMT_YUV420P || f->format == AV_PIX_FMT_YUVJ420P) &&
           r->o.scaler == TB_SCALE_BILINEAR && (cw != out_w || ch != out_h) &&
           tbi_resize_takes(cw, ch, out_w, out_h) && tbi_resize_path() != TBI_RESIZE_C;
}

/* The scratch image at least need bytes long. */
static int reserve_scratch(tb_reader *r, size_t need)
{
    if (need <= r->scratch_bytes)
        return 0;
    av_free(r->scratch);
    r->scratch_bytes = 0;
    if (tbi_fault(TBI_FAULT_ALLOC) || !(r->scratch = av_malloc(need)))
        return tbi_err(TB_ENOMEM, "out of memory");
    r->scratch_bytes = need;
    return 0;
}

/* out_h rows of out_w RGB pixels, ls bytes apart in src, into dst (packed), mirrored if flip. */
static void copy_rows(const uint8_t *src, int ls, int out_w, int out_h, int flip, uint8_t *dst)
{
    size_t row_bytes = (size_t)out_w * 3;
    for (int row = 0; row < out_h; row++) {
        const uint8_t *a = src + (size_t)row * ls;
        uint8_t *b = dst + (size_t)row * row_bytes;
        if (!flip) {
            memcpy(b, a, row_bytes);
            continue;
        }
        for (int k = 0; k < out_w; k++) {
            const uint8_t *px = a + (size_t)(out_w - 1 - k) * 3;
            b[3 * k] = px[0];
            b[3 * k + 1] = px[1];
            b[3 * k + 2] = px[2];
        }
    }
}

/* The cw x ch crop of f starting at src, scaled by swscale into dst (out_h x out_w RGB). */
static int sws_convert(tb_reader *r, const struct decoder *d, const AVFrame *f,
                       const uint8_t *const src[4], int cw, int ch, int out_w, int out_h,
                       int flip, uint8_t *dst)
{
    /* A crop at its own size is only converted (chroma upsampled, depth reduced), and the
     * filter still shapes that for some formats (10-bit 4:2:0): bicubic, ffmpeg's default,
     * gives ffmpeg's bytes whatever the resize filter is. */
    int flags = cw == out_w && ch == out_h ? SWS_BICUBIC : sws_flags(r->o.scaler);
    r->sws = sws_getCachedContext(r->sws, cw, ch, f->format, out_w, out_h, AV_PIX_FMT_RGB24,
                                  flags, NULL, NULL, NULL);
    if (!r->sws)
        return tbi_err(TB_ENOMEM, "%s: cannot set up a %dx%d -> %dx%d scaler", d->path, cw, ch,
                       out_w, out_h);
    tbi_sws_set_colors(r->sws, f);
    /* swscale's vector code writes whole blocks, past the end of a row (and of the last row),
     * so it draws into a padded scratch image that is then copied (and flipped) out. */
    int ls = (out_w * 3 + 63) & ~63, rc;
    if ((rc = reserve_scratch(r, (size_t)ls * (out_h + 2) + 64)) < 0)
        return rc;
    uint8_t *dst_planes[4] = {r->scratch, NULL, NULL, NULL};
    int dst_ls[4] = {ls, 0, 0, 0};
    sws_scale(r->sws, src, f->linesize, 0, ch, dst_planes, dst_ls);
    copy_rows(r->scratch, ls, out_w, out_h, flip, dst);
    return 0;
}

/* Crop frame by pointer offsets, scale and convert the crop into dst (out_h x out_w RGB). */
static int convert(tb_reader *r, const struct decoder *d, const AVFrame *f,
                   const struct tb_crop *c, int out_w, int out_h, uint8_t *dst, int64_t abs_no)
{
    const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(f->format);
    int rc = check_frame(d, f, desc, abs_no);
    if (rc < 0)
        return rc;
    struct tb_crop g = on_grid(c, desc->log2_chroma_w, desc->log2_chroma_h);
    const uint8_t *src[4] = {NULL};
    crop_planes(desc, f, g.x, g.y, src);
    if (own_resize_takes(r, f, g.w, g.h, out_w, out_h)) {
        int full = f->color_range == AVCOL_RANGE_UNSPECIFIED
                       ? f->format == AV_PIX_FMT_YUVJ420P
                       : f->color_range == AVCOL_RANGE_JPEG;
        return tbi_resize_420_matrix(&r->resize, src, f->linesize, g.w, g.h, full,
                                     tbi_frame_coefficients(f), out_w, out_h, c->flip, dst, 0);
    }
    return sws_convert(r, d, f, src, g.w, g.h, out_w, out_h, c->flip, dst);
}

/* ---- the decode loop --------------------------------------------------------------------- */

static int is_wanted(const struct want *w, int n, int64_t abs_no)
{
    for (int i = 0; i < n; i++)
        if (w[i].frame == abs_no)
            return 1;
    return 0;
}

/* One call of decode_segment: the segment's decoder, the wants still to come (w[i..n), sorted)
 * and where their frames go (slot k of out at k * frame_bytes). */
struct pass {
    tb_reader *r;
    struct decoder *d;
    const struct segment *s;
    const struct want *w;
    int n, i;
    int retried; /* the one restart from the segment's first frame is spent */
    const struct tb_crop *crop;
    int out_w, out_h;
    uint8_t *out;
    size_t frame_bytes;
    struct tb_clip_stats *stats;
};

/* Whether frame f (the segment's frame no) is damaged: flagged by the decoder, or decoded from a
 * packet that failed before the next keyframe. */
static int is_damaged(const struct decoder *d, const AVFrame *f, int64_t no)
{
#ifdef AV_FRAME_FLAG_CORRUPT
    int corrupt = f->decode_error_flags || (f->flags & AV_FRAME_FLAG_CORRUPT);
#else
    int corrupt = f->decode_error_flags;
#endif
    return corrupt || (d->bad_lo >= 0 && no >= d->bad_lo && (d->bad_key < 0 || no < d->bad_key));
}

/* The wanted frame f into every slot asking for it; ps->i moves past them. Unrefs f. */
static int store_frame(struct pass *ps, AVFrame *f)
{
    const struct want *w = ps->w;
    uint8_t *first = ps->out + (size_t)w[ps->i].slot * ps->frame_bytes;
    int rc = convert(ps->r, ps->d, f, ps->crop, ps->out_w, ps->out_h, first, w[ps->i].frame);
    av_frame_unref(f);
    if (rc < 0)
        return rc;
    for (ps->i++; ps->i < ps->n && w[ps->i].frame == w[ps->i - 1].frame; ps->i++)
        memcpy(ps->out + (size_t)w[ps->i].slot * ps->frame_bytes, first, ps->frame_bytes);
    return 0;
}

/* The frame the decoder gave (in r->frame) while decoding toward the segment's frame want:
 * 1 once it was that frame (stored), 0 to decode on, or an error. */
static int take_frame(struct pass *ps, int64_t want)
{
    struct decoder *d = ps->d;
    const struct segment *s = ps->s;
    AVFrame *f = ps->r->frame;
    int64_t ts = f->best_effort_timestamp;
    int64_t no = s->sequential ? d->next_out : frame_of(d, s, ts);
    int rc = 0;
    ps->stats->n_decoded++;
    if (no < 0 || no >= s->n_frames) {
        av_frame_unref(f);
        /* A frame the index does not know: after a seek some decoders name frames differently;
         * from the very start they cannot. */
        if (!ps->retried++ && (rc = seek_to(d, s, 0, ps->stats)) == 0)
            return 0;
        return rc < 0 ? rc : tbi_err(TB_EDECODE, "%s: decoded a frame (timestamp %" PRId64
                                     ") that is not in the index", d->path, ts);
    }
    d->next_out = no + 1;
    if (no < want) {
        av_frame_unref(f);
        return 0;
    }
    if (no > want) {
        av_frame_unref(f);
        /* The seek landed past the frame: decode from the very start once. */
        if (ps->retried++ || (rc = seek_to(d, s, 0, ps->stats)) < 0)
            return rc < 0 ? rc : tbi_err(TB_EDECODE, "%s: frame %" PRId64 " never came out of "
                                         "the decoder", d->path, ps->w[ps->i].frame);
        return 0;
    }
    if (is_damaged(d, f, no)) {
        av_frame_unref(f);
        return tbi_err(TB_EDECODE, "%s: frame %" PRId64 " is damaged (it depends on data that "
                       "failed to decode)", d->path, ps->w[ps->i].frame);
    }
    rc = store_frame(ps, f);
    return rc < 0 ? rc : 1;
}

/* The decoder wants input: the next packet of the stream goes in, unless nothing refers to it
 * and no want asks for it. Marks where decoding failed (from bad_lo to the next keyframe). */
static int feed_packet(struct pass *ps, int64_t want)
{
    struct decoder *d = ps->d;
    const struct segment *s = ps->s;
    int ret = av_read_frame(d->in.fmt, ps->r->pkt);
    if (ret == AVERROR_EOF) {
        /* Drain: the frames still inside come out, then AVERROR_EOF. */
        avcodec_send_packet(d->in.dec, NULL);
        return 0;
    }
    if (ret < 0) {
        d->next_out = -1;
        return tbi_av_err(ret, TB_EDECODE, "%s: read error before frame %" PRId64, d->path,
                          ps->w[ps->i].frame);
    }
    AVPacket *pkt = ps->r->pkt;
    if (pkt->stream_index != d->in.stream_index) {
        av_packet_unref(pkt);
        return 0;
    }
    int64_t pno = s->sequential ? -1 : frame_of(d, s, pkt->pts);
    if (d->nal_len && pno >= 0 && pno != want &&
        !is_wanted(ps->w + ps->i, ps->n - ps->i, pno + s->first) &&
        tbi_h264_disposable(pkt->data, pkt->size, d->nal_len)) {
        /* Nothing refers to this frame and nobody wants it. */
        if (pno > d->dropped_hi)
            d->dropped_hi = pno;
        ps->stats->n_skipped++;
        av_packet_unref(pkt);
        return 0;
    }
    int key_pkt = !!(pkt->flags & AV_PKT_FLAG_KEY);
    ret = avcodec_send_packet(d->in.dec, pkt);
    av_packet_unref(pkt);
    if (ret == AVERROR(ENOMEM))
        return tbi_err(TB_ENOMEM, "%s: out of memory", d->path);
    if (ret < 0 && d->bad_lo < 0) {
        d->bad_lo = pno >= 0 ? pno : d->next_out;
        d->bad_key = -1;
    } else if (ret >= 0 && key_pkt && d->bad_lo >= 0 && pno > d->bad_lo && d->bad_key < 0) {
        d->bad_key = pno;
    }
    return 0;
}

/* Decode until the segment's frame want (the want w[i]) comes out and is stored. */
static int decode_until(struct pass *ps, int64_t want)
{
    struct decoder *d = ps->d;
    for (;;) {
        int ret = avcodec_receive_frame(d->in.dec, ps->r->frame), rc;
        if (ret == 0) {
            if ((rc = take_frame(ps, want)) != 0)
                return rc < 0 ? rc : 0;
            continue;
        }
        if (ret == AVERROR_EOF) {
            d->eof = 1;
            d->next_out = -1;
            return tbi_err(TB_EDECODE, "%s: frame %" PRId64 " cannot be decoded: the stream "
                           "ends first", d->path, ps->w[ps->i].frame);
        }
        if (ret != AVERROR(EAGAIN)) {
            d->next_out = -1;
            return tbi_av_err(ret, TB_EDECODE, "%s: decoding failed before frame %" PRId64,
                              d->path, ps->w[ps->i].frame);
        }
        if ((rc = feed_packet(ps, want)) < 0)
            return rc;
    }
}

/* Produce wants[0..n) (sorted, all in segment seg) into out. */
static int decode_segment(tb_reader *r, struct video *v, int seg, const struct want *w, int n,
                        const struct tb_crop *crop, int out_w, int out_h, uint8_t *out,
                        struct tb_clip_stats *stats)
{
    struct pass ps = {.r = r, .s = &v->segs[seg], .w = w, .n = n, .crop = crop, .out_w = out_w,
                      .out_h = out_h, .out = out, .frame_bytes = (size_t)out_w * out_h * 3,
                      .stats = stats};
    int rc = open_decoder(r, v, seg, &ps.d, stats);
    if (rc < 0)
        return rc;
    while (ps.i < n) {
        const struct decoder *d = ps.d;
        int64_t want = w[ps.i].frame - ps.s->first, key = key_before(ps.s, want);
        /* Seek unless the decoder will reach `want` by going on: positioned before it, no
         * keyframe in between to jump to, and not past a frame it skipped. */
        if (d->next_out < 0 || d->eof || d->next_out > want || key > d->next_out ||
            want <= d->dropped_hi) {
            if ((rc = seek_to(ps.d, ps.s, key, stats)) < 0)
                return rc;
        }
        if ((rc = decode_until(&ps, want)) < 0)
            return rc;
    }
    return 0;
}

/* After a failure the decoder's position is unknown: the next clip seeks. */
static int read_segment(tb_reader *r, struct video *v, int seg, const struct want *w, int n,
                        const struct tb_crop *crop, int out_w, int out_h, uint8_t *out,
                        struct tb_clip_stats *stats)
{
    int rc = decode_segment(r, v, seg, w, n, crop, out_w, out_h, out, stats);
    if (rc < 0)
        for (int i = 0; i < r->n_decs; i++)
            if (r->decs[i].v == v && r->decs[i].seg == seg)
                r->decs[i].next_out = -1;
    return rc;
}

static int cmp_want(const void *a, const void *b)
{
    const struct want *x = a, *y = b;
    if (x->frame != y->frame)
        return (x->frame > y->frame) - (x->frame < y->frame);
    return x->slot - y->slot;
}

/* Segment holding absolute frame f (segments are contiguous and ascending). */
static int segment_of(const struct video *v, int64_t f)
{
    int lo = 0, hi = v->n_segs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (v->segs[mid].first <= f)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int tb_reader_read(tb_reader *r, const char *video, const int64_t *frames, int n,
                   const struct tb_crop_spec *spec, tb_rng *rng, int out_w, int out_h,
                   uint8_t *out, struct tb_clip_stats *stats)
{
    struct tb_clip_stats scratch;
    struct video *v;
    int rc;
    if (!stats)
        stats = &scratch;
    memset(stats, 0, sizeof(*stats));
    if (n <= 0 || out_w <= 0 || out_h <= 0 || out_w > 16384 || out_h > 16384)
        return tbi_err(TB_EINVAL, "%s: bad clip request (%d frames, %dx%d)", video, n, out_w,
                       out_h);
    if ((rc = get_video(r, video, &v)) < 0)
        return rc;
    if ((rc = tb_crop_draw(spec, v->info.width, v->info.height, out_w, out_h, rng,
                           &stats->crop)) < 0)
        return tbi_err_prefix(rc, "%s", video);
    stats->crop = on_grid(&stats->crop, v->log2_cw, v->log2_ch); /* what convert() cuts */
    if (n > r->cap_wants) {
        struct want *g = tbi_realloc(r->wants, sizeof(*g) * (size_t)n);
        if (!g)
            return tbi_err(TB_ENOMEM, "out of memory");
        r->wants = g;
        r->cap_wants = n;
    }
    for (int i = 0; i < n; i++) {
        if (frames[i] < 0 || frames[i] >= v->info.n_frames)
            return tbi_err(TB_ERANGE, "%s: frame %" PRId64 " is %s (the video has %" PRId64
                           " frames)", video, frames[i], frames[i] < 0 ? "before the start" :
                           "past the end", v->info.n_frames);
        r->wants[i] = (struct want){frames[i], i};
    }
    qsort(r->wants, (size_t)n, sizeof(*r->wants), cmp_want);
    for (int i = 0; i < n;) {
        int seg = segment_of(v, r->wants[i].frame), j = i;
        int64_t end = v->segs[seg].first + v->segs[seg].n_frames;
        while (j < n && r->wants[j].frame < end)
            j++;
        if ((rc = read_segment(r, v, seg, r->wants + i, j - i, &stats->crop, out_w, out_h, out,
                               stats)) < 0)
            return rc;
        i = j;
    }
    return 0;
}

int tb_reader_info(tb_reader *r, const char *video, struct tb_video_info *info)
{
    struct video *v;
    int rc = get_video(r, video, &v);
    if (rc < 0)
        return rc;
    *info = v->info;
    return 0;
}

int tb_reader_open(tb_reader **out, const struct tb_reader_opts *opts)
{
    tb_reader *r = tbi_calloc(1, sizeof(*r));
    *out = NULL;
    if (!r)
        return tbi_err(TB_ENOMEM, "out of memory");
    if (opts)
        r->o = *opts;
    if (r->o.n_cached <= 0)
        r->o.n_cached = 4;
    if (r->o.n_threads <= 0)
        r->o.n_threads = 1;
    r->n_decs = r->o.n_cached;
    r->decs = tbi_calloc((size_t)r->n_decs, sizeof(*r->decs));
    r->pkt = av_packet_alloc();
    r->frame = av_frame_alloc();
    if (!r->decs || !r->pkt || !r->frame) {
        tb_reader_close(&r);
        return tbi_err(TB_ENOMEM, "out of memory");
    }
    *out = r;
    return 0;
}

void tb_reader_close(tb_reader **pr)
{
    tb_reader *r = pr ? *pr : NULL;
    if (!r)
        return;
    for (int i = 0; r->decs && i < r->n_decs; i++)
        tbi_input_close(&r->decs[i].in);
    for (int i = 0; i < N_VIDEOS_CACHED; i++)
        video_free(r->videos[i]);
    free(r->decs);
    free(r->wants);
    av_packet_free(&r->pkt);
    av_frame_free(&r->frame);
    sws_freeContext(r->sws);
    tbi_resize_free(&r->resize);
    av_free(r->scratch);
    free(r);
    *pr = NULL;
}
