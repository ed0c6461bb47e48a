/* src/train/mixup.c - fine-tuning's batch augmentation draws (train.h): timm's Mixup (batch
 * mode) and its soft targets, timm's RandomErasing as VideoMAE applies it, and the head's
 * dropout masks; the model applies them (tb_vit_mix, tb_vit_erase, tb_vit_set_head_dropout,
 * tb_vit_run_soft). Every draw is keyed by the batch or the clip, never by a thread.
 * Semantics read from timm's data/mixup.py and data/random_erasing.py, and VideoMAE's
 * mixup.py (its cutmix box spans the frames) and random_erasing.py (cube: one box through
 * the clip, new noise in every frame). Tests: tests/test_mixup.c. */
#include <math.h>

#include "core/internal.h"
#include "tubelet/rng.h"
#include "tubelet/train.h"

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

void tb_mix_box(int box[4], float *lam_out, double lam, int cy, int cx, int H, int W)
{
    double ratio = sqrt(1 - lam);
    int cut_h = (int)(H * ratio), cut_w = (int)(W * ratio);
    box[0] = clampi(cy - cut_h / 2, 0, H);
    box[1] = clampi(cy + cut_h / 2, 0, H);
    box[2] = clampi(cx - cut_w / 2, 0, W);
    box[3] = clampi(cx + cut_w / 2, 0, W);
    *lam_out = (float)(1 - (double)(box[1] - box[0]) * (box[3] - box[2]) / ((double)H * W));
}

void tb_mix_draw(struct tb_mix *out, const struct tb_mix_opts *o, uint64_t seed, int64_t epoch,
                 int64_t batch, int rank, int H, int W)
{
    tb_rng r;
    tb_rng_init_for3(&r, seed, TB_RNG_MIXUP, (uint64_t)epoch, (uint64_t)batch, (uint64_t)rank);
    out->lam = 1;
    out->cutmix = 0;
    out->box[0] = out->box[1] = out->box[2] = out->box[3] = 0;
    if (!(o->mixup > 0 || o->cutmix > 0) || !(tb_rng_uniform(&r) < o->prob))
        return;
    int cut = o->cutmix > 0 && (!(o->mixup > 0) || tb_rng_uniform(&r) < o->switch_prob);
    double a = cut ? o->cutmix : o->mixup, lam = tb_rng_beta(&r, a, a);
    if (!cut) {
        out->lam = (float)lam;
        return;
    }
    int cy = (int)tb_rng_below(&r, (uint64_t)H), cx = (int)tb_rng_below(&r, (uint64_t)W);
    out->cutmix = 1;
    tb_mix_box(out->box, &out->lam, lam, cy, cx, H, W);
}

void tb_mix_targets(float *targets, const int64_t *labels, int B, int K, float lam,
                    double smoothing)
{
    float off = (float)(smoothing / K), on = (float)(1 - smoothing + smoothing / K);
    float rest = (float)(1.0 - (double)lam);
    for (int b = 0; b < B; b++) {
        float *t = targets + (size_t)b * K;
        for (int k = 0; k < K; k++) {
            float y1 = k == labels[b] ? on : off, y2 = k == labels[B - 1 - b] ? on : off;
            t[k] = y1 * lam + y2 * rest;
        }
    }
}

/* A box by RandomErasing (count 1; attempts: timm's _erase 10, VideoMAE's _erase_cube 100),
 * or none: y0 = -1. */
static void erase_box(int32_t *bx, tb_rng *r, int H, int W, double prob, int attempts)
{
    bx[0] = bx[1] = bx[2] = bx[3] = -1;
    if (tb_rng_uniform(r) > prob)
        return;
    double area = (double)H * W, lo = log(0.3), hi = log(1 / 0.3);
    for (int attempt = 0; attempt < attempts; attempt++) {
        double target = (0.02 + (1.0 / 3 - 0.02) * tb_rng_uniform(r)) * area;
        double aspect = exp(lo + (hi - lo) * tb_rng_uniform(r));
        int h = (int)nearbyint(sqrt(target * aspect)), w = (int)nearbyint(sqrt(target / aspect));
        if (w < W && h < H) {
            int top = (int)tb_rng_below(r, (uint64_t)(H - h + 1));
            int left = (int)tb_rng_below(r, (uint64_t)(W - w + 1));
            bx[0] = top, bx[1] = top + h, bx[2] = left, bx[3] = left + w;
            return;
        }
    }
}

void tb_erase_draw(int32_t *boxes, uint64_t *streams, int B, int T, int H, int W, double prob,
                   enum tb_erase_mode mode, uint64_t seed, int64_t epoch, const int64_t *index)
{
    for (int b = 0; b < B; b++) {
        tb_rng r;
        tb_rng_init_for3(&r, seed, TB_RNG_ERASE, (uint64_t)epoch, (uint64_t)index[b], 0);
        int32_t *clip = boxes + (size_t)b * T * 4;
        for (int t = 0; t < T; t++) {
            if (mode == TB_ERASE_CLIP && t > 0)
                for (int k = 0; k < 4; k++)
                    clip[t * 4 + k] = clip[k];
            else
                erase_box(clip + t * 4, &r, H, W, prob, mode == TB_ERASE_CLIP ? 100 : 10);
        }
        streams[b] = tb_rng_stream_for(TB_RNG_ERASE, (uint64_t)epoch, (uint64_t)index[b], 1);
    }
}

void tb_dropout_draw(float *mask, int B, int D, double rate, uint64_t seed, int64_t epoch,
                     const int64_t *index)
{
    float scale = rate < 1 ? (float)(1 / (1 - rate)) : 0;
    for (int b = 0; b < B; b++) {
        tb_rng r;
        tb_rng_init_for(&r, seed, TB_RNG_DROPOUT, (uint64_t)epoch, (uint64_t)index[b]);
        for (int d = 0; d < D; d++)
            mask[(size_t)b * D + d] = tb_rng_uniform(&r) < rate ? 0.0f : scale;
    }
}
