/* include/tubelet/video.h - what tubelet knows about a video: the index of a prepared (chunked)
 * video and the probe of any file FFmpeg reads. The clip reader joins this header later.
 *
 * A prepared video is a directory ROOT/<name>.<ext>/ holding chunks <start_s>.<ext> (H.264,
 * constant frame rate, every chunk starting with a keyframe), one index per chunk
 * (<start_s>.idx) and, once every chunk is written, video.idx: the whole video's index, so a
 * reader opens it without scanning anything. docs/FORMATS.md describes the files.
 * Tests: tests/test_prep.c, tests/test_probe.c. */
#ifndef TUBELET_VIDEO_H
#define TUBELET_VIDEO_H

#include "tubelet/base.h"
#include "tubelet/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TB_INDEX_VERSION 1
#define TB_VIDEO_INDEX_NAME "video.idx"

struct tb_chunk_info {
    int64_t start_frame;  /* absolute number of the chunk's first frame */
    int64_t n_frames;     /* frames a decoder really returns */
    int64_t bytes;        /* size of the chunk file */
    int n_keyframes;
    int64_t *keyframes;   /* chunk-relative frame numbers, ascending; keyframes[0] == 0 */
    char file[64];        /* chunk file name inside the video directory, e.g. "15.mp4" */
};

struct tb_video_index {
    int width, height;            /* of every chunk */
    int fps_num, fps_den;         /* constant frame rate */
    int chunk_seconds;            /* nominal chunk length; chunk k starts at k*chunk_seconds */
    int64_t chunk_frames;         /* frames per chunk (the last may hold fewer) */
    int64_t n_frames;             /* whole video */
    int n_chunks;
    struct tb_chunk_info *chunks; /* n_chunks, in order */
    char params[512];             /* the prep settings that made it, "key=value ..." */
    char source[1024];            /* path of the source video as given to prep */
};

/* Load dir/video.idx. On success *out is owned by the caller (tb_index_free). Errors name the
 * file and line. */
TB_API int tb_index_load(struct tb_video_index **out, const char *dir);
TB_API void tb_index_free(struct tb_video_index **idx);

/* 1 if path is a prepared video directory (holds video.idx), else 0. */
TB_API int tb_index_exists(const char *dir);

/* What a probe found. */
struct tb_probe {
    char path[1024];
    char container[64];    /* FFmpeg's demuxer name */
    char codec[32];        /* e.g. "h264" */
    char pix_fmt[32];
    int width, height;     /* as decoded */
    int rotation;          /* clockwise degrees to display upright: 0, 90, 180, 270 */
    int fps_num, fps_den;  /* average frame rate the container reports (0/1 if unknown) */
    double start_time;     /* seconds; first timestamp of the video stream */
    double duration;       /* seconds, as the container says */
    int64_t n_frames_declared; /* as the container says (0 if unknown) */
    /* Filled only when the probe decodes the file: */
    int decoded;
    int64_t n_frames;      /* frames the decoder really returns */
    int64_t n_keyframes;
    int64_t *keyframes;    /* frame numbers (presentation order) of key frames */
    int64_t n_bad_packets; /* packets that failed to decode */
    double decoded_duration; /* seconds from the first frame's start to the last one's end */
    char warning[1024];    /* "" or what is wrong with the file and what to do: it decodes to
                              much less than the container declares (truncated or corrupt;
                              prep refuses such a file with the same message) */
    /* Filled when path is a prepared video directory: */
    struct tb_video_index *index;
};

/* Probe a file or a prepared video directory. decode != 0 decodes every frame of a file to
 * give its true frame count and keyframes (a directory's index already holds them); a file
 * that decodes to much less than it declares is still probed (0), with warning set. */
TB_API int tb_probe(struct tb_probe **out, const char *path, int decode);
TB_API void tb_probe_free(struct tb_probe **p);

/* ---- crops ------------------------------------------------------------------------------ */

enum tb_crop_mode {
    TB_CROP_NONE,           /* the whole frame, resized to the output size */
    TB_CROP_FIXED,          /* the rectangle x, y, w, h */
    TB_CROP_CENTER,         /* the centred square of the short side (evaluation) */
    TB_CROP_RANDOM_RESIZED, /* torchvision RandomResizedCrop */
    TB_CROP_MULTISCALE,     /* VideoMAE GroupMultiScaleCrop (scales 1, .875, .75, .66) */
};

enum tb_flip { TB_FLIP_NEVER, TB_FLIP_ALWAYS, TB_FLIP_RANDOM };

/* How to crop a clip. The crop is drawn once per clip, so every frame (and every chunk) of the
 * clip shares it. */
struct tb_crop_spec {
    enum tb_crop_mode mode;
    double scale_min, scale_max; /* RANDOM_RESIZED: area fraction (torchvision: 0.08, 1) */
    double ratio_min, ratio_max; /* RANDOM_RESIZED: aspect w/h, drawn log-uniform (3/4, 4/3) */
    int x, y, w, h;              /* FIXED */
    enum tb_flip flip;           /* horizontal flip */
};

/* A drawn crop, in source pixels. */
struct tb_crop {
    int x, y, w, h;
    int flip;
};

/* Draw the crop of a clip on a src_w x src_h video for an out_w x out_h output. rng may be NULL
 * for modes that draw nothing. Errors: TB_EINVAL for a spec that cannot be met (a FIXED
 * rectangle outside the frame, bad ranges). */
TB_API int tb_crop_draw(const struct tb_crop_spec *spec, int src_w, int src_h, int out_w,
                        int out_h, struct tb_rng *rng, struct tb_crop *out);

/* ---- clip reader ------------------------------------------------------------------------- */

/* Reads clips: a list of frame numbers of one video, cropped and resized into a caller's
 * uint8 (T, H, W, 3) RGB buffer. One reader per thread; it keeps a few files open between
 * clips and holds about one decoded frame per open file (no decode-ahead).
 *
 * For each file a clip touches: seek to the keyframe before the first wanted frame (from the
 * index of a prepared video; a plain file is indexed on first open by reading its packets),
 * decode forward, stop at the last wanted frame; seek again only when a keyframe lies ahead
 * of the decoder. H.264 frames no other frame refers to are not decoded unless wanted. Each
 * wanted frame is cropped on its decoded planes by pointer offsets and only the crop is scaled
 * and converted, straight into the output. A crop whose corner falls inside a chroma sample
 * (an odd x or y on 4:2:0) starts on the sample instead, one pixel up or left, as ffmpeg's crop
 * filter places it; its size is kept, and the whole frame, of any size, is never moved: at its
 * own size it is ffmpeg's -pix_fmt rgb24 conversion.
 *
 * Frame n is the n-th frame in presentation order, as ffmpeg's select=eq(n\,N) counts. */
typedef struct tb_reader tb_reader;

enum tb_scaler { TB_SCALE_BILINEAR, TB_SCALE_BICUBIC, TB_SCALE_AREA, TB_SCALE_POINT };

struct tb_reader_opts {
    int n_cached;          /* files kept open (LRU); 0 means 4 */
    int n_threads;         /* decoder threads per file; 0 means 1 (one frame of memory) */
    enum tb_scaler scaler; /* resize filter (swscale's; bilinear on 8-bit 4:2:0 runs the
                              reader's own copy of it where AVX-512: docs/FORMATS.md); a crop
                              read at its own size is only converted, as ffmpeg does by
                              default (bicubic), whatever this is */
    int decode_all;        /* 1: decode unwanted non-reference frames too (for comparisons) */
};

struct tb_clip_stats {
    struct tb_crop crop;   /* the crop the clip used */
    int64_t n_decoded;     /* frames the decoder returned */
    int64_t n_skipped;     /* packets not decoded: unwanted non-reference frames */
    int n_seeks;
    int n_opens;           /* files opened for this clip (not found in the cache) */
};

/* opts may be NULL (defaults). *out is NULL on failure. */
TB_API int tb_reader_open(tb_reader **out, const struct tb_reader_opts *opts);
/* NULL-safe; sets *r to NULL. */
TB_API void tb_reader_close(tb_reader **r);

/* Size, length and rate of a video: a prepared directory or a plain file. */
struct tb_video_info {
    int width, height;
    int64_t n_frames;
    int fps_num, fps_den;
};
TB_API int tb_reader_info(tb_reader *r, const char *video, struct tb_video_info *info);

/* Read frames[0..n) (any order, repeats allowed, may span chunks) of video into out, which
 * holds n * out_h * out_w * 3 bytes. The crop is drawn once from spec with rng (may be NULL
 * for modes that draw nothing). stats may be NULL. Errors name the file and frame: TB_ERANGE
 * for a frame past the end, TB_ENOENT for a missing file, TB_EDECODE for one that cannot be
 * decoded up to the wanted frame. The output is unspecified after an error. */
TB_API int tb_reader_read(tb_reader *r, const char *video, const int64_t *frames, int n,
                          const struct tb_crop_spec *spec, tb_rng *rng, int out_w, int out_h,
                          uint8_t *out, struct tb_clip_stats *stats);

/* ---- decode cost ----------------------------------------------------------------------- */

/* What decoding one prepared chunk costs on this machine, by the kind of frame: keyframes,
 * other frames that later frames refer to, and disposable (non-reference) frames, which the
 * reader skips unless they are wanted. Times are CPU seconds of the calling thread. */
struct tb_decode_cost {
    int64_t n_key, n_ref, n_disposable; /* packets of each kind, over all passes */
    double key_s, ref_s, disposable_s;  /* CPU seconds decoding them (send + receive) */
    double open_s;                      /* CPU seconds of one open and close of the file, as
                                           the reader opens a chunk (mean over the passes) */
    int64_t bytes;                      /* size of the file */
    int delay;                          /* frames the decoder holds back for reordering
                                           (B-frames): after a wanted frame it must decode
                                           this many more before the wanted one comes out */
};

/* Decode the chunk at path (a file tubelet prep wrote) from start to end n_passes times
 * (0 means 1) on one thread, timing every packet. Errors name the file and frame. */
TB_API int tb_decode_cost_measure(const char *path, int n_passes, struct tb_decode_cost *out);

/* ---- images ------------------------------------------------------------------------------ */

enum tb_image_format { TB_IMAGE_RAW, TB_IMAGE_PNG, TB_IMAGE_JPEG, TB_IMAGE_PPM };

/* The format path's extension names (any case): .png, .jpg or .jpeg, .ppm, and raw RGB24 bytes
 * for .rgb, .raw or no extension. Any other extension is TB_EINVAL naming it and the ones there
 * are, so a program can refuse a name before doing any work. */
TB_API int tb_image_format(const char *path);

/* Write n_images RGB images of w x h stored back to back, in the format of path's extension
 * (tb_image_format): PNG and JPEG (full-range 4:4:4, high quality) stack them top to bottom in
 * one picture, PPM writes one binary PPM per image into the file, raw the bytes as they are.
 * Atomic (temporary file, rename). TB_EINVAL for an extension it does not write. */
TB_API int tb_image_write(const char *path, const uint8_t *rgb, int w, int h, int n_images);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_VIDEO_H */
