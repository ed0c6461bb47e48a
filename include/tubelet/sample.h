/* include/tubelet/sample.h - which frames a clip takes (absolute frame numbers of a video).
 *   segments: AVION / LaViLa's sampler: split [start, end) into T segments, take each
 *             segment's middle, or in training a uniform draw inside it;
 *   dense:    VideoMAE / Kinetics: T frames at a fixed stride from a start drawn uniformly;
 *   views:    multi-view testing: view v of V takes evenly spaced positions instead of draws.
 * The reader (video.h) maps absolute numbers to chunks. Tests: tests/test_sample.c. */
#ifndef TUBELET_SAMPLE_H
#define TUBELET_SAMPLE_H

#include "tubelet/base.h"
#include "tubelet/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* AVION's get_frame_ids(start, end, T, jitter): segment i spans
 * [round(i*L) + start, min(round((i+1)*L) + start, end)] with L = (end - start - 1) / T
 * (round: half to even, as numpy); jitter draws uniformly in it (inclusive), else its middle
 * (integer mean). rng may be NULL without jitter. end > start. */
TB_API int tb_sample_segments(int64_t start, int64_t end, int n, int jitter, tb_rng *rng,
                              int64_t *out);

/* View v of n_views for segment sampling at test time: position (v + 0.5) / n_views through
 * each segment, so one view is the middle and several spread evenly. */
TB_API int tb_sample_segments_view(int64_t start, int64_t end, int n, int view, int n_views,
                                   int64_t *out);

/* Dense: n frames at stride over a video of n_frames. view < 0: start drawn uniformly from
 * [0, n_frames - span] with span = (n - 1) * stride + 1; view v of n_views: starts evenly
 * spaced over that range (one view: the middle). Frames past the end (short videos) repeat
 * the last frame. */
TB_API int tb_sample_dense(int64_t n_frames, int n, int stride, int view, int n_views,
                           tb_rng *rng, int64_t *out);

/* AVION's dense sampling (avion/data/kinetics_dataset.py, its VideoMAE pretraining): view < 0,
 * n frames at stride from a start drawn uniformly from [0, n_frames - (n + 1) * stride) (0
 * where the video is not longer), each frame moved by its own uniform draw from [0, stride),
 * frame numbers past the end wrapped to the start (modulo n_frames); view v of n_views: the
 * starts evenly spaced over that range, no moves. */
TB_API int tb_sample_dense_jitter(int64_t n_frames, int n, int stride, int view, int n_views,
                                 tb_rng *rng, int64_t *out);

/* A time window in seconds to frames at fps (num/den): start rounds to the nearest frame,
 * end rounds up, as AVION does; clamped to [0, n_frames]. */
TB_API void tb_seconds_to_frames(double start_s, double end_s, int fps_num, int fps_den,
                                 int64_t n_frames, int64_t *start, int64_t *end);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_SAMPLE_H */
