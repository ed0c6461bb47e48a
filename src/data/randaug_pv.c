/* src/data/randaug_pv.c - RandAugment's second family: pytorchvideo's
 * (pytorchvideo.transforms.RandAugment, 0.1.5, as AVION's VideoClsDataset runs it in mode
 * 'train': on the clip as float32 frames in [0, 1]). Its 14 ops in its table's order, its
 * level functions, its draws (OpSampler: ops without replacement; each op with probability
 * prob; magnitudes gaussian, clipped to [0, 10], or uniform), and torchvision 0.14's tensor
 * arithmetic on float frames (functional_tensor.py, and its affine grid and grid_sample for
 * the geometric ops), one draw per clip, each frame with its own statistics. A clip's frames
 * become floats v / 255 (AVION's _load_frames), run the plan, and come back as the nearest of
 * the 256 levels. Not here: pytorchvideo on uint8 tensors (its create_video_transform),
 * AugMix. Compiled with -ffp-contract=off: each expression rounds where torch's does; fmaf
 * stands exactly where torch's x86-64 kernels fuse (its AVX2 grid sampler, OpenBLAS's sgemm
 * under the affine grid, oneDNN's convolution under the blur). Tests: tests/test_augment.c
 * against tests/ref/randaug_pv_ref.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "data/randaug_pv.h"

/* ---- the op table ------------------------------------------------------------------------ */

enum level_kind {
    LEVEL_NONE,       /* AutoContrast, Equalize, Invert */
    LEVEL_INC_NEGATE, /* _increasing_randomly_negate_to_arg: base +- (M/10) span */
    LEVEL_DEC_INT,    /* _decreasing_int_to_arg: base - int((M/10) span) */
    LEVEL_DEC,        /* _decreasing_to_arg: base - (M/10) span */
};

/* _TRANSFORM_RANDAUG_MAX_PARAMS with _LEVEL_TO_ARG, in the dict's order (enum tb_ra_op from
 * TB_RA_PV_BRIGHTNESS). */
static const struct pv_op {
    const char *name;
    enum level_kind kind;
    double base, span;
} pv_ops[TBI_PV_N_OPS] = {
    {"AdjustBrightness", LEVEL_INC_NEGATE, 1, 0.9},
    {"AdjustContrast", LEVEL_INC_NEGATE, 1, 0.9},
    {"AdjustSaturation", LEVEL_INC_NEGATE, 1, 0.9},
    {"AdjustSharpness", LEVEL_INC_NEGATE, 1, 0.9},
    {"AutoContrast", LEVEL_NONE, 0, 0},
    {"Equalize", LEVEL_NONE, 0, 0},
    {"Invert", LEVEL_NONE, 0, 0},
    {"Rotate", LEVEL_INC_NEGATE, 0, 30},
    {"Posterize", LEVEL_DEC_INT, 4, 4},
    {"Solarize", LEVEL_DEC, 1, 1},
    {"ShearX", LEVEL_INC_NEGATE, 0, 0.3},
    {"ShearY", LEVEL_INC_NEGATE, 0, 0.3},
    {"TranslateX", LEVEL_INC_NEGATE, 0, 0.45},
    {"TranslateY", LEVEL_INC_NEGATE, 0, 0.45},
};

const char *tbi_randaug_pv_name(enum tb_ra_op op)
{
    return tbi_randaug_is_pv(op) ? pv_ops[op - TB_RA_PV_BRIGHTNESS].name : "?";
}

/* _AUGMENTATION_MAX_LEVEL is 10: level / 10 in doubles, then times the span. */
double tbi_randaug_pv_level_arg(enum tb_ra_op op, double magnitude, int negate)
{
    if (!tbi_randaug_is_pv(op))
        return 0;
    const struct pv_op *p = &pv_ops[op - TB_RA_PV_BRIGHTNESS];
    double v = (magnitude / 10.0) * p->span;
    switch (p->kind) {
    case LEVEL_INC_NEGATE:
        return p->base + (negate ? -v : v);
    case LEVEL_DEC_INT:
        return p->base - (double)(int)v;
    case LEVEL_DEC:
        return p->base - v;
    default:
        return 0;
    }
}

/* ---- the draws --------------------------------------------------------------------------- */

/* OpSampler.forward: torch.multinomial over equal weights without replacement (an ordered
 * sample of distinct ops), then each AugmentTransform: skip when rand() > prob, the magnitude
 * (_get_magnitude), the sign (_randomly_negate: kept when rand() > 0.5). Every step takes the
 * same four draws whatever they decide. torch.normal gives its magnitude as a float32. */
void tbi_randaug_pv_draw(const struct tb_randaug_opts *o, tb_rng *r, struct tb_ra_plan *plan)
{
    int order[TBI_PV_N_OPS];
    for (int k = 0; k < TBI_PV_N_OPS; k++)
        order[k] = k;
    int n = o->n_ops < 0 ? 0 : o->n_ops > TBI_PV_N_OPS ? TBI_PV_N_OPS : o->n_ops;
    plan->n = n;
    for (int k = 0; k < n; k++) {
        struct tb_ra_step *s = &plan->step[k];
        int j = k + (int)tb_rng_below(r, (uint64_t)(TBI_PV_N_OPS - k));
        int t = order[k];
        order[k] = order[j];
        order[j] = t;
        s->op = (enum tb_ra_op)(TB_RA_PV_BRIGHTNESS + order[k]);
        double u_apply = tb_rng_uniform(r), m;
        if (o->sampling == TB_RA_UNIFORM_INT) {
            /* torch.randint(sampling_min, magnitude + 1) */
            int lo = (int)o->sampling_min, hi = (int)o->magnitude;
            m = lo + (double)tb_rng_below(r, (uint64_t)(hi - lo + 1));
        } else if (o->sampling == TB_RA_UNIFORM_FLOAT) {
            m = tb_rng_uniform(r) * (o->magnitude - o->sampling_min) + o->sampling_min;
        } else {
            m = (float)(o->magnitude + o->magnitude_std * tb_rng_normal(r));
            m = m < 0 ? 0 : m > 10 ? 10 : m;
        }
        double u_sign = tb_rng_uniform(r);
        s->apply = !(u_apply > o->prob);
        s->magnitude = m;
        s->negate = !(u_sign > 0.5);
        s->arg = tbi_randaug_pv_level_arg(s->op, m, s->negate);
    }
}

/* ---- pixel ops (functional_tensor.py on float frames) ------------------------------------ */

/* .clamp(0, 1) */
static inline float clamp01(float v)
{
    return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
}

/* _blend(img, degenerate, ratio): ratio * img + (1.0 - ratio) * degenerate, each scalar
 * rounded to float32 first, then clamped. */
struct blend {
    float r, omr;
};

static inline struct blend blend_of(double ratio)
{
    return (struct blend){(float)ratio, (float)(1.0 - ratio)};
}

static inline float blend(float img, float deg, struct blend b)
{
    float t = b.r * img;
    float u = b.omr * deg;
    return clamp01(t + u);
}

/* rgb_to_grayscale: 0.2989 * r + 0.587 * g + 0.114 * b, left to right in float32 (each
 * Python float rounded to float32). */
static inline float grey(const float *p)
{
    float t = (float)0.2989 * p[0];
    float u = (float)0.587 * p[1];
    float s = t + u;
    float v = (float)0.114 * p[2];
    return s + v;
}

/* (video * 255).to(torch.uint8): truncation (values lie in [0, 1] up to a rounding). */
static inline uint8_t to_u8(float v)
{
    float s = v * 255.0f;
    return s <= 0.0f ? 0 : s >= 255.0f ? 255 : (uint8_t)s;
}

static void brightness(float *px, size_t n_px, double factor)
{
    struct blend b = blend_of(factor);
    for (size_t k = 0; k < 3 * n_px; k++)
        px[k] = blend(px[k], 0.0f, b);
}

/* The degenerate frame is the mean of the grey frame: torch.mean sums in float32 (its
 * cascade, whose order follows the vector width and threads) and divides by the count; here
 * the sum is the correctly rounded one, from doubles. */
static void contrast(float *px, size_t n_px, double factor)
{
    double sum = 0;
    for (size_t k = 0; k < n_px; k++)
        sum += grey(px + 3 * k);
    float mean = (float)sum / (float)n_px;
    struct blend b = blend_of(factor);
    for (size_t k = 0; k < 3 * n_px; k++)
        px[k] = blend(px[k], mean, b);
}

static void saturation(float *px, size_t n_px, double factor)
{
    struct blend b = blend_of(factor);
    for (size_t k = 0; k < n_px; k++) {
        float *p = px + 3 * k;
        float g = grey(p);
        p[0] = blend(p[0], g, b);
        p[1] = blend(p[1], g, b);
        p[2] = blend(p[2], g, b);
    }
}

/* _blurred_degenerate_image: a 3x3 convolution (1 1 1 / 1 5 1 / 1 1 1, divided by 13 in
 * float32) inside the border, which keeps the frame's values; each tap one fused
 * multiply-add in row order from 0, as oneDNN's x86-64 kernel sums. */
static void sharpness(float *px, int W, int H, double factor, float *blur)
{
    if (W <= 2 || H <= 2)
        return;
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    const float k[3][3] = {{k1, k1, k1}, {k1, k5, k1}, {k1, k1, k1}};
    size_t row = (size_t)W * 3;
    memcpy(blur, px, sizeof(float) * row * H);
    for (int y = 1; y < H - 1; y++)
        for (int x = 3; x < (W - 1) * 3; x++) {
            float acc = 0.0f;
            for (int dy = 0; dy < 3; dy++)
                for (int dx = 0; dx < 3; dx++)
                    acc = fmaf(k[dy][dx], px[(size_t)(y + dy - 1) * row + x + (dx - 1) * 3], acc);
            blur[(size_t)y * row + x] = acc;
        }
    struct blend b = blend_of(factor);
    for (size_t k2 = 0; k2 < row * H; k2++)
        px[k2] = blend(px[k2], blur[k2], b);
}

/* autocontrast: each channel from its minimum to its maximum, scale = 1 / (max - min) (1, and
 * the minimum 0, where that is not finite). */
static void autocontrast(float *px, size_t n_px)
{
    for (int c = 0; c < 3; c++) {
        float lo = px[c], hi = px[c];
        for (size_t k = 1; k < n_px; k++) {
            float v = px[3 * k + c];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        float scale = 1.0f / (hi - lo);
        if (!isfinite(scale)) {
            lo = 0.0f;
            scale = 1.0f;
        }
        for (size_t k = 0; k < n_px; k++) {
            float d = px[3 * k + c] - lo;
            px[3 * k + c] = clamp01(d * scale);
        }
    }
}

/* pytorchvideo's _equalize on floats: the frame to uint8 by truncation, torchvision's
 * _scale_channel per channel (step = the pixels less those of the highest value present,
 * // 255; value v to (step // 2 + pixels below v) // step, at most 255; step 0: as it is),
 * then / 255. */
static void equalize(float *px, size_t n_px)
{
    for (int c = 0; c < 3; c++) {
        int64_t h[256] = {0};
        for (size_t k = 0; k < n_px; k++)
            h[to_u8(px[3 * k + c])]++;
        int64_t total = 0, last = 0;
        for (int v = 0; v < 256; v++)
            if (h[v]) {
                total += h[v];
                last = h[v];
            }
        int64_t step = (total - last) / 255;
        float lut[256];
        int64_t below = 0;
        for (int v = 0; v < 256; v++) {
            int64_t q = step ? (step / 2 + below) / step : v;
            lut[v] = (float)(q > 255 ? 255 : q) / 255.0f;
            below += h[v];
        }
        for (size_t k = 0; k < n_px; k++)
            px[3 * k + c] = lut[to_u8(px[3 * k + c])];
    }
}

/* _posterize on floats: to uint8 by truncation, & -(2^(8 - bits)) as a uint8 (0 for 0
 * bits), / 255. */
static void posterize(float *px, size_t n_px, int bits)
{
    uint8_t mask = (uint8_t)(-(1 << (8 - bits)));
    for (size_t k = 0; k < 3 * n_px; k++)
        px[k] = (float)(to_u8(px[k]) & mask) / 255.0f;
}

/* solarize: 1 - v where v >= the threshold (compared as a float32) */
static void solarize(float *px, size_t n_px, double threshold)
{
    float t = (float)threshold;
    for (size_t k = 0; k < 3 * n_px; k++)
        px[k] = px[k] >= t ? 1.0f - px[k] : px[k];
}

/* ---- geometric ops (functional_tensor.affine / rotate, grid_sample) ---------------------- */

/* One output pixel of grid_sample (bilinear, zeros padding, align_corners False) at grid
 * point (gx, gy) of the source src (H, W, 3), on the three channels and the mask channel
 * _apply_grid_transform appends, then the fill blended by the mask: v * m + (1 - m) * 0.5.
 * The arithmetic is ATen's vectorised kernel: the source point by one fused multiply-add,
 * the four corners' weights as products of the distances, the corners summed by fused
 * multiply-adds from the north-west; corners outside the frame read 0. */
static inline void sample(const float *src, int W, int H, float gx, float gy, float sw, float sh,
                          float *out)
{
    float ix = fmaf(gx + 1.0f, sw, -0.5f);
    float iy = fmaf(gy + 1.0f, sh, -0.5f);
    float xw = floorf(ix), yn = floorf(iy);
    float w = ix - xw, e = 1.0f - w;
    float n = iy - yn, s = 1.0f - n;
    float wt[4] = {s * e, s * w, n * e, n * w}; /* nw, ne, sw, se */
    int x0 = (int)xw, y0 = (int)yn;
    int okx[2], oky[2];
    for (int k = 0; k < 2; k++) {
        okx[k] = x0 + k > -1 && x0 + k < W;
        oky[k] = y0 + k > -1 && y0 + k < H;
    }
    const float *corner[4] = {NULL, NULL, NULL, NULL};
    for (int k = 0; k < 4; k++)
        if (oky[k >> 1] && okx[k & 1])
            corner[k] = src + ((size_t)(y0 + (k >> 1)) * W + (x0 + (k & 1))) * 3;
    float v[4]; /* three channels and the mask */
    for (int c = 0; c < 4; c++) {
        float acc = 0.0f;
        for (int k = 0; k < 4; k++) {
            float val = corner[k] ? (c < 3 ? corner[k][c] : 1.0f) : 0.0f;
            acc = k == 0 ? val * wt[0] : fmaf(val, wt[k], acc);
        }
        v[c] = acc;
    }
    float m = v[3], fill = (1.0f - m) * 0.5f;
    for (int c = 0; c < 3; c++) {
        float t = v[c] * m;
        out[c] = t + fill;
    }
}

/* dst = src under theta (the output pixel's centred coordinates -> the source's, as
 * torchvision's matrix in float32): _gen_affine_grid's base grid (x - W/2 + 0.5, y - H/2 +
 * 0.5, 1) times theta transposed over (W/2, H/2), as OpenBLAS's sgemm forms the product (x
 * times the first column, y's term fused on, the 1's term added). */
static void affine(const float *src, float *dst, int W, int H, const double theta[6])
{
    float th[6];
    for (int k = 0; k < 6; k++)
        th[k] = (float)theta[k];
    float hw = (float)(0.5 * W), hh = (float)(0.5 * H), r[3][2];
    for (int k = 0; k < 3; k++) {
        r[k][0] = th[k] / hw;
        r[k][1] = th[3 + k] / hh;
    }
    float sw = (float)W / 2, sh = (float)H / 2;
    for (int y = 0; y < H; y++) {
        float yc = (float)(y - H * 0.5 + 0.5);
        for (int x = 0; x < W; x++) {
            float xc = (float)(x - W * 0.5 + 0.5);
            float gx = fmaf(yc, r[1][0], xc * r[0][0]) + r[2][0];
            float gy = fmaf(yc, r[1][1], xc * r[0][1]) + r[2][1];
            sample(src, W, H, gx, gy, sw, sh, dst + ((size_t)y * W + x) * 3);
        }
    }
}

/* The matrix each geometric op hands to torchvision, in doubles. */
static void geometry(enum tb_ra_op op, double arg, int W, int H, double th[6])
{
    th[0] = 1, th[1] = 0, th[2] = 0, th[3] = 0, th[4] = 1, th[5] = 0;
    switch (op) {
    case TB_RA_PV_ROTATE: {
        /* F.rotate: _get_inverse_affine_matrix(centre 0, -angle, ...) without shear or
         * scale is [cos a, sin a, 0, -sin a, cos a, 0] at a = math.radians(-angle) */
        double a = -arg * (3.141592653589793 / 180.0);
        th[0] = cos(a), th[1] = sin(a), th[3] = -sin(a), th[4] = cos(a);
        break;
    }
    case TB_RA_PV_SHEAR_X: /* [1, factor, H * factor / 2, 0, 1, 0] */
        th[1] = arg, th[2] = H * arg / 2;
        break;
    case TB_RA_PV_SHEAR_Y: /* [1, 0, 0, factor, 1, W * factor / 2] */
        th[3] = arg, th[5] = W * arg / 2;
        break;
    case TB_RA_PV_TRANSLATE_X: /* [1, 0, factor * W, 0, 1, 0] */
        th[2] = arg * W;
        break;
    default: /* TB_RA_PV_TRANSLATE_Y: [1, 0, 0, 0, 1, factor * H] */
        th[5] = arg * H;
        break;
    }
}

/* ---- applying ---------------------------------------------------------------------------- */

void tbi_randaug_pv_frame(float *px, int W, int H, const struct tb_ra_step *steps, int n,
                          float *scratch)
{
    size_t n_px = (size_t)W * H;
    for (int k = 0; k < n; k++) {
        double arg = steps[k].arg, th[6];
        switch (steps[k].op) {
        case TB_RA_PV_BRIGHTNESS:
            brightness(px, n_px, arg);
            break;
        case TB_RA_PV_CONTRAST:
            contrast(px, n_px, arg);
            break;
        case TB_RA_PV_SATURATION:
            saturation(px, n_px, arg);
            break;
        case TB_RA_PV_SHARPNESS:
            sharpness(px, W, H, arg, scratch);
            break;
        case TB_RA_PV_AUTO_CONTRAST:
            autocontrast(px, n_px);
            break;
        case TB_RA_PV_EQUALIZE:
            equalize(px, n_px);
            break;
        case TB_RA_PV_INVERT:
            for (size_t i = 0; i < 3 * n_px; i++)
                px[i] = 1.0f - px[i];
            break;
        case TB_RA_PV_POSTERIZE:
            if (arg < 8) /* _posterize returns 8 bits and more as they are */
                posterize(px, n_px, (int)arg);
            break;
        case TB_RA_PV_SOLARIZE:
            solarize(px, n_px, arg);
            break;
        case TB_RA_PV_ROTATE:
        case TB_RA_PV_SHEAR_X:
        case TB_RA_PV_SHEAR_Y:
        case TB_RA_PV_TRANSLATE_X:
        case TB_RA_PV_TRANSLATE_Y:
            geometry(steps[k].op, arg, W, H, th);
            memcpy(scratch, px, sizeof(float) * 3 * n_px);
            affine(scratch, px, W, H, th);
            break;
        default: /* another family's op: not ours to run */
            break;
        }
    }
}

int tbi_randaug_pv_clip(uint8_t *clip, int T, int W, int H, const struct tb_ra_step *steps, int n)
{
    size_t n_val = (size_t)W * H * 3;
    float *px = tbi_malloc(sizeof(float) * n_val * 2);
    if (!px)
        return tbi_err(TB_ENOMEM, "out of memory for RandAugment's float frames");
    float lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = (float)v / 255.0f;
    for (int t = 0; t < T; t++) {
        uint8_t *f = clip + (size_t)t * n_val;
        for (size_t k = 0; k < n_val; k++)
            px[k] = lut[f[k]];
        tbi_randaug_pv_frame(px, W, H, steps, n, px + n_val);
        /* the nearest level: v * 255 is exact in doubles */
        for (size_t k = 0; k < n_val; k++) {
            double v = rint((double)px[k] * 255.0);
            f[k] = v <= 0 ? 0 : v >= 255 ? 255 : (uint8_t)v;
        }
    }
    free(px);
    return 0;
}
