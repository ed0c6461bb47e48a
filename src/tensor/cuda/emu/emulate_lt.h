/* src/tensor/cuda/emu/emulate_lt.h - cuBLASLt on the emulated device: the functions of
 * tensor/cuda/lt.h's table, with cuBLASLt's signatures, so matmul.cu's descriptor code runs here
 * as on a GPU. Every call is checked against what cublasLt.h and the cuBLAS guide document,
 * and the product is computed from the descriptors, never from the caller's own record:
 * - descriptors: compute type CUBLAS_COMPUTE_32F with an f32 scale (the only one emulated);
 *   every attribute set is one it knows, with its documented size; transposes N or T;
 *   epilogues DEFAULT, BIAS and BGRADB (others are not emulated: NOT_SUPPORTED);
 * - types (cublasLtMatmul's table for COMPUTE_32F): A and B of one type, f32 with an f32 D,
 *   bf16 or f16 with D of their type or f32; C as D; the bias, and the bias gradient, of D's
 *   type (BIAS_DATA_TYPE, default -1: D's) - a bf16 bias into an f32 D is refused;
 * - shapes: op(A) m x k, op(B) k x n, C and D m x n from the layouts; ld >= rows;
 * - alignment: an algorithm from the heuristic assumes each of A, B, C and D as aligned as
 *   the preference's MIN_ALIGNMENT_*_BYTES said (default 256) and the bias pointer as aligned
 *   as the one on the descriptor when it was asked (NULL: 256); cublasLtMatmul with a pointer
 *   less aligned is NOT_SUPPORTED, as the kernel that needs it would not run. The algorithm
 *   also carries its problem: used for another shape, type or epilogue, INVALID_VALUE;
 * - memory: every matrix's extent ((cols - 1) ld + rows elements) and the bias inside one
 *   device allocation; the workspace no bigger than the preference allowed; the stream one
 *   that exists.
 * A refusal prints one "emulate: cuBLASLt: ..." line (the emulator's own voice) and returns
 * the status cuBLASLt documents. The product: fp32 sums over k in order, alpha and beta, the
 * epilogue, D rounded to its type (nearest even); queued on the stream as the library's kernel
 * would be. Not modelled: which algorithm, its sum order and split-k, the pointer mode device,
 * batches, the other epilogues and types. */
#ifndef TUBELET_EMULATE_LT_H
#define TUBELET_EMULATE_LT_H

#include <stdarg.h>

#include <cublasLt.h>

#include "emulate.h"
#include "tensor/cuda/lt.h"

enum { EMU_LT_MAGIC = 0x4c54454d };

struct emu_lt_desc {
    int magic;
    int32_t transa, transb;
    uint32_t epilogue;
    const void *bias;
    int32_t bias_type; /* -1: D's */
};

struct emu_lt_layout {
    int magic;
    int type;
    uint64_t rows, cols;
    int64_t ld;
};

struct emu_lt_pref {
    int magic;
    uint64_t max_ws;
    uint32_t align[4]; /* A, B, C, D */
};

struct emu_lt_handle {
    int magic;
};

/* The algorithm the heuristic hands out: data[0] the magic, [1..4] the alignments A, B, C, D
 * assumed, [5] the bias pointer's, [6] its problem's fingerprint. */
enum { EMU_ALGO_MAGIC = 0x414c474f };

static cublasStatus_t emu_lt_refuse(cublasStatus_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static cublasStatus_t emu_lt_refuse(cublasStatus_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emu_say("cuBLASLt", fmt, ap);
    va_end(ap);
    return st;
}

static size_t emu_lt_size(int type)
{
    return type == CUDA_R_32F ? 4 : type == CUDA_R_16BF || type == CUDA_R_16F ? 2 : 0;
}

static const char *emu_lt_type_name(int type)
{
    return type == CUDA_R_32F ? "32F" : type == CUDA_R_16BF ? "16BF" : type == CUDA_R_16F ? "16F"
                                                                                          : "?";
}

static uint32_t emu_lt_align_of(const void *p)
{
    const uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a & (al - 1)))
        al /= 2;
    return al;
}

/* The emulated object behind a cuBLASLt handle, descriptor, layout or preference, or NULL
 * where it is not one (never created, or destroyed). */
template <class T, class H> static T *emu_lt_of(H h)
{
    T *e = reinterpret_cast<T *>(h);
    return e && e->magic == EMU_LT_MAGIC ? e : nullptr;
}

/* Destroys what a create made (NULL: nothing to do). */
template <class T, class H> static cublasStatus_t emu_lt_destroy(H h, const char *what)
{
    T *e = emu_lt_of<T>(h);
    if (!e)
        return h ? emu_lt_refuse(CUBLAS_STATUS_INVALID_VALUE, "destroy of a bad %s", what)
                 : CUBLAS_STATUS_SUCCESS;
    e->magic = 0;
    delete e;
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t emu_ltCreate(cublasLtHandle_t *h)
{
    emu_lt_handle *e = new emu_lt_handle{EMU_LT_MAGIC};
    *h = reinterpret_cast<cublasLtHandle_t>(e);
    return CUBLAS_STATUS_SUCCESS;
}

static emu_lt_handle *emu_lt_h(cublasLtHandle_t h)
{
    return emu_lt_of<emu_lt_handle>(h);
}

static cublasStatus_t emu_ltDestroy(cublasLtHandle_t h)
{
    return emu_lt_destroy<emu_lt_handle>(h, "handle");
}

static cublasStatus_t emu_ltMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                             cudaDataType_t scale)
{
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F)
        return emu_lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                             "compute type %d with scale %d (only COMPUTE_32F with an f32 scale "
                             "is emulated)",
                             (int)compute, (int)scale);
    emu_lt_desc *e = new emu_lt_desc{EMU_LT_MAGIC, CUBLAS_OP_N, CUBLAS_OP_N,
                                     CUBLASLT_EPILOGUE_DEFAULT, nullptr, -1};
    *d = reinterpret_cast<cublasLtMatmulDesc_t>(e);
    return CUBLAS_STATUS_SUCCESS;
}

static emu_lt_desc *emu_lt_d(cublasLtMatmulDesc_t d)
{
    return emu_lt_of<emu_lt_desc>(d);
}

static cublasStatus_t emu_ltMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    return emu_lt_destroy<emu_lt_desc>(d, "descriptor");
}

/* Copies an attribute of exactly its documented size. */
static int emu_lt_take(void *dst, size_t want, const void *buf, size_t size, const char *name)
{
    if (size != want || !buf) {
        emu_lt_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s given %zu bytes (it is %zu)", name, size,
                      want);
        return 0;
    }
    memcpy(dst, buf, want);
    return 1;
}

static cublasStatus_t emu_ltMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                   cublasLtMatmulDescAttributes_t a,
                                                   const void *buf, size_t size)
{
    emu_lt_desc *e = emu_lt_d(d);
    if (!e)
        return emu_lt_refuse(CUBLAS_STATUS_INVALID_VALUE, "set attribute on a bad descriptor");
    const cublasStatus_t bad = CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
        int32_t op;
        if (!emu_lt_take(&op, sizeof(op), buf, size, "TRANSA/TRANSB"))
            return bad;
        if (op != CUBLAS_OP_N && op != CUBLAS_OP_T)
            return emu_lt_refuse(bad, "transpose %d on real matrices (N or T)", op);
        (a == CUBLASLT_MATMUL_DESC_TRANSA ? e->transa : e->transb) = op;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
        uint32_t epi;
        if (!emu_lt_take(&epi, sizeof(epi), buf, size, "EPILOGUE"))
            return bad;
        if (epi != CUBLASLT_EPILOGUE_DEFAULT && epi != CUBLASLT_EPILOGUE_BIAS &&
            epi != CUBLASLT_EPILOGUE_BGRADB)
            return emu_lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u is not emulated", epi);
        e->epilogue = epi;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        return emu_lt_take(&e->bias, sizeof(e->bias), buf, size, "BIAS_POINTER")
                   ? CUBLAS_STATUS_SUCCESS
                   : bad;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        return emu_lt_take(&e->bias_type, sizeof(e->bias_type), buf, size, "BIAS_DATA_TYPE")
                   ? CUBLAS_STATUS_SUCCESS
                   : bad;
    default:
        return emu_lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "descriptor attribute %d is not emulated",
                             (int)a);
    }
}

static cublasStatus_t emu_ltMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type,
                                               uint64_t rows, uint64_t cols, int64_t ld)
{
    if (!emu_lt_size(type))
        return emu_lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matrix type %d is not emulated",
                             (int)type);
    emu_lt_layout *e = new emu_lt_layout{EMU_LT_MAGIC, (int)type, rows, cols, ld};
    *l = reinterpret_cast<cublasLtMatrixLayout_t>(e);
    return CUBLAS_STATUS_SUCCESS;
}

static emu_lt_layout *emu_lt_l(cublasLtMatrixLayout_t l)
{
    return emu_lt_of<emu_lt_layout>(l);
}

static cublasStatus_t emu_ltMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    return emu_lt_destroy<emu_lt_layout>(l, "layout");
}

static cublasStatus_t emu_ltMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    emu_lt_pref *e = new emu_lt_pref{EMU_LT_MAGIC, 0, {256, 256, 256, 256}};
    *p = reinterpret_cast<cublasLtMatmulPreference_t>(e);
    return CUBLAS_STATUS_SUCCESS;
}

static emu_lt_pref *emu_lt_p(cublasLtMatmulPreference_t p)
{
    return emu_lt_of<emu_lt_pref>(p);
}

static cublasStatus_t emu_ltMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    return emu_lt_destroy<emu_lt_pref>(p, "preference");
}

static cublasStatus_t emu_ltMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                         cublasLtMatmulPreferenceAttributes_t a,
                                                         const void *buf, size_t size)
{
    emu_lt_pref *e = emu_lt_p(p);
    const cublasStatus_t bad = CUBLAS_STATUS_INVALID_VALUE;
    if (!e)
        return emu_lt_refuse(bad, "set attribute on a bad preference");
    switch (a) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        return emu_lt_take(&e->max_ws, sizeof(e->max_ws), buf, size, "MAX_WORKSPACE_BYTES")
                   ? CUBLAS_STATUS_SUCCESS
                   : bad;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
        uint32_t v;
        if (!emu_lt_take(&v, sizeof(v), buf, size, "MIN_ALIGNMENT_*_BYTES"))
            return bad;
        e->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    default:
        return emu_lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute %d is not emulated",
                             (int)a);
    }
}

/* The problem a heuristic answer is for (shapes, types, transposes, epilogue): FNV-1a. */
static uint64_t emu_lt_fingerprint(const emu_lt_desc *d, const emu_lt_layout *const l[4])
{
    uint64_t h = 1469598103934665603ull;
    const uint64_t v[] = {(uint64_t)d->transa, (uint64_t)d->transb, d->epilogue,
                          (uint64_t)(int64_t)d->bias_type};
    auto mix = [&h](uint64_t x) {
        for (int i = 0; i < 8; i++, x >>= 8)
            h = (h ^ (x & 0xff)) * 1099511628211ull;
    };
    for (uint64_t x : v)
        mix(x);
    for (int i = 0; i < 4; i++) {
        mix((uint64_t)l[i]->type);
        mix(l[i]->rows);
        mix(l[i]->cols);
        mix((uint64_t)l[i]->ld);
    }
    return h;
}

/* The documented rules for one problem; 0, or the status with its line printed. */
static cublasStatus_t emu_lt_problem(const emu_lt_desc *d, const emu_lt_layout *const l[4])
{
    const cublasStatus_t inval = CUBLAS_STATUS_INVALID_VALUE, nosup = CUBLAS_STATUS_NOT_SUPPORTED;
    const emu_lt_layout *A = l[0], *B = l[1], *C = l[2], *D = l[3];
    const char *name[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; i++)
        if (l[i]->ld < (int64_t)std::max<uint64_t>(1, l[i]->rows))
            return emu_lt_refuse(inval, "%s's leading dimension %lld < its rows %llu", name[i],
                                 (long long)l[i]->ld, (unsigned long long)l[i]->rows);
    const uint64_t m = D->rows, n = D->cols;
    const uint64_t a_m = d->transa == CUBLAS_OP_N ? A->rows : A->cols;
    const uint64_t k = d->transa == CUBLAS_OP_N ? A->cols : A->rows;
    const uint64_t b_k = d->transb == CUBLAS_OP_N ? B->rows : B->cols;
    const uint64_t b_n = d->transb == CUBLAS_OP_N ? B->cols : B->rows;
    if (a_m != m || b_k != k || b_n != n || C->rows != m || C->cols != n)
        return emu_lt_refuse(inval,
                             "shapes do not agree: op(A) %llux%llu, op(B) %llux%llu, C %llux%llu, "
                             "D %llux%llu (transa %d, transb %d)",
                             (unsigned long long)a_m, (unsigned long long)k,
                             (unsigned long long)b_k, (unsigned long long)b_n,
                             (unsigned long long)C->rows, (unsigned long long)C->cols,
                             (unsigned long long)m, (unsigned long long)n, d->transa, d->transb);
    if (A->type != B->type)
        return emu_lt_refuse(nosup, "A is %s but B %s", emu_lt_type_name(A->type),
                             emu_lt_type_name(B->type));
    if (C->type != D->type)
        return emu_lt_refuse(nosup, "C is %s but D %s", emu_lt_type_name(C->type),
                             emu_lt_type_name(D->type));
    const int ok_d = A->type == CUDA_R_32F ? D->type == CUDA_R_32F
                                           : D->type == A->type || D->type == CUDA_R_32F;
    if (!ok_d)
        return emu_lt_refuse(nosup, "A and B %s with D %s: not in COMPUTE_32F's type table",
                             emu_lt_type_name(A->type), emu_lt_type_name(D->type));
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        const int bias_t = d->bias_type < 0 ? D->type : d->bias_type;
        if (bias_t != D->type)
            return emu_lt_refuse(nosup,
                                 "a %s bias with a %s D: the bias (and its gradient) has D's "
                                 "type (cublasLt.h, BIAS_DATA_TYPE)",
                                 emu_lt_type_name(bias_t), emu_lt_type_name(D->type));
    }
    return CUBLAS_STATUS_SUCCESS;
}

static int emu_lt_layouts(const cublasLtMatrixLayout_t in[4], const emu_lt_layout *out[4])
{
    for (int i = 0; i < 4; i++)
        if (!(out[i] = emu_lt_l(in[i])))
            return 0;
    return 1;
}

static cublasStatus_t emu_ltMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t *res,
    int *count)
{
    *count = 0;
    const cublasLtMatrixLayout_t in[4] = {a, b, c, dl};
    const emu_lt_layout *l[4];
    emu_lt_desc *d = emu_lt_d(desc);
    emu_lt_pref *p = emu_lt_p(pref);
    if (!emu_lt_h(h) || !d || !p || !emu_lt_layouts(in, l) || requested < 1 || !res)
        return emu_lt_refuse(CUBLAS_STATUS_INVALID_VALUE, "heuristic with a bad handle, "
                                                          "descriptor, layout or preference");
    const cublasStatus_t st = emu_lt_problem(d, l);
    if (st)
        return st;
    for (int i = 0; i < 4; i++)
        if (p->align[i] < emu_lt_size(l[i]->type) || (p->align[i] & (p->align[i] - 1)))
            return emu_lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                                 "no algorithm for a matrix aligned to %u bytes (type %s)",
                                 p->align[i], emu_lt_type_name(l[i]->type));
    memset(res, 0, sizeof(*res));
    uint64_t *algo = res->algo.data;
    algo[0] = EMU_ALGO_MAGIC;
    for (int i = 0; i < 4; i++)
        algo[1 + i] = p->align[i];
    algo[5] = emu_lt_align_of(d->bias);
    algo[6] = emu_lt_fingerprint(d, l);
    res->workspaceSize = 0;
    res->state = CUBLAS_STATUS_SUCCESS;
    res->wavesCount = 1;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static float emu_lt_at(const void *p, int type, uint64_t r, uint64_t c, int64_t ld)
{
    const size_t i = r + c * (size_t)ld;
    return type == CUDA_R_32F ? ((const float *)p)[i] : __bfloat162float(((const bf16 *)p)[i]);
}

static void emu_lt_put(void *p, int type, size_t i, float v)
{
    if (type == CUDA_R_32F)
        ((float *)p)[i] = v;
    else
        ((bf16 *)p)[i] = __float2bfloat16(v);
}

static size_t emu_lt_extent(const emu_lt_layout *l)
{
    return l->cols ? ((l->cols - 1) * (uint64_t)l->ld + l->rows) * emu_lt_size(l->type) : 0;
}

/* The product as one launch of the cost count (emulate_cost.h): 2 m n k FLOPs; A, B (and C, the
 * bias) read once and D (and the bias gradient) written once, the least cuBLASLt moves (its
 * tiles re-read A and B from L2, not counted); sectors as if fully coalesced; the grid
 * assumed: 128 x 128 tiles of D, 256 threads. */
static void emu_lt_cost(const char *path, uint64_t m, uint64_t n, uint64_t k,
                        const emu_lt_layout &a, const emu_lt_layout &b, const emu_lt_layout *c,
                        const emu_lt_layout &d, int epi)
{
    const double ea = (double)(a.rows * a.cols * emu_lt_size(a.type));
    const double eb = (double)(b.rows * b.cols * emu_lt_size(b.type));
    const double ed = (double)(d.rows * d.cols * emu_lt_size(d.type));
    const double ec = c ? (double)(c->rows * c->cols * emu_lt_size(c->type)) : 0;
    const int has_bias = epi == CUBLASLT_EPILOGUE_BIAS, has_bgrad = epi == CUBLASLT_EPILOGUE_BGRADB;
    const double bias = (double)((has_bias ? m : n) * emu_lt_size(d.type));
    const double rd = ea + eb + ec + (has_bias ? bias : 0), wr = ed + (has_bgrad ? bias : 0);
    char name[96];
    snprintf(name, sizeof(name), "lt_matmul %llux%llux%llu%s", (unsigned long long)m,
             (unsigned long long)n, (unsigned long long)k,
             has_bias ? " bias" : has_bgrad ? " bgradb" : "");
    const dim3 grid((unsigned)((m + 127) / 128), (unsigned)((n + 127) / 128));
    emu_cost_write(path, name, grid, dim3(256), 0, rd, wr, rd, wr, rd + wr, (rd + wr) / 32,
                   2.0 * (double)m * (double)n * (double)k, 0);
}

static cublasStatus_t emu_ltMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                   const void *alpha, const void *A, cublasLtMatrixLayout_t a,
                                   const void *B, cublasLtMatrixLayout_t b, const void *beta,
                                   const void *C, cublasLtMatrixLayout_t c, void *D,
                                   cublasLtMatrixLayout_t dl, const cublasLtMatmulAlgo_t *algo,
                                   void *ws, size_t ws_bytes, cudaStream_t stream)
{
    const cublasLtMatrixLayout_t in[4] = {a, b, c, dl};
    const emu_lt_layout *l[4];
    const emu_lt_desc *d = emu_lt_d(desc);
    const cublasStatus_t inval = CUBLAS_STATUS_INVALID_VALUE;
    if (!emu_lt_h(h) || !d || !emu_lt_layouts(in, l) || !alpha || !beta)
        return emu_lt_refuse(inval, "matmul with a bad handle, descriptor, layout or scalar");
    if (!algo || algo->data[0] != EMU_ALGO_MAGIC)
        return emu_lt_refuse(inval, "matmul without an algorithm from the heuristic");
    const cublasStatus_t st = emu_lt_problem(d, l);
    if (st)
        return st;
    if (algo->data[6] != emu_lt_fingerprint(d, l))
        return emu_lt_refuse(inval, "an algorithm used for a problem other than the one the "
                                    "heuristic chose it for");
    const float al = *(const float *)alpha, be = *(const float *)beta;
    const void *ptr[4] = {A, B, be != 0 ? C : D, D};
    const char *name[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; i++) {
        if (emu_lt_align_of(ptr[i]) < algo->data[1 + i])
            return emu_lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                                 "%s at %p is %u-byte aligned, the algorithm assumes %llu (the "
                                 "preference's MIN_ALIGNMENT_%s_BYTES)",
                                 name[i], ptr[i], emu_lt_align_of(ptr[i]),
                                 (unsigned long long)algo->data[1 + i], name[i]);
        if (!emu_in_device(ptr[i], emu_lt_extent(l[i])))
            return emu_lt_refuse(inval, "%s (%llux%llu, ld %lld, %s) is not inside one device "
                                        "allocation",
                                 name[i], (unsigned long long)l[i]->rows,
                                 (unsigned long long)l[i]->cols, (long long)l[i]->ld,
                                 emu_lt_type_name(l[i]->type));
    }
    const emu_lt_layout *Dl = l[3];
    const uint64_t m = Dl->rows, n = Dl->cols;
    const uint64_t k = d->transa == CUBLAS_OP_N ? l[0]->cols : l[0]->rows;
    const int epi = (int)d->epilogue;
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
        const size_t want = (epi == CUBLASLT_EPILOGUE_BIAS ? m : n) * emu_lt_size(Dl->type);
        if (!d->bias || !emu_in_device(d->bias, want))
            return emu_lt_refuse(inval, "the %s pointer %p is not %zu bytes of device memory",
                                 epi == CUBLASLT_EPILOGUE_BIAS ? "bias" : "bias gradient", d->bias,
                                 want);
        if (emu_lt_align_of(d->bias) < algo->data[5])
            return emu_lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                                 "the bias pointer %p is %u-byte aligned, the algorithm assumes "
                                 "%llu (the descriptor's pointer when the heuristic was asked)",
                                 d->bias, emu_lt_align_of(d->bias),
                                 (unsigned long long)algo->data[5]);
    }
    if (ws_bytes && (!ws || !emu_in_device(ws, ws_bytes)))
        return emu_lt_refuse(inval, "a workspace of %zu bytes that is not device memory",
                             ws_bytes);
    const int si = emu_stream_index(stream);
    if (si >= (int)emu_streams.size() || (si >= 0 && !emu_streams[(size_t)si].live))
        return emu_lt_refuse(inval, "a stream that does not exist");
    const emu_lt_layout La = *l[0], Lb = *l[1], Lc = *l[2], Ld = *l[3];
    const int ta = d->transa == CUBLAS_OP_T, tb = d->transb == CUBLAS_OP_T;
    const void *bias = d->bias;
    const std::string cost = emu_cost_path();
    emu_enqueue(stream, [=] {
        if (!cost.empty())
            emu_lt_cost(cost.c_str(), m, n, k, La, Lb, be != 0 ? &Lc : nullptr, Ld, epi);
        snprintf(emu_where, sizeof(emu_where), "in the emulated cuBLASLt product %llux%llux%llu",
                 (unsigned long long)m, (unsigned long long)n, (unsigned long long)k);
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                float acc = 0;
                for (uint64_t q = 0; q < k; q++) {
                    const float x = ta ? emu_lt_at(A, La.type, q, i, La.ld)
                                       : emu_lt_at(A, La.type, i, q, La.ld);
                    const float y = tb ? emu_lt_at(B, Lb.type, j, q, Lb.ld)
                                       : emu_lt_at(B, Lb.type, q, j, Lb.ld);
                    acc += x * y;
                }
                float v = al * acc;
                if (be != 0)
                    v += be * emu_lt_at(C, Lc.type, i, j, Lc.ld);
                if (epi == CUBLASLT_EPILOGUE_BIAS)
                    v += emu_lt_at(bias, Ld.type, i, 0, 1);
                emu_lt_put(D, Ld.type, (size_t)(i + j * (uint64_t)Ld.ld), v);
            }
        if (epi == CUBLASLT_EPILOGUE_BGRADB)
            for (uint64_t j = 0; j < n; j++) {
                float acc = 0;
                for (uint64_t q = 0; q < k; q++)
                    acc += tb ? emu_lt_at(B, Lb.type, j, q, Lb.ld)
                              : emu_lt_at(B, Lb.type, q, j, Lb.ld);
                emu_lt_put((void *)bias, Ld.type, (size_t)j, acc);
            }
        snprintf(emu_where, sizeof(emu_where), "outside any kernel");
    });
    return CUBLAS_STATUS_SUCCESS;
}

static const char *emu_ltGetStatusName(cublasStatus_t st)
{
    switch (st) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
        return "CUBLAS_STATUS_(other)";
    }
}

static size_t emu_ltGetVersion(void)
{
    return CUBLAS_VERSION;
}

/* The table matmul.cu calls through (tensor/cuda/lt.h), in its order. */
static const struct tbc_lt emu_lt_table = {
    emu_ltCreate,
    emu_ltDestroy,
    emu_ltMatmulDescCreate,
    emu_ltMatmulDescDestroy,
    emu_ltMatmulDescSetAttribute,
    emu_ltMatrixLayoutCreate,
    emu_ltMatrixLayoutDestroy,
    emu_ltMatmulPreferenceCreate,
    emu_ltMatmulPreferenceDestroy,
    emu_ltMatmulPreferenceSetAttribute,
    emu_ltMatmulAlgoGetHeuristic,
    emu_ltMatmul,
    emu_ltGetStatusName,
    emu_ltGetVersion,
};

#endif /* TUBELET_EMULATE_LT_H */
