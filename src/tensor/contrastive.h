/* src/tensor/contrastive.h - the contrastive losses on host memory, in double
 * (src/tensor/cpu/contrastive.c): the CPU backend's infonce_fwd/infonce_bwd and logit_scale
 * ops run them on its memory, and a model may call them on host features (model.h's
 * tb_clip_infonce and tb_clip_max_margin) without including the CPU backend's private
 * kernels.h. Not here: gathering features across processes (the caller passes all N pairs).
 * Tests: tests/test_clip.c, tests/test_backend.c. */
#ifndef TUBELET_TENSOR_CONTRASTIVE_H
#define TUBELET_TENSOR_CONTRASTIVE_H

#include "tensor/backend.h" /* tbi_infonce_work */

/* The symmetric InfoNCE loss (the op list's infonce_fwd and infonce_bwd) of v, t (N, E): the
 * loss returned, work (tbi_infonce_work(N, E) doubles) kept for the backward, which writes
 * rows [row0, row0 + rows) of dv, dt times mult and *dscale. */
double tbi_infonce_fwd(double *work, const float *v, const float *t, int N, int E, double scale);
void tbi_infonce_bwd(float *dv, float *dt, double *dscale, double *work, int N, int E, double scale,
                     int row0, int rows, float mult);
/* AVION's max-margin ranking loss (model.h's tb_clip_max_margin; N >= 2), returned, its
 * gradients into dv, dt (N, E; either may be NULL); work as infonce's. */
double tbi_max_margin(double *work, const float *v, const float *t, int N, int E, double margin,
                      float *dv, float *dt);
/* CLIP's logit scale: *param (its log) clamped to [0, 4.6052], exp of it returned. */
double tbi_logit_scale(float *param);

#endif /* TUBELET_TENSOR_CONTRASTIVE_H */
