/* tests/test_resize.c - the reader's own crop -> RGB24 resize (src/video/resize.c).
 * - against swscale itself (SWS_BILINEAR, the reader's scaler before; the ffmpeg tool's, which
 *   tests/test_reader.c compares the reader with): mean abs difference <= 0.1 per byte on
 *   smooth pictures with noise, for shrinking, growing, the same height, odd crop widths and
 *   heights (chroma over ceil(w / 2) samples, as swscale reads them), tiny and extreme crops,
 *   both ranges, swscale's BT.709, FCC, SMPTE 240M and BT.2020 matrices besides BT.601;
 *   flipped crops against swscale's output mirrored; tables asked again with another matrix
 *   rebuilt;
 * - the vector code against the plain C code: identical bytes (AVX-512 where the CPU has it;
 *   AVX2 where it has only that, or under TUBELET_CPU=portable: test_resize_portable);
 * - what it leaves to swscale (odd output widths, crops under 8 pixels), refused;
 * - a table rebuilt for a new size in the memory of a larger one gives the same bytes as
 *   fresh tables. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include <libswscale/swscale.h>

#include "tb_test.h"
#include "video/resize.h"

#define PW 640 /* the picture the crops come from */
#define PH 360

static uint8_t pic[PW * PH * 3 / 2];
static int colorspace = SWS_CS_DEFAULT; /* the matrix of both (swscale's table) */

/* Gradients, a few hard edges and noise, in every plane. */
static void make_picture(unsigned seed, int full)
{
    srand(seed);
    int lo = full ? 0 : 16, hi = full ? 255 : 235;
    for (int y = 0; y < PH; y++)
        for (int x = 0; x < PW; x++) {
            int v = lo + (x * 3 + y * 2) % (hi - lo) + (rand() % 9) - 4;
            if ((x / 37 + y / 23) % 5 == 0)
                v = hi - v / 3;
            pic[y * PW + x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    uint8_t *u = pic + PW * PH, *v = u + PW * PH / 4;
    for (int y = 0; y < PH / 2; y++)
        for (int x = 0; x < PW / 2; x++) {
            u[y * PW / 2 + x] = (uint8_t)(40 + (x * 5 + y) % 180 + rand() % 5);
            v[y * PW / 2 + x] = (uint8_t)((x / 11 + y / 7) % 2 ? 200 - (y % 90) : 60 + x % 100);
        }
}

/* The crop at (x, y) (even) of size cw x ch (any), through swscale, to out (out_w x out_h
 * RGB24). */
static int swscale_ref(int x, int y, int cw, int ch, int full, int out_w, int out_h,
                       uint8_t *out)
{
    const uint8_t *src[4] = {pic + y * PW + x, pic + PW * PH + y / 2 * PW / 2 + x / 2,
                             pic + PW * PH * 5 / 4 + y / 2 * PW / 2 + x / 2, NULL};
    int ls[4] = {PW, PW / 2, PW / 2, 0};
    struct SwsContext *s = sws_getContext(cw, ch, AV_PIX_FMT_YUV420P, out_w, out_h,
                                          AV_PIX_FMT_RGB24, SWS_BILINEAR, NULL, NULL, NULL);
    if (!s)
        return -1;
    int *inv, *tab, sr, dr, bri, con, sat;
    sws_getColorspaceDetails(s, &inv, &sr, &tab, &dr, &bri, &con, &sat);
    sws_setColorspaceDetails(s, sws_getCoefficients(colorspace), full, tab, dr, bri, con, sat);
    int dls = (out_w * 3 + 63) & ~63;
    uint8_t *tmp = malloc((size_t)dls * (out_h + 2) + 64);
    uint8_t *dst[4] = {tmp, NULL, NULL, NULL};
    int dst_ls[4] = {dls, 0, 0, 0};
    sws_scale(s, src, ls, 0, ch, dst, dst_ls);
    for (int r = 0; r < out_h; r++)
        memcpy(out + (size_t)r * out_w * 3, tmp + (size_t)r * dls, (size_t)out_w * 3);
    free(tmp);
    sws_freeContext(s);
    return 0;
}

static int ours(struct tbi_resize **rs, int x, int y, int cw, int ch, int full, int out_w,
                int out_h, int flip, int portable, uint8_t *out)
{
    const uint8_t *src[3] = {pic + y * PW + x, pic + PW * PH + y / 2 * PW / 2 + x / 2,
                             pic + PW * PH * 5 / 4 + y / 2 * PW / 2 + x / 2};
    int ls[3] = {PW, PW / 2, PW / 2};
    if (colorspace == SWS_CS_DEFAULT) /* the BT.601 entry point, as bench_resize calls it */
        return tbi_resize_420(rs, src, ls, cw, ch, full, out_w, out_h, flip, out, portable);
    return tbi_resize_420_matrix(rs, src, ls, cw, ch, full, sws_getCoefficients(colorspace),
                                 out_w, out_h, flip, out, portable);
}

static void one(int x, int y, int cw, int ch, int full, int out_w, int out_h)
{
    size_t n = (size_t)out_w * out_h * 3;
    uint8_t *ref = malloc(n), *a = malloc(n), *b = malloc(n), *f = malloc(n);
    struct tbi_resize *ra = NULL, *rb = NULL;
    CHECK(swscale_ref(x, y, cw, ch, full, out_w, out_h, ref) == 0);
    CHECK(ours(&ra, x, y, cw, ch, full, out_w, out_h, 0, 0, a) == 0);
    CHECK(ours(&rb, x, y, cw, ch, full, out_w, out_h, 0, 1, b) == 0);
    CHECK_MSG(!memcmp(a, b, n), "%dx%d -> %dx%d: the vector code differs from the plain C code",
              cw, ch, out_w, out_h);
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d += abs(a[i] - ref[i]);
    d /= n;
    CHECK_MSG(d <= 0.1, "%dx%d at (%d, %d) -> %dx%d, %s range, matrix %d: mean abs difference "
              "%.3f from swscale", cw, ch, x, y, out_w, out_h, full ? "full" : "limited",
              colorspace, d);
    /* Flipped: swscale's mirrored, on both paths. */
    CHECK(ours(&ra, x, y, cw, ch, full, out_w, out_h, 1, 0, a) == 0);
    CHECK(ours(&rb, x, y, cw, ch, full, out_w, out_h, 1, 1, f) == 0);
    CHECK(!memcmp(a, f, n));
    double df = 0;
    for (int r = 0; r < out_h; r++)
        for (int c = 0; c < out_w; c++)
            for (int k = 0; k < 3; k++)
                df += abs(a[((size_t)r * out_w + c) * 3 + k] -
                          ref[((size_t)r * out_w + out_w - 1 - c) * 3 + k]);
    df /= n;
    CHECK_MSG(df <= 0.1, "%dx%d -> %dx%d flipped: mean abs difference %.3f from swscale "
              "mirrored", cw, ch, out_w, out_h, df);
    tbi_resize_free(&ra);
    tbi_resize_free(&rb);
    free(ref);
    free(a);
    free(b);
    free(f);
}

/* Tables rebuilt in a larger one's memory: the bytes of fresh ones. */
static void test_reuse(void)
{
    make_picture(7, 0);
    size_t n = 112 * 96 * 3;
    uint8_t *big = malloc(224 * 224 * 3), *a = malloc(n), *b = malloc(n);
    struct tbi_resize *reused = NULL, *fresh = NULL;
    CHECK(ours(&reused, 0, 0, 600, 340, 0, 224, 224, 1, 0, big) == 0);
    CHECK(ours(&reused, 10, 20, 150, 130, 0, 112, 96, 0, 0, a) == 0);
    CHECK(ours(&fresh, 10, 20, 150, 130, 0, 112, 96, 0, 0, b) == 0);
    CHECK(!memcmp(a, b, n));
    tbi_resize_free(&reused);
    tbi_resize_free(&fresh);
    CHECK(reused == NULL);
    free(big);
    free(a);
    free(b);
}

int main(void)
{
    tbt_begin("resize");
    static const char *const names[] = {"plain C", "AVX2", "AVX-512"};
    fprintf(stderr, "resize: %s against plain C\n", names[tbi_resize_path()]);
    static const int cases[][6] = {
        /* x, y, cw, ch, out_w, out_h */
        {14, 6, 320, 320, 224, 224},  /* W1's shrink */
        {0, 0, 568, 320, 224, 224},   /* the whole frame, anisotropic */
        {2, 8, 301, 203, 224, 224},   /* odd width and height, grows */
        {0, 0, 321, 177, 160, 90},    /* an odd-sized whole frame's sizes */
        {20, 30, 100, 100, 224, 224}, /* grows both ways */
        {8, 4, 301, 224, 224, 224},   /* the same height: swscale's one-row path */
        {8, 4, 224, 300, 224, 224},   /* the same width */
        {0, 0, 640, 360, 56, 40},     /* shrinks 11x: windows too wide for one permute */
        {30, 40, 8, 8, 224, 224},     /* the smallest crop it takes */
        {30, 40, 10, 8, 8, 6},        /* tiny output */
        {4, 2, 333, 211, 112, 97},    /* odd height */
    };
    for (int full = 0; full < 2; full++) {
        make_picture(1 + full, full);
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            const int *c = cases[i];
            one(c[0], c[1], c[2], c[3], full, c[4], c[5]);
        }
    }
    /* Random crops as RandomResizedCrop makes them (any size, the corner on the chroma grid),
     * limited range. */
    make_picture(3, 0);
    srand(11);
    for (int i = 0; i < 40; i++) {
        int cw = 16 + rand() % 600, ch = 16 + rand() % 340;
        int x = 2 * (rand() % ((PW - cw) / 2 + 1)), y = 2 * (rand() % ((PH - ch) / 2 + 1));
        one(x, y, cw, ch, 0, 224, 224);
    }
    /* The other matrices (a file's colorspace, as ffmpeg's scale filter takes it), both
     * ranges; then the same tables asked for with another matrix are rebuilt. */
    static const int spaces[] = {SWS_CS_ITU709, SWS_CS_FCC, SWS_CS_SMPTE240M, SWS_CS_BT2020};
    for (int s = 0; s < 4; s++)
        for (int full = 0; full < 2; full++) {
            colorspace = spaces[s];
            make_picture(5 + (unsigned)s, full);
            one(2, 8, 301, 203, full, 224, 224);
            one(0, 0, 640, 360, full, 160, 90);
        }
    size_t nb = 64 * 48 * 3;
    uint8_t *m601 = malloc(nb), *m709 = malloc(nb), *fresh709 = malloc(nb);
    struct tbi_resize *rs709 = NULL, *fresh = NULL;
    colorspace = SWS_CS_DEFAULT;
    CHECK(ours(&rs709, 0, 0, 320, 240, 0, 64, 48, 0, 0, m601) == 0);
    colorspace = SWS_CS_ITU709;
    CHECK(ours(&rs709, 0, 0, 320, 240, 0, 64, 48, 0, 0, m709) == 0);
    CHECK(ours(&fresh, 0, 0, 320, 240, 0, 64, 48, 0, 0, fresh709) == 0);
    CHECK(memcmp(m601, m709, nb) && !memcmp(m709, fresh709, nb));
    tbi_resize_free(&rs709);
    tbi_resize_free(&fresh);
    free(m601);
    free(m709);
    free(fresh709);
    colorspace = SWS_CS_DEFAULT;
    test_reuse();
    /* Not taken: swscale does those its own way (resize.h). */
    struct tbi_resize *rs = NULL;
    uint8_t px[224 * 3 * 224];
    CHECK(ours(&rs, 0, 0, 100, 100, 0, 223, 224, 0, 0, px) == TB_EINVAL);
    CHECK(ours(&rs, 0, 0, 6, 100, 0, 224, 224, 0, 0, px) == TB_EINVAL);
    CHECK(ours(&rs, 0, 0, 100, 6, 0, 224, 224, 0, 0, px) == TB_EINVAL);
    CHECK(!tbi_resize_takes(100, 6, 224, 224) && !tbi_resize_takes(100, 100, 223, 224) &&
          tbi_resize_takes(8, 8, 224, 223));
    TBT_EXIT();
}
