/* src/video/av.c - FFmpeg plumbing shared by the video module (see av.h).
 * Tests: tests/test_prep.c and tests/test_cli.c exercise its error paths with bad files. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <pthread.h>

#include <libavutil/display.h>
#include <libswscale/swscale.h>

#include "video/av.h"

static void av_log_to_tb(void *avcl, int level, const char *fmt, va_list vl)
{
    char line[1024];
    int print_prefix = 1;
    if (level > AV_LOG_WARNING)
        return;
    av_log_format_line2(avcl, level, fmt, vl, line, sizeof(line), &print_prefix);
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] == '\n')
        line[--n] = '\0';
    if (n > 0)
        tbi_log(TB_LOG_DEBUG, "ffmpeg: %s", line);
}

static void av_init_once(void)
{
    av_log_set_callback(av_log_to_tb);
}

void tbi_av_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, av_init_once);
}

int tbi_av_err(int averr, int fallback, const char *fmt, ...)
{
    char what[512], text[AV_ERROR_MAX_STRING_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    av_strerror(averr, text, sizeof(text));
    int code = fallback;
    if (averr == AVERROR(ENOMEM))
        code = TB_ENOMEM;
    else if (averr == AVERROR(ENOENT))
        code = TB_ENOENT;
    else if (averr == AVERROR(EIO) || averr == AVERROR(EACCES) || averr == AVERROR(EISDIR) ||
             averr == AVERROR(EMFILE) || averr == AVERROR(ENFILE) || averr == AVERROR(ENOSPC))
        code = TB_EIO;
    return tbi_err(code, "%s: %s", what, text);
}

static int stream_rotation(const AVStream *st)
{
    const int32_t *m = (const int32_t *)av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX,
                                                                 NULL);
    if (!m)
        return 0;
    /* av_display_rotation_get gives the anticlockwise angle the matrix applies; the frame
     * must be turned by its opposite to be shown upright (as ffmpeg's autorotate does). */
    double theta = -round(av_display_rotation_get(m));
    if (isnan(theta))
        return 0;
    theta -= 360.0 * floor(theta / 360.0 + 0.9 / 360.0);
    int deg = (int)lround(theta / 90.0) * 90 % 360;
    return deg < 0 ? deg + 360 : deg;
}

int tbi_source_check(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return errno == ENOENT || errno == ENOTDIR
                   ? tbi_err(TB_ENOENT, "%s: no such file or directory", path)
                   : tbi_err(TB_EIO, "%s: %s", path, strerror(errno));
    const char *kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a file";
    if (!S_ISREG(st.st_mode))
        return tbi_err(TB_EINVAL, "%s: not a regular file (%s)", path, kind);
    if (st.st_size == 0)
        return tbi_err(TB_EDECODE, "%s: empty file (0 bytes)", path);
    return 0;
}

/* "no video stream (only audio and a cover picture)": what the file holds instead. */
static int no_video(const AVFormatContext *fmt, const char *path)
{
    enum { AUDIO, PICTURE, SUBTITLES, UNDECODABLE, DATA, N_KINDS };
    static const char *const kinds[N_KINDS] = {"audio", "a cover picture", "subtitles",
                                               "video without a decoder", "data"};
    int seen[N_KINDS] = {0}, n = 0;
    for (unsigned i = 0; i < fmt->nb_streams; i++) {
        const AVStream *st = fmt->streams[i];
        enum AVMediaType t = st->codecpar->codec_type;
        int k = t == AVMEDIA_TYPE_AUDIO      ? AUDIO
                : t == AVMEDIA_TYPE_SUBTITLE ? SUBTITLES
                : t != AVMEDIA_TYPE_VIDEO    ? DATA
                : st->disposition & AV_DISPOSITION_ATTACHED_PIC ? PICTURE
                                                                : UNDECODABLE;
        n += !seen[k];
        seen[k] = 1;
    }
    char what[160] = "no streams at all";
    for (int k = 0, i = 0; k < N_KINDS; k++) {
        if (!seen[k])
            continue;
        size_t len = i ? strlen(what) : 0;
        snprintf(what + len, sizeof(what) - len, "%s%s",
                 i == 0 ? "only " : i == n - 1 ? " and " : ", ", kinds[k]);
        i++;
    }
    return tbi_err(TB_EDECODE, "%s: no video stream (%s)", path, what);
}

/* The video stream to read: FFmpeg's best, unless that is a still picture attached to the
 * file (cover art, AV_DISPOSITION_ATTACHED_PIC), which is not video: then another video
 * stream with a decoder, or none (-1). */
static int pick_video(AVFormatContext *fmt, const AVCodec **codec)
{
    int best = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, codec, 0);
    if (best < 0 || !(fmt->streams[best]->disposition & AV_DISPOSITION_ATTACHED_PIC))
        return best;
    for (unsigned i = 0; i < fmt->nb_streams; i++) {
        const AVStream *st = fmt->streams[i];
        if (st->codecpar->codec_type == AVMEDIA_TYPE_VIDEO &&
            !(st->disposition & AV_DISPOSITION_ATTACHED_PIC) &&
            (*codec = avcodec_find_decoder(st->codecpar->codec_id)))
            return (int)i;
    }
    *codec = NULL;
    return AVERROR_STREAM_NOT_FOUND;
}

/* The demuxer half of opening: path's best video stream, the others discarded. */
static int input_demux(struct tbi_input *in, const char *path, int probe,
                       const AVCodec **codec)
{
    int ret;

    memset(in, 0, sizeof(*in));
    in->stream_index = -1;
    tbi_av_init();
    const AVInputFormat *mp4 = probe ? NULL : av_find_input_format("mp4");
    if (!probe) {
        /* MP4's packets are whole frames with their timestamps: the H.264 header parser the
         * demuxer would run on each packet (allocating as it goes) tells the reader nothing. */
        if (!(in->fmt = avformat_alloc_context()))
            return tbi_err(TB_ENOMEM, "%s: out of memory", path);
        in->fmt->flags |= AVFMT_FLAG_NOPARSE | AVFMT_FLAG_NOFILLIN;
    }
    /* Plain files: what the path is, in the user's terms, before FFmpeg says "Invalid data"
     * about an empty file or waits for a FIFO's writer. A URL (http:, file:, ...) is FFmpeg's
     * to open as it is. */
    size_t scheme = strspn(path, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                 "0123456789+-.");
    if (probe && !(scheme > 1 && path[scheme] == ':') && (ret = tbi_source_check(path)) < 0)
        return ret;
    ret = tbi_fault(TBI_FAULT_OPEN) ? AVERROR(EMFILE)
                                    : avformat_open_input(&in->fmt, path, mp4, NULL);
    if (ret < 0) {
        avformat_free_context(in->fmt); /* a failed open has freed it already (NULL) */
        in->fmt = NULL;
        if (ret == AVERROR_INVALIDDATA)
            return tbi_av_err(ret, TB_EDECODE, "%s: cannot open: not a video file FFmpeg "
                              "knows, or damaged at its start", path);
        return tbi_av_err(ret, TB_EDECODE, "%s: cannot open", path);
    }
    if (probe && (ret = avformat_find_stream_info(in->fmt, NULL)) < 0) {
        tbi_input_close(in);
        return tbi_av_err(ret, TB_EDECODE, "%s: cannot read stream information", path);
    }
    ret = pick_video(in->fmt, codec);
    if (ret < 0) {
        int rc = ret == AVERROR_STREAM_NOT_FOUND
                     ? no_video(in->fmt, path)
                     : tbi_av_err(ret, TB_EDECODE, "%s: no decodable video stream", path);
        tbi_input_close(in);
        return rc;
    }
    in->stream_index = ret;
    in->st = in->fmt->streams[ret];
    /* Skip every other stream at the demuxer so audio packets are not even read out. */
    for (unsigned i = 0; i < in->fmt->nb_streams; i++)
        if ((int)i != ret)
            in->fmt->streams[i]->discard = AVDISCARD_ALL;
    in->rotation = stream_rotation(in->st);
    return 0;
}

/* The decoder half: codec opened for in's stream. On failure in is closed. */
static int input_decoder(struct tbi_input *in, const char *path, const AVCodec *codec,
                         int n_threads)
{
    int ret;
    if (!(in->dec = avcodec_alloc_context3(codec))) {
        tbi_input_close(in);
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    }
    if ((ret = avcodec_parameters_to_context(in->dec, in->st->codecpar)) < 0) {
        tbi_input_close(in);
        return tbi_av_err(ret, TB_EDECODE, "%s: bad codec parameters", path);
    }
    in->dec->thread_count = n_threads;
    in->dec->pkt_timebase = in->st->time_base;
    if ((ret = avcodec_open2(in->dec, codec, NULL)) < 0) {
        tbi_input_close(in);
        return tbi_av_err(ret, TB_EDECODE, "%s: cannot open %s decoder", path, codec->name);
    }
    return 0;
}

static int input_open(struct tbi_input *in, const char *path, int n_threads, int probe)
{
    const AVCodec *codec = NULL;
    int rc = input_demux(in, path, probe, &codec);
    return rc < 0 ? rc : input_decoder(in, path, codec, n_threads);
}

int tbi_input_open(struct tbi_input *in, const char *path, int n_threads)
{
    return input_open(in, path, n_threads, 1);
}

int tbi_input_open_chunk(struct tbi_input *in, const char *path, int n_threads)
{
    return input_open(in, path, n_threads, 0);
}

/* Whether dec, opened for another chunk, decodes par's stream as a new decoder would: same
 * codec, size, time base and header (SPS and PPS). */
static int same_stream(const AVCodecContext *dec, const AVStream *st)
{
    const AVCodecParameters *par = st->codecpar;
    return dec->codec_id == par->codec_id && dec->width == par->width &&
           dec->height == par->height && !av_cmp_q(dec->pkt_timebase, st->time_base) &&
           dec->extradata_size == par->extradata_size &&
           (!par->extradata_size || !memcmp(dec->extradata, par->extradata,
                                            (size_t)par->extradata_size));
}

int tbi_input_switch_chunk(struct tbi_input *in, const char *path, int n_threads)
{
    AVCodecContext *dec = in->dec;
    const AVCodec *codec = NULL;
    in->dec = NULL;
    tbi_input_close(in);
    int rc = input_demux(in, path, 0, &codec);
    if (rc < 0) {
        avcodec_free_context(&dec);
        return rc;
    }
    if (!dec || dec->thread_count != n_threads || !same_stream(dec, in->st)) {
        avcodec_free_context(&dec);
        return input_decoder(in, path, codec, n_threads);
    }
    /* As after a seek: nothing of the last chunk is left in it. */
    avcodec_flush_buffers(dec);
    in->dec = dec;
    return 0;
}

void tbi_input_close(struct tbi_input *in)
{
    avcodec_free_context(&in->dec);
    avformat_close_input(&in->fmt);
    in->st = NULL;
    in->stream_index = -1;
}

int tbi_input_next_frame(struct tbi_input *in, AVPacket *pkt, AVFrame *frame, int64_t *n_bad,
                         const char *path)
{
    for (;;) {
        int ret = avcodec_receive_frame(in->dec, frame);
        if (ret == 0)
            return 0;
        if (ret == AVERROR_EOF)
            return TB_EOF;
        if (ret != AVERROR(EAGAIN)) {
            /* A broken frame: count it and keep going, as the ffmpeg tool does. */
            (*n_bad)++;
            continue;
        }
        if (in->flushed)
            return TB_EOF; /* drained, and the decoder still asks for input: nothing more */
        ret = av_read_frame(in->fmt, pkt);
        if (ret == AVERROR_EOF) {
            /* With frame threads a packet's decode error surfaces a few calls later, here
             * for the last packets: it is one more broken packet, as without threads, and
             * the frames still queued come out of the receive calls that follow. */
            ret = avcodec_send_packet(in->dec, NULL);
            in->flushed = 1;
            if (ret == AVERROR(ENOMEM))
                return tbi_err(TB_ENOMEM, "%s: out of memory while decoding", path);
            if (ret < 0 && ret != AVERROR_EOF)
                (*n_bad)++;
            continue;
        }
        if (ret < 0)
            return tbi_av_err(ret, TB_EDECODE, "%s: read error", path);
        if (pkt->stream_index != in->stream_index) {
            av_packet_unref(pkt);
            continue;
        }
        ret = avcodec_send_packet(in->dec, pkt);
        av_packet_unref(pkt);
        if (ret == AVERROR(EAGAIN))
            TB_ASSERT(!"decoder refused input while holding no output");
        if (ret == AVERROR(ENOMEM))
            return tbi_err(TB_ENOMEM, "%s: out of memory while decoding", path);
        if (ret < 0)
            (*n_bad)++;
    }
}

int64_t tbi_frame_duration(const struct tbi_input *in, const AVFrame *f)
{
#if LIBAVUTIL_VERSION_MAJOR >= 58
    int64_t d = f->duration;
#else
    int64_t d = f->pkt_duration;
#endif
    if (d > 0)
        return d;
    AVRational rate = in->st->avg_frame_rate.num ? in->st->avg_frame_rate
                                                 : in->st->r_frame_rate;
    if (rate.num > 0 && rate.den > 0)
        return av_rescale_q(1, av_inv_q(rate), in->st->time_base);
    return 0;
}

/* s as one shell word: as it is when it holds only characters no shell treats specially,
 * else in single quotes. */
static void shell_word(char *buf, size_t size, const char *s)
{
    if (s[0] && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                          "_@%+=:,./-") == strlen(s)) {
        snprintf(buf, size, "%s", s);
        return;
    }
    size_t n = 0;
    if (size < 3) {
        buf[0] = '\0';
        return;
    }
    buf[n++] = '\'';
    for (const char *p = s; *p && n + 6 < size; p++) {
        if (*p == '\'') {
            memcpy(buf + n, "'\\''", 4);
            n += 4;
        } else {
            buf[n++] = *p;
        }
    }
    buf[n++] = '\'';
    buf[n] = '\0';
}

int tbi_check_truncation(const struct tbi_input *in, int64_t first_ts, int64_t end_ts,
                         int64_t n_frames, const char *path, double *declared_s,
                         double *decoded_s)
{
    const AVStream *st = in->st;
    const AVFormatContext *fmt = in->fmt;
    double declared = 0, d;
    /* The longer of the stream's duration (else the container's) and the frame count at the
     * average rate: some demuxers (AVI without its index) shrink the durations to what they
     * found, but the header still counts every frame. */
    if (st->duration != AV_NOPTS_VALUE && st->duration > 0)
        declared = (double)st->duration * av_q2d(st->time_base);
    else if (fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0)
        /* The container's duration can include a start offset; it is a fallback only. */
        declared = (double)fmt->duration / AV_TIME_BASE -
                   (fmt->start_time != AV_NOPTS_VALUE ? (double)fmt->start_time / AV_TIME_BASE
                                                      : 0);
    if (st->nb_frames > 0 && st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0 &&
        (d = (double)st->nb_frames / av_q2d(st->avg_frame_rate)) > declared)
        declared = d;
    double got = (double)(end_ts - first_ts) * av_q2d(st->time_base);
    if (declared_s)
        *declared_s = declared;
    if (decoded_s)
        *decoded_s = got;
    double slack = declared * 0.05 > 1.0 ? declared * 0.05 : 1.0;
    if (!(declared > 0 && got + slack < declared))
        return 0;
    char frames[64] = "", src[1100], dst[300], dst_raw[280];
    if (st->nb_frames > 0)
        snprintf(frames, sizeof(frames), " (%lld frames)", (long long)st->nb_frames);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    int stem_len = dot && dot != base ? (int)(dot - base) : (int)strlen(base);
    snprintf(dst_raw, sizeof(dst_raw), "fixed/%.*s.mp4", stem_len > 256 ? 256 : stem_len, base);
    shell_word(src, sizeof(src), path);
    shell_word(dst, sizeof(dst), dst_raw);
    return tbi_err(TB_EDECODE, "%s: truncated or corrupt: the container says %.2f s%s but only "
                   "%.2f s (%lld frames) decode. If a copy or download cut it short, fetch it "
                   "again; to use the part that decodes, re-encode it and prep the result: "
                   "mkdir -p fixed && ffmpeg -i %s -c:v libx264 -crf 18 %s", path, declared,
                   frames, got, (long long)n_frames, src, dst);
}

const int *tbi_frame_coefficients(const AVFrame *frame)
{
    int cs = frame->colorspace;
    if (cs < 1 || cs > 10 || cs == AVCOL_SPC_YCGCO) /* as vf_scale's parse_yuv_type */
        cs = AVCOL_SPC_BT470BG;
    return sws_getCoefficients(cs);
}

void tbi_sws_set_colors(struct SwsContext *sws, const AVFrame *frame)
{
    int *inv, *tab, src_full, dst_full, bri, con, sat;
    if (sws_getColorspaceDetails(sws, &inv, &src_full, &tab, &dst_full, &bri, &con, &sat) < 0)
        return;
    const int *m = tbi_frame_coefficients(frame);
    int full = frame->color_range == AVCOL_RANGE_UNSPECIFIED
                   ? src_full
                   : frame->color_range == AVCOL_RANGE_JPEG;
    /* Setting them again rebuilds swscale's tables (a free and an allocation per frame). */
    if (full != src_full || memcmp(inv, m, 4 * sizeof(*m)) || memcmp(tab, m, 4 * sizeof(*m)))
        sws_setColorspaceDetails(sws, m, full, m, dst_full, bri, con, sat);
}

int tbi_h264_nal_length(const AVCodecParameters *par)
{
    if (par->codec_id != AV_CODEC_ID_H264 || par->extradata_size < 7 || par->extradata[0] != 1)
        return 0;
    return (par->extradata[4] & 3) + 1;
}

int tbi_h264_disposable(const uint8_t *d, int size, int nal_len)
{
    int vcl = 0;
    while (size > nal_len) {
        uint32_t len = 0;
        for (int i = 0; i < nal_len; i++)
            len = len << 8 | d[i];
        d += nal_len;
        size -= nal_len;
        if (len == 0 || len > (uint32_t)size)
            return 0;
        int type = d[0] & 0x1f, ref_idc = (d[0] >> 5) & 3;
        if (type == 5 || ((type == 1 || type == 2) && ref_idc))
            return 0;
        if (type == 1 || type == 2)
            vcl = 1;
        d += len;
        size -= (int)len;
    }
    return vcl;
}
