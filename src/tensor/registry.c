/* src/tensor/registry.c - the backends by name: one list (TBI_BACKEND_LIST) gives the names of
 * this build's backends and how each opens and closes; opening by name with its options, and
 * the query of which ops a backend has for which dtypes. A new backend registers here, with
 * one line and its open/close prototypes, and its sources in CMakeLists.txt: no backend's own
 * files change (docs/DEVELOPING.md, "Adding a backend"). Not here: any op.
 * Tests: tests/test_backend.c. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "tensor/backend.h"

/* Each backend's open (fills name, device, ops and ctx of a zeroed tbi_backend; 0 or a
 * negative TB_E* with the message, having freed what it made) and close (NULL: nothing to
 * free; called on a backend that opened); the CPU's, tbi_cpu_open, is in backend.h. */
int tbi_guard_open(tbi_backend *be); /* src/tensor/cpu/backend_guard.c */
void tbi_guard_close(tbi_backend *be);
#ifdef TB_HAVE_CUDA_EMU
int tbi_cuda_emu_open(tbi_backend *be); /* src/tensor/cuda/emu/backend_emu.cpp */
void tbi_cuda_emu_close(tbi_backend *be);
#define TBI_BACKEND_CUDA_EMU(X) X("cuda-emu", tbi_cuda_emu_open, tbi_cuda_emu_close)
#else
#define TBI_BACKEND_CUDA_EMU(X)
#endif
#ifdef TB_HAVE_CUDA_REAL
int tbi_cuda_open(tbi_backend *be); /* src/tensor/cuda/backend.cu, by nvcc */
void tbi_cuda_close(tbi_backend *be);
#define TBI_BACKEND_CUDA(X) X("cuda", tbi_cuda_open, tbi_cuda_close)
#else
#define TBI_BACKEND_CUDA(X)
#endif

/* X(name, open, close): every backend of this build, the default first. */
#define TBI_BACKEND_LIST(X)                                                                        \
    X("cpu", tbi_cpu_open, NULL)                                                                   \
    X("cpu-guarded", tbi_guard_open, tbi_guard_close)                                              \
    TBI_BACKEND_CUDA_EMU(X)                                                                        \
    TBI_BACKEND_CUDA(X)

const char *const tbi_backend_names[] = {
#define TBI_BACKEND_NAME(name, open, close) name,
    TBI_BACKEND_LIST(TBI_BACKEND_NAME)
#undef TBI_BACKEND_NAME
        NULL};

static const struct {
    const char *name;
    int (*open)(tbi_backend *be);
    void (*close)(tbi_backend *be);
} backends[] = {
#define TBI_BACKEND_ENTRY(name, open, close) {name, open, close},
    TBI_BACKEND_LIST(TBI_BACKEND_ENTRY)
#undef TBI_BACKEND_ENTRY
};
enum { N_BACKENDS = sizeof(backends) / sizeof(backends[0]) };

/* The process's default options (tb_backend_set_share). */
static atomic_int share_default;

void tb_backend_set_share(int on)
{
    atomic_store(&share_default, on != 0);
}

int tbi_backend_open_opts(tbi_backend **out, const char *name, const struct tbi_backend_opts *opts)
{
    *out = NULL;
    if (!name || !name[0])
        name = backends[0].name;
    int k = 0;
    while (k < N_BACKENDS && strcmp(name, backends[k].name))
        k++;
    if (k == N_BACKENDS) {
        char known[128] = "";
        for (int i = 0; i < N_BACKENDS; i++)
            snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s", i ? ", " : "",
                     backends[i].name);
        return tbi_err(TB_EUNSUPPORTED, "no backend '%s' in this build (%s)", name, known);
    }
    tbi_backend *be = tbi_calloc(1, sizeof(*be));
    if (!be)
        return tbi_err(TB_ENOMEM, "out of memory");
    int rc = backends[k].open(be);
    if (rc < 0) {
        free(be);
        return rc;
    }
    be->name = backends[k].name;
    tbi_backend_fill(be);
    be->share = opts ? opts->share != 0 : atomic_load(&share_default);
    *out = be;
    return 0;
}

int tbi_backend_open(tbi_backend **out, const char *name)
{
    return tbi_backend_open_opts(out, name, NULL);
}

int tb_backend_probe(const char *name)
{
    tbi_backend *be = NULL;
    int rc = tbi_backend_open(&be, name);
    tbi_backend_close(&be);
    return rc;
}

void tbi_backend_close(tbi_backend **pbe)
{
    if (!pbe || !*pbe)
        return;
    for (int k = 0; k < N_BACKENDS; k++)
        if (!strcmp((*pbe)->name, backends[k].name) && backends[k].close)
            backends[k].close(*pbe);
    free(*pbe);
    *pbe = NULL;
}

/* 1 if op is one of TBI_OP_BF16_LIST's. */
static int takes_bf16(int op)
{
    switch (op) {
#define TBI_OP_CASE(name) case TBI_OP_##name:
        TBI_OP_BF16_LIST(TBI_OP_CASE)
#undef TBI_OP_CASE
        return 1;
    default:
        return 0;
    }
}

const char *tbi_op_name(int op)
{
    static const char *const names[] = {
#define TBI_OP_NAME(name, params, args) #name,
        TBI_OP_LIST(TBI_OP_NAME)
#undef TBI_OP_NAME
    };
    return op >= 0 && op < TBI_OP_N ? names[op] : "?";
}

/* 1 if be's table has op. */
static int has_op(const struct tbi_ops *ops, int op)
{
    switch (op) {
#define TBI_OP_CASE(name, params, args)                                                            \
    case TBI_OP_##name:                                                                            \
        return ops->name != NULL;
        TBI_OP_LIST(TBI_OP_CASE)
#undef TBI_OP_CASE
    default:
        return 0;
    }
}

/* The stand-in of each op a backend leaves out: a clear error naming both (every op's first
 * parameter is its backend). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define TBI_OP_MISSING(op, params, args)                                                           \
    static int missing_##op params                                                                 \
    {                                                                                              \
        return tbi_err(TB_EUNSUPPORTED, "the %s backend has no %s op", be->name, #op);             \
    }
TBI_OP_LIST(TBI_OP_MISSING)
#undef TBI_OP_MISSING
#pragma GCC diagnostic pop

void tbi_backend_fill(tbi_backend *be)
{
    be->own = be->ops;
    be->filled = *be->ops;
#define TBI_OP_FILL(name, params, args)                                                            \
    if (!be->filled.name)                                                                          \
        be->filled.name = missing_##name;
    TBI_OP_LIST(TBI_OP_FILL)
#undef TBI_OP_FILL
    be->ops = &be->filled;
}

int tbi_backend_supports(const tbi_backend *be, int op, int dt)
{
    if (!be || !be->ops || op < 0 || op >= TBI_OP_N ||
        (dt != TB_DTYPE_F32 && dt != TB_DTYPE_BF16) || !has_op(be->own ? be->own : be->ops, op))
        return 0;
    if (be->dtypes)
        return (be->dtypes[op] >> dt) & 1;
    return dt == TB_DTYPE_F32 || takes_bf16(op);
}
