/* include/tubelet/train.h - optimisation: AdamW over a model's parameters (PyTorch's update;
 * no decay on biases, norms, position and class embeddings), global gradient-norm clipping,
 * and the learning-rate schedule (linear warmup, cosine decay). Training loops and
 * checkpoints come with `tubelet train`. Tests: tests/test_vit.c. */
#ifndef TUBELET_TRAIN_H
#define TUBELET_TRAIN_H

#include "tubelet/model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tb_adamw {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step;           /* updates done */
    float *m, *v;           /* first and second moments, the model's parameter layout */
    int64_t n;
};

/* Allocate zero moments for m's parameters. Hyper-parameters are the caller's to set. */
TB_API int tb_adamw_init(struct tb_adamw *opt, tb_vit *m);
TB_API void tb_adamw_free(struct tb_adamw *opt);
/* One update of every parameter from the model's gradients, at opt->lr. */
TB_API void tb_adamw_update(struct tb_adamw *opt, tb_vit *m);

/* The global L2 norm of the gradients; when above max_norm (> 0) they are scaled down to it,
 * as torch.nn.utils.clip_grad_norm_. Returns the norm before clipping. */
TB_API double tb_clip_grad_norm(tb_vit *m, double max_norm);

/* Learning rate at step (0-based) of total: linear warmup from 0 over warmup steps, then
 * cosine decay to min_lr. */
TB_API float tb_lr_schedule(int64_t step, int64_t total, int64_t warmup, float base_lr,
                            float min_lr);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_TRAIN_H */
