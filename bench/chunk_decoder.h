/* bench/chunk_decoder.h - the cheapest open of a prepared chunk for the decode-only benchmarks
 * (bench_reader's decode-only, decode_limit): the chunk's MP4 header has the codec parameters,
 * so no format probing and no stream-information pass (which decodes frames); one decoder
 * thread. */
#ifndef TUBELET_BENCH_CHUNK_DECODER_H
#define TUBELET_BENCH_CHUNK_DECODER_H

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>

/* Open path's video stream and its decoder into *fmt and *dec (the caller frees both, also
 * on failure). Returns the stream index, or -1. */
static int open_chunk_decoder(const char *path, AVFormatContext **fmt, AVCodecContext **dec)
{
    const AVCodec *codec = NULL;
    if (avformat_open_input(fmt, path, av_find_input_format("mp4"), NULL) < 0)
        return -1;
    int si = av_find_best_stream(*fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (si < 0 || !(*dec = avcodec_alloc_context3(codec)) ||
        avcodec_parameters_to_context(*dec, (*fmt)->streams[si]->codecpar) < 0)
        return -1;
    (*dec)->thread_count = 1;
    return avcodec_open2(*dec, codec, NULL) < 0 ? -1 : si;
}

#endif
