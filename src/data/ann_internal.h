/* src/data/ann_internal.h - where an annotation item's video lies under a root, shared by the
 * dataset (src/data/dataset.c) and the statistics' missing-video check (src/data/ann_stats.c),
 * so the two cannot disagree; the record of skipped and clamped rows, shared by the loader of
 * the file and the dataset's check of its videos; and the rule for windows that run outside
 * their video, shared by that check and the statistics. Not public API. */
#ifndef TUBELET_DATA_ANN_INTERNAL_H
#define TUBELET_DATA_ANN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* ROOT/<video>.<ext> (EPIC, narration); Kinetics (kinetics != 0): ROOT/<video>, or the video
 * as written when it is absolute or root is "". 0, or TB_ERANGE when buf is too small. */
int tbi_ann_video_path(char *buf, size_t size, const char *root, const char *ext, int kinetics,
                       const char *video);

struct tb_annotations;

/* Count row `line` as skipped for message (which names the file and line), and keep it among
 * the first TB_ANN_BAD_KEPT by line (first_error: the first of them). */
void tbi_ann_note_bad(struct tb_annotations *a, int line, const char *message);
/* The same for a row kept whose window is clamped to its video (n_clamped, clamped[]). */
void tbi_ann_note_clamped(struct tb_annotations *a, int line, const char *message);

/* Where a window of seconds runs outside a video of n_frames frames at fps_num/fps_den, as
 * tb_seconds_to_frames rounds it: TBI_PAST_START where its first frame would be before the
 * video's (a negative start), TBI_PAST_END where its end would be past the video's last
 * frame; 0 inside. */
enum { TBI_PAST_START = 1, TBI_PAST_END = 2 };
int tbi_ann_overrun(double start_s, double end_s, int fps_num, int fps_den, int64_t n_frames);
/* Remove the items i with drop[i] != 0 (freed), keeping the others' order. */
void tbi_ann_drop(struct tb_annotations *a, const unsigned char *drop);

#endif /* TUBELET_DATA_ANN_INTERNAL_H */
