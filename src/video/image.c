/* src/video/image.c - writing RGB images: PNG through libavcodec's encoder (no new dependency)
 * and binary PPM by hand. Used by `tubelet frames` and contact sheets.
 * Tests: tests/test_reader.c (a PNG is decoded back with the ffmpeg tool). */
#include <stdio.h>
#include <string.h>

#include "tubelet/video.h"
#include "video/av.h"

static int write_png(const char *path, const uint8_t *rgb, int w, int h)
{
    const AVCodec *codec = avcodec_find_encoder(AV_CODEC_ID_PNG);
    AVCodecContext *enc = NULL;
    AVFrame *f = av_frame_alloc();
    AVPacket *pkt = av_packet_alloc();
    int rc, ret;
    if (!codec) {
        rc = tbi_err(TB_EUNSUPPORTED, "this FFmpeg has no PNG encoder");
        goto end;
    }
    if (!f || !pkt || !(enc = avcodec_alloc_context3(codec))) {
        rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
        goto end;
    }
    enc->width = w;
    enc->height = h;
    enc->pix_fmt = AV_PIX_FMT_RGB24;
    enc->time_base = (AVRational){1, 1};
    if ((ret = avcodec_open2(enc, codec, NULL)) < 0) {
        rc = tbi_av_err(ret, TB_EENCODE, "%s: cannot open the PNG encoder", path);
        goto end;
    }
    f->format = AV_PIX_FMT_RGB24;
    f->width = w;
    f->height = h;
    /* The encoder only reads the frame, so it can point at the caller's pixels. */
    f->data[0] = (uint8_t *)rgb;
    f->linesize[0] = w * 3;
    if ((ret = avcodec_send_frame(enc, f)) < 0 || (ret = avcodec_send_frame(enc, NULL)) < 0 ||
        (ret = avcodec_receive_packet(enc, pkt)) < 0) {
        rc = tbi_av_err(ret, TB_EENCODE, "%s: PNG encoding failed", path);
        goto end;
    }
    rc = tbi_write_file_atomic(path, pkt->data, (size_t)pkt->size);
end:
    av_packet_free(&pkt);
    av_frame_free(&f);
    avcodec_free_context(&enc);
    return rc;
}

int tb_image_write(const char *path, const uint8_t *rgb, int w, int h, int n_images)
{
    size_t len = strlen(path);
    int is_png = len > 4 && !strcmp(path + len - 4, ".png");
    int is_ppm = len > 4 && !strcmp(path + len - 4, ".ppm");
    if (w <= 0 || h <= 0 || n_images <= 0)
        return tbi_err(TB_EINVAL, "%s: nothing to write", path);
    tbi_av_init();
    if (is_png)
        return write_png(path, rgb, w, h * n_images);
    size_t frame_bytes = (size_t)w * h * 3;
    if (!is_ppm)
        return tbi_write_file_atomic(path, rgb, frame_bytes * (size_t)n_images);
    /* PPM: a header before each image; Netpbm reads several images from one file. */
    FILE *f = NULL;
    char tmp[4200];
    int rc = tbi_fmt(tmp, sizeof(tmp), "%s.part", path);
    if (rc < 0)
        return rc;
    if (!(f = tbi_fopen(tmp, "wb")))
        return tbi_err(TB_EIO, "%s: cannot create", tmp);
    for (int i = 0; i < n_images; i++) {
        fprintf(f, "P6\n%d %d\n255\n", w, h);
        tbi_fwrite(rgb + frame_bytes * (size_t)i, 1, frame_bytes, f);
    }
    if (ferror(f) | fclose(f)) {
        remove(tmp);
        return tbi_err(TB_EIO, "%s: write failed", tmp);
    }
    if (rename(tmp, path) != 0) {
        remove(tmp);
        return tbi_err(TB_EIO, "%s: cannot rename into place", path);
    }
    return 0;
}
