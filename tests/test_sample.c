/* tests/test_sample.c - frame samplers and crop drawing.
 * - segments: AVION's get_frame_ids on worked examples, jitter covering each segment's whole
 *   inclusive range evenly, views;
 * - dense: stride, random start range, evenly spaced views, short videos; AVION's dense
 *   sampling with its moves and wrap-around;
 * - crops: torchvision RandomResizedCrop's area and ratio ranges and its centre fallback,
 *   VideoMAE's multi-scale sizes and 13 corners, centre and fixed crops, the flip rate. */
#include <math.h>

#include "tb_test.h"
#include "tubelet/sample.h"
#include "tubelet/video.h"

static void test_segments(void)
{
    tbt_case = "segments";
    int64_t f[8];
    /* get_frame_ids(0, 100, 4, jitter=False): L = 99/4 = 24.75, segments [0,25] [25,50]
     * [50,74] [74,99] (numpy rounds 49.5 to 50, 74.25 to 74), middles 12 37 62 86. */
    CHECK_EQ(tb_sample_segments(0, 100, 4, 0, NULL, f), 0);
    CHECK(f[0] == 12 && f[1] == 37 && f[2] == 62 && f[3] == 86);
    /* Offset windows shift the same way: get_frame_ids(1000, 1060, 4): L = 14.75,
     * [1000,1015] [1015,1030] [1030,1044] [1044,1059] -> 1007 1022 1037 1051. */
    CHECK_EQ(tb_sample_segments(1000, 1060, 4, 0, NULL, f), 0);
    CHECK(f[0] == 1007 && f[1] == 1022 && f[2] == 1037 && f[3] == 1051);
    /* Jitter: every value of [lo, hi] of segment 1 ([25, 50]) drawn, about equally. */
    tb_rng r;
    tb_rng_init(&r, 1, 2);
    int hits[101] = {0};
    for (int i = 0; i < 26000; i++) {
        CHECK_EQ(tb_sample_segments(0, 100, 4, 1, &r, f), 0);
        CHECK(f[0] >= 0 && f[0] <= 25 && f[2] >= 50 && f[2] <= 74 && f[3] >= 74 && f[3] <= 99);
        hits[f[1]]++;
    }
    for (int v = 0; v <= 100; v++) {
        if (v >= 25 && v <= 50)
            CHECK_MSG(hits[v] > 700 && hits[v] < 1300, "value %d drawn %d times", v, hits[v]);
        else
            CHECK_EQ(hits[v], 0);
    }
    /* Fewer frames than samples: repeats, all inside the window. */
    CHECK_EQ(tb_sample_segments(10, 13, 8, 1, &r, f), 0);
    for (int i = 0; i < 8; i++)
        CHECK(f[i] >= 10 && f[i] < 13);
    CHECK(tb_sample_segments(5, 5, 4, 0, NULL, f) < 0);
    CHECK(tb_sample_segments(0, 10, 4, 1, NULL, f) < 0);

    /* Views: one view is the middle; several spread inside each segment, in order. */
    int64_t v0[4], v1[4], v2[4];
    CHECK_EQ(tb_sample_segments_view(0, 100, 4, 0, 1, v0), 0);
    CHECK_EQ(tb_sample_segments(0, 100, 4, 0, NULL, f), 0);
    CHECK(!memcmp(v0, f, sizeof(v0)));
    CHECK_EQ(tb_sample_segments_view(0, 100, 4, 0, 3, v0), 0);
    CHECK_EQ(tb_sample_segments_view(0, 100, 4, 1, 3, v1), 0);
    CHECK_EQ(tb_sample_segments_view(0, 100, 4, 2, 3, v2), 0);
    for (int i = 0; i < 4; i++)
        CHECK(v0[i] < v1[i] && v1[i] < v2[i]);
}

static void test_dense(void)
{
    tbt_case = "dense";
    int64_t f[16];
    tb_rng r;
    tb_rng_init(&r, 4, 0);
    int64_t lo = 1000, hi = -1;
    for (int i = 0; i < 5000; i++) {
        CHECK_EQ(tb_sample_dense(300, 16, 4, -1, 0, &r, f), 0);
        for (int k = 1; k < 16; k++)
            CHECK_EQ(f[k] - f[k - 1], 4);
        lo = f[0] < lo ? f[0] : lo;
        hi = f[0] > hi ? f[0] : hi;
    }
    /* span 61: starts 0..239, both ends reached. */
    CHECK_EQ(lo, 0);
    CHECK_EQ(hi, 239);
    int64_t a[16], b[16];
    CHECK_EQ(tb_sample_dense(300, 16, 4, 0, 3, NULL, a), 0);
    CHECK_EQ(tb_sample_dense(300, 16, 4, 2, 3, NULL, b), 0);
    CHECK_EQ(a[0], 0);
    CHECK_EQ(b[15], 299);
    CHECK_EQ(tb_sample_dense(300, 16, 4, 0, 1, NULL, a), 0);
    CHECK_EQ(a[0], (300 - 61) / 2);
    /* A video shorter than the span repeats its last frame. */
    CHECK_EQ(tb_sample_dense(10, 8, 2, 0, 1, NULL, a), 0);
    CHECK(a[0] == 0 && a[4] == 8 && a[5] == 9 && a[7] == 9);

    int64_t s, e;
    tb_seconds_to_frames(1.01, 2.501, 30, 1, 1000, &s, &e);
    CHECK(s == 30 && e == 76);
    tb_seconds_to_frames(-1, 99, 30, 1, 100, &s, &e);
    CHECK(s == 0 && e == 100);
    /* Times no int64_t holds (a malformed file's) clamp like any other; so do NaN and the
     * largest video. */
    tb_seconds_to_frames(1e98, 2e98, 30, 1, 100, &s, &e);
    CHECK(s == 100 && e == 100);
    tb_seconds_to_frames(-1e98, NAN, 30, 1, 100, &s, &e);
    CHECK(s == 0 && e == 0);
    tb_seconds_to_frames(1e300, 1e300, 30, 1, INT64_MAX, &s, &e);
    CHECK(s == INT64_MAX && e == INT64_MAX);
}

/* AVION's KineticsDataset: start = randint(n - (T + 1) * stride), then each frame's move
 * randint(stride): frame k = (start + k * stride + move k) modulo n, drawn in that order from
 * the clip's stream. Both ends of the start's range reached, none past; every move about as
 * often; views without moves; short videos wrap to their start. */
static void test_dense_shift(void)
{
    tbt_case = "dense, AVION's moves";
    int64_t f[16];
    tb_rng r;
    tb_rng_init(&r, 5, 0);
    enum { N = 300, T = 16, S = 4, ROOM = N - (T + 1) * S }; /* starts 0..231 */
    int64_t lo = N, hi = -1;
    int moves[S] = {0};
    for (int i = 0; i < 20000; i++) {
        tb_rng again = r;
        CHECK_EQ(tb_sample_dense_jitter(N, T, S, -1, 0, &r, f), 0);
        int64_t start = (int64_t)tb_rng_below(&again, ROOM);
        for (int k = 0; k < T; k++) {
            int64_t move = (int64_t)tb_rng_below(&again, S);
            CHECK_EQ(f[k], (start + k * S + move) % N);
            moves[move]++;
        }
        lo = f[0] < lo ? f[0] : lo;
        hi = f[0] > hi ? f[0] : hi;
    }
    CHECK_EQ(lo, 0);
    CHECK_EQ(hi, ROOM - 1 + S - 1);
    for (int m = 0; m < S; m++) /* 20000 x 16 moves over 4 values */
        CHECK_MSG(moves[m] > 76000 && moves[m] < 84000, "move %d drawn %d times", m, moves[m]);
    /* views: evenly spaced starts, no moves */
    int64_t a[16], b[16];
    CHECK_EQ(tb_sample_dense_jitter(N, T, S, 0, 3, NULL, a), 0);
    CHECK_EQ(tb_sample_dense_jitter(N, T, S, 2, 3, NULL, b), 0);
    CHECK(a[0] == 0 && b[0] == ROOM - 1 && a[1] - a[0] == S && b[15] - b[14] == S);
    /* not longer than (T + 1) x stride: from 0, wrapped modulo the frame count */
    CHECK_EQ(tb_sample_dense_jitter(10, 8, 2, 0, 1, NULL, a), 0);
    CHECK(a[0] == 0 && a[4] == 8 && a[5] == 0 && a[7] == 4);
    CHECK(tb_sample_dense_jitter(10, 8, 2, -1, 0, NULL, a) < 0);
}

static void test_crops(void)
{
    tbt_case = "random resized crop";
    struct tb_crop_spec rrc = {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = 0.08,
                               .scale_max = 1, .ratio_min = 3.0 / 4, .ratio_max = 4.0 / 3};
    tb_rng r;
    tb_rng_init(&r, 8, 0);
    struct tb_crop c;
    double min_area = 1, max_area = 0;
    int fallbacks = 0;
    for (int i = 0; i < 20000; i++) {
        CHECK_EQ(tb_crop_draw(&rrc, 426, 320, 224, 224, &r, &c), 0);
        CHECK(c.x >= 0 && c.y >= 0 && c.x + c.w <= 426 && c.y + c.h <= 320 && c.w > 0);
        double area = (double)c.w * c.h / (426.0 * 320), ratio = (double)c.w / c.h;
        /* Rounding w and h to whole pixels moves area and ratio a little. */
        CHECK_MSG(area > 0.08 * 0.9 && area < 1.0001, "area %f", area);
        CHECK_MSG(ratio > 0.75 * 0.95 && ratio < 4.0 / 3 * 1.05, "ratio %f", ratio);
        min_area = area < min_area ? area : min_area;
        max_area = area > max_area ? area : max_area;
        fallbacks += c.w == 426 && c.h == 320;
    }
    CHECK(min_area < 0.1 && max_area > 0.9);
    /* AVION's setting, scale 0.5-1, on a wide frame, hits the ten-try limit sometimes and
     * falls back to the centre crop clamped to the largest ratio. */
    rrc.scale_min = 0.5;
    int centred = 0;
    for (int i = 0; i < 5000; i++) {
        CHECK_EQ(tb_crop_draw(&rrc, 600, 200, 224, 224, &r, &c), 0);
        if (c.w == 267 && c.h == 200 && c.x == (600 - 267) / 2 && c.y == 0)
            centred++;
    }
    CHECK_MSG(centred > 0, "the fallback never happened");

    tbt_case = "multiscale crop";
    /* VideoMAE on 426x320 -> 224: base 320, sizes 320, 280, 240, 211 (224 within 3 of
     * none), pairs with |i - j| <= 1, corners on a grid of quarter steps. */
    struct tb_crop_spec ms = {.mode = TB_CROP_MULTISCALE};
    const int sizes[4] = {320, 280, 240, 211};
    static const int corners[13][2] = {{0, 0}, {4, 0}, {0, 4}, {4, 4}, {2, 2}, {0, 2}, {4, 2},
                                       {2, 4}, {2, 0}, {1, 1}, {3, 1}, {1, 3}, {3, 3}};
    int seen_corner[13] = {0};
    for (int i = 0; i < 5000; i++) {
        CHECK_EQ(tb_crop_draw(&ms, 426, 320, 224, 224, &r, &c), 0);
        int iw = -1, ih = -1;
        for (int k = 0; k < 4; k++) {
            if (c.w == sizes[k])
                iw = k;
            if (c.h == sizes[k])
                ih = k;
        }
        CHECK_MSG(iw >= 0 && ih >= 0 && abs(iw - ih) <= 1, "size %dx%d", c.w, c.h);
        int ws = (426 - c.w) / 4, hs = (320 - c.h) / 4;
        CHECK(c.x + c.w <= 426 && c.y + c.h <= 320);
        if (!ws || !hs)
            continue;
        int found = -1;
        for (int k = 0; k < 13; k++)
            if (c.x == corners[k][0] * ws && c.y == corners[k][1] * hs)
                found = k;
        CHECK_MSG(found >= 0, "corner (%d, %d) with steps (%d, %d)", c.x, c.y, ws, hs);
        if (found >= 0)
            seen_corner[found]++;
    }
    for (int k = 0; k < 13; k++)
        CHECK_MSG(seen_corner[k] > 0, "corner %d never drawn", k);

    tbt_case = "centre and fixed crops, flips";
    struct tb_crop_spec center = {.mode = TB_CROP_CENTER, .flip = TB_FLIP_RANDOM};
    int flips = 0;
    for (int i = 0; i < 4000; i++) {
        CHECK_EQ(tb_crop_draw(&center, 426, 320, 224, 224, &r, &c), 0);
        CHECK(c.x == 53 && c.y == 0 && c.w == 320 && c.h == 320);
        flips += c.flip;
    }
    CHECK_MSG(flips > 1800 && flips < 2200, "%d flips of 4000", flips);
    struct tb_crop_spec fixed = {.mode = TB_CROP_FIXED, .x = 10, .y = 20, .w = 100, .h = 50};
    CHECK_EQ(tb_crop_draw(&fixed, 426, 320, 100, 50, NULL, &c), 0);
    CHECK(c.x == 10 && c.y == 20 && c.w == 100 && c.h == 50 && !c.flip);
    fixed.x = 400;
    CHECK_EQ(tb_crop_draw(&fixed, 426, 320, 100, 50, NULL, &c), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "does not fit a 426x320 frame");
    CHECK_EQ(tb_crop_draw(&rrc, 426, 320, 224, 224, NULL, &c), TB_EINVAL);
}

int main(void)
{
    tbt_begin("sample");
    test_segments();
    test_dense();
    test_dense_shift();
    test_crops();
    TBT_EXIT();
}
