/* src/tensor/cpu/step.c - a training step's numbers on the backend (backend.h's struct
 * tbi_step_stats): the micro-batches' loss, the gradient's sum of squares, the non-finite
 * check and clipping factor, and the optimizers' updates that read that factor and flag in
 * backend memory, so the host learns of a non-finite step when it next reads the struct, not
 * by waiting inside every step. The arithmetic is the host loop's of before, operation for
 * operation (the same bits). Tests: tests/test_ops.c, tests/test_backend.c, tests/test_train.c. */
#include <math.h>

#include "tensor/backend.h"
#include "tensor/cpu/kernels.h"

void tbi_step_loss(struct tbi_step_stats *st, const float *loss, int K)
{
    st->loss += *loss / (float)K;
}

/* The factor of a global-norm clip (train.h's tb_clip_factor: the same expression). */
static float clip_factor(double norm, double max_norm)
{
    return max_norm > 0 && norm > max_norm ? (float)(max_norm / (norm + 1e-6)) : 1.0f;
}

void tbi_step_check(struct tbi_step_stats *st, int span, int fused, double max_norm, int K,
                    int64_t step, int64_t epoch, int64_t batch)
{
    if (st->bad)
        return; /* the first non-finite step's record stays; no update runs again */
    enum tbi_bad bad = TBI_BAD_NONE;
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
            st->scale = clip_factor(st->norm, max_norm) / (float)K;
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
