/* src/tensor/cuda/matmul.cu - matmul_fwd and matmul_bwd: the row-major products of the op
 * list as column-major products, each described by one record (struct tbc_gemm: cuBLASLt's
 * view: D (m, n) = op(A) (m, k) op(B) (k, n), leading dimensions, operand and result types, the
 * BIAS or BGRADB epilogue). On a GPU the record becomes cuBLASLt's descriptors, its algorithm
 * chosen once per record (the heuristic's first) and cached: no heuristic call per step. On
 * the emulated device an interpreter of the same record computes it on the CPU with the
 * semantics cuBLASLt documents (column-major, op(X) = X or X^T read with X's leading dimension,
 * fp32 accumulation, the epilogue, the result rounded to D's type), so a wrong layout, leading
 * dimension or epilogue in the mapping below fails the parity harness here. Operands whose
 * stored type is not the product's (f32 tensors in a bf16 product, as bf16 mode's master
 * weights) are converted into scratch first (rounded as the CPU op rounds them as it reads);
 * a bf16 product written to an f32 tensor is rounded in place after (the op's contract). */
#include "tensor/cuda/cuda_common.h"

#ifndef TBC_EMULATE
#include <cublasLt.h>
#endif

enum tbc_epilogue { TBC_EPI_NONE, TBC_EPI_BIAS, TBC_EPI_BGRADB };

struct tbc_gemm {
    int m, n, k;
    int transa, transb;
    int lda, ldb, ldd;
    int ab_dt, d_dt; /* the operands' type (both), the result's: TB_DTYPE_F32 or _BF16 */
    int epilogue;    /* enum tbc_epilogue; the bias (m) or its gradient (n) in ab_dt */
};

struct tbc_gemm_cache {
    struct tbc_gemm g;
#ifndef TBC_EMULATE
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
#endif
};

/* Element (r, c) of a column-major matrix with leading dimension ld, of type dt. */
static inline float gemm_at(const void *p, int dt, size_t r, size_t c, size_t ld)
{
    const size_t i = r + c * ld;
    return dt == TB_DTYPE_BF16 ? __bfloat162float(((const bf16 *)p)[i]) : ((const float *)p)[i];
}

#ifdef TBC_EMULATE
/* The interpreter: what cuBLASLt computes for the record, on the CPU (queued on the stream, as
 * the library's kernel would be). fp32 sums over k in order; the bias added once. */
static void gemm_interpret(struct tbc_gemm g, const void *A, const void *B, void *D, void *bias)
{
    snprintf(emu_where, sizeof(emu_where), "in the interpreted cuBLASLt product %dx%dx%d", g.m,
             g.n, g.k);
    for (int j = 0; j < g.n; j++)
        for (int i = 0; i < g.m; i++) {
            float acc = 0;
            for (int l = 0; l < g.k; l++) {
                const float a =
                    g.transa ? gemm_at(A, g.ab_dt, l, i, g.lda) : gemm_at(A, g.ab_dt, i, l, g.lda);
                const float b =
                    g.transb ? gemm_at(B, g.ab_dt, j, l, g.ldb) : gemm_at(B, g.ab_dt, l, j, g.ldb);
                acc += a * b;
            }
            if (g.epilogue == TBC_EPI_BIAS)
                acc += gemm_at(bias, g.ab_dt, i, 0, 1);
            store_t(tbi_t_of(D, g.d_dt), (size_t)i + (size_t)j * g.ldd, acc);
        }
    if (g.epilogue == TBC_EPI_BGRADB)
        for (int j = 0; j < g.n; j++) {
            float acc = 0;
            for (int l = 0; l < g.k; l++)
                acc +=
                    g.transb ? gemm_at(B, g.ab_dt, j, l, g.ldb) : gemm_at(B, g.ab_dt, l, j, g.ldb);
            store_t(tbi_t_of(bias, g.ab_dt), (size_t)j, acc);
        }
    snprintf(emu_where, sizeof(emu_where), "outside any kernel");
}

static int gemm_run(tbi_backend *be, const struct tbc_gemm *g, const void *A, const void *B,
                    void *D, void *bias)
{
    const struct tbc_gemm rec = *g;
    emu_enqueue(tbc_stream(be), [=] { gemm_interpret(rec, A, B, D, bias); });
    return 0;
}

static void gemm_cache_free(struct tbc_ctx *c)
{
    free(c->gemms);
}
#else
static cudaDataType_t lt_type(int dt)
{
    return dt == TB_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* The record's descriptors and algorithm, made once per record. */
static int gemm_plan(tbi_backend *be, const struct tbc_gemm *g, struct tbc_gemm_cache **out)
{
    struct tbc_ctx *c = tbc_ctx_of(be);
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
    const cublasOperation_t ta = g->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = g->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = g->epilogue == TBC_EPI_BIAS     ? CUBLASLT_EPILOGUE_BIAS
                             : g->epilogue == TBC_EPI_BGRADB ? CUBLASLT_EPILOGUE_BGRADB
                                                             : CUBLASLT_EPILOGUE_DEFAULT;
    const cudaDataType_t bias_t = lt_type(g->ab_dt);
    int bad =
        cublasLtMatmulDescCreate(&e->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
        cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)) ||
        cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)) ||
        cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    if (!bad && g->epilogue != TBC_EPI_NONE)
        bad = cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t,
                                             sizeof(bias_t));
    const int ar = g->transa ? g->k : g->m, ac = g->transa ? g->m : g->k;
    const int br = g->transb ? g->n : g->k, bc = g->transb ? g->k : g->n;
    bad = bad || cublasLtMatrixLayoutCreate(&e->a, lt_type(g->ab_dt), ar, ac, g->lda) ||
          cublasLtMatrixLayoutCreate(&e->b, lt_type(g->ab_dt), br, bc, g->ldb) ||
          cublasLtMatrixLayoutCreate(&e->d, lt_type(g->d_dt), g->m, g->n, g->ldd);
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    const size_t ws = TBC_LT_WORKSPACE;
    bad = bad || cublasLtMatmulPreferenceCreate(&pref) ||
          cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                               sizeof(ws)) ||
          cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)c->lt, e->op, e->a, e->b, e->d, e->d,
                                         pref, 1, &h, &found) ||
          !found;
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (bad)
        return tbi_err(TB_ECUDA,
                       "%s: cuBLASLt has no algorithm for a %dx%dx%d product (types %d, "
                       "%d, epilogue %d)",
                       be->name, g->m, g->n, g->k, g->ab_dt, g->d_dt, g->epilogue);
    e->algo = h.algo;
    c->n_gemms++;
    *out = e;
    return 0;
}

static int gemm_run(tbi_backend *be, const struct tbc_gemm *g, const void *A, const void *B,
                    void *D, void *bias)
{
    struct tbc_gemm_cache *e = NULL;
    TBI_TRY(gemm_plan(be, g, &e));
    struct tbc_ctx *c = tbc_ctx_of(be);
    if (g->epilogue != TBC_EPI_NONE &&
        cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                       sizeof(bias)))
        return tbi_err(TB_ECUDA, "%s: cuBLASLt bias pointer", be->name);
    const float one = 1, zero = 0;
    if (cublasLtMatmul((cublasLtHandle_t)c->lt, e->op, &one, A, e->a, B, e->b, &zero, D, e->d, D,
                       e->d, &e->algo, c->lt_ws, TBC_LT_WORKSPACE, c->compute))
        return tbi_err(TB_ECUDA, "%s: cuBLASLt product %dx%dx%d failed", be->name, g->m, g->n,
                       g->k);
    return 0;
}

static void gemm_cache_free(struct tbc_ctx *c)
{
    for (int i = 0; i < c->n_gemms; i++) {
        cublasLtMatmulDescDestroy(c->gemms[i].op);
        cublasLtMatrixLayoutDestroy(c->gemms[i].a);
        cublasLtMatrixLayoutDestroy(c->gemms[i].b);
        cublasLtMatrixLayoutDestroy(c->gemms[i].d);
    }
    free(c->gemms);
}
#endif

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

/* The operands of one op, each in the product's type: the tensor itself where it is stored so,
 * else a converted copy in scratch (carved in order, 256-byte aligned). */
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

static int operand(struct operands *o, tbi_t t, size_t n, const void **out)
{
    *out = t.p;
    if (!t.p || t.dt == o->dt)
        return 0;
    tbi_t dst = tbi_t_of(o->scratch + o->used, o->dt);
    o->used += op_bytes(o->dt, n);
    *out = dst.p;
    return convert(o->be, dst, t, n, o->dt == TB_DTYPE_BF16);
}

/* Scratch for the conversions of tensors t (n elements each) not stored in dt, plus extra. */
static int operands_open(struct operands *o, tbi_backend *be, int dt, const tbi_t *t,
                         const size_t *n, int count, size_t extra)
{
    o->be = be;
    o->dt = dt;
    o->used = 0;
    size_t bytes = extra;
    for (int i = 0; i < count; i++)
        bytes += t[i].p && t[i].dt != dt ? op_bytes(dt, n[i]) : 0;
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
    const size_t n[] = {(size_t)M * K, (size_t)N * K, (size_t)N};
    struct operands o;
    TBI_TRY(operands_open(&o, be, prec, t, n, 3, op_bytes(TB_DTYPE_F32, (size_t)M * N)));
    const void *A = NULL, *B = NULL, *bias_p = NULL;
    void *D = NULL;
    int d_dt = 0;
    TBI_TRY(operand(&o, w, n[1], &A));
    TBI_TRY(operand(&o, inp, n[0], &B));
    TBI_TRY(operand(&o, bias, n[2], &bias_p));
    TBI_TRY(result(&o, out, (size_t)M * N, &D, &d_dt));
    /* out^T (N, M) = w (K, N)^T inp^T (K, M), column-major */
    const struct tbc_gemm g = {
        N, M, K, 1, 0, K, K, N, prec, d_dt, bias.p ? TBC_EPI_BIAS : TBC_EPI_NONE};
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
    /* results not in the product's type, and dbias without dw, go through scratch */
    const size_t extra = op_bytes(TB_DTYPE_F32, n[1]) + op_bytes(TB_DTYPE_F32, n[2]) +
                         op_bytes(prec, (size_t)N) + op_bytes(TB_DTYPE_F32, (size_t)N);
    struct operands o;
    TBI_TRY(operands_open(&o, be, prec, in, n, 3, extra));
    const void *Dout = NULL, *Inp = NULL, *W = NULL;
    TBI_TRY(operand(&o, dout, n[0], &Dout));
    TBI_TRY(operand(&o, in[1], n[1], &Inp));
    TBI_TRY(operand(&o, in[2], n[2], &W));
    if (dinp.p) {
        /* dinp^T (K, M) = w (K, N) dout^T (N, M) */
        void *D = NULL;
        int d_dt = 0;
        TBI_TRY(result(&o, dinp, n[1], &D, &d_dt));
        const struct tbc_gemm g = {K, M, N, 0, 0, K, N, K, prec, d_dt, TBC_EPI_NONE};
        TBI_TRY(gemm_run(be, &g, W, Dout, D, NULL));
        TBI_TRY(result_done(&o, dinp, D, n[1]));
    }
    /* the bias gradient in the product's type: the dw product's epilogue, else column sums */
    void *db = NULL;
    if (dbias.p) {
        db = dbias.dt == prec ? dbias.p : o.scratch + o.used;
        o.used += db == dbias.p ? 0 : op_bytes(prec, (size_t)N);
    }
    if (dw.p) {
        /* dw^T (K, N) = inp^T (K, M) dout (M, N); BGRADB: the sums of dout over M */
        void *D = NULL;
        int d_dt = 0;
        TBI_TRY(result(&o, dw, n[2], &D, &d_dt));
        const struct tbc_gemm g = {
            K, N, M, 0, 1, K, N, K, prec, d_dt, db ? TBC_EPI_BGRADB : TBC_EPI_NONE};
        TBI_TRY(gemm_run(be, &g, Inp, Dout, D, db));
        TBI_TRY(result_done(&o, dw, D, n[2]));
    } else if (db) {
        TBI_TRY(colsum(be, tbi_t_of(db, prec), tbi_t_of(Dout, prec), M, N));
    }
    if (db && db != dbias.p)
        TBI_TRY(convert(be, dbias, tbi_t_of(db, prec), (size_t)N, 0));
    return 0;
}
