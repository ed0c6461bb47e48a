/* src/metrics/mir_internal.h - what the retrieval metrics (mir.c) share with the relevant
 * captions of training (mir_captions.c): the check that annotations carry EK-100's classes
 * and narrations, and the relevancy of one clip and one sentence, so both compute the same
 * bits. Not public. */
#ifndef TUBELET_METRICS_MIR_INTERNAL_H
#define TUBELET_METRICS_MIR_INTERNAL_H

#include "tubelet/data.h"

/* 0, or TB_EINVAL naming the first item without a verb class and noun set, or without a
 * narration. */
int tbi_mir_check_epic(const struct tb_annotations *ann);

/* EK-100's caption relevancy of clip v and the sentence carried by item t: the mean of the
 * verb IoU (0 or 1) and the IoU of their noun sets, in double precision as JPoSE's NumPy. */
double tbi_mir_relevancy_of(const struct tb_ann_item *v, const struct tb_ann_item *t);

#endif /* TUBELET_METRICS_MIR_INTERNAL_H */
