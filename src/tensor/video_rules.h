/* src/tensor/video_rules.h - the erasing boxes' rule, written once for the CPU backend
 * (src/tensor/cpu/backend_cpu.c) and the CUDA one (src/tensor/cuda/video.cu), which both check
 * the host's boxes before any pixel is touched: a box (rows [y0, y1), columns [x0, x1), as
 * backend.h's erase_boxes has them; y0 < 0: no box) lies inside the H x W frame. Tests:
 * tests/test_backend.c. */
#ifndef TUBELET_TENSOR_VIDEO_RULES_H
#define TUBELET_TENSOR_VIDEO_RULES_H

#include <stdint.h>

#include "tensor/backend.h"

/* The index of the first of n boxes (n, 4) outside an H x W frame, or -1. */
static inline TBI_HD int tbi_erase_box_outside(const int32_t *boxes, int n, int H, int W)
{
    for (int i = 0; i < n; i++) {
        const int32_t *bx = boxes + (size_t)i * 4;
        if (bx[0] >= 0 && (bx[0] > bx[1] || bx[1] > H || bx[2] < 0 || bx[2] > bx[3] || bx[3] > W))
            return i;
    }
    return -1;
}

#endif /* TUBELET_TENSOR_VIDEO_RULES_H */
