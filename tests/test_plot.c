/* tests/test_plot.c - `tubelet plot` drawn and decoded again (the ffmpeg tool to raw RGB):
 * - known curves (a loss with its highest and lowest points at chosen steps, a warmup then
 *   cosine learning rate, evaluations with a best epoch): each curve's extreme pixels, found by
 *   the curve's own colour inside the plot area that --json reports (and whose frame is checked
 *   to be drawn there), lie where the axis mapping puts those steps and values;
 * - evaluation lines at their epoch's end, with the steps per epoch inferred from step lines
 *   logged every 2 or every 3 steps;
 * - a real run's metrics (a tiny `tubelet train`): its loss extremes and warmup peak;
 * - a resumed run's repeated steps, an unfinished last line, a missing directory or file, an
 *   empty file, malformed lines (named by file and line) and a bad --out. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "tb_test.h"

enum { W = 1200, H = 900 };

struct panel {
    int left, right, top, bottom;
    double x_min, x_max, y_min, y_max;
};

/* The number after "key": at its first place in s from p on (NAN if absent before end). */
static double num_after(const char *p, const char *end, const char *key)
{
    char k[64];
    snprintf(k, sizeof(k), "\"%s\": ", key);
    const char *q = p ? strstr(p, k) : NULL;
    return q && (!end || q < end) ? strtod(q + strlen(k), NULL) : NAN;
}

/* The panel titled title in the --json report; 0, or -1 if there is none. */
static int find_panel(const char *json, const char *title, struct panel *p, const char **at)
{
    char k[96];
    snprintf(k, sizeof(k), "\"title\": \"%s\"", title);
    const char *q = json ? strstr(json, k) : NULL;
    if (!q)
        return -1;
    const char *end = strstr(q + 1, "\"title\": ");
    p->left = (int)num_after(q, end, "left");
    p->right = (int)num_after(q, end, "right");
    p->top = (int)num_after(q, end, "top");
    p->bottom = (int)num_after(q, end, "bottom");
    p->x_min = num_after(q, end, "x_min");
    p->x_max = num_after(q, end, "x_max");
    p->y_min = num_after(q, end, "y_min");
    p->y_max = num_after(q, end, "y_max");
    *at = q;
    return p->right > p->left && p->bottom > p->top ? 0 : -1;
}

/* The colour of the curve of key in the panel whose report starts at at; 0 or -1. */
static int curve_rgb(const char *at, const char *key, uint8_t rgb[3])
{
    char k[96];
    int r, g, b;
    snprintf(k, sizeof(k), "\"key\": \"%s\"", key);
    const char *end = strstr(at + 1, "\"title\": "), *q = strstr(at, k);
    if (!q || (end && q > end) || !(q = strstr(q, "\"rgb\": [")) ||
        sscanf(q + 8, "%d, %d, %d", &r, &g, &b) != 3)
        return -1;
    rgb[0] = (uint8_t)r;
    rgb[1] = (uint8_t)g;
    rgb[2] = (uint8_t)b;
    return 0;
}

static double pixel_x(const struct panel *p, double x)
{
    return p->left + (x - p->x_min) / (p->x_max - p->x_min) * (p->right - p->left);
}

static double pixel_y(const struct panel *p, double y)
{
    return p->bottom - (y - p->y_min) / (p->y_max - p->y_min) * (p->bottom - p->top);
}

/* The topmost (lowest = 0) or bottommost row of the plot area holding pixels of exactly rgb,
 * and the mean, least and greatest x of those pixels; y = -1 when there are none. */
struct extreme {
    int y, min_x, max_x;
    double mean_x;
};

static struct extreme find_extreme(const uint8_t *img, const struct panel *p, const uint8_t rgb[3],
                                   int lowest)
{
    struct extreme e = {-1, 0, 0, 0};
    for (int k = 0; k <= p->bottom - p->top && e.y < 0; k++) {
        int y = lowest ? p->bottom - k : p->top + k, n = 0;
        double sum = 0;
        for (int x = p->left; x <= p->right; x++) {
            if (memcmp(img + ((size_t)y * W + x) * 3, rgb, 3))
                continue;
            if (!n)
                e.min_x = x;
            e.max_x = x;
            sum += x;
            n++;
        }
        if (n) {
            e.y = y;
            e.mean_x = sum / n;
        }
    }
    return e;
}

/* The frame is drawn just outside the reported plot area: one colour, not the background. */
static void check_frame(const uint8_t *img, const struct panel *p)
{
    const uint8_t *ref = img + ((size_t)(p->top + 1) * W + p->left - 1) * 3;
    int bad = ref[0] == 255 && ref[1] == 255 && ref[2] == 255;
    for (int y = p->top; y <= p->bottom; y++)
        bad |= memcmp(img + ((size_t)y * W + p->left - 1) * 3, ref, 3) != 0 ||
               memcmp(img + ((size_t)y * W + p->right + 1) * 3, ref, 3) != 0;
    for (int x = p->left; x <= p->right; x++)
        bad |= memcmp(img + ((size_t)(p->bottom + 1) * W + x) * 3, ref, 3) != 0 ||
               memcmp(img + ((size_t)(p->top - 1) * W + x) * 3, ref, 3) != 0;
    CHECK_MSG(!bad, "no frame around the plot area %d..%d x %d..%d", p->left, p->right, p->top,
              p->bottom);
}

/* Decode a W x H PNG to RGB; NULL (after a failed check) if it is not one. */
static uint8_t *decode(const char *png)
{
    char raw[4300], *out = NULL;
    size_t len = 0;
    snprintf(raw, sizeof(raw), "%s.rgb", png);
    int rc = tbt_run(&out, 60, "ffmpeg -nostdin -v error -i %s -f rawvideo -pix_fmt rgb24 -y %s",
                     png, raw);
    CHECK_MSG(rc == 0, "ffmpeg could not decode %s: %s", png, out ? out : "");
    free(out);
    uint8_t *img = rc == 0 ? (uint8_t *)tbt_read(raw, &len) : NULL;
    if (img && len != (size_t)W * H * 3) {
        TBT_FAIL("%s decodes to %zu bytes, not %d x %d x 3", png, len, W, H);
        free(img);
        img = NULL;
    }
    return img;
}

/* Runs `tubelet plot dir --json` (plus extra flags); the report (stdout and stderr), or NULL
 * after a failed check. */
static char *plot_json(const char *dir, const char *extra)
{
    char *out = NULL;
    int rc = tbt_run(&out, 60, "%s plot %s --json %s", tbt_tubelet(), dir, extra);
    CHECK_MSG(rc == 0, "tubelet plot %s: exit %d: %s", dir, rc, out ? out : "");
    if (rc != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* The pixels of curve key in panel title lie at the steps and values of its extremes, the
 * highest point hi_x/hi_y and the lowest lo_x/lo_y: the mean x of the topmost (bottommost)
 * row within 2 px of the step's, that row within tol_y px of the value's; and the panel's
 * frame is drawn around the plot area reported. */
static void check_extremes(const uint8_t *img, const char *json, const char *title,
                           const char *key, double hi_x, double hi_y, double lo_x, double lo_y,
                           double tol_y)
{
    struct panel p;
    const char *at;
    uint8_t rgb[3];
    if (find_panel(json, title, &p, &at) < 0 || curve_rgb(at, key, rgb) < 0) {
        TBT_FAIL("no panel '%s' with curve '%s' in: %.800s", title, key, json ? json : "");
        return;
    }
    check_frame(img, &p);
    struct extreme top = find_extreme(img, &p, rgb, 0), bot = find_extreme(img, &p, rgb, 1);
    CHECK_MSG(top.y >= 0, "%s: no pixel of the curve's colour", key);
    if (top.y < 0)
        return;
    CHECK_NEAR(top.mean_x, pixel_x(&p, hi_x), 2);
    CHECK_NEAR(top.y, pixel_y(&p, hi_y), tol_y);
    CHECK_NEAR(bot.mean_x, pixel_x(&p, lo_x), 2);
    CHECK_NEAR(bot.y, pixel_y(&p, lo_y), tol_y);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Known curves over 5 epochs of 40 steps, logged every `every` steps. The loss is a decay with
 * a spike at step 60 and a dip at 162 (logged both every 2 and every 3 steps); the lr warms up to 1e-3 over 40 steps, then a cosine to
 * 0 at 200; top-1 peaks at epoch 3. Each extreme is found from the values as written. */
enum { PER_EPOCH = 40, EPOCHS = 5 };
static const double top1[EPOCHS] = {0.12, 0.31, 0.47, 0.40, 0.36};

static double loss_at(int s)
{
    return s == 60 ? 3.1 : s == 162 ? 0.35 : 1.2 + 0.8 * exp(-s / 60.0) + 0.05 * sin(s / 7.0);
}

static double lr_at(int s)
{
    const double pi = 3.14159265358979323846;
    if (s <= PER_EPOCH)
        return 1e-3 * s / PER_EPOCH;
    return 1e-3 * 0.5 * (1 + cos(pi * (s - PER_EPOCH) / (PER_EPOCH * (EPOCHS - 1))));
}

static void write_known(const char *dir, int every)
{
    char path[4300];
    tbt_run(NULL, 10, "mkdir -p %s", dir);
    snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    for (int s = 1; s <= PER_EPOCH * EPOCHS; s++) {
        int e = (s - 1) / PER_EPOCH;
        if (s % every == 0)
            fprintf(f, "{\"step\": %d, \"epoch\": %d, \"loss\": %.6f, \"lr\": %.6g, "
                    "\"grad_norm\": %.4f, \"clips_per_s\": %.2f, \"elapsed_s\": %.1f}\n", s, e + 1,
                    loss_at(s), lr_at(s), 1 + 0.3 * cos(s / 9.0), 40.0 + s % 5, 0.5 * s);
        if (s % PER_EPOCH == 0)
            fprintf(f, "{\"eval_epoch\": %d, \"top1\": %.4f, \"top5\": %.4f, \"val_loss\": "
                    "%.6f, \"items\": 60}\n", e + 1, top1[e], top1[e] + 0.3, 1.6 - 0.1 * e);
    }
    fclose(f);
}

/* The warmup's end: the leftmost pixel of the lr curve's top row (the cosine after it stays
 * within that row a while, so its mean would say nothing), and the cosine's end at the last
 * step. Logged every 3 steps the peak is the cosine's step 42, reached by a shallow rise from
 * 39, so this is for the curves logged every 2. */
static void check_lr(const uint8_t *img, const char *json)
{
    struct panel p;
    const char *at;
    uint8_t rgb[3];
    tbt_case = "known lr, warmup then cosine";
    if (find_panel(json, "learning rate", &p, &at) < 0 || curve_rgb(at, "lr", rgb) < 0) {
        TBT_FAIL("no learning rate panel in: %.600s", json);
        return;
    }
    struct extreme top = find_extreme(img, &p, rgb, 0), bot = find_extreme(img, &p, rgb, 1);
    CHECK_NEAR(top.min_x, pixel_x(&p, PER_EPOCH), 2);
    CHECK_NEAR(top.y, pixel_y(&p, lr_at(PER_EPOCH)), 2);
    CHECK_NEAR(bot.max_x, pixel_x(&p, PER_EPOCH * EPOCHS), 2);
}

static void known_curves(int every)
{
    char dir[4300], png[4400], extra[4500];
    snprintf(dir, sizeof(dir), "%s/known%d", tbt_dir(), every);
    snprintf(png, sizeof(png), "%s/p.png", dir);
    snprintf(extra, sizeof(extra), "--out %s", png);
    write_known(dir, every);
    char *json = plot_json(dir, extra);
    if (!json)
        return;
    CHECK_EQ(num_after(json, NULL, "steps"), PER_EPOCH * EPOCHS / every);
    CHECK_EQ(num_after(json, NULL, "evaluations"), EPOCHS);
    CHECK_EQ(num_after(json, NULL, "steps_per_epoch"), PER_EPOCH);
    uint8_t *img = decode(png);
    if (img) {
        int hi = 0, lo = 0, best = 0, worst = 0;
        for (int s = every; s <= PER_EPOCH * EPOCHS; s += every) {
            hi = !hi || loss_at(s) > loss_at(hi) ? s : hi;
            lo = !lo || loss_at(s) < loss_at(lo) ? s : lo;
        }
        for (int e = 1; e < EPOCHS; e++) {
            best = top1[e] > top1[best] ? e : best;
            worst = top1[e] < top1[worst] ? e : worst;
        }
        /* Curves are 3 px wide: the extreme row is a pixel off the value's; a marker (for an
         * evaluation) reaches 3 px past its point, and the rounding adds up to half a pixel. */
        tbt_case = every == 2 ? "known loss (logged every 2)" : "known loss (logged every 3)";
        check_extremes(img, json, "loss", "loss", hi, loss_at(hi), lo, loss_at(lo), 2);
        tbt_case = "known top-1, at the end of its epoch";
        check_extremes(img, json, "accuracy (evaluation)", "top1", (best + 1.0) * PER_EPOCH,
                       top1[best], (worst + 1.0) * PER_EPOCH, top1[worst], 4);
        if (every == 2)
            check_lr(img, json);
    }
    free(img);
    free(json);
}

/* step and loss of each step line of a real run's metrics.jsonl; how many. */
static int read_losses(const char *path, double *steps, double *losses, int max)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int n = 0;
    while (f && n < max && fgets(line, sizeof(line), f)) {
        double s = num_after(line, NULL, "step"), l = num_after(line, NULL, "loss");
        if (!isnan(s) && !isnan(l)) {
            steps[n] = s;
            losses[n++] = l;
        }
    }
    if (f)
        fclose(f);
    return n;
}

static void real_run(void)
{
    const char *t = tbt_tubelet(), *d = tbt_dir();
    char *out = NULL, run[4300], mpath[4400];
    snprintf(run, sizeof(run), "%s/run", d);
    snprintf(mpath, sizeof(mpath), "%s/metrics.jsonl", run);
    int rc = tbt_run(&out, 300, "%s synth --out %s/syn --videos 4 --seconds 20 --size 96x64 && "
                     "%s prep %s/syn/videos/*.mp4 --out %s/data --short-side 48 --preset veryfast "
                     "&& %s train --data %s/data --train %s/syn/annotations/EPIC_100_train.csv "
                     "--val %s/syn/annotations/EPIC_100_validation.csv --dim 32 --depth 2 "
                     "--heads 2 --patch 16 --tubelet 2 --frames 4 --size 32 --batch 4 "
                     "--workers 2 --flip false --log-every 1 --eval-every 2 --epochs 4 --out %s",
                     t, d, t, d, d, t, d, d, d, run);
    CHECK_MSG(rc == 0, "the run failed: %s", out ? out : "");
    free(out);
    if (rc != 0)
        return;
    static double steps[4096], losses[4096];
    int n = read_losses(mpath, steps, losses, 4096);
    CHECK_MSG(n > 4, "only %d steps logged", n);
    char *json = plot_json(run, "");
    char png[4400];
    snprintf(png, sizeof(png), "%s/plot.png", run);
    CHECK_MSG(tbt_exists(png), "%s: not written (the default --out)", png);
    uint8_t *img = json && n > 4 ? decode(png) : NULL;
    if (img) {
        struct panel p;
        const char *at;
        uint8_t rgb[3];
        int hi = 0, lo = 0;
        for (int i = 1; i < n; i++) {
            hi = losses[i] > losses[hi] ? i : hi;
            lo = losses[i] < losses[lo] ? i : lo;
        }
        CHECK_EQ(num_after(json, NULL, "steps"), n);
        if (find_panel(json, "loss", &p, &at) == 0 && curve_rgb(at, "loss", rgb) == 0) {
            struct extreme top = find_extreme(img, &p, rgb, 0), bot = find_extreme(img, &p, rgb, 1);
            /* A real loss may have a near tie: a step within a pixel row of the extreme's may
             * hold the extreme row instead. */
            int ok_hi = 0, ok_lo = 0;
            for (int i = 0; i < n; i++) {
                double px = pixel_x(&p, steps[i]), py = pixel_y(&p, losses[i]);
                ok_hi |= fabs(py - pixel_y(&p, losses[hi])) <= 1 && top.min_x <= px + 2 &&
                         top.max_x >= px - 2;
                ok_lo |= fabs(py - pixel_y(&p, losses[lo])) <= 1 && bot.min_x <= px + 2 &&
                         bot.max_x >= px - 2;
            }
            CHECK_MSG(ok_hi, "the highest loss pixels (x %d..%d) are not at step %.0f (x %.1f)",
                      top.min_x, top.max_x, steps[hi], pixel_x(&p, steps[hi]));
            CHECK_MSG(ok_lo, "the lowest loss pixels (x %d..%d) are not at step %.0f (x %.1f)",
                      bot.min_x, bot.max_x, steps[lo], pixel_x(&p, steps[lo]));
            CHECK_NEAR(top.y, pixel_y(&p, losses[hi]), 2);
            CHECK_NEAR(bot.y, pixel_y(&p, losses[lo]), 2);
            check_frame(img, &p);
        } else {
            TBT_FAIL("no loss panel in: %.600s", json ? json : "");
        }
        /* Evaluations after epochs 2 and 4 of 6 steps each (24 clips, batch 4). */
        CHECK_EQ(num_after(json, NULL, "evaluations"), 2);
        CHECK_EQ(num_after(json, NULL, "steps_per_epoch"), n / 4);
    }
    free(img);
    free(json);
}

static void bad_inputs(void)
{
    const char *t = tbt_tubelet();
    char *out = NULL, dir[4300], m[4400], png[4400];
    snprintf(dir, sizeof(dir), "%s/bad", tbt_dir());
    snprintf(m, sizeof(m), "%s/metrics.jsonl", dir);
    snprintf(png, sizeof(png), "%s/plot.png", dir);
    static const char good[] =
        "{\"step\": 1, \"epoch\": 1, \"loss\": 2.0, \"lr\": 0.001, \"grad_norm\": 1.0, "
        "\"clips_per_s\": 10.0, \"elapsed_s\": 1.0}\n"
        "{\"step\": 2, \"epoch\": 1, \"loss\": 1.5, \"lr\": 0.001, \"grad_norm\": 1.0, "
        "\"clips_per_s\": 10.0, \"elapsed_s\": 2.0}\n";
    char text[1024];

    tbt_case = "missing directory";
    int rc = tbt_run(&out, 30, "%s plot %s/nowhere", t, tbt_dir());
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "nowhere: No such file or directory");
    free(out);

    tbt_case = "no metrics.jsonl";
    tbt_run(NULL, 10, "mkdir -p %s", dir);
    rc = tbt_run(&out, 30, "%s plot %s", t, dir);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "metrics.jsonl: cannot open");
    free(out);

    /* Files that are errors: the contents (after the two good lines where asked) and the
     * message. */
    static const struct {
        const char *name;
        int after_good;
        const char *text, *message;
    } bad[] = {
        {"empty file", 0, "", "metrics.jsonl: no metrics in it (an empty file"},
        {"blank lines", 0, "\n  \n", "metrics.jsonl: no metrics in it (no complete line"},
        {"malformed line", 1, "{\"step\": 3, \"loss\": }\n",
         "metrics.jsonl:3:21: expected a number"},
        {"hexadecimal", 1, "{\"step\": 0x10}\n",
         "metrics.jsonl:3:10: not a finite decimal number"},
        {"trailing text", 1, "{\"step\": 3} trailing\n",
         "metrics.jsonl:3:13: text after the closing '}'"},
        {"a line of neither kind", 0, "{\"step\": 1, \"loss\": 2.0}\n{\"foo\": 1}\n",
         "metrics.jsonl:2: neither \"step\" nor \"eval_epoch\""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tbt_case = bad[i].name;
        snprintf(text, sizeof(text), "%s%s", bad[i].after_good ? good : "", bad[i].text);
        write_text(m, text);
        rc = tbt_run(&out, 30, "%s plot %s", t, dir);
        CHECK_EQ(rc, 1);
        CHECK_STR_HAS(out, bad[i].message);
        CHECK_MSG(!tbt_exists(png), "a plot was written for a bad file");
        free(out);
    }

    tbt_case = "bad --out";
    write_text(m, good);
    rc = tbt_run(&out, 30, "%s plot %s --out %s/p.jpg", t, dir, dir);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "expected a .png");
    free(out);

    tbt_case = "unfinished last line";
    snprintf(text, sizeof(text), "%s{\"step\": 3, \"lo", good);
    write_text(m, text);
    char *json = plot_json(dir, "");
    CHECK_STR_HAS(json, "metrics.jsonl:3: the last line is unfinished");
    CHECK_EQ(num_after(json, NULL, "unfinished_lines"), 1);
    CHECK_EQ(num_after(json, NULL, "steps"), 2);
    CHECK_MSG(tbt_exists(png), "no plot for a file whose last line is unfinished");
    free(json);

    tbt_case = "a resumed run's repeated steps";
    FILE *f = fopen(m, "w");
    for (int pass = 0; f && pass < 2; pass++)
        for (int s = pass ? 6 : 1; s <= 10; s++)
            fprintf(f, "{\"step\": %d, \"epoch\": 1, \"loss\": %.3f}\n", s, 3.0 - 0.1 * s - pass);
    if (f)
        fclose(f);
    json = plot_json(dir, "");
    CHECK_EQ(num_after(json, NULL, "steps"), 10);
    CHECK_EQ(num_after(json, NULL, "repeated_lines"), 5);
    CHECK_STR_HAS(json, "later ones are drawn");
    free(json);
}

int main(void)
{
    tbt_begin("plot");
    if (tbt_run(NULL, 30, "ffmpeg -version") != 0) {
        fprintf(stderr, "SKIP: no ffmpeg tool to decode the PNG\n");
        return TBT_SKIP;
    }
    known_curves(2);
    known_curves(3);
    bad_inputs();
    tbt_case = "a real run";
    real_run();
    TBT_EXIT();
}
