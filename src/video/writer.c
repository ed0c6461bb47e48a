/* src/video/writer.c - H.264 (libx264) in MP4, written under a temporary name and renamed when
 * complete. Records which frames came out as keyframes, by presentation number, for the index.
 * Used by prep for chunks and by synth for its videos. Tests: tests/test_prep.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libavutil/opt.h>

#include "video/av.h"
#include "video/internal.h"

struct tbi_writer {
    AVFormatContext *oc;
    AVCodecContext *enc;
    AVStream *st;
    AVPacket *pkt;
    int64_t n_sent, n_packets;
    int64_t *keyframes;
    int n_keyframes, cap_keyframes;
    int created;            /* tmp exists on disk and is ours to delete */
    char path[4096], tmp[4100];
};

static int note_keyframe(struct tbi_writer *w, int64_t pts)
{
    if (w->n_keyframes == w->cap_keyframes) {
        int cap = w->cap_keyframes ? 2 * w->cap_keyframes : 16;
        int64_t *grown = tbi_realloc(w->keyframes, sizeof(*grown) * (size_t)cap);
        if (!grown)
            return tbi_err(TB_ENOMEM, "%s: out of memory", w->path);
        w->keyframes = grown;
        w->cap_keyframes = cap;
    }
    w->keyframes[w->n_keyframes++] = pts;
    return 0;
}

/* Move every packet the encoder has ready into the file. */
static int drain(struct tbi_writer *w)
{
    for (;;) {
        int ret = avcodec_receive_packet(w->enc, w->pkt);
        if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF)
            return 0;
        if (ret < 0)
            return tbi_av_err(ret, TB_EENCODE, "%s: encoder failed", w->path);
        w->n_packets++;
        if (w->pkt->flags & AV_PKT_FLAG_KEY) {
            /* The encoder's time base is one frame, so pts is the frame number. */
            if ((ret = note_keyframe(w, w->pkt->pts)) < 0) {
                av_packet_unref(w->pkt);
                return ret;
            }
        }
        av_packet_rescale_ts(w->pkt, w->enc->time_base, w->st->time_base);
        w->pkt->stream_index = w->st->index;
        ret = av_interleaved_write_frame(w->oc, w->pkt);
        if (ret < 0)
            return tbi_av_err(ret, TB_EIO, "%s: cannot write", w->tmp);
    }
}

/* The encoder's settings that need no x264 option: size, rate, threads, colour, GOP. */
static void set_encoder(struct tbi_writer *w, const struct tbi_writer_opts *o)
{
    w->enc->width = o->width;
    w->enc->height = o->height;
    w->enc->pix_fmt = AV_PIX_FMT_YUV420P;
    w->enc->time_base = (AVRational){o->fps_den, o->fps_num};
    w->enc->framerate = (AVRational){o->fps_num, o->fps_den};
    w->enc->thread_count = o->n_threads;
    w->enc->color_range = AVCOL_RANGE_MPEG;
    if (o->colorspace > 0)
        w->enc->colorspace = (enum AVColorSpace)o->colorspace;
    if (o->primaries > 0)
        w->enc->color_primaries = (enum AVColorPrimaries)o->primaries;
    if (o->trc > 0)
        w->enc->color_trc = (enum AVColorTransferCharacteristic)o->trc;
    if (o->gop > 0)
        w->enc->gop_size = o->gop;
    if (w->oc->oformat->flags & AVFMT_GLOBALHEADER)
        w->enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
}

/* libx264's preset, crf, tune and B-frames. 0 or TB_EINVAL naming path. */
static int set_x264(struct tbi_writer *w, const struct tbi_writer_opts *o, const char *path)
{
    char num[32];
    snprintf(num, sizeof(num), "%d", o->crf);
    if (av_opt_set(w->enc->priv_data, "preset", o->preset, 0) < 0 ||
        av_opt_set(w->enc->priv_data, "crf", num, 0) < 0 ||
        (o->tune && o->tune[0] && strcmp(o->tune, "none") &&
         av_opt_set(w->enc->priv_data, "tune", o->tune, 0) < 0))
        return tbi_err(TB_EINVAL, "%s: bad x264 preset '%s' or crf %d", path, o->preset, o->crf);
    /* libx264 applies this after the preset's and tune's own B-frame counts. */
    if (o->no_bframes)
        w->enc->max_b_frames = 0;
    return 0;
}

/* The temporary file, created (then ours to delete) with the MP4 header written. */
static int create_file(struct tbi_writer *w)
{
    AVDictionary *mux_opts = NULL;
    int ret = tbi_fault(TBI_FAULT_OPEN) ? AVERROR(EMFILE)
                                        : avio_open(&w->oc->pb, w->tmp, AVIO_FLAG_WRITE);
    if (ret < 0)
        return tbi_av_err(ret, TB_EIO, "%s: cannot create", w->tmp);
    w->created = 1;
    ret = avformat_write_header(w->oc, &mux_opts);
    av_dict_free(&mux_opts);
    if (ret < 0)
        return tbi_av_err(ret, TB_EIO, "%s: cannot write header", w->tmp);
    return 0;
}

int tbi_writer_open(struct tbi_writer **out, const char *path, const struct tbi_writer_opts *o)
{
    const AVCodec *codec = avcodec_find_encoder_by_name("libx264");
    struct tbi_writer *w;
    int ret, rc;

    *out = NULL;
    tbi_av_init();
    if (!codec)
        return tbi_err(TB_EUNSUPPORTED, "this FFmpeg has no libx264 encoder");
    if (!(w = tbi_calloc(1, sizeof(*w))))
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    if ((rc = tbi_fmt(w->path, sizeof(w->path), "%s", path)) < 0 ||
        (rc = tbi_fmt(w->tmp, sizeof(w->tmp), "%s.part", path)) < 0)
        goto fail;
    rc = TB_ENOMEM;
    if (!(w->pkt = av_packet_alloc()))
        goto fail_msg;
    if ((ret = avformat_alloc_output_context2(&w->oc, NULL, "mp4", w->tmp)) < 0) {
        rc = tbi_av_err(ret, TB_EENCODE, "%s: cannot set up the MP4 muxer", path);
        goto fail;
    }
    if (!(w->st = avformat_new_stream(w->oc, NULL)) || !(w->enc = avcodec_alloc_context3(codec)))
        goto fail_msg;
    set_encoder(w, o);
    if ((rc = set_x264(w, o, path)) < 0)
        goto fail;
    if ((ret = avcodec_open2(w->enc, codec, NULL)) < 0) {
        rc = tbi_av_err(ret, TB_EENCODE, "%s: cannot open libx264 (preset '%s', %dx%d)", path,
                        o->preset, o->width, o->height);
        goto fail;
    }
    if ((ret = avcodec_parameters_from_context(w->st->codecpar, w->enc)) < 0)
        goto fail_msg;
    w->st->time_base = w->enc->time_base;
    w->st->avg_frame_rate = w->enc->framerate;
    if ((rc = create_file(w)) < 0)
        goto fail;
    *out = w;
    return 0;

fail_msg:
    rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
fail:
    tbi_writer_abort(&w);
    return rc;
}

int tbi_writer_write(struct tbi_writer *w, AVFrame *frame)
{
    frame->pts = w->n_sent;
    int ret = avcodec_send_frame(w->enc, frame);
    if (ret < 0)
        return tbi_av_err(ret, TB_EENCODE, "%s: encoder refused frame %lld", w->path,
                          (long long)w->n_sent);
    w->n_sent++;
    return drain(w);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int tbi_writer_finish(struct tbi_writer **pw, int64_t *n_frames, int64_t **keyframes,
                      int *n_keyframes, int64_t *bytes)
{
    struct tbi_writer *w = *pw;
    struct stat st;
    int ret, rc;

    *keyframes = NULL;
    ret = avcodec_send_frame(w->enc, NULL);
    if (ret < 0 && ret != AVERROR_EOF) {
        rc = tbi_av_err(ret, TB_EENCODE, "%s: cannot flush encoder", w->path);
        goto fail;
    }
    if ((rc = drain(w)) < 0)
        goto fail;
    if (w->n_packets != w->n_sent) {
        rc = tbi_err(TB_EENCODE, "%s: sent %lld frames but the encoder returned %lld", w->path,
                     (long long)w->n_sent, (long long)w->n_packets);
        goto fail;
    }
    if ((ret = av_write_trailer(w->oc)) < 0) {
        rc = tbi_av_err(ret, TB_EIO, "%s: cannot finish", w->tmp);
        goto fail;
    }
    if ((ret = avio_closep(&w->oc->pb)) < 0) {
        rc = tbi_av_err(ret, TB_EIO, "%s: cannot close", w->tmp);
        goto fail;
    }
    if (stat(w->tmp, &st) != 0 || rename(w->tmp, w->path) != 0) {
        rc = tbi_err(TB_EIO, "%s: cannot rename into place: %s", w->path, strerror(errno));
        goto fail;
    }
    w->created = 0;
    qsort(w->keyframes, (size_t)w->n_keyframes, sizeof(*w->keyframes), cmp_i64);
    *n_frames = w->n_sent;
    *keyframes = w->keyframes;
    *n_keyframes = w->n_keyframes;
    *bytes = (int64_t)st.st_size;
    w->keyframes = NULL;
    tbi_writer_abort(pw);
    return 0;

fail:
    tbi_writer_abort(pw);
    return rc;
}

void tbi_writer_abort(struct tbi_writer **pw)
{
    struct tbi_writer *w = pw ? *pw : NULL;
    if (!w)
        return;
    if (w->oc) {
        avio_closep(&w->oc->pb);
        avformat_free_context(w->oc);
    }
    if (w->created)
        unlink(w->tmp);
    avcodec_free_context(&w->enc);
    av_packet_free(&w->pkt);
    free(w->keyframes);
    free(w);
    *pw = NULL;
}
