/* src/data/augment.c - the normalisation constants clips are normalised with (0-255 scale).
 * The normalisation itself is a backend op (src/tensor/backend.h: normalize), so uint8 clips
 * are what crosses to a device. Tests: tests/test_backend.c. */
#include "tubelet/data.h"

const float tb_mean_openai[3] = {108.3272985f, 116.7460125f, 104.09373615f};
const float tb_std_openai[3] = {68.5005327f, 66.6321579f, 70.32316305f};
const float tb_mean_imagenet[3] = {123.675f, 116.28f, 103.53f};
const float tb_std_imagenet[3] = {58.395f, 57.12f, 57.375f};
