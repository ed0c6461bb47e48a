/* src/train/optim.c - AdamW, gradient clipping and the learning-rate schedule (train.h).
 * Tests: tests/test_vit.c (three AdamW steps against PyTorch's). */
#include <math.h>
#include <stdlib.h>

#include "core/internal.h"
#include "tensor/ops.h"
#include "tubelet/train.h"

int tb_adamw_init(struct tb_adamw *opt, tb_vit *m)
{
    opt->n = tb_vit_n_floats(m);
    opt->m = tbi_calloc_big((size_t)opt->n, sizeof(float));
    opt->v = tbi_calloc_big((size_t)opt->n, sizeof(float));
    opt->step = 0;
    if (!opt->m || !opt->v) {
        tb_adamw_free(opt);
        return tbi_err(TB_ENOMEM, "out of memory for the optimizer state");
    }
    return 0;
}

void tb_adamw_free(struct tb_adamw *opt)
{
    free(opt->m);
    free(opt->v);
    opt->m = opt->v = NULL;
}

void tb_adamw_update(struct tb_adamw *opt, tb_vit *m, float grad_scale)
{
    float *base = tb_vit_params(m);
    opt->step++;
    for (int i = 0; i < tb_vit_n_params(m); i++) {
        const struct tb_param *p = tb_vit_param(m, i);
        size_t off = (size_t)(p->data - base);
        tbi_ops_cpu.adamw(p->data, p->grad, grad_scale, opt->m + off, opt->v + off,
                          (size_t)p->n, opt->lr, opt->beta1, opt->beta2, opt->eps,
                          p->decay ? opt->weight_decay : 0.0f, opt->step);
    }
}

double tb_grad_norm(tb_vit *m)
{
    double ss = 0;
    for (int i = 0; i < tb_vit_n_grad_spans(m); i++) {
        int64_t n;
        const float *g = tb_vit_grad_span(m, i, &n);
        ss += tbi_ops_cpu.sum_squares(g, (size_t)n);
    }
    return sqrt(ss);
}

float tb_clip_factor(double norm, double max_norm)
{
    return max_norm > 0 && norm > max_norm ? (float)(max_norm / (norm + 1e-6)) : 1.0f;
}

float tb_lr_schedule(int64_t step, int64_t total, int64_t warmup, float base_lr, float min_lr)
{
    if (warmup > 0 && step < warmup)
        return base_lr * (float)(step + 1) / (float)warmup;
    int64_t span = total - warmup;
    if (span <= 0)
        return base_lr;
    double t = (double)(step - warmup) / (double)span;
    if (t > 1)
        t = 1;
    return (float)(min_lr + 0.5 * (base_lr - min_lr) * (1 + cos(3.14159265358979323846 * t)));
}
