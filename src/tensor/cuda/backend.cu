/* src/tensor/cuda/backend.cu - the CUDA backend: the op table (from the op list, as the CPU's),
 * its memory, streams and data parallelism, in one translation unit with every kernel file,
 * so all but the opening function are static. Compiled twice from the same sources: by nvcc
 * for a GPU ("cuda"), and as C++ for the emulated device ("cuda-emu", emu/backend_emu.cpp,
 * which includes emu/emulate.h first). Libraries: cuBLASLt for the products and, with more
 * than one process, NCCL for the reductions, each a table of functions (lt.h, nccl.h) filled
 * with dlopen on a GPU and by emulated twins on cuda-emu, so the code calling them is the
 * same on both. Memory: cudaMalloc itself (the memory planner asks for one arena per model;
 * never managed memory), zeroed on the compute stream. Data parallelism: each process takes
 * its machine's GPU by its local rank (dist.h); the reductions run on a second stream,
 * ordered after the compute stream's work by an event and before its later work by another;
 * NCCL's unique id goes from rank 0 to the others through dist.h's process group (MPI's, or
 * the TCP group under torchrun or srun). */
#include "tensor/cuda/cuda_common.h"

#include "tensor/cuda/nccl.h"
#include "tubelet/dist.h"

#ifndef TBC_EMULATE
#include <dlfcn.h>
#endif

/* The ops of the list, declared; those this backend has are defined in the .cu files below
 * and named in TBC_HAS (the table, at the end). An op it leaves out is declared and never
 * defined, which the compilers would warn of. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#ifdef __CUDACC__
#pragma nv_diag_suppress 177
#endif
#define TBC_OP_PROTO(name, params, args) static int tbc_##name params;
TBI_OP_LIST(TBC_OP_PROTO)
#undef TBC_OP_PROTO
#ifdef __CUDACC__
#pragma nv_diag_default 177
#endif
#pragma GCC diagnostic pop

#include "tensor/cuda/attention.cu"
#include "tensor/cuda/attention_op.cu"
#include "tensor/cuda/contrastive.cu"
#include "tensor/cuda/elementwise.cu"
#include "tensor/cuda/layernorm.cu"
#include "tensor/cuda/mae.cu"
#include "tensor/cuda/matmul.cu"
#include "tensor/cuda/optim.cu"
#include "tensor/cuda/step.cu"
#include "tensor/cuda/tokens.cu"
#include "tensor/cuda/video.cu"
#include "tensor/cuda/xent.cu"

#ifdef TBC_EMULATE
#define TBC_NAME "cuda-emu"
#define TBC_OPEN tbi_cuda_emu_open
#define TBC_CLOSE tbi_cuda_emu_close
#else
#define TBC_NAME "cuda"
#define TBC_OPEN tbi_cuda_open
#define TBC_CLOSE tbi_cuda_close
#endif

/* ---- memory ------------------------------------------------------------------------------- */

static int tbc_alloc(tbi_backend *be, size_t bytes, void **out)
{
    *out = NULL;
    if (tbc_rt_malloc(out, bytes))
        return tbi_err(TB_ENOMEM, "out of memory: %zu MB of %s memory", bytes >> 20, be->name);
    if (tbc_rt_memset(*out, bytes, tbc_stream(be)))
        return tbi_err(TB_ECUDA, "%s: zeroing %zu bytes", be->name, bytes);
    return 0;
}

/* No lazily zeroed pages on a GPU: the same as alloc. */
static int tbc_alloc_zero(tbi_backend *be, size_t bytes, void **out)
{
    return tbc_alloc(be, bytes, out);
}

static int tbc_free(tbi_backend *be, void *p)
{
    if (p && tbc_rt_free(p))
        return tbi_err(TB_ECUDA,
                       "%s: freeing device memory failed (on the emulated device: a "
                       "write beside an allocation)",
                       be->name);
    return 0;
}

static int tbc_zero(tbi_backend *be, void *p, size_t bytes)
{
    if (bytes && tbc_rt_memset(p, bytes, tbc_stream(be)))
        return tbi_err(TB_ECUDA, "%s: zeroing %zu bytes", be->name, bytes);
    return 0;
}

/* A large copy through the pinned ring (struct tbc_ctx's stage): each TBC_STAGE_BYTES piece
 * waits for its slot's previous copy, is written there by the host, and copied on the compute
 * stream, whose later work sees it in order. 0, or -1 where a slot cannot be had. */
static int staged_to_device(struct tbc_ctx *c, unsigned char *dst, const unsigned char *src,
                            size_t bytes)
{
    for (int k = 0; k < 2; k++)
        if (!c->stage[k] && (tbc_rt_host_alloc(&c->stage[k], TBC_STAGE_BYTES) ||
                             tbc_rt_event(&c->stage_ev[k])))
            return -1;
    const size_t piece = TBC_STAGE_BYTES;
    for (size_t at = 0; at < bytes; at += piece) {
        const size_t n = bytes - at < piece ? bytes - at : piece;
        const int k = c->stage_next;
        c->stage_next = 1 - k;
        if (tbc_rt_event_sync(c->stage_ev[k]))
            return -1;
        memcpy(c->stage[k], src + at, n);
        if (tbc_rt_from_pinned(dst + at, c->stage[k], n, c->compute) ||
            tbc_rt_record(c->stage_ev[k], c->compute))
            return -1;
    }
    return 0;
}

static int tbc_to_device(tbi_backend *be, void *dst, const void *host_src, size_t bytes)
{
    struct tbc_ctx *c = tbc_ctx_of(be);
    const int rc = bytes < TBC_STAGE_MIN
                       ? tbc_rt_to_device(dst, host_src, bytes, tbc_stream(be))
                       : staged_to_device(c, (unsigned char *)dst,
                                          (const unsigned char *)host_src, bytes);
    if (rc)
        return tbi_err(TB_ECUDA, "%s: a copy of %zu bytes to the device", be->name, bytes);
    return 0;
}

static int tbc_to_host(tbi_backend *be, void *host_dst, const void *src, size_t bytes)
{
    if (bytes && tbc_rt_to_host(host_dst, src, bytes, tbc_stream(be)))
        return tbi_err(TB_ECUDA, "%s: a copy of %zu bytes to the host", be->name, bytes);
    return 0;
}

static int tbc_copy(tbi_backend *be, void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src && tbc_rt_copy(dst, src, bytes, tbc_stream(be)))
        return tbi_err(TB_ECUDA, "%s: a device copy of %zu bytes", be->name, bytes);
    return 0;
}

static int tbc_sync(tbi_backend *be)
{
    if (tbc_rt_sync() || tbc_rt_last_error())
        return tbi_err(TB_ECUDA, "%s: the device reported an error: %s", be->name,
                       tbc_rt_error_string());
    return 0;
}

static int tbc_mem_avail(tbi_backend *be, uint64_t *host_bytes)
{
    size_t free_b = 0, total = 0;
    if (tbc_rt_mem_info(&free_b, &total))
        return tbi_err(TB_ECUDA, "%s: cannot query the device's memory", be->name);
    *host_bytes = free_b;
    return 0;
}

/* ---- data parallelism ---------------------------------------------------------------------- */

/* The reduction of x waits for the compute stream's work so far (which wrote x); later
 * compute waits for it in reduce_wait. */
static int tbc_reduce_start(tbi_backend *be, float *x, size_t n)
{
    if (tb_dist_world() <= 1 || !n)
        return 0;
    struct tbc_ctx *c = tbc_ctx_of(be);
    if (tbc_rt_record(c->ev_compute, c->compute) || tbc_rt_wait(c->comm, c->ev_compute))
        return tbi_err(TB_ECUDA, "%s: ordering the reduction", be->name);
    const int st = c->nccl->all_reduce(x, x, n, TBC_NCCL_F32, TBC_NCCL_AVG, c->nccl_comm, c->comm);
    if (st)
        return tbi_err(TB_EDIST, "%s: NCCL's all-reduce of %zu floats: %s", be->name, n,
                       c->nccl->error_string(st));
    return 0;
}

static int tbc_reduce_wait(tbi_backend *be)
{
    if (tb_dist_world() <= 1)
        return 0;
    struct tbc_ctx *c = tbc_ctx_of(be);
    if (tbc_rt_record(c->ev_comm, c->comm) || tbc_rt_wait(c->compute, c->ev_comm))
        return tbi_err(TB_ECUDA, "%s: ordering the reduction", be->name);
    return 0;
}

static int tbc_gather(tbi_backend *be, float *all, const float *x, size_t n)
{
    if (tb_dist_world() <= 1)
        return tbc_copy(be, all, x, sizeof(float) * n);
    struct tbc_ctx *c = tbc_ctx_of(be);
    const int st = c->nccl->all_gather(x, all, n, TBC_NCCL_F32, c->nccl_comm, c->compute);
    if (st)
        return tbi_err(TB_EDIST, "%s: NCCL's all-gather of %zu floats: %s", be->name, n,
                       c->nccl->error_string(st));
    return 0;
}

static int tbc_bcast(tbi_backend *be, float *x, size_t n, int root)
{
    if (tb_dist_world() <= 1 || !n)
        return 0;
    struct tbc_ctx *c = tbc_ctx_of(be);
    const int st = c->nccl->broadcast(x, x, n, TBC_NCCL_F32, root, c->nccl_comm, c->compute);
    if (st)
        return tbi_err(TB_EDIST, "%s: NCCL's broadcast of %zu floats from rank %d: %s", be->name, n,
                       root, c->nccl->error_string(st));
    return 0;
}

/* ---- the table ---------------------------------------------------------------------------- */

/* The ops this backend has, each tbc_<op>. An op of the list not named here is left out:
 * tbi_backend_supports says so, a model that needs it is refused when it opens, and the
 * registry's stand-in fails naming it (src/tensor/registry.c). test_backend runs the parity
 * case of every op named here and lists the ones left out. */
#define TBC_HAS(X)                                                                                 \
    X(alloc) X(alloc_zero) X(free) X(zero) X(to_device) X(to_host) X(copy) X(sync) X(mem_avail)    \
    X(reduce_start) X(reduce_wait) X(gather) X(bcast) X(matmul_fwd) X(matmul_bwd) X(layernorm_fwd) \
    X(layernorm_bwd) X(act_fwd) X(act_bwd) X(add) X(scale_add) X(residual_add) X(attention_fwd)    \
    X(attention_bwd) X(xent_fwd) X(xent_bwd) X(xent_soft_fwd) X(xent_soft_bwd) X(mix_clips)        \
    X(erase_boxes) X(normalize) X(patchify) X(tokens_fwd) X(tokens_bwd) X(gather_rows)             \
    X(scatter_rows) X(tokens_fill_fwd) X(tokens_fill_bwd) X(patch_target) X(mse_fwd) X(mse_bwd)    \
    X(pos_tile_fwd) X(pos_tile_bwd) X(embed_bwd) X(transpose) X(pool_fwd) X(pool_bwd) X(adamw)     \
    X(lion) X(sgd) X(sum_squares_acc) X(step_loss) X(step_check) X(adamw_checked) X(lion_checked)  \
    X(sgd_checked) X(infonce_fwd) X(infonce_bwd) X(logit_scale) X(logit_scale_bwd)

static struct tbi_ops tbc_table(void)
{
    struct tbi_ops o = {};
#define TBC_SET(name) o.name = tbc_##name;
    TBC_HAS(TBC_SET)
#undef TBC_SET
    return o;
}

static const struct tbi_ops tbc_ops = tbc_table();

/* ---- the libraries: cuBLASLt, NCCL ------------------------------------------------------- */

#ifdef TBC_EMULATE
static int tbc_lt_load(const struct tbc_lt **out)
{
    *out = &emu_lt_table;
    return 0;
}

static int tbc_nccl_load(const struct tbc_nccl **out)
{
    *out = &emu_nccl_table;
    return 0;
}
#else
/* A library's functions into slot[] in fn[]'s order: from the library the variable env names
 * (a path or a name), else the first of the names in defaults found; kept loaded for the
 * process (*dl). TB_EUNSUPPORTED naming what is missing. */
static int tbc_dl_table(const char *what, const char *env_var, const char *const *defaults,
                        int n_defaults, const char *const *fn, size_t n_fn, void **slot, void **dl)
{
    const char *env = getenv(env_var);
    const int named = env && *env;
    char why[512] = "", tried[256] = "";
    for (int i = 0; i < (named ? 1 : n_defaults) && !*dl; i++) {
        const char *name = named ? env : defaults[i];
        snprintf(tried + strlen(tried), sizeof(tried) - strlen(tried), "%s%s", i ? ", " : "", name);
        if (!(*dl = dlopen(name, RTLD_NOW | RTLD_LOCAL)) && !why[0])
            snprintf(why, sizeof(why), "%s", dlerror());
    }
    if (!*dl)
        return tbi_err(TB_EUNSUPPORTED, "%s not found (%s: %s); %s=PATH names the library", what,
                       tried, why, env_var);
    for (size_t i = 0; i < n_fn; i++)
        if (!(slot[i] = dlsym(*dl, fn[i]))) {
            dlclose(*dl);
            *dl = NULL;
            return tbi_err(TB_EUNSUPPORTED, "the %s found has no %s", what, fn[i]);
        }
    return 0;
}

/* cuBLASLt: TUBELET_CUBLASLT, else libcublasLt.so.13, else .so.12 (12 or later). */
static int tbc_lt_load(const struct tbc_lt **out)
{
    static struct tbc_lt lt;
    static void *dl;
    static const char *const fn[] = {TBC_LT_NAMES};
    static const char *const defaults[] = {"libcublasLt.so.13", "libcublasLt.so.12"};
    static_assert(sizeof(lt) == sizeof(fn) / sizeof(*fn) * sizeof(void *), "one per name");
    if (!dl) {
        TBI_TRY(tbc_dl_table("cuBLASLt", "TUBELET_CUBLASLT", defaults, 2, fn,
                             sizeof(fn) / sizeof(*fn), (void **)&lt, &dl));
        if (lt.version() < 120000) {
            const size_t v = lt.version();
            dlclose(dl);
            dl = NULL;
            return tbi_err(TB_EUNSUPPORTED, "cuBLASLt %zu.%zu found; 12 or later is needed",
                           v / 10000, v / 100 % 100);
        }
    }
    *out = &lt;
    return 0;
}

/* NCCL: TUBELET_NCCL, else libnccl.so.2 (2.10 or later, for its average). */
static int tbc_nccl_load(const struct tbc_nccl **out)
{
    static struct tbc_nccl nccl;
    static void *dl;
    static const char *const fn[] = {TBC_NCCL_NAMES};
    static const char *const defaults[] = {"libnccl.so.2"};
    static_assert(sizeof(nccl) == sizeof(fn) / sizeof(*fn) * sizeof(void *), "one per name");
    if (!dl) {
        TBI_TRY(tbc_dl_table("NCCL", "TUBELET_NCCL", defaults, 1, fn, sizeof(fn) / sizeof(*fn),
                             (void **)&nccl, &dl));
        int v = 0;
        nccl.version(&v);
        if (v < TBC_NCCL_MIN_VERSION) {
            dlclose(dl);
            dl = NULL;
            return tbi_err(TB_EUNSUPPORTED, "NCCL %d.%d found; 2.10 or later is needed", v / 10000,
                           v / 100 % 100);
        }
    }
    *out = &nccl;
    return 0;
}
#endif

/* This process's NCCL communicator: rank 0 makes the unique id and the process group carries
 * it (with rank 0's verdict, so no rank waits for an id that never comes). */
static int tbc_nccl_open(struct tbc_ctx *c)
{
    TBI_TRY(tbc_nccl_load(&c->nccl));
    struct {
        int ok;
        tbc_nccl_id id;
    } msg;
    memset(&msg, 0, sizeof(msg));
    const int rank = tb_dist_rank(), world = tb_dist_world();
    int st = rank == 0 ? c->nccl->unique_id(&msg.id) : 0;
    msg.ok = st == 0;
    TBI_TRY(tb_dist_bcast(&msg, sizeof(msg), 0));
    if (!msg.ok)
        return tbi_err(TB_EDIST, "%s: rank 0 could not make NCCL's unique id%s%s", TBC_NAME,
                       st ? ": " : "", st ? c->nccl->error_string(st) : "");
    if ((st = c->nccl->init_rank(&c->nccl_comm, world, msg.id, rank)))
        return tbi_err(TB_EDIST, "%s: NCCL would not start rank %d of %d: %s", TBC_NAME, rank,
                       world, c->nccl->error_string(st));
    return 0;
}

#ifndef TBC_EMULATE
/* For the tests, and a GPU machine's first look: loads cuBLASLt as an open does (no device
 * needed); its version (e.g. 130100), or a TB_E* code with the message set. */
extern "C" long tbi_cuda_lt_version(void)
{
    const struct tbc_lt *lt = NULL;
    const int rc = tbc_lt_load(&lt);
    return rc < 0 ? rc : (long)lt->version();
}
#endif

extern "C" void TBC_CLOSE(tbi_backend *be)
{
    struct tbc_ctx *c = tbc_ctx_of(be);
    if (!c)
        return;
    tbc_rt_sync();
    tbc_rt_free(c->scratch);
    tbc_rt_free(c->lt_ws);
    if (c->api) {
        gemm_cache_free(c);
        if (c->lt)
            c->api->destroy((cublasLtHandle_t)c->lt);
    }
    if (c->nccl_comm)
        c->nccl->destroy(c->nccl_comm);
    tbc_rt_event_destroy(c->ev_compute);
    tbc_rt_event_destroy(c->ev_comm);
    for (int k = 0; k < 2; k++) {
        tbc_rt_host_free(c->stage[k]);
        tbc_rt_event_destroy(c->stage_ev[k]);
    }
    if (c->compute)
        tbc_rt_stream_destroy(c->compute);
    if (c->comm)
        tbc_rt_stream_destroy(c->comm);
    free(c);
    be->ctx = NULL;
#ifdef TBC_EMULATE
    emu_release();
#endif
}

/* be->ctx and be->ops for this backend; 0, or TB_EUNSUPPORTED / TB_ECUDA naming what is
 * missing (no device, no driver, no cuBLASLt). */
extern "C" int TBC_OPEN(tbi_backend *be)
{
#ifndef TBC_EMULATE
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        /* The runtime says "driver insufficient" when there is no driver at all: say which. */
        char driver[160] = "";
        FILE *f = fopen("/proc/driver/nvidia/version", "r");
        if (f && fgets(driver, sizeof(driver), f))
            driver[strcspn(driver, "\n")] = '\0';
        if (f)
            fclose(f);
        int rt = 0;
        cudaRuntimeGetVersion(&rt);
        if (!driver[0])
            return tbi_err(TB_EUNSUPPORTED, "no NVIDIA GPU or driver found (CUDA: %s)",
                           e != cudaSuccess ? cudaGetErrorString(e) : "no device");
        if (e == cudaErrorInsufficientDriver)
            return tbi_err(TB_EUNSUPPORTED, "the NVIDIA driver is older than this build's CUDA "
                           "runtime %d.%d needs (%s)", rt / 1000, rt % 1000 / 10, driver);
        return tbi_err(TB_EUNSUPPORTED, "no usable NVIDIA GPU: %s (%s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "the driver sees none", driver);
    }
    /* The machine's k-th process takes its k-th GPU (modulo the GPUs it sees: a launcher that
     * gives each process one GPU through CUDA_VISIBLE_DEVICES leaves it that one). */
    const int gpu = tb_dist_local_rank() % n;
    if (cudaSetDevice(gpu) != cudaSuccess)
        return tbi_err(TB_ECUDA, "cannot take GPU %d of %d (local rank %d)", gpu, n,
                       tb_dist_local_rank());
#endif
    const struct tbc_lt *api = NULL;
    TBI_TRY(tbc_lt_load(&api));
    struct tbc_ctx *c = (struct tbc_ctx *)calloc(1, sizeof(*c));
    if (!c)
        return tbi_err(TB_ENOMEM, "out of memory");
    c->ev_compute = c->ev_comm = c->stage_ev[0] = c->stage_ev[1] = -1;
    be->ctx = c;
    be->name = TBC_NAME;
    be->device = TB_DEVICE_CUDA;
    be->ops = &tbc_ops;
    int bad = tbc_rt_stream(&c->compute) || tbc_rt_stream(&c->comm) ||
              tbc_rt_event(&c->ev_compute) || tbc_rt_event(&c->ev_comm);
    if (bad) {
        TBC_CLOSE(be);
        return tbi_err(TB_ECUDA, "%s: cannot set up streams or events", TBC_NAME);
    }
    c->api = api;
    cublasLtHandle_t lt = NULL;
    const int st = api->create(&lt);
    c->lt = lt;
    if (st) {
        TBC_CLOSE(be);
        return tbi_err(TB_ECUDA, "%s: cuBLASLt would not start: %s", TBC_NAME,
                       api->status_name((cublasStatus_t)st));
    }
    if (tbc_rt_malloc(&c->lt_ws, TBC_LT_WORKSPACE)) {
        TBC_CLOSE(be);
        return tbi_err(TB_ENOMEM, "%s: %d bytes for cuBLASLt's workspace", TBC_NAME,
                       (int)TBC_LT_WORKSPACE);
    }
    if (tb_dist_world() > 1) {
        const int rc = tbc_nccl_open(c);
        if (rc < 0) {
            TBC_CLOSE(be);
            return rc;
        }
    }
    return 0;
}
