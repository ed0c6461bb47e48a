/* src/model/vit_internal.h - what the training code and larger models (MAE: mae.c) need of
 * a ViT beyond model.h: its backend, a ViT inside another model's registry, and its device
 * buffers. */
#ifndef TUBELET_MODEL_VIT_INTERNAL_H
#define TUBELET_MODEL_VIT_INTERNAL_H

#include "model/block.h"
#include "model/params.h"
#include "model/plan.h"
#include "tensor/backend.h"
#include "tubelet/model.h"

tbi_backend *tbi_vit_backend(tb_vit *m);

/* A ViT on be (borrowed) whose parameters join reg (borrowed) under prefix ("encoder."), as
 * its own gradient spans; the owner allocates reg, then calls tbi_vit_ready. */
int tbi_vit_open_in(tb_vit **out, const struct tb_vit_config *c, tbi_backend *be,
                    struct tb_params *reg, const char *prefix);
int tbi_vit_ready(tb_vit *m);
/* Device buffers: the features of the last forward (tb_vit_features': the projection's
 * with CLIP's), their gradient (for tbi_vit_backward_dev, which starts from it), and the last forward's patches (B * Np,
 * 3 TU P P; every patch, in patchify's layout; valid until the next input). */
float *tbi_vit_feat(tb_vit *m);
/* The last forward's loss (backend, 1 float), of a ViT and of a VideoMAE: a training step
 * copies it on the backend (the run given loss NULL reads nothing back). */
float *tbi_vit_loss(tb_vit *m);
float *tbi_mae_loss(tb_mae *m);

/* The dual encoder's step on the backend (no host copies): its towers' last features (B, E;
 * text 0 the video's, 1 the captions'), their gradients' buffers (the caller fills both),
 * this step's logit scale (clamped when learned) and the buffer of the loss's gradient on it
 * (1 double each, the caller fills the second), then both towers' backward and the scale's. */
float *tbi_clip_emb(tb_clip *m, int text);
float *tbi_clip_demb(tb_clip *m, int text);
int tbi_clip_scale(tb_clip *m, double **scale, double **dscale);
int tbi_clip_backward_dev(tb_clip *m);
float *tbi_vit_dfeat(tb_vit *m);
const float *tbi_vit_patches(tb_vit *m);
int tbi_vit_backward_dev(tb_vit *m);
/* Declare the buffers of a step of B clips into p (another model's plan), as tb_vit_plan
 * does its own; once p is allocated, tbi_vit_bind points the block sets into theirs. The
 * gradient spans' homes are buffers of p. */
int tbi_vit_declare(tb_vit *m, int B, struct tbi_plan *p, const struct tbi_ticks *t);
void tbi_vit_bind(tb_vit *m, int B);

/* VideoMAE's get_sinusoid_encoding_table (n, D): angle = p / 10000^(2 (j / 2) / D), sine on
 * even j, cosine on odd j; into host memory, or into new backend memory (*out). */
void tbi_sincos_table(float *host, int n, int D);
int tbi_sincos_upload(tbi_backend *be, float **out, int n, int D);

#endif /* TUBELET_MODEL_VIT_INTERNAL_H */
