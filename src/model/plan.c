/* src/model/plan.c - the step's memory planner (plan.h): declarations, placement by
 * lifetime, the arena. Tests: tests/test_plan.c. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "model/plan.h"

/* Under AddressSanitizer, TUBELET_PLAN=apart leaves a poisoned gap after every buffer: an op
 * that writes past its buffer's end faults there, at once (in a shared plan it would land in
 * another buffer of the same arena, unseen). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif
enum { GAP = 4096 }; /* apart: the bytes after each buffer */

void tbi_plan_clear(struct tbi_plan *p)
{
    if (p->arena) {
        UNPOISON(p->arena, p->peak);
        p->be->ops->free(p->be, p->arena);
    }
    free(p->poison);
    free(p->b);
    *p = (struct tbi_plan){0};
}

void tbi_plan_add(struct tbi_plan *p, const char *name, void *slot, size_t bytes, int first,
                  int last)
{
    *(void **)slot = NULL;
    if (!bytes || p->err)
        return;
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        struct tbi_plan_buf *b = tbi_realloc(p->b, sizeof(*b) * (size_t)cap);
        if (!b) {
            p->err = tbi_err(TB_ENOMEM, "out of memory");
            return;
        }
        p->b = b;
        p->cap = cap;
    }
    TB_ASSERT(first <= last);
    size_t align = TBI_PLAN_ALIGN;
    p->b[p->n++] = (struct tbi_plan_buf){.name = name, .slot = slot,
                                         .bytes = (bytes + align - 1) / align * align,
                                         .n = 1, .live = {{first, last}}};
}

void tbi_plan_grad(struct tbi_plan *p)
{
    if (!p->err && p->n)
        p->b[p->n - 1].grad = 1;
}

/* The most bytes of activations live at one tick. */
static size_t live_acts(const struct tbi_plan *p)
{
    int last = 0;
    for (int i = 0; i < p->n; i++)
        for (int r = 0; r < p->b[i].n; r++)
            last = p->b[i].live[r][1] > last ? p->b[i].live[r][1] : last;
    size_t most = 0;
    for (int t = 0; t <= last; t++) {
        size_t sum = 0;
        for (int i = 0; i < p->n; i++)
            for (int r = 0; r < p->b[i].n && !p->b[i].grad; r++)
                if (p->b[i].live[r][0] <= t && t <= p->b[i].live[r][1]) {
                    sum += p->b[i].bytes;
                    break;
                }
        most = sum > most ? sum : most;
    }
    return most;
}

void tbi_plan_also(struct tbi_plan *p, int first, int last)
{
    if (p->err || !p->n)
        return;
    struct tbi_plan_buf *b = &p->b[p->n - 1];
    TB_ASSERT(b->n < TBI_PLAN_RANGES && first <= last);
    b->live[b->n][0] = first;
    b->live[b->n++][1] = last;
}

/* Whether a and b are live at a common tick. */
static int overlap(const struct tbi_plan_buf *a, const struct tbi_plan_buf *b)
{
    for (int i = 0; i < a->n; i++)
        for (int j = 0; j < b->n; j++)
            if (a->live[i][0] <= b->live[j][1] && b->live[j][0] <= a->live[i][1])
                return 1;
    return 0;
}

/* The placing order: larger first; then the earlier live, then the earlier declared. */
struct key {
    size_t bytes;
    int first, i;
};

static int by_size(const void *x, const void *y)
{
    const struct key *a = x, *b = y;
    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    return a->i < b->i ? -1 : 1;
}

/* A placed buffer's bytes [off, end). */
struct extent {
    size_t off, end;
};

static int by_offset(const void *x, const void *y)
{
    const struct extent *a = x, *b = y;
    return a->off != b->off ? (a->off < b->off ? -1 : 1) : (a->end > b->end) - (a->end < b->end);
}

/* The offset for bytes: the smallest gap between the extents of the placed buffers live
 * beside it (n, sorted by offset) that holds it, else past all of them. */
static size_t best_fit(const struct extent *near, int n, size_t bytes)
{
    size_t at = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
    for (int k = 0; k < n; k++) {
        if (near[k].off > at && near[k].off - at >= bytes && near[k].off - at < best_gap) {
            best = at;
            best_gap = near[k].off - at;
        }
        if (near[k].end > at)
            at = near[k].end;
    }
    return best != SIZE_MAX ? best : at;
}

/* TUBELET_PLAN=apart: every buffer in bytes of its own (nothing shared), the check of the
 * models' declared lifetimes (test_plan: the same bits either way). */
static int apart(void)
{
    const char *e = getenv("TUBELET_PLAN");
    return e && !strcmp(e, "apart");
}

/* Every buffer in bytes of its own, a gap after each. */
static void place_apart(struct tbi_plan *p)
{
    p->apart = 1;
    p->peak = 0;
    for (int i = 0; i < p->n; i++) {
        p->b[i].off = p->peak;
        p->peak += p->b[i].bytes + GAP;
    }
}

int tbi_plan_place(struct tbi_plan *p)
{
    if (p->err)
        return p->err;
    p->acts = live_acts(p);
    if (apart()) {
        place_apart(p);
        return 0;
    }
    size_t n = (size_t)(p->n ? p->n : 1);
    struct key *order = tbi_malloc(sizeof(*order) * n);
    struct extent *near = tbi_malloc(sizeof(*near) * n);
    if (!order || !near) {
        free(order);
        free(near);
        return tbi_err(TB_ENOMEM, "out of memory");
    }
    for (int i = 0; i < p->n; i++)
        order[i] = (struct key){p->b[i].bytes, p->b[i].live[0][0], i};
    qsort(order, (size_t)p->n, sizeof(*order), by_size);
    p->peak = 0;
    for (int k = 0; k < p->n; k++) {
        struct tbi_plan_buf *b = &p->b[order[k].i];
        int m = 0;
        for (int j = 0; j < k; j++) {
            const struct tbi_plan_buf *c = &p->b[order[j].i];
            if (overlap(b, c))
                near[m++] = (struct extent){c->off, c->off + c->bytes};
        }
        qsort(near, (size_t)m, sizeof(*near), by_offset);
        b->off = best_fit(near, m, b->bytes);
        if (b->off + b->bytes > p->peak)
            p->peak = b->off + b->bytes;
    }
    free(order);
    free(near);
    return 0;
}

/* The bytes tbi_plan_tick writes at a time. */
enum { POISON_CHUNK = 1 << 20 };

/* Whether dead buffers are poisoned on be: the guarded test backend's memory, which is there
 * to catch what the design forbids, or any backend's under TUBELET_PLAN_POISON=1. Such a plan
 * is placed apart and starts as NaN: no buffer's bytes are another's, so a read outside a
 * buffer's declared life (before its first tick, after its last) finds NaN, not another
 * buffer's values that happen to be right. */
static int poisons(const tbi_backend *be)
{
    const char *e = getenv("TUBELET_PLAN_POISON");
    return !strcmp(be->name, "cpu-guarded") || (e && !strcmp(e, "1"));
}

/* Whether b is live at tick t. */
static int live_at(const struct tbi_plan_buf *b, int t)
{
    for (int r = 0; r < b->n; r++)
        if (b->live[r][0] <= t && t <= b->live[r][1])
            return 1;
    return 0;
}

int tbi_plan_tick(struct tbi_plan *p, int t)
{
    if (!p || !p->poison || !p->arena)
        return 0;
    for (int i = 0; i < p->n; i++) {
        const struct tbi_plan_buf *b = &p->b[i];
        if (!live_at(b, t) || live_at(b, t + 1))
            continue;
        char *at = (char *)p->arena + b->off;
        for (size_t done = 0; done < b->bytes; done += POISON_CHUNK) {
            size_t n = b->bytes - done < POISON_CHUNK ? b->bytes - done : POISON_CHUNK;
            TBI_TRY(p->be->ops->to_device(p->be, at + done, p->poison, n));
        }
    }
    return 0;
}

int tbi_plan_alloc(struct tbi_plan *p, tbi_backend *be, const char *what, const char *advice)
{
    TB_ASSERT(!p->arena);
    if (poisons(be) && !p->apart)
        place_apart(p);
    uint64_t have = 0;
    TBI_TRY(be->ops->mem_avail(be, &have));
    if (p->peak > have)
        return tbi_err(TB_ENOMEM, "%s need %.2f GB, more than the %.2f GB of %s memory free: %s",
                       what, p->peak / 1e9, have / 1e9, be->name, advice);
    int rc = be->ops->alloc(be, p->peak ? p->peak : 1, &p->arena);
    if (rc < 0)
        return tbi_err(rc, "out of memory for %s (%.2f GB): %s", what, p->peak / 1e9, advice);
    p->be = be;
    if (poisons(be)) {
        if (!(p->poison = tbi_malloc(POISON_CHUNK))) {
            be->ops->free(be, p->arena);
            p->arena = NULL;
            return tbi_err(TB_ENOMEM, "out of memory");
        }
        memset(p->poison, 0xff, POISON_CHUNK);
        for (size_t done = 0; done < p->peak; done += POISON_CHUNK) {
            size_t n = p->peak - done < POISON_CHUNK ? p->peak - done : POISON_CHUNK;
            if ((rc = be->ops->to_device(be, (char *)p->arena + done, p->poison, n)) < 0) {
                be->ops->free(be, p->arena);
                p->arena = NULL;
                return rc;
            }
        }
    }
    for (int i = 0; i < p->n; i++) {
        *(void **)p->b[i].slot = (char *)p->arena + p->b[i].off;
        if (p->apart)
            POISON((char *)p->arena + p->b[i].off + p->b[i].bytes, GAP);
    }
    return 0;
}
