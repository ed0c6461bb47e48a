/* tests/gpu/cost_emulate.cpp - the emulated device's cost count (src/tensor/cuda/emu/
 * emulate_cost.h) on small kernels whose answer is arithmetic on their shapes: a coalesced f32
 * copy (bytes = footprint, sector efficiency 1), a copy with a stride of 32 floats (efficiency
 * 1/8: each lane's 4 bytes in a sector of its own), a read of every element twice (bytes read =
 * 2 x footprint), atomics on one word, a 16-byte vector copy, one warp's mma.sync (2 m n k
 * FLOPs), and nothing recorded with TBC_EMU_COST unset. Exit 0, or 1 on a failure. */
#define TBC_EMULATE 1
#include "emulate_ptx.h"

#include <unistd.h>

#include "tensor/cuda/cuda_common.h"

__global__ void copy_kernel(float *out, const float *in, int n, int stride)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        GL_ST(&out[(size_t)i * stride], GL_LD(&in[(size_t)i * stride]));
}

__global__ void twice_kernel(float *out, const float *in, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        GL_ST(&out[i], GL_LD(&in[i]) * GL_LD(&in[i]));
}

__global__ void vec_kernel(uint4 *out, const uint4 *in, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        GL_ST(&out[i], GL_LD(&in[i]));
}

/* Every lane reads one word, as a row's mean is read by the lanes of a column tile. */
__global__ void broadcast_kernel(float *out, const float *in)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    GL_ST(&out[i], GL_LD(&in[0]));
}

__global__ void atomic_kernel(float *sum)
{
    atomicAdd(sum, 1.0f);
}

__global__ void mma_kernel(float *out)
{
    const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0};
    mma(c, a, b);
    GL_ST(&out[threadIdx.x], c[0]);
}

/* One recorded line, its columns as EMU_COST_COLUMNS names them. */
struct rec {
    char kernel[64];
    double read, write, read_foot, write_foot, req, sectors, flops, atomics;
};

static std::vector<rec> read_lines(const char *path)
{
    std::vector<rec> r;
    FILE *f = fopen(path, "r");
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
        rec x;
        unsigned g[6], smem;
        if (sscanf(line, "%63[^\t]\t%u,%u,%u\t%u,%u,%u\t%u\t%lf\t%lf\t%lf\t%lf\t%lf\t%lf\t%lf\t%lf",
                   x.kernel, &g[0], &g[1], &g[2], &g[3], &g[4], &g[5], &smem, &x.read, &x.write,
                   &x.read_foot, &x.write_foot, &x.req, &x.sectors, &x.flops, &x.atomics) == 16)
            r.push_back(x);
    }
    if (f)
        fclose(f);
    return r;
}

static int failed, checked;

static void expect(const char *what, double got, double want)
{
    checked++;
    const int ok = got == want;
    printf("%-44s %12.6g (expected %12.6g) %s\n", what, got, want, ok ? "ok" : "FAIL");
    failed += !ok;
}

int main(void)
{
    char path[] = "/tmp/cost_emulate_XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0)
        return 1;
    close(fd);
    enum { N = 4096, T = 256, S = 32 };
    float *in = (float *)emu_malloc(sizeof(float) * N * S, 256);
    float *out = (float *)emu_malloc(sizeof(float) * N * S, 256);
    for (size_t i = 0; i < (size_t)N * S; i++)
        in[i] = 1.0f;

    /* Off: nothing is written. */
    unsetenv("TBC_EMU_COST");
    TBC_LAUNCH(copy_kernel, N / T, T, 0, nullptr, out, in, N, 1);
    expect("off: lines recorded", (double)emu_n_cost_lines, 0);

    setenv("TBC_EMU_COST", path, 1);
    TBC_LAUNCH(copy_kernel, N / T, T, 0, nullptr, out, in, N, 1);
    TBC_LAUNCH(copy_kernel, N / T, T, 0, nullptr, out, in, N, S);
    TBC_LAUNCH(twice_kernel, N / T, T, 0, nullptr, out, in, N);
    TBC_LAUNCH(vec_kernel, N / 4 / T, T, 0, nullptr, (uint4 *)out, (const uint4 *)in, N / 4);
    TBC_LAUNCH(atomic_kernel, 2, T, 0, nullptr, out);
    TBC_LAUNCH(mma_kernel, 1, 32, 0, nullptr, out);
    TBC_LAUNCH(broadcast_kernel, N / T, T, 0, nullptr, out, in);
    unsetenv("TBC_EMU_COST");
    std::vector<rec> r = read_lines(path);
    expect("lines recorded", (double)r.size(), 7);
    if (r.size() == 7) {
        /* A coalesced copy: N reads and N writes of 4 bytes, each once; a warp's 32 lanes read
         * 128 contiguous bytes of a 256-aligned buffer: 4 sectors, all bytes used. */
        expect("copy: bytes read", r[0].read, 4.0 * N);
        expect("copy: bytes written", r[0].write, 4.0 * N);
        expect("copy: read footprint", r[0].read_foot, 4.0 * N);
        expect("copy: write footprint", r[0].write_foot, 4.0 * N);
        expect("copy: sectors (N / 32 warp accesses x 4, x 2)", r[0].sectors, 2.0 * N / 32 * 4);
        expect("copy: sector efficiency", r[0].req / (32 * r[0].sectors), 1.0);
        /* Stride 32 floats (128 bytes): every lane in a sector of its own, which moves 32
         * bytes for its 4. */
        expect("strided: bytes read (32 a lane)", r[1].read, 32.0 * N);
        expect("strided: sectors (N / 32 x 32, x 2)", r[1].sectors, 2.0 * N / 32 * 32);
        expect("strided: sector efficiency", r[1].req / (32 * r[1].sectors), 1.0 / 8);
        /* Each element read twice. */
        expect("twice: bytes read", r[2].read, 2.0 * 4 * N);
        expect("twice: read footprint", r[2].read_foot, 4.0 * N);
        expect("twice: bytes read / footprint", r[2].read / r[2].read_foot, 2.0);
        expect("twice: sector efficiency", r[2].req / (32 * r[2].sectors), 1.0);
        /* 16-byte vectors: N / 4 accesses of 16 bytes, a warp's 512 bytes in 16 sectors. */
        expect("vector: bytes read", r[3].read, 4.0 * N);
        expect("vector: sectors (N / 4 / 32 x 16, x 2)", r[3].sectors, 2.0 * N / 4 / 32 * 16);
        expect("vector: sector efficiency", r[3].req / (32 * r[3].sectors), 1.0);
        /* 2 blocks x 256 threads add to one word: each a read and a write of 4 bytes; per warp
         * access one sector. */
        expect("atomic: atomics", r[4].atomics, 2.0 * T);
        expect("atomic: bytes read", r[4].read, 4.0 * 2 * T);
        expect("atomic: read footprint", r[4].read_foot, 4);
        expect("atomic: sectors", r[4].sectors, 2.0 * T / 32);
        /* One warp, one m16n8k16: 2 x 16 x 8 x 16 FLOPs. */
        expect("mma: tensor FLOPs", r[5].flops, 2.0 * 16 * 8 * 16);
        /* A word all 32 lanes read: one sector a warp (not 32 x 4 bytes), 4 bytes of it asked
         * for; the writes coalesced: 4 sectors a warp, all asked for. */
        expect("broadcast: bytes read (a sector a warp)", r[6].read, 32.0 * N / 32);
        expect("broadcast: bytes written", r[6].write, 4.0 * N);
        expect("broadcast: read footprint", r[6].read_foot, 4);
        expect("broadcast: sector efficiency ((4 + 128) / (5 x 32))",
               r[6].req / (32 * r[6].sectors), (4.0 + 128) / (5 * 32));
    }
    unlink(path);
    emu_free(in);
    emu_free(out);
    emu_release();
    printf("%d of %d checks failed\n", failed, checked);
    return failed ? 1 : 0;
}
