/* src/core/mem.c - allocations of the big training buffers (parameters, gradients, optimizer
 * moments, activations) on 2 MB boundaries, with transparent huge pages asked for where the
 * kernel gives them only on request (Linux, THP "madvise"): the products and the attention
 * walk rows kilobytes apart, a 4 KB page each, and miss the TLB for it. Smaller ones are
 * 64-byte aligned (a cache line; the AVX-512 kernels' aligned loads). Freed with free().
 * Tests: every test that trains (tests/test_vit.c, tests/test_train.c). */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/internal.h"

#define HUGE_PAGE ((size_t)2 << 20)

void *tbi_malloc(size_t bytes)
{
    return tbi_fault(TBI_FAULT_ALLOC) ? NULL : malloc(bytes);
}

void *tbi_calloc(size_t n, size_t size)
{
    return tbi_fault(TBI_FAULT_ALLOC) ? NULL : calloc(n, size);
}

void *tbi_realloc(void *p, size_t bytes)
{
    return tbi_fault(TBI_FAULT_ALLOC) ? NULL : realloc(p, bytes);
}

char *tbi_strdup(const char *s)
{
    return tbi_fault(TBI_FAULT_ALLOC) ? NULL : strdup(s);
}

void *tbi_alloc_big(size_t bytes)
{
    if (tbi_fault(TBI_FAULT_ALLOC))
        return NULL;
    if (bytes < HUGE_PAGE)
        return aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
    void *p = NULL;
    size_t len = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (posix_memalign(&p, HUGE_PAGE, len) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE); /* a hint: without it, small pages */
#endif
    return p;
}

void *tbi_alloc_zero_lazy(size_t bytes)
{
    if (tbi_fault(TBI_FAULT_ALLOC))
        return NULL;
    char *p = calloc(1, bytes ? bytes : 1);
#ifdef MADV_NOHUGEPAGE
    if (p && bytes >= HUGE_PAGE) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        uintptr_t lo = ((uintptr_t)p + page - 1) / page * page;
        uintptr_t hi = ((uintptr_t)p + bytes) / page * page;
        if (hi > lo)
            madvise((void *)lo, hi - lo, MADV_NOHUGEPAGE); /* with THP "always" */
    }
#endif
    return p;
}

void *tbi_calloc_big(size_t n, size_t size)
{
    if (size && n > (size_t)-1 / size)
        return NULL;
    void *p = tbi_alloc_big(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

uint64_t tbi_host_mem_available(void)
{
    unsigned long long kb = 0;
    char line[128];
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return kb                      ? (uint64_t)kb * 1024
           : pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size
                                   : UINT64_MAX;
}
