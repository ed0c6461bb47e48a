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
    /* Filled when path is a prepared video directory: */
    struct tb_video_index *index;
};

/* Probe a file or a prepared video directory. decode != 0 decodes every frame of a file to
 * give its true frame count and keyframes (a directory's index already holds them). */
TB_API int tb_probe(struct tb_probe **out, const char *path, int decode);
TB_API void tb_probe_free(struct tb_probe **p);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_VIDEO_H */
