/* src/data/augment.c - the batch augmentation op on the CPU: uint8 clips (B, T, H, W, 3) to
 * normalised float (B, 3, T, H, W) with per-clip horizontal flips. The CUDA backend gets the
 * same op with the same contract. Tests: tests/test_data.c (against PyTorch semantics). */
#include "tubelet/data.h"

const float tb_mean_openai[3] = {108.3272985f, 116.7460125f, 104.09373615f};
const float tb_std_openai[3] = {68.5005327f, 66.6321579f, 70.32316305f};
const float tb_mean_imagenet[3] = {123.675f, 116.28f, 103.53f};
const float tb_std_imagenet[3] = {58.395f, 57.12f, 57.375f};

void tb_augment_normalize(const uint8_t *in, int B, int T, int H, int W, const uint8_t *flip,
                          const float mean[3], const float std[3], float *out)
{
    const size_t plane = (size_t)H * W;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int mirror = flip && flip[b];
            const uint8_t *src = in + ((size_t)b * T + t) * plane * 3;  /* (H, W, 3) */
            for (int c = 0; c < 3; c++) {
                float m = mean[c], s = std[c];
                float *dst = out + (((size_t)b * 3 + c) * T + t) * plane; /* (H, W) */
                for (int y = 0; y < H; y++) {
                    const uint8_t *row = src + (size_t)y * W * 3 + c;
                    float *drow = dst + (size_t)y * W;
                    if (mirror)
                        for (int x = 0; x < W; x++)
                            drow[x] = ((float)row[(size_t)(W - 1 - x) * 3] - m) / s;
                    else
                        for (int x = 0; x < W; x++)
                            drow[x] = ((float)row[(size_t)x * 3] - m) / s;
                }
            }
        }
    }
}
