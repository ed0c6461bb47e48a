/* src/tensor/cuda/matmul.cu - matmul_fwd and matmul_bwd: the row-major products of the op
 * list as column-major products, each described by one record (struct tbc_gemm: cuBLASLt's
 * view: D (m, n) = op(A) (m, k) op(B) (k, n), leading dimensions, operand and result types, the
 * BIAS or BGRADB epilogue, the pointers' alignments). The record becomes cuBLASLt's
 * descriptors through lt.h's table, the same code on both devices: cuBLASLt itself on a GPU,
 * emu/emulate_lt.h's checked cuBLASLt on the emulated device, which computes the product from
 * the descriptors, so a wrong layout, type, leading dimension, epilogue or alignment in the
 * mapping below fails the parity harness here. The algorithm is chosen once per record (the
 * heuristic's first, asked with the real pointers' alignments and the bias pointer on the
 * descriptor) and cached: no heuristic call per step. Operands whose stored type is not the
 * product's (f32 tensors in a bf16 product, as bf16 mode's master weights) are converted into
 * scratch first (rounded as the CPU op rounds them as it reads); the bias, and its gradient,
 * are in D's type (cuBLASLt's rule): a bf16 product into an f32 tensor takes an f32 copy of the
 * bias holding bf16 values; a bf16 product written to an f32 tensor is rounded in place after
 * (the op's contract). */
#include "tensor/cuda/cuda_common.h"
#include "tensor/cuda/lt.h"

enum tbc_epilogue { TBC_EPI_NONE, TBC_EPI_BIAS, TBC_EPI_BGRADB };

struct tbc_gemm {
    int m, n, k;
    int transa, transb;
    int lda, ldb, ldd;
    int ab_dt, d_dt; /* the operands' type (both), the result's: TB_DTYPE_F32 or _BF16 */
    int epilogue;    /* enum tbc_epilogue; the bias (m) or its gradient (n) in d_dt */
    int align[4];    /* A, B, D and the bias: the pointers' alignment in bytes, up to 256 */
};

struct tbc_gemm_cache {
    struct tbc_gemm g;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};

static const char *dt_name(int dt)
{
    return dt == TB_DTYPE_BF16 ? "bf16" : "f32";
}

static cudaDataType_t lt_type(int dt)
{
    return dt == TB_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* The largest power of two up to 256 that divides p's address (NULL: 256). */
static int align_of(const void *p)
{
    int a = 256;
    while (a > 1 && ((uintptr_t)p & (uintptr_t)(a - 1)))
        a /= 2;
    return a;
}

static int lt_failed(tbi_backend *be, const struct tbc_gemm *g, int st, const char *what)
{
    const struct tbc_lt *lt = tbc_ctx_of(be)->api;
    return tbi_err(TB_ECUDA,
                   "%s: cuBLASLt %s failed for a %dx%dx%d product (%s x %s -> %s, epilogue %s, "
                   "alignments %d %d %d %d): %s",
                   be->name, what, g->m, g->n, g->k, dt_name(g->ab_dt), dt_name(g->ab_dt),
                   dt_name(g->d_dt),
                   g->epilogue == TBC_EPI_BIAS     ? "BIAS"
                   : g->epilogue == TBC_EPI_BGRADB ? "BGRADB"
                                                   : "none",
                   g->align[0], g->align[1], g->align[2], g->align[3],
                   lt->status_name((cublasStatus_t)st));
}

static void gemm_entry_free(const struct tbc_lt *lt, struct tbc_gemm_cache *e)
{
    lt->desc_destroy(e->op);
    lt->layout_destroy(e->a);
    lt->layout_destroy(e->b);
    lt->layout_destroy(e->d);
}

/* A plan that failed: its entry (the last) destroyed and dropped, so no later product finds it.
 * Returns rc. */
static int gemm_plan_failed(struct tbc_ctx *c, int rc)
{
    gemm_entry_free(c->api, &c->gemms[--c->n_gemms]);
    return rc;
}

/* The record's descriptors and algorithm, made once per record; bias: the pointer the first
 * product passes (its alignment is the record's). */
static int gemm_plan(tbi_backend *be, const struct tbc_gemm *g, const void *bias,
                     struct tbc_gemm_cache **out)
{
    struct tbc_ctx *c = tbc_ctx_of(be);
    const struct tbc_lt *lt = c->api;
    for (int i = 0; i < c->n_gemms; i++)
        if (!memcmp(&c->gemms[i].g, g, sizeof(*g))) {
            *out = &c->gemms[i];
            return 0;
        }
    if (c->n_gemms == c->cap_gemms) {
        const int cap = c->cap_gemms ? 2 * c->cap_gemms : 16;
        void *p = realloc(c->gemms, sizeof(*c->gemms) * (size_t)cap);
        if (!p)
            return tbi_err(TB_ENOMEM, "out of memory");
        c->gemms = (struct tbc_gemm_cache *)p;
        c->cap_gemms = cap;
    }
    struct tbc_gemm_cache *e = &c->gemms[c->n_gemms];
    memset(e, 0, sizeof(*e));
    e->g = *g;
    c->n_gemms++; /* dropped again if the plan fails */
    const int32_t ta = g->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int32_t tb = g->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const uint32_t epi = g->epilogue == TBC_EPI_BIAS     ? CUBLASLT_EPILOGUE_BIAS
                         : g->epilogue == TBC_EPI_BGRADB ? CUBLASLT_EPILOGUE_BGRADB
                                                         : CUBLASLT_EPILOGUE_DEFAULT;
    const int32_t bias_t = lt_type(g->d_dt);
    const int ar = g->transa ? g->k : g->m, ac = g->transa ? g->m : g->k;
    const int br = g->transb ? g->n : g->k, bc = g->transb ? g->k : g->n;
    int st = lt->desc_create(&e->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    st = st ? st : lt->desc_set(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    st = st ? st : lt->desc_set(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    st = st ? st : lt->desc_set(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    if (g->epilogue != TBC_EPI_NONE) {
        st = st ? st
                : lt->desc_set(e->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t,
                               sizeof(bias_t));
        st = st ? st : lt->desc_set(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    }
    st = st ? st : lt->layout_create(&e->a, lt_type(g->ab_dt), ar, ac, g->lda);
    st = st ? st : lt->layout_create(&e->b, lt_type(g->ab_dt), br, bc, g->ldb);
    st = st ? st : lt->layout_create(&e->d, lt_type(g->d_dt), g->m, g->n, g->ldd);
    if (st)
        return gemm_plan_failed(c, lt_failed(be, g, st, "descriptors"));
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    const uint64_t ws = TBC_LT_WORKSPACE;
    const uint32_t al[4] = {(uint32_t)g->align[0], (uint32_t)g->align[1], (uint32_t)g->align[2],
                            (uint32_t)g->align[2]}; /* A, B, C (= D), D */
    st = lt->pref_create(&pref);
    st = st ? st : lt->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    for (int i = 0; i < 4 && !st; i++)
        st = lt->pref_set(pref,
                          (cublasLtMatmulPreferenceAttributes_t)(
                              CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i),
                          &al[i], sizeof(al[i]));
    st = st ? st : lt->heuristic((cublasLtHandle_t)c->lt, e->op, e->a, e->b, e->d, e->d, pref, 1, &h,
                                 &found);
    if (pref)
        lt->pref_destroy(pref);
    if (st || !found)
        return gemm_plan_failed(c, lt_failed(be, g, st ? st : CUBLAS_STATUS_NOT_SUPPORTED,
                                             "heuristic"));
    e->algo = h.algo;
    *out = e;
    return 0;
}

static int gemm_run(tbi_backend *be, const struct tbc_gemm *g, const void *A, const void *B,
                    void *D, void *bias)
{
    struct tbc_gemm_cache *e = NULL;
    TBI_TRY(gemm_plan(be, g, bias, &e));
    struct tbc_ctx *c = tbc_ctx_of(be);
    const struct tbc_lt *lt = c->api;
    int st = 0;
    if (g->epilogue != TBC_EPI_NONE)
        st = lt->desc_set(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    if (st)
        return lt_failed(be, g, st, "bias pointer");
    const float one = 1, zero = 0;
    st = lt->matmul((cublasLtHandle_t)c->lt, e->op, &one, A, e->a, B, e->b, &zero, D, e->d, D,
                    e->d, &e->algo, c->lt_ws, TBC_LT_WORKSPACE, c->compute);
    return st ? lt_failed(be, g, st, "product") : 0;
}

static void gemm_cache_free(struct tbc_ctx *c)
{
    for (int i = 0; i < c->n_gemms; i++)
        gemm_entry_free(c->api, &c->gemms[i]);
    free(c->gemms);
    c->gemms = NULL;
    c->n_gemms = c->cap_gemms = 0;
}

/* dst (n) of type dt_dst = src (n) of its type, rounded to bf16 on the way when round_bf16
 * (also where dst is f32: a bf16 product's result in an f32 tensor). dst may be src. */
__global__ void convert_kernel(tbi_t dst, tbi_t src, size_t n, int round_bf16)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = load_t(src, i);
        if (round_bf16)
            v = __bfloat162float(__float2bfloat16(v));
        store_t(dst, i, v);
    }
}

static int convert(tbi_backend *be, tbi_t dst, tbi_t src, size_t n, int round_bf16)
{
    if (!n)
        return 0;
    TBC_LAUNCH(convert_kernel, tbc_blocks(n, 256), 256, 0, tbc_stream(be), dst, src, n, round_bf16);
    return tbc_launched(be, "convert");
}

/* The operands of one op, each in the type the product reads it in: the tensor itself where it
 * is stored so (and holds the product's values), else a converted copy in scratch (carved in
 * order, 256-byte aligned), rounded to bf16 where the product is bf16. */
struct operands {
    tbi_backend *be;
    int dt;
    unsigned char *scratch;
    size_t used;
};

static size_t op_bytes(int dt, size_t n)
{
    return (n * tbi_dt_size(dt) + 255) / 256 * 256;
}

/* t read as type dt by a product of type o->dt: as it is, or converted. */
static int needs_copy(const struct operands *o, tbi_t t, int dt)
{
    return t.p && (t.dt != dt || (dt == TB_DTYPE_F32 && o->dt == TB_DTYPE_BF16));
}

static int operand_as(struct operands *o, tbi_t t, size_t n, int dt, const void **out)
{
    *out = t.p;
    if (!needs_copy(o, t, dt))
        return 0;
    tbi_t dst = tbi_t_of(o->scratch + o->used, dt);
    o->used += op_bytes(dt, n);
    *out = dst.p;
    return convert(o->be, dst, t, n, o->dt == TB_DTYPE_BF16);
}

static int operand(struct operands *o, tbi_t t, size_t n, const void **out)
{
    return operand_as(o, t, n, o->dt, out);
}

/* Scratch for the conversions of tensors t (n elements each, read as dts), plus extra. */
static int operands_open(struct operands *o, tbi_backend *be, int dt, const tbi_t *t,
                         const size_t *n, const int *dts, int count, size_t extra)
{
    o->be = be;
    o->dt = dt;
    o->used = 0;
    size_t bytes = extra;
    for (int i = 0; i < count; i++)
        bytes += needs_copy(o, t[i], dts[i]) ? op_bytes(dts[i], n[i]) : 0;
    void *s = NULL;
    if (bytes)
        TBI_TRY(tbc_scratch(be, bytes, &s));
    o->scratch = (unsigned char *)s;
    return 0;
}

static int prec_ok(tbi_backend *be, int prec, const tbi_t *t, int count)
{
    if (prec != TB_DTYPE_F32 && prec != TB_DTYPE_BF16)
        return tbi_err(TB_EINVAL, "%s: product type %d (f32 or bf16)", be->name, prec);
    for (int i = 0; i < count; i++)
        if (t[i].p && !tbc_typed_ok(t[i]))
            return tbi_err(TB_EINVAL, "%s: a tensor of dtype %d or misaligned", be->name, t[i].dt);
    return 0;
}

/* The product's result into out (n): where out is stored in the product's type, D is out;
 * else D is scratch, converted after (rounded where the product is bf16). */
static int result(struct operands *o, tbi_t out, size_t n, void **D, int *d_dt)
{
    *D = out.p;
    *d_dt = out.dt;
    if (out.dt == TB_DTYPE_BF16 && o->dt == TB_DTYPE_F32) {
        *D = o->scratch + o->used;
        *d_dt = TB_DTYPE_F32;
        o->used += op_bytes(TB_DTYPE_F32, n);
    }
    return 0;
}

static int result_done(struct operands *o, tbi_t out, const void *D, size_t n)
{
    if (D != out.p)
        return convert(o->be, out, tbi_t_of(D, TB_DTYPE_F32), n, 1);
    if (out.dt == TB_DTYPE_F32 && o->dt == TB_DTYPE_BF16)
        return convert(o->be, out, out, n, 1);
    return 0;
}

/* sums (N) = the column sums of x (M, N) row-major, in row order, rounded to sums' type. */
__global__ void colsum_kernel(tbi_t sums, tbi_t x, int M, int N)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= N)
        return;
    float acc = 0;
    for (int r = 0; r < M; r++)
        acc += load_t(x, (size_t)r * N + c);
    store_t(sums, (size_t)c, acc);
}

static int colsum(tbi_backend *be, tbi_t sums, tbi_t x, int M, int N)
{
    TBC_LAUNCH(colsum_kernel, (N + 127) / 128, 128, 0, tbc_stream(be), sums, x, M, N);
    return tbc_launched(be, "colsum");
}

static int tbc_matmul_fwd(tbi_backend *be, int prec, tbi_t out, tbi_t inp, tbi_t w, tbi_t bias,
                          int M, int K, int N)
{
    const tbi_t t[] = {inp, w, bias, out};
    TBI_TRY(prec_ok(be, prec, t, 4));
    if (M <= 0 || K <= 0 || N <= 0 || !out.p || !inp.p || !w.p)
        return tbi_err(TB_EINVAL, "%s matmul_fwd: %dx%dx%d", be->name, M, K, N);
    /* D is out, or f32 scratch where out is bf16 and the product f32; the bias in D's type */
    const int d_dt = out.dt == TB_DTYPE_BF16 && prec == TB_DTYPE_F32 ? TB_DTYPE_F32 : out.dt;
    const size_t n[] = {(size_t)M * K, (size_t)N * K, (size_t)N};
    const int dts[] = {prec, prec, d_dt};
    struct operands o;
    TBI_TRY(operands_open(&o, be, prec, t, n, dts, 3, op_bytes(TB_DTYPE_F32, (size_t)M * N)));
    const void *A = NULL, *B = NULL, *bias_p = NULL;
    void *D = NULL;
    int dt = 0;
    TBI_TRY(operand(&o, w, n[1], &A));
    TBI_TRY(operand(&o, inp, n[0], &B));
    TBI_TRY(operand_as(&o, bias, n[2], d_dt, &bias_p));
    TBI_TRY(result(&o, out, (size_t)M * N, &D, &dt));
    /* out^T (N, M) = w (K, N)^T inp^T (K, M), column-major */
    const struct tbc_gemm g = {N,    M,    K,
                               1,    0,    K,
                               K,    N,    prec,
                               dt,   bias.p ? TBC_EPI_BIAS : TBC_EPI_NONE,
                               {align_of(A), align_of(B), align_of(D), align_of(bias_p)}};
    TBI_TRY(gemm_run(be, &g, A, B, D, (void *)bias_p));
    return result_done(&o, out, D, (size_t)M * N);
}

static int tbc_matmul_bwd(tbi_backend *be, int prec, tbi_t dinp, tbi_t dw, tbi_t dbias, tbi_t dout,
                          tbi_t inp, tbi_t w, int M, int K, int N)
{
    const tbi_t t[] = {dout, inp, w, dinp, dw, dbias};
    TBI_TRY(prec_ok(be, prec, t, 6));
    if (M <= 0 || K <= 0 || N <= 0 || !dout.p || (dinp.p && !w.p) || (dw.p && !inp.p))
        return tbi_err(TB_EINVAL, "%s matmul_bwd: %dx%dx%d", be->name, M, K, N);
    const size_t n[] = {(size_t)M * N, (size_t)M * K, (size_t)N * K};
    const tbi_t in[] = {dout, dw.p ? inp : tbi_t{}, dinp.p ? w : tbi_t{}};
    const int dts[] = {prec, prec, prec};
    /* results not in the product's type, and the bias gradient not in its own, via scratch */
    const size_t extra = op_bytes(TB_DTYPE_F32, n[1]) + op_bytes(TB_DTYPE_F32, n[2]) +
                         op_bytes(TB_DTYPE_F32, (size_t)N);
    struct operands o;
    TBI_TRY(operands_open(&o, be, prec, in, n, dts, 3, extra));
    const void *Dout = NULL, *Inp = NULL, *W = NULL;
    TBI_TRY(operand(&o, dout, n[0], &Dout));
    TBI_TRY(operand(&o, in[1], n[1], &Inp));
    TBI_TRY(operand(&o, in[2], n[2], &W));
    if (dinp.p) {
        /* dinp^T (K, M) = w (K, N) dout^T (N, M) */
        void *D = NULL;
        int d_dt = 0;
        TBI_TRY(result(&o, dinp, n[1], &D, &d_dt));
        const struct tbc_gemm g = {K, M,    N,    0,    0,           K,
                                   N, K,    prec, d_dt, TBC_EPI_NONE, {align_of(W), align_of(Dout),
                                                                       align_of(D), 256}};
        TBI_TRY(gemm_run(be, &g, W, Dout, D, NULL));
        TBI_TRY(result_done(&o, dinp, D, n[1]));
    }
    /* The bias gradient: the dw product's BGRADB in that product's D type, else column sums
     * in the product's type; into dbias itself where it has that type, else through scratch. */
    void *D = NULL, *db = NULL;
    int d_dt = 0, db_dt = prec;
    if (dw.p) {
        TBI_TRY(result(&o, dw, n[2], &D, &d_dt));
        db_dt = d_dt;
    }
    if (dbias.p) {
        db = dbias.dt == db_dt ? dbias.p : o.scratch + o.used;
        o.used += db == dbias.p ? 0 : op_bytes(db_dt, (size_t)N);
    }
    if (dw.p) {
        /* dw^T (K, N) = inp^T (K, M) dout (M, N); BGRADB: the sums of dout over M */
        const struct tbc_gemm g = {K,
                                   N,
                                   M,
                                   0,
                                   1,
                                   K,
                                   N,
                                   K,
                                   prec,
                                   d_dt,
                                   db ? TBC_EPI_BGRADB : TBC_EPI_NONE,
                                   {align_of(Inp), align_of(Dout), align_of(D), align_of(db)}};
        TBI_TRY(gemm_run(be, &g, Inp, Dout, D, db));
        TBI_TRY(result_done(&o, dw, D, n[2]));
    } else if (db) {
        TBI_TRY(colsum(be, tbi_t_of(db, prec), tbi_t_of(Dout, prec), M, N));
    }
    /* a bf16 product's bias gradient is rounded to bf16, wherever it lands */
    const int round = prec == TB_DTYPE_BF16;
    if (db && db != dbias.p)
        TBI_TRY(convert(be, dbias, tbi_t_of(db, db_dt), (size_t)N, round));
    else if (db && round && dbias.dt == TB_DTYPE_F32)
        TBI_TRY(convert(be, dbias, dbias, (size_t)N, 1));
    return 0;
}
