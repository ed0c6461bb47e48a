/* src/data/ann_internal.h - where an annotation item's video lies under a root, shared by the
 * dataset (src/data/dataset.c) and the statistics' missing-video check (src/data/ann_stats.c),
 * so the two cannot disagree. Not public API. */
#ifndef TUBELET_DATA_ANN_INTERNAL_H
#define TUBELET_DATA_ANN_INTERNAL_H

#include <stddef.h>

/* ROOT/<video>.<ext> (EPIC, narration); Kinetics (kinetics != 0): ROOT/<video>, or the video
 * as written when it is absolute or root is "". 0, or TB_ERANGE when buf is too small. */
int tbi_ann_video_path(char *buf, size_t size, const char *root, const char *ext, int kinetics,
                       const char *video);

#endif /* TUBELET_DATA_ANN_INTERNAL_H */
