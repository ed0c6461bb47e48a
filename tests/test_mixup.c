/* tests/test_mixup.c - fine-tuning's batch augmentation draws (train.h) and the erasing op:
 * - tb_mix_draw: lambda's distribution is Beta(alpha, alpha) (mean and variance), cutmix takes
 *   switch_prob of the mixed batches and prob of the batches are mixed; each draw a function of
 *   (seed, epoch, batch, rank) alone; cutmix's lambda is its box's;
 * - tb_mix_targets: each row lam y(b) + (1 - lam) y(B-1-b) of smoothed one-hot rows;
 * - tb_erase_draw: boxes inside the frame with timm's area (0.02-1/3) and aspect (0.3-3.3)
 *   ranges up to rounding, erased with the probability asked, one box through a clip or one
 *   per frame, a clip's boxes its own whatever batch it is in;
 * - erase_boxes (the op) rewrites exactly the boxes' pixels with the stream's normals;
 * - tb_dropout_draw: the rate, the 1 / (1 - rate) scale, a clip's mask its own.
 * timm's formulas themselves (box, mixed batch, soft targets, loss, gradients) are checked
 * against PyTorch in tests/test_vit.c. */
#include "tb_test.h"
#include "tensor/backend.h"
#include "tubelet/rng.h"
#include "tubelet/train.h"

static void test_mix_draws(void)
{
    tbt_case = "mixup draws";
    enum { N = 20000 };
    struct tb_mix_opts o = {.mixup = 0.8, .cutmix = 1.0, .prob = 0.9, .switch_prob = 0.5};
    double sum[2] = {0}, sq[2] = {0};
    int count[2] = {0}, unmixed = 0;
    for (int i = 0; i < N; i++) {
        struct tb_mix a, b;
        tb_mix_draw(&a, &o, 3, 1, i, 0, 32, 48);
        tb_mix_draw(&b, &o, 3, 1, i, 0, 32, 48);
        CHECK(!memcmp(&a, &b, sizeof(a)));
        if (a.lam == 1 && !a.cutmix) {
            unmixed++;
            continue;
        }
        CHECK(a.lam >= 0 && a.lam <= 1);
        if (a.cutmix) {
            const int *x = a.box;
            CHECK(0 <= x[0] && x[0] <= x[1] && x[1] <= 32 && 0 <= x[2] && x[2] <= x[3] &&
                  x[3] <= 48);
            CHECK_NEAR(a.lam, 1 - (double)(x[1] - x[0]) * (x[3] - x[2]) / (32 * 48), 1e-6);
        }
        count[a.cutmix]++;
        sum[a.cutmix] += a.lam;
        sq[a.cutmix] += (double)a.lam * a.lam;
    }
    /* 10% unmixed, half of the rest cutmix (binomial: 4 sigma) */
    CHECK_NEAR(unmixed, 0.1 * N, 4 * sqrt(0.09 * N));
    CHECK_NEAR(count[1], 0.45 * N, 4 * sqrt(0.2475 * N));
    /* mixup's lambda: Beta(0.8, 0.8): mean 1/2, variance ab / ((a + b)^2 (a + b + 1)) */
    double mean = sum[0] / count[0], var = sq[0] / count[0] - mean * mean;
    double want_var = 0.64 / (2.56 * 2.6);
    CHECK_NEAR(mean, 0.5, 4 * sqrt(want_var / count[0]));
    CHECK_NEAR(var, want_var, 0.01);
    /* cutmix's (corrected) lambda keeps Beta(1, 1)'s mean of 1/2 up to the boxes' clipping at
     * the frame's edges, which only shrinks a box: its mean lies above */
    CHECK(sum[1] / count[1] > 0.5 && sum[1] / count[1] < 0.7);

    tbt_case = "mixup draws: keys";
    struct tb_mix a, b;
    int differ = 0;
    for (int i = 0; i < 50; i++) {
        tb_mix_draw(&a, &o, 3, 1, i, 0, 32, 48);
        tb_mix_draw(&b, &o, 3, 1, i, 1, 32, 48); /* another process */
        differ += memcmp(&a, &b, sizeof(a)) != 0;
        tb_mix_draw(&b, &o, 3, 2, i, 0, 32, 48); /* another epoch */
        differ += memcmp(&a, &b, sizeof(a)) != 0;
    }
    CHECK(differ > 80);
    struct tb_mix_opts off = {.prob = 1, .switch_prob = 0.5};
    tb_mix_draw(&a, &off, 3, 1, 0, 0, 32, 48);
    CHECK(a.lam == 1 && !a.cutmix);
    struct tb_mix_opts only_cut = {.cutmix = 1, .prob = 1, .switch_prob = 0};
    tb_mix_draw(&a, &only_cut, 3, 1, 0, 0, 32, 48);
    CHECK(a.cutmix); /* cutmix alone ignores the switch */
}

static void test_mix_targets(void)
{
    tbt_case = "soft targets";
    enum { B = 5, K = 7 };
    const int64_t labels[B] = {2, 6, 0, 2, 5};
    float t[B * K];
    const float lam = 0.3f;
    const double smoothing = 0.1;
    tb_mix_targets(t, labels, B, K, lam, smoothing);
    for (int b = 0; b < B; b++) {
        double row = 0;
        for (int k = 0; k < K; k++) {
            double y1 = (k == labels[b] ? 1 - smoothing : 0) + smoothing / K;
            double y2 = (k == labels[B - 1 - b] ? 1 - smoothing : 0) + smoothing / K;
            CHECK_NEAR(t[b * K + k], lam * y1 + (1 - lam) * y2, 1e-6);
            row += t[b * K + k];
        }
        CHECK_NEAR(row, 1, 1e-6);
    }
}

static void test_erase_draws(void)
{
    enum { B = 400, T = 4, H = 32, W = 48 };
    static int32_t boxes[B * T * 4], again[B * T * 4];
    static uint64_t streams[B], streams2[B];
    int64_t index[B], shifted[B];
    for (int b = 0; b < B; b++)
        index[b] = 10 + b, shifted[b] = 10 + (b + 7) % B;
    for (int mode = 0; mode < 2; mode++) {
        tbt_case = mode == TB_ERASE_CLIP ? "erasing draws: clip" : "erasing draws: frame";
        tb_erase_draw(boxes, streams, B, T, H, W, 0.25, (enum tb_erase_mode)mode, 9, 3, index);
        int erased = 0, frames = 0;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const int32_t *x = boxes + (b * T + t) * 4;
                if (mode == TB_ERASE_CLIP && t > 0)
                    CHECK(!memcmp(x, boxes + b * T * 4, 4 * sizeof(int32_t)));
                if (mode == TB_ERASE_CLIP && t > 0)
                    continue;
                frames++;
                if (x[0] < 0)
                    continue;
                erased++;
                int h = x[1] - x[0], w = x[3] - x[2];
                CHECK(x[0] >= 0 && x[1] <= H && x[2] >= 0 && x[3] <= W && h > 0 && w > 0);
                CHECK(h < H && w < W);
                /* sides rounded from sqrt(area * aspect): within half a pixel each */
                double area = (double)h * w / (H * W);
                CHECK(area >= 0.02 * 0.5 && area <= 1.0 / 3 * 1.6);
                CHECK((h + 0.5) / (w - 0.5 > 0.5 ? w - 0.5 : 0.5) >= 0.3 &&
                      (h - 0.5) / (w + 0.5) <= 1 / 0.3);
            }
        CHECK_NEAR(erased, 0.25 * frames, 4 * sqrt(0.1875 * frames));
        /* a clip's boxes and values are its own, wherever it sits in the batch */
        tb_erase_draw(again, streams2, B, T, H, W, 0.25, (enum tb_erase_mode)mode, 9, 3,
                      shifted);
        for (int b = 0; b < B; b++) {
            int at = (b + 7) % B;
            CHECK(!memcmp(again + b * T * 4, boxes + at * T * 4, T * 4 * sizeof(int32_t)));
            CHECK(streams2[b] == streams[at]);
        }
    }
}

/* The op: pixels outside the boxes untouched, inside the stream's normals in (t, c, y, x). */
static void test_erase_op(void)
{
    tbt_case = "erase_boxes";
    enum { B = 3, C = 3, T = 2, H = 8, W = 10 };
    tbi_backend *be = NULL;
    CHECK_EQ(tbi_backend_open(&be, "cpu"), 0);
    if (!be)
        return;
    size_t n = (size_t)B * C * T * H * W;
    float *host = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n), *dev = NULL;
    for (size_t i = 0; i < n; i++)
        host[i] = 1000.0f + (float)i; /* far from any normal draw */
    const int32_t boxes[B * T * 4] = {1, 4, 2, 7,  -1, 0, 0, 0,  0, 8, 0, 10,  0, 8, 0, 10,
                                      -1, 0, 0, 0, 3, 5, 9, 10};
    const uint64_t streams[B] = {5, 6, 7};
    CHECK_EQ(be->ops->alloc(be, sizeof(float) * n, (void **)&dev), 0);
    CHECK_EQ(be->ops->to_device(be, dev, host, sizeof(float) * n), 0);
    CHECK_EQ(be->ops->erase_boxes(be, dev, B, C, T, H, W, boxes, 42, streams), 0);
    CHECK_EQ(be->ops->to_host(be, got, dev, sizeof(float) * n), 0);
    for (int b = 0; b < B; b++) {
        tb_rng r;
        tb_rng_init(&r, 42, streams[b]);
        /* the boxes' pixels in the op's order, from one stream per clip */
        for (int t = 0; t < T; t++) {
            const int32_t *bx = boxes + (b * T + t) * 4;
            for (int c = 0; c < C; c++)
                for (int y = 0; y < H; y++)
                    for (int x = 0; x < W; x++) {
                        size_t i = ((((size_t)b * C + c) * T + t) * H + y) * W + x;
                        int in = bx[0] >= 0 && y >= bx[0] && y < bx[1] && x >= bx[2] && x < bx[3];
                        if (!in)
                            CHECK(got[i] == host[i]);
                    }
            if (bx[0] < 0)
                continue;
            for (int c = 0; c < C; c++)
                for (int y = bx[0]; y < bx[1]; y++)
                    for (int x = bx[2]; x < bx[3]; x++) {
                        size_t i = ((((size_t)b * C + c) * T + t) * H + y) * W + x;
                        CHECK(got[i] == (float)tb_rng_normal(&r));
                    }
        }
    }
    /* a box outside the frame is refused */
    const int32_t bad[B * T * 4] = {1, 9, 0, 1};
    CHECK(be->ops->erase_boxes(be, dev, 1, C, T, H, W, bad, 42, streams) < 0);
    be->ops->free(be, dev);
    tbi_backend_close(&be);
    free(host);
    free(got);
}

static void test_dropout_draws(void)
{
    tbt_case = "dropout draws";
    enum { B = 64, D = 100 };
    static float m1[B * D], m2[B * D];
    int64_t index[B], shifted[B];
    for (int b = 0; b < B; b++)
        index[b] = b, shifted[b] = (b + 5) % B;
    tb_dropout_draw(m1, B, D, 0.5, 1, 2, index);
    tb_dropout_draw(m2, B, D, 0.5, 1, 2, shifted);
    int zeros = 0;
    for (int i = 0; i < B * D; i++) {
        CHECK(m1[i] == 0 || m1[i] == 2.0f);
        zeros += m1[i] == 0;
    }
    CHECK_NEAR(zeros, 0.5 * B * D, 4 * sqrt(0.25 * B * D));
    for (int b = 0; b < B; b++)
        CHECK(!memcmp(m2 + b * D, m1 + ((b + 5) % B) * D, D * sizeof(float)));
    tb_dropout_draw(m2, B, D, 0.5, 1, 3, index); /* another epoch */
    CHECK(memcmp(m1, m2, sizeof(m1)) != 0);
}

int main(void)
{
    tbt_begin("mixup");
    test_mix_draws();
    test_mix_targets();
    test_erase_draws();
    test_erase_op();
    test_dropout_draws();
    TBT_EXIT();
}
