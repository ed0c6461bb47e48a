/* src/video/resize.h - the reader's own crop -> RGB24 resize for 8-bit 4:2:0 frames with the
 * bilinear filter (the default), replacing swscale's C path there. Not public. */
#ifndef TUBELET_VIDEO_RESIZE_H
#define TUBELET_VIDEO_RESIZE_H

#include <stddef.h>
#include <stdint.h>

/* The filter tables of one crop size, output size and flip, and the row buffers; kept while
 * the next call asks for the same, rebuilt (in the same memory where it fits) otherwise. */
struct tbi_resize;

/* The code tbi_resize_420 runs here: TBI_RESIZE_AVX512 where tbi_cpu_avx512(), else
 * TBI_RESIZE_AVX2 where tbi_cpu_avx2() (src/core/cpu.h: TUBELET_CPU=portable turns off the
 * first, nothing the second), else TBI_RESIZE_C (plain C: the same bytes, but
 * slower than swscale's C path, so the reader uses swscale there). */
enum { TBI_RESIZE_C, TBI_RESIZE_AVX2, TBI_RESIZE_AVX512 };
int tbi_resize_path(void);

/* 1 where tbi_resize_420 takes the sizes: out_w even and the crop at least 8 x 8. swscale
 * does the others its own way, which this does not follow: an odd output width switches it to
 * full-resolution chroma and another matrix, a plane under 4 samples to truncated filters. */
int tbi_resize_takes(int cw, int ch, int out_w, int out_h);

/* Resize a cw x ch crop of an 8-bit 4:2:0 picture to out_w x out_h RGB24 at dst (rows of
 * out_w * 3 bytes, mirrored left to right when flip). src: the crop's Y, U and V planes at its
 * corner (chroma at x / 2, y / 2: x and y even; ceil(cw / 2) x ceil(ch / 2) chroma samples),
 * ls their line sizes. full_range: Y and chroma span 0-255 (JPEG) rather than 16-235 /
 * 16-240. The matrix is BT.601, as swscale's default (tbi_resize_420_matrix takes another).
 *
 * The filter is swscale's SWS_BILINEAR: a tent as wide as the scale factor where it shrinks
 * (one sample where it grows), centre-aligned in each plane's own grid, edges repeated; chroma
 * scaled to half the output width and its full height, two pixels sharing a chroma sample, as
 * swscale's packed RGB output does. Fixed point: 14-bit coefficients, values kept at 6
 * fractional bits from the vertical pass to the matrix; every path computes the same integers
 * (the vector passes only reorder exact sums), so the bytes do not depend on the CPU.
 *
 * portable: 1 runs the plain C code whatever the CPU has (the tests compare the paths).
 * 0, TB_EINVAL where !tbi_resize_takes, or TB_ENOMEM (with tbi_err's message; *rs is then
 * freed and NULL). */
int tbi_resize_420(struct tbi_resize **rs, const uint8_t *const src[3], const int ls[3], int cw,
                   int ch, int full_range, int out_w, int out_h, int flip, uint8_t *dst,
                   int portable);
/* The same with the matrix coef, one of swscale's tables (sws_getCoefficients: crv, cbu, cgu,
 * cgv; NULL: BT.601), as ffmpeg's scale filter picks it for a frame's colorspace. */
int tbi_resize_420_matrix(struct tbi_resize **rs, const uint8_t *const src[3], const int ls[3],
                          int cw, int ch, int full_range, const int *coef, int out_w, int out_h,
                          int flip, uint8_t *dst, int portable);
void tbi_resize_free(struct tbi_resize **rs);

#endif /* TUBELET_VIDEO_RESIZE_H */
