/* src/data/sample.c - frame samplers (see sample.h). Pure arithmetic on frame numbers.
 * Tests: tests/test_sample.c (against AVION's and VideoMAE's formulas). */
#include <math.h>
#include <string.h>

#include "core/internal.h"
#include "tubelet/data.h"
#include "tubelet/sample.h"

/* Segment i of n over [start, end), as AVION's get_frame_ids. */
static void segment(int64_t start, int64_t end, int n, int i, int64_t *lo, int64_t *hi)
{
    double len = (double)(end - start - 1) / n;
    *lo = (int64_t)nearbyint(len * i) + start;
    *hi = (int64_t)nearbyint(len * (i + 1)) + start;
    if (*hi > end)
        *hi = end;
}

int tb_sample_segments(int64_t start, int64_t end, int n, int jitter, tb_rng *rng, int64_t *out)
{
    if (n <= 0 || end <= start || (jitter && !rng))
        return tbi_err(TB_EINVAL, "cannot sample %d frames from [%lld, %lld)", n,
                       (long long)start, (long long)end);
    for (int i = 0; i < n; i++) {
        int64_t lo, hi;
        segment(start, end, n, i, &lo, &hi);
        out[i] = jitter ? lo + (int64_t)tb_rng_below(rng, (uint64_t)(hi - lo + 1))
                        : (lo + hi) / 2;
        /* end is exclusive: AVION's inclusive draw can touch it; stay inside the window. */
        if (out[i] >= end)
            out[i] = end - 1;
    }
    return 0;
}

int tb_sample_segments_view(int64_t start, int64_t end, int n, int view, int n_views,
                            int64_t *out)
{
    if (n <= 0 || end <= start || n_views <= 0 || view < 0 || view >= n_views)
        return tbi_err(TB_EINVAL, "cannot sample view %d of %d, %d frames from [%lld, %lld)",
                       view, n_views, n, (long long)start, (long long)end);
    for (int i = 0; i < n; i++) {
        int64_t lo, hi;
        segment(start, end, n, i, &lo, &hi);
        out[i] = n_views == 1 ? (lo + hi) / 2
                              : lo + (int64_t)floor((hi - lo) * (view + 0.5) / n_views);
        if (out[i] >= end)
            out[i] = end - 1;
    }
    return 0;
}

int tb_sample_dense(int64_t n_frames, int n, int stride, int view, int n_views, tb_rng *rng,
                    int64_t *out)
{
    if (n_frames <= 0 || n <= 0 || stride <= 0 || (view < 0 && !rng) ||
        (view >= 0 && (n_views <= 0 || view >= n_views)))
        return tbi_err(TB_EINVAL, "cannot sample %d frames at stride %d from %lld frames", n,
                       stride, (long long)n_frames);
    int64_t span = (int64_t)(n - 1) * stride + 1, room = n_frames - span, first = 0;
    if (room > 0) {
        if (view < 0)
            first = (int64_t)tb_rng_below(rng, (uint64_t)room + 1);
        else if (n_views == 1)
            first = room / 2;
        else
            first = (int64_t)floor((double)room * view / (n_views - 1) + 0.5);
    }
    for (int i = 0; i < n; i++) {
        int64_t f = first + (int64_t)i * stride;
        out[i] = f < n_frames ? f : n_frames - 1;
    }
    return 0;
}

int tb_sample_dense_jitter(int64_t n_frames, int n, int stride, int view, int n_views,
                          tb_rng *rng, int64_t *out)
{
    if (n_frames <= 0 || n <= 0 || stride <= 0 || (view < 0 && !rng) ||
        (view >= 0 && (n_views <= 0 || view >= n_views)))
        return tbi_err(TB_EINVAL, "cannot sample %d frames at stride %d from %lld frames", n,
                       stride, (long long)n_frames);
    /* np.random.randint(num_frames - (clip_length + 1) * clip_stride), when positive */
    int64_t room = n_frames - (int64_t)(n + 1) * stride, first = 0;
    if (room > 0) {
        if (view < 0)
            first = (int64_t)tb_rng_below(rng, (uint64_t)room);
        else if (n_views == 1)
            first = (room - 1) / 2;
        else
            first = (int64_t)floor((double)(room - 1) * view / (n_views - 1) + 0.5);
    }
    for (int i = 0; i < n; i++) {
        int64_t shift = view < 0 ? (int64_t)tb_rng_below(rng, (uint64_t)stride) : 0;
        out[i] = (first + (int64_t)i * stride + shift) % n_frames; /* frame_ids % num_frames */
    }
    return 0;
}

static const char *const sampler_names[TB_N_SAMPLERS] = {"segments", "dense", "dense-jitter"};

const char *tb_sampler_name(enum tb_sampler s)
{
    return (unsigned)s < TB_N_SAMPLERS ? sampler_names[s] : "?";
}

int tb_sampler_parse(const char *name, enum tb_sampler *out)
{
    for (int s = 0; s < TB_N_SAMPLERS; s++)
        if (!strcmp(name, sampler_names[s])) {
            *out = (enum tb_sampler)s;
            return 0;
        }
    return tbi_err(TB_EINVAL, "no sampler '%s' (segments, dense or dense-jitter)", name);
}

int64_t tb_sampler_span(enum tb_sampler s, int frames, int stride)
{
    return s == TB_SAMPLE_DENSE          ? (int64_t)(frames - 1) * stride + 1
           : s == TB_SAMPLE_DENSE_JITTER ? (int64_t)frames * stride
                                         : frames;
}

void tb_seconds_to_frames(double start_s, double end_s, int fps_num, int fps_den,
                          int64_t n_frames, int64_t *start, int64_t *end)
{
    double fps = (double)fps_num / fps_den, lim = (double)n_frames;
    double sf = nearbyint(start_s * fps), ef = ceil(end_s * fps - 1e-9);
    /* Clamped before the conversion: a time far past any video's end (a malformed
     * annotation's) does not fit an int64_t; NaN lands on 0. */
    int64_t s = !(sf > 0) ? 0 : sf >= lim ? n_frames : (int64_t)sf;
    int64_t e = !(ef > 0) ? 0 : ef >= lim ? n_frames : (int64_t)ef;
    if (s > e)
        s = e;
    *start = s;
    *end = e;
}
