/* src/metrics/cls_internal.h - what the classification metrics (cls_metrics.c) share with the
 * classifier's evaluation (src/train/cls_eval.c): the softmax both average views with, so the
 * two give the same bits. Not public. */
#ifndef TUBELET_METRICS_CLS_INTERNAL_H
#define TUBELET_METRICS_CLS_INTERNAL_H

/* p (n) = softmax(z (n)) in double precision, the maximum subtracted so exp cannot overflow;
 * p may be z. */
void tbi_softmax_f64(const double *z, int n, double *p);

#endif /* TUBELET_METRICS_CLS_INTERNAL_H */
