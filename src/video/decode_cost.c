/* src/video/decode_cost.c - what decoding a prepared chunk costs per frame on this machine, by
 * the kind of frame (contract in video.h), and the reader's counting rule (tb_plan_count_clip,
 * contract in prep_plan.h: the frames, keyframes, opens and runs a clip costs), for prep
 * --plan's cost model (src/data/prep_plan.c, which draws the clips and calibrates with the
 * loader). It times whole decodes from the start; the counting rule adds the seeks and skips.
 * Tests: tests/test_prep_plan.c. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tubelet/prep_plan.h"
#include "video/av.h"
#include "video/internal.h"

static double thread_cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Send one packet (NULL: drain) and take every frame that comes out. */
static int decode_packet(struct tbi_input *in, const AVPacket *pkt, AVFrame *frame,
                         const char *path, int64_t n)
{
    int ret = avcodec_send_packet(in->dec, pkt);
    if (ret < 0 && ret != AVERROR_EOF)
        return tbi_av_err(ret, TB_EDECODE, "%s: packet %lld does not decode", path,
                          (long long)n);
    while ((ret = avcodec_receive_frame(in->dec, frame)) == 0)
        av_frame_unref(frame);
    if (ret != AVERROR(EAGAIN) && ret != AVERROR_EOF)
        return tbi_av_err(ret, TB_EDECODE, "%s: decoding failed at packet %lld", path,
                          (long long)n);
    return 0;
}

/* One pass: open, decode every packet, close; the time of each packet to its kind. */
static int one_pass(const char *path, AVPacket *pkt, AVFrame *frame, struct tb_decode_cost *c)
{
    struct tbi_input in;
    double t0 = thread_cpu_s();
    int rc = tbi_input_open_chunk(&in, path, 1);
    if (rc < 0)
        return rc;
    c->open_s += thread_cpu_s() - t0;
    int nal_len = tbi_h264_nal_length(in.st->codecpar);
    int64_t n = 0;
    while ((rc = av_read_frame(in.fmt, pkt)) >= 0) {
        if (pkt->stream_index != in.stream_index) {
            av_packet_unref(pkt);
            continue;
        }
        int key = !!(pkt->flags & AV_PKT_FLAG_KEY);
        int disp = !key && nal_len && tbi_h264_disposable(pkt->data, pkt->size, nal_len);
        double t = thread_cpu_s();
        rc = decode_packet(&in, pkt, frame, path, n++);
        t = thread_cpu_s() - t;
        av_packet_unref(pkt);
        if (rc < 0)
            goto end;
        if (key) {
            c->n_key++;
            c->key_s += t;
        } else if (disp) {
            c->n_disposable++;
            c->disposable_s += t;
        } else {
            c->n_ref++;
            c->ref_s += t;
        }
    }
    if (rc != AVERROR_EOF) {
        rc = tbi_av_err(rc, TB_EIO, "%s: read error after packet %lld", path, (long long)n);
        goto end;
    }
    if (in.dec->has_b_frames > c->delay)
        c->delay = in.dec->has_b_frames;
    rc = decode_packet(&in, NULL, frame, path, n);
end:
    t0 = thread_cpu_s();
    tbi_input_close(&in);
    c->open_s += thread_cpu_s() - t0;
    return rc;
}

int tb_decode_cost_measure(const char *path, int n_passes, struct tb_decode_cost *out)
{
    struct stat st;
    memset(out, 0, sizeof(*out));
    tbi_av_init();
    if (n_passes <= 0)
        n_passes = 1;
    if (stat(path, &st) != 0)
        return tbi_err(TB_ENOENT, "%s: no such chunk file", path);
    out->bytes = (int64_t)st.st_size;
    AVPacket *pkt = av_packet_alloc();
    AVFrame *frame = av_frame_alloc();
    int rc = 0;
    if (!pkt || !frame)
        rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
    for (int i = 0; rc == 0 && i < n_passes; i++)
        rc = one_pass(path, pkt, frame, out);
    av_packet_free(&pkt);
    av_frame_free(&frame);
    out->open_s /= n_passes;
    if (rc == 0 && out->n_key == 0)
        rc = tbi_err(TB_EDECODE, "%s: no keyframe decoded", path);
    return rc;
}

/* ---- the reader's counting rule -------------------------------------------------------------- */

/* Multiples of gop in [lo, hi]. */
static int64_t keys_in(int64_t lo, int64_t hi, int gop)
{
    return hi < lo ? 0 : hi / gop - (lo + gop - 1) / gop + 1;
}

void tb_plan_count_clip(const int64_t *frames, int n, int64_t chunk_frames, int gop,
                        double skip_fraction, double *n_frames_out, double *keys, double *opens,
                        double *tails)
{
    int cur = -1;
    int64_t pos = -1; /* chunk-relative frame the decoder outputs next */
    for (int i = 0; i < n; i++) {
        int chunk = (int)(frames[i] / chunk_frames);
        int64_t want = frames[i] - (int64_t)chunk * chunk_frames;
        int fresh = 0;
        if (chunk != cur) {
            cur = chunk;
            pos = 0; /* a file just opened outputs its frame 0 first */
            *opens += 1;
            fresh = 1;
        }
        if (want < pos)
            continue; /* a repeat: copied, not decoded */
        int64_t key = want / gop * gop;
        if (key > pos) {
            pos = key; /* seek */
            fresh = 1;
        }
        int64_t k = keys_in(pos, want, gop), len = want - pos + 1;
        int64_t wanted = want % gop != 0; /* the wanted frame, when it is not a key */
        *keys += (double)k;
        *n_frames_out += (double)(k + wanted) + (double)(len - k - wanted) * (1 - skip_fraction);
        *tails += fresh;
        pos = want + 1;
    }
}
