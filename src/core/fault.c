/* src/core/fault.c - fault injection for tests (core/internal.h): the k-th allocation, file
 * open or file write after a test arms it fails as out of memory or a refusing disk would, so
 * a test can sweep k over an operation and see every failure path run. Unarmed, a call site
 * costs one relaxed atomic load. Tests: tests/test_faults.c. */
#include <errno.h>
#include <stdatomic.h>

#include "core/internal.h"

static atomic_int armed;                       /* any kind armed */
static _Atomic int64_t target[TBI_FAULT_N];    /* the call that fails (1-based); 0: none */
static _Atomic int64_t calls[TBI_FAULT_N];     /* calls since arming */

void tbi_fault_arm(enum tbi_fault kind, int64_t k)
{
    atomic_store(&calls[kind], 0);
    atomic_store(&target[kind], k > 0 ? k : 0);
    int any = 0;
    for (int i = 0; i < TBI_FAULT_N; i++)
        any |= atomic_load(&target[i]) > 0;
    atomic_store(&armed, any);
}

void tbi_fault_count(enum tbi_fault kind)
{
    atomic_store(&calls[kind], 0);
    atomic_store(&target[kind], INT64_MAX); /* counted, never reached */
    atomic_store(&armed, 1);
}

int64_t tbi_fault_calls(enum tbi_fault kind)
{
    return atomic_load(&calls[kind]);
}

int tbi_fault(enum tbi_fault kind)
{
    if (!atomic_load_explicit(&armed, memory_order_relaxed))
        return 0;
    int64_t n = atomic_fetch_add(&calls[kind], 1) + 1;
    return n == atomic_load(&target[kind]);
}

FILE *tbi_fopen(const char *path, const char *mode)
{
    if (tbi_fault(TBI_FAULT_OPEN)) {
        errno = EMFILE;
        return NULL;
    }
    return fopen(path, mode);
}

size_t tbi_fwrite(const void *p, size_t size, size_t n, FILE *f)
{
    if (tbi_fault(TBI_FAULT_WRITE)) {
        errno = ENOSPC;
        return 0;
    }
    return fwrite(p, size, n, f);
}
