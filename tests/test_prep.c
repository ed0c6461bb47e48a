/* tests/test_prep.c - tubelet prep and probe against the ffmpeg tool, on real videos nobody here
 * made (Debian's opencv-doc), synth output and odd sources made here with ffmpeg (rotated, VP9,
 * HEVC, start offset, variable rate, odd sizes, RGB, full range).
 * - lossless chunks (--crf 0) equal, byte for byte, ffmpeg's own -vf fps,scale of the source:
 *   every frame, so every chunk boundary;
 * - default (lossy) chunks: frame counts, per-chunk counts and keyframes as ffprobe sees them,
 *   and boundary frames matching the right source frame, not a neighbour;
 * - --fps source: 25, 30000/1001, 24 fps and a variable-rate source at their own rates (as
 *   ffprobe reports them), lossless chunks equal to the source's own frames, a Kinetics list
 *   read through the loader, a chunk length that cannot work refused with one that does;
 * - resume after SIGKILL and after a deleted chunk, Ctrl-C, settings changes;
 * - bad sources and outputs: a clear error naming the file, never a crash or hang; a truncated
 *   source's one message (any --threads) and remedy; another source with a prepared video's
 *   stem refused unless --overwrite. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tb_test.h"
#include "tubelet/data.h"
#include "tubelet/sample.h"
#include "tubelet/video.h"

static char vf_buf[512];

/* ffmpeg's -vf for what prep does: constant rate, short side resized. */
static const char *prep_vf(int fps, int short_side)
{
    snprintf(vf_buf, sizeof(vf_buf),
             "fps=%d,scale=w=if(gt(iw\\,ih)\\,-2\\,%d):h=if(gt(iw\\,ih)\\,%d\\,-2)", fps,
             short_side, short_side);
    return vf_buf;
}

static void stem_of(char *buf, size_t size, const char *src)
{
    const char *b = strrchr(src, '/');
    b = b ? b + 1 : src;
    snprintf(buf, size, "%s", b);
    char *dot = strrchr(buf, '.');
    if (dot)
        *dot = '\0';
}

/* Keyframe numbers of a file as ffprobe sees them. */
static int64_t ffprobe_keyframes(const char *path, int64_t *kf, int64_t cap, int64_t *n_frames)
{
    char *out = NULL;
    int rc = tbt_run(&out, 120,
                     "ffprobe -v error -select_streams v:0 -show_entries frame=key_frame "
                     "-of csv=p=0 '%s'", path);
    int64_t n = 0, nk = 0;
    if (rc != 0) {
        TBT_FAIL("ffprobe %s: %s", path, out);
        free(out);
        return -1;
    }
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '1' && nk < cap)
            kf[nk++] = n;
        if (line[0] == '0' || line[0] == '1')
            n++;
    }
    free(out);
    *n_frames = n;
    return nk;
}

/* The index agrees with the files: sizes, frame counts and keyframes as ffprobe sees them. */
static void check_index_files(const char *dir, const struct tb_video_index *idx)
{
    for (int i = 0; i < idx->n_chunks; i++) {
        const struct tb_chunk_info *c = &idx->chunks[i];
        char path[4400];
        struct stat st;
        int64_t kf[4096], n_frames = 0;
        snprintf(path, sizeof(path), "%s/%s", dir, c->file);
        CHECK_MSG(stat(path, &st) == 0 && st.st_size == c->bytes, "%s: size differs from index",
                  path);
        int64_t nk = ffprobe_keyframes(path, kf, 4096, &n_frames);
        CHECK_MSG(n_frames == c->n_frames, "%s: ffprobe counts %" PRId64 " frames, index %" PRId64,
                  path, n_frames, c->n_frames);
        CHECK_MSG(nk == c->n_keyframes, "%s: ffprobe finds %" PRId64 " keyframes, index %d", path,
                  nk, c->n_keyframes);
        for (int64_t j = 0; j < nk && j < c->n_keyframes; j++)
            CHECK_MSG(kf[j] == c->keyframes[j], "%s: keyframe %" PRId64 " at %" PRId64
                      " (ffprobe) vs %" PRId64 " (index)", path, j, kf[j], c->keyframes[j]);
        char expect[64];
        snprintf(expect, sizeof(expect), "%d.", i * idx->chunk_seconds);
        CHECK_MSG(!strncmp(c->file, expect, strlen(expect)), "chunk %d is named %s", i, c->file);
    }
}

/* Decode every chunk with the ffmpeg tool, in order, into one buffer. */
static int64_t decode_chunks(const char *dir, const struct tb_video_index *idx, uint8_t **all)
{
    size_t fb = tbt_yuv_bytes(idx->width, idx->height);
    uint8_t *buf = malloc(fb * (size_t)(idx->n_frames + 1));
    int64_t n = 0;
    for (int i = 0; i < idx->n_chunks; i++) {
        char path[4400];
        uint8_t *part = NULL;
        snprintf(path, sizeof(path), "%s/%s", dir, idx->chunks[i].file);
        int64_t got = tbt_ffmpeg_yuv(path, NULL, idx->width, idx->height, &part);
        CHECK_MSG(got == idx->chunks[i].n_frames, "%s decodes to %" PRId64 " frames, index says %"
                  PRId64, path, got, idx->chunks[i].n_frames);
        if (got > 0 && n + got <= idx->n_frames)
            memcpy(buf + (size_t)n * fb, part, (size_t)got * fb);
        n += got > 0 ? got : 0;
        free(part);
    }
    *all = buf;
    return n;
}

/* Compare the prepared video in dir with ffmpeg's resampling of src. exact: every byte of every
 * frame; else each frame must be closest to its own source frame at the chunk boundaries and
 * of good quality overall. */
static void check_against_source(const char *src, const char *dir, int fps, int short_side,
                                 int exact)
{
    struct tb_video_index *idx = NULL;
    int rc = tb_index_load(&idx, dir);
    CHECK_MSG(rc == 0, "%s: %s", dir, tb_errmsg());
    if (rc)
        return;
    check_index_files(dir, idx);
    uint8_t *ref = NULL, *ours = NULL;
    int64_t n_ref = tbt_ffmpeg_yuv(src, prep_vf(fps, short_side), idx->width, idx->height, &ref);
    int64_t n_ours = decode_chunks(dir, idx, &ours);
    CHECK_MSG(n_ref == idx->n_frames && n_ours == idx->n_frames,
              "%s: ffmpeg gives %" PRId64 " frames, index %" PRId64 ", chunks decode to %" PRId64,
              src, n_ref, idx->n_frames, n_ours);
    size_t fb = tbt_yuv_bytes(idx->width, idx->height);
    int64_t n = n_ref < n_ours ? n_ref : n_ours;
    if (exact) {
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++)
            if (memcmp(ref + i * fb, ours + i * fb, fb)) {
                bad++;
                if (first < 0)
                    first = i;
            }
        CHECK_MSG(bad == 0, "%s: %" PRId64 " of %" PRId64 " frames differ from ffmpeg's, first %"
                  PRId64, src, bad, n, first);
    } else {
        double sum = 0;
        for (int64_t i = 0; i < n; i++)
            sum += tbt_psnr(ref + i * fb, ours + i * fb, fb);
        CHECK_MSG(n == 0 || sum / n > 30, "%s: mean PSNR %.1f dB", src, sum / n);
        /* At every boundary, the last frame of a chunk and the first of the next are the
         * source frames they should be: closer to their own than to a distinct neighbour. */
        for (int k = 1; k < idx->n_chunks; k++) {
            int64_t b = idx->chunks[k].start_frame;
            for (int64_t i = b - 1; i <= b && i + 1 < n; i++) {
                double own = tbt_psnr(ours + i * fb, ref + i * fb, fb);
                for (int64_t j = i - 1; j <= i + 1; j += 2) {
                    if (j < 0 || j >= n || tbt_psnr(ref + i * fb, ref + j * fb, fb) > 45)
                        continue; /* the neighbour is (nearly) the same picture */
                    double other = tbt_psnr(ours + i * fb, ref + j * fb, fb);
                    CHECK_MSG(own > other, "%s: frame %" PRId64 " (chunk boundary %" PRId64
                              ") matches source frame %" PRId64 " (%.1f dB) better than its own "
                              "(%.1f dB)", src, i, b, j, other, own);
                }
            }
        }
    }
    free(ref);
    free(ours);
    tb_index_free(&idx);
}

static int prep(char **out, const char *root, const char *flags, const char *srcs)
{
    return tbt_run(out, 600, "%s prep --out %s %s %s", tbt_tubelet(), root, flags, srcs);
}

static void test_synth_lossless(void)
{
    tbt_case = "synth, lossless";
    char syn[4200], root[4200], src[8192], dir[8192], *out = NULL;
    snprintf(syn, sizeof(syn), "%s/syn", tbt_dir());
    snprintf(root, sizeof(root), "%s/syn_chunks", tbt_dir());
    int rc = tbt_run(&out, 300, "%s synth --out %s --videos 2 --seconds 12 --size 320x240",
                     tbt_tubelet(), syn);
    CHECK_MSG(rc == 0, "synth: %s", out);
    free(out);
    snprintf(src, sizeof(src), "%s/videos/P01_01.mp4 %s/videos/P01_02.mp4", syn, syn);
    rc = prep(&out, root, "--crf 0 --preset ultrafast --chunk-seconds 4 --short-side 240 "
              "--gop 10 --jobs 2", src);
    CHECK_MSG(rc == 0, "prep: %s", out);
    free(out);
    for (int v = 1; v <= 2; v++) {
        snprintf(src, sizeof(src), "%s/videos/P01_0%d.mp4", syn, v);
        snprintf(dir, sizeof(dir), "%s/P01_0%d.mp4", root, v);
        check_against_source(src, dir, 30, 240, 1);
        struct tb_video_index *idx = NULL;
        if (tb_index_load(&idx, dir) == 0) {
            CHECK_EQ(idx->n_chunks, 3);
            CHECK_EQ(idx->chunk_frames, 120);
            CHECK_EQ(idx->n_frames, 360);
            CHECK_EQ(idx->width, 320);
            CHECK_EQ(idx->height, 240);
            /* x264 may add a keyframe at a scene cut, never fewer than the interval asks. */
            for (int c = 0; c < idx->n_chunks; c++)
                for (int64_t f = 0; f < idx->chunks[c].n_frames; f += 10) {
                    int found = 0;
                    for (int j = 0; j < idx->chunks[c].n_keyframes; j++)
                        found |= idx->chunks[c].keyframes[j] == f;
                    CHECK_MSG(found, "chunk %d: no keyframe at %" PRId64, c, f);
                }
            tb_index_free(&idx);
        }
    }
}

/* B-frames in a chunk file, by ffprobe's picture types. */
static int count_b_frames(const char *path)
{
    char *out = NULL;
    int rc = tbt_run(&out, 60, "ffprobe -v error -select_streams v:0 -show_entries "
                     "frame=pict_type -of csv=p=0 '%s'", path);
    int n = 0;
    CHECK_MSG(rc == 0, "ffprobe %s: %s", path, out);
    for (char *p = out; rc == 0 && p && *p; p = strchr(p, '\n'), p += p != NULL)
        n += *p == 'B';
    free(out);
    return n;
}

/* --no-bframes writes none (the preset's default has them); --gop 1 makes every frame a
 * keyframe; the settings are in the index, and a rerun with others re-encodes. */
static void test_encodings(void)
{
    tbt_case = "encodings";
    char src[4200], root[4200], chunk[4400], *out = NULL;
    snprintf(src, sizeof(src), "%s/enc_src.mp4", tbt_dir());
    snprintf(root, sizeof(root), "%s/enc", tbt_dir());
    int rc = tbt_run(&out, 120, "ffmpeg -nostdin -v error -y -f lavfi -i "
                     "testsrc2=size=192x108:rate=30 -t 4 -c:v libx264 -crf 10 %s", src);
    CHECK_MSG(rc == 0, "ffmpeg: %s", out);
    free(out);
    snprintf(chunk, sizeof(chunk), "%s/enc_src.mp4/0.mp4", root);
    static const struct {
        const char *flags;
        int b_frames;          /* 1: some expected, 0: none */
        int intra;
        const char *param;     /* in the index's settings, or NULL for none of " bframes=" */
    } cases[] = {
        {"--gop 30", 1, 0, NULL},
        {"--gop 30 --no-bframes", 0, 0, " bframes=0 "},
        {"--gop 1", 0, 1, NULL},
        {"--gop 30 --bframes", 1, 0, NULL},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char flags[128];
        snprintf(flags, sizeof(flags), "%s --overwrite", cases[c].flags);
        rc = prep(&out, root, flags, src);
        CHECK_MSG(rc == 0, "prep %s: %s", cases[c].flags, out);
        CHECK_STR_HAS(out, "(0 reused)"); /* each differs from the run before */
        free(out);
        int nb = count_b_frames(chunk);
        CHECK_MSG(cases[c].b_frames ? nb > 0 : nb == 0, "%s: %d B-frames", cases[c].flags, nb);
        struct tb_video_index *idx = NULL;
        char dir[4400];
        snprintf(dir, sizeof(dir), "%s/enc_src.mp4", root);
        CHECK_EQ(tb_index_load(&idx, dir), 0);
        if (!idx)
            continue;
        if (cases[c].intra)
            CHECK_EQ(idx->chunks[0].n_keyframes, idx->chunks[0].n_frames);
        CHECK_MSG(cases[c].param ? strstr(idx->params, cases[c].param) != NULL
                                 : strstr(idx->params, " bframes=") == NULL,
                  "%s: settings '%s'", cases[c].flags, idx->params);
        tb_index_free(&idx);
    }
}

static const char *const real_videos[] = {"vtest.avi", "Megamind.avi", "tree.avi", "box.mp4",
                                           "cup.mp4"};
#define N_REAL ((int)(sizeof(real_videos) / sizeof(real_videos[0])))

static int real_sources(char *list, size_t size)
{
    list[0] = '\0';
    for (int i = 0; i < N_REAL; i++) {
        const char *p = tbt_opencv_video(real_videos[i]);
        if (!p)
            return -1;
        strncat(list, p, size - strlen(list) - 2);
        strncat(list, " ", size - strlen(list) - 1);
    }
    return 0;
}

static void test_real_lossless(void)
{
    tbt_case = "real videos, lossless";
    char list[8192], root[4200], dir[8192], stem[256], *out = NULL;
    if (real_sources(list, sizeof(list)) < 0) {
        fprintf(stderr, "skip: opencv-doc videos missing\n");
        return;
    }
    snprintf(root, sizeof(root), "%s/real_ll", tbt_dir());
    int rc = prep(&out, root, "--crf 0 --preset ultrafast --chunk-seconds 5 --jobs 2", list);
    CHECK_MSG(rc == 0, "prep: %s", out);
    free(out);
    for (int i = 0; i < N_REAL; i++) {
        const char *src = tbt_opencv_video(real_videos[i]);
        stem_of(stem, sizeof(stem), src);
        snprintf(dir, sizeof(dir), "%s/%s.mp4", root, stem);
        check_against_source(src, dir, 30, 320, 1);
    }
}

static void test_real_default(void)
{
    tbt_case = "real videos, default settings";
    char list[8192], root[4200], dir[8192], stem[256], *out = NULL;
    if (real_sources(list, sizeof(list)) < 0)
        return;
    snprintf(root, sizeof(root), "%s/real", tbt_dir());
    /* Default quality and preset (B-frames), short chunks for many boundaries. */
    int rc = prep(&out, root, "--chunk-seconds 5 --jobs 2", list);
    CHECK_MSG(rc == 0, "prep: %s", out);
    CHECK_STR_HAS(out, "ok   ");
    free(out);
    for (int i = 0; i < N_REAL; i++) {
        const char *src = tbt_opencv_video(real_videos[i]);
        stem_of(stem, sizeof(stem), src);
        snprintf(dir, sizeof(dir), "%s/%s.mp4", root, stem);
        check_against_source(src, dir, 30, 320, 0);
    }

    /* probe of a prepared directory and of a file agree with the index and with ffprobe. */
    tbt_case = "probe";
    const char *vtest = tbt_opencv_video("vtest.avi");
    snprintf(dir, sizeof(dir), "%s/vtest.mp4", root);
    rc = tbt_run(&out, 60, "%s probe %s", tbt_tubelet(), dir);
    CHECK_EQ(rc, 0);
    CHECK_STR_HAS(out, "\"frames\": 2385,");
    CHECK_STR_HAS(out, "\"chunk_frames\": 150,");
    CHECK_STR_HAS(out, "{\"file\": \"5.mp4\", \"start_frame\": 150, \"frames\": 150,");
    free(out);
    int64_t kf[4096], n_frames = 0;
    int64_t nk = ffprobe_keyframes(vtest, kf, 4096, &n_frames);
    rc = tbt_run(&out, 60, "%s probe %s", tbt_tubelet(), vtest);
    CHECK_EQ(rc, 0);
    char expect[256];
    snprintf(expect, sizeof(expect), "\"frames\": %" PRId64 ",", n_frames);
    CHECK_STR_HAS(out, expect);
    CHECK_STR_HAS(out, "\"codec\": \"msmpeg4v3\"");
    CHECK_STR_HAS(out, "\"width\": 768,");
    char *kfs = strstr(out, "\"keyframes\": [");
    int64_t got = 0;
    if (kfs) {
        char *p = kfs + 14;
        while (*p && *p != ']') {
            long long v = strtoll(p, &p, 10);
            CHECK_MSG(got < nk && v == kf[got], "probe keyframe %" PRId64 " = %lld", got, v);
            got++;
            while (*p == ',' || *p == ' ')
                p++;
        }
    }
    CHECK_EQ(got, nk);
    free(out);
}

static void test_odd_sources(void)
{
    tbt_case = "odd sources";
    const char *d = tbt_dir();
    char *out = NULL;
    /* name, how ffmpeg makes it (in d/odd), fps of the test source */
    static const char *const make[][2] = {
        {"base.mp4", "-f lavfi -i testsrc2=size=320x240:rate=30 -t 3 -c:v libx264 "
                     "-pix_fmt yuv420p -output_ts_offset 2.5 base.mp4"},
        {"rot90.mp4", "-i base.mp4 -c copy -metadata:s:v:0 rotate=90 rot90.mp4"},
        {"rot180.mp4", "-i base.mp4 -c copy -metadata:s:v:0 rotate=180 rot180.mp4"},
        {"rot270.mov", "-i base.mp4 -c copy -metadata:s:v:0 rotate=270 rot270.mov"},
        {"vp9.webm", "-f lavfi -i testsrc2=size=320x240:rate=25 -t 3 -c:v libvpx-vp9 "
                     "-deadline realtime -b:v 400k vp9.webm"},
        {"hevc.mp4", "-f lavfi -i testsrc2=size=320x240:rate=24 -t 3 -c:v libx265 "
                     "-x265-params log-level=error hevc.mp4"},
        {"vfr.mkv", "-f lavfi -i testsrc2=size=320x240:rate=25 -t 4 -vf "
                    "'setpts=(N+floor(N/7)*0.6)/25/TB' -fps_mode vfr -c:v libx264 vfr.mkv"},
        {"odd444.mp4", "-f lavfi -i testsrc2=size=320x240:rate=30,scale=333:251 -t 2 "
                       "-c:v libx264 -pix_fmt yuv444p odd444.mp4"},
        {"oddrgb.mkv", "-f lavfi -i testsrc2=size=320x240:rate=30,scale=333:251,format=rgb24 "
                       "-t 2 -c:v ffv1 oddrgb.mkv"},
        {"mpeg4.avi", "-f lavfi -i testsrc2=size=320x240:rate=15 -t 3 -c:v mpeg4 mpeg4.avi"},
        {"full.mp4", "-f lavfi -i testsrc2=size=320x240:rate=60 -t 2 -c:v libx264 "
                     "-pix_fmt yuvj420p full.mp4"},
    };
    char list[8192] = "", src[8192], dir[8192], stem[64], root[4200];
    int n = (int)(sizeof(make) / sizeof(make[0]));
    tbt_run(NULL, 10, "mkdir -p %s/odd", d);
    for (int i = 0; i < n; i++) {
        int rc = tbt_run(&out, 120, "cd %s/odd && ffmpeg -nostdin -v error -y %s", d,
                         make[i][1]);
        CHECK_MSG(rc == 0, "ffmpeg could not make %s: %s", make[i][0], out);
        free(out);
        snprintf(src, sizeof(src), "%s/odd/%s ", d, make[i][0]);
        strncat(list, src, sizeof(list) - strlen(list) - 1);
    }
    snprintf(root, sizeof(root), "%s/odd_chunks", d);
    int rc = prep(&out, root, "--crf 0 --preset ultrafast --chunk-seconds 1 --jobs 2", list);
    CHECK_MSG(rc == 0, "prep: %s", out);
    free(out);
    for (int i = 0; i < n; i++) {
        snprintf(src, sizeof(src), "%s/odd/%s", d, make[i][0]);
        stem_of(stem, sizeof(stem), make[i][0]);
        snprintf(dir, sizeof(dir), "%s/%s.mp4", root, stem);
        tbt_case = make[i][0];
        check_against_source(src, dir, 30, 320, 1);
    }
    /* Rotated sources come out upright: portrait for a quarter turn. */
    tbt_case = "rotation";
    struct tb_video_index *idx = NULL;
    snprintf(dir, sizeof(dir), "%s/rot90.mp4", root);
    if (tb_index_load(&idx, dir) == 0) {
        CHECK_EQ(idx->width, 320);
        CHECK_EQ(idx->height, 426);
        tb_index_free(&idx);
    }
}

/* --short-side 0 keeps the source's size and pixels: an odd width or height loses its last
 * column or row (4:2:0 H.264 needs even sizes), and nothing is resized by a pixel; lossless
 * chunks equal ffmpeg's crop of the source byte for byte (rotated: after its autorotate). */
static void test_odd_keep_size(void)
{
    const char *d = tbt_dir();
    char *out = NULL, list[8192] = "", src[4400], dir[4400], stem[64], root[4200];
    /* name, how ffmpeg makes it (2 s of testsrc, then the name), the size it prepares to */
    static const char *const make[][3] = {
        {"k420.mkv", "-s 321x177 -pix_fmt yuv420p -c:v ffv1", "320x176"},
        {"k422.mkv", "-s 177x321 -pix_fmt yuv422p -c:v ffv1", "176x320"},
        {"k444.mkv", "-s 333x250 -pix_fmt yuv444p -c:v ffv1", "332x250"},
        {"kh.mkv", "-s 320x177 -pix_fmt yuv420p -c:v ffv1", "320x176"},
        /* a quarter turn: upright 321x177 */
        {"krot.mp4", "-s 177x321 -c:v mpeg4 -q:v 2 k.mp4 && ffmpeg -nostdin -v error -y -i "
         "k.mp4 -c copy -metadata:s:v:0 rotate=90", "320x176"},
    };
    int n = (int)(sizeof(make) / sizeof(make[0]));
    tbt_run(NULL, 10, "mkdir -p %s/keep", d);
    for (int i = 0; i < n; i++) {
        tbt_case = make[i][0];
        int rc = tbt_run(&out, 120, "cd %s/keep && ffmpeg -nostdin -v error -y -f lavfi -i "
                         "testsrc=rate=30 -t 2 %s %s", d, make[i][1], make[i][0]);
        CHECK_MSG(rc == 0, "ffmpeg could not make %s: %s", make[i][0], out);
        free(out);
        snprintf(src, sizeof(src), "%s/keep/%s ", d, make[i][0]);
        strncat(list, src, sizeof(list) - strlen(list) - 1);
    }
    tbt_case = "odd sizes, --short-side 0";
    snprintf(root, sizeof(root), "%s/keep_chunks", d);
    int rc = prep(&out, root, "--short-side 0 --crf 0 --preset ultrafast --chunk-seconds 1 "
                  "--jobs 2", list);
    CHECK_MSG(rc == 0, "prep: %s", out);
    free(out);
    for (int i = 0; i < n; i++) {
        tbt_case = make[i][0];
        struct tb_video_index *idx = NULL;
        snprintf(src, sizeof(src), "%s/keep/%s", d, make[i][0]);
        stem_of(stem, sizeof(stem), make[i][0]);
        snprintf(dir, sizeof(dir), "%s/%s.mp4", root, stem);
        if (tb_index_load(&idx, dir) < 0) {
            TBT_FAIL("%s: %s", dir, tb_errmsg());
            continue;
        }
        char size[32];
        snprintf(size, sizeof(size), "%dx%d", idx->width, idx->height);
        CHECK_MSG(!strcmp(size, make[i][2]), "%s: prepared %s, want %s", make[i][0], size,
                  make[i][2]);
        uint8_t *ref = NULL, *ours = NULL;
        int64_t n_ref = tbt_ffmpeg_yuv(src, "fps=30,crop=trunc(iw/2)*2:trunc(ih/2)*2:0:0",
                                       idx->width, idx->height, &ref);
        int64_t n_ours = decode_chunks(dir, idx, &ours);
        size_t fb = tbt_yuv_bytes(idx->width, idx->height);
        CHECK_MSG(n_ref == idx->n_frames && n_ours == n_ref, "%s: ffmpeg %" PRId64 ", chunks %"
                  PRId64 ", index %" PRId64 " frames", make[i][0], n_ref, n_ours, idx->n_frames);
        int64_t bad = 0;
        for (int64_t f = 0; f < n_ref && f < n_ours; f++)
            bad += memcmp(ref + f * fb, ours + f * fb, fb) != 0;
        CHECK_MSG(bad == 0, "%s: %" PRId64 " of %" PRId64 " frames differ from ffmpeg's crop",
                  make[i][0], bad, n_ref);
        free(ref);
        free(ours);
        tb_index_free(&idx);
    }
}

/* Chunks keep the source's colour tags (its YCbCr matrix, primaries, transfer), so that a
 * prepared BT.709 video reads back as ffmpeg shows its source, byte for byte when lossless; an
 * RGB source's chunks stay untagged (BT.601, as they are converted). */
static void test_colors(void)
{
    tbt_case = "colour tags";
    const char *d = tbt_dir();
    char *out = NULL;
    int rc = tbt_run(&out, 120, "mkdir -p %s/colors && cd %s/colors && ffmpeg -nostdin -v error "
                     "-f lavfi -i testsrc2=size=320x240:rate=30 -t 1 -vf "
                     "scale=out_color_matrix=bt709 -pix_fmt yuv420p -colorspace bt709 "
                     "-color_primaries bt709 -color_trc bt709 -c:v libx264 -crf 0 hd.mp4 && "
                     "ffmpeg -nostdin -v error -f lavfi -i testsrc2=size=320x240:rate=30 -t 1 "
                     "-pix_fmt rgb24 -c:v ffv1 rgb.mkv && %s prep hd.mp4 rgb.mkv --out root "
                     "--short-side 0 --crf 0 --preset ultrafast", d, d, tbt_tubelet());
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    rc = tbt_run(&out, 60, "cd %s/colors && for f in hd rgb; do ffprobe -v error -show_entries "
                 "stream=color_space,color_primaries,color_transfer -of csv=p=0 root/$f.mp4/0.mp4; "
                 "done", d);
    CHECK_MSG(rc == 0 && strstr(out, "bt709,bt709,bt709") && strstr(out, "unknown"), "%s", out);
    free(out);
    rc = tbt_run(&out, 60, "cd %s/colors && %s frames root/hd.mp4 --frames 0,11,29 --out f.rgb "
                 "&& ffmpeg -nostdin -v error -i hd.mp4 -vf 'select=eq(n\\,0)+eq(n\\,11)+"
                 "eq(n\\,29)' -fps_mode passthrough -f rawvideo -pix_fmt rgb24 - | cmp - f.rgb "
                 "&& echo same", d, tbt_tubelet());
    CHECK_MSG(rc == 0 && strstr(out, "same"), "prepared BT.709 against its source: %s", out);
    free(out);
}

/* ffprobe's r_frame_rate and avg_frame_rate of path's video stream, and the frames it decodes.
 * 0, or -1 after failing the test. */
static int ffprobe_rates(const char *path, char *r, char *avg, size_t size, int64_t *n_frames)
{
    char *out = NULL;
    int rc = tbt_run(&out, 60, "ffprobe -v error -select_streams v:0 -count_frames "
                     "-show_entries stream=r_frame_rate,avg_frame_rate,nb_read_frames "
                     "-of default=nw=1 '%s'", path);
    const char *a = out ? strstr(out, "avg_frame_rate=") : NULL;
    const char *b = out ? strstr(out, "r_frame_rate=") : NULL;
    const char *c = out ? strstr(out, "nb_read_frames=") : NULL;
    long long n = -1;
    if (rc != 0 || !a || !b || !c || sscanf(c, "nb_read_frames=%lld", &n) != 1) {
        TBT_FAIL("ffprobe %s: %s", path, out ? out : "");
        free(out);
        return -1;
    }
    snprintf(avg, size, "%.*s", (int)strcspn(a + 15, "\n"), a + 15);
    snprintf(r, size, "%.*s", (int)strcspn(b + 13, "\n"), b + 13);
    *n_frames = n;
    free(out);
    return 0;
}

static double rate_value(const char *rate)
{
    long long num = 0, den = 1;
    sscanf(rate, "%lld/%lld", &num, &den);
    return den > 0 ? (double)num / (double)den : 0;
}

/* A source of --fps source's test: how ffmpeg makes it, then what ffprobe says of it. */
struct src_rate {
    const char *name, *make;
    int vfr;                  /* frames at varying intervals: prepared at its average */
    char r[32], avg[32];      /* ffprobe's r_frame_rate, avg_frame_rate */
    int64_t n_probed;         /* frames ffprobe decodes */
    char want[32];            /* the rate its chunks must have */
    int64_t n_want;           /* and their frames */
};

/* The prepared dir of s against s: the index's rate is ffprobe's (r_frame_rate; a variable-
 * rate source's avg_frame_rate), its frames as many as ffprobe decodes (a variable-rate one:
 * as ffmpeg's fps filter at that rate gives), and the lossless chunks, decoded by ffmpeg, are
 * the source's own frames byte for byte (variable rate: those of -vf fps=AVG). */
static void check_source_rate(const char *src, const char *dir, const struct src_rate *s)
{
    struct tb_video_index *idx = NULL;
    if (tb_index_load(&idx, dir) < 0) {
        TBT_FAIL("%s: %s", dir, tb_errmsg());
        return;
    }
    char got[64], vf[64];
    snprintf(got, sizeof(got), "%d/%d", idx->fps_num, idx->fps_den);
    CHECK_MSG(!strcmp(got, s->want), "%s: index fps %s, ffprobe's %s %s", s->name, got,
              s->vfr ? "avg_frame_rate" : "r_frame_rate", s->want);
    CHECK_MSG(strstr(idx->params, " fps=source ") != NULL, "%s: params %s", s->name,
              idx->params);
    check_index_files(dir, idx);
    snprintf(vf, sizeof(vf), "fps=%s", s->want);
    uint8_t *ref = NULL, *ours = NULL;
    int64_t n_ref = tbt_ffmpeg_yuv(src, s->vfr ? vf : NULL, idx->width, idx->height, &ref);
    int64_t n_ours = decode_chunks(dir, idx, &ours);
    CHECK_MSG(n_ref == s->n_want && idx->n_frames == s->n_want && n_ours == s->n_want,
              "%s: %" PRId64 " frames wanted, ffmpeg gives %" PRId64 ", the index says %" PRId64
              ", the chunks decode to %" PRId64, s->name, s->n_want, n_ref, idx->n_frames,
              n_ours);
    size_t fb = tbt_yuv_bytes(idx->width, idx->height);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; ref && ours && i < n_ref && i < n_ours; i++)
        if (memcmp(ref + i * fb, ours + i * fb, fb) && (bad++, first < 0))
            first = i;
    CHECK_MSG(bad == 0, "%s: %" PRId64 " frames differ from the source's, first %" PRId64,
              s->name, bad, first);
    free(ref);
    free(ours);
    tb_index_free(&idx);
}

/* A Kinetics list ("path label") over the prepared root, read through the loader (dense
 * sampling at stride 4, the evaluation's middle view, the centre crop at its own size): each
 * clip holds the source frames the sampler picks from the source's own frame count, as
 * ffmpeg's rgb24 shows them. */
static void check_kinetics(const char *root, const char *srcdir, const struct src_rate *srcs,
                           int n)
{
    enum { T = 8, STRIDE = 4, W = 160, H = 120, S = 120 };
    char list[4400], file[4400], sel[1024], vf[1200], *out = NULL;
    snprintf(list, sizeof(list), "%s/k400.txt", srcdir);
    FILE *f = fopen(list, "w");
    for (int i = 0; f && i < n; i++)
        fprintf(f, "%s %d\n", srcs[i].name, i);
    if (f)
        fclose(f);
    struct tb_annotations *a = NULL;
    struct tb_ann_opts ao = {.format = TB_ANN_KINETICS};
    struct tb_dataset_opts o = {.root = root, .ext = "mp4", .sampler = TB_SAMPLE_DENSE,
                                .n_frames = T, .stride = STRIDE, .train = 0, .n_views = 1,
                                .n_crops = 1, .width = S, .height = S};
    struct tb_loader_opts lo = {.batch_size = n, .n_workers = 1, .prefetch = 1, .world = 1};
    tb_dataset *ds = NULL;
    tb_loader *l = NULL;
    struct tb_batch *b = NULL;
    if (tb_ann_load(&a, list, &ao) < 0 || tb_dataset_open(&ds, a, &o) < 0 ||
        tb_loader_open(&l, ds, &lo) < 0 || tb_loader_epoch(l, 0) < 1 ||
        tb_loader_next(l, &b) < 0) {
        TBT_FAIL("kinetics list through the loader: %s", tb_errmsg());
        goto end;
    }
    CHECK_EQ(b->n, n);
    size_t fb = (size_t)S * S * 3;
    for (int j = 0; j < b->n; j++) {
        const struct src_rate *s = &srcs[b->index[j]];
        int64_t frames[T];
        size_t len = 0, used = 0;
        CHECK_EQ(tb_sample_dense(s->n_want, T, STRIDE, 0, 1, NULL, frames), 0);
        sel[0] = '\0';
        for (int k = 0; k < T; k++) /* ascending, each once: the span is inside the video */
            used += (size_t)snprintf(sel + used, sizeof(sel) - used, "%seq(n\\,%" PRId64 ")",
                                     k ? "+" : "", frames[k]);
        snprintf(vf, sizeof(vf), "%s%s%sselect=%s,crop=%d:%d:%d:%d", s->vfr ? "fps=" : "",
                 s->vfr ? s->want : "", s->vfr ? "," : "", sel, S, S, (W - S) / 2, (H - S) / 2);
        snprintf(file, sizeof(file), "%s/k400_%d.rgb", srcdir, j);
        int rc = tbt_run(&out, 60, "ffmpeg -nostdin -v error -y -i %s/%s -vf '%s' -fps_mode "
                         "passthrough -f rawvideo -pix_fmt rgb24 %s", srcdir, s->name, vf, file);
        CHECK_MSG(rc == 0, "ffmpeg: %s", out);
        free(out);
        uint8_t *want = (uint8_t *)tbt_read(file, &len);
        CHECK_MSG(want && len == T * fb, "%s: ffmpeg gave %zu bytes, want %zu", s->name, len,
                  T * fb);
        for (int k = 0; want && len == T * fb && k < T; k++)
            CHECK_MSG(!memcmp(b->video + (size_t)j * T * fb + k * fb, want + k * fb, fb),
                      "%s: the loader's frame %d (source frame %" PRId64 ") differs from "
                      "ffmpeg's", s->name, k, frames[k]);
        free(want);
    }
    tb_loader_release(l, b);
end:
    tb_loader_close(&l);
    tb_dataset_close(&ds);
    tb_ann_free(&a);
}

/* --fps source (AVION's Kinetics clips at their own rate): a video keeps the rate ffprobe
 * reports and every frame as it is, multi-chunk at 25 and 24 fps, one 15 s chunk at NTSC's
 * and a variable rate; a Kinetics list reads the right frames through the loader; a chunk
 * length that is not whole frames at a video's rate refuses a video longer than one chunk,
 * naming it and a length that works, which does; --fps source is a setting of its own. */
static void test_source_fps(void)
{
    const char *d = tbt_dir(), *t = tbt_tubelet();
    const char *flags = "--fps source --crf 0 --preset ultrafast --short-side 0 --gop 10";
    char *out = NULL, dir[4400], src[4400];
    struct src_rate srcs[] = {
        {"r25.mp4", "testsrc2=size=160x120:rate=25 -t 3", 0, "", "", 0, "", 0},
        {"ntsc.mp4", "testsrc2=size=160x120:rate=30000/1001 -t 3", 0, "", "", 0, "", 0},
        {"r24.mp4", "testsrc2=size=160x120:rate=24 -t 3", 0, "", "", 0, "", 0},
        /* a second at 30 fps, then two at 15 */
        {"vfr.mp4", "testsrc2=size=160x120:rate=30 -t 3 -vf \"setpts='if(lt(N,30),N/30,"
         "1+(N-30)/15)/TB'\" -fps_mode vfr", 1, "", "", 0, "", 0},
    };
    int n = (int)(sizeof(srcs) / sizeof(srcs[0]));
    tbt_case = "--fps source: sources";
    tbt_run(NULL, 10, "mkdir -p %s/srcfps", d);
    for (int i = 0; i < n; i++) {
        struct src_rate *s = &srcs[i];
        int rc = tbt_run(&out, 120, "cd %s/srcfps && ffmpeg -nostdin -v error -y -f lavfi -i %s "
                         "-c:v libx264 -pix_fmt yuv420p %s", d, s->make, s->name);
        CHECK_MSG(rc == 0, "ffmpeg could not make %s: %s", s->name, out);
        free(out);
        snprintf(src, sizeof(src), "%s/srcfps/%s", d, s->name);
        if (ffprobe_rates(src, s->r, s->avg, sizeof(s->r), &s->n_probed) < 0)
            return;
        /* Not vacuous: the constant-rate ones say one rate twice, the variable one two rates
         * more than 1% apart (else it would be prepared at r_frame_rate). */
        double q = rate_value(s->r) / rate_value(s->avg);
        CHECK_MSG(s->vfr ? fabs(q - 1) > 0.01 : !strcmp(s->r, s->avg), "%s: r_frame_rate %s, "
                  "avg_frame_rate %s", s->name, s->r, s->avg);
        snprintf(s->want, sizeof(s->want), "%s", s->vfr ? s->avg : s->r);
        s->n_want = s->n_probed;
        if (s->vfr) {
            uint8_t *ref = NULL;
            char vf[64];
            snprintf(vf, sizeof(vf), "fps=%s", s->want);
            s->n_want = tbt_ffmpeg_yuv(src, vf, 160, 120, &ref);
            free(ref);
        }
    }

    tbt_case = "--fps source";
    char root[4200];
    snprintf(root, sizeof(root), "%s/srcfps/root", d);
    int rc = tbt_run(&out, 300, "cd %s/srcfps && %s prep r25.mp4 r24.mp4 --out root %s "
                     "--chunk-seconds 1 && %s prep ntsc.mp4 vfr.mp4 --out root %s "
                     "--chunk-seconds 15", d, t, flags, t, flags);
    CHECK_MSG(rc == 0, "prep: %s", out);
    free(out);
    for (int i = 0; i < n; i++) {
        tbt_case = srcs[i].name;
        snprintf(src, sizeof(src), "%s/srcfps/%s", d, srcs[i].name);
        snprintf(dir, sizeof(dir), "%s/%s", root, srcs[i].name);
        check_source_rate(src, dir, &srcs[i]);
    }
    tbt_case = "--fps source: a Kinetics list through the loader";
    snprintf(src, sizeof(src), "%s/srcfps", d);
    check_kinetics(root, src, srcs, n);

    /* The same run again reuses everything; another --fps is another setting. */
    tbt_case = "--fps source: a rerun";
    rc = tbt_run(&out, 120, "cd %s/srcfps && %s prep r25.mp4 --out root %s --chunk-seconds 1",
                 d, t, flags);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "3 chunks (3 reused)");
    free(out);
    rc = tbt_run(&out, 120, "cd %s/srcfps && %s prep r25.mp4 --out root --crf 0 --preset "
                 "ultrafast --short-side 0 --gop 10 --chunk-seconds 1 --fps 25", d, t);
    CHECK_MSG(rc == 1, "exit %d: %s", rc, out);
    CHECK_STR_HAS(out, "root/r25.mp4 was prepared with --fps source, this run asks --fps 25/1");
    free(out);

    /* 3 s at 30000/1001 fps is 89.91 frames: chunk 0 holds the 90 that start in it, all of a
     * 3.003 s video. */
    tbt_case = "--fps source: one chunk of a length that is not whole frames";
    rc = tbt_run(&out, 120, "cd %s/srcfps && %s prep ntsc.mp4 --out root3 %s --chunk-seconds 3",
                 d, t, flags);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    snprintf(src, sizeof(src), "%s/srcfps/ntsc.mp4", d);
    snprintf(dir, sizeof(dir), "%s/srcfps/root3/ntsc.mp4", d);
    check_source_rate(src, dir, &srcs[1]);

    /* 2 s is no whole number of frames at 30000/1001 or 600/29 fps: a video longer than one
     * chunk is refused, named, with a length that is whole frames at its rate; that one works. */
    for (int i = 1; i < n; i += 2) {
        struct src_rate *s = &srcs[i];
        tbt_case = s->name;
        rc = tbt_run(&out, 120, "cd %s/srcfps && %s prep %s --out root2 %s --chunk-seconds 2",
                     d, t, s->name, flags);
        CHECK_MSG(rc == 1, "%s at 2 s chunks: exit %d: %s", s->name, rc, out);
        char want[256];
        snprintf(want, sizeof(want), "FAIL %s: %s: longer than one 2 s chunk", s->name, s->name);
        CHECK_STR_HAS(out, want);
        const char *p = out ? strstr(out, "give --chunk-seconds ") : NULL;
        long long secs = 0, num = 0, den = 0;
        CHECK_MSG(p && sscanf(p, "give --chunk-seconds %lld", &secs) == 1, "%s", out);
        free(out);
        sscanf(s->want, "%lld/%lld", &num, &den);
        CHECK_MSG(secs >= 2 && den > 0 && secs * num % den == 0, "%s: --chunk-seconds %lld "
                  "is not whole frames at %s fps", s->name, secs, s->want);
        rc = tbt_run(&out, 120, "cd %s/srcfps && %s prep %s --out root2 %s --chunk-seconds %lld",
                     d, t, s->name, flags, secs);
        CHECK_MSG(rc == 0, "--chunk-seconds %lld: %s", secs, out);
        free(out);
        snprintf(src, sizeof(src), "%s/srcfps/%s", d, s->name);
        snprintf(dir, sizeof(dir), "%s/srcfps/root2/%s", d, s->name);
        check_source_rate(src, dir, s);
    }
}

/* mtime in nanoseconds and inode of a file, to tell whether a rerun rewrote it. */
static int64_t file_stamp(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    return (int64_t)st.st_ino * 1000003 + (int64_t)st.st_mtim.tv_sec * 1000000000 +
           st.st_mtim.tv_nsec;
}

static int count_reused(const char *out)
{
    const char *p = out ? strstr(out, " reused)") : NULL;
    if (!p)
        return -1;
    while (p > out && p[-1] != '(')
        p--;
    return atoi(p);
}

static int count_files(const char *dir, const char *suffix)
{
    char *out = NULL;
    tbt_run(&out, 10, "ls %s | grep -c '%s$' || true", dir, suffix);
    int n = atoi(out);
    free(out);
    return n;
}

static void test_resume(void)
{
    tbt_case = "resume";
    const char *vtest = tbt_opencv_video("vtest.avi");
    char root[4200], dir[8192], first[4500], mid[4500], mid_idx[4500], *out = NULL;
    if (!vtest)
        return;
    snprintf(root, sizeof(root), "%s/resume", tbt_dir());
    snprintf(dir, sizeof(dir), "%s/vtest.mp4", root);
    snprintf(first, sizeof(first), "%s/0.idx", dir);
    const char *flags = "--crf 0 --preset ultrafast --chunk-seconds 2 --threads 1";

    /* Kill -9 once the first chunk is finished. */
    int rc = tbt_run(&out, 120,
                     "%s prep --out %s %s %s >/dev/null 2>&1 & pid=$!; "
                     "while [ ! -f %s ]; do kill -0 $pid 2>/dev/null || exit 3; sleep 0.01; "
                     "done; kill -9 $pid; wait $pid; exit 0",
                     tbt_tubelet(), root, flags, vtest, first);
    CHECK_MSG(rc == 0, "could not interrupt prep (rc %d): %s", rc, out);
    free(out);
    CHECK(!tb_index_exists(dir));
    snprintf(first, sizeof(first), "%s/0.mp4", dir);
    int64_t stamp = file_stamp(first);
    CHECK(stamp >= 0);

    rc = prep(&out, root, flags, vtest);
    CHECK_MSG(rc == 0, "rerun: %s", out);
    CHECK_MSG(count_reused(out) >= 1, "rerun reused no chunk: %s", out);
    free(out);
    CHECK_EQ(file_stamp(first), stamp);
    CHECK_EQ(count_files(dir, ".part"), 0);
    check_against_source(vtest, dir, 30, 320, 1);

    /* Lose one chunk in the middle: only it is written again, finished video.idx or not. */
    tbt_case = "resume after a lost chunk";
    snprintf(mid, sizeof(mid), "%s/10.mp4", dir);
    snprintf(mid_idx, sizeof(mid_idx), "%s/10.idx", dir);
    unlink(mid);
    rc = prep(&out, root, flags, vtest);
    CHECK_MSG(rc == 0, "rerun: %s", out);
    CHECK_STR_HAS(out, "40 chunks (39 reused)");
    free(out);
    CHECK(tbt_exists(mid) && tbt_exists(mid_idx));
    /* Without the finished index every chunk is checked against its own index. */
    char vidx[4500];
    snprintf(vidx, sizeof(vidx), "%s/video.idx", dir);
    unlink(vidx);
    unlink(mid);
    rc = prep(&out, root, flags, vtest);
    CHECK_MSG(rc == 0, "rerun: %s", out);
    CHECK_STR_HAS(out, "40 chunks (39 reused)");
    free(out);
    CHECK(tbt_exists(mid) && tbt_exists(mid_idx));
    CHECK_EQ(file_stamp(first), stamp);
    check_against_source(vtest, dir, 30, 320, 1);

    /* A second prep of a video another one is writing fails at once, naming it, and leaves
     * that one's files alone (flock(1) holds the lock prep takes). */
    tbt_case = "a second prep of the same video";
    unlink(vidx);
    rc = tbt_run(&out, 60, "flock %s/.lock %s prep --out %s %s %s", dir, tbt_tubelet(), root,
                 flags, vtest);
    CHECK_MSG(rc == 1, "prep under a held lock: rc %d: %s", rc, out);
    CHECK_STR_HAS(out, "another tubelet prep is writing");
    free(out);
    CHECK_EQ(file_stamp(first), stamp);
    rc = prep(&out, root, flags, vtest);
    CHECK_MSG(rc == 0, "rerun once the lock is free: %s", out);
    CHECK_STR_HAS(out, "40 chunks (40 reused)");
    free(out);

    /* Other settings: refused, nothing touched (test_other_settings); with --overwrite nothing
     * is reused, and the old chunks are cleaned away. */
    tbt_case = "rerun with other settings";
    rc = prep(&out, root, "--crf 0 --preset ultrafast --chunk-seconds 7 --threads 1", vtest);
    CHECK_MSG(rc == 1, "rerun: %s", out);
    CHECK_STR_HAS(out, "was prepared with --chunk-seconds 2, this run asks --chunk-seconds 7");
    free(out);
    CHECK_EQ(file_stamp(first), stamp);
    rc = prep(&out, root, "--crf 0 --preset ultrafast --chunk-seconds 7 --threads 1 --overwrite",
              vtest);
    CHECK_MSG(rc == 0, "rerun: %s", out);
    CHECK_STR_HAS(out, "12 chunks (0 reused)");
    free(out);
    CHECK_EQ(count_files(dir, ".mp4"), 12);
    CHECK_EQ(count_files(dir, ".idx"), 13);
    check_against_source(vtest, dir, 30, 320, 1);
}

static void test_interrupt(void)
{
    tbt_case = "ctrl-c";
    const char *vtest = tbt_opencv_video("vtest.avi");
    char root[4200], dir[8192], first[4500], *out = NULL;
    if (!vtest)
        return;
    snprintf(root, sizeof(root), "%s/sigint", tbt_dir());
    snprintf(dir, sizeof(dir), "%s/vtest.mp4", root);
    snprintf(first, sizeof(first), "%s/0.idx", dir);
    int rc = tbt_run(&out, 120,
                     "%s prep --out %s --chunk-seconds 2 --threads 1 %s & pid=$!; "
                     "while [ ! -f %s ]; do kill -0 $pid 2>/dev/null || exit 3; sleep 0.01; "
                     "done; kill -INT $pid; wait $pid; echo status=$?",
                     tbt_tubelet(), root, vtest, first);
    CHECK_EQ(rc, 0);
    CHECK_STR_HAS(out, "status=1");
    CHECK_STR_HAS(out, "canceled");
    free(out);
    CHECK(!tb_index_exists(dir));
    CHECK(tbt_exists(first));
    CHECK_EQ(count_files(dir, ".part"), 0);
}

/* Noise is never a video: ffmpeg finds a stream (often raw h263, whose start code is 22 bits
 * of random chance) in a few of these, without a frame size or any decodable frame; probe and
 * prep must refuse every one, never report a 0x0 video. */
static void test_noise(void)
{
    const char *d = tbt_dir();
    char path[4200], root[4200], *out = NULL;
    int n_refused = 0, n_seeds = 120;
    snprintf(path, sizeof(path), "%s/noise.avi", d);
    snprintf(root, sizeof(root), "%s/noise_out", d);
    tbt_case = "noise";
    for (int seed = 1; seed <= n_seeds; seed++) {
        CHECK_EQ(tbt_write_noise(path, -1, 300000, (uint64_t)seed), 0);
        int rc = tbt_run(&out, 60, "%s probe %s", tbt_tubelet(), path);
        CHECK_MSG(rc == 1, "seed %d: probe exit status %d (want 1): %s", seed, rc, out);
        CHECK_STR_HAS(out, "noise.avi: ");
        n_refused += rc == 1;
        free(out);
        if (seed % 30)
            continue;
        rc = tbt_run(&out, 60, "%s prep --out %s %s", tbt_tubelet(), root, path);
        CHECK_MSG(rc == 1, "seed %d: prep exit status %d (want 1): %s", seed, rc, out);
        CHECK_STR_HAS(out, "FAIL ");
        free(out);
    }
    CHECK_EQ(n_refused, n_seeds);
}

static void test_bad_inputs(void)
{
    const char *d = tbt_dir();
    const char *box = tbt_opencv_video("box.mp4");
    const char *vtest = tbt_opencv_video("vtest.avi");
    char *out = NULL, root[4200];
    int rc;
    snprintf(root, sizeof(root), "%s/bad_out", d);

    /* same: prep, probe and frames (and VideoReader: tests/python) say the same words; the
     * cut files are probed with a warning instead. */
    struct {
        const char *name, *make, *expect;
        int same;
    } bad[] = {
        {"missing.mp4", "true", "missing.mp4: no such file or directory", 1},
        {"empty.mp4", ": > empty.mp4", "empty.mp4: empty file (0 bytes)", 1},
        {"text.mp4", "echo 'not a video at all' > text.mp4",
         "text.mp4: cannot open: not a video file FFmpeg knows", 1},
        {"audio.m4a", "ffmpeg -nostdin -v error -f lavfi -i sine=d=2 audio.m4a",
         "audio.m4a: no video stream (only audio)", 1},
        /* an attached picture (cover art) is no video stream */
        {"art.mp3", "ffmpeg -nostdin -v error -f lavfi -i sine=d=3 -f lavfi -i "
         "testsrc=s=64x64:d=1 -map 0:a -map 1:v -frames:v 1 -c:v png -disposition:v "
         "attached_pic art.mp3", "art.mp3: no video stream (only audio and a cover picture)", 1},
        {"art.m4a", "ffmpeg -nostdin -v error -f lavfi -i sine=d=3 -f lavfi -i "
         "testsrc=s=64x64:d=1 -map 0:a -map 1:v -frames:v 1 -c:v mjpeg -disposition:v "
         "attached_pic art.m4a", "art.m4a: no video stream (only audio and a cover picture)", 1},
        {"fifo.mp4", "mkfifo fifo.mp4", "fifo.mp4: not a regular file (a FIFO)", 1},
        {"cut.mp4", NULL, "cut.mp4: ", 0},
        {"cut.avi", NULL, "cut.avi: truncated or corrupt", 0},
    };
    char cmd[8192];
    tbt_run(NULL, 10, "mkdir -p %s/bad", d);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (!strcmp(bad[i].name, "cut.mp4"))
            snprintf(cmd, sizeof(cmd), "head -c 700000 %s > cut.mp4", box);
        else if (!strcmp(bad[i].name, "cut.avi"))
            snprintf(cmd, sizeof(cmd), "head -c 3000000 %s > cut.avi", vtest);
        else
            snprintf(cmd, sizeof(cmd), "%s", bad[i].make);
        tbt_run(NULL, 60, "cd %s/bad && %s", d, cmd);
        tbt_case = bad[i].name;
        rc = tbt_run(&out, 120, "%s prep --out %s %s/bad/%s", tbt_tubelet(), root, d,
                     bad[i].name);
        CHECK_MSG(rc == 1, "%s: exit status %d (want 1): %s", bad[i].name, rc, out);
        CHECK_STR_HAS(out, "FAIL ");
        CHECK_STR_HAS(out, bad[i].expect);
        free(out);
        rc = tbt_run(&out, 120, "%s probe %s/bad/%s", tbt_tubelet(), d, bad[i].name);
        CHECK_MSG(rc == 1 || !bad[i].same, "probe %s: exit status %d: %s", bad[i].name, rc, out);
        CHECK_MSG(rc <= 1, "probe %s crashed (status %d)", bad[i].name, rc);
        if (bad[i].same)
            CHECK_STR_HAS(out, bad[i].expect);
        free(out);
        if (!bad[i].same)
            continue;
        rc = tbt_run(&out, 30, "%s frames %s/bad/%s --frames 0 --out %s/bad/f.raw",
                     tbt_tubelet(), d, bad[i].name, d);
        CHECK_MSG(rc == 1, "frames %s: exit status %d: %s", bad[i].name, rc, out);
        CHECK_STR_HAS(out, bad[i].expect);
        free(out);
    }
    /* Devices and directories are not regular files either. */
    tbt_case = "not regular files";
    rc = tbt_run(&out, 30, "%s probe /dev/null", tbt_tubelet());
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "/dev/null: not a regular file (a character device)");
    free(out);
    rc = tbt_run(&out, 30, "%s frames /dev/zero --frames 0 --out %s/bad/f.raw", tbt_tubelet(),
                 d);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "/dev/zero: not a regular file (a character device)");
    free(out);
    rc = tbt_run(&out, 30, "%s prep --out %s %s/bad", tbt_tubelet(), root, d);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "bad: not a regular file (a directory)");
    free(out);

    /* One bad source among good ones: the good ones finish, the status says failure. */
    tbt_case = "bad among good";
    const char *cup = tbt_opencv_video("cup.mp4");
    rc = tbt_run(&out, 300, "%s prep --out %s --jobs 2 --chunk-seconds 5 %s/bad/text.mp4 %s "
                 "%s/bad/missing.mp4", tbt_tubelet(), root, d, cup, d);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "2 of 3 sources failed");
    CHECK_STR_HAS(out, "ok   ");
    free(out);
    char dir[8192];
    snprintf(dir, sizeof(dir), "%s/cup.mp4", root);
    CHECK(tb_index_exists(dir));

    tbt_case = "unwritable output";
    rc = tbt_run(&out, 60, "%s prep --out %s/bad/text.mp4/root %s", tbt_tubelet(), d, cup);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "text.mp4");
    CHECK_STR_HAS(out, "is not a directory");
    free(out);

    tbt_case = "same output name";
    tbt_run(NULL, 10, "mkdir -p %s/a %s/b && cp %s %s/a/clip.mp4 && cp %s %s/b/clip.mp4", d, d,
            cup, d, cup, d);
    rc = tbt_run(&out, 120, "%s prep --out %s --jobs 2 %s/a/clip.mp4 %s/b/clip.mp4",
                 tbt_tubelet(), root, d, d);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "same output name");
    free(out);

    tbt_case = "bad settings";
    rc = tbt_run(&out, 60, "%s prep --out %s --fps 30000/1001 --chunk-seconds 15 %s",
                 tbt_tubelet(), root, cup);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "not a whole number of frames");
    free(out);
    rc = tbt_run(&out, 60, "%s prep --out %s --short-side 301 %s", tbt_tubelet(), root, cup);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "even number of pixels");
    free(out);
    rc = tbt_run(&out, 60, "%s prep --out %s --preset nonsense %s", tbt_tubelet(), root, cup);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "preset 'nonsense'");
    free(out);
    /* A refused setting leaves the finished video alone. */
    snprintf(dir, sizeof(dir), "%s/cup.mp4", root);
    CHECK(tb_index_exists(dir));

    tbt_case = "broken index";
    tbt_run(NULL, 10, "sed -i 's/^frames .*/frames 7/' %s/video.idx", dir);
    rc = tbt_run(&out, 60, "%s probe %s", tbt_tubelet(), dir);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "video.idx: chunks hold 243 frames but the video has 7");
    free(out);
    tbt_run(NULL, 10, "printf 'tubelet-video 1\\nsize 10\\n' > %s/video.idx", dir);
    rc = tbt_run(&out, 60, "%s probe %s", tbt_tubelet(), dir);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "video.idx:2: malformed");
    free(out);
    tbt_run(NULL, 10, "rm %s/video.idx", dir);
    rc = tbt_run(&out, 60, "%s probe %s", tbt_tubelet(), dir);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "no video.idx");
    free(out);
}

/* A source cut short (a faststart MP4 without its last four sevenths): prep fails with one
 * message, whatever the decoder's threads (with two frame threads the cut once surfaced as
 * "cannot drain decoder"), naming both lengths and what to do; probe prints what decodes,
 * warns the same and exits 1; the re-encode the message gives makes a file prep takes. */
static void test_truncated(void)
{
    tbt_case = "truncated source";
    const char *d = tbt_dir();
    char *out = NULL, first[2048] = "";
    int rc = tbt_run(&out, 120, "mkdir -p %s/trunc && cd %s/trunc && ffmpeg -nostdin -v error "
                     "-f lavfi -i testsrc2=size=320x240:rate=30 -t 16 -c:v libx264 -pix_fmt "
                     "yuv420p -movflags +faststart whole.mp4 && head -c $(( $(stat -c %%s "
                     "whole.mp4) * 3 / 7 )) whole.mp4 > cut.mp4", d, d);
    CHECK_MSG(rc == 0, "ffmpeg: %s", out);
    free(out);
    for (int threads = 1; threads <= 4; threads++) {
        rc = tbt_run(&out, 120, "cd %s/trunc && %s prep cut.mp4 --out chunks --preset "
                     "ultrafast --threads %d", d, tbt_tubelet(), threads);
        CHECK_MSG(rc == 1, "--threads %d: exit %d: %s", threads, rc, out);
        CHECK_STR_HAS(out, "FAIL cut.mp4: cut.mp4: truncated or corrupt: the container says "
                           "16.00 s (480 frames) but only ");
        CHECK_STR_HAS(out, "If a copy or download cut it short, fetch it again");
        CHECK_MSG(out && !strstr(out, "drain"), "--threads %d: %s", threads, out);
        /* One message, the same for every thread count. */
        char *msg = out ? strstr(out, "FAIL ") : NULL;
        if (msg) {
            msg[strcspn(msg, "\n")] = '\0';
            if (!first[0])
                snprintf(first, sizeof(first), "%s", msg);
            CHECK_MSG(!strcmp(first, msg), "--threads %d says '%s', --threads 1 '%s'", threads,
                      msg, first);
        }
        free(out);
    }
    /* The decoded length and frames the message names are probe's. */
    double got_s = -1;
    long long got_frames = -1;
    const char *p = strstr(first, "but only ");
    CHECK_MSG(p && sscanf(p, "but only %lf s (%lld frames) decode", &got_s, &got_frames) == 2,
              "%s", first);
    CHECK_MSG(got_s > 1 && got_s < 15 && got_frames > 30 && got_frames < 450, "%s", first);
    rc = tbt_run(&out, 120, "cd %s/trunc && %s probe cut.mp4 2>probe.err; echo status=$?; "
                 "cat probe.err", d, tbt_tubelet());
    CHECK_STR_HAS(out, "status=1");
    CHECK_STR_HAS(out, "\"frames_declared\": 480,");
    char want[256];
    snprintf(want, sizeof(want), "\"frames\": %lld,", got_frames);
    CHECK_STR_HAS(out, want);
    CHECK_STR_HAS(out, "tubelet probe: warning: cut.mp4: truncated or corrupt: the container "
                       "says 16.00 s (480 frames)");
    free(out);
    /* The whole file probes clean. */
    rc = tbt_run(&out, 120, "cd %s/trunc && %s probe whole.mp4", d, tbt_tubelet());
    CHECK_EQ(rc, 0);
    CHECK_STR_HAS(out, "\"frames\": 480,");
    CHECK_MSG(out && !strstr(out, "warning"), "%s", out);
    free(out);
    /* The library's probe holds the decoded length and the same warning. */
    struct tb_probe *pr = NULL;
    char path[4300];
    snprintf(path, sizeof(path), "%s/trunc/cut.mp4", d);
    CHECK_EQ(tb_probe(&pr, path, 1), 0);
    if (pr) {
        CHECK_EQ(pr->n_frames, got_frames);
        CHECK_NEAR(pr->decoded_duration, got_s, 0.005);
        CHECK_STR_HAS(pr->warning, "truncated or corrupt: the container says 16.00 s");
        tb_probe_free(&pr);
    }
    /* Do what the message says. */
    const char *cmd = strstr(first, "prep the result: ");
    CHECK(cmd != NULL);
    if (cmd) {
        cmd += strlen("prep the result: ");
        rc = tbt_run(&out, 120, "cd %s/trunc && %s && %s prep fixed/cut.mp4 --out chunks "
                     "--preset ultrafast", d, cmd, tbt_tubelet());
        CHECK_MSG(rc == 0, "%s: %s", cmd, out);
        CHECK_STR_HAS(out, "ok   fixed/cut.mp4 -> chunks/cut.mp4");
        free(out);
    }
}

/* A prepared video belongs to its source: another file with the same stem is refused,
 * naming both, and changes nothing, unless --overwrite; the same source (as given, by
 * another path, or moved with its size and time) is prepared again as before, and an
 * unfinished video is replaced as before. */
static void test_same_stem(void)
{
    tbt_case = "another source, the same stem";
    const char *d = tbt_dir(), *t = tbt_tubelet();
    char *out = NULL, dir[4300], vidx[4400];
    const char *flags = "--preset ultrafast --chunk-seconds 1 --short-side 96";
    int rc = tbt_run(&out, 120, "mkdir -p %s/stem/a %s/stem/b %s/stem/c && cd %s/stem && "
                     "ffmpeg -nostdin -v error -f lavfi -i testsrc2=size=160x120:rate=30 -t 2 "
                     "-c:v libx264 a/clip.mp4 && ffmpeg -nostdin -v error -f lavfi -i "
                     "testsrc=size=160x120:rate=25 -t 3 -c:v libx264 b/clip.mp4 && cp -p "
                     "a/clip.mp4 c/clip.mp4", d, d, d, d);
    CHECK_MSG(rc == 0, "ffmpeg: %s", out);
    free(out);
    snprintf(dir, sizeof(dir), "%s/stem/root/clip.mp4", d);
    snprintf(vidx, sizeof(vidx), "%s/video.idx", dir);
    rc = tbt_run(&out, 120, "cd %s/stem && %s prep a/clip.mp4 --out root %s", d, t, flags);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    int64_t stamp = file_stamp(vidx);
    CHECK(stamp >= 0);

    rc = tbt_run(&out, 120, "cd %s/stem && %s prep b/clip.mp4 --out root %s", d, t, flags);
    CHECK_MSG(rc == 1, "exit %d: %s", rc, out);
    CHECK_STR_HAS(out, "FAIL b/clip.mp4: b/clip.mp4: root/clip.mp4 already holds the video "
                       "prepared from a/clip.mp4");
    CHECK_STR_HAS(out, "give --overwrite to replace it");
    free(out);
    CHECK_EQ(file_stamp(vidx), stamp);
    struct tb_video_index *idx = NULL;
    CHECK_EQ(tb_index_load(&idx, dir), 0);
    CHECK(idx && !strcmp(idx->source, "a/clip.mp4"));
    tb_index_free(&idx);

    /* The same source: as given, by another path, and a copy with its size and time. */
    tbt_case = "the same source again";
    static const char *const same[] = {"a/clip.mp4", "./a/../a/clip.mp4", "c/clip.mp4"};
    for (int i = 0; i < 3; i++) {
        rc = tbt_run(&out, 120, "cd %s/stem && %s prep %s --out root %s", d, t, same[i], flags);
        CHECK_MSG(rc == 0, "%s: %s", same[i], out);
        CHECK_STR_HAS(out, "2 chunks (2 reused)");
        free(out);
    }
    CHECK_EQ(file_stamp(vidx), stamp);

    tbt_case = "--overwrite";
    rc = tbt_run(&out, 120, "cd %s/stem && %s prep b/clip.mp4 --out root %s --overwrite", d, t,
                 flags);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "3 chunks (0 reused)");
    free(out);
    CHECK_EQ(tb_index_load(&idx, dir), 0);
    CHECK(idx && !strcmp(idx->source, "b/clip.mp4") && idx->n_chunks == 3);
    tb_index_free(&idx);
    /* An unfinished video (no video.idx: interrupted, or refused as truncated) holds nothing
     * finished: another source replaces it. */
    unlink(vidx);
    rc = tbt_run(&out, 120, "cd %s/stem && %s prep a/clip.mp4 --out root %s", d, t, flags);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "2 chunks (0 reused)");
    free(out);
    CHECK_EQ(tb_index_load(&idx, dir), 0);
    CHECK(idx && !strcmp(idx->source, "a/clip.mp4"));
    tb_index_free(&idx);
}

/* A finished video's encoding settings are its own: the same source with another
 * --short-side (or keyframe interval, B-frames, tune, ...) into the same root is refused,
 * naming the settings on both sides as flags, and changes nothing, unless --overwrite; a
 * source changed in place is encoded again. */
static void test_other_settings(void)
{
    tbt_case = "other settings";
    const char *d = tbt_dir(), *t = tbt_tubelet();
    const char *flags = "--preset ultrafast --chunk-seconds 1";
    char *out = NULL, dir[4300], vidx[4400];
    int rc = tbt_run(&out, 120, "mkdir -p %s/settings && cd %s/settings && ffmpeg -nostdin -v "
                     "error -f lavfi -i testsrc2=size=160x120:rate=30 -t 2 -c:v libx264 v.mp4",
                     d, d);
    CHECK_MSG(rc == 0, "ffmpeg: %s", out);
    free(out);
    snprintf(dir, sizeof(dir), "%s/settings/root/v.mp4", d);
    snprintf(vidx, sizeof(vidx), "%s/video.idx", dir);
    rc = tbt_run(&out, 120, "cd %s/settings && %s prep v.mp4 --out root %s --short-side 96", d,
                 t, flags);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    int64_t stamp = file_stamp(vidx);
    static const char *const asks[][3] = {
        {"--short-side 64", "--short-side 96", "--short-side 64"},
        {"--short-side 96 --gop 8 --no-bframes --tune none",
         "--gop 30 --tune fastdecode --bframes", "--gop 8 --tune none --no-bframes"},
        {"--short-side 96 --crf 30 --fps 25", "--fps 30/1", "--fps 25/1"},
        {"--short-side 96 --fps source", "--fps 30/1", "--fps source"},
    };
    for (int i = 0; i < 4; i++) {
        rc = tbt_run(&out, 120, "cd %s/settings && %s prep v.mp4 --out root %s %s", d, t, flags,
                     asks[i][0]);
        CHECK_MSG(rc == 1, "%s: exit %d: %s", asks[i][0], rc, out);
        char want[512];
        snprintf(want, sizeof(want), "root/v.mp4 was prepared with %s", asks[i][1]);
        CHECK_STR_HAS(out, want);
        snprintf(want, sizeof(want), "this run asks %s", asks[i][2]);
        CHECK_STR_HAS(out, want);
        CHECK_STR_HAS(out, "give --overwrite to encode it again with the new settings");
        free(out);
        CHECK_EQ(file_stamp(vidx), stamp);
    }
    rc = tbt_run(&out, 120, "cd %s/settings && %s prep v.mp4 --out root %s --short-side 96", d,
                 t, flags);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "2 chunks (2 reused)");
    free(out);

    tbt_case = "other settings, --overwrite";
    rc = tbt_run(&out, 120, "cd %s/settings && %s prep v.mp4 --out root %s --short-side 64 "
                 "--overwrite", d, t, flags);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "2 chunks (0 reused), 86x64");
    free(out);
    struct tb_video_index *idx = NULL;
    CHECK_EQ(tb_index_load(&idx, dir), 0);
    CHECK(idx && idx->height == 64 && strstr(idx->params, "short_side=64 "));
    tb_index_free(&idx);

    tbt_case = "a source changed in place";
    rc = tbt_run(&out, 120, "cd %s/settings && ffmpeg -nostdin -v error -y -f lavfi -i "
                 "testsrc=size=160x120:rate=30 -t 3 -c:v libx264 v.mp4 && %s prep v.mp4 --out "
                 "root %s --short-side 64", d, t, flags);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "3 chunks (0 reused)");
    free(out);
}

int main(int argc, char **argv)
{
    tbt_begin("prep");
    /* A single case can be run by name: test_prep resume */
    const char *only = argc > 1 ? argv[1] : NULL;
#define RUN(name) if (!only || !strcmp(only, #name)) test_##name()
    RUN(synth_lossless);
    RUN(real_lossless);
    RUN(real_default);
    RUN(odd_sources);
    RUN(odd_keep_size);
    RUN(colors);
    RUN(source_fps);
    RUN(resume);
    RUN(interrupt);
    RUN(bad_inputs);
    RUN(truncated);
    RUN(same_stem);
    RUN(other_settings);
    RUN(encodings);
    RUN(noise);
    if (!tbt_opencv_video("vtest.avi")) {
        fprintf(stderr, "opencv-doc videos are missing (scripts/setup.sh installs them)\n");
        return tbt_failures ? 1 : TBT_SKIP;
    }
    TBT_EXIT();
}
