/* src/video/image.c - writing RGB images: PNG and JPEG through libavcodec's encoders (no new
 * dependency), binary PPM by hand, raw RGB24 bytes; the file name's extension picks the format
 * and any other extension is refused. Used by `tubelet frames`, `peek` and `plot`.
 * Tests: tests/test_reader.c and tests/test_cli_data.c (images decoded back with the ffmpeg
 * tool). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <libswscale/swscale.h>

#include "tubelet/video.h"
#include "video/av.h"

int tb_image_format(const char *path)
{
    static const struct {
        const char *ext;
        enum tb_image_format format;
    } exts[] = {{".png", TB_IMAGE_PNG}, {".jpg", TB_IMAGE_JPEG}, {".jpeg", TB_IMAGE_JPEG},
                {".ppm", TB_IMAGE_PPM}, {".rgb", TB_IMAGE_RAW},  {".raw", TB_IMAGE_RAW}};
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    if (!base[0])
        return tbi_err(TB_EINVAL, "%s: not a file name", path);
    if (!dot || dot == base)
        return TB_IMAGE_RAW;
    for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++)
        if (!strcasecmp(dot, exts[i].ext))
            return exts[i].format;
    return tbi_err(TB_EINVAL, "%s: cannot write '%s' images: name it .png, .jpg, .ppm, or .rgb "
                   "/ .raw (or no extension) for raw RGB24 bytes", path, dot);
}

/* One picture through libavcodec's encoder of id: PNG from RGB24 as it is, JPEG from RGB24
 * turned into full-range 4:4:4 YCbCr (no chroma subsampling, fine quantisers). */
static int write_encoded(const char *path, enum AVCodecID id, const uint8_t *rgb, int w, int h)
{
    const char *what = id == AV_CODEC_ID_PNG ? "PNG" : "JPEG";
    const AVCodec *codec = avcodec_find_encoder(id);
    AVCodecContext *enc = NULL;
    AVFrame *f = av_frame_alloc();
    AVPacket *pkt = av_packet_alloc();
    struct SwsContext *sws = NULL;
    int rc, ret;
    if (!codec) {
        rc = tbi_err(TB_EUNSUPPORTED, "this FFmpeg has no %s encoder", what);
        goto end;
    }
    if (!f || !pkt || !(enc = avcodec_alloc_context3(codec))) {
        rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
        goto end;
    }
    enc->width = w;
    enc->height = h;
    enc->pix_fmt = id == AV_CODEC_ID_PNG ? AV_PIX_FMT_RGB24 : AV_PIX_FMT_YUVJ444P;
    enc->time_base = (AVRational){1, 1};
    if (id == AV_CODEC_ID_MJPEG) {
        enc->color_range = AVCOL_RANGE_JPEG;
        enc->flags |= AV_CODEC_FLAG_QSCALE;
        enc->global_quality = 2 * FF_QP2LAMBDA;
    }
    if ((ret = avcodec_open2(enc, codec, NULL)) < 0) {
        rc = tbi_av_err(ret, TB_EENCODE, "%s: cannot open the %s encoder", path, what);
        goto end;
    }
    f->format = enc->pix_fmt;
    f->width = w;
    f->height = h;
    if (id == AV_CODEC_ID_PNG) {
        /* The encoder only reads the frame, so it can point at the caller's pixels. */
        f->data[0] = (uint8_t *)rgb;
        f->linesize[0] = w * 3;
    } else {
        const uint8_t *src[4] = {rgb, NULL, NULL, NULL};
        int src_ls[4] = {w * 3, 0, 0, 0};
        f->color_range = AVCOL_RANGE_JPEG;
        f->quality = enc->global_quality;
        if (av_frame_get_buffer(f, 0) < 0 ||
            !(sws = sws_getContext(w, h, AV_PIX_FMT_RGB24, w, h, AV_PIX_FMT_YUVJ444P,
                                   SWS_BICUBIC | SWS_ACCURATE_RND, NULL, NULL, NULL))) {
            rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
            goto end;
        }
        sws_scale(sws, src, src_ls, 0, h, f->data, f->linesize);
    }
    if ((ret = avcodec_send_frame(enc, f)) < 0 || (ret = avcodec_send_frame(enc, NULL)) < 0 ||
        (ret = avcodec_receive_packet(enc, pkt)) < 0) {
        rc = tbi_av_err(ret, TB_EENCODE, "%s: %s encoding failed", path, what);
        goto end;
    }
    rc = tbi_write_file_atomic(path, pkt->data, (size_t)pkt->size);
end:
    sws_freeContext(sws);
    av_packet_free(&pkt);
    av_frame_free(&f);
    avcodec_free_context(&enc);
    return rc;
}

/* PPM: a header before each image; Netpbm reads several images from one file. */
static int write_ppm(const char *path, const uint8_t *rgb, int w, int h, int n_images)
{
    size_t frame_bytes = (size_t)w * h * 3;
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

int tb_image_write(const char *path, const uint8_t *rgb, int w, int h, int n_images)
{
    int format = tb_image_format(path);
    if (format < 0)
        return format;
    if (w <= 0 || h <= 0 || n_images <= 0)
        return tbi_err(TB_EINVAL, "%s: nothing to write", path);
    /* A JPEG's header holds 16-bit sizes. */
    if (format == TB_IMAGE_JPEG && ((int64_t)h * n_images > 65535 || w > 65535))
        return tbi_err(TB_EINVAL, "%s: %d images of %dx%d stack %lld pixels high, more than a "
                       "JPEG holds (65535); write .png, .ppm or raw RGB24", path, n_images, w, h,
                       (long long)h * n_images);
    tbi_av_init();
    switch ((enum tb_image_format)format) {
    case TB_IMAGE_PNG: return write_encoded(path, AV_CODEC_ID_PNG, rgb, w, h * n_images);
    case TB_IMAGE_JPEG: return write_encoded(path, AV_CODEC_ID_MJPEG, rgb, w, h * n_images);
    case TB_IMAGE_PPM: return write_ppm(path, rgb, w, h, n_images);
    case TB_IMAGE_RAW: break;
    }
    return tbi_write_file_atomic(path, rgb, (size_t)w * h * 3 * (size_t)n_images);
}
