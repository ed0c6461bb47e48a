/* tests/gpu/attention_check.cu - the CUDA FlashAttention (src/tensor/cuda/attention.cu)
 * against a double-precision CPU reference computed from the same bf16-rounded inputs: out,
 * lse, dq, dk, dv for HS 64 and 128, causal and not, N from 1 to 1568. --time: ms and TFLOP/s
 * on ViT-B's shapes; --info: each kernel's dynamic shared memory; --selftest: the reference's
 * backward against finite differences (these two need no GPU). Not in ctest
 * (build machines have no GPU); bench/gpu-check.sh builds and runs it. Needs only the CUDA
 * runtime. Exit 0: all passed; 1: a failure; 77: no usable GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "attention_ref.h"
#include "tensor/cuda/attention.cu"

typedef __nv_bfloat16 bf16;

#define CHECK_CUDA(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

struct shape {
    int B, N, NH, HS, causal;
};

/* The device buffers of one shape: inputs, outputs, lse and the backward's workspace. */
struct bufs {
    bf16 *qkv, *dqkv, *dout, *out;
    float *lse, *work;
    size_t n_qkv, n_out, n_lse, work_bytes;
};

static struct bufs bufs_alloc(struct shape c)
{
    struct bufs b;
    b.n_qkv = (size_t)c.B * c.N * 3 * c.NH * c.HS;
    b.n_out = b.n_qkv / 3;
    b.n_lse = (size_t)c.B * c.NH * c.N;
    b.work_bytes = tbc_flash_bwd_workspace_bytes(c.B, c.N, c.NH, c.HS);
    CHECK_CUDA(cudaMalloc(&b.qkv, b.n_qkv * sizeof(bf16)));
    CHECK_CUDA(cudaMalloc(&b.dqkv, b.n_qkv * sizeof(bf16)));
    CHECK_CUDA(cudaMalloc(&b.dout, b.n_out * sizeof(bf16)));
    CHECK_CUDA(cudaMalloc(&b.out, b.n_out * sizeof(bf16)));
    CHECK_CUDA(cudaMalloc(&b.lse, b.n_lse * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&b.work, b.work_bytes));
    return b;
}

static void bufs_free(struct bufs *b)
{
    cudaFree(b->qkv);
    cudaFree(b->dqkv);
    cudaFree(b->dout);
    cudaFree(b->out);
    cudaFree(b->lse);
    cudaFree(b->work);
}

/* One case: random inputs, forward then backward on the GPU, the reference; 0 if it passed. */
static int check_case(struct shape c)
{
    const int D = c.NH * c.HS;
    struct bufs g = bufs_alloc(c);
    const size_t n_qkv = g.n_qkv, n_out = g.n_out, n_lse = g.n_lse, work_bytes = g.work_bytes;
    std::vector<bf16> qkv_b, dout_b, out_b(n_out), dqkv_b(n_qkv);
    std::vector<double> qkv_f, dout_f;
    std::vector<float> lse_g(n_lse);
    random_bf16(qkv_b, qkv_f, n_qkv);
    random_bf16(dout_b, dout_f, n_out);

    bf16 *qkv = g.qkv, *dout = g.dout, *out = g.out, *dqkv = g.dqkv;
    float *lse = g.lse, *work = g.work;
    CHECK_CUDA(cudaMemcpy(qkv, qkv_b.data(), n_qkv * sizeof(bf16), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dout, dout_b.data(), n_out * sizeof(bf16), cudaMemcpyHostToDevice));
    /* Poison the outputs and the workspace: whatever the kernels fail to write shows. */
    CHECK_CUDA(cudaMemset(out, 0xff, n_out * sizeof(bf16)));
    CHECK_CUDA(cudaMemset(dqkv, 0xff, n_qkv * sizeof(bf16)));
    CHECK_CUDA(cudaMemset(lse, 0xff, n_lse * sizeof(float)));
    CHECK_CUDA(cudaMemset(work, 0xff, work_bytes));
    int rf = tbc_flash_fwd(0, out, lse, qkv, c.B, c.N, c.NH, c.HS, c.causal);
    int rb =
        rf ? rf : tbc_flash_bwd(0, dqkv, work, dout, qkv, out, lse, c.B, c.N, c.NH, c.HS, c.causal);
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(out_b.data(), out, n_out * sizeof(bf16), cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(lse_g.data(), lse, n_lse * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(dqkv_b.data(), dqkv, n_qkv * sizeof(bf16), cudaMemcpyDeviceToHost));
    bufs_free(&g);

    printf("HS %3d causal %d B %d NH %d N %4d ", c.HS, c.causal, c.B, c.NH, c.N);
    if (rf || rb) {
        printf("| launch failed: fwd %d bwd %d | FAIL\n", rf, rb);
        return 1;
    }
    std::vector<double> ref_out(n_out), ref_lse(n_lse), ref_dqkv(n_qkv);
    reference(qkv_f.data(), dout_f.data(), c.B, c.N, c.NH, c.HS, c.causal, ref_out.data(),
              ref_lse.data(), ref_dqkv.data());

    struct err e_out = {0, 0, 0, 0}, e_lse = {0, 0, 0, 0}, e_g[3] = {};
    for (size_t i = 0; i < n_out; i++)
        err_add(&e_out, __bfloat162float(out_b[i]), ref_out[i]);
    for (size_t i = 0; i < n_lse; i++)
        err_add(&e_lse, lse_g[i], ref_lse[i]);
    for (size_t i = 0; i < n_qkv; i++)
        err_add(&e_g[i / D % 3], __bfloat162float(dqkv_b[i]), ref_dqkv[i]);

    const int ok = err_ok(&e_out) && e_lse.max_abs <= TOL_LSE && err_ok(&e_g[0]) &&
                   err_ok(&e_g[1]) && err_ok(&e_g[2]);
    printf("| out rel %.1e max %.1e | lse max %.1e", err_rel(&e_out), e_out.max_abs, e_lse.max_abs);
    const char *names[3] = {"dq", "dk", "dv"};
    for (int t = 0; t < 3; t++)
        printf(" | %s rel %.1e max %.1e", names[t], err_rel(&e_g[t]), e_g[t].max_abs);
    printf(" | %s\n", ok ? "ok" : "FAIL");
    fflush(stdout);
    return ok ? 0 : 1;
}

static int check_all(int quick)
{
    const int Ns[] = {1, 17, 64, 197, 785, 1568};
    int failed = 0, n = 0;
    for (int HS = 64; HS <= 128; HS *= 2)
        for (int causal = 0; causal <= 1; causal++)
            for (int ni = 0; ni < 6; ni++) {
                const int N = Ns[ni];
                if (quick && N > 197)
                    continue;
                /* One head alone, then several heads and clips (the offsets between them);
                 * the longest sequence with fewer, to bound the reference's time. */
                struct shape one = {1, N, 1, HS, causal};
                struct shape many = {2, N, 3, HS, causal};
                if (N == 1568) {
                    many.B = 1;
                    many.NH = 2;
                }
                failed += check_case(one);
                failed += check_case(many);
                n += 2;
            }
    printf("%d of %d cases failed (tolerances: out, dq, dk, dv relative L2 <= %.0e or RMS <= "
           "%.0e; lse max abs <= %.0e)\n",
           failed, n, TOL_REL, TOL_RMS, TOL_LSE);
    return failed ? 1 : 0;
}

/* The reference's own backward against central differences of sum(dout * out), in double:
 * a few shapes, causal and not; needs no GPU. 0 if it agrees. */
static int selftest(void)
{
    int bad = 0;
    for (int causal = 0; causal <= 1; causal++) {
        const int B = 2, N = 7, NH = 2, HS = 64, D = NH * HS;
        const size_t n_qkv = (size_t)B * N * 3 * D, n_out = (size_t)B * N * D;
        std::vector<double> qkv(n_qkv), dout(n_out), out(n_out), lse(B * NH * N), g(n_qkv);
        std::vector<double> o2(n_out), g2(n_qkv);
        for (size_t i = 0; i < n_qkv; i++)
            qkv[i] = gaussian();
        for (size_t i = 0; i < n_out; i++)
            dout[i] = gaussian();
        reference(qkv.data(), dout.data(), B, N, NH, HS, causal, out.data(), lse.data(), g.data());
        double worst = 0;
        for (int t = 0; t < 60; t++) {
            const size_t idx = (size_t)(uniform() * n_qkv);
            const double x = qkv[idx], eps = 1e-4;
            double f[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                qkv[idx] = x + (sgn ? -eps : eps);
                reference(qkv.data(), dout.data(), B, N, NH, HS, causal, o2.data(), lse.data(),
                          g2.data());
                f[sgn] = 0;
                for (size_t i = 0; i < n_out; i++)
                    f[sgn] += dout[i] * o2[i];
            }
            qkv[idx] = x;
            const double num = (f[0] - f[1]) / (2 * eps),
                         e = fabs(num - g[idx]) / (fabs(num) + 1e-3);
            worst = e > worst ? e : worst;
        }
        printf("reference backward vs central differences, causal %d: worst relative error "
               "%.1e %s\n",
               causal, worst, worst < 1e-6 ? "ok" : "FAIL");
        bad += worst >= 1e-6;
    }
    return bad ? 1 : 0;
}

/* Inputs for timing: a hash of the index, uniform in [-2, 2). */
__global__ void fill_kernel(bf16 *p, size_t n, uint32_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u ^ seed;
        x ^= x >> 15;
        x *= 2246822519u;
        x ^= x >> 13;
        p[i] = __float2bfloat16((float)(x >> 8) * (4.0f / 16777216.0f) - 2.0f);
    }
}

/* FLOPs counted as FlashAttention's papers do: forward 4 B NH N^2 HS (QK^T and PV), backward
 * 2.5 times that (five products); causal halves both. */
static int time_all(void)
{
    const struct shape shapes[] = {
        {8, 1568, 12, 64, 0}, {32, 1568, 12, 64, 0}, {8, 785, 12, 64, 0}, {32, 785, 12, 64, 0},
        {8, 1568, 6, 128, 0}, {32, 1568, 6, 128, 0}, {8, 785, 6, 128, 0}, {32, 785, 6, 128, 0},
        {8, 1568, 12, 64, 1}, {8, 1568, 6, 128, 1}};
    const int iters = 20;
    printf("%-28s %9s %9s %9s %9s\n", "shape", "fwd ms", "TFLOP/s", "bwd ms", "TFLOP/s");
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        const struct shape c = shapes[si];
        struct bufs g = bufs_alloc(c);
        const size_t n_qkv = g.n_qkv, n_out = g.n_out;
        bf16 *qkv = g.qkv, *dout = g.dout, *out = g.out, *dqkv = g.dqkv;
        float *lse = g.lse, *work = g.work;
        fill_kernel<<<1024, 256>>>(qkv, n_qkv, 1);
        fill_kernel<<<1024, 256>>>(dout, n_out, 2);
        cudaEvent_t e0, e1, e2;
        CHECK_CUDA(cudaEventCreate(&e0));
        CHECK_CUDA(cudaEventCreate(&e1));
        CHECK_CUDA(cudaEventCreate(&e2));
        int rc = 0;
        for (int w = 0; w < 2 && !rc; w++) {
            rc |= tbc_flash_fwd(0, out, lse, qkv, c.B, c.N, c.NH, c.HS, c.causal);
            rc |= tbc_flash_bwd(0, dqkv, work, dout, qkv, out, lse, c.B, c.N, c.NH, c.HS, c.causal);
        }
        CHECK_CUDA(cudaEventRecord(e0));
        for (int it = 0; it < iters && !rc; it++)
            rc |= tbc_flash_fwd(0, out, lse, qkv, c.B, c.N, c.NH, c.HS, c.causal);
        CHECK_CUDA(cudaEventRecord(e1));
        for (int it = 0; it < iters && !rc; it++)
            rc |= tbc_flash_bwd(0, dqkv, work, dout, qkv, out, lse, c.B, c.N, c.NH, c.HS, c.causal);
        CHECK_CUDA(cudaEventRecord(e2));
        CHECK_CUDA(cudaEventSynchronize(e2));
        float fms = 0, bms = 0;
        CHECK_CUDA(cudaEventElapsedTime(&fms, e0, e1));
        CHECK_CUDA(cudaEventElapsedTime(&bms, e1, e2));
        fms /= iters;
        bms /= iters;
        const double flops = 4.0 * c.B * c.NH * (double)c.N * c.N * c.HS * (c.causal ? 0.5 : 1.0);
        char name[64];
        snprintf(name, sizeof(name), "B%d N%d NH%d HS%d%s", c.B, c.N, c.NH, c.HS,
                 c.causal ? " causal" : "");
        if (rc)
            printf("%-28s launch failed (%d)\n", name, rc);
        else
            printf("%-28s %9.3f %9.1f %9.3f %9.1f\n", name, fms, flops / fms * 1e-9, bms,
                   2.5 * flops / bms * 1e-9);
        fflush(stdout);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        cudaEventDestroy(e2);
        bufs_free(&g);
        if (rc)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int timing = 0, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--info")) {
            for (int HS = 64; HS <= 128; HS *= 2)
                printf("HS %d: forward %zu bytes, backward %zu bytes of shared memory\n", HS,
                       tbc_flash_smem_bytes(HS, 0), tbc_flash_smem_bytes(HS, 1));
            return 0;
        } else if (!strcmp(argv[i], "--selftest")) {
            return selftest();
        } else if (!strcmp(argv[i], "--time")) {
            timing = 1;
        } else if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else {
            fprintf(stderr, "usage: %s [--quick | --time | --info | --selftest]\n", argv[0]);
            return 2;
        }
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("attention_check: no GPU, skipped\n");
        return 77;
    }
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("%s, compute capability %d.%d\n", prop.name, prop.major, prop.minor);
    if (prop.major < 8) {
        printf("attention_check: the kernels need sm_80 or later, skipped\n");
        return 77;
    }
    return timing ? time_all() : check_all(quick);
}
