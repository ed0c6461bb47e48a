/* tests/gpu/attention_emulate.cpp - src/tensor/cuda/attention.cu's launchers and kernels run on
 * the CPU through src/tensor/cuda/emu/emulate.h, against the double reference of attention_ref.h, on
 * small shapes (HS 64 and 128, causal and not, tails of every tile): checks the fragment
 * indexing, masking, pipelining and workspace logic with no GPU. It cannot see what the
 * emulation does not model (the hardware's own layouts are taken from the PTX ISA, timing,
 * memory ordering), so attention_check on a GPU stays the test of record. Exit 0 or 1. */
#define TBC_EMULATE 1
#include "emulate_ptx.h"

#include "attention_ref.h"
#include "tensor/cuda/attention.cu"

static int emulate_case(int B, int N, int NH, int HS, int causal)
{
    const int D = NH * HS;
    const size_t n_qkv = (size_t)B * N * 3 * D, n_out = (size_t)B * N * D;
    const size_t n_lse = (size_t)B * NH * N;
    std::vector<bf16> qkv_h, dout_h, out(n_out), dqkv(n_qkv);
    std::vector<double> qkv_f, dout_f;
    random_bf16(qkv_h, qkv_f, n_qkv);
    random_bf16(dout_h, dout_f, n_out);
    /* Device memory between guard pages, NaN until written (emulate_mem.h). */
    const size_t work_bytes = tbc_flash_bwd_workspace_bytes(B, N, NH, HS);
    bf16 *qkv = (bf16 *)emu_malloc(n_qkv * sizeof(bf16));
    bf16 *dout = (bf16 *)emu_malloc(n_out * sizeof(bf16));
    bf16 *out_d = (bf16 *)emu_malloc(n_out * sizeof(bf16));
    bf16 *dqkv_d = (bf16 *)emu_malloc(n_qkv * sizeof(bf16));
    float *lse_d = (float *)emu_malloc(n_lse * sizeof(float));
    float *work = (float *)emu_malloc(work_bytes, 8); /* 8-byte aligned: float2 loads */
    memcpy(qkv, qkv_h.data(), n_qkv * sizeof(bf16));
    memcpy(dout, dout_h.data(), n_out * sizeof(bf16));
    const long c0 = emu_n_collectives;
    int rf = tbc_flash_fwd(nullptr, out_d, lse_d, qkv, B, N, NH, HS, causal);
    int rb = tbc_flash_bwd(nullptr, dqkv_d, work, dout, qkv, out_d, lse_d, B, N, NH, HS,
                               causal);
    std::vector<float> lse(lse_d, lse_d + n_lse);
    memcpy(out.data(), out_d, n_out * sizeof(bf16));
    memcpy(dqkv.data(), dqkv_d, n_qkv * sizeof(bf16));
    int freed = 0;
    for (void *p : {(void *)qkv, (void *)dout, (void *)out_d, (void *)dqkv_d, (void *)lse_d,
                    (void *)work})
        freed |= emu_free(p);
    rb |= freed;
    printf("HS %3d causal %d B %d NH %d N %3d ", HS, causal, B, NH, N);
    if (rf || rb) {
        printf("| launchers returned %d, %d | FAIL\n", rf, rb);
        return 1;
    }
    std::vector<double> ref_out(n_out), ref_lse(n_lse), ref_dqkv(n_qkv);
    reference(qkv_f.data(), dout_f.data(), B, N, NH, HS, causal, ref_out.data(), ref_lse.data(),
              ref_dqkv.data());
    struct err e_out = {0, 0, 0, 0}, e_lse = {0, 0, 0, 0}, e_g[3] = {};
    for (size_t i = 0; i < n_out; i++)
        err_add(&e_out, __bfloat162float(out[i]), ref_out[i]);
    for (size_t i = 0; i < n_lse; i++)
        err_add(&e_lse, lse[i], ref_lse[i]);
    for (size_t i = 0; i < n_qkv; i++)
        err_add(&e_g[i / D % 3], __bfloat162float(dqkv[i]), ref_dqkv[i]);
    const int ok = err_ok(&e_out) && e_lse.max_abs <= TOL_LSE && err_ok(&e_g[0]) &&
                   err_ok(&e_g[1]) && err_ok(&e_g[2]);
    printf("| out rel %.1e | lse max %.1e | dq rel %.1e | dk rel %.1e | dv rel %.1e | %ld warp "
           "ops | %s\n",
           err_rel(&e_out), e_lse.max_abs, err_rel(&e_g[0]), err_rel(&e_g[1]), err_rel(&e_g[2]),
           emu_n_collectives - c0, ok ? "ok" : "FAIL");
    fflush(stdout);
    return ok ? 0 : 1;
}

int main(void)
{
    int failed = 0, n = 0;
    const int Ns[] = {1, 17, 64, 130};
    for (int HS = 64; HS <= 128; HS *= 2)
        for (int causal = 0; causal <= 1; causal++)
            for (int ni = 0; ni < 4; ni++) {
                failed += emulate_case(1, Ns[ni], 1, HS, causal);
                n++;
                if (Ns[ni] <= 64) {
                    failed += emulate_case(2, Ns[ni], 2, HS, causal);
                    n++;
                }
            }
    /* The launchers' argument checks. */
    bf16 dummy[64] __attribute__((aligned(16)));
    float f[64];
    const int bad = tbc_flash_fwd(nullptr, dummy, f, dummy, 1, 1, 1, 96, 0) == TB_EINVAL &&
                    tbc_flash_fwd(nullptr, dummy, f, dummy + 1, 1, 1, 1, 64, 0) == TB_EINVAL &&
                    tbc_flash_fwd(nullptr, dummy, f, dummy, 1, 0, 1, 64, 0) == TB_EINVAL;
    printf("unsupported HS, misaligned qkv, N = 0: TB_EINVAL %s\n", bad ? "ok" : "FAIL");
    failed += !bad;
    printf("%d of %d emulated cases failed\n", failed, n + 1);
    emu_release();
    return failed ? 1 : 0;
}
