/* src/video/resize.c - crop -> RGB24 for 8-bit 4:2:0 frames, bilinear (contract in resize.h).
 *
 * Why not swscale: for RGB24 with a filter of more than two taps, FFmpeg 5.1 runs a C loop
 * per pixel (yuv2rgb24_X_c) and sets up a new scaler for every crop size; that was a sixth of
 * a W1 clip on short keyframe intervals (docs/PERFORMANCE.md). Here a row at a time:
 *
 *   vertical pass    each plane's source rows -> one row of the crop's width (u8 -> 14-bit),
 *                    a plain loop the compiler vectorises;
 *   horizontal pass  that row -> out_w values in output order, the flip and the chroma
 *                    sharing baked into the tables, so chroma comes out per pixel;
 *   matrix           Y, U, V -> R, G, B, rounded once.
 *
 * The horizontal pass is a gather; where tbi_cpu_avx512() it runs 16 outputs at a time, two
 * taps per step, picking the taps out of a 64-sample window with one permute (VPERMT2W) and
 * summing them with VPMADDWD; a block whose taps do not fit one window runs the portable loop.
 * With AVX2 alone, 8 outputs a step, each pair of taps fetched by a gather. Integer sums are
 * exact, so the three paths (AVX-512, AVX2, plain C) give the same bytes. */
#define _POSIX_C_SOURCE 200809L
#include "video/resize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <libswscale/swscale.h>

#include "core/cpu.h"
#include "core/internal.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define HAVE_X86_PATHS 1
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define AVX2 __attribute__((target("avx2")))
#else
#define HAVE_X86_PATHS 0
#endif

#define ONE 16384      /* coefficient scale: 14 bits */
#define FRAC 6         /* fractional bits of the values between the passes */
#define WIN 64         /* samples in the AVX-512 path's window */
#define LANES 16       /* outputs per AVX-512 step */

enum { PATH_C = TBI_RESIZE_C, PATH_AVX2 = TBI_RESIZE_AVX2, PATH_AVX512 = TBI_RESIZE_AVX512 };

int tbi_resize_path(void)
{
#if HAVE_X86_PATHS
    if (tbi_cpu_avx512())
        return PATH_AVX512;
    if (tbi_cpu_avx2())
        return PATH_AVX2;
#endif
    return PATH_C;
}

/* One plane's filter along one axis: output i reads taps samples from pos[i]. */
struct axis {
    int n, taps;
    int32_t *pos;
    int16_t *coef;     /* n x taps, each row summing to ONE */
    /* The AVX-512 path's tables (horizontal axes): per block of LANES outputs the window's
     * start, whether every tap fits the window, and per pair of taps the 32 window indices and
     * coefficients of its lanes. */
    int32_t *base;
    uint8_t *fits;
    int16_t *idx, *bcoef;
};

struct tbi_resize {
    int cw, ch, out_w, out_h, flip, full_range, path;    /* what the tables are for */
    int coef[4];               /* and the matrix: swscale's crv, cbu, cgu, cgv (matrix()) */
    struct axis hy, hc, vy, vc;
    int32_t cy, y0, k, crv, cbu, cgu, cgv;                /* the matrix (matrix()) */
    /* the same for the vector paths' 16-bit lanes (lanes16()): the rounding added before the
     * shift to 8 bits, the luma gain's excess d = cy - 2^16 and k's high half, each chroma
     * coefficient split as q * 2^16 + m (rv, bu, gu, gv) and the channels' offsets */
    struct {
        int16_t half, y0, d, kh, q[4], orv, obu, og;
        uint16_t m[4];
    } l16;
    int truncate;              /* 8-bit Y, U, V truncated, not rounded (swscale_path()) */
    int32_t *acc;
    int16_t *ty, *tu, *tv;     /* vertical pass outputs, WIN samples of zero padding after */
    int16_t *ly, *lu, *lv;     /* horizontal pass outputs, out_w rounded up to LANES */
    void *mem;
    size_t mem_bytes;
};

/* ---- filters ----------------------------------------------------------------------------- */

/* Taps of a tent of half-width max(1, n_src / n) (swscale's filter size for it), at most the
 * source. */
static int axis_taps(int n_src, int n)
{
    double w = (double)n_src / n > 1 ? (double)n_src / n : 1;
    int t = (int)ceil(2 * w) + 1;
    return t < n_src ? t : n_src;
}

/* Output i of n from n_src samples, centre-aligned: the tent centred on (i + 0.5) * s - 0.5
 * (s = n_src / n), taps past an edge folded onto it, the window moved inside the source; the
 * weights quantised by their running sum, so they add up to ONE exactly and stay >= 0. */
static void axis_filter(int n_src, int n, int taps, int i, int32_t *pos, int16_t *coef,
                        double *wt)
{
    double s = (double)n_src / n, w = s > 1 ? s : 1, inv_w = 1 / w, c = (i + 0.5) * s - 0.5;
    int start = (int)floor(c - w) + 1;
    int first = start < 0 ? 0 : start > n_src - taps ? n_src - taps : start;
    for (int j = 0; j < taps; j++)
        wt[j] = 0;
    double total = 0;
    for (int t = start; t < c + w; t++) {
        double a = 1 - fabs(t - c) * inv_w;
        if (a <= 0)
            continue;
        int k = (t < 0 ? 0 : t >= n_src ? n_src - 1 : t) - first;
        wt[k] += a;
        total += a;
    }
    double cum = 0, scale = ONE / total;
    int prev = 0;
    for (int j = 0; j < taps; j++) {
        cum += wt[j];
        int q = j == taps - 1 ? ONE : (int)(cum * scale + 0.5);
        coef[j] = (int16_t)(q - prev);
        prev = q;
    }
    *pos = first;
}

/* The AVX-512 tables of a horizontal axis (taps even). */
static void axis_blocks(struct axis *a)
{
    int pairs = a->taps / 2;
    for (int b = 0; b * LANES < a->n; b++) {
        int x0 = b * LANES, m = a->n - x0 < LANES ? a->n - x0 : LANES;
        int lo = a->pos[x0], hi = a->pos[x0];
        for (int l = 1; l < m; l++) {
            lo = a->pos[x0 + l] < lo ? a->pos[x0 + l] : lo;
            hi = a->pos[x0 + l] > hi ? a->pos[x0 + l] : hi;
        }
        a->base[b] = lo;
        a->fits[b] = hi - lo + a->taps <= WIN;
        for (int p = 0; p < pairs; p++) {
            int16_t *ix = a->idx + ((size_t)b * pairs + p) * 2 * LANES;
            int16_t *cf = a->bcoef + ((size_t)b * pairs + p) * 2 * LANES;
            for (int l = 0; l < LANES; l++) {
                int in = l < m;  /* coefficients for the AVX2 gathers too */
                int off = in && a->fits[b] ? a->pos[x0 + l] - lo + 2 * p : 0;
                ix[2 * l] = (int16_t)off;
                ix[2 * l + 1] = (int16_t)(off + 1);
                cf[2 * l] = in ? a->coef[(size_t)(x0 + l) * a->taps + 2 * p] : 0;
                cf[2 * l + 1] = in ? a->coef[(size_t)(x0 + l) * a->taps + 2 * p + 1] : 0;
            }
        }
    }
}

/* ---- memory ------------------------------------------------------------------------------ */

/* Carve n bytes, 64-aligned, out of *p (which only counts when base is NULL). */
static void *take(char *base, size_t *p, size_t n)
{
    size_t at = (*p + 63) & ~(size_t)63;
    *p = at + n;
    return base ? base + at : NULL;
}

static void axis_layout(struct axis *a, char *base, size_t *p, int n, int taps, int blocks)
{
    a->n = n;
    a->taps = taps;
    a->pos = take(base, p, sizeof(int32_t) * n);
    a->coef = take(base, p, sizeof(int16_t) * n * taps);
    int nb = blocks ? (n + LANES - 1) / LANES : 0;
    a->base = take(base, p, sizeof(int32_t) * nb);
    a->fits = take(base, p, nb);
    a->idx = take(base, p, sizeof(int16_t) * 2 * LANES * (size_t)nb * (taps / 2));
    a->bcoef = take(base, p, sizeof(int16_t) * 2 * LANES * (size_t)nb * (taps / 2));
}

/* Lay out every table and buffer in base (NULL: only count); the bytes needed. */
static size_t layout(struct tbi_resize *r, char *base)
{
    int cwc = (r->cw + 1) / 2, chc = (r->ch + 1) / 2;
    int hty = axis_taps(r->cw, r->out_w), htc = axis_taps(cwc, (r->out_w + 1) / 2);
    size_t p = 0;
    axis_layout(&r->hy, base, &p, r->out_w, hty + (hty & 1), 1);
    axis_layout(&r->hc, base, &p, r->out_w / 2, htc + (htc & 1), 1);
    axis_layout(&r->vy, base, &p, r->out_h, axis_taps(r->ch, r->out_h), 0);
    axis_layout(&r->vc, base, &p, r->out_h, axis_taps(chc, r->out_h), 0);
    int lw = (r->out_w + 63) / 64 * 64;  /* whole steps of every pass */
    r->acc = take(base, &p, sizeof(int32_t) * r->cw);
    r->ty = take(base, &p, sizeof(int16_t) * (r->cw + WIN));
    r->tu = take(base, &p, sizeof(int16_t) * (cwc + WIN));
    r->tv = take(base, &p, sizeof(int16_t) * (cwc + WIN));
    r->ly = take(base, &p, sizeof(int16_t) * lw);
    r->lu = take(base, &p, sizeof(int16_t) * lw);
    r->lv = take(base, &p, sizeof(int16_t) * lw);
    return p;
}

/* swscale's RGB from 8-bit Y, U, V (FFmpeg's yuv2rgb.c, ff_yuv2rgb_c_init_tables, for RGB24):
 * a luma table indexed by Y plus per-chroma offsets, with its own rounding (limited range
 * comes out about 1.7 darker than the exact BT.601 formula, 235 giving 253), written here in
 * closed form so that it vectorises: value = clip((base + Y + off) * cy + k) >> 16), off the
 * sum of floor(C * c / 2^16) - floor(c / 2^9) over the chroma terms of the channel. The
 * coefficients are one of swscale's tables (sws_getCoefficients: BT.601, BT.709, ...);
 * contrast, saturation and brightness at their defaults. */
static void matrix(struct tbi_resize *r)
{
    const int *t = r->coef;  /* crv, cbu, cgu, cgv; 16 bits */
    int64_t crv = t[0], cbu = t[1], cgu = -t[2], cgv = -t[3], cy = 1 << 16, oy = 0;
    if (!r->full_range) {
        cy = cy * 255 / 219;
        oy = 16 << 16;
    } else {
        crv = crv * 224 / 255;
        cbu = cbu * 224 / 255;
        cgu = cgu * 224 / 255;
        cgv = cgv * 224 / 255;
    }
    /* in units of the luma table's steps */
    r->crv = (int32_t)((crv * 65536 + 0x8000) / cy);
    r->cbu = (int32_t)((cbu * 65536 + 0x8000) / cy);
    r->cgu = (int32_t)((cgu * 65536 + 0x8000) / cy);
    r->cgv = (int32_t)((cgv * 65536 + 0x8000) / cy);
    r->cy = (int32_t)cy;
    r->y0 = r->full_range ? 384 : 326;
    r->k = (int32_t)(-(384 << 16) - oy + 0x8000);
}

/* Which of swscale's vertical paths the output follows, since each rounds its own way (its
 * swscale.c picks by the vertical filters' sizes once it has dropped their zero taps):
 * - shrinking: the general filter, rounding to 8 bits; what the passes do by default;
 * - growing: two taps blended with truncation (yuv2packed2): 8 bits truncated here;
 * - the same height: luma rows as they are, and chroma either its nearer row above (when the
 *   one below weighs less than half) or the two averaged (yuv2packed1): the chroma filter is
 *   replaced by that. */
static void swscale_path(struct tbi_resize *r)
{
    r->truncate = r->ch < r->out_h;
    if (r->ch != r->out_h)
        return;
    struct axis *a = &r->vc;
    for (int y = 0; y < a->n; y++) {
        int16_t *c = a->coef + (size_t)y * a->taps;
        int j = 0;
        while (j < a->taps - 1 && c[j] == 0)
            j++;
        int below = j + 1 < a->taps ? c[j + 1] : 0;
        memset(c, 0, sizeof(*c) * a->taps);
        if (below < ONE / 2) {
            c[j] = ONE;
        } else {
            c[j] = ONE / 2;
            c[j + 1] = ONE / 2;
        }
    }
}

static void lanes16(struct tbi_resize *r)
{
    const int32_t c[4] = {r->crv, r->cbu, r->cgu, r->cgv};
    r->l16.half = (int16_t)(r->truncate ? 0 : 1 << (FRAC - 1));
    r->l16.y0 = (int16_t)r->y0;
    r->l16.d = (int16_t)(uint16_t)(r->cy - 65536);
    r->l16.kh = (int16_t)((r->k - 0x8000) / 65536);
    for (int i = 0; i < 4; i++) {
        r->l16.q[i] = (int16_t)(c[i] >> 16);
        r->l16.m[i] = (uint16_t)(c[i] & 0xffff);
    }
    r->l16.orv = (int16_t)(r->crv >> 9);
    r->l16.obu = (int16_t)(r->cbu >> 9);
    r->l16.og = (int16_t)((r->cgu >> 9) + (r->cgv >> 9));
}

static int build(struct tbi_resize **rp, int cw, int ch, int full_range, const int coef[4],
                 int out_w, int out_h, int flip, int portable)
{
    struct tbi_resize *r = *rp, key = {.cw = cw, .ch = ch, .out_w = out_w, .out_h = out_h,
                                       .flip = flip, .full_range = full_range};
    key.path = portable ? PATH_C : tbi_resize_path();
    memcpy(key.coef, coef, sizeof(key.coef));
    if (r && r->cw == cw && r->ch == ch && r->out_w == out_w && r->out_h == out_h &&
        r->flip == flip && r->full_range == full_range && r->path == key.path &&
        !memcmp(r->coef, key.coef, sizeof(key.coef)))
        return 0;
    size_t need = layout(&key, NULL);
    if (!r || r->mem_bytes < need) {
        tbi_resize_free(rp);
        r = tbi_calloc(1, sizeof(*r));
        if (r)
            r->mem = tbi_alloc_big(need);  /* 64-byte aligned */
        if (!r || !r->mem) {
            free(r);
            return tbi_err(TB_ENOMEM, "out of memory for a %dx%d -> %dx%d resize", cw, ch,
                           out_w, out_h);
        }
        r->mem_bytes = need;
        *rp = r;
    }
    key.mem = r->mem;
    key.mem_bytes = r->mem_bytes;
    *r = key;
    memset(r->mem, 0, need);  /* the windows' padding is read (with weight 0) */
    layout(r, r->mem);
    matrix(r);

    int cwc = (cw + 1) / 2, chc = (ch + 1) / 2, ncw = (out_w + 1) / 2;
    int most = r->hy.taps > r->hc.taps ? r->hy.taps : r->hc.taps;
    most = r->vy.taps > most ? r->vy.taps : most;
    most = r->vc.taps > most ? r->vc.taps : most;
    double *wt = tbi_malloc(sizeof(double) * most);
    if (!wt) {
        tbi_resize_free(rp);
        return tbi_err(TB_ENOMEM, "out of memory");
    }
    for (int x = 0; x < out_w; x++) {
        int xo = flip ? out_w - 1 - x : x;
        axis_filter(cw, out_w, axis_taps(cw, out_w), xo, &r->hy.pos[x],
                    r->hy.coef + (size_t)x * r->hy.taps, wt);
    }
    /* chroma: one per pair of pixels (out_w is even), in output order */
    for (int j = 0; j < ncw; j++)
        axis_filter(cwc, ncw, axis_taps(cwc, ncw), flip ? ncw - 1 - j : j, &r->hc.pos[j],
                    r->hc.coef + (size_t)j * r->hc.taps, wt);
    for (int y = 0; y < out_h; y++) {
        axis_filter(ch, out_h, r->vy.taps, y, &r->vy.pos[y], r->vy.coef + (size_t)y * r->vy.taps,
                    wt);
        axis_filter(chc, out_h, r->vc.taps, y, &r->vc.pos[y],
                    r->vc.coef + (size_t)y * r->vc.taps, wt);
    }
    free(wt);
    swscale_path(r);
    lanes16(r);
    if (r->path != PATH_C) {
        axis_blocks(&r->hy);
        axis_blocks(&r->hc);
    }
    return 0;
}

void tbi_resize_free(struct tbi_resize **rs)
{
    if (!*rs)
        return;
    free((*rs)->mem);
    free(*rs);
    *rs = NULL;
}

/* ---- the passes -------------------------------------------------------------------------- */

/* t[0..n) = the rows src, src + ls, ... weighted by c, at FRAC fractional bits. */
#define INLINE static inline __attribute__((always_inline))

INLINE void vpass(int16_t *restrict t, int32_t *restrict acc, const uint8_t *src, ptrdiff_t ls, int n,
                  const int16_t *c, int taps)
{
    const int32_t c0 = c[0];
    for (int x = 0; x < n; x++)
        acc[x] = (1 << (13 - FRAC)) + c0 * src[x];
    for (int k = 1; k < taps; k++) {
        const uint8_t *s = src + k * ls;
        const int32_t ck = c[k];
        for (int x = 0; x < n; x++)
            acc[x] += ck * s[x];
    }
    for (int x = 0; x < n; x++)
        t[x] = (int16_t)(acc[x] >> (14 - FRAC));
}

/* Outputs [x0, x1) of a horizontal pass, the portable way. */
static void hpass_range(int16_t *out, const int16_t *t, const struct axis *a, int x0, int x1)
{
    for (int x = x0; x < x1; x++) {
        const int16_t *s = t + a->pos[x], *c = a->coef + (size_t)x * a->taps;
        int32_t sum = ONE / 2;
        for (int k = 0; k < a->taps; k++)
            sum += c[k] * s[k];
        out[x] = (int16_t)(sum >> 14);
    }
}

#if HAVE_X86_PATHS
AVX512 static void hpass_avx512(int16_t *out, const int16_t *t, const struct axis *a)
{
    const int pairs = a->taps / 2;
    const __m512i half = _mm512_set1_epi32(ONE / 2);
    for (int b = 0; b * LANES < a->n; b++) {
        int x0 = b * LANES;
        if (!a->fits[b]) {
            hpass_range(out, t, a, x0, a->n - x0 < LANES ? a->n : x0 + LANES);
            continue;
        }
        const int16_t *w = t + a->base[b];
        __m512i lo = _mm512_loadu_si512(w), hi = _mm512_loadu_si512(w + 32);
        const int16_t *ix = a->idx + (size_t)b * pairs * 2 * LANES;
        const int16_t *cf = a->bcoef + (size_t)b * pairs * 2 * LANES;
        __m512i sum = half;
        for (int p = 0; p < pairs; p++) {
            __m512i g = _mm512_permutex2var_epi16(lo, _mm512_load_si512(ix + p * 2 * LANES), hi);
            sum = _mm512_add_epi32(sum, _mm512_madd_epi16(g, _mm512_load_si512(cf + p * 2 * LANES)));
        }
        /* out has room for whole blocks */
        _mm256_storeu_si256((__m256i *)(out + x0), _mm512_cvtepi32_epi16(_mm512_srai_epi32(sum, 14)));
    }
}
#endif

static inline uint8_t clamp8(int32_t v)
{
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One output row from its Y values and the U, V values of its pairs of pixels (FRAC
 * fractional bits, rounded to 8 bits first, as swscale's vertical scaler does). */
INLINE void to_rgb(const struct tbi_resize *r, uint8_t *restrict dst, const int16_t *restrict y,
                   const int16_t *restrict u, const int16_t *restrict v, int n)
{
    const int32_t cy = r->cy, y0 = r->y0, k = r->k, crv = r->crv, cbu = r->cbu, cgu = r->cgu,
                  cgv = r->cgv;
    const int32_t orv = crv >> 9, obu = cbu >> 9, og = (cgu >> 9) + (cgv >> 9);
    const int half = r->truncate ? 0 : 1 << (FRAC - 1);
    for (int x = 0; x < n; x++) {
        int32_t yy = y0 + ((y[x] + half) >> FRAC), uu = (u[x / 2] + half) >> FRAC,
                vv = (v[x / 2] + half) >> FRAC;
        int32_t ir = yy + ((vv * crv) >> 16) - orv, ib = yy + ((uu * cbu) >> 16) - obu;
        int32_t ig = yy + ((uu * cgu) >> 16) + ((vv * cgv) >> 16) - og;
        dst[3 * x] = clamp8((ir * cy + k) >> 16);
        dst[3 * x + 1] = clamp8((ig * cy + k) >> 16);
        dst[3 * x + 2] = clamp8((ib * cy + k) >> 16);
    }
}

#if HAVE_X86_PATHS
/* vpass on AVX-512: 32 outputs a step, two rows' samples paired as 16-bit words against their
 * two coefficients (VPMADDWD), the sums repacked in order; tails masked. */
AVX512 static void vpass_avx512(int16_t *t, const uint8_t *src, ptrdiff_t ls, int n,
                                const int16_t *c, int taps)
{
    const __m512i zero = _mm512_setzero_si512();
    for (int x = 0; x < n; x += 32) {
        __mmask32 mk = n - x >= 32 ? 0xffffffffu : (1u << (n - x)) - 1;
        __m512i lo = _mm512_set1_epi32(1 << (13 - FRAC)), hi = lo;
        for (int k = 0; k < taps; k += 2) {
            __m512i a = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(mk, src + k * ls + x));
            __m512i b = zero;
            uint32_t pair = (uint16_t)c[k];
            if (k + 1 < taps) {
                b = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(mk, src + (k + 1) * ls + x));
                pair |= (uint32_t)(uint16_t)c[k + 1] << 16;
            }
            __m512i cc = _mm512_set1_epi32((int)pair);
            lo = _mm512_add_epi32(lo, _mm512_madd_epi16(_mm512_unpacklo_epi16(a, b), cc));
            hi = _mm512_add_epi32(hi, _mm512_madd_epi16(_mm512_unpackhi_epi16(a, b), cc));
        }
        __m512i r = _mm512_packs_epi32(_mm512_srai_epi32(lo, 14 - FRAC),
                                       _mm512_srai_epi32(hi, 14 - FRAC));
        _mm512_mask_storeu_epi16(t + x, mk, r);
    }
}

/* floor(a * c / 2^16) for 0 <= a < 2^15 and any 32-bit c = q * 2^16 + m (0 <= m < 2^16), in
 * 16-bit lanes: a * q + the high half of a * m (unsigned). */
AVX512 static inline __m512i mul_hi(__m512i a, __m512i q, __m512i m)
{
    return _mm512_add_epi16(_mm512_mullo_epi16(a, q), _mm512_mulhi_epu16(a, m));
}

/* floor((i * (2^16 + d) + k) / 2^16) for 0 <= i < 2^15, 0 <= d < 2^16 and k = kh * 2^16 +
 * 2^15 (matrix()'s gain): i + kh + the high half of i * d + the carry of its low half plus
 * 2^15; clamped to 0..255. */
AVX512 static inline __m512i gain(__m512i i, __m512i d, __m512i kh)
{
    __m512i v = _mm512_add_epi16(_mm512_add_epi16(i, kh), _mm512_mulhi_epu16(i, d));
    v = _mm512_add_epi16(v, _mm512_srli_epi16(_mm512_mullo_epi16(i, d), 15));
    return _mm512_min_epi16(_mm512_max_epi16(v, _mm512_setzero_si512()), _mm512_set1_epi16(255));
}

/* to_rgb on AVX-512: 32 pixels a step in 16-bit lanes, the same integers as to_rgb (all terms
 * non-negative where split, as the ranges in matrix() make them); each pair's chroma
 * duplicated by a permute; the pixels packed as 32-bit words r | g << 8 | b << 16 in order,
 * squeezed to 3 bytes within each 128-bit lane (VPSHUFB), the lanes' 12 bytes closed up
 * (VPCOMPRESSD in a register) and stored 48 bytes at a time. */
AVX512 static void to_rgb_avx512(const struct tbi_resize *r, uint8_t *dst, const int16_t *y,
                                 const int16_t *u, const int16_t *v, int n)
{
#define SET(x) _mm512_set1_epi16((short)(x))
    const __m512i half = SET(r->l16.half), y0 = SET(r->l16.y0), d = SET(r->l16.d);
    const __m512i kh = SET(r->l16.kh), orv = SET(r->l16.orv), obu = SET(r->l16.obu);
    const __m512i og = SET(r->l16.og);
    const __m512i qrv = SET(r->l16.q[0]), qbu = SET(r->l16.q[1]), qgu = SET(r->l16.q[2]);
    const __m512i qgv = SET(r->l16.q[3]), mrv = SET(r->l16.m[0]), mbu = SET(r->l16.m[1]);
    const __m512i mgu = SET(r->l16.m[2]), mgv = SET(r->l16.m[3]);
#undef SET
    /* chroma word j to pixels 2j and 2j + 1 */
    const __m512i dup = _mm512_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9,
                                         8, 8, 7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    /* pixels to the word slots whose unpacks give pixels 0-15 (lo) and 16-31 (hi) in order */
    const __m512i order = _mm512_set_epi16(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11,
                                           10, 9, 8, 23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17,
                                           16, 3, 2, 1, 0);
    const __m512i squeeze = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
    for (int x = 0; x < n; x += 32) {
        int m = n - x < 32 ? n - x : 32;
        __m512i yy = _mm512_loadu_si512(y + x);  /* the row buffers hold whole steps */
        __m512i uu = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(u + x / 2)));
        __m512i vv = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(v + x / 2)));
        yy = _mm512_add_epi16(y0, _mm512_srai_epi16(_mm512_add_epi16(yy, half), FRAC));
        uu = _mm512_srai_epi16(_mm512_add_epi16(_mm512_permutexvar_epi16(dup, uu), half), FRAC);
        vv = _mm512_srai_epi16(_mm512_add_epi16(_mm512_permutexvar_epi16(dup, vv), half), FRAC);
        __m512i ir = _mm512_sub_epi16(_mm512_add_epi16(yy, mul_hi(vv, qrv, mrv)), orv);
        __m512i ib = _mm512_sub_epi16(_mm512_add_epi16(yy, mul_hi(uu, qbu, mbu)), obu);
        __m512i ig = _mm512_sub_epi16(
            _mm512_add_epi16(_mm512_add_epi16(yy, mul_hi(uu, qgu, mgu)), mul_hi(vv, qgv, mgv)),
            og);
        __m512i rg = _mm512_or_si512(gain(ir, d, kh), _mm512_slli_epi16(gain(ig, d, kh), 8));
        __m512i b = gain(ib, d, kh);
        rg = _mm512_permutexvar_epi16(order, rg);
        b = _mm512_permutexvar_epi16(order, b);
        __m512i p0 = _mm512_shuffle_epi8(_mm512_unpacklo_epi16(rg, b), squeeze);
        __m512i p1 = _mm512_shuffle_epi8(_mm512_unpackhi_epi16(rg, b), squeeze);
        p0 = _mm512_maskz_compress_epi32(0x7777, p0);
        p1 = _mm512_maskz_compress_epi32(0x7777, p1);
        uint8_t *o = dst + 3 * x;
        if (m == 32) {
            _mm512_mask_storeu_epi32(o, 0x0fff, p0);
            _mm512_mask_storeu_epi32(o + 48, 0x0fff, p1);
        } else {
            int m0 = m < 16 ? m : 16, m1 = m - m0;
            _mm512_mask_storeu_epi8(o, ((__mmask64)1 << (3 * m0)) - 1, p0);
            if (m1 > 0)
                _mm512_mask_storeu_epi8(o + 48, ((__mmask64)1 << (3 * m1)) - 1, p1);
        }
    }
}
#endif

#if HAVE_X86_PATHS
/* The AVX2 twins: the same integers, 8 or 16 lanes, tails on the portable code. */

/* hpass: 8 outputs a step, each pair of taps fetched as one 32-bit word by a gather (no
 * window limit), summed by VPMADDWD against the AVX-512 tables' coefficient pairs. */
AVX2 static void hpass_avx2(int16_t *out, const int16_t *t, const struct axis *a)
{
    const int pairs = a->taps / 2;
    const __m256i half = _mm256_set1_epi32(ONE / 2);
    for (int x0 = 0; x0 < a->n; x0 += 8) {
        if (a->n - x0 < 8) {
            hpass_range(out, t, a, x0, a->n);
            break;
        }
        const __m256i pos = _mm256_loadu_si256((const __m256i *)(a->pos + x0));
        const int16_t *cf = a->bcoef + (size_t)(x0 / LANES) * pairs * 2 * LANES + x0 % LANES * 2;
        __m256i sum = half;
        for (int p = 0; p < pairs; p++) {
            __m256i g = _mm256_i32gather_epi32((const int *)(const void *)t,
                                               _mm256_add_epi32(pos, _mm256_set1_epi32(2 * p)), 2);
            __m256i c = _mm256_loadu_si256((const __m256i *)(cf + p * 2 * LANES));
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(g, c));
        }
        sum = _mm256_srai_epi32(sum, 14);
        __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        _mm_storeu_si128((__m128i *)(out + x0), w);
    }
}

/* vpass: 16 outputs a step, as vpass_avx512. */
AVX2 static void vpass_avx2(int16_t *t, int32_t *acc, const uint8_t *src, ptrdiff_t ls, int n,
                            const int16_t *c, int taps)
{
    int x = 0;
    for (; x + 16 <= n; x += 16) {
        __m256i lo = _mm256_set1_epi32(1 << (13 - FRAC)), hi = lo;
        for (int k = 0; k < taps; k += 2) {
            __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(src + k * ls + x)));
            __m256i b = _mm256_setzero_si256();
            uint32_t pair = (uint16_t)c[k];
            if (k + 1 < taps) {
                b = _mm256_cvtepu8_epi16(
                    _mm_loadu_si128((const __m128i *)(src + (k + 1) * ls + x)));
                pair |= (uint32_t)(uint16_t)c[k + 1] << 16;
            }
            __m256i cc = _mm256_set1_epi32((int)pair);
            lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), cc));
            hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), cc));
        }
        _mm256_storeu_si256((__m256i *)(t + x),
                            _mm256_packs_epi32(_mm256_srai_epi32(lo, 14 - FRAC),
                                               _mm256_srai_epi32(hi, 14 - FRAC)));
    }
    if (x < n)
        vpass(t + x, acc, src + x, ls, n - x, c, taps);
}

/* to_rgb: 16 pixels a step in 16-bit lanes, as to_rgb_avx512; each 128-bit lane's four
 * squeezed pixels stored as 8 + 4 bytes. */
AVX2 static void to_rgb_avx2(const struct tbi_resize *r, uint8_t *dst, const int16_t *y,
                             const int16_t *u, const int16_t *v, int n)
{
#define SET(x) _mm256_set1_epi16((short)(x))
    const __m256i half = SET(r->l16.half), y0 = SET(r->l16.y0), d = SET(r->l16.d);
    const __m256i kh = SET(r->l16.kh), orv = SET(r->l16.orv), obu = SET(r->l16.obu);
    const __m256i og = SET(r->l16.og);
    const __m256i qrv = SET(r->l16.q[0]), qbu = SET(r->l16.q[1]), qgu = SET(r->l16.q[2]);
    const __m256i qgv = SET(r->l16.q[3]), mrv = SET(r->l16.m[0]), mbu = SET(r->l16.m[1]);
    const __m256i mgu = SET(r->l16.m[2]), mgv = SET(r->l16.m[3]);
#undef SET
    const __m256i zero = _mm256_setzero_si256(), top = _mm256_set1_epi16(255);
#define MUL_HI(a, q, m) _mm256_add_epi16(_mm256_mullo_epi16(a, q), _mm256_mulhi_epu16(a, m))
#define GAIN(i) _mm256_min_epi16(_mm256_max_epi16(_mm256_add_epi16(_mm256_add_epi16( \
                    _mm256_add_epi16(i, kh), _mm256_mulhi_epu16(i, d)), \
                    _mm256_srli_epi16(_mm256_mullo_epi16(i, d), 15)), zero), top)
    const __m256i squeeze = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1,
                                             -1, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1,
                                             -1, -1);
    int x = 0;
    for (; x + 16 <= n; x += 16) {
        __m128i u8 = _mm_loadu_si128((const __m128i *)(u + x / 2));
        __m128i v8 = _mm_loadu_si128((const __m128i *)(v + x / 2));
        __m256i yy = _mm256_loadu_si256((const __m256i *)(y + x));
        __m256i uu = _mm256_set_m128i(_mm_unpackhi_epi16(u8, u8), _mm_unpacklo_epi16(u8, u8));
        __m256i vv = _mm256_set_m128i(_mm_unpackhi_epi16(v8, v8), _mm_unpacklo_epi16(v8, v8));
        yy = _mm256_add_epi16(y0, _mm256_srai_epi16(_mm256_add_epi16(yy, half), FRAC));
        uu = _mm256_srai_epi16(_mm256_add_epi16(uu, half), FRAC);
        vv = _mm256_srai_epi16(_mm256_add_epi16(vv, half), FRAC);
        __m256i ir = _mm256_sub_epi16(_mm256_add_epi16(yy, MUL_HI(vv, qrv, mrv)), orv);
        __m256i ib = _mm256_sub_epi16(_mm256_add_epi16(yy, MUL_HI(uu, qbu, mbu)), obu);
        __m256i ig = _mm256_sub_epi16(
            _mm256_add_epi16(_mm256_add_epi16(yy, MUL_HI(uu, qgu, mgu)), MUL_HI(vv, qgv, mgv)),
            og);
        __m256i rg = _mm256_or_si256(GAIN(ir), _mm256_slli_epi16(GAIN(ig), 8));
        __m256i b = GAIN(ib);
        /* lo: pixels 0-3 | 8-11, hi: 4-7 | 12-15 */
        __m256i lo = _mm256_shuffle_epi8(_mm256_unpacklo_epi16(rg, b), squeeze);
        __m256i hi = _mm256_shuffle_epi8(_mm256_unpackhi_epi16(rg, b), squeeze);
        __m128i q[4] = {_mm256_castsi256_si128(lo), _mm256_castsi256_si128(hi),
                        _mm256_extracti128_si256(lo, 1), _mm256_extracti128_si256(hi, 1)};
        uint8_t *o = dst + 3 * x;
        for (int i = 0; i < 4; i++) {
            _mm_storel_epi64((__m128i *)(o + 12 * i), q[i]);
            int32_t last = _mm_extract_epi32(q[i], 2);
            memcpy(o + 12 * i + 8, &last, 4);
        }
    }
#undef MUL_HI
#undef GAIN
    if (x < n)
        to_rgb(r, dst + 3 * x, y + x, u + x / 2, v + x / 2, n - x);
}
#endif

/* Every output row; compiled three ways (rows_v4 for AVX-512, with the gathering horizontal
 * pass and twice the lanes in the others; rows_avx2; rows_c, the build's baseline), as the CPU
 * kernels' elementwise loops are. */
INLINE void rows_body(const struct tbi_resize *r, const uint8_t *const src[3], const int ls[3],
                      uint8_t *dst, int path)
{
    int cwc = (r->cw + 1) / 2;
    const struct axis *vy = &r->vy, *vc = &r->vc;
    for (int y = 0; y < r->out_h; y++) {
        const uint8_t *sy = src[0] + (ptrdiff_t)vy->pos[y] * ls[0];
        const uint8_t *su = src[1] + (ptrdiff_t)vc->pos[y] * ls[1];
        const uint8_t *sv = src[2] + (ptrdiff_t)vc->pos[y] * ls[2];
        const int16_t *cy = vy->coef + (size_t)y * vy->taps, *cc = vc->coef + (size_t)y * vc->taps;
        uint8_t *d = dst + (size_t)y * r->out_w * 3;
#if HAVE_X86_PATHS
        if (path == PATH_AVX512) {
            vpass_avx512(r->ty, sy, ls[0], r->cw, cy, vy->taps);
            vpass_avx512(r->tu, su, ls[1], cwc, cc, vc->taps);
            vpass_avx512(r->tv, sv, ls[2], cwc, cc, vc->taps);
            hpass_avx512(r->ly, r->ty, &r->hy);
            hpass_avx512(r->lu, r->tu, &r->hc);
            hpass_avx512(r->lv, r->tv, &r->hc);
            to_rgb_avx512(r, d, r->ly, r->lu, r->lv, r->out_w);
            continue;
        }
        if (path == PATH_AVX2) {
            vpass_avx2(r->ty, r->acc, sy, ls[0], r->cw, cy, vy->taps);
            vpass_avx2(r->tu, r->acc, su, ls[1], cwc, cc, vc->taps);
            vpass_avx2(r->tv, r->acc, sv, ls[2], cwc, cc, vc->taps);
            hpass_avx2(r->ly, r->ty, &r->hy);
            hpass_avx2(r->lu, r->tu, &r->hc);
            hpass_avx2(r->lv, r->tv, &r->hc);
            to_rgb_avx2(r, d, r->ly, r->lu, r->lv, r->out_w);
            continue;
        }
#endif
        (void)path;
        vpass(r->ty, r->acc, sy, ls[0], r->cw, cy, vy->taps);
        vpass(r->tu, r->acc, su, ls[1], cwc, cc, vc->taps);
        vpass(r->tv, r->acc, sv, ls[2], cwc, cc, vc->taps);
        hpass_range(r->ly, r->ty, &r->hy, 0, r->hy.n);
        hpass_range(r->lu, r->tu, &r->hc, 0, r->hc.n);
        hpass_range(r->lv, r->tv, &r->hc, 0, r->hc.n);
        to_rgb(r, d, r->ly, r->lu, r->lv, r->out_w);
    }
}

#if HAVE_X86_PATHS && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("arch=x86-64-v4"))) static void rows_v4(const struct tbi_resize *r,
                                                              const uint8_t *const src[3],
                                                              const int ls[3], uint8_t *dst)
{
    rows_body(r, src, ls, dst, PATH_AVX512);
}
#elif HAVE_X86_PATHS
AVX512 static void rows_v4(const struct tbi_resize *r, const uint8_t *const src[3],
                           const int ls[3], uint8_t *dst)
{
    rows_body(r, src, ls, dst, PATH_AVX512);
}
#endif

#if HAVE_X86_PATHS
AVX2 static void rows_avx2(const struct tbi_resize *r, const uint8_t *const src[3],
                           const int ls[3], uint8_t *dst)
{
    rows_body(r, src, ls, dst, PATH_AVX2);
}
#endif

static void rows_c(const struct tbi_resize *r, const uint8_t *const src[3], const int ls[3],
                   uint8_t *dst)
{
    rows_body(r, src, ls, dst, PATH_C);
}

static void rows(const struct tbi_resize *r, const uint8_t *const src[3], const int ls[3],
                 uint8_t *dst)
{
#if HAVE_X86_PATHS
    if (r->path == PATH_AVX512) {
        rows_v4(r, src, ls, dst);
        return;
    }
    if (r->path == PATH_AVX2) {
        rows_avx2(r, src, ls, dst);
        return;
    }
#endif
    rows_c(r, src, ls, dst);
}

int tbi_resize_takes(int cw, int ch, int out_w, int out_h)
{
    return cw >= 8 && ch >= 8 && out_w > 0 && out_h > 0 && !(out_w & 1);
}

int tbi_resize_420_matrix(struct tbi_resize **rs, const uint8_t *const src[3], const int ls[3],
                          int cw, int ch, int full_range, const int *coef, int out_w, int out_h,
                          int flip, uint8_t *dst, int portable)
{
    if (!tbi_resize_takes(cw, ch, out_w, out_h))
        return tbi_err(TB_EINVAL, "cannot resize %dx%d to %dx%d here (odd width or under 8 "
                       "pixels)", cw, ch, out_w, out_h);
    int rc = build(rs, cw, ch, full_range, coef ? coef : sws_getCoefficients(SWS_CS_DEFAULT),
                   out_w, out_h, flip, portable);
    if (rc < 0)
        return rc;
    rows(*rs, src, ls, dst);
    return 0;
}

int tbi_resize_420(struct tbi_resize **rs, const uint8_t *const src[3], const int ls[3], int cw,
                   int ch, int full_range, int out_w, int out_h, int flip, uint8_t *dst,
                   int portable)
{
    return tbi_resize_420_matrix(rs, src, ls, cw, ch, full_range, NULL, out_w, out_h, flip, dst,
                                 portable);
}
