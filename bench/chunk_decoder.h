/* bench/chunk_decoder.h - the cheapest open of a prepared chunk for the decode-only benchmarks
 * (bench_reader's decode-only, decode_limit): the chunk's MP4 header has the codec parameters,
 * so no format probing, no stream-information pass (which decodes frames) and no packet
 * parser (MP4's packets are whole frames); one decoder thread, kept for the next chunk when
 * its stream is the same (as the reader does: src/video/av.c, tbi_input_switch_chunk). */
#ifndef TUBELET_BENCH_CHUNK_DECODER_H
#define TUBELET_BENCH_CHUNK_DECODER_H

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <string.h>

/* Open path's video stream into *fmt and its decoder into *dec: *dec as it is, flushed, when
 * it decodes a stream with the same codec, size and header, else a new one (the caller frees
 * both, also on failure). Returns the stream index, or -1. */
static int open_chunk_decoder(const char *path, AVFormatContext **fmt, AVCodecContext **dec)
{
    const AVCodec *codec = NULL;
    if (!(*fmt = avformat_alloc_context()))
        return -1;
    (*fmt)->flags |= AVFMT_FLAG_NOPARSE | AVFMT_FLAG_NOFILLIN;
    if (avformat_open_input(fmt, path, av_find_input_format("mp4"), NULL) < 0)
        return -1;
    int si = av_find_best_stream(*fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    const AVCodecParameters *par = si >= 0 ? (*fmt)->streams[si]->codecpar : NULL;
    if (par && *dec && (*dec)->codec_id == par->codec_id && (*dec)->width == par->width &&
        (*dec)->height == par->height && (*dec)->extradata_size == par->extradata_size &&
        !memcmp((*dec)->extradata, par->extradata, (size_t)par->extradata_size)) {
        avcodec_flush_buffers(*dec);
        return si;
    }
    avcodec_free_context(dec);
    if (si < 0 || !(*dec = avcodec_alloc_context3(codec)) ||
        avcodec_parameters_to_context(*dec, (*fmt)->streams[si]->codecpar) < 0)
        return -1;
    (*dec)->thread_count = 1;
    return avcodec_open2(*dec, codec, NULL) < 0 ? -1 : si;
}

/* Frame number of a decoded frame: its timestamp at the stream's nominal rate. */
static int64_t frame_number(const AVStream *st, const AVFrame *frame)
{
    int64_t t0 = st->start_time == AV_NOPTS_VALUE ? 0 : st->start_time;
    return av_rescale_q_rnd(frame->best_effort_timestamp - t0, st->time_base,
                            av_inv_q(st->avg_frame_rate), AV_ROUND_NEAR_INF);
}

/* Read and decode from where fmt is until a frame numbered want or later comes out; *next gets
 * its number + 1. Returns the frames decoded, or -1 when the stream ends first. */
static int64_t decode_to(AVFormatContext *fmt, AVCodecContext *dec, int si, AVPacket *pkt,
                         AVFrame *frame, int64_t want, int64_t *next)
{
    int64_t n_decoded = 0;
    for (;;) {
        int ret = av_read_frame(fmt, pkt);
        if (ret < 0) {
            avcodec_send_packet(dec, NULL);
        } else if (pkt->stream_index != si) {
            av_packet_unref(pkt);
            continue;
        } else {
            avcodec_send_packet(dec, pkt);
            av_packet_unref(pkt);
        }
        while (avcodec_receive_frame(dec, frame) == 0) {
            int64_t no = frame_number(fmt->streams[si], frame);
            av_frame_unref(frame);
            n_decoded++;
            *next = no + 1;
            if (no >= want)
                return n_decoded;
        }
        if (ret < 0)
            return -1;
    }
}

#endif
