/* src/video/probe.c - what a file or a prepared video directory holds. For a file, the
 * container's claims plus, when asked, a full decode for the true frame count and keyframe
 * numbers; for a directory, its index (nothing is scanned). Formatting as JSON is the CLI's
 * job. Tests: tests/test_prep.c. */
#include <stdlib.h>
#include <string.h>

#include <libavutil/pixdesc.h>

#include "video/av.h"
#include "video/internal.h"

void tb_probe_free(struct tb_probe **pp)
{
    if (!pp || !*pp)
        return;
    free((*pp)->keyframes);
    tb_index_free(&(*pp)->index);
    free(*pp);
    *pp = NULL;
}

static int probe_dir(struct tb_probe *p, const char *path)
{
    int rc = tb_index_load(&p->index, path);
    if (rc < 0)
        return rc;
    snprintf(p->container, sizeof(p->container), "tubelet-chunks");
    snprintf(p->codec, sizeof(p->codec), "h264");
    snprintf(p->pix_fmt, sizeof(p->pix_fmt), "yuv420p");
    p->width = p->index->width;
    p->height = p->index->height;
    p->fps_num = p->index->fps_num;
    p->fps_den = p->index->fps_den;
    p->duration = (double)p->index->n_frames * p->fps_den / p->fps_num;
    p->n_frames_declared = p->n_frames = p->index->n_frames;
    p->decoded = 1;
    int64_t n_kf = 0;
    for (int i = 0; i < p->index->n_chunks; i++)
        n_kf += p->index->chunks[i].n_keyframes;
    if (!(p->keyframes = tbi_malloc(sizeof(*p->keyframes) * (size_t)(n_kf ? n_kf : 1))))
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < p->index->n_chunks; i++) {
        const struct tb_chunk_info *c = &p->index->chunks[i];
        for (int j = 0; j < c->n_keyframes; j++)
            p->keyframes[p->n_keyframes++] = c->start_frame + c->keyframes[j];
    }
    return 0;
}

static int decode_all(struct tb_probe *p, struct tbi_input *in, const char *path)
{
    AVPacket *pkt = av_packet_alloc();
    AVFrame *frame = av_frame_alloc();
    int64_t cap = 0, first_ts = 0, end_ts = 0;
    int rc = 0;
    if (!pkt || !frame) {
        rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
        goto end;
    }
    for (;;) {
        rc = tbi_input_next_frame(in, pkt, frame, &p->n_bad_packets, path);
        if (rc == TB_EOF) {
            rc = 0;
            break;
        }
        if (rc < 0)
            goto end;
#ifdef AV_FRAME_FLAG_KEY
        int key = !!(frame->flags & AV_FRAME_FLAG_KEY);
#else
        int key = frame->key_frame;
#endif
        if (key) {
            if (p->n_keyframes == cap) {
                cap = cap ? 2 * cap : 64;
                int64_t *grown = tbi_realloc(p->keyframes, sizeof(*grown) * (size_t)cap);
                if (!grown) {
                    rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
                    goto end;
                }
                p->keyframes = grown;
            }
            p->keyframes[p->n_keyframes++] = p->n_frames;
        }
        /* The decoded span, as prep measures it (a frame without a timestamp follows the
         * one before it). */
        int64_t ts = frame->best_effort_timestamp;
        if (ts == AV_NOPTS_VALUE)
            ts = end_ts;
        if (p->n_frames == 0)
            first_ts = ts;
        end_ts = ts + tbi_frame_duration(in, frame);
        p->n_frames++;
        av_frame_unref(frame);
    }
    p->decoded = 1;
    if (p->n_frames > 0 &&
        tbi_check_truncation(in, first_ts, end_ts, p->n_frames, path, NULL,
                             &p->decoded_duration) < 0) {
        snprintf(p->warning, sizeof(p->warning), "%s", tb_errmsg());
        tb_errclear();
    }
end:
    av_frame_free(&frame);
    av_packet_free(&pkt);
    return rc;
}

int tb_probe(struct tb_probe **out, const char *path, int decode)
{
    struct tb_probe *p = tbi_calloc(1, sizeof(*p));
    struct tbi_input in;
    int rc;

    *out = NULL;
    if (!p)
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    snprintf(p->path, sizeof(p->path), "%s", path);
    if (tbi_is_dir(path)) {
        rc = probe_dir(p, path);
        goto end;
    }
    if ((rc = tbi_input_open(&in, path, 0)) < 0)
        goto end;
    AVStream *st = in.st;
    snprintf(p->container, sizeof(p->container), "%s", in.fmt->iformat->name);
    snprintf(p->codec, sizeof(p->codec), "%s", avcodec_get_name(st->codecpar->codec_id));
    const char *pf = av_get_pix_fmt_name(in.dec->pix_fmt);
    snprintf(p->pix_fmt, sizeof(p->pix_fmt), "%s", pf ? pf : "unknown");
    p->width = st->codecpar->width;
    p->height = st->codecpar->height;
    p->rotation = in.rotation;
    AVRational r = st->avg_frame_rate.num ? st->avg_frame_rate : st->r_frame_rate;
    p->fps_num = r.num > 0 ? r.num : 0;
    p->fps_den = r.num > 0 ? r.den : 1;
    if (st->start_time != AV_NOPTS_VALUE)
        p->start_time = (double)st->start_time * av_q2d(st->time_base);
    if (st->duration != AV_NOPTS_VALUE && st->duration > 0)
        p->duration = (double)st->duration * av_q2d(st->time_base);
    else if (in.fmt->duration != AV_NOPTS_VALUE)
        p->duration = (double)in.fmt->duration / AV_TIME_BASE;
    p->n_frames_declared = st->nb_frames;
    if (p->width <= 0 || p->height <= 0)
        rc = tbi_err(TB_EDECODE, "%s: %s stream without a frame size (corrupt, or not a video)",
                     path, p->codec);
    else if (decode && (rc = decode_all(p, &in, path)) == 0 && p->n_frames == 0)
        rc = tbi_err(TB_EDECODE, "%s: no decodable frame (%lld bad packets)", path,
                     (long long)p->n_bad_packets);
    tbi_input_close(&in);
end:
    if (rc < 0)
        tb_probe_free(&p);
    *out = p;
    return rc;
}
