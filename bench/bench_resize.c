/* bench/bench_resize.c - the reader's resize (src/video/resize.c) beside swscale's, as the
 * reader calls each: one 8-bit 4:2:0 frame, CLIPS clips of 4 frames, each clip a random-resized
 * crop (area 0.08-1 of the frame, aspect 3/4-4/3, as W1's loader draws them) to 224x224, flipped
 * half the time; swscale through sws_getCachedContext (a new scaler whenever the crop's size
 * changes) into a padded scratch image copied out, as the reader did. ROUNDS interleaved
 * rounds; prints one JSON line with each one's median microseconds per frame and the ratio.
 * The code the resize runs is tbi_resize_path()'s (TUBELET_CPU=portable: AVX2 on an AVX-512
 * CPU). Usage: bench_resize FRAME.yuv WIDTH HEIGHT [CLIPS=500] [ROUNDS=5] */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libswscale/swscale.h>

#include "video/resize.h"

#define OUT 224
#define FRAMES 4

struct crop {
    int x, y, w, h, flip;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof(*v), cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void draw(struct crop *c, int n, int w, int h)
{
    srand(1);
    for (int i = 0; i < n; i++) {
        double area = w * h * (0.08 + 0.92 * rand() / RAND_MAX);
        double ar = exp(log(0.75) + (log(4.0 / 3) - log(0.75)) * rand() / RAND_MAX);
        int cw = (int)lrint(sqrt(area * ar)), ch = (int)lrint(sqrt(area / ar));
        cw = cw > w ? w : cw < 8 ? 8 : cw;
        ch = ch > h ? h : ch < 8 ? 8 : ch;
        c[i] = (struct crop){.w = cw & ~1, .h = ch & ~1, .flip = rand() & 1,
                             .x = 2 * (rand() % ((w - cw) / 2 + 1)),
                             .y = 2 * (rand() % ((h - ch) / 2 + 1))};
    }
}

static void planes(const uint8_t *frame, int w, int h, const struct crop *c,
                   const uint8_t *src[3], int ls[3])
{
    src[0] = frame + (size_t)c->y * w + c->x;
    src[1] = frame + (size_t)w * h + (size_t)c->y / 2 * (w / 2) + c->x / 2;
    src[2] = frame + (size_t)w * h * 5 / 4 + (size_t)c->y / 2 * (w / 2) + c->x / 2;
    ls[0] = w;
    ls[1] = ls[2] = w / 2;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_resize FRAME.yuv WIDTH HEIGHT [CLIPS=500] [ROUNDS=5]\n");
        return 2;
    }
    int w = atoi(argv[2]), h = atoi(argv[3]);
    int clips = argc > 4 ? atoi(argv[4]) : 500, rounds = argc > 5 ? atoi(argv[5]) : 5;
    size_t bytes = (size_t)w * h * 3 / 2;
    uint8_t *frame = malloc(bytes), *out = malloc(OUT * OUT * 3);
    FILE *f = fopen(argv[1], "rb");
    if (w <= 0 || h <= 0 || (w | h) & 1 || clips <= 0 || rounds <= 0 || !f ||
        fread(frame, 1, bytes, f) != bytes) {
        fprintf(stderr, "bench_resize: cannot read a %dx%d yuv420p frame from %s\n", w, h,
                argv[1]);
        return 1;
    }
    fclose(f);
    struct crop *c = malloc(sizeof(*c) * clips);
    draw(c, clips, w, h);
    int sls = (OUT * 3 + 63) & ~63;
    uint8_t *scratch = malloc((size_t)sls * (OUT + 2) + 64);
    double *ours = malloc(sizeof(double) * rounds), *sws = malloc(sizeof(double) * rounds);
    struct tbi_resize *rs = NULL;
    struct SwsContext *ctx = NULL;
    for (int r = 0; r < rounds; r++) {
        for (int which = 0; which < 2; which++) {
            int mine = (which + r) % 2 == 0;
            double t0 = now();
            for (int i = 0; i < clips; i++) {
                const uint8_t *src[3];
                int ls[3];
                planes(frame, w, h, &c[i], src, ls);
                for (int k = 0; k < FRAMES; k++) {
                    if (mine) {
                        if (tbi_resize_420(&rs, src, ls, c[i].w, c[i].h, 0, OUT, OUT, c[i].flip,
                                           out, 0) < 0)
                            return 1;
                        continue;
                    }
                    ctx = sws_getCachedContext(ctx, c[i].w, c[i].h, AV_PIX_FMT_YUV420P, OUT, OUT,
                                               AV_PIX_FMT_RGB24, SWS_BILINEAR, NULL, NULL, NULL);
                    uint8_t *dst[4] = {scratch, NULL, NULL, NULL};
                    int dls[4] = {sls, 0, 0, 0};
                    sws_scale(ctx, src, ls, 0, c[i].h, dst, dls);
                    for (int row = 0; row < OUT; row++) {
                        const uint8_t *a = scratch + (size_t)row * sls;
                        uint8_t *b = out + (size_t)row * OUT * 3;
                        if (!c[i].flip) {
                            memcpy(b, a, OUT * 3);
                            continue;
                        }
                        for (int x = 0; x < OUT; x++)
                            memcpy(b + 3 * x, a + 3 * (OUT - 1 - x), 3);
                    }
                }
            }
            double us = (now() - t0) * 1e6 / ((double)clips * FRAMES);
            (mine ? ours : sws)[r] = us;
        }
    }
    static const char *const names[] = {"plain C", "AVX2", "AVX-512"};
    double a = median(ours, rounds), b = median(sws, rounds);
    printf("{\"frame\": \"%dx%d\", \"out\": %d, \"clips\": %d, \"rounds\": %d, \"path\": \"%s\", "
           "\"tubelet_us_per_frame\": %.1f, \"swscale_us_per_frame\": %.1f, "
           "\"swscale_over_tubelet\": %.2f}\n", w, h, OUT, clips, rounds,
           names[tbi_resize_path()], a, b, b / a);
    tbi_resize_free(&rs);
    sws_freeContext(ctx);
    free(frame);
    free(out);
    free(c);
    free(scratch);
    free(ours);
    free(sws);
    return 0;
}
