/* src/tensor/cuda/video.cu - the input op and the clip augmentations, the CPU ops' arithmetic
 * (src/tensor/cpu/model_ops.c, xent.c): uint8 clips to normalised float, the patchify gather,
 * mixup / cutmix of the pairs (b, B-1-b), and random erasing. Every kernel is one thread per
 * output element (grid-stride); the host arguments travel by value, or (erasing's boxes and
 * streams) through the op's scratch memory. Erasing's normals are counter-addressable: draw k
 * of a stream is one Philox4x32-10 block at counter k (src/core/rng.c's generator, four words
 * a normal), so each pixel computes its own. Tests: tests/test_backend.c (parity). */
#include "tensor/cuda/cuda_common.h"
#include "tensor/video_rules.h"

/* ---- normalize ---------------------------------------------------------------------------- */
struct vid_norm_params {
    float mean[3], std[3];
};

/* out (B, 3, T, H, W) from clips (B, T, H, W, 3), one thread an output element. */
__global__ void vid_normalize_kernel(float *out, const uint8_t *clips, const uint8_t *flip, int B,
                                     int T, int H, int W, struct vid_norm_params p)
{
    const size_t n = (size_t)B * 3 * T * H * W;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t q = i;
        const int x = (int)(q % W);
        q /= W;
        const int y = (int)(q % H);
        q /= H;
        const int t = (int)(q % T);
        q /= T;
        const int c = (int)(q % 3), b = (int)(q / 3);
        const int sx = flip && GL_LD(&flip[b]) ? W - 1 - x : x;
        const uint8_t v = GL_LD(&clips[((((size_t)b * T + t) * H + y) * W + sx) * 3 + c]);
        /* selects, not an indexed load: a dynamic index into the parameter would be local memory */
        const float m = c == 0 ? p.mean[0] : c == 1 ? p.mean[1] : p.mean[2];
        const float sd = c == 0 ? p.std[0] : c == 1 ? p.std[1] : p.std[2];
        GL_ST(&out[i], ((float)v - m) / sd);
    }
}

static int tbc_normalize(tbi_backend *be, float *out, const uint8_t *clips, const uint8_t *flip,
                         int B, int T, int H, int W, const float *host_mean, const float *host_std)
{
    if (B < 0 || T < 0 || H < 0 || W < 0 || !host_mean || !host_std)
        return tbi_err(TB_EINVAL, "%s normalize: B %d, T %d, H %d, W %d, mean and std of 3",
                       be->name, B, T, H, W);
    const size_t n = (size_t)B * 3 * T * H * W;
    if (n == 0)
        return 0;
    struct vid_norm_params p;
    for (int c = 0; c < 3; c++) {
        p.mean[c] = host_mean[c];
        p.std[c] = host_std[c];
    }
    TBC_LAUNCH(vid_normalize_kernel, tbc_blocks(n, 256), 256, 0, tbc_stream(be), out, clips, flip,
               B, T, H, W, p);
    return tbc_launched(be, "normalize");
}

/* ---- patchify ----------------------------------------------------------------------------- */
/* cols (B, N, C TU P P) from video (B, C, T, H, W): element i of a row is (c, dt, dy, dx). */
__global__ void vid_patchify_kernel(float *cols, const float *video, int B, int C, int T, int H,
                                    int W, int TU, int P)
{
    const int Hp = H / P, Wp = W / P, N = T / TU * Hp * Wp, row = C * TU * P * P;
    const size_t n = (size_t)B * N * row;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t q = i;
        int e = (int)(q % row);
        q /= row;
        const int tok = (int)(q % N), b = (int)(q / N);
        const int dx = e % P, dy = e / P % P, dt = e / (P * P) % TU, c = e / (P * P * TU);
        const int t = tok / (Hp * Wp), h = tok / Wp % Hp, w = tok % Wp;
        GL_ST(&cols[i],
              GL_LD(&video[((((size_t)b * C + c) * T + t * TU + dt) * H + h * P + dy) * W +
                           (size_t)w * P + dx]));
    }
}

static int tbc_patchify(tbi_backend *be, float *cols, const float *video, int B, int C, int T,
                        int H, int W, int TU, int P)
{
    if (B < 0 || C < 0 || T < 0 || H < 0 || W < 0 || TU <= 0 || P <= 0)
        return tbi_err(TB_EINVAL, "%s patchify: B %d, C %d, T %d, H %d, W %d, TU %d, P %d",
                       be->name, B, C, T, H, W, TU, P);
    const size_t n = (size_t)B * (T / TU) * (H / P) * (W / P) * C * TU * P * P;
    if (n == 0)
        return 0;
    TBC_LAUNCH(vid_patchify_kernel, tbc_blocks(n, 256), 256, 0, tbc_stream(be), cols, video, B, C,
               T, H, W, TU, P);
    return tbc_launched(be, "patchify");
}

/* ---- mix_clips ---------------------------------------------------------------------------- */
/* Mixup: thread i of pair b (< (B + 1) / 2) mixes element i of clips b and B-1-b (the middle
 * clip of an odd batch with itself: both reads come before either write, as on the CPU). */
__global__ void vid_mixup_kernel(float *x, int B, size_t clip, float a, float c)
{
    const size_t n = (size_t)((B + 1) / 2) * clip;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x) {
        const size_t b = j / clip, i = j % clip;
        float *u = x + b * clip + i, *v = x + ((size_t)B - 1 - b) * clip + i;
        const float ui = GL_LD(u), vi = GL_LD(v);
        GL_ST(u, ui * a + vi * c);
        GL_ST(v, vi * a + ui * c);
    }
}

struct vid_box {
    int y0, y1, x0, x1;
};

/* Cutmix: the box of every plane of clip b (< B / 2) swapped with clip B-1-b's. */
__global__ void vid_cutmix_kernel(float *x, int B, int CT, int H, int W, struct vid_box bx)
{
    const int bh = bx.y1 - bx.y0, bw = bx.x1 - bx.x0;
    const size_t plane = (size_t)H * W, clip = (size_t)CT * plane;
    const size_t n = (size_t)(B / 2) * CT * bh * bw;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x) {
        size_t q = j;
        const int k = bx.x0 + (int)(q % bw);
        q /= bw;
        const int y = bx.y0 + (int)(q % bh);
        q /= bh;
        const size_t qp = q % CT, b = q / CT;
        const size_t o = qp * plane + (size_t)y * W + k;
        float *u = x + b * clip + o, *v = x + ((size_t)B - 1 - b) * clip + o;
        const float t = GL_LD(u);
        GL_ST(u, GL_LD(v));
        GL_ST(v, t);
    }
}

static int tbc_mix_clips(tbi_backend *be, float *x, int B, int CT, int H, int W, float lam,
                         const int *host_box)
{
    if (B < 0 || CT < 0 || H < 0 || W < 0)
        return tbi_err(TB_EINVAL, "%s mix_clips: B %d, CT %d, H %d, W %d", be->name, B, CT, H, W);
    if (host_box && (host_box[0] < 0 || host_box[0] > host_box[1] || host_box[1] > H ||
                     host_box[2] < 0 || host_box[2] > host_box[3] || host_box[3] > W))
        return tbi_err(TB_EINVAL,
                       "%s mix_clips: cutmix box rows %d-%d, columns %d-%d outside %dx%d", be->name,
                       host_box[0], host_box[1], host_box[2], host_box[3], H, W);
    const size_t clip = (size_t)CT * H * W;
    if (!host_box) {
        const size_t n = (size_t)((B + 1) / 2) * clip;
        if (n == 0)
            return 0;
        TBC_LAUNCH(vid_mixup_kernel, tbc_blocks(n, 256), 256, 0, tbc_stream(be), x, B, clip, lam,
                   1.0f - lam);
        return tbc_launched(be, "mix_clips");
    }
    const struct vid_box bx = {host_box[0], host_box[1], host_box[2], host_box[3]};
    const size_t n = (size_t)(B / 2) * CT * (bx.y1 - bx.y0) * (bx.x1 - bx.x0);
    if (n == 0)
        return 0;
    TBC_LAUNCH(vid_cutmix_kernel, tbc_blocks(n, 256), 256, 0, tbc_stream(be), x, B, CT, H, W, bx);
    return tbc_launched(be, "mix_clips");
}

/* ---- erase_boxes -------------------------------------------------------------------------- */
/* src/core/rng.c's Philox4x32-10 block: out = Philox(ctr, key), ten rounds. */
static __device__ __forceinline__ void vid_philox(uint32_t c[4], uint32_t k0, uint32_t k1)
{
    for (int r = 0; r < 10; r++) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c[0] = hi1 ^ c[1] ^ k0;
        c[1] = lo1;
        c[2] = hi0 ^ c[3] ^ k1;
        c[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* cos(2 pi u), u in [0, 1): on the GPU as cospi(2 u), which needs no argument reduction (a
 * double cos's slow path uses local memory); emulated, the CPU's expression. */
static __device__ __forceinline__ double vid_cos_2pi(double u)
{
#ifdef TBC_EMULATE
    return cos(6.283185307179586 * u);
#else
    return cospi(2.0 * u);
#endif
}

/* Draw k of tb_rng_init(seed, stream)'s tb_rng_normal: the stream starts block-aligned and a
 * normal takes four words (two 64-bit uniforms), so draw k is exactly the block at counter k. */
static __device__ double vid_normal_at(uint64_t seed, uint64_t stream, uint64_t k)
{
    uint32_t c[4] = {(uint32_t)k, (uint32_t)(k >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
    vid_philox(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    const uint64_t w1 = (uint64_t)c[0] | ((uint64_t)c[1] << 32);
    const uint64_t w2 = (uint64_t)c[2] | ((uint64_t)c[3] << 32);
    double u1 = (double)(w1 >> 11) * (1.0 / 9007199254740992.0);
    const double u2 = (double)(w2 >> 11) * (1.0 / 9007199254740992.0);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * vid_cos_2pi(u2);
}

/* Block (b, t, c) of the grid (blockIdx.x = (b T + t) C + c) fills frame t, channel c of clip
 * b's box; its first draw follows the clip's earlier frames' boxes (all C channels each) and
 * this frame's earlier channels. streams (B) and boxes (B, T, 4) are device copies. */
__global__ void vid_erase_kernel(float *x, int C, int T, int H, int W, const int32_t *boxes,
                                 uint64_t seed, const uint64_t *streams)
{
    const int c = blockIdx.x % C, bt = blockIdx.x / C, t = bt % T, b = bt / T;
    const int32_t *bx = boxes + (size_t)bt * 4;
    if (GL_LD(&bx[0]) < 0)
        return;
    uint64_t k0 = 0;
    for (int s = 0; s < t; s++) {
        const int32_t *o = boxes + ((size_t)b * T + s) * 4;
        if (GL_LD(&o[0]) >= 0)
            k0 += (uint64_t)C * (uint64_t)(GL_LD(&o[1]) - GL_LD(&o[0])) *
                  (uint64_t)(GL_LD(&o[3]) - GL_LD(&o[2]));
    }
    const int bw = GL_LD(&bx[3]) - GL_LD(&bx[2]);
    const size_t area = (size_t)(GL_LD(&bx[1]) - GL_LD(&bx[0])) * bw;
    k0 += (uint64_t)c * area;
    float *f = x + (((size_t)b * C + c) * T + t) * H * W;
    const uint64_t stream = GL_LD(&streams[b]);
    for (size_t i = threadIdx.x; i < area; i += blockDim.x) {
        const int y = GL_LD(&bx[0]) + (int)(i / bw), k = GL_LD(&bx[2]) + (int)(i % bw);
        GL_ST(&f[(size_t)y * W + k], (float)vid_normal_at(seed, stream, k0 + i));
    }
}

static int tbc_erase_boxes(tbi_backend *be, float *x, int B, int C, int T, int H, int W,
                           const int32_t *host_boxes, uint64_t seed, const uint64_t *host_streams)
{
    if (B < 0 || C < 0 || T < 0 || H < 0 || W < 0 || (B > 0 && (!host_boxes || !host_streams)))
        return tbi_err(TB_EINVAL, "%s erase_boxes: B %d, C %d, T %d, H %d, W %d", be->name, B, C, T,
                       H, W);
    const int i = B > 0 ? tbi_erase_box_outside(host_boxes, B * T, H, W) : -1;
    if (i >= 0) {
        const int32_t *bx = host_boxes + (size_t)i * 4;
        return tbi_err(TB_EINVAL,
                       "%s erase_boxes: box of clip %d, frame %d: rows %d-%d, columns %d-%d "
                       "outside %dx%d",
                       be->name, i / T, i % T, bx[0], bx[1], bx[2], bx[3], H, W);
    }
    if ((size_t)B * C * T == 0)
        return 0;
    /* one scratch buffer: the streams (B uint64), then the boxes (B T 4 int32) */
    const size_t s_bytes = sizeof(uint64_t) * B, b_bytes = sizeof(int32_t) * 4 * B * T;
    void *scratch = NULL;
    TBI_TRY(tbc_scratch(be, s_bytes + b_bytes, &scratch));
    uint64_t *d_streams = (uint64_t *)scratch;
    int32_t *d_boxes = (int32_t *)((char *)scratch + s_bytes);
    if (tbc_rt_to_device(d_streams, host_streams, s_bytes, tbc_stream(be)) ||
        tbc_rt_to_device(d_boxes, host_boxes, b_bytes, tbc_stream(be)))
        return tbi_err(TB_ECUDA, "%s erase_boxes: copying the boxes to the device", be->name);
    TBC_LAUNCH(vid_erase_kernel, (unsigned)((size_t)B * T * C), 256, 0, tbc_stream(be), x, C, T, H,
               W, (const int32_t *)d_boxes, seed, (const uint64_t *)d_streams);
    return tbc_launched(be, "erase_boxes");
}
