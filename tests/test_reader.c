/* tests/test_reader.c - the fused decode-crop reader.
 * - frame numbers: videos whose pixels spell their frame number (FFV1 and lossless H.264 with
 *   B-frames, plain and prepared into chunks with every kind of encoding prep writes) read back
 *   as exactly the frames asked for, in any order, with repeats, across chunk boundaries, just
 *   before keyframes, the last frame;
 * - against the ffmpeg tool (select=eq(n\,N), crop, scale flags=bilinear, hflip) on real videos
 *   and prepared chunks: crops identical, resized crops within mean abs difference 1;
 * - skipping non-reference frames changes nothing but the work;
 * - errors: past the end, a missing or damaged chunk, an index claiming more frames than the
 *   chunk holds: a negative code and a message naming file and frame, and the reader still
 *   works afterwards;
 * - 500 random clips (run under ASan by `make test`). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tb_test.h"
#include "tubelet/sample.h"
#include "tubelet/video.h"

#define NUM_W 128 /* frame-number videos: 16 blocks of 8 px, bit b in block b */
#define NUM_H 48

static char fnum_mkv[4200], fnum_mp4[4200], fnum_dir[4200];

/* The frame-number video prepared with each kind of encoding prep writes (besides fnum_dir's
 * default): all-intra, a short interval without B-frames, and AVION's (one keyframe per
 * chunk, x264's default tune). */
static const char *const fnum_encodings[][2] = {
    {"intra", "--gop 1"},
    {"short", "--gop 8 --no-bframes"},
    {"avion", "--gop 250 --tune none"},
};
#define N_ENCODINGS ((int)(sizeof(fnum_encodings) / sizeof(fnum_encodings[0])))
static char fnum_enc_dir[N_ENCODINGS][4400];

/* The frame number a frame-number video's RGB frame (w x h) spells. */
static int64_t spelled(const uint8_t *rgb, int w)
{
    int64_t v = 0;
    for (int b = 0; b < 16; b++) {
        const uint8_t *p = rgb + ((size_t)(NUM_H / 2) * w + (size_t)(8 * b + 4)) * 3;
        if (p[1] > 128)
            v |= (int64_t)1 << b;
    }
    return v;
}

static int make_fixtures(void)
{
    const char *d = tbt_dir();
    char *out = NULL;
    const char *src = "color=black:s=128x48:r=30:d=20,format=gray,"
                      "geq=lum=if(bitand(floor(N/pow(2\\,floor(X/8)))\\,1)\\,235\\,16)";
    snprintf(fnum_mkv, sizeof(fnum_mkv), "%s/fnum.mkv", d);
    snprintf(fnum_mp4, sizeof(fnum_mp4), "%s/fnum.mp4", d);
    int rc = tbt_run(&out, 120, "ffmpeg -nostdin -v error -y -f lavfi -i \"%s\" -c:v ffv1 %s",
                     src, fnum_mkv);
    CHECK_MSG(rc == 0, "ffmpeg: %s", out);
    free(out);
    /* Lossless H.264 with B-frames and a keyframe every 24 frames (x264 adds none). */
    rc = tbt_run(&out, 120, "ffmpeg -nostdin -v error -y -i %s -pix_fmt yuv420p -c:v libx264 "
                 "-qp 0 -bf 3 -g 24 -sc_threshold 0 %s", fnum_mkv, fnum_mp4);
    CHECK_MSG(rc == 0, "ffmpeg: %s", out);
    free(out);
    /* Prepared: 4 s chunks of 120 frames, lossless, keyframe every 25 frames, B-frames. */
    char root[4300];
    snprintf(root, sizeof(root), "%s/chunks", d);
    rc = tbt_run(&out, 300, "%s prep --out %s --chunk-seconds 4 --short-side 0 --crf 0 --gop 25 "
                 "--preset fast %s", tbt_tubelet(), root, fnum_mp4);
    CHECK_MSG(rc == 0, "prep: %s", out);
    free(out);
    snprintf(fnum_dir, sizeof(fnum_dir), "%s/fnum.mp4", root);
    for (int e = 0; e < N_ENCODINGS; e++) {
        rc = tbt_run(&out, 300, "%s prep --out %s_%s --chunk-seconds 4 --short-side 0 --crf 0 "
                     "--preset fast %s %s", tbt_tubelet(), root, fnum_encodings[e][0],
                     fnum_encodings[e][1], fnum_mp4);
        CHECK_MSG(rc == 0, "prep %s: %s", fnum_encodings[e][1], out);
        free(out);
        snprintf(fnum_enc_dir[e], sizeof(fnum_enc_dir[e]), "%s_%s/fnum.mp4", root,
                 fnum_encodings[e][0]);
    }
    return tbt_failures ? -1 : 0;
}

static const struct tb_crop_spec no_crop = {.mode = TB_CROP_NONE};

/* Read frames from video and check each output spells the number asked for. */
static void check_numbers(tb_reader *r, const char *video, const int64_t *frames, int n,
                          const char *what)
{
    uint8_t *rgb = malloc((size_t)n * NUM_W * NUM_H * 3);
    struct tb_clip_stats st;
    int rc = tb_reader_read(r, video, frames, n, &no_crop, NULL, NUM_W, NUM_H, rgb, &st);
    CHECK_MSG(rc == 0, "%s: %s: %s", video, what, tb_errmsg());
    for (int i = 0; rc == 0 && i < n; i++) {
        int64_t got = spelled(rgb + (size_t)i * NUM_W * NUM_H * 3, NUM_W);
        CHECK_MSG(got == frames[i], "%s: %s: slot %d asked frame %" PRId64 ", got %" PRId64,
                  video, what, i, frames[i], got);
    }
    free(rgb);
}

static void test_frame_numbers(void)
{
    tb_reader *r = NULL, *one = NULL;
    tbt_case = "frame numbers";
    CHECK_EQ(tb_reader_open(&r, NULL), 0);
    /* One open file: every change of chunk closes one and opens the next. */
    CHECK_EQ(tb_reader_open(&one, &(struct tb_reader_opts){.n_cached = 1}), 0);
    const char *videos[3 + N_ENCODINGS] = {fnum_mkv, fnum_mp4, fnum_dir};
    for (int e = 0; e < N_ENCODINGS; e++)
        videos[3 + e] = fnum_enc_dir[e];
    for (int v = 0; v < 3 + N_ENCODINGS; v++) {
        struct tb_video_info info;
        CHECK_EQ(tb_reader_info(r, videos[v], &info), 0);
        CHECK_EQ(info.n_frames, 600);
        CHECK_EQ(info.width, NUM_W);
        const int64_t cases[][8] = {
            {0, 1, 2, 3, 4, 5, 6, 7},             /* the start */
            {599, 598, 0, 300, 300, 300, 1, 599}, /* any order, repeats, the last frame */
            {117, 118, 119, 120, 121, 122, 239, 240}, /* chunk boundaries (120 per chunk) */
            {23, 24, 47, 48, 49, 71, 72, 95},     /* around keyframes of fnum.mp4 (every 24) */
            {24, 49, 74, 99, 124, 149, 174, 199}, /* just before keyframes of the chunks */
            {5, 560, 6, 561, 7, 562, 8, 563},     /* back and forth */
        };
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
            char what[64];
            snprintf(what, sizeof(what), "case %zu", c);
            check_numbers(r, videos[v], cases[c], 8, what);
            check_numbers(one, videos[v], cases[c], 8, what);
        }
        /* A long run of random clips in one reader: the decoder's position is reused. */
        tb_rng rng;
        tb_rng_init(&rng, 5, (uint64_t)v);
        for (int k = 0; k < 40; k++) {
            int64_t f[4];
            int64_t start = (int64_t)tb_rng_below(&rng, 540);
            tb_sample_segments(start, start + 60, 4, 1, &rng, f);
            check_numbers(r, videos[v], f, 4, "random clip");
            check_numbers(one, videos[v], f, 4, "random clip, one open file");
        }
    }
    tb_reader_close(&one);
    tb_reader_close(&r);
    tb_reader_close(&r); /* closing twice is harmless */
}

/* Frames decoded from the keyframe before each wanted frame (wants ascending, in one chunk),
 * going on without a seek where no keyframe lies between: the least a decoder can do on an
 * encoding without B-frames. */
static int64_t least_work(const struct tb_chunk_info *c, const int64_t *wants, int n)
{
    int64_t total = 0, next = -1;
    for (int i = 0; i < n; i++) {
        int64_t key = 0;
        for (int j = 0; j < c->n_keyframes; j++)
            if (c->keyframes[j] <= wants[i])
                key = c->keyframes[j];
        int64_t from = next >= 0 && next > key && next <= wants[i] ? next : key;
        if (next == wants[i] + 1)
            continue; /* a repeat */
        total += wants[i] - from + 1;
        next = wants[i] + 1;
    }
    return total;
}

/* On all-intra and short-interval chunks without B-frames the reader decodes only what the
 * wanted frames depend on, and a later clip of the same chunk reuses the open decoder. */
static void test_least_work(void)
{
    tb_reader *r = NULL;
    CHECK_EQ(tb_reader_open(&r, NULL), 0);
    for (int e = 0; e < 2; e++) { /* intra, short: without B-frames */
        tbt_case = fnum_encodings[e][1];
        struct tb_video_index *idx = NULL;
        CHECK_EQ(tb_index_load(&idx, fnum_enc_dir[e]), 0);
        if (!idx)
            continue;
        const int64_t clips[][4] = {{130, 145, 163, 178}, {121, 122, 150, 239}, {200, 201,
                                    201, 230}};
        for (int c = 0; c < 3; c++) {
            uint8_t *rgb = malloc((size_t)4 * NUM_W * NUM_H * 3);
            struct tb_clip_stats st;
            CHECK_EQ(tb_reader_read(r, fnum_enc_dir[e], clips[c], 4, &no_crop, NULL, NUM_W,
                                    NUM_H, rgb, &st), 0);
            int64_t rel[4];
            for (int i = 0; i < 4; i++)
                rel[i] = clips[c][i] - idx->chunks[1].start_frame;
            CHECK_EQ(st.n_decoded, least_work(&idx->chunks[1], rel, 4));
            CHECK_EQ(st.n_opens, c == 0); /* all three clips lie in chunk 1 */
            free(rgb);
        }
        if (e == 0) /* all-intra: every frame is a keyframe */
            CHECK_EQ(idx->chunks[1].n_keyframes, idx->chunks[1].n_frames);
        tb_index_free(&idx);
    }
    tb_reader_close(&r);
}

/* A raw H.264 stream (Annex B, no container) has no timestamps and no index to seek by: it is
 * read by counting frames from its start, and a file just opened is there without a seek. */
static void test_raw_stream(void)
{
    tbt_case = "raw H.264 stream";
    char raw[4300], *out = NULL;
    snprintf(raw, sizeof(raw), "%s/fnum.h264", tbt_dir());
    int rc = tbt_run(&out, 120, "ffmpeg -nostdin -v error -y -i %s -c copy -bsf:v "
                     "h264_mp4toannexb -f h264 %s", fnum_mp4, raw);
    CHECK_MSG(rc == 0, "ffmpeg: %s", out);
    free(out);
    tb_reader *r = NULL;
    struct tb_video_info info;
    CHECK_EQ(tb_reader_open(&r, NULL), 0);
    CHECK_EQ(tb_reader_info(r, raw, &info), 0);
    CHECK_EQ(info.n_frames, 600);
    const int64_t start[] = {0, 1, 2, 3}, ahead[] = {23, 24, 47, 300};
    check_numbers(r, raw, start, 4, "from the start");
    check_numbers(r, raw, ahead, 4, "further on");
    tb_reader_close(&r);
}

/* ---- against the ffmpeg tool ------------------------------------------------------------- */

/* The source file behind frames of a video: itself, or its chunks concatenated. */
static void ffmpeg_input(char *buf, size_t size, const char *video)
{
    struct tb_video_index *idx = NULL;
    if (tb_index_load(&idx, video) < 0) {
        tb_errclear();
        snprintf(buf, size, "-i '%s'", video);
        return;
    }
    char list[4300];
    snprintf(list, sizeof(list), "%s/concat.txt", tbt_dir());
    FILE *f = fopen(list, "w");
    for (int i = 0; i < idx->n_chunks; i++)
        fprintf(f, "file '%s/%s'\n", video, idx->chunks[i].file);
    fclose(f);
    snprintf(buf, size, "-f concat -safe 0 -i '%s'", list);
    tb_index_free(&idx);
}

/* Compare a clip from the reader with ffmpeg's select + filters; returns the mean abs
 * difference of the worst frame (or -1 on failure); *most (may be NULL) gets the largest
 * difference of a byte and *crop (may be NULL) the crop the reader reports. */
static double versus_ffmpeg_at(tb_reader *r, const char *video, const int64_t *frames, int n,
                               const struct tb_crop_spec *spec, tb_rng *rng, int out_w,
                               int out_h, const char *filters, int *most,
                               struct tb_crop *crop)
{
    size_t fb = (size_t)out_w * out_h * 3;
    uint8_t *ours = malloc(fb * (size_t)n);
    struct tb_clip_stats st;
    if (most)
        *most = -1;
    if (tb_reader_read(r, video, frames, n, spec, rng, out_w, out_h, ours, &st) < 0) {
        TBT_FAIL("%s: %s", video, tb_errmsg());
        free(ours);
        return -1;
    }
    if (crop)
        *crop = st.crop;
    /* ffmpeg gives the selected frames in ascending order, each once. */
    int64_t sorted[64];
    int n_sorted = 0;
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < n_sorted && sorted[k] < frames[i])
            k++;
        if (k < n_sorted && sorted[k] == frames[i])
            continue;
        memmove(sorted + k + 1, sorted + k, sizeof(*sorted) * (size_t)(n_sorted - k));
        sorted[k] = frames[i];
        n_sorted++;
    }
    char sel[4096] = "select=", in[8400], cmd[16384];
    for (int i = 0; i < n_sorted; i++)
        snprintf(sel + strlen(sel), sizeof(sel) - strlen(sel), "%seq(n\\,%" PRId64 ")",
                 i ? "+" : "", sorted[i]);
    ffmpeg_input(in, sizeof(in), video);
    snprintf(cmd, sizeof(cmd), "ffmpeg -nostdin -v error %s -vf \"%s%s%s\" -fps_mode passthrough "
             "-f rawvideo -pix_fmt rgb24 -", in, sel, filters[0] ? "," : "", filters);
    FILE *p = popen(cmd, "r");
    uint8_t *ref = malloc(fb * (size_t)n_sorted);
    size_t got = fread(ref, fb, (size_t)n_sorted, p);
    pclose(p);
    double worst = -1;
    if (got != (size_t)n_sorted) {
        TBT_FAIL("%s: ffmpeg gave %zu frames, want %d (%s)", video, got, n_sorted, cmd);
    } else {
        worst = 0;
        for (int i = 0; i < n; i++) {
            int k = 0;
            while (sorted[k] != frames[i])
                k++;
            double sum = 0;
            for (size_t j = 0; j < fb; j++) {
                int dj = abs((int)ours[(size_t)i * fb + j] - (int)ref[(size_t)k * fb + j]);
                sum += dj;
                if (most && dj > *most)
                    *most = dj;
            }
            if (sum / fb > worst)
                worst = sum / fb;
        }
    }
    free(ours);
    free(ref);
    return worst;
}

static double versus_ffmpeg(tb_reader *r, const char *video, const int64_t *frames, int n,
                            const struct tb_crop_spec *spec, int out_w, int out_h,
                            const char *filters)
{
    return versus_ffmpeg_at(r, video, frames, n, spec, NULL, out_w, out_h, filters, NULL, NULL);
}

static void test_versus_ffmpeg(const char *chunks_root)
{
    tb_reader *r = NULL;
    CHECK_EQ(tb_reader_open(&r, NULL), 0);
    const char *plain[] = {"vtest.avi", "Megamind.avi", "box.mp4", "cup.mp4"};
    char videos[13][4400];
    int n_videos = 0;
    for (int i = 0; i < 4; i++) {
        const char *p = tbt_opencv_video(plain[i]);
        if (p)
            snprintf(videos[n_videos++], 4400, "%s", p);
    }
    snprintf(videos[n_videos++], 4400, "%s/vtest.mp4", chunks_root);
    snprintf(videos[n_videos++], 4400, "%s/box.mp4", chunks_root);
    /* VP9 in WebM, HEVC, an MP4 starting at 2.5 s (an edit list) and a variable-rate one
     * (4 frames of every 10 dropped, their timestamps kept), made here. */
    static const char *const make[][2] = {
        {"vp9.webm", "-f lavfi -i testsrc2=size=320x240:rate=25 -t 4 -c:v libvpx-vp9 "
                     "-deadline realtime -b:v 400k -g 20"},
        {"hevc.mp4", "-f lavfi -i testsrc2=size=320x240:rate=24 -t 4 -c:v libx265 "
                     "-x265-params log-level=error:keyint=24"},
        {"offset.mp4", "-f lavfi -i testsrc2=size=320x240:rate=30 -t 4 -c:v libx264 -g 30 "
                       "-output_ts_offset 2.5"},
        {"vfr.mp4", "-f lavfi -i testsrc2=size=320x240:rate=30 -t 4 -vf "
                    "\"select=lt(mod(n\\,10)\\,6)\" -fps_mode vfr -c:v libx264 -g 15"},
    };
    for (int i = 0; i < 4; i++) {
        char *out = NULL;
        snprintf(videos[n_videos], 4400, "%s/%s", tbt_dir(), make[i][0]);
        int rc = tbt_run(&out, 120, "ffmpeg -nostdin -v error -y %s %s", make[i][1],
                         videos[n_videos]);
        CHECK_MSG(rc == 0, "ffmpeg: %s", out);
        free(out);
        n_videos += rc == 0;
    }
    for (int v = 0; v < n_videos; v++) {
        struct tb_video_info info;
        tbt_case = videos[v];
        if (tb_reader_info(r, videos[v], &info) < 0) {
            TBT_FAIL("%s: %s", videos[v], tb_errmsg());
            continue;
        }
        int64_t n = info.n_frames;
        int64_t frames[8] = {n - 1, 0, n / 2, n / 2 + 1, n / 3, n / 2, 7, n - 2};
        /* A crop at its own size: identical bytes (an odd corner moves onto the chroma grid,
         * as ffmpeg's crop filter moves it). */
        struct tb_crop_spec fixed = {.mode = TB_CROP_FIXED, .x = 13, .y = 7, .w = 160,
                                     .h = 120};
        double d = versus_ffmpeg(r, videos[v], frames, 8, &fixed, 160, 120,
                                 "crop=160:120:13:7");
        CHECK_MSG(d == 0, "%s: crop differs from ffmpeg's by %.3f", videos[v], d);
        /* Resized crop of an odd size, same scaler: mean abs difference <= 1. The corner
         * moves onto the chroma grid; the size stays, as ffmpeg's crop keeps it with exact=1. */
        fixed.w = 301;
        fixed.h = 203;
        d = versus_ffmpeg(r, videos[v], frames, 8, &fixed, 224, 224,
                          "crop=301:203:12:6:exact=1,scale=224:224:flags=bilinear");
        CHECK_MSG(d >= 0 && d <= 1, "%s: resized crop differs by %.3f", videos[v], d);
        /* Centre crop of the short side, resized, flipped. */
        struct tb_crop_spec center = {.mode = TB_CROP_CENTER, .flip = TB_FLIP_ALWAYS};
        d = versus_ffmpeg(r, videos[v], frames, 8, &center, 112, 112,
                          "crop=min(iw\\,ih):min(iw\\,ih),scale=112:112:flags=bilinear,hflip");
        CHECK_MSG(d >= 0 && d <= 1, "%s: flipped centre crop differs by %.3f", videos[v], d);
    }
    tb_reader_close(&r);
}

/* ---- odd sizes, every kind of chroma ----------------------------------------------------- */

/* Videos of odd widths or heights (ffmpeg's testsrc: hard edges in every plane) in the pixel
 * formats, codecs and colour matrices (BT.709, BT.2020, full range) users bring. lw, lh: the format's chroma subsampling (log2). own: 8-bit
 * 4:2:0, which the bilinear resize sends through the reader's own code where the CPU has
 * AVX2 or AVX-512; that follows swscale to 0.1 per byte (test_resize), not to the byte. pre:
 * ffmpeg's filters before a crop (its crop takes no packed 4:2:2: the tool would otherwise
 * convert the whole frame to RGB first and crop that). */
static const struct odd_video {
    const char *file, *size, *pix_fmt, *codec;
    int lw, lh, own;
    const char *pre;
} odd_videos[] = {
    {"odd420.mkv", "321x177", "yuv420p", "-c:v ffv1", 1, 1, 1},
    {"odd420.mp4", "177x321", "yuv420p", "-c:v mpeg4 -q:v 2", 1, 1, 1},
    {"odd422.mkv", "177x321", "yuv422p", "-c:v ffv1", 1, 0, 0},
    {"odd422w.mkv", "321x177", "yuv422p", "-c:v ffv1", 1, 0, 0},
    {"odd420p10.mkv", "321x177", "yuv420p10le", "-c:v ffv1", 1, 1, 0},
    {"oddj420.avi", "321x177", "yuvj420p", "-c:v mjpeg -q:v 3", 1, 1, 1},
    /* other subsamplings, depths, layouts and codecs */
    {"odd444.mkv", "323x181", "yuv444p", "-c:v ffv1", 0, 0, 0},
    {"oddgray.mkv", "321x177", "gray", "-c:v ffv1", 0, 0, 0},
    {"odd440.mkv", "177x321", "yuv440p", "-c:v ffv1", 0, 1, 0},
    {"odd410.mkv", "323x181", "yuv410p", "-c:v ffv1", 2, 2, 0},
    {"odd422p10.mkv", "177x321", "yuv422p10le", "-c:v ffv1", 1, 0, 0},
    {"oddnv12.nut", "321x177", "nv12", "-c:v rawvideo", 1, 1, 0},
    {"oddvp9.webm", "321x177", "yuv420p", "-c:v libvpx-vp9 -deadline realtime -b:v 1M", 1, 1, 1},
    {"oddw.mkv", "321x240", "yuv420p", "-c:v ffv1", 1, 1, 1},
    {"oddh.mkv", "320x177", "yuv420p", "-c:v ffv1", 1, 1, 1},
    {"oddyuyv.avi", "321x177", "yuyv422", "-c:v rawvideo", 1, 0, 0, "format=yuv422p,"},
    {"odduyvy.nut", "177x321", "uyvy422", "-c:v rawvideo", 1, 0, 0, "format=yuv422p,"},
    /* the matrix and range the file states, as ffmpeg converts with them */
    {"odd709.mkv", "321x177", "yuv420p", "-c:v ffv1 -colorspace bt709", 1, 1, 1},
    {"odd709pc.mkv", "177x321", "yuv420p", "-c:v ffv1 -colorspace bt709 -color_range pc", 1, 1,
     1},
    {"odd2020.mkv", "321x177", "yuv420p10le", "-c:v ffv1 -colorspace bt2020nc", 1, 1, 0},
    {"odd240m.mkv", "177x321", "yuv422p", "-c:v ffv1 -colorspace smpte240m", 1, 0, 0},
};

/* mean (worst frame) and largest byte difference within what the path allows: none, or 0.1
 * per byte on the reader's own resize */
static void check_close(double mean, int most, int own, const char *video, const char *what)
{
    if (own)
        CHECK_MSG(mean >= 0 && mean <= 0.1, "%s: %s differs from ffmpeg's by %.3f per byte",
                  video, what, mean);
    else
        CHECK_MSG(most == 0, "%s: %s differs from ffmpeg's by up to %d (mean %.3f)", video,
                  what, most, mean);
}

/* One odd-sized video against the ffmpeg tool: the whole frame at its own size (also through
 * `tubelet frames`), crops inside it (their corner moved onto the chroma grid, their size
 * kept), flipped, resized, and random resized crops at the place the reader reports. */
static void check_odd(tb_reader *r, const struct odd_video *o, const char *path, int k)
{
    int W, H, most;
    sscanf(o->size, "%dx%d", &W, &H);
    struct tb_video_info info;
    if (tb_reader_info(r, path, &info) < 0) {
        TBT_FAIL("%s: %s", path, tb_errmsg());
        return;
    }
    CHECK_EQ(info.width, W);
    CHECK_EQ(info.height, H);
    const int64_t frames[3] = {24, 3, 10};
    int mw = (1 << o->lw) - 1, mh = (1 << o->lh) - 1;
    char f[256], *out = NULL;
    double d = versus_ffmpeg_at(r, path, frames, 3, &no_crop, NULL, W, H, "", &most, NULL);
    CHECK_MSG(most == 0, "%s: the whole frame differs from ffmpeg's by up to %d (mean %.3f)",
              o->file, most, d);
    /* The command docs/FORMATS.md gives, byte for byte. */
    int rc = tbt_run(&out, 60, "%s frames '%s' --frames 3,10,24 --out %s/odd.raw && ffmpeg "
                     "-nostdin -v error -i '%s' -vf 'select=eq(n\\,3)+eq(n\\,10)+eq(n\\,24)' "
                     "-fps_mode passthrough -f rawvideo -pix_fmt rgb24 - | cmp - %s/odd.raw && "
                     "echo same", tbt_tubelet(), path, tbt_dir(), path, tbt_dir());
    CHECK_MSG(rc == 0 && strstr(out, "same"), "tubelet frames %s: %s", o->file, out);
    free(out);

    struct tb_crop_spec fixed = {.mode = TB_CROP_FIXED, .x = 13, .y = 7, .w = (W - 40) | 1,
                                 .h = (H - 30) | 1};
    struct tb_crop got;
    int gx = fixed.x & ~mw, gy = fixed.y & ~mh;
    const char *pre = o->pre ? o->pre : "";
    snprintf(f, sizeof(f), "%scrop=%d:%d:%d:%d:exact=1", pre, fixed.w, fixed.h, gx, gy);
    d = versus_ffmpeg_at(r, path, frames, 3, &fixed, NULL, fixed.w, fixed.h, f, &most, &got);
    check_close(d, most, 0, o->file, f);
    CHECK_MSG(got.x == gx && got.y == gy && got.w == fixed.w && got.h == fixed.h,
              "%s: the reader reports the crop %dx%d at (%d,%d), it cut %dx%d at (%d,%d)",
              o->file, got.w, got.h, got.x, got.y, fixed.w, fixed.h, gx, gy);
    fixed.flip = TB_FLIP_ALWAYS;
    snprintf(f, sizeof(f), "%scrop=%d:%d:%d:%d:exact=1,format=rgb24,hflip", pre, fixed.w,
             fixed.h, gx, gy);
    d = versus_ffmpeg_at(r, path, frames, 3, &fixed, NULL, fixed.w, fixed.h, f, &most, NULL);
    check_close(d, most, 0, o->file, f);

    d = versus_ffmpeg_at(r, path, frames, 3, &no_crop, NULL, 160, 90,
                         "scale=160:90:flags=bilinear", &most, NULL);
    check_close(d, most, o->own, o->file, "the whole frame resized to 160x90");
    struct tb_crop_spec center = {.mode = TB_CROP_CENTER, .flip = TB_FLIP_ALWAYS};
    int side = W < H ? W : H;
    snprintf(f, sizeof(f), "%scrop=%d:%d:%d:%d:exact=1,scale=112:112:flags=bilinear,"
             "format=rgb24,hflip", pre, side, side, ((W - side) / 2) & ~mw,
             ((H - side) / 2) & ~mh);
    d = versus_ffmpeg_at(r, path, frames, 3, &center, NULL, 112, 112, f, &most, NULL);
    check_close(d, most, o->own, o->file, f);

    struct tb_crop_spec rrc = {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = 0.2,
                               .scale_max = 1, .ratio_min = 0.75, .ratio_max = 4.0 / 3};
    for (int s = 0; s < 3; s++) {
        tb_rng rng, draw;
        tb_rng_init(&rng, 21, (uint64_t)(k * 3 + s));
        draw = rng;
        struct tb_crop c;
        CHECK_EQ(tb_crop_draw(&rrc, W, H, 96, 96, &draw, &c), 0);
        c.x &= ~mw;
        c.y &= ~mh;
        snprintf(f, sizeof(f), "%scrop=%d:%d:%d:%d:exact=1,scale=96:96:flags=bilinear", pre,
                 c.w, c.h, c.x, c.y);
        d = versus_ffmpeg_at(r, path, frames, 3, &rrc, &rng, 96, 96, f, &most, &got);
        check_close(d, most, o->own, o->file, f);
        CHECK(got.x == c.x && got.y == c.y && got.w == c.w && got.h == c.h);
    }
}

static void test_odd_sizes(void)
{
    tb_reader *r = NULL;
    CHECK_EQ(tb_reader_open(&r, NULL), 0);
    for (int i = 0; i < (int)(sizeof(odd_videos) / sizeof(odd_videos[0])); i++) {
        const struct odd_video *o = &odd_videos[i];
        char path[4400], *out = NULL;
        snprintf(path, sizeof(path), "%s/%s", tbt_dir(), o->file);
        tbt_case = o->file;
        int rc = tbt_run(&out, 120, "ffmpeg -nostdin -v error -y -f lavfi -i testsrc=size=%s:"
                         "rate=25 -t 1 -pix_fmt %s %s '%s'", o->size, o->pix_fmt, o->codec,
                         path);
        CHECK_MSG(rc == 0, "ffmpeg: %s", out);
        free(out);
        if (rc == 0)
            check_odd(r, o, path, i);
    }
    tb_reader_close(&r);
}

/* Skipping unwanted non-reference frames must not change a single pixel. */
static void test_skipping(const char *video)
{
    tbt_case = "skipping non-reference frames";
    tb_reader *fast = NULL, *full = NULL;
    struct tb_reader_opts all = {.decode_all = 1};
    CHECK_EQ(tb_reader_open(&fast, NULL), 0);
    CHECK_EQ(tb_reader_open(&full, &all), 0);
    struct tb_video_info info;
    CHECK_EQ(tb_reader_info(fast, video, &info), 0);
    struct tb_crop_spec rrc = {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = 0.25,
                               .scale_max = 1, .ratio_min = 0.75, .ratio_max = 4.0 / 3,
                               .flip = TB_FLIP_RANDOM};
    size_t fb = 96 * 96 * 3;
    uint8_t *a = malloc(fb * 16), *b = malloc(fb * 16);
    int64_t skipped = 0, decoded_fast = 0, decoded_full = 0;
    for (int k = 0; k < 30; k++) {
        tb_rng r1, r2, pick;
        int64_t f[16];
        tb_rng_init(&pick, 9, (uint64_t)k);
        int64_t start = (int64_t)tb_rng_below(&pick, (uint64_t)(info.n_frames - 90));
        tb_sample_segments(start, start + 90, 16, 1, &pick, f);
        tb_rng_init(&r1, 3, (uint64_t)k);
        tb_rng_init(&r2, 3, (uint64_t)k);
        struct tb_clip_stats s1, s2;
        CHECK_EQ(tb_reader_read(fast, video, f, 16, &rrc, &r1, 96, 96, a, &s1), 0);
        CHECK_EQ(tb_reader_read(full, video, f, 16, &rrc, &r2, 96, 96, b, &s2), 0);
        CHECK(!memcmp(a, b, fb * 16));
        CHECK(s1.crop.x == s2.crop.x && s1.crop.w == s2.crop.w && s1.crop.flip == s2.crop.flip);
        skipped += s1.n_skipped;
        decoded_fast += s1.n_decoded;
        decoded_full += s2.n_decoded;
        CHECK_EQ(s2.n_skipped, 0);
    }
    CHECK_MSG(skipped > 0 && decoded_fast < decoded_full, "skipped %" PRId64 ", decoded %" PRId64
              " vs %" PRId64, skipped, decoded_fast, decoded_full);
    free(a);
    free(b);
    tb_reader_close(&fast);
    tb_reader_close(&full);
}

/* ---- errors ------------------------------------------------------------------------------ */

static void copy_dir(const char *from, const char *to)
{
    tbt_run(NULL, 30, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
}

static void test_errors(void)
{
    tb_reader *r = NULL;
    uint8_t *rgb = malloc((size_t)8 * NUM_W * NUM_H * 3);
    char dir[4400], path[4500];
    int rc;
    CHECK_EQ(tb_reader_open(&r, NULL), 0);

    tbt_case = "past the end";
    int64_t past[2] = {5, 600};
    rc = tb_reader_read(r, fnum_dir, past, 2, &no_crop, NULL, NUM_W, NUM_H, rgb, NULL);
    CHECK_EQ(rc, TB_ERANGE);
    CHECK_STR_HAS(tb_errmsg(), "fnum.mp4: frame 600 is past the end (the video has 600 frames)");
    int64_t neg[1] = {-1};
    CHECK_EQ(tb_reader_read(r, fnum_mkv, neg, 1, &no_crop, NULL, NUM_W, NUM_H, rgb, NULL),
             TB_ERANGE);
    int64_t ok[3] = {1, 2, 3};
    check_numbers(r, fnum_dir, ok, 3, "after an error");

    tbt_case = "missing video";
    snprintf(path, sizeof(path), "%s/nope.mp4", tbt_dir());
    rc = tb_reader_read(r, path, ok, 3, &no_crop, NULL, NUM_W, NUM_H, rgb, NULL);
    CHECK(rc == TB_ENOENT || rc == TB_EIO);
    CHECK_STR_HAS(tb_errmsg(), "nope.mp4");

    tbt_case = "missing chunk";
    snprintf(dir, sizeof(dir), "%s/missing.mp4", tbt_dir());
    copy_dir(fnum_dir, dir);
    snprintf(path, sizeof(path), "%s/8.mp4", dir);
    unlink(path);
    int64_t in_chunk2[2] = {250, 260};
    rc = tb_reader_read(r, dir, in_chunk2, 2, &no_crop, NULL, NUM_W, NUM_H, rgb, NULL);
    CHECK_EQ(rc, TB_ENOENT);
    CHECK_STR_HAS(tb_errmsg(), "missing.mp4/8.mp4: chunk file is missing");
    check_numbers(r, dir, ok, 3, "other chunks still read");

    tbt_case = "truncated chunk";
    snprintf(dir, sizeof(dir), "%s/cut.mp4", tbt_dir());
    copy_dir(fnum_dir, dir);
    tbt_run(NULL, 10, "cd '%s' && head -c $(( $(stat -c %%s 8.mp4) / 2 )) 8.mp4 > t && mv t 8.mp4",
            dir);
    rc = tb_reader_read(r, dir, in_chunk2, 2, &no_crop, NULL, NUM_W, NUM_H, rgb, NULL);
    CHECK_MSG(rc < 0, "reading a truncated chunk succeeded");
    CHECK_STR_HAS(tb_errmsg(), "cut.mp4/8.mp4");

    tbt_case = "damaged chunk";
    snprintf(dir, sizeof(dir), "%s/noise.mp4", tbt_dir());
    copy_dir(fnum_dir, dir);
    /* Garbage over the middle of the chunk's media data (the index at its end survives). */
    char chunk[4400];
    snprintf(chunk, sizeof(chunk), "%s/8.mp4", dir);
    struct stat st;
    CHECK_EQ(stat(chunk, &st), 0);
    CHECK_EQ(tbt_write_noise(chunk, (long)st.st_size / 4, 400, 8), 0);
    int64_t late[4] = {262, 275, 280, 289};
    rc = tb_reader_read(r, dir, late, 4, &no_crop, NULL, NUM_W, NUM_H, rgb, NULL);
    if (rc == 0) {
        /* The damage may miss every frame it took: then they must be the right frames. */
        for (int i = 0; i < 4; i++)
            CHECK_EQ(spelled(rgb + (size_t)i * NUM_W * NUM_H * 3, NUM_W), late[i]);
    } else {
        /* Either the container or a frame is broken; the message says which file. */
        CHECK_STR_HAS(tb_errmsg(), "noise.mp4/8.mp4");
        fprintf(stderr, "damaged chunk: %s\n", tb_errmsg());
    }
    int64_t early[2] = {10, 20};
    check_numbers(r, dir, early, 2, "undamaged chunk after a damaged one");

    tbt_case = "index claims more frames";
    snprintf(dir, sizeof(dir), "%s/claims.mp4", tbt_dir());
    copy_dir(fnum_dir, dir);
    tbt_run(NULL, 10, "cd '%s' && sed -i 's/^frames 600$/frames 610/; "
            "s/^\\(chunk 4 .*\\) frames=120 /\\1 frames=120 /' video.idx && "
            "sed -i '/^chunks /s/.*/chunks 6/' video.idx && "
            "printf 'chunk 5 file=20.mp4 start_frame=600 frames=10 bytes=1\\nkeyframes 0\\n' >> "
            "video.idx && cp 16.mp4 20.mp4 && "
            "head -c 2000 16.mp4 > 20.mp4", dir);
    int64_t beyond[1] = {605};
    rc = tb_reader_read(r, dir, beyond, 1, &no_crop, NULL, NUM_W, NUM_H, rgb, NULL);
    CHECK_MSG(rc < 0, "a frame the chunk does not hold was read");
    CHECK_STR_HAS(tb_errmsg(), "claims.mp4/20.mp4");
    /* A chunk whose file holds fewer frames than its index says. */
    tbt_run(NULL, 10, "cd '%s' && sed -i '/^chunk 5/d; /^chunks /s/.*/chunks 5/; "
            "s/^frames 610$/frames 600/' video.idx && sed -i '$d' video.idx && "
            "head -c $(( $(stat -c %%s 16.mp4) * 9 / 10 )) 16.mp4 > t && cp 16.mp4 full && "
            "ffmpeg -nostdin -v error -y -i full -frames:v 100 -c copy 16.mp4", dir);
    int64_t tail[1] = {595};
    rc = tb_reader_read(r, dir, tail, 1, &no_crop, NULL, NUM_W, NUM_H, rgb, NULL);
    CHECK_MSG(rc < 0, "frame 595 of a 100-frame chunk was read");
    CHECK_STR_HAS(tb_errmsg(), "claims.mp4/16.mp4: frame 595");
    free(rgb);
    tb_reader_close(&r);
}

/* ---- many clips -------------------------------------------------------------------------- */

static void test_many_clips(const char *chunks_root)
{
    tbt_case = "500 clips";
    tb_reader *r = NULL;
    CHECK_EQ(tb_reader_open(&r, NULL), 0);
    char videos[3][4400];
    snprintf(videos[0], 4400, "%s/vtest.mp4", chunks_root);
    snprintf(videos[1], 4400, "%s/box.mp4", chunks_root);
    snprintf(videos[2], 4400, "%s", fnum_dir);
    struct tb_crop_spec rrc = {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = 0.08,
                               .scale_max = 1, .ratio_min = 0.75, .ratio_max = 4.0 / 3,
                               .flip = TB_FLIP_RANDOM};
    uint8_t *rgb = malloc((size_t)16 * 112 * 112 * 3);
    int failures = 0;
    for (int k = 0; k < 500; k++) {
        tb_rng rng;
        tb_rng_init(&rng, 11, (uint64_t)k);
        const char *v = videos[k % 3];
        struct tb_video_info info;
        if (tb_reader_info(r, v, &info) < 0) {
            failures++;
            continue;
        }
        int n = k % 2 ? 16 : 4, span = k % 2 ? 90 : 60;
        int64_t f[16], start = (int64_t)tb_rng_below(&rng, (uint64_t)(info.n_frames - span));
        tb_sample_segments(start, start + span, n, 1, &rng, f);
        if (tb_reader_read(r, v, f, n, &rrc, &rng, 112, 112, rgb, NULL) < 0) {
            TBT_FAIL("clip %d of %s: %s", k, v, tb_errmsg());
            failures++;
        }
    }
    CHECK_EQ(failures, 0);
    free(rgb);
    tb_reader_close(&r);
}

/* ---- tubelet frames ---------------------------------------------------------------------- */

static void test_frames_cli(void)
{
    tbt_case = "tubelet frames";
    char out_png[4300], out_raw[4300], *out = NULL;
    snprintf(out_png, sizeof(out_png), "%s/f.png", tbt_dir());
    snprintf(out_raw, sizeof(out_raw), "%s/f.raw", tbt_dir());
    int rc = tbt_run(&out, 60, "%s frames %s --frames 7,130-132,599 --out %s", tbt_tubelet(),
                     fnum_dir, out_raw);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    size_t len = 0;
    uint8_t *raw = (uint8_t *)tbt_read(out_raw, &len);
    CHECK_EQ(len, 5 * NUM_W * NUM_H * 3);
    const int64_t want[5] = {7, 130, 131, 132, 599};
    for (int i = 0; raw && i < 5; i++)
        CHECK_EQ(spelled(raw + (size_t)i * NUM_W * NUM_H * 3, NUM_W), want[i]);
    free(raw);
    /* The PNG holds the same pixels, stacked. */
    rc = tbt_run(&out, 60, "%s frames %s --frames 7,130-132,599 --out %s && ffmpeg -nostdin -v "
                 "error -i %s -f rawvideo -pix_fmt rgb24 - | cmp - %s && echo same", tbt_tubelet(),
                 fnum_dir, out_png, out_png, out_raw);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "same");
    free(out);
    rc = tbt_run(&out, 60, "%s frames %s --frames 600 --out %s", tbt_tubelet(), fnum_dir,
                 out_raw);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "frame 600 is past the end");
    free(out);
    rc = tbt_run(&out, 60, "%s frames %s --frames 3,x --out %s", tbt_tubelet(), fnum_dir,
                 out_raw);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "--frames: cannot read '3,x'");
    free(out);
}

int main(void)
{
    tbt_begin("reader");
    if (make_fixtures() < 0)
        return 1;
    test_frame_numbers();
    test_least_work();
    test_raw_stream();
    test_errors();
    test_frames_cli();
    test_odd_sizes();
    /* Real videos prepared with default settings (B-frames, keyframe interval). */
    char root[4300], list[8192] = "", *out = NULL;
    snprintf(root, sizeof(root), "%s/real", tbt_dir());
    const char *vt = tbt_opencv_video("vtest.avi"), *box = tbt_opencv_video("box.mp4");
    if (!vt || !box) {
        fprintf(stderr, "opencv-doc videos are missing (scripts/setup.sh installs them)\n");
        return tbt_failures ? 1 : TBT_SKIP;
    }
    snprintf(list, sizeof(list), "%s %s", vt, box);
    int rc = tbt_run(&out, 600, "%s prep --out %s --chunk-seconds 5 --jobs 2 %s", tbt_tubelet(),
                     root, list);
    CHECK_MSG(rc == 0, "prep: %s", out);
    free(out);
    test_versus_ffmpeg(root);
    char vtest_dir[4400];
    snprintf(vtest_dir, sizeof(vtest_dir), "%s/vtest.mp4", root);
    test_skipping(vtest_dir);
    test_many_clips(root);
    TBT_EXIT();
}
