/* src/model/vit_internal.h - what the training code needs of a ViT beyond model.h: its
 * backend, for the optimizer's state and the data-parallel reduction. */
#ifndef TUBELET_MODEL_VIT_INTERNAL_H
#define TUBELET_MODEL_VIT_INTERNAL_H

#include "tensor/backend.h"
#include "tubelet/model.h"

tbi_backend *tbi_vit_backend(tb_vit *m);

#endif /* TUBELET_MODEL_VIT_INTERNAL_H */
