/* tests/test_cli_data.c - `tubelet peek`, `tubelet bench-load` and `tubelet frames` on a small
 * synthetic dataset: the sheet decodes back (through the ffmpeg tool) to exactly the clips the
 * dataset gives for the samples it names, with text above each row; bench-load reports what it
 * loaded (with --every, descriptors and memory at intervals); frames and peek write the image
 * format --out names (PNG, JPEG, PPM, raw) and refuse others, peek reports only a sheet it
 * wrote; frames at native size equals ffmpeg (10-bit too); a rotated plain file is refused and
 * probe names its rotation; bad flags and files are clear errors. */
#define _POSIX_C_SOURCE 200809L
#include "tb_test.h"
#include "tubelet/data.h"
#include "tubelet/video.h"

/* Mean absolute difference of two buffers of n bytes. */
static double mean_abs_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += abs((int)a[i] - (int)b[i]);
    return n ? sum / (double)n : 0;
}

/* Decode an image with the ffmpeg tool into RGB24 (malloc'ed, *len bytes) and say its codec
 * and size ("mjpeg,96,108") in codec (may be NULL). */
static uint8_t *ffmpeg_rgb(const char *image, size_t *len, char *codec, size_t codec_size)
{
    char raw[4300], *out = NULL;
    snprintf(raw, sizeof(raw), "%s.decoded.rgb", image);
    int rc = tbt_run(&out, 60, "ffmpeg -nostdin -v error -i %s -f rawvideo -pix_fmt rgb24 -y %s "
                     "&& ffprobe -v error -show_entries stream=codec_name,width,height -of "
                     "csv=p=0 %s", image, raw, image);
    CHECK_MSG(rc == 0, "%s: %s", image, out);
    if (codec && out) {
        snprintf(codec, codec_size, "%s", out);
        codec[strcspn(codec, "\n")] = '\0';
    }
    free(out);
    *len = 0;
    return rc == 0 ? (uint8_t *)tbt_read(raw, len) : NULL;
}

/* frames and peek write the format --out names, refuse any other before decoding, and never
 * report a sheet they could not write; frames refuses a --size with one side 0. */
static void test_image_outputs(const char *root, const char *ann)
{
    const char *d = tbt_dir(), *t = tbt_tubelet();
    char video[4300], base[4300], *out = NULL;
    snprintf(video, sizeof(video), "%s/P01_01.mp4", root);
    snprintf(base, sizeof(base), "%s/img", d);

    tbt_case = "frames --out";
    /* Raw RGB24 for .rgb, .raw and no extension: the same bytes. */
    int rc = tbt_run(&out, 60, "%s frames %s --frames 0,25 --out %s.rgb && %s frames %s --frames "
                     "0,25 --out %s.raw && %s frames %s --frames 0,25 --out %s_noext && cmp "
                     "%s.rgb %s.raw && cmp %s.rgb %s_noext && echo same", t, video, base, t,
                     video, base, t, video, base, base, base, base, base);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "same");
    free(out);
    char path[4400];
    snprintf(path, sizeof(path), "%s.rgb", base);
    size_t raw_len = 0;
    uint8_t *raw = (uint8_t *)tbt_read(path, &raw_len);
    struct tb_video_index *idx = NULL;
    CHECK_EQ(tb_index_load(&idx, video), 0);
    int W = idx ? idx->width : 0, H = idx ? idx->height : 0;
    tb_index_free(&idx);
    CHECK_EQ(raw_len, (size_t)W * H * 3 * 2);
    /* PNG: the same pixels, stacked; JPEG (any case of .jpg / .jpeg): a JPEG of the stack,
     * close to them; PPM: two images. */
    static const char *const exts[] = {".png", ".jpg", ".JPEG", ".ppm"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s%s", base, exts[i]);
        rc = tbt_run(&out, 60, "%s frames %s --frames 0,25 --out %s", t, video, path);
        CHECK_MSG(rc == 0, "%s: %s", exts[i], out);
        free(out);
        size_t len = 0;
        char codec[128] = "", want[128];
        uint8_t *img = ffmpeg_rgb(path, &len, codec, sizeof(codec));
        const char *name = i == 0 ? "png" : i < 3 ? "mjpeg" : "ppm";
        snprintf(want, sizeof(want), "%s,%d,%d", name, W, i < 3 ? 2 * H : H);
        CHECK_MSG(!strcmp(codec, want), "%s: ffprobe says '%s', want '%s'", exts[i], codec, want);
        if (i == 0)
            CHECK_MSG(len == raw_len && raw && img && !memcmp(img, raw, len),
                      "the PNG's pixels differ from the raw frames");
        else if (i < 3)
            CHECK_MSG(len == raw_len && raw && img && mean_abs_diff(img, raw, len) < 2.0,
                      "%s: %zu bytes, mean difference %.2f from the raw frames", exts[i], len,
                      len == raw_len && raw && img ? mean_abs_diff(img, raw, len) : -1.0);
        else /* ffmpeg reads every image of a PPM file */
            CHECK_MSG(len == raw_len && raw && img && !memcmp(img, raw, len),
                      "the PPM's images differ from the raw frames");
        free(img);
    }
    free(raw);
    /* Any other extension is refused before decoding, naming it; nothing is written. */
    snprintf(path, sizeof(path), "%s.gif", base);
    rc = tbt_run(&out, 60, "%s frames %s --frames 0 --out %s", t, video, path);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "--out ");
    CHECK_STR_HAS(out, "img.gif: cannot write '.gif' images: name it .png, .jpg, .ppm");
    CHECK(!tbt_exists(path));
    free(out);
    tbt_case = "frames --size";
    static const char *const half_sizes[] = {"0x50", "50x0"};
    for (int i = 0; i < 2; i++) {
        rc = tbt_run(&out, 60, "%s frames %s --frames 0 --size %s --out %s.rgb", t, video,
                     half_sizes[i], base);
        CHECK_EQ(rc, 2);
        char want[128];
        snprintf(want, sizeof(want), "tubelet frames: --size %s: give both sides", half_sizes[i]);
        CHECK_STR_HAS(out, want);
        free(out);
    }

    tbt_case = "peek --out";
    /* A JPEG sheet, of the size the PNG has. */
    snprintf(path, sizeof(path), "%s/sheet.jpg", d);
    rc = tbt_run(&out, 120, "%s peek --data %s --ann %s --out %s --clips 2 --frames 2 --size 32",
                 t, root, ann, path);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "peek: ");
    free(out);
    const int margin = 4, gap = 2, text_h = 2 * (7 * 2 + 3);
    int sw = 2 * margin + 2 * 32 + gap, sh = 2 * margin + 2 * (text_h + 32 + 2 * gap);
    size_t len = 0;
    char codec[128] = "", want[128];
    free(ffmpeg_rgb(path, &len, codec, sizeof(codec)));
    snprintf(want, sizeof(want), "mjpeg,%d,%d", sw, sh);
    CHECK_MSG(!strcmp(codec, want), "ffprobe says '%s', want '%s'", codec, want);
    /* A name it cannot write, and a directory that is not there: an error, exit 1, and no
     * line saying a sheet was made. */
    static const char *const bad[] = {"sheet.gif", "no/such/dir/sheet.png"};
    static const char *const says[] = {"cannot write '.gif' images",
                                       "no/such/dir/sheet.png"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s", d, bad[i]);
        rc = tbt_run(&out, 120, "%s peek --data %s --ann %s --out %s --clips 2 --frames 2 "
                     "--size 32", t, root, ann, path);
        CHECK_MSG(rc == 1, "%s: exit %d: %s", bad[i], rc, out);
        CHECK_STR_HAS(out, "tubelet peek: ");
        CHECK_STR_HAS(out, says[i]);
        CHECK_MSG(out && !strstr(out, "samples"), "%s: a sheet is reported: %s", bad[i], out);
        CHECK(!tbt_exists(path));
        free(out);
    }
}

/* frames at a video's own size gives ffmpeg's -pix_fmt rgb24 bytes, also for a 10-bit HEVC
 * source (where the filter shapes the chroma and depth conversion); a rotated plain file is
 * refused with the way out, and probe names its rotation. */
static void test_native_size_and_rotation(void)
{
    const char *d = tbt_dir(), *t = tbt_tubelet();
    char *out = NULL;
    tbt_case = "frames at native size";
    int rc = tbt_run(&out, 120, "cd %s && ffmpeg -nostdin -v error -y -f lavfi -i "
                     "testsrc2=size=320x240:rate=30 -t 1 -c:v libx265 -pix_fmt yuv420p10le "
                     "-x265-params log-level=error ten.mp4 && ffmpeg -nostdin -v error -y -f "
                     "lavfi -i testsrc2=size=320x240:rate=30 -t 1 -c:v libx264 up.mp4 && "
                     "ffmpeg -nostdin -v error -y -i up.mp4 -c copy -metadata:s:v:0 rotate=90 "
                     "rot90.mp4", d);
    CHECK_MSG(rc == 0, "ffmpeg: %s", out);
    free(out);
    static const char *const sources[] = {"ten.mp4", "up.mp4"};
    for (int i = 0; i < 2; i++) {
        rc = tbt_run(&out, 120, "cd %s && %s frames %s --frames 3,17 --out n.rgb && ffmpeg "
                     "-nostdin -v error -i %s -vf 'select=eq(n\\,3)+eq(n\\,17)' -fps_mode "
                     "passthrough -f rawvideo -pix_fmt rgb24 -y ref.rgb && cmp n.rgb ref.rgb && "
                     "echo same", d, t, sources[i], sources[i]);
        CHECK_MSG(rc == 0, "%s: %s", sources[i], out);
        CHECK_STR_HAS(out, "same");
        free(out);
    }
    tbt_case = "rotated plain file";
    /* ffprobe gives the display matrix's turn anticlockwise; probe gives it clockwise. */
    rc = tbt_run(&out, 60, "cd %s && ffprobe -v error -show_entries stream_side_data=rotation "
                 "-of csv=p=0 rot90.mp4", d);
    int anticlockwise = out ? atoi(out) : 0;
    CHECK_MSG(rc == 0 && anticlockwise % 90 == 0 && anticlockwise % 360 != 0, "ffprobe: %s",
              out);
    free(out);
    int clockwise = ((-anticlockwise) % 360 + 360) % 360;
    char want[256];
    rc = tbt_run(&out, 60, "cd %s && %s probe rot90.mp4", d, t);
    CHECK_EQ(rc, 0);
    snprintf(want, sizeof(want), "\"rotation\": %d,", clockwise);
    CHECK_STR_HAS(out, want);
    free(out);
    rc = tbt_run(&out, 60, "cd %s && %s frames rot90.mp4 --frames 0 --out r.rgb", d, t);
    CHECK_EQ(rc, 1);
    snprintf(want, sizeof(want), "rot90.mp4: rotated video (%d degrees); run tubelet prep on it "
             "first", clockwise);
    CHECK_STR_HAS(out, want);
    free(out);
}

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
    rc = tbt_run(&out, 120, "%s peek --data %s --ann %s --out %s --clips %d --frames %d --size %d "
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
    rc = tbt_run(&out, 300, "%s bench-load --data %s --ann %s --clips 40 --batch 8 --workers 2 "
                 "--size 64", t, root, ann);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "\"loader\": \"tubelet\"");
    const char *k = out ? strstr(out, "\"clips\": ") : NULL;
    CHECK_MSG(k && atoi(k + 9) == 40, "%s", out); /* as many as asked, across epochs */
    CHECK_STR_HAS(out, "\"frames\": 4, "); /* w1's */
    CHECK_STR_HAS(out, "\"failures\": 0}");
    free(out);
    /* a count that is no whole number of batches; --frames over the workload's */
    rc = tbt_run(&out, 300, "%s bench-load --data %s --ann %s --clips 20 --batch 8 --workers 2 "
                 "--size 32 --frames 6", t, root, ann);
    CHECK_MSG(rc == 0, "%s", out);
    k = out ? strstr(out, "\"clips\": ") : NULL;
    CHECK_MSG(k && atoi(k + 9) == 20, "%s", out);
    CHECK_STR_HAS(out, "\"frames\": 6, ");
    free(out);
    /* --every: the k-th line at the batch (of at most 8) that reaches 16 k clips, as many as
     * the run reaches; the descriptors' range in the summary */
    rc = tbt_run(&out, 300, "%s bench-load --data %s --ann %s --clips 40 --batch 8 --workers 2 "
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
    /* a class list that does not read: refused naming its line, not silently skipped */
    char classes[4400];
    snprintf(classes, sizeof(classes), "%s/bad_classes.csv", d);
    FILE *cf = fopen(classes, "w");
    if (cf) {
        fprintf(cf, "id,key,instances\n0,take,[take]\n2,put,[put]\n");
        fclose(cf);
    }
    rc = tbt_run(&out, 60, "%s peek --data %s --ann %s --out %s/s.png --verbs %s", t, root, ann,
                 d, classes);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "bad_classes.csv:3: expected class id 1 (the classes in order), got '2'");
    free(out);
    rc = tbt_run(&out, 60, "%s peek --data %s --ann %s", t, root, ann);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "are required");
    free(out);
    rc = tbt_run(&out, 60, "%s bench-load --data %s --ann %s/nope.csv", t, root, d);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "nope.csv");
    free(out);
    rc = tbt_run(&out, 60, "%s bench-load --data %s --ann %s --format csv", t, root, ann);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "--format: 'csv' is none of epic|kinetics|narration");
    free(out);

    test_image_outputs(root, ann);
    test_native_size_and_rotation();
    TBT_EXIT();
}
