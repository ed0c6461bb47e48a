/* bench/bench_reader.c - single-threaded clip reading on a clip list from bench/clips:
 *   tubelet      the fused decode-crop reader, random-resized-crop to SIZE (scale 0.08-1);
 *   tubelet-all  the same without skipping unwanted non-reference frames (ablation);
 *   decode-only  libavcodec alone, decoding exactly what a naive reader must: per chunk file
 *                of the clip, open it (without probing), seek to the keyframe before the first
 *                wanted frame, decode every frame up to the last wanted one; no conversion, no
 *                crop. The physical limit of the naive method.
 * Prints one JSON line: clips/s, frames/s, peak RSS. Usage:
 *   bench_reader tubelet|tubelet-all|decode-only CLIPS.jsonl [SIZE=224] [WARMUP=5] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "chunk_decoder.h"
#include "tubelet/video.h"

struct seg {
    char path[1024];
    int64_t frames[16];
    int n;
};

struct clip {
    char video[1024];
    int64_t frames[16];
    int n;
    struct seg segs[2];
    int n_segs;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Parse `"key": "value"` after p into out; returns the position after it. */
static const char *str_field(const char *p, const char *key, char *out, size_t size)
{
    const char *k = strstr(p, key);
    if (!k)
        return NULL;
    const char *q = strchr(k + strlen(key), '"'), *e;
    if (!q || !(e = strchr(q + 1, '"')) || (size_t)(e - q - 1) >= size)
        return NULL;
    memcpy(out, q + 1, (size_t)(e - q - 1));
    out[e - q - 1] = '\0';
    return e + 1;
}

static const char *int_list(const char *p, int64_t *out, int *n)
{
    const char *k = strstr(p, "\"frames\": [");
    if (!k)
        return NULL;
    char *q = (char *)k + 11;
    *n = 0;
    while (*q != ']' && *n < 16) {
        out[(*n)++] = strtoll(q, &q, 10);
        while (*q == ',' || *q == ' ')
            q++;
    }
    return q + 1;
}

static int load_clips(const char *path, struct clip **out)
{
    FILE *f = fopen(path, "r");
    char line[8192];
    int cap = 256, n = 0;
    struct clip *c = malloc(sizeof(*c) * (size_t)cap);
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        if (n == cap)
            c = realloc(c, sizeof(*c) * (size_t)(cap *= 2));
        struct clip *k = &c[n];
        const char *p = str_field(line, "\"video\"", k->video, sizeof(k->video));
        if (!p || !(p = int_list(p, k->frames, &k->n)))
            return -1;
        k->n_segs = 0;
        while (k->n_segs < 2 && (p = str_field(p, "\"path\"", k->segs[k->n_segs].path, 1024))) {
            p = int_list(p, k->segs[k->n_segs].frames, &k->segs[k->n_segs].n);
            k->n_segs++;
        }
        n++;
    }
    fclose(f);
    *out = c;
    return n;
}

/* Decode, without converting, every frame from the keyframe before the first wanted frame to
 * the last wanted frame of one chunk file. Returns frames decoded or -1. */
static int64_t decode_naive(const struct seg *s, AVPacket *pkt, AVFrame *frame)
{
    AVFormatContext *fmt = NULL;
    AVCodecContext *dec = NULL;
    int64_t n_decoded = -1;
    int si = open_chunk_decoder(s->path, &fmt, &dec);
    if (si < 0)
        goto end;
    AVStream *st = fmt->streams[si];
    int64_t first = s->frames[0], last = s->frames[0];
    for (int i = 1; i < s->n; i++) {
        first = s->frames[i] < first ? s->frames[i] : first;
        last = s->frames[i] > last ? s->frames[i] : last;
    }
    AVRational fps = st->avg_frame_rate, frame_tb = av_inv_q(fps);
    int64_t t0 = st->start_time == AV_NOPTS_VALUE ? 0 : st->start_time;
    /* The demuxer finds the keyframe at or before the first wanted frame. */
    av_seek_frame(fmt, si, t0 + av_rescale_q(first, frame_tb, st->time_base),
                  AVSEEK_FLAG_BACKWARD);
    int64_t next = -1;
    n_decoded = decode_to(fmt, dec, si, pkt, frame, last, &next);
end:
    avcodec_free_context(&dec);
    avformat_close_input(&fmt);
    return n_decoded;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_reader tubelet|tubelet-all|decode-only CLIPS.jsonl "
                "[SIZE] [WARMUP]\n");
        return 2;
    }
    const char *mode = argv[1];
    int size = argc > 3 ? atoi(argv[3]) : 224, warmup = argc > 4 ? atoi(argv[4]) : 5;
    struct clip *clips = NULL;
    int n_clips = load_clips(argv[2], &clips);
    if (n_clips <= warmup) {
        fprintf(stderr, "%s: no clips\n", argv[2]);
        return 1;
    }
    av_log_set_level(AV_LOG_ERROR);
    struct tb_reader_opts ro = {.decode_all = !strcmp(mode, "tubelet-all")};
    struct tb_crop_spec rrc = {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = 0.08, .scale_max = 1,
                               .ratio_min = 3.0 / 4, .ratio_max = 4.0 / 3};
    tb_reader *r = NULL;
    uint8_t *out = malloc((size_t)16 * size * size * 3);
    AVPacket *pkt = av_packet_alloc();
    AVFrame *frame = av_frame_alloc();
    int is_tubelet = !strncmp(mode, "tubelet", 7);
    if (is_tubelet && tb_reader_open(&r, &ro) < 0)
        return 1;
    int64_t decoded = 0, skipped = 0, frames = 0;
    double t0 = 0;
    for (int c = 0; c < n_clips; c++) {
        if (c == warmup) {
            t0 = now();
            decoded = skipped = frames = 0;
        }
        const struct clip *k = &clips[c];
        if (is_tubelet) {
            tb_rng rng;
            struct tb_clip_stats st;
            tb_rng_init(&rng, 1, (uint64_t)c);
            if (tb_reader_read(r, k->video, k->frames, k->n, &rrc, &rng, size, size, out,
                               &st) < 0) {
                fprintf(stderr, "clip %d: %s\n", c, tb_errmsg());
                return 1;
            }
            decoded += st.n_decoded;
            skipped += st.n_skipped;
        } else {
            for (int s = 0; s < k->n_segs; s++) {
                int64_t d = decode_naive(&k->segs[s], pkt, frame);
                if (d < 0) {
                    fprintf(stderr, "clip %d: cannot decode %s\n", c, k->segs[s].path);
                    return 1;
                }
                decoded += d;
            }
        }
        frames += k->n;
    }
    double secs = now() - t0;
    int timed = n_clips - warmup;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"peer\": \"%s\", \"clips\": %d, \"seconds\": %.3f, \"clips_per_s\": %.2f, "
           "\"frames_per_s\": %.1f, \"decoded_per_clip\": %.1f, \"skipped_per_clip\": %.1f, "
           "\"peak_rss_mb\": %.1f}\n", mode, timed, secs, timed / secs, frames / secs,
           (double)decoded / timed, (double)skipped / timed, ru.ru_maxrss / 1024.0);
    tb_reader_close(&r);
    av_packet_free(&pkt);
    av_frame_free(&frame);
    free(out);
    free(clips);
    return 0;
}
