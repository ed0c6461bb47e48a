/* src/model/params.h - the parameter registry's inside (model.h has its public face): a
 * model lists each parameter once - name, shape, decay, initialisation, gradient span - and
 * that one table drives the parameter block's allocation on the backend, initialisation,
 * loading, the optimizer, the gradient norm, the data-parallel reduction and checkpoints.
 * Parameters are consecutive in one block of backend memory; gradients come in spans of
 * consecutive parameters, each span's memory placed by the model (a span can live in
 * activation space its backward is done with). Tests: tests/test_vit.c, tests/test_backend.c. */
#ifndef TUBELET_MODEL_PARAMS_H
#define TUBELET_MODEL_PARAMS_H

#include "tensor/backend.h"
#include "tubelet/model.h"

struct tb_params {
    tbi_backend *be;            /* borrowed from the model */
    struct tb_param *p;
    int n, cap;
    int64_t n_floats;
    float *data;                /* backend: n_floats, parameters in order */
    /* Gradient spans: span s holds the gradients of parameters [first[s], first[s + 1]), at
     * offsets [off[s], off[s + 1]) of the block; home[s] is where the model put them. */
    int n_spans, cap_spans;
    int *first;
    int64_t *off;
    float **home;
    /* Fused updates (tb_params_fuse): spans not hosted share one buffer. The backward hands
     * each complete span to done (tb_params_fuse, tb_params_on_span), where one is set. */
    int fused;
    int (*done)(void *ctx, int span);
    void *done_ctx;
};

/* Start a new gradient span: the parameters added next belong to it. */
int tbi_params_span(struct tb_params *r);
/* Add a parameter named prefix + name (n_dims dims of shape); its index, or TB_ENOMEM. */
int tbi_params_add(struct tb_params *r, const char *prefix, const char *name, enum tb_init init,
                   int n_dims, const int64_t *shape);
/* Allocate the parameter block (once, after the last add). */
int tbi_params_alloc(struct tb_params *r);
void tbi_params_free(struct tb_params *r);

/* Backend pointers of parameter i and of its gradient (once the spans have homes). */
static inline float *tbi_param_data(const struct tb_params *r, int i)
{
    return r->data + r->p[i].offset;
}
float *tbi_param_grad(const struct tb_params *r, int i);
/* Span s: its floats and its gradients' home. */
static inline int64_t tbi_span_floats(const struct tb_params *r, int s)
{
    return r->off[s + 1] - r->off[s];
}
/* A backward's word that gradient span s is complete: handed on to the span hook
 * (tb_params_fuse, tb_params_on_span; with fused updates its buffer may be another span's
 * next); else nothing. */
int tbi_span_done(const struct tb_params *r, int s);
/* TB_EINVAL naming what, when the gradients are not kept (fused updates). */
int tbi_params_check_kept(const struct tb_params *r, const char *what);

#endif /* TUBELET_MODEL_PARAMS_H */
