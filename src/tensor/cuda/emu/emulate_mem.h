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

#include <algorithm>
#include <utility>
#include <vector>

enum emu_place { EMU_PLACE_END, EMU_PLACE_START };
static emu_place emu_placement = EMU_PLACE_END;

struct emu_alloc {
    unsigned char *map; /* guard page, data pages, guard page */
    size_t map_bytes;
    unsigned char *p;
    size_t bytes;
    long id;
    int tracked; /* device memory: its writes are checked per block (shared memory is not) */
};

static std::vector<emu_alloc> emu_allocs;
static long emu_n_allocs;
/* Where the current block runs, for the fault report (emulate.h sets them). */
static char emu_where[192] = "outside any kernel";

/* p through p + bytes inside one device allocation. */
static inline int emu_in_device(const void *p, size_t bytes)
{
    const unsigned char *c = (const unsigned char *)p;
    for (const emu_alloc &e : emu_allocs)
        if (c >= e.p && c + bytes <= e.p + e.bytes)
            return 1;
    return 0;
}

static size_t emu_page(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

static int emu_track_fault(unsigned char *a);

static void emu_segv(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    unsigned char *a = (unsigned char *)si->si_addr;
    if (emu_track_fault(a))
        return; /* a block's first write to a page of device memory: the write goes on */
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
    e.tracked = 1;
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

/* ---- the writes of a launch, block by block ------------------------------------------------
 * On a GPU the blocks of a launch run in any order, at once: a location two blocks write with
 * plain stores holds whichever came last (a lost update where both added to it). Here blocks
 * run one after another, which hides that, so each block's writes are found and compared:
 * during a launch the data pages of device memory are read-only; a block's first write to a
 * page faults, the handler keeps a copy of the page as it was and lets the write go on; after
 * the block, the 2-byte units of those pages that changed are its writes. A unit a different
 * block of the same launch wrote is an error naming both blocks, the allocation and the byte,
 * unless an atomic wrote it (atomicAdd marks its units: they are exempt). Then the pages are
 * read-only again. Not seen: a value written twice to the same bytes (no change), a read of
 * what another block writes (reads do not fault), races inside a block (threads run one at a
 * time). */
struct emu_dirty {
    unsigned char *page;
    size_t snap; /* its copy's offset in emu_snaps */
};

static int emu_tracking;
static std::vector<emu_dirty> emu_dirty_pages;
static std::vector<unsigned char> emu_snaps;
static std::vector<std::pair<uintptr_t, std::vector<uint32_t>>> emu_owner_pages;
static std::vector<uintptr_t> emu_atomic_units;
static long emu_n_tracked_writes; /* units checked, over all launches: the tests see it ran */

enum { EMU_MAX_DIRTY = 4096 };

static void emu_track_protect(int prot)
{
    const size_t page = emu_page();
    for (const emu_alloc &e : emu_allocs)
        if (e.tracked)
            mprotect(e.map + page, e.map_bytes - 2 * page, prot);
}

/* In the fault handler: a write to a read-only page of device memory during a launch. */
static int emu_track_fault(unsigned char *a)
{
    if (!emu_tracking || emu_dirty_pages.size() >= EMU_MAX_DIRTY)
        return 0;
    const size_t page = emu_page();
    for (const emu_alloc &e : emu_allocs)
        if (e.tracked && a >= e.map + page && a < e.map + e.map_bytes - page) {
            unsigned char *pg = (unsigned char *)((uintptr_t)a & ~(uintptr_t)(page - 1));
            const size_t off = emu_dirty_pages.size() * page;
            memcpy(emu_snaps.data() + off, pg, page);
            if (mprotect(pg, page, PROT_READ | PROT_WRITE))
                return 0;
            emu_dirty_pages.push_back(emu_dirty{pg, off});
            return 1;
        }
    return 0;
}

static void emu_track_begin(void)
{
    if (emu_snaps.size() < (size_t)EMU_MAX_DIRTY * emu_page()) {
        emu_snaps.resize((size_t)EMU_MAX_DIRTY * emu_page());
        emu_dirty_pages.reserve(EMU_MAX_DIRTY);
    }
    emu_owner_pages.clear();
    emu_atomic_units.clear();
    emu_dirty_pages.clear();
    emu_track_protect(PROT_READ);
    emu_tracking = 1;
}

static std::vector<uint32_t> &emu_owners_of(uintptr_t page)
{
    for (auto &p : emu_owner_pages)
        if (p.first == page)
            return p.second;
    emu_owner_pages.emplace_back(page, std::vector<uint32_t>(emu_page() / 2, 0));
    return emu_owner_pages.back().second;
}

static const emu_alloc *emu_alloc_of(const unsigned char *a)
{
    for (const emu_alloc &e : emu_allocs)
        if (a >= e.map && a < e.map + e.map_bytes)
            return &e;
    return nullptr;
}

/* After block `block` (linear index) of the launch: its writes against the other blocks'. */
static void emu_track_block(unsigned block, const char *kernel_where)
{
    const size_t page = emu_page();
    for (const emu_dirty &d : emu_dirty_pages) {
        const uint16_t *now = (const uint16_t *)d.page;
        const uint16_t *was = (const uint16_t *)(emu_snaps.data() + d.snap);
        std::vector<uint32_t> *own = nullptr;
        for (size_t u = 0; u < page / 2; u++) {
            if (now[u] == was[u])
                continue;
            const uintptr_t addr = (uintptr_t)d.page + 2 * u;
            if (std::binary_search(emu_atomic_units.begin(), emu_atomic_units.end(), addr))
                continue;
            if (!own)
                own = &emu_owners_of((uintptr_t)d.page);
            emu_n_tracked_writes++;
            const uint32_t other = (*own)[u];
            if (other && other != block + 1) {
                const emu_alloc *e = emu_alloc_of(d.page);
                fprintf(stderr,
                        "emulate: blocks %u and %u of one launch both wrote byte %ld of "
                        "allocation %ld (%zu bytes) with plain stores: on a GPU they run at "
                        "once and one write is lost (an atomic is exempt) (%s)\n",
                        other - 1, block, e ? (long)((unsigned char *)addr - e->p) : -1L,
                        e ? e->id : -1L, e ? e->bytes : (size_t)0, kernel_where);
                abort();
            }
            (*own)[u] = block + 1;
        }
        mprotect(d.page, page, PROT_READ);
    }
    emu_dirty_pages.clear();
}

static void emu_track_end(void)
{
    emu_tracking = 0;
    emu_track_protect(PROT_READ | PROT_WRITE);
    emu_dirty_pages.clear();
}

/* An atomic's target: its 2-byte units are exempt from the check for the rest of the launch
 * (kept sorted: the check looks them up). */
static inline void emu_track_atomic(const void *p, size_t bytes)
{
    if (!emu_tracking)
        return;
    for (size_t i = 0; i < bytes; i += 2) {
        const uintptr_t a = ((uintptr_t)p + i) & ~(uintptr_t)1;
        auto it = std::lower_bound(emu_atomic_units.begin(), emu_atomic_units.end(), a);
        if (it == emu_atomic_units.end() || *it != a)
            emu_atomic_units.insert(it, a);
    }
}

#endif /* TUBELET_TESTS_EMULATE_MEM_H */
