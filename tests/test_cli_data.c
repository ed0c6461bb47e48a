/* tests/test_cli_data.c - `tubelet peek` and `tubelet bench-load` on a small synthetic dataset:
 * the sheet decodes back (through the ffmpeg tool) to exactly the clips the dataset gives for
 * the samples it names, with text above each row; bench-load reports what it loaded (with
 * --every, descriptors and memory at intervals); bad flags and files are clear errors. */
#define _POSIX_C_SOURCE 200809L
#include "tb_test.h"
#include "tubelet/data.h"

int main(void)
{
    tbt_begin("cli_data");
    const char *d = tbt_dir(), *t = tbt_tubelet();
    char syn[4200], root[4200], ann[4400], sheet[4200], *out = NULL;
    snprintf(syn, sizeof(syn), "%s/syn", d);
    snprintf(root, sizeof(root), "%s/chunks", d);
    snprintf(ann, sizeof(ann), "%s/annotations/EPIC_100_train.csv", syn);
    snprintf(sheet, sizeof(sheet), "%s/sheet.png", d);
    int rc = tbt_run(&out, 300, "%s synth --out %s --videos 2 --seconds 20 --size 160x120 && "
                     "%s prep %s/videos/*.mp4 --out %s --short-side 96 --preset veryfast", t,
                     syn, t, syn, root);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);

    tbt_case = "peek";
    enum { N = 3, T = 4, S = 40 };
    rc = tbt_run(&out, 120, "%s peek --root %s --ann %s --out %s --clips %d --frames %d --size %d "
                 "--seed 7 --verbs %s/annotations/EPIC_100_verb_classes.csv", t, root, ann,
                 sheet, N, T, S, syn);
    CHECK_MSG(rc == 0, "%s", out);
    int64_t samples[N] = {0};
    const char *p = out ? strstr(out, "samples") : NULL;
    CHECK(p != NULL);
    char *q = p ? (char *)p + strlen("samples") : NULL;
    for (int i = 0; q && i < N; i++)
        samples[i] = strtoll(q, &q, 10);
    free(out);
    /* The layout of cmd_peek.c: margin 4, gap 2, two text lines of 2 * 7 + 3 px. */
    const int margin = 4, gap = 2, text_h = 2 * (7 * 2 + 3);
    int W = 2 * margin + T * S + (T - 1) * gap, row_h = text_h + S + 2 * gap;
    int H = 2 * margin + N * row_h;
    size_t len = 0;
    uint8_t *img = NULL;
    char raw[4300];
    snprintf(raw, sizeof(raw), "%s/sheet.rgb", d);
    rc = tbt_run(&out, 60, "ffmpeg -nostdin -v error -i %s -f rawvideo -pix_fmt rgb24 -y %s && "
                 "ffprobe -v error -show_entries stream=width,height -of csv=p=0 %s", sheet, raw,
                 sheet);
    char dims[64];
    snprintf(dims, sizeof(dims), "%d,%d", W, H);
    CHECK_STR_HAS(out, dims);
    free(out);
    img = (uint8_t *)tbt_read(raw, &len);
    CHECK_EQ(len, (size_t)W * H * 3);

    /* The same clips straight from the dataset, with peek's settings. */
    struct tb_annotations *a = NULL;
    struct tb_ann_opts ao = {.format = TB_ANN_EPIC, .skip_bad_rows = 1};
    CHECK_EQ(tb_ann_load(&a, ann, &ao), 0);
    struct tb_dataset_opts o = {
        .root = root, .ext = "mp4", .sampler = TB_SAMPLE_SEGMENTS, .n_frames = T, .train = 1,
        .n_views = 1, .width = S, .height = S,
        .crop = {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = 0.5, .scale_max = 1,
                 .ratio_min = 3.0 / 4, .ratio_max = 4.0 / 3, .flip = TB_FLIP_RANDOM},
    };
    tb_dataset *ds = NULL;
    tb_reader *r = NULL;
    CHECK_EQ(tb_dataset_open(&ds, a, &o), 0);
    CHECK_EQ(tb_reader_open(&r, NULL), 0);
    uint8_t clip[T * S * S * 3];
    for (int i = 0; img && len == (size_t)W * H * 3 && ds && i < N; i++) {
        CHECK_EQ(tb_dataset_get(ds, r, 7, 0, samples[i], clip, NULL), 0);
        int y0 = margin + i * row_h;
        for (int f = 0; f < T; f++) {
            int x0 = margin + f * (S + gap), same = 1;
            for (int y = 0; y < S; y++)
                same &= !memcmp(img + ((size_t)(y0 + text_h + gap + y) * W + x0) * 3,
                                clip + ((size_t)f * S * S + (size_t)y * S) * 3, (size_t)S * 3);
            CHECK_MSG(same, "row %d (sample %" PRId64 ") frame %d differs from the dataset's",
                      i, samples[i], f);
        }
        /* Text above the row: bright pixels on the dark background. */
        int bright = 0;
        for (int y = y0; y < y0 + text_h; y++)
            for (int x = 0; x < W; x++)
                bright += img[((size_t)y * W + x) * 3] > 200;
        CHECK_MSG(bright > 50, "row %d has no text", i);
    }
    free(img);
    tb_reader_close(&r);
    tb_dataset_close(&ds);
    tb_ann_free(&a);

    tbt_case = "bench-load";
    rc = tbt_run(&out, 300, "%s bench-load --root %s --ann %s --clips 40 --batch 8 --workers 2 "
                 "--size 64", t, root, ann);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "\"loader\": \"tubelet\"");
    const char *k = out ? strstr(out, "\"clips\": ") : NULL;
    CHECK_MSG(k && atoi(k + 9) >= 40 && atoi(k + 9) < 40 + 8, "%s", out); /* whole batches */
    CHECK_STR_HAS(out, "\"failures\": 0}");
    free(out);
    /* --every: the k-th line at the batch (of at most 8) that reaches 16 k clips, as many as
     * the run reaches; the descriptors' range in the summary */
    rc = tbt_run(&out, 300, "%s bench-load --root %s --ann %s --clips 40 --batch 8 --workers 2 "
                 "--size 64 --every 16", t, root, ann);
    CHECK_MSG(rc == 0, "%s", out);
    const char *last = out ? strstr(out, "{\"loader\"") : NULL;
    const char *total = last ? strstr(last, "\"clips\": ") : NULL;
    int lines = 0, in_place = 1;
    for (const char *at_line = out; at_line && (at_line = strstr(at_line, "{\"clips\": "));
         at_line++, lines++) {
        int at = atoi(at_line + 10), fds = atoi(strstr(at_line, "\"open_fds\": ") + 12);
        in_place &= at >= 16 * (lines + 1) && at < 16 * (lines + 1) + 8 && fds >= 3;
    }
    CHECK_MSG(total && lines == atoi(total + 9) / 16 && lines >= 2 && in_place, "%d lines: %s",
              lines, out);
    CHECK_STR_HAS(out, "\"open_fds_max\": ");
    free(out);

    tbt_case = "errors";
    rc = tbt_run(&out, 60, "%s peek --root %s --ann %s", t, root, ann);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "are required");
    free(out);
    rc = tbt_run(&out, 60, "%s bench-load --root %s --ann %s/nope.csv", t, root, d);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "nope.csv");
    free(out);
    rc = tbt_run(&out, 60, "%s bench-load --root %s --ann %s --format csv", t, root, ann);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "unknown --format 'csv'");
    free(out);
    TBT_EXIT();
}
