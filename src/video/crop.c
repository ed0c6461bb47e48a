/* src/video/crop.c - drawing a clip's crop rectangle: torchvision's RandomResizedCrop, the
 * evaluation centre crop, VideoMAE's multi-scale crop, fixed and whole-frame crops, and the
 * flip. Pure arithmetic on sizes; applying the crop is the reader's job.
 * Tests: tests/test_crop.c (against torchvision's formulas replayed with the same draws). */
#include <math.h>
#include <stdlib.h>

#include "core/internal.h"
#include "tubelet/video.h"

/* Uniform integer in [lo, hi] (torch.randint(lo, hi + 1)). */
static int rand_int(tb_rng *rng, int lo, int hi)
{
    return lo + (int)tb_rng_below(rng, (uint64_t)(hi - lo + 1));
}

/* torchvision.transforms.RandomResizedCrop.get_params: ten tries at a random area and
 * log-uniform aspect ratio, then a centre crop clamped to the ratio range. */
static void random_resized(const struct tb_crop_spec *s, int W, int H, tb_rng *rng,
                           struct tb_crop *c)
{
    double area = (double)W * H;
    double log_lo = log(s->ratio_min), log_hi = log(s->ratio_max);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (s->scale_min + (s->scale_max - s->scale_min) * tb_rng_uniform(rng));
        double aspect = exp(log_lo + (log_hi - log_lo) * tb_rng_uniform(rng));
        int w = (int)rint(sqrt(target * aspect)); /* Python round: half to even */
        int h = (int)rint(sqrt(target / aspect));
        if (0 < w && w <= W && 0 < h && h <= H) {
            c->y = rand_int(rng, 0, H - h);
            c->x = rand_int(rng, 0, W - w);
            c->w = w;
            c->h = h;
            return;
        }
    }
    double in_ratio = (double)W / H;
    int w, h;
    if (in_ratio < s->ratio_min) {
        w = W;
        h = (int)rint(w / s->ratio_min);
    } else if (in_ratio > s->ratio_max) {
        h = H;
        w = (int)rint(h * s->ratio_max);
    } else {
        w = W;
        h = H;
    }
    c->w = w;
    c->h = h;
    c->y = (H - h) / 2;
    c->x = (W - w) / 2;
}

/* VideoMAE's GroupMultiScaleCrop(input_size, [1, .875, .75, .66]) with max_distort 1 and the
 * 13 fixed offsets of more_fix_crop. */
static void multiscale(int W, int H, int out_w, int out_h, tb_rng *rng, struct tb_crop *c)
{
    static const double scales[4] = {1, .875, .75, .66};
    int base = W < H ? W : H, sizes_w[4], sizes_h[4];
    for (int i = 0; i < 4; i++) {
        int s = (int)(base * scales[i]);
        sizes_w[i] = abs(s - out_w) < 3 ? out_w : s;
        sizes_h[i] = abs(s - out_h) < 3 ? out_h : s;
    }
    int pairs[16][2], n = 0;
    for (int i = 0; i < 4; i++)     /* i indexes heights, j widths, as VideoMAE's loops */
        for (int j = 0; j < 4; j++)
            if (abs(i - j) <= 1) {
                pairs[n][0] = sizes_w[j];
                pairs[n][1] = sizes_h[i];
                n++;
            }
    int k = rand_int(rng, 0, n - 1);
    int cw = pairs[k][0], ch = pairs[k][1];
    int ws = (W - cw) / 4, hs = (H - ch) / 4;
    const int offsets[13][2] = {
        {0, 0}, {4 * ws, 0}, {0, 4 * hs}, {4 * ws, 4 * hs}, {2 * ws, 2 * hs},
        {0, 2 * hs}, {4 * ws, 2 * hs}, {2 * ws, 4 * hs}, {2 * ws, 0},
        {ws, hs}, {3 * ws, hs}, {ws, 3 * hs}, {3 * ws, 3 * hs},
    };
    int o = rand_int(rng, 0, 12);
    c->x = offsets[o][0];
    c->y = offsets[o][1];
    c->w = cw;
    c->h = ch;
}

int tb_crop_draw(const struct tb_crop_spec *s, int W, int H, int out_w, int out_h, tb_rng *rng,
                 struct tb_crop *c)
{
    if (W <= 0 || H <= 0 || out_w <= 0 || out_h <= 0)
        return tbi_err(TB_EINVAL, "bad sizes for a crop: %dx%d to %dx%d", W, H, out_w, out_h);
    int needs_rng = s->mode == TB_CROP_RANDOM_RESIZED || s->mode == TB_CROP_MULTISCALE ||
                    s->flip == TB_FLIP_RANDOM;
    if (needs_rng && !rng)
        return tbi_err(TB_EINVAL, "a random crop or flip needs a random generator");
    switch (s->mode) {
    case TB_CROP_NONE:
        *c = (struct tb_crop){0, 0, W, H, 0};
        break;
    case TB_CROP_FIXED:
        if (s->x < 0 || s->y < 0 || s->w <= 0 || s->h <= 0 || s->x + s->w > W || s->y + s->h > H)
            return tbi_err(TB_EINVAL, "crop %dx%d at (%d,%d) does not fit a %dx%d frame", s->w,
                           s->h, s->x, s->y, W, H);
        *c = (struct tb_crop){s->x, s->y, s->w, s->h, 0};
        break;
    case TB_CROP_CENTER: {
        int side = W < H ? W : H;
        *c = (struct tb_crop){(W - side) / 2, (H - side) / 2, side, side, 0};
        break;
    }
    case TB_CROP_RANDOM_RESIZED:
        if (!(s->scale_min > 0 && s->scale_min <= s->scale_max && s->scale_max <= 1 &&
              s->ratio_min > 0 && s->ratio_min <= s->ratio_max))
            return tbi_err(TB_EINVAL, "bad random-resized-crop ranges: scale %g..%g, ratio "
                           "%g..%g", s->scale_min, s->scale_max, s->ratio_min, s->ratio_max);
        random_resized(s, W, H, rng, c);
        break;
    case TB_CROP_MULTISCALE:
        multiscale(W, H, out_w, out_h, rng, c);
        break;
    default:
        return tbi_err(TB_EINVAL, "unknown crop mode %d", (int)s->mode);
    }
    c->flip = s->flip == TB_FLIP_ALWAYS || (s->flip == TB_FLIP_RANDOM && tb_rng_uniform(rng) < 0.5);
    return 0;
}
