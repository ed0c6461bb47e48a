/* src/tensor/cuda/emu/emulate_cost.h - what each launch on emulate.h's device would cost a GPU,
 * counted as it runs: with TBC_EMU_COST=FILE set when a kernel or cuBLASLt product is queued,
 * one tab-separated line per launch is appended to FILE (columns: EMU_COST_COLUMNS). Counted:
 * global loads and stores through GL_LD / GL_ST (a 16-byte vector is one access), cp.async
 * from global (a load), atomicAdd (an atomic: a read and a write); the bytes moved (a warp
 * access's distinct 32-byte sectors, 32 bytes each, as the memory system moves them: a load
 * all lanes share moves one sector, not 32 copies; an atomic moves its own bytes, lanes one
 * after another), the footprint (distinct bytes read, distinct bytes written: a bitmap per
 * page), sectors and the distinct bytes the warp asked for (req: their ratio is the sector
 * efficiency, at most 1), and mma.sync FLOPs. Not modelled: caches, L2 reuse, bank conflicts,
 * latency (docs/CUDA.md). Unset: nothing is recorded and each access costs one branch.
 * Tests: tests/gpu/cost_emulate.cpp. */
#ifndef TUBELET_EMULATE_COST_H
#define TUBELET_EMULATE_COST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#define EMU_COST_COLUMNS                                                                           \
    "kernel\tgrid\tblock\tsmem\tread_bytes\twrite_bytes\tread_foot\twrite_foot\treq_bytes\t"       \
    "sectors\tflops\tatomics"

/* The k-th load (kind 0), store (1) or atomic (2) of each of a warp's threads: one warp access.
 * Threads number their own accesses of each kind; a lane that skips one (a branch) shifts its
 * later ones, so a divergent kernel's groups mix accesses, as its divergent warps would. */
struct emu_cost_group {
    uint32_t n;
    uint64_t lo[32];  /* each lane's first byte */
    uint32_t len[32]; /* and its length */
};

struct emu_cost_state {
    int on;
    double read, write, req, sectors, flops, atomics;
    std::unordered_map<uintptr_t, std::vector<uint64_t>> rd, wr; /* page -> 4096-bit map */
    std::vector<uint32_t> seq;                  /* per thread x kind: its accesses so far */
    std::vector<std::vector<emu_cost_group>> g; /* per warp x kind: its access groups */
};

static emu_cost_state emu_cost;
static long emu_n_cost_lines;

/* The file named by TBC_EMU_COST, or "" (read at each launch: a program may set it for a
 * part of its run). */
static inline std::string emu_cost_path(void)
{
    const char *p = getenv("TBC_EMU_COST");
    return p ? p : "";
}

static inline void emu_cost_mark(std::unordered_map<uintptr_t, std::vector<uint64_t>> &m,
                                 uintptr_t a, size_t bytes)
{
    std::vector<uint64_t> *v = nullptr;
    uintptr_t last = 0;
    for (size_t i = 0; i < bytes; i++) {
        const uintptr_t b = a + i, page = b >> 12, bit = b & 4095;
        if (!v || page != last) {
            v = &m[page];
            last = page;
            if (v->empty())
                v->assign(64, 0);
        }
        (*v)[bit >> 6] |= 1ull << (bit & 63);
    }
}

static inline double emu_cost_count(const std::unordered_map<uintptr_t, std::vector<uint64_t>> &m)
{
    double n = 0;
    for (const auto &p : m)
        for (uint64_t w : p.second)
            n += __builtin_popcountll(w);
    return n;
}

/* Thread t (of threads) of the current block, lane t % 32 of warp t / 32, accesses bytes at p. */
static void emu_cost_access(int t, const void *p, size_t bytes, int kind)
{
    emu_cost_state &c = emu_cost;
    const uintptr_t a = (uintptr_t)p;
    if (kind != 1)
        emu_cost_mark(c.rd, a, bytes);
    if (kind != 0)
        emu_cost_mark(c.wr, a, bytes);
    if (kind == 2) { /* an atomic: its own read and write */
        c.read += (double)bytes;
        c.write += (double)bytes;
        c.atomics++;
    }
    const uint32_t k = c.seq[(size_t)t * 3 + (size_t)kind]++;
    std::vector<emu_cost_group> &gs = c.g[(size_t)(t / 32) * 3 + (size_t)kind];
    if (gs.size() <= k)
        gs.resize(k + 1, emu_cost_group{0, {0}, {0}});
    emu_cost_group &g = gs[k];
    if (g.n < 32) {
        g.lo[g.n] = a;
        g.len[g.n++] = (uint32_t)bytes;
    }
}

/* A warp access's distinct sectors and distinct bytes (the lanes' ranges merged). */
static void emu_cost_group_count(emu_cost_group &g, double *sectors, double *distinct)
{
    uint64_t sec[64], order[32];
    int ns = 0;
    for (uint32_t i = 0; i < g.n; i++) {
        for (uint64_t s = g.lo[i] >> 5; s <= (g.lo[i] + g.len[i] - 1) >> 5 && ns < 64; s++)
            sec[ns++] = s;
        order[i] = i;
    }
    std::sort(sec, sec + ns);
    *sectors = (double)(std::unique(sec, sec + ns) - sec);
    std::sort(order, order + g.n, [&g](uint64_t x, uint64_t y) { return g.lo[x] < g.lo[y]; });
    uint64_t end = 0;
    *distinct = 0;
    for (uint32_t i = 0; i < g.n; i++) {
        const uint64_t lo = g.lo[order[i]], hi = lo + g.len[order[i]];
        const uint64_t from = lo > end ? lo : end;
        *distinct += hi > from ? (double)(hi - from) : 0;
        end = hi > end ? hi : end;
    }
}

/* A launch of threads threads a block begins (after emu_cost_path said yes). */
static void emu_cost_begin(unsigned threads)
{
    emu_cost_state &c = emu_cost;
    c.on = 1;
    c.read = c.write = c.req = c.sectors = c.flops = c.atomics = 0;
    c.rd.clear();
    c.wr.clear();
    c.g.assign((size_t)(threads + 31) / 32 * 3, std::vector<emu_cost_group>());
}

static void emu_cost_block_begin(unsigned threads)
{
    emu_cost.seq.assign((size_t)threads * 3, 0);
}

/* After a block: each group's distinct sectors, then the groups emptied for the next block. */
static void emu_cost_block_end(void)
{
    emu_cost_state &c = emu_cost;
    for (size_t w = 0; w < c.g.size(); w++) {
        const int kind = (int)(w % 3);
        for (emu_cost_group &g : c.g[w]) {
            if (!g.n)
                continue;
            double sectors, distinct;
            emu_cost_group_count(g, &sectors, &distinct);
            c.sectors += sectors;
            c.req += distinct;
            if (kind == 0)
                c.read += 32 * sectors;
            else if (kind == 1)
                c.write += 32 * sectors;
            g.n = 0;
        }
    }
}

/* The launch's line, appended to the file (a header first where the file is empty). */
static void emu_cost_write(const char *path, const char *kernel, dim3 grid, dim3 block, size_t smem,
                           double read, double write, double read_foot, double write_foot,
                           double req, double sectors, double flops, double atomics)
{
    FILE *f = fopen(path, "a");
    if (!f) {
        fprintf(stderr, "emulate: TBC_EMU_COST: cannot append to %s\n", path);
        return;
    }
    if (ftell(f) == 0)
        fprintf(f, "%s\n", EMU_COST_COLUMNS);
    fprintf(f, "%s\t%u,%u,%u\t%u,%u,%u\t%zu\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\n",
            kernel, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem, read, write, read_foot,
            write_foot, req, sectors, flops, atomics);
    fclose(f);
    emu_n_cost_lines++;
}

static void emu_cost_end(const char *path, const char *kernel, dim3 grid, dim3 block, size_t smem)
{
    emu_cost_state &c = emu_cost;
    c.on = 0;
    emu_cost_write(path, kernel, grid, block, smem, c.read, c.write, emu_cost_count(c.rd),
                   emu_cost_count(c.wr), c.req, c.sectors, c.flops, c.atomics);
    c.rd.clear();
    c.wr.clear();
    c.g.clear();
}

#endif /* TUBELET_EMULATE_COST_H */
