/* src/tensor/cpu/backend_guard.c - "cpu-guarded", a test backend that proves the backend
 * boundary: the CPU ops themselves, on memory that is mapped PROT_NONE except while one of
 * its ops runs. Any read or write of backend memory from outside an op (a model, optimizer,
 * checkpoint or trainer touching a parameter, gradient or activation directly, as only a
 * device could not) is a segmentation fault in the test that does it, not a wrong answer on
 * a GPU later. Every op opens all regions, runs the CPU op, and closes them again: slow
 * (two mprotect calls per region and op), for tests only. One thread calls ops at a time.
 * On it the step's planner (src/model/plan.c, tbi_plan_tick) also fills each planned buffer
 * with NaN when its last declared tick is over, so a model that declares a life too short
 * computes NaN at once (tests/test_plan.c plants one).
 * Tests: tests/test_backend.c, tests/test_vit.c, tests/test_train.c (the same results as
 * "cpu"). */
#define _DEFAULT_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/internal.h"
#include "tensor/backend.h"

struct region {
    void *p;
    size_t len;
};

struct guard {
    struct region *r;
    int n, cap;
    struct tbi_ops inner;  /* the CPU ops, with alloc and free of mapped regions */
    struct tbi_ops outer;  /* guard_ops, less the ops inner leaves out: this backend's table */
};

static void protect_all(struct guard *g, int prot)
{
    for (int i = 0; i < g->n; i++)
        if (mprotect(g->r[i].p, g->r[i].len, prot) != 0)
            tbi_assert_fail("mprotect of a guarded region", __FILE__, __LINE__);
}

static size_t page_round(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes ? bytes : 1) + page - 1 - ((bytes ? bytes : 1) + page - 1) % page;
}

static int guard_alloc_region(tbi_backend *be, size_t bytes, void **out)
{
    struct guard *g = be->ctx;
    *out = NULL;
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 16;
        struct region *r = tbi_realloc(g->r, sizeof(*r) * (size_t)cap);
        if (!r)
            return tbi_err(TB_ENOMEM, "out of memory");
        g->r = r;
        g->cap = cap;
    }
    size_t len = page_round(bytes);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return tbi_err(TB_ENOMEM, "out of memory: %zu MB of %s memory", bytes >> 20, be->name);
    g->r[g->n++] = (struct region){p, len};
    *out = p;
    return 0;
}

static int guard_free_region(tbi_backend *be, void *p)
{
    struct guard *g = be->ctx;
    if (!p)
        return 0;
    for (int i = 0; i < g->n; i++)
        if (g->r[i].p == p) {
            munmap(p, g->r[i].len);
            g->r[i] = g->r[--g->n];
            return 0;
        }
    tbi_assert_fail("free of memory the guarded backend did not allocate", __FILE__, __LINE__);
    return TB_EINVAL;
}

/* Every op: open, the CPU op (or the region allocator), close. */
#define GUARD_OP(name, params, args)                                                           \
    static int guard_##name params                                                             \
    {                                                                                          \
        struct guard *g = be->ctx;                                                             \
        protect_all(g, PROT_READ | PROT_WRITE);                                                \
        int rc = g->inner.name args;                                                           \
        protect_all(g, PROT_NONE);                                                             \
        return rc;                                                                             \
    }
TBI_OP_LIST(GUARD_OP)
#undef GUARD_OP

static const struct tbi_ops guard_ops = {
#define TBI_OP_ENTRY(name, params, args) .name = guard_##name,
    TBI_OP_LIST(TBI_OP_ENTRY)
#undef TBI_OP_ENTRY
};

/* The CPU backend, opened, then wrapped: an op the CPU's table leaves out stays out. */
int tbi_guard_open(tbi_backend *be)
{
    TBI_TRY(tbi_cpu_open(be));
    struct guard *g = tbi_calloc(1, sizeof(*g));
    if (!g)
        return tbi_err(TB_ENOMEM, "out of memory");
    be->name = "cpu-guarded";
    g->inner = *be->ops;
    g->outer = guard_ops;
#define GUARD_LEAVE_OUT(name, params, args)                                                    \
    if (!g->inner.name)                                                                        \
        g->outer.name = NULL;
    TBI_OP_LIST(GUARD_LEAVE_OUT)
#undef GUARD_LEAVE_OUT
    g->inner.alloc = guard_alloc_region;
    g->inner.alloc_zero = guard_alloc_region; /* fresh mappings: zero */
    g->inner.free = guard_free_region;
    be->ctx = g;
    be->ops = &g->outer;
    return 0;
}

void tbi_guard_close(tbi_backend *be)
{
    struct guard *g = be->ctx;
    if (!g)
        return;
    for (int i = 0; i < g->n; i++)
        munmap(g->r[i].p, g->r[i].len);
    free(g->r);
    free(g);
    be->ctx = NULL;
}
