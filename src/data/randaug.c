/* src/data/randaug.c - RandAugment for video: timm's increasing op set
 * (rand_augment_transform "rand-mM-nN-mstdS-inc1") as VideoMAE's fine-tuning applies it, each
 * clip's ops and arguments drawn once and applied to every frame, on uint8 RGB frames with
 * Pillow's arithmetic (ImageOps, ImageEnhance's blend, the SMOOTH kernel, the affine
 * transform's bicubic and bilinear filters). Not here: timm's other op sets, weighted op
 * choice, AutoAugment and AugMix. Compiled with -ffp-contract=off (CMakeLists.txt): Pillow's
 * float and double expressions are reproduced term by term (a pixel's three channels side by
 * side in one vector, each lane the scalar arithmetic), and a fused multiply-add would round
 * differently. The settings, draws and plans of both families are here; pytorchvideo's ops and
 * draws are randaug_pv.c's. Tests: tests/test_augment.c (against tests/ref/randaug_ref.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "core/internal.h"
#include "data/randaug_pv.h"
#include "tubelet/data.h"
#include "tubelet/rng.h"

/* timm's ops come first in enum tb_ra_op, pytorchvideo's after them */
#define TIMM_N_OPS TB_RA_PV_BRIGHTNESS

/* timm's _RAND_INCREASING_TRANSFORMS, in its order (enum tb_ra_op). */
static const char *const op_names[TIMM_N_OPS] = {
    "AutoContrast",        "Equalize",           "Invert",
    "Rotate",              "PosterizeIncreasing", "SolarizeIncreasing",
    "SolarizeAdd",         "ColorIncreasing",    "ContrastIncreasing",
    "BrightnessIncreasing", "SharpnessIncreasing", "ShearX",
    "ShearY",              "TranslateXRel",      "TranslateYRel",
};

const char *tb_randaug_op_name(enum tb_ra_op op)
{
    if (tbi_randaug_is_pv(op))
        return tbi_randaug_pv_name(op);
    return (unsigned)op < TIMM_N_OPS ? op_names[op] : "?";
}

/* ---- the settings ------------------------------------------------------------------------ */

static int parse_number(const char *s, size_t len, double *out)
{
    char buf[64], *end;
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (!((buf[0] >= '0' && buf[0] <= '9') || buf[0] == '.'))
        return -1;
    *out = strtod(buf, &end);
    return *end || !isfinite(*out) ? -1 : 0;
}

/* "pytorchvideo-mM-nN" and its options (p, mstd, uniform, float, min): pytorchvideo's
 * RandAugment(magnitude=M, num_layers=N, prob=P, sampling_type, sampling_hparas), its
 * defaults prob 0.5, gaussian with sampling_std 0.5, uniform as integers from 0. */
static int parse_pv(const char *spec, const char *p, struct tb_randaug_opts *o)
{
    int have_m = 0, have_n = 0, uniform = 0, floats = 0, have_std = 0, have_min = 0;
    double m = 0, n = 0, prob = 0.5, mstd = 0.5, lo = 0;
    while (*p) {
        const char *dash = strchr(p, '-');
        size_t len = dash ? (size_t)(dash - p) : strlen(p);
        int bad = 0;
        if (len == 7 && !strncmp(p, "uniform", 7)) {
            uniform = 1;
        } else if (len == 5 && !strncmp(p, "float", 5)) {
            floats = 1;
        } else if (len > 4 && !strncmp(p, "mstd", 4)) {
            bad = parse_number(p + 4, len - 4, &mstd) < 0 || mstd > 10;
            have_std = 1;
        } else if (len > 3 && !strncmp(p, "min", 3)) {
            bad = parse_number(p + 3, len - 3, &lo) < 0 || lo > 10;
            have_min = 1;
        } else if (len > 1 && p[0] == 'm') {
            bad = parse_number(p + 1, len - 1, &m) < 0 || m > 10;
            have_m = 1;
        } else if (len > 1 && p[0] == 'n') {
            bad = parse_number(p + 1, len - 1, &n) < 0 || n != floor(n) || n < 1 ||
                  n > TBI_PV_N_OPS;
            have_n = 1;
        } else if (len > 1 && p[0] == 'p') {
            bad = parse_number(p + 1, len - 1, &prob) < 0 || prob > 1;
        } else {
            bad = 1;
        }
        if (bad)
            return tbi_err(TB_EINVAL, "RandAugment '%s': bad part '%.*s' (pytorchvideo's form "
                           "is pytorchvideo-mM-nN with -pP, -mstdS, -uniform, -uniform-float, "
                           "-minK: magnitude 0-10, 1-%d distinct ops, probability 0-1)", spec,
                           (int)len, p, TBI_PV_N_OPS);
        p += len;
        if (*p == '-' && !*++p)
            return tbi_err(TB_EINVAL, "RandAugment '%s': ends in '-'", spec);
    }
    if (!have_m || !have_n)
        return tbi_err(TB_EINVAL, "RandAugment '%s': needs a magnitude and a count "
                       "(pytorchvideo-mM-nN, e.g. pytorchvideo-m7-n4)", spec);
    if ((floats || have_min) && !uniform)
        return tbi_err(TB_EINVAL, "RandAugment '%s': -float and -min go with -uniform", spec);
    if (uniform && have_std)
        return tbi_err(TB_EINVAL, "RandAugment '%s': -mstd is the gaussian draw's, not "
                       "-uniform's", spec);
    if (uniform && (lo > m || (!floats && (m != floor(m) || lo != floor(lo)))))
        return tbi_err(TB_EINVAL, "RandAugment '%s': a uniform draw needs min <= M, both "
                       "whole numbers unless -float", spec);
    o->family = TB_RA_PYTORCHVIDEO;
    o->n_ops = (int)n;
    o->magnitude = m;
    o->magnitude_std = uniform ? 0 : mstd;
    o->prob = prob;
    o->sampling = !uniform ? TB_RA_GAUSSIAN : floats ? TB_RA_UNIFORM_FLOAT : TB_RA_UNIFORM_INT;
    o->sampling_min = lo;
    o->resample = TB_RESAMPLE_BILINEAR; /* its only filter; its fill, 0.5, is no level */
    return 0;
}

int tb_randaug_parse(const char *spec, struct tb_randaug_opts *o)
{
    memset(o, 0, sizeof(*o));
    if (!spec || !spec[0] || !strcmp(spec, "none"))
        return 0;
    if (!strncmp(spec, "pytorchvideo-", 13))
        return parse_pv(spec, spec + 13, o);
    int have_m = 0, have_n = 0;
    double m = 0, n = 0, mstd = 0.5;
    for (const char *p = spec; *p;) {
        const char *dash = strchr(p, '-');
        size_t len = dash ? (size_t)(dash - p) : strlen(p);
        int bad = 0;
        if (p == spec && len == 4 && !strncmp(p, "rand", 4)) {
            /* timm's own string: "rand-m7-n4-mstd0.5-inc1" */
        } else if (len > 4 && !strncmp(p, "mstd", 4)) {
            bad = parse_number(p + 4, len - 4, &mstd) < 0 || mstd > 10;
        } else if (len > 3 && !strncmp(p, "inc", 3)) {
            double inc;
            if (parse_number(p + 3, len - 3, &inc) < 0 || inc == 0)
                return tbi_err(TB_EINVAL, "RandAugment '%s': only timm's increasing op set "
                               "(inc1) is built", spec);
        } else if (len > 1 && p[0] == 'm') {
            bad = parse_number(p + 1, len - 1, &m) < 0 || m > 10;
            have_m = 1;
        } else if (len > 1 && p[0] == 'n') {
            bad = parse_number(p + 1, len - 1, &n) < 0 || n != floor(n) || n > TB_RA_MAX_OPS;
            have_n = 1;
        } else {
            bad = 1;
        }
        if (bad)
            return tbi_err(TB_EINVAL, "RandAugment '%s': bad part '%.*s' (the form is mM-nN or "
                           "mM-nN-mstdS: magnitude 0-10, 0-%d ops, magnitude noise S >= 0)",
                           spec, (int)len, p, TB_RA_MAX_OPS);
        p += len;
        if (*p == '-' && !*++p)
            return tbi_err(TB_EINVAL, "RandAugment '%s': ends in '-'", spec);
    }
    if (!have_m || !have_n)
        return tbi_err(TB_EINVAL, "RandAugment '%s': needs a magnitude and a count (mM-nN, "
                       "e.g. m7-n4)", spec);
    o->n_ops = (int)n;
    o->magnitude = m;
    o->magnitude_std = mstd;
    o->resample = TB_RESAMPLE_BICUBIC;
    o->fill[0] = o->fill[1] = o->fill[2] = 128;
    return 0;
}

int tb_randaug_check(const struct tb_randaug_opts *o)
{
    if (o->n_ops < 0 || o->n_ops > TB_RA_MAX_OPS || !(o->magnitude >= 0 && o->magnitude <= 10) ||
        !(o->magnitude_std >= 0 && o->magnitude_std <= 10) ||
        (o->resample != TB_RESAMPLE_BICUBIC && o->resample != TB_RESAMPLE_BILINEAR) ||
        (o->family != TB_RA_TIMM && o->family != TB_RA_PYTORCHVIDEO))
        return tbi_err(TB_EINVAL, "bad RandAugment settings: %d ops, magnitude %g, noise %g",
                       o->n_ops, o->magnitude, o->magnitude_std);
    if (o->family == TB_RA_PYTORCHVIDEO) {
        double lo = o->sampling_min, m = o->magnitude;
        int uniform = o->sampling == TB_RA_UNIFORM_INT || o->sampling == TB_RA_UNIFORM_FLOAT;
        if (o->n_ops > TBI_PV_N_OPS || !(o->prob >= 0 && o->prob <= 1) ||
            (!uniform && o->sampling != TB_RA_GAUSSIAN) ||
            (uniform && !(lo >= 0 && lo <= m)) ||
            (o->sampling == TB_RA_UNIFORM_INT && (m != floor(m) || lo != floor(lo))))
            return tbi_err(TB_EINVAL, "bad pytorchvideo RandAugment settings: %d ops (at most "
                           "%d), probability %g, sampling %d from %g to %g", o->n_ops,
                           TBI_PV_N_OPS, o->prob, (int)o->sampling, lo, m);
    }
    return 0;
}

/* ---- the draws --------------------------------------------------------------------------- */

double tb_randaug_level_arg(enum tb_ra_op op, double magnitude, int negate)
{
    double v;
    if (tbi_randaug_is_pv(op))
        return tbi_randaug_pv_level_arg(op, magnitude, negate);
    switch (op) {
    case TB_RA_ROTATE: /* degrees, [-30, 30] */
        v = (magnitude / 10.0) * 30.0;
        return negate ? -v : v;
    case TB_RA_POSTERIZE: /* bits kept, 4 down to 0 */
        return 4 - (int)((magnitude / 10.0) * 4);
    case TB_RA_SOLARIZE: /* threshold, 256 down to 0 */
        return 256 - (int)((magnitude / 10.0) * 256);
    case TB_RA_SOLARIZE_ADD: /* added below 128, 0 up to 110 */
        return (int)((magnitude / 10.0) * 110);
    case TB_RA_COLOR:
    case TB_RA_CONTRAST:
    case TB_RA_BRIGHTNESS:
    case TB_RA_SHARPNESS: /* blend factor, 1 +- [0, 0.9] */
        v = (magnitude / 10.0) * 0.9;
        return 1.0 + (negate ? -v : v);
    case TB_RA_SHEAR_X:
    case TB_RA_SHEAR_Y: /* [-0.3, 0.3] */
        v = (magnitude / 10.0) * 0.3;
        return negate ? -v : v;
    case TB_RA_TRANSLATE_X:
    case TB_RA_TRANSLATE_Y: /* fraction of the side, [-0.45, 0.45] */
        v = (magnitude / 10.0) * 0.45;
        return negate ? -v : v;
    default: /* AutoContrast, Equalize, Invert take none */
        return 0;
    }
}

/* timm's AugmentOp.__call__ per op: skip unless random() <= prob (0.5); magnitude
 * gauss(M, std) clipped to [0, 10]; the sign by random() > 0.5. Each step takes the same four
 * draws whatever they decide, so the plan's numbers never shift with an earlier outcome.
 * pytorchvideo's draws (randaug_pv.c) come from the same stream. */
void tb_randaug_draw(const struct tb_randaug_opts *o, uint64_t seed, int64_t epoch, int64_t i,
                     struct tb_ra_plan *plan)
{
    tb_rng r;
    tb_rng_init_for(&r, seed, TB_RNG_RAND_AUGMENT, (uint64_t)epoch, (uint64_t)i);
    if (o->family == TB_RA_PYTORCHVIDEO) {
        tbi_randaug_pv_draw(o, &r, plan);
        return;
    }
    int n = o->n_ops < 0 ? 0 : o->n_ops > TB_RA_MAX_OPS ? TB_RA_MAX_OPS : o->n_ops;
    plan->n = n;
    for (int k = 0; k < n; k++) {
        struct tb_ra_step *s = &plan->step[k];
        s->op = (enum tb_ra_op)tb_rng_below(&r, TIMM_N_OPS);
        double u_apply = tb_rng_uniform(&r);
        double z = tb_rng_normal(&r);
        double u_sign = tb_rng_uniform(&r);
        s->apply = !(u_apply > 0.5);
        double m = o->magnitude;
        if (o->magnitude_std > 0)
            m += o->magnitude_std * z;
        s->magnitude = m < 0 ? 0 : m > 10 ? 10 : m;
        s->negate = u_sign > 0.5;
        s->arg = tb_randaug_level_arg(s->op, s->magnitude, s->negate);
    }
}

/* ---- pixel ops (ImageOps, ImageEnhance) -------------------------------------------------- */

/* One table for every channel of n pixels. */
static void lut_all(uint8_t *px, size_t n_px, const uint8_t lut[256])
{
    for (size_t k = 0; k < 3 * n_px; k++)
        px[k] = lut[px[k]];
}

/* A table per channel. */
static void lut_each(uint8_t *px, size_t n_px, uint8_t lut[3][256])
{
    for (size_t k = 0; k < n_px; k++) {
        px[3 * k] = lut[0][px[3 * k]];
        px[3 * k + 1] = lut[1][px[3 * k + 1]];
        px[3 * k + 2] = lut[2][px[3 * k + 2]];
    }
}

static void histograms(const uint8_t *px, size_t n_px, int64_t h[3][256])
{
    memset(h, 0, sizeof(int64_t) * 3 * 256);
    for (size_t k = 0; k < n_px; k++) {
        h[0][px[3 * k]]++;
        h[1][px[3 * k + 1]]++;
        h[2][px[3 * k + 2]]++;
    }
}

/* ImageOps.autocontrast(cutoff=0): each channel stretched from its darkest to its lightest
 * value, int(v * scale + offset) in doubles. */
static void autocontrast(uint8_t *px, size_t n_px)
{
    int64_t h[3][256];
    uint8_t lut[3][256];
    histograms(px, n_px, h);
    for (int c = 0; c < 3; c++) {
        int lo = 0, hi = 255;
        while (lo < 255 && !h[c][lo])
            lo++;
        while (hi > 0 && !h[c][hi])
            hi--;
        if (hi <= lo) {
            for (int v = 0; v < 256; v++)
                lut[c][v] = (uint8_t)v;
            continue;
        }
        double scale = 255.0 / (hi - lo), offset = -lo * scale;
        for (int v = 0; v < 256; v++) {
            int ix = (int)(v * scale + offset);
            lut[c][v] = (uint8_t)(ix < 0 ? 0 : ix > 255 ? 255 : ix);
        }
    }
    lut_each(px, n_px, lut);
}

/* ImageOps.equalize: per channel, step = (pixels - those of the highest value) // 255, value
 * v to (step // 2 + pixels below v) // step, clipped to 255 as Image.point clips. */
static void equalize(uint8_t *px, size_t n_px)
{
    int64_t h[3][256];
    uint8_t lut[3][256];
    histograms(px, n_px, h);
    for (int c = 0; c < 3; c++) {
        int64_t total = 0, last = 0;
        int used = 0;
        for (int v = 0; v < 256; v++)
            if (h[c][v]) {
                total += h[c][v];
                last = h[c][v];
                used++;
            }
        int64_t step = used > 1 ? (total - last) / 255 : 0;
        int64_t n = step / 2;
        for (int v = 0; v < 256; v++) {
            if (!step) {
                lut[c][v] = (uint8_t)v;
                continue;
            }
            int64_t q = n / step;
            lut[c][v] = (uint8_t)(q > 255 ? 255 : q);
            n += h[c][v];
        }
    }
    lut_each(px, n_px, lut);
}

/* Image.blend(degenerate, image, factor) as ImagingBlend computes it: in floats, truncated;
 * outside [0, 1] clipped to [0, 255] first. */
static inline uint8_t blend_px(int deg, int img, float alpha, int extrapolate)
{
    float t = (float)deg + alpha * (float)(img - deg);
    if (!extrapolate)
        return (uint8_t)t;
    return t <= 0.0f ? 0 : t >= 255.0f ? 255 : (uint8_t)t;
}

/* The degenerate image of Color: ITU-R 601 luma in Pillow's fixed point ("L" mode). */
static inline int luma(const uint8_t *p)
{
    return (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16;
}

/* ImageFilter.SMOOTH (3x3, 1 1 1 / 1 5 1 / 1 1 1, scale 13) as ImagingFilter3x3 computes it:
 * float weights, the sum from 0.5, rows from below to above, the border copied. */
static void smooth(const uint8_t *src, uint8_t *dst, int W, int H)
{
    memcpy(dst, src, (size_t)W * H * 3);
    if (W < 3 || H < 3)
        return;
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    size_t row = (size_t)W * 3;
    for (int y = 1; y < H - 1; y++) {
        const uint8_t *up = src + (y - 1) * row, *mid = src + y * row, *dn = src + (y + 1) * row;
        uint8_t *out = dst + y * row;
        for (int x = 3; x < (W - 1) * 3; x++) {
            float ss = 0.5f;
            ss += (float)dn[x - 3] * k1 + (float)dn[x] * k1 + (float)dn[x + 3] * k1;
            ss += (float)mid[x - 3] * k1 + (float)mid[x] * k5 + (float)mid[x + 3] * k1;
            ss += (float)up[x - 3] * k1 + (float)up[x] * k1 + (float)up[x + 3] * k1;
            out[x] = ss <= 0.0f ? 0 : ss >= 255.0f ? 255 : (uint8_t)ss;
        }
    }
}

/* ImageEnhance's four: blend the frame with its degenerate image by factor. */
static void enhance(uint8_t *px, int W, int H, enum tb_ra_op op, double factor, uint8_t *scratch)
{
    size_t n_px = (size_t)W * H;
    float alpha = (float)factor;
    if (alpha == 1.0f)
        return;
    int extrapolate = !(alpha >= 0 && alpha <= 1.0f);
    int mean = 0;
    if (op == TB_RA_CONTRAST) {
        /* int(mean of the "L" image + 0.5) */
        int64_t sum = 0;
        for (size_t k = 0; k < n_px; k++)
            sum += luma(px + 3 * k);
        mean = (int)((double)sum / (double)n_px + 0.5);
    } else if (op == TB_RA_SHARPNESS) {
        smooth(px, scratch, W, H);
    }
    for (size_t k = 0; k < n_px; k++) {
        uint8_t *p = px + 3 * k;
        int g = op == TB_RA_COLOR ? luma(p) : mean;
        for (int c = 0; c < 3; c++) {
            int deg = op == TB_RA_SHARPNESS ? scratch[3 * k + c] : g;
            p[c] = alpha == 0.0f ? (uint8_t)deg : blend_px(deg, p[c], alpha, extrapolate);
        }
    }
}

/* ---- geometric ops (Image.transform AFFINE, Image.rotate) -------------------------------- */

static inline int floor_int(double v)
{
    return v < 0.0 ? (int)floor(v) : (int)v;
}

static inline int clampi(int v, int n)
{
    return v < 0 ? 0 : v < n ? v : n - 1;
}

/* Four lanes of doubles (GCC's and clang's vector extension): a pixel's channels side by side
 * and a lane of zeros, each lane computing exactly what the scalar code would. */
typedef double v4d __attribute__((vector_size(32)));

/* Bytes after a frame of scratch, the geometric ops' source: they read a pixel 4 bytes at a
 * time. */
#define SCRATCH_PAD 16

/* A pixel's three channels and the next byte, as doubles. (Vectors go through pointers: by
 * value they would raise GCC's ABI warnings where AVX is off.) */
#ifdef __AVX2__
static inline void load3(const uint8_t *p, v4d *v)
{
    int32_t u;
    memcpy(&u, p, 4);
    *v = (v4d)_mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(u)));
}
#else
static inline void load3(const uint8_t *p, v4d *v)
{
    *v = (v4d){p[0], p[1], p[2], p[3]};
}
#endif

/* Pillow's cubic through four samples (a = -1) at d in [0, 1), on four lanes: v[k] holds
 * the k-th sample of each. */
static inline void cubic4(const v4d v[4], double d, v4d *out)
{
    v4d p1 = v[1];
    v4d p2 = -v[0] + v[2];
    v4d p3 = 2 * (v[0] - v[1]) + v[2] - v[3];
    v4d p4 = -v[0] + v[1] - v[2] + v[3];
    *out = p1 + d * (p2 + d * (p3 + d * p4));
}

/* Four pixels' lanes from base + offsets off[k] into v, then their cubic at d into out. */
static inline void cubic_at(const uint8_t *base, const size_t off[4], double d, v4d *out)
{
    v4d v[4];
    for (int k = 0; k < 4; k++)
        load3(base + off[k], &v[k]);
    cubic4(v, d, out);
}

/* One output pixel of ImagingGenericTransform with bicubic_filter32RGB or
 * bilinear_filter32RGB at source point (xin, yin); 0 when it falls outside the source (the
 * pixel keeps the fill). Rows and columns past the edge repeat the edge. When every source
 * point of a transform lies on a row centre (dy == 0, axis 1: shear or translation along x)
 * Pillow's vertical interpolation returns its second row exactly (v2 + 0 * (...)), and on a
 * column centre (dx == 0, axis 2) its horizontal ones return their second column: those
 * passes are skipped, the results the same to the bit. */
static inline __attribute__((always_inline)) int sample(const uint8_t *src, int W, int H,
                                                       double xin, double yin, int bicubic,
                                                       int axis, uint8_t *out)
{
    if (xin < 0.0 || xin >= W || yin < 0.0 || yin >= H)
        return 0;
    xin -= 0.5;
    yin -= 0.5;
    int x = floor_int(xin), y = floor_int(yin);
    double dx = xin - x, dy = yin - y;
    size_t row = (size_t)W * 3;
    if (!bicubic) {
        int x0 = clampi(x, W) * 3, x1 = clampi(x + 1, W) * 3;
        const uint8_t *r0 = src + (size_t)clampi(y, H) * row;
        const uint8_t *r1 = y + 1 >= 0 && y + 1 < H ? src + (size_t)(y + 1) * row : NULL;
        for (int c = 0; c < 3; c++) {
            if (axis == 2) {
                double v1 = r0[x0 + c];
                out[c] = (uint8_t)(r1 ? v1 + (r1[x0 + c] - v1) * dy : v1);
                continue;
            }
            double v1 = r0[x0 + c] + (r0[x1 + c] - r0[x0 + c]) * dx;
            if (axis == 0) {
                double v2 = r1 ? r1[x0 + c] + (r1[x1 + c] - r1[x0 + c]) * dx : v1;
                v1 = v1 + (v2 - v1) * dy;
            }
            out[c] = (uint8_t)v1;
        }
        return 1;
    }
    x--;
    y--;
    size_t taps[4]; /* byte offsets of the columns, and below of the rows */
    if (x >= 0 && x + 3 < W) {
        for (int k = 0; k < 4; k++)
            taps[k] = (size_t)(x + k) * 3;
    } else {
        for (int k = 0; k < 4; k++)
            taps[k] = (size_t)clampi(x + k, W) * 3;
    }
    size_t rows[4];
    if (axis == 1) {
        rows[1] = (size_t)(y + 1) * row; /* in the frame: yin was */
    } else if (y >= 0 && y + 3 < H) {
        for (int k = 0; k < 4; k++)
            rows[k] = (size_t)(y + k) * row;
    } else {
        rows[0] = (size_t)clampi(y, H) * row;
        for (int k = 1; k < 4; k++)
            rows[k] = y + k >= 0 && y + k < H ? (size_t)(y + k) * row : rows[k - 1];
    }
    v4d r;
    if (axis == 1) {
        cubic_at(src + rows[1], taps, dx, &r);
    } else if (axis == 2) {
        cubic_at(src + taps[1], rows, dy, &r);
    } else {
        v4d v[4];
        for (int j = 0; j < 4; j++)
            cubic_at(src + rows[j], taps, dx, &v[j]);
        cubic4(v, dy, &r);
    }
    for (int c = 0; c < 3; c++)
        out[c] = r[c] <= 0.0 ? 0 : r[c] >= 255.0 ? 255 : (uint8_t)r[c];
    return 1;
}

/* dst = src under the inverse map a (output pixel centre -> source point), fill outside;
 * bicubic and axis constants where it is inlined. */
static inline __attribute__((always_inline)) void affine_pass(const uint8_t *src, uint8_t *dst,
                                                              int W, int H, const double a[6],
                                                              int bicubic, int axis,
                                                              const uint8_t fill[3])
{
    for (int y = 0; y < H; y++) {
        double yin = y + 0.5;
        for (int x = 0; x < W; x++) {
            double xin = x + 0.5;
            double xs = a[0] * xin + a[1] * yin + a[2];
            double ys = a[3] * xin + a[4] * yin + a[5];
            uint8_t *o = dst + ((size_t)y * W + x) * 3;
            if (!sample(src, W, H, xs, ys, bicubic, axis, o)) {
                o[0] = fill[0];
                o[1] = fill[1];
                o[2] = fill[2];
            }
        }
    }
}

static void affine(const uint8_t *src, uint8_t *dst, int W, int H, const double a[6],
                   int bicubic, const uint8_t fill[3])
{
    /* y' = y exactly: every point on a row centre; x' = x: on a column centre */
    if (a[3] == 0 && a[4] == 1 && a[5] == 0) {
        if (bicubic)
            affine_pass(src, dst, W, H, a, 1, 1, fill);
        else
            affine_pass(src, dst, W, H, a, 0, 1, fill);
    } else if (a[0] == 1 && a[1] == 0 && a[2] == 0) {
        if (bicubic)
            affine_pass(src, dst, W, H, a, 1, 2, fill);
        else
            affine_pass(src, dst, W, H, a, 0, 2, fill);
    } else {
        if (bicubic)
            affine_pass(src, dst, W, H, a, 1, 0, fill);
        else
            affine_pass(src, dst, W, H, a, 0, 0, fill);
    }
}

/* Python's round(v, 15): the decimal string correctly rounded, read back (glibc's printf and
 * strtod round exactly, as CPython's dtoa does). */
static double round15(double v)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%.15f", v);
    return strtod(buf, NULL);
}

/* Image.rotate(degrees) without expand, about the centre: its inverse matrix. Returns 0 for
 * an angle Pillow copies (0 modulo 360). */
static int rotate_matrix(double degrees, int W, int H, double a[6])
{
    double angle = fmod(degrees, 360.0); /* Python's %: the sign of the divisor */
    if (angle != 0 && angle < 0)
        angle += 360.0;
    if (angle == 0)
        return 0;
    double rad = -(angle * (3.141592653589793 / 180.0));
    a[0] = round15(cos(rad));
    a[1] = round15(sin(rad));
    a[3] = round15(-sin(rad));
    a[4] = round15(cos(rad));
    double cx = W / 2.0, cy = H / 2.0;
    a[2] = a[0] * -cx + a[1] * -cy + 0.0;
    a[5] = a[3] * -cx + a[4] * -cy + 0.0;
    a[2] += cx;
    a[5] += cy;
    return 1;
}

/* ---- applying ---------------------------------------------------------------------------- */

static int needs_scratch(enum tb_ra_op op)
{
    return op == TB_RA_SHARPNESS || op == TB_RA_ROTATE || op == TB_RA_SHEAR_X ||
           op == TB_RA_SHEAR_Y || op == TB_RA_TRANSLATE_X || op == TB_RA_TRANSLATE_Y;
}

/* One op on every frame; scratch holds a frame when needs_scratch(op). */
static void apply_op(uint8_t *clip, int T, int W, int H, enum tb_ra_op op, double arg,
                     enum tb_resample resample, const uint8_t fill[3], uint8_t *scratch)
{
    size_t n_px = (size_t)W * H, frame = n_px * 3;
    uint8_t lut[256];
    double a[6] = {1, 0, 0, 0, 1, 0};
    switch (op) {
    case TB_RA_AUTO_CONTRAST:
        for (int t = 0; t < T; t++)
            autocontrast(clip + t * frame, n_px);
        return;
    case TB_RA_EQUALIZE:
        for (int t = 0; t < T; t++)
            equalize(clip + t * frame, n_px);
        return;
    case TB_RA_INVERT:
    case TB_RA_POSTERIZE:
    case TB_RA_SOLARIZE:
    case TB_RA_SOLARIZE_ADD: {
        int k = (int)arg;
        if (op == TB_RA_POSTERIZE && k >= 8)
            return; /* timm's posterize keeps 8 bits as they are */
        for (int v = 0; v < 256; v++) {
            int o = op == TB_RA_INVERT      ? 255 - v
                    : op == TB_RA_POSTERIZE ? v & ~((1 << (8 - k)) - 1)
                    : op == TB_RA_SOLARIZE  ? (v < k ? v : 255 - v)
                                            : (v < 128 ? (v + k < 255 ? v + k : 255) : v);
            lut[v] = (uint8_t)o;
        }
        lut_all(clip, n_px * T, lut);
        return;
    }
    case TB_RA_COLOR:
    case TB_RA_CONTRAST:
    case TB_RA_BRIGHTNESS:
    case TB_RA_SHARPNESS:
        for (int t = 0; t < T; t++)
            enhance(clip + t * frame, W, H, op, arg, scratch);
        return;
    case TB_RA_ROTATE:
        if (!rotate_matrix(arg, W, H, a))
            return;
        break;
    case TB_RA_SHEAR_X:
        a[1] = arg;
        break;
    case TB_RA_SHEAR_Y:
        a[3] = arg;
        break;
    case TB_RA_TRANSLATE_X:
        a[2] = arg * W;
        break;
    case TB_RA_TRANSLATE_Y:
        a[5] = arg * H;
        break;
    default:
        return;
    }
    for (int t = 0; t < T; t++) {
        memcpy(scratch, clip + t * frame, frame);
        affine(scratch, clip + t * frame, W, H, a, resample == TB_RESAMPLE_BICUBIC, fill);
    }
}

/* The arguments torchvision accepts for pytorchvideo's ops: factors >= 0, bits 0 to 8, a
 * threshold at most 1. */
static int pv_arg_ok(enum tb_ra_op op, double arg)
{
    switch (op) {
    case TB_RA_PV_BRIGHTNESS:
    case TB_RA_PV_CONTRAST:
    case TB_RA_PV_SATURATION:
    case TB_RA_PV_SHARPNESS:
        return arg >= 0 && isfinite(arg);
    case TB_RA_PV_POSTERIZE:
        return arg >= 0 && arg <= 8 && arg == floor(arg);
    case TB_RA_PV_SOLARIZE:
        return arg <= 1 && isfinite(arg);
    default:
        return isfinite(arg);
    }
}

int tb_randaug_op(uint8_t *clip, int n_frames, int width, int height, enum tb_ra_op op,
                  double arg, enum tb_resample resample, const uint8_t fill[3])
{
    if ((unsigned)op >= TB_RA_N_OPS || n_frames < 0 || width < 1 || height < 1 ||
        (resample != TB_RESAMPLE_BICUBIC && resample != TB_RESAMPLE_BILINEAR))
        return tbi_err(TB_EINVAL, "RandAugment: bad op %d or frame shape %dx%d", (int)op, width,
                       height);
    if (tbi_randaug_is_pv(op)) {
        if (!pv_arg_ok(op, arg))
            return tbi_err(TB_EINVAL, "RandAugment: %s takes no argument %g",
                           tbi_randaug_pv_name(op), arg);
        struct tb_ra_step s = {.op = op, .apply = 1, .arg = arg};
        return tbi_randaug_pv_clip(clip, n_frames, width, height, &s, 1);
    }
    uint8_t *scratch = NULL;
    size_t bytes = (size_t)width * height * 3 + SCRATCH_PAD;
    if (needs_scratch(op) && !(scratch = tbi_malloc(bytes)))
        return tbi_err(TB_ENOMEM, "out of memory for RandAugment's frame");
    apply_op(clip, n_frames, width, height, op, arg, resample, fill, scratch);
    free(scratch);
    return 0;
}

int tb_randaug_apply(const struct tb_ra_plan *plan, const struct tb_randaug_opts *o,
                     uint8_t *clip, int n_frames, int width, int height)
{
    uint8_t *scratch = NULL;
    struct tb_ra_step pv[TB_RA_MAX_OPS];
    int n_pv = 0, rc = 0, n = plan->n < TB_RA_MAX_OPS ? plan->n : TB_RA_MAX_OPS;
    for (int k = 0; k <= n && rc == 0; k++) {
        const struct tb_ra_step *s = k < n ? &plan->step[k] : NULL;
        if (s && !s->apply)
            continue;
        if (s && tbi_randaug_is_pv(s->op)) {
            pv[n_pv++] = *s;
            continue;
        }
        /* pytorchvideo's ops run as one chain on float frames, rounded to levels at its end */
        if (n_pv)
            rc = tbi_randaug_pv_clip(clip, n_frames, width, height, pv, n_pv);
        n_pv = 0;
        if (!s || rc < 0)
            continue;
        if (needs_scratch(s->op) && !scratch &&
            !(scratch = tbi_malloc((size_t)width * height * 3 + SCRATCH_PAD))) {
            rc = tbi_err(TB_ENOMEM, "out of memory for RandAugment's frame");
            break;
        }
        apply_op(clip, n_frames, width, height, s->op, s->arg, o->resample, o->fill, scratch);
    }
    free(scratch);
    return rc;
}
