/* include/tubelet/prep.h - turn source videos into prepared ones: fixed-length H.264 chunks at a
 * constant frame rate (one for every video, or each video's own), short side resized, each
 * chunk with its index (see video.h).
 *
 * Frame n of the resampled source is frame n - k*chunk_frames of chunk k. Resampling to the
 * constant rate picks, for output frame n, the last source frame whose timestamp rounds to at
 * most n frame periods after the first frame (what ffmpeg's fps filter does), so no frame is
 * lost or duplicated at a chunk boundary. Chunks are written under a temporary name and
 * renamed when complete, then their index is written the same way; a rerun skips chunks whose
 * index matches the current settings. Tests: tests/test_prep.c. */
#ifndef TUBELET_PREP_H
#define TUBELET_PREP_H

#include "tubelet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Defaults, shared by the CLI's flag table and library users. The keyframe interval and the
 * tune come from bench/prep_table.sh and bench/reader_bench.sh (docs/PERFORMANCE.md): a
 * keyframe every second and x264's fastdecode tune (CAVLC, no deblocking) make random access
 * about 3x cheaper than x264's defaults for ~2.5x the bytes and ~0.5 dB of PSNR. */
#define TB_PREP_DEFAULT_CHUNK_SECONDS 15
#define TB_PREP_DEFAULT_SHORT_SIDE 320
#define TB_PREP_DEFAULT_FPS "30"
#define TB_PREP_DEFAULT_GOP 30
#define TB_PREP_DEFAULT_CRF 23
#define TB_PREP_DEFAULT_PRESET "medium"
#define TB_PREP_DEFAULT_TUNE "fastdecode"
#define TB_PREP_DEFAULT_EXT "mp4"

struct tb_prep_opts {
    const char *out_root;       /* borrowed: ROOT; videos go to ROOT/<stem>.<ext>/ */
    int chunk_seconds;          /* chunk length, whole seconds */
    int short_side;             /* even pixels; 0 keeps the source size (rounded down to even) */
    int fps_num, fps_den;       /* output frame rate; fps * chunk_seconds must be whole */
    int fps_source;             /* 1 (`--fps source`): each video at its own rate instead of
                                   fps_num/fps_den (unread): a constant-rate stream's
                                   r_frame_rate, a variable-rate one's average (avg_frame_rate,
                                   more than 1% from r_frame_rate), resampled to it by the
                                   same rule. Where chunk_seconds is not a whole number of
                                   frames at that rate, a chunk holds the frames that start in
                                   it and a video that needs a second chunk is refused
                                   (TB_EINVAL naming it and a --chunk-seconds that works) */
    int gop;                    /* keyframe interval in frames (x264 keyint) */
    int crf;                    /* x264 constant rate factor 0..51; 0 is lossless */
    const char *preset;         /* borrowed: x264 preset name */
    const char *tune;           /* borrowed: x264 tune ("" for none; "fastdecode": no CABAC,
                                   no deblocking, no weighted prediction) */
    int no_bframes;             /* 1: no B-frames (x264 bframes=0: every frame decodes in
                                   order, none waits for a later one); 0: the preset's (3) */
    const char *ext;            /* borrowed: chunk file extension and directory suffix */
    int n_threads;              /* decoder and encoder threads per video; 0 = FFmpeg's choice */
    const volatile int *cancel; /* borrowed, may be NULL: when *cancel != 0, stop soon with
                                   TB_ECANCELED, leaving finished chunks in place */
    int overwrite;              /* 1: replace a video prepared from another source with the
                                   same stem, or with other encoding settings; 0: refuse it
                                   (TB_EINVAL naming both sources, or both settings as
                                   flags) */
    int64_t max_frames;         /* 0: the whole source; else only its first max_frames output
                                   frames (a sample, as prep --plan encodes) */
};

struct tb_prep_result {
    char name[256];             /* <stem>.<ext>, the directory under out_root */
    int64_t n_frames;           /* frames of the prepared video */
    int n_chunks;               /* chunks it has */
    int n_chunks_skipped;       /* of those, already done by an earlier run */
    int64_t n_bad_packets;      /* source packets that failed to decode (skipped, as ffmpeg) */
    int width, height;          /* of the chunks */
};

/* Prepare one source. res (may be NULL) is filled as far as the work got. Errors name the
 * source file (and the chunk, when writing failed). Thread-safe for different sources. */
TB_API int tb_prep_video(const struct tb_prep_opts *opts, const char *src,
                         struct tb_prep_result *res);

/* Called once per source as it finishes, from a worker thread, with tb_prep_video's status,
 * its result, and its error message ("" on success). */
typedef void (*tb_prep_done_fn)(void *user, int i_src, const char *src, int status,
                                const struct tb_prep_result *res, const char *errmsg);

/* Prepare n_srcs sources with n_jobs parallel workers. A failed source does not stop the
 * others. Two sources that would share an output directory are an error for the later one.
 * Returns the number of sources that failed (0 = all done), or a negative TB_E* when nothing
 * could start. */
TB_API int tb_prep_many(const struct tb_prep_opts *opts, const char *const *srcs, int n_srcs,
                        int n_jobs, tb_prep_done_fn done, void *user);

/* The output directory name (<stem>.<ext>) prep uses for src. */
TB_API int tb_prep_video_name(char *buf, size_t size, const char *src, const char *ext);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_PREP_H */
