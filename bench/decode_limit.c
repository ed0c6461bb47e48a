/* bench/decode_limit.c - the decode-only limit of a clip workload on prepared videos: libavcodec
 * alone decoding exactly the frames each clip needs, nothing else (no crop, no conversion, no
 * loader). Clips are drawn as bench-load's: an action of the EPIC CSV uniformly, T frames by
 * AVION's segment sampling with jitter over its window (W1: T = 4, W2: T = 16). Per chunk a
 * clip touches: open it without probing or parsing (one decoder, flushed and kept from chunk
 * to chunk while the stream is the same, as the reader does), and for each wanted frame in
 * order seek to the keyframe before it unless the decoder reaches it by going on, then decode
 * up to it. With B-frames the decoder's reordering delay makes it read (and decode) a few
 * frames past the wanted one; nothing else is decoded. Single-threaded; prints one JSON line
 * with clips per CPU-second (user + system time, so other jobs on the machine count little),
 * frames decoded per clip, and the same count computed from the index alone.
 * Usage: decode_limit ROOT ANN.csv w1|w2 [CLIPS=400] [SEED=1] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "chunk_decoder.h"
#include "tubelet/data.h"
#include "tubelet/sample.h"

struct clip {
    const struct tb_video_index *idx;
    const char *dir;
    int64_t frames[16];
};

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static int64_t key_before(const struct tb_chunk_info *c, int64_t f)
{
    int64_t k = 0;
    for (int i = 0; i < c->n_keyframes && c->keyframes[i] <= f; i++)
        k = c->keyframes[i];
    return k;
}

/* Decode frames[0..n) (ascending, chunk-relative) of one chunk file with *decp (kept for the
 * next chunk when its stream is the same); returns frames decoded or -1. */
static int64_t decode_chunk(const char *path, const struct tb_chunk_info *ch,
                            const int64_t *frames, int n, AVPacket *pkt, AVFrame *frame,
                            AVCodecContext **decp)
{
    AVFormatContext *fmt = NULL;
    int64_t n_decoded = -1, pos = -1; /* pos: the next frame the decoder outputs */
    int si = open_chunk_decoder(path, &fmt, decp);
    AVCodecContext *dec = *decp;
    if (si < 0)
        goto end;
    AVStream *st = fmt->streams[si];
    AVRational frame_tb = av_inv_q(st->avg_frame_rate);
    int64_t t0 = st->start_time == AV_NOPTS_VALUE ? 0 : st->start_time;
    n_decoded = 0;
    for (int i = 0; i < n; i++) {
        int64_t want = frames[i], key = key_before(ch, want);
        if (i > 0 && want == frames[i - 1])
            continue;
        if (pos < 0 || key > pos || want < pos) {
            av_seek_frame(fmt, si, t0 + av_rescale_q(key, frame_tb, st->time_base),
                          AVSEEK_FLAG_BACKWARD);
            avcodec_flush_buffers(dec);
        }
        int64_t d = decode_to(fmt, dec, si, pkt, frame, want, &pos);
        if (d < 0) {
            n_decoded = -1;
            goto end;
        }
        n_decoded += d;
    }
end:
    if (n_decoded < 0)
        avcodec_free_context(decp);
    avformat_close_input(&fmt);
    return n_decoded;
}

/* Frames a reader that seeks to the keyframe before each wanted frame must decode, from the
 * index (B-frame reordering left out). */
static int64_t needed(const struct tb_chunk_info *ch, const int64_t *frames, int n)
{
    int64_t total = 0, pos = -1;
    for (int i = 0; i < n; i++) {
        int64_t key = key_before(ch, frames[i]);
        if (pos < 0 || key > pos || frames[i] < pos)
            pos = key;
        if (frames[i] >= pos) {
            total += frames[i] - pos + 1;
            pos = frames[i] + 1;
        }
    }
    return total;
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[3], "w1") && strcmp(argv[3], "w2"))) {
        fprintf(stderr, "usage: decode_limit ROOT ANN.csv w1|w2 [CLIPS] [SEED]\n");
        return 2;
    }
    int n = strcmp(argv[3], "w2") ? 4 : 16;
    int n_clips = argc > 4 ? atoi(argv[4]) : 400;
    struct tb_annotations *ann = NULL;
    struct tb_ann_opts ao = {.format = TB_ANN_EPIC};
    if (tb_ann_load(&ann, argv[2], &ao) < 0) {
        fprintf(stderr, "%s\n", tb_errmsg());
        return 1;
    }
    struct tb_video_index **idx = calloc((size_t)ann->n_items, sizeof(*idx));
    char (*dirs)[1024] = calloc((size_t)ann->n_items, sizeof(*dirs));
    struct clip *clips = calloc((size_t)n_clips, sizeof(*clips));
    for (int i = 0; i < ann->n_items; i++) {
        snprintf(dirs[i], sizeof(dirs[i]), "%s/%s.mp4", argv[1], ann->items[i].video);
        for (int j = 0; j < i && !idx[i]; j++)
            if (!strcmp(dirs[j], dirs[i]))
                idx[i] = idx[j];
        if (!idx[i] && tb_index_load(&idx[i], dirs[i]) < 0) {
            fprintf(stderr, "%s\n", tb_errmsg());
            return 1;
        }
    }
    tb_rng rng;
    tb_rng_init(&rng, (uint64_t)(argc > 5 ? atoll(argv[5]) : 1), 0);
    double need = 0;
    for (int c = 0; c < n_clips; c++) {
        int it = (int)tb_rng_below(&rng, (uint64_t)ann->n_items);
        const struct tb_video_index *x = idx[it];
        int64_t start, end;
        tb_seconds_to_frames(ann->items[it].start_s, ann->items[it].end_s, x->fps_num,
                             x->fps_den, x->n_frames, &start, &end);
        clips[c] = (struct clip){.idx = x, .dir = dirs[it]};
        if (tb_sample_segments(start, end, n, 1, &rng, clips[c].frames) < 0) {
            fprintf(stderr, "%s:%d: %s\n", argv[2], ann->items[it].line, tb_errmsg());
            return 1;
        }
    }
    av_log_set_level(AV_LOG_ERROR);
    AVPacket *pkt = av_packet_alloc();
    AVFrame *frame = av_frame_alloc();
    AVCodecContext *dec = NULL;
    int64_t decoded = 0;
    double t0 = cpu_s();
    for (int c = 0; c < n_clips; c++) {
        const struct tb_video_index *x = clips[c].idx;
        for (int i = 0; i < n;) { /* one run of frames per chunk */
            int k = (int)(clips[c].frames[i] / x->chunk_frames), m = 0;
            const struct tb_chunk_info *ch = &x->chunks[k];
            int64_t rel[16];
            for (; i < n && clips[c].frames[i] / x->chunk_frames == k; i++)
                rel[m++] = clips[c].frames[i] - ch->start_frame;
            char path[2048];
            snprintf(path, sizeof(path), "%s/%s", clips[c].dir, ch->file);
            int64_t d = decode_chunk(path, ch, rel, m, pkt, frame, &dec);
            if (d < 0) {
                fprintf(stderr, "%s: cannot decode frame %lld\n", path, (long long)rel[m - 1]);
                return 1;
            }
            decoded += d;
            need += (double)needed(ch, rel, m);
        }
    }
    double secs = cpu_s() - t0;
    printf("{\"workload\": \"%s\", \"clips\": %d, \"cpu_seconds\": %.3f, "
           "\"clips_per_cpu_s\": %.2f, \"decoded_per_clip\": %.1f, \"needed_per_clip\": %.1f, "
           "\"params\": \"%s\"}\n", argv[3], n_clips, secs, n_clips / secs,
           (double)decoded / n_clips, need / n_clips, clips[0].idx->params);
    avcodec_free_context(&dec);
    av_packet_free(&pkt);
    av_frame_free(&frame);
    return 0;
}
