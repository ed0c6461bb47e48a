/* src/model/vit_internal.h - what the training code and larger models (MAE: mae.c) need of
 * a ViT beyond model.h: its backend, a ViT inside another model's registry, and its device
 * buffers. */
#ifndef TUBELET_MODEL_VIT_INTERNAL_H
#define TUBELET_MODEL_VIT_INTERNAL_H

#include "model/block.h"
#include "model/params.h"
#include "tensor/backend.h"
#include "tubelet/model.h"

tbi_backend *tbi_vit_backend(tb_vit *m);

/* A ViT on be (borrowed) whose parameters join reg (borrowed) under prefix ("encoder."), as
 * its own gradient spans; the owner allocates reg, then calls tbi_vit_ready. */
int tbi_vit_open_in(tb_vit **out, const struct tb_vit_config *c, tbi_backend *be,
                    struct tb_params *reg, const char *prefix);
int tbi_vit_ready(tb_vit *m);
/* Device buffers: the features of the last forward, their gradient (for
 * tbi_vit_backward_dev, which starts from it), and the last forward's patches (B * Np,
 * 3 TU P P; every patch, in patchify's layout; valid until the next input). */
float *tbi_vit_feat(tb_vit *m);
float *tbi_vit_dfeat(tb_vit *m);
const float *tbi_vit_patches(tb_vit *m);
int tbi_vit_backward_dev(tb_vit *m);
/* tb_vit_plan, with the gradient spans no block hosts placed in spare's regions where they
 * fit, and the float video (when the plan has no room of its own for it) and every patch
 * (with keep: tbi_vit_patches) there too: memory of a larger model that holds nothing from
 * this ViT's input (tb_vit_set_clips) to the larger model's own forward after this one's, nor
 * from this ViT's backward on (the MAE's decoder, which reads the patches first). The
 * gradients so placed live until the next input. */
int tbi_vit_plan_spare(tb_vit *m, int B, int64_t *bytes_out, struct tbi_spare *spare);
/* What of the planned activations holds nothing once the backward is done - the block
 * inputs, the backward's scratch and each set's tail past the gradients it hosts - as
 * regions into sp (p and n of depth + TBI_VIT_SPARE_EXTRA entries, the caller's), for
 * gradients written after this ViT's backward. */
enum { TBI_VIT_SPARE_EXTRA = 3 }; /* block inputs, two runs of scratch */
void tbi_vit_spare(const tb_vit *m, struct tbi_spare *sp);

/* VideoMAE's get_sinusoid_encoding_table (n, D): angle = p / 10000^(2 (j / 2) / D), sine on
 * even j, cosine on odd j; into host memory, or into new backend memory (*out). */
void tbi_sincos_table(float *host, int n, int D);
int tbi_sincos_upload(tbi_backend *be, float **out, int n, int D);

#endif /* TUBELET_MODEL_VIT_INTERNAL_H */
