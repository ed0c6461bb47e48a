/* src/tensor/cuda/attention_op.cu - the attention ops of the list: bf16 tensors with heads of
 * 64 or 128 go to the FlashAttention-2 kernels (attention.cu); anything else (f32, other head
 * sizes, misaligned tensors) to the plain kernels here: one thread per output element, each
 * computing its row's softmax again (HS times the arithmetic: a path for checks and odd
 * shapes, not for speed). Both compute in fp32 from the stored values and round what they
 * store; the flash kernels also round the probabilities to bf16 for the PV product, as
 * autocast's SDPA does. Layouts and scale as the CPU op (src/tensor/cpu/kernels.h). */
#include "tensor/cuda/cuda_common.h"

/* q, k or v (which 0, 1, 2) element d of token n, head h of clip b in qkv (B, N, 3, NH, HS). */
static __device__ __forceinline__ size_t qkv_at(int b, int n, int which, int h, int d, int N,
                                                int NH, int HS)
{
    return ((((size_t)b * N + n) * 3 + which) * NH + h) * HS + d;
}

static __device__ float score(tbi_t qkv, int b, int i, int j, int h, int N, int NH, int HS,
                              float scale)
{
    float s = 0;
    for (int d = 0; d < HS; d++)
        s += load_t(qkv, qkv_at(b, i, 0, h, d, N, NH, HS)) *
             load_t(qkv, qkv_at(b, j, 1, h, d, N, NH, HS));
    return s * scale;
}

/* One thread per (b, i, h, d): out (B, N, NH * HS); d == 0 writes lse (B, NH, N). */
__global__ void attention_plain_fwd(tbi_t out, float *lse, tbi_t qkv, int B, int N, int NH, int HS,
                                    int causal, float scale)
{
    const size_t total = (size_t)B * N * NH * HS;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(e % HS), h = (int)(e / HS % NH), i = (int)(e / HS / NH % N);
        const int b = (int)(e / HS / NH / N), last = causal ? i : N - 1;
        float mx = -INFINITY;
        for (int j = 0; j <= last; j++)
            mx = fmaxf(mx, score(qkv, b, i, j, h, N, NH, HS, scale));
        float sum = 0, acc = 0;
        for (int j = 0; j <= last; j++) {
            const float p = expf(score(qkv, b, i, j, h, N, NH, HS, scale) - mx);
            sum += p;
            acc += p * load_t(qkv, qkv_at(b, j, 2, h, d, N, NH, HS));
        }
        store_t(out, e, acc / sum);
        if (d == 0)
            GL_ST(&lse[((size_t)b * NH + h) * N + i], mx + logf(sum));
    }
}

/* dP_ij - D_i, with D_i = dout_i . out_i: the softmax backward's row term. */
static __device__ float dscore(tbi_t dout, tbi_t qkv, tbi_t out, int b, int i, int j, int h, int N,
                               int NH, int HS)
{
    float dp = 0, di = 0;
    const int D = NH * HS;
    for (int d = 0; d < HS; d++) {
        const size_t o = ((size_t)b * N + i) * D + (size_t)h * HS + d;
        const float g = load_t(dout, o);
        dp += g * load_t(qkv, qkv_at(b, j, 2, h, d, N, NH, HS));
        di += g * load_t(out, o);
    }
    return dp - di;
}

/* One thread per element of dqkv: dq_i = scale sum_j P_ij (dP_ij - D_i) k_j; dk_j = scale sum_i
 * P_ij (dP_ij - D_i) q_i; dv_j = sum_i P_ij dout_i. P from the forward's lse. */
__global__ void attention_plain_bwd(tbi_t dqkv, tbi_t dout, tbi_t qkv, tbi_t out, const float *lse,
                                    int B, int N, int NH, int HS, int causal, float scale)
{
    const size_t total = (size_t)B * N * 3 * NH * HS;
    const int D = NH * HS;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(e % HS), h = (int)(e / HS % NH), which = (int)(e / HS / NH % 3);
        const int n = (int)(e / HS / NH / 3 % N), b = (int)(e / HS / NH / 3 / N);
        float acc = 0;
        if (which == 0) {
            const int last = causal ? n : N - 1;
            const float l = GL_LD(&lse[((size_t)b * NH + h) * N + n]);
            for (int j = 0; j <= last; j++) {
                const float p = expf(score(qkv, b, n, j, h, N, NH, HS, scale) - l);
                acc += p * dscore(dout, qkv, out, b, n, j, h, N, NH, HS) *
                       load_t(qkv, qkv_at(b, j, 1, h, d, N, NH, HS));
            }
            acc *= scale;
        } else {
            for (int i = causal ? n : 0; i < N; i++) {
                const float l = GL_LD(&lse[((size_t)b * NH + h) * N + i]);
                const float p = expf(score(qkv, b, i, n, h, N, NH, HS, scale) - l);
                if (which == 2)
                    acc += p * load_t(dout, ((size_t)b * N + i) * D + (size_t)h * HS + d);
                else
                    acc += p * dscore(dout, qkv, out, b, i, n, h, N, NH, HS) *
                           load_t(qkv, qkv_at(b, i, 0, h, d, N, NH, HS));
            }
            if (which == 1)
                acc *= scale;
        }
        store_t(dqkv, e, acc);
    }
}

static int flash_ok(tbi_t a, tbi_t b, tbi_t c, int HS)
{
    return (HS == 64 || HS == 128) && a.dt == TB_DTYPE_BF16 && b.dt == TB_DTYPE_BF16 &&
           c.dt == TB_DTYPE_BF16 && tbc_aligned(a.p, 16) && tbc_aligned(b.p, 16) &&
           tbc_aligned(c.p, 16);
}

static int attention_args(tbi_backend *be, const char *op, const tbi_t *t, int n, int B, int N,
                          int NH, int HS)
{
    for (int i = 0; i < n; i++)
        if (!t[i].p || !tbc_typed_ok(t[i]))
            return tbi_err(TB_EINVAL, "%s %s: tensor %d missing, of dtype %d or misaligned",
                           be->name, op, i, t[i].dt);
    if (B <= 0 || N <= 0 || NH <= 0 || HS <= 0)
        return tbi_err(TB_EINVAL, "%s %s: B %d N %d NH %d HS %d", be->name, op, B, N, NH, HS);
    return 0;
}

/* A flash launcher's refusal (TB_EINVAL: its shape or alignment rules) or the runtime's error. */
static int flash_failed(tbi_backend *be, const char *op, int rc, int B, int N, int NH, int HS)
{
    if (rc == TB_EINVAL)
        return tbi_err(TB_EINVAL, "%s %s: the flash kernel refused B %d, N %d, NH %d, HS %d or "
                       "its tensors' alignment", be->name, op, B, N, NH, HS);
    return tbi_err(TB_ECUDA, "%s %s: the flash kernel's launch failed: %s", be->name, op,
                   tbc_rt_error_string());
}

static int tbc_attention_fwd(tbi_backend *be, tbi_t out, float *lse, tbi_t qkv, int B, int N,
                             int NH, int HS, int causal)
{
    const tbi_t t[] = {out, qkv};
    TBI_TRY(attention_args(be, "attention_fwd", t, 2, B, N, NH, HS));
    if (flash_ok(out, qkv, qkv, HS) && (long long)B * NH <= 65535) {
        const int rc = tbc_flash_fwd(tbc_stream(be), (bf16 *)out.p, lse, (const bf16 *)qkv.p, B,
                                     N, NH, HS, causal);
        return rc ? flash_failed(be, "attention_fwd", rc, B, N, NH, HS) : 0;
    }
    const size_t total = (size_t)B * N * NH * HS;
    TBC_LAUNCH(attention_plain_fwd, tbc_blocks(total, 128), 128, 0, tbc_stream(be), out, lse, qkv,
               B, N, NH, HS, causal, 1.0f / sqrtf((float)HS));
    return tbc_launched(be, "attention_fwd");
}

static int tbc_attention_bwd(tbi_backend *be, tbi_t dqkv, tbi_t dout, tbi_t qkv, tbi_t out,
                             const float *lse, int B, int N, int NH, int HS, int causal)
{
    const tbi_t t[] = {dqkv, dout, qkv, out};
    TBI_TRY(attention_args(be, "attention_bwd", t, 4, B, N, NH, HS));
    if (flash_ok(dqkv, dout, qkv, HS) && out.dt == TB_DTYPE_BF16 && (long long)B * NH <= 65535) {
        void *work = NULL;
        TBI_TRY(tbc_scratch(be, tbc_flash_bwd_workspace_bytes(B, N, NH, HS), &work));
        const int rc = tbc_flash_bwd(tbc_stream(be), (bf16 *)dqkv.p, (float *)work,
                                     (const bf16 *)dout.p, (const bf16 *)qkv.p,
                                     (const bf16 *)out.p, lse, B, N, NH, HS, causal);
        return rc ? flash_failed(be, "attention_bwd", rc, B, N, NH, HS) : 0;
    }
    const size_t total = (size_t)B * N * 3 * NH * HS;
    TBC_LAUNCH(attention_plain_bwd, tbc_blocks(total, 128), 128, 0, tbc_stream(be), dqkv, dout, qkv,
               out, lse, B, N, NH, HS, causal, 1.0f / sqrtf((float)HS));
    return tbc_launched(be, "attention_bwd");
}
