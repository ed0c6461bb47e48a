/* src/model/plan.h - the step's memory planner. A model declares every buffer of its step -
 * activations, scratch, gradients - with its size and the ticks at which it is live (its step
 * counted as a sequence of op groups: input, forward, loss, backward, optimizer), and the
 * planner places them all in one arena of backend memory so that no two buffers live at the
 * same tick share a byte. A buffer may be live over two ranges of ticks (scratch that only
 * some blocks use in their forward and backward, one shared set of recomputed activations).
 * Placement: greedy by size with best fit (largest buffer first, each into the smallest gap
 * that buffers live beside it leave; docs/DEVELOPING.md says why). The peak is known before
 * the arena is allocated. On the guarded test backend every buffer is placed apart and is NaN
 * outside its declared life: the arena starts as NaN and each buffer is poisoned again when its
 * last live tick is over (tbi_plan_tick), so a model that reads one before it is written or
 * after its declared life computes NaN at once, not another buffer's bytes or stale ones.
 * Tests: tests/test_plan.c, and every model test through the models. */
#ifndef TUBELET_MODEL_PLAN_H
#define TUBELET_MODEL_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/backend.h"
#include "tubelet/model.h"

enum { TBI_PLAN_RANGES = 2, TBI_PLAN_ALIGN = 256 };

struct tbi_plan_buf {
    const char *name;          /* for the plan's listing */
    void *slot;                /* the address of a pointer of the model's, set to the buffer */
    size_t bytes, off;         /* bytes rounded up to TBI_PLAN_ALIGN */
    int n;                     /* live ranges, each [first, last] ticks */
    int live[TBI_PLAN_RANGES][2];
    int grad;                  /* a gradient span (tbi_plan_grad), not an activation */
};

struct tbi_plan {
    struct tbi_plan_buf *b;
    int n, cap;
    int err;                   /* the first failure while declaring (0: none) */
    size_t peak;               /* the arena's bytes, once placed */
    size_t acts;               /* the most bytes of activations (every buffer but the
                                * gradients) live at one tick, once placed */
    int apart;                 /* every buffer alone, a gap after each: TUBELET_PLAN=apart,
                                * and wherever poison is */
    void *arena;               /* backend memory, once allocated */
    tbi_backend *be;
    unsigned char *poison;     /* 0xff bytes to fill dead buffers with (tbi_plan_tick), on
                                * the guarded backend or under TUBELET_PLAN_POISON=1; NULL
                                * elsewhere */
};

/* Where a tower's step lies on its model's plan (plan.h), in ticks: its forward's first
 * (a ViT's: input, patches, embedding, one per block, head: depth + 4 ticks; a text tower's:
 * embedding, blocks, head), its backward's first (head, one per block from the top,
 * embedding: depth + 2 ticks), the tick its features' gradient arrives (at or before bwd),
 * the last tick that reads every patch (a ViT's: MAE's target reads them) and the
 * optimizer's (end): what a caller reads after the step lives until it. */
struct tbi_ticks {
    int fwd, bwd, grad_in, patches, end;
};
/* Forget every declaration and free the arena (the slots keep stale pointers). */
void tbi_plan_clear(struct tbi_plan *p);
/* Declare a buffer of bytes live from tick first to last (inclusive); its address goes into
 * *slot (a pointer variable of any object type) when the plan is allocated. Zero bytes
 * declare nothing and set *slot to NULL. Failures are kept in p->err. */
void tbi_plan_add(struct tbi_plan *p, const char *name, void *slot, size_t bytes, int first,
                  int last);
/* Declare buf (a pointer variable) as count of its elements, named after itself. */
#define TBI_BUF(p, buf, count, first, last)                                                    \
    tbi_plan_add(p, #buf, &(buf), sizeof(*(buf)) * (size_t)(count), first, last)
/* Mark the buffer declared last as a gradient span (not counted in p->acts). */
void tbi_plan_grad(struct tbi_plan *p);
/* Another live range of the buffer declared last. */
void tbi_plan_also(struct tbi_plan *p, int first, int last);
/* Offsets for every buffer and the peak (p->peak); p->err if a declaration failed. */
int tbi_plan_place(struct tbi_plan *p);
/* The arena of p->peak bytes on be, and every slot set; after tbi_plan_place. TB_ENOMEM
 * when be has not that much memory free, or cannot give it: a message naming what (e.g.
 * "the activations of 8 clips") and the advice (the flags that lower the peak). */
int tbi_plan_alloc(struct tbi_plan *p, tbi_backend *be, const char *what, const char *advice);

/* Tick t of the step is over (all its ops issued): where p->poison, every buffer whose live
 * range ends at t and that is not live at t + 1 is filled with 0xff bytes - NaN as f32, bf16
 * and double, -1 as integers - so that a read past its declared life shows. The models call
 * it after each tick but the step's last, whose buffers the caller reads after the step; a
 * tick never called poisons nothing. 0, or the backend's error. */
int tbi_plan_tick(struct tbi_plan *p, int t);

/* The placed plan's sizes, as the models report them. */
static inline struct tb_plan_bytes tbi_plan_bytes(const struct tbi_plan *p)
{
    struct tb_plan_bytes b = {(int64_t)p->peak, (int64_t)p->acts};
    return b;
}

#endif /* TUBELET_MODEL_PLAN_H */
