/* src/tensor/step_rules.h - a training step's rules on struct tbi_step_stats (backend.h): the
 * micro-batches' loss and the non-finite check with the clipping factor, written once for the
 * CPU backend (src/tensor/cpu/step.c) and the CUDA one (src/tensor/cuda/step.cu, a kernel of
 * one thread), so both apply the same expressions in the same order (TBI_HD: backend.h). */
#ifndef TUBELET_TENSOR_STEP_RULES_H
#define TUBELET_TENSOR_STEP_RULES_H

#include <math.h>

#include "tensor/backend.h"

static inline TBI_HD void tbi_step_loss_rule(struct tbi_step_stats *st, const float *loss, int K)
{
    st->loss += *loss / (float)K;
}

/* The factor of a global-norm clip (train.h's tb_clip_factor: the same expression). */
static inline TBI_HD float tbi_clip_factor_rule(double norm, double max_norm)
{
    return max_norm > 0 && norm > max_norm ? (float)(max_norm / (norm + 1e-6)) : 1.0f;
}

static inline TBI_HD void tbi_step_check_rule(struct tbi_step_stats *st, int span, int fused,
                                              double max_norm, int K, int64_t step, int64_t epoch,
                                              int64_t batch)
{
    if (st->bad)
        return; /* the first non-finite step's record stays; no update runs again */
    int bad = TBI_BAD_NONE;
    if (span >= 0) { /* fused updates: one span, before its update */
        if (!isfinite(st->span_sumsq))
            bad = TBI_BAD_SPAN;
        else
            st->sumsq += st->span_sumsq;
        st->scale = 1.0f;
    } else {
        st->norm = sqrt(st->sumsq);
        if (!fused)
            st->norm /= K; /* the norm of the mean of the micro-batches' gradients */
        if (!isfinite(st->loss))
            bad = TBI_BAD_LOSS;
        else if (!fused && !isfinite(st->norm))
            bad = TBI_BAD_NORM;
        else
            st->scale = tbi_clip_factor_rule(st->norm, max_norm) / (float)K;
    }
    if (bad == TBI_BAD_NONE)
        return;
    st->bad = bad;
    st->bad_span = span;
    st->bad_step = step;
    st->bad_epoch = epoch;
    st->bad_batch = batch;
    st->bad_loss = st->loss;
    st->bad_norm = st->norm;
}

#endif /* TUBELET_TENSOR_STEP_RULES_H */
