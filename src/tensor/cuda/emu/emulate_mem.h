/* src/tensor/cuda/emu/emulate_mem.h - emulated device memory for emulate.h: emu_malloc stands
 * in for cudaMalloc with what a GPU never gives you, an immediate fault. Each allocation gets
 * pages of its own between two PROT_NONE guard pages and is placed flush against one of them
 * (emu_placement: the end, or the start), so a global read or write past that edge faults at
 * once; the bytes between the other edge and its guard are a canary that emu_free checks, so a
 * write there fails too. Fresh memory is 0xff bytes, a NaN in f32 and bf16 alike: an output
 * no thread wrote shows. A fault is reported with the allocation, the offset and the thread. */
#ifndef TUBELET_TESTS_EMULATE_MEM_H
#define TUBELET_TESTS_EMULATE_MEM_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

enum emu_place { EMU_PLACE_END, EMU_PLACE_START };
static emu_place emu_placement = EMU_PLACE_END;

struct emu_alloc {
    unsigned char *map; /* guard page, data pages, guard page */
    size_t map_bytes;
    unsigned char *p;
    size_t bytes;
    long id;
};

static std::vector<emu_alloc> emu_allocs;
static long emu_n_allocs;
/* Where the current block runs, for the fault report (emulate.h sets them). */
static char emu_where[96] = "outside any kernel";

static size_t emu_page(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

static void emu_segv(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    const unsigned char *a = (const unsigned char *)si->si_addr;
    char msg[320];
    int len = snprintf(msg, sizeof(msg), "emulate: fault at %p %s\n", si->si_addr, emu_where);
    for (const emu_alloc &e : emu_allocs)
        if (a >= e.map && a < e.map + e.map_bytes) {
            const long off = (long)(a - e.p);
            len = snprintf(msg, sizeof(msg),
                           "emulate: fault in the guard page of allocation %ld (%zu bytes): "
                           "byte %ld %s, %s\n",
                           e.id, e.bytes, off, off < 0 ? "before its start" : "past its start",
                           emu_where);
        }
    if (len > 0 && write(2, msg, (size_t)len) < 0)
        len = 0;
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The fault handler, on a stack of its own (a coroutine's may be the one that overflowed). */
static void emu_mem_init(void)
{
    static int done;
    if (done++)
        return;
    static std::vector<char> alt(1 << 16);
    stack_t ss = {};
    ss.ss_sp = alt.data();
    ss.ss_size = alt.size();
    sigaltstack(&ss, nullptr);
    struct sigaction sa = {};
    sa.sa_sigaction = emu_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}

/* bytes of device memory, NaN bytes, flush against a guard page as emu_placement says. Its
 * alignment is then what bytes allows at the end (a 62-byte tensor starts 2-aligned), as a
 * tensor carved from an arena may be: launchers must check what they need. With align (a power
 * of two, cudaMalloc's 256), the start is aligned and the few bytes between the end and the
 * guard page are canary. */
static void *emu_malloc(size_t bytes, size_t align = 1)
{
    emu_mem_init();
    const size_t page = emu_page(), span = (bytes + page - 1) / page * page + (bytes ? 0 : page);
    emu_alloc e;
    e.map_bytes = span + 2 * page;
    void *m =
        mmap(nullptr, e.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return nullptr;
    e.map = (unsigned char *)m;
    if (mprotect(e.map, page, PROT_NONE) || mprotect(e.map + page + span, page, PROT_NONE)) {
        munmap(m, e.map_bytes);
        return nullptr;
    }
    memset(e.map + page, 0xff, span);
    e.bytes = bytes;
    e.p = emu_placement == EMU_PLACE_END ? e.map + page + span - bytes : e.map + page;
    e.p = (unsigned char *)((uintptr_t)e.p & ~(uintptr_t)(align - 1));
    e.id = emu_n_allocs++;
    emu_allocs.push_back(e);
    return e.p;
}

/* Frees what emu_malloc gave (NULL: nothing); 0, or -1 when the canary bytes beside the
 * allocation were written (a store out of bounds on the side without a guard page). The pages
 * are unmapped, so a later use faults. */
static int emu_free(void *p)
{
    if (!p)
        return 0;
    const size_t page = emu_page();
    for (size_t i = 0; i < emu_allocs.size(); i++) {
        emu_alloc e = emu_allocs[i];
        if (e.p != p)
            continue;
        int bad = 0;
        for (unsigned char *c = e.map + page; c < e.map + e.map_bytes - page; c++)
            bad |= (c < e.p || c >= e.p + e.bytes) && *c != 0xff;
        if (bad)
            fprintf(stderr, "emulate: allocation %ld (%zu bytes): a write outside it\n", e.id,
                    e.bytes);
        munmap(e.map, e.map_bytes);
        emu_allocs.erase(emu_allocs.begin() + (long)i);
        return bad ? -1 : 0;
    }
    fprintf(stderr, "emulate: emu_free of %p, which emu_malloc did not give\n", p);
    return -1;
}

#endif /* TUBELET_TESTS_EMULATE_MEM_H */
