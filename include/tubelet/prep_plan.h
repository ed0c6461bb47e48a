/* include/tubelet/prep_plan.h - prep --plan: which encoding to prepare a dataset with, from a
 * cost model measured on this machine. For each candidate encoding (keyframe interval,
 * B-frames, x264 tune, short side) it encodes a short sample of the user's videos with prep,
 * times decoding it per kind of frame, counts the frames the reader decodes per clip for the
 * real clip windows of the annotation CSV (AVION's segment sampling), and predicts clips per
 * CPU-second and MB per hour. Nothing is printed; the CLI prints the table.
 * Tests: tests/test_prep_plan.c. */
#ifndef TUBELET_PREP_PLAN_H
#define TUBELET_PREP_PLAN_H

#include "tubelet/base.h"
#include "tubelet/prep.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One candidate: prep's --gop, --bframes, --tune and --short-side. */
struct tb_plan_encoding {
    int gop;
    int bframes;    /* 1: the preset's B-frames; 0: --no-bframes */
    int fastdecode; /* 1: --tune fastdecode; 0: --tune none */
    int short_side;
};

/* The default candidates for a chosen short side (at most TB_PLAN_MAX_ENCODINGS):
 * fastdecode at short_side with GOP 250, 30, 16, 8 with and without B-frames, and 1;
 * --tune none at GOP 250 with B-frames (x264's defaults, AVION's), GOP 30 with B-frames and
 * GOP 8 without; and GOP 16 and 8 without B-frames, fastdecode, at each other short side of
 * 256, 288, 320 (shown, not chosen: the frame size is the user's). Returns the count. */
#define TB_PLAN_MAX_ENCODINGS 32
TB_API int tb_plan_default_encodings(int short_side, struct tb_plan_encoding *out);

struct tb_plan_opts {
    const char *const *srcs;      /* borrowed: source videos (prep's inputs) */
    int n_srcs;
    const char *ann_path;         /* borrowed: EPIC-Kitchens-100 CSV; rows whose video id is
                                     the stem of a source are the clip windows */
    int n_frames;                 /* frames per clip: 4 (W1) or 16 (W2) */
    int out_size;                 /* clip frame size (square) the loader makes; 0 means 224 */
    double target;                /* clips per CPU-second the choice must reach; > 0 */
    const struct tb_prep_opts *prep; /* borrowed: chunk length, rate, crf, preset, threads and
                                     the short side to choose at; its out_root, gop, tune and
                                     bframes are ignored */
    const char *work_dir;         /* borrowed: scratch for the sample chunks (made, emptied) */
    int n_sample_videos;          /* sources sampled, spread over the list; 0 means 4 */
    double sample_seconds;        /* seconds from the start of each; 0 means 3 */
    int n_clips;                  /* clips drawn from the CSV for the counts; 0 means 4000 */
    int n_calib_clips;            /* clips the loader makes to calibrate the per-clip cost, as
                                     bench-load makes them (2 workers); 0 means 320. It counts
                                     the process's CPU time: run nothing else in it meanwhile */
    uint64_t seed;
    const struct tb_plan_encoding *encodings; /* borrowed; NULL: tb_plan_default_encodings */
    int n_encodings;
    const volatile int *cancel;   /* borrowed, may be NULL: stop with TB_ECANCELED */
};

struct tb_plan_row {
    struct tb_plan_encoding enc;
    int eligible;             /* at the short side asked for (others are shown only) */
    double mb_per_hour;       /* chunk bytes of the sample, per hour of video */
    double frames_per_clip;   /* frames the reader decodes per clip (returned frames) */
    double keys_per_clip;     /* of those, keyframes */
    double opens_per_clip;    /* chunk files opened per clip */
    double key_us, ref_us;    /* CPU microseconds per keyframe, per other decoded frame */
    double skip_fraction;     /* of the non-key frames, the disposable ones (skipped unless
                                 wanted; 0 without B-frames) */
    double tails_per_clip;    /* decoding runs per clip: each ends with `delay` frames decoded
                                 past the wanted one, which the decoder holds back */
    int delay;                /* the decoder's reordering delay (0 without B-frames) */
    double clip_us;           /* predicted CPU microseconds per clip */
    double clips_per_core;    /* 1e6 / clip_us */
    int meets;                /* eligible and clips_per_core >= target */
};

struct tb_plan {
    struct tb_plan_row *rows;
    int n_rows;
    int chosen;               /* the eligible row of fewest bytes that meets the target; -1 */
    double open_us;           /* CPU microseconds per chunk opened (measured) */
    double overhead_us;       /* per clip besides decoding and opening: crop, scale, convert,
                                 seeks, the loader's batching (calibrated on the loader) */
    int calib_row;            /* the row the overhead was calibrated on */
    int n_actions;            /* CSV rows over the sources */
    int n_videos;             /* sources with at least one row */
    int n_sample_videos;
    double sample_seconds;
    double seconds;           /* wall time of tb_plan_make */
};

/* Measure and predict. Errors: TB_EINVAL for a bad target or workload, or a CSV with no row
 * naming any source (the message names the CSV and a video id it has); a source prep cannot
 * read fails with prep's error naming it. On failure *out is NULL. */
TB_API int tb_plan_make(struct tb_plan **out, const struct tb_plan_opts *opts);
TB_API void tb_plan_free(struct tb_plan **p);

/* The counting rule of the reader, for one clip on chunks of chunk_frames frames with a
 * keyframe every gop frames from each chunk's start: per chunk touched, one open; for each
 * wanted frame (frames ascending, repeats allowed), decode on from where the decoder is
 * unless a keyframe lies between (or it is past the frame), else from the keyframe before it;
 * a non-key frame nobody wants counts 1 - skip_fraction (disposable ones are skipped).
 * Adds to *frames, *keys, *opens, and *tails (runs: the decoder stops after a wanted frame
 * because the next needs a seek, another chunk, or none is left). */
TB_API void tb_plan_count_clip(const int64_t *frames, int n, int64_t chunk_frames, int gop,
                               double skip_fraction, double *n_frames_out, double *keys,
                               double *opens, double *tails);

/* The clips tb_plan_make counts: n_clips of n_frames each (ascending within a clip) into
 * out[n_clips * n_frames], drawn as bench-load draws them (an action uniformly, AVION's
 * segment sampling with jitter over its window) from rows whose video is one of the
 * n_videos names (stems), each with n_frames_video[i] frames at fps_num/fps_den.
 * video_of[c] (may be NULL) gets the clip's video. Returns the number of usable rows (0:
 * none; nothing drawn). */
TB_API int tb_plan_draw_clips(const char *ann_path, const char *const *names,
                              const int64_t *n_frames_video, int n_videos, int fps_num,
                              int fps_den, int n_frames, int n_clips, uint64_t seed,
                              int64_t *out, int *video_of);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_PREP_PLAN_H */
