/* src/cli/cmd_frames.c - `tubelet frames PATH --frames 0,10,20 --out F.png`: decode exactly
 * those frames of a prepared video or a plain file, cropped and resized as asked, and write
 * them (PNG or JPEG: stacked top to bottom; PPM: one image per frame; raw: RGB24 back to back;
 * any other extension is refused before decoding). Tests: tests/test_reader.c,
 * tests/test_cli_data.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tubelet/video.h"

struct frames_config {
    char *frames;
    char *crop;
    char *crop_mode;
    struct cli_size size;
    char *scaler;
    int flip;
    int seed;
    char *out;
};

#define F(name, type, field, def, meta, help, ...)                                            \
    CLI_FLAG(name, type, struct frames_config, field, def, meta, help, __VA_ARGS__)
static const struct cli_flag frames_flags[] = {
    F("frames", CLI_STR, frames, NULL, "LIST",
      "frame numbers: 0,10,20 or ranges 100-115 (any order, repeats allowed)", CLI_NO_RANGE),
    F("crop", CLI_STR, crop, NULL, "X,Y,W,H", "crop this rectangle (source pixels)",
      CLI_NO_RANGE),
    F("crop-mode", CLI_STR, crop_mode, "none", "none|center|rrc|multiscale",
      "none, center (square of the short side), rrc (random resized crop, scale 0.08-1), "
      "multiscale (VideoMAE); --crop sets fixed", CLI_NO_RANGE),
    F("size", CLI_SIZE, size, "0x0", "WxH", "output size; 0x0 keeps the crop's size", 0, 16384),
    F("scaler", CLI_STR, scaler, "bilinear", "NAME",
      "resize filter: bilinear (the training loader's), bicubic (ffmpeg's default), area or "
      "point; a crop at its own size is converted as ffmpeg does, whatever this is",
      CLI_NO_RANGE),
    F("flip", CLI_BOOL, flip, "false", "", "flip horizontally", CLI_NO_RANGE),
    F("seed", CLI_INT, seed, "0", "K", "seed for the random crop modes", 0, 2147483647),
    F("out", CLI_STR, out, NULL, "FILE",
      "FILE.png or FILE.jpg (frames stacked top to bottom), FILE.ppm (one image per frame), "
      "FILE.rgb, FILE.raw or no extension (RGB24 bytes)", CLI_NO_RANGE),
};
#undef F

/* "0,10,20-23" -> frame numbers. Returns the count or -1 after printing why. */
static int parse_frames(const char *s, int64_t **out)
{
    int cap = 16, n = 0;
    int64_t *v = malloc(sizeof(*v) * (size_t)cap);
    const char *p = s;
    while (v && *p) {
        char *end;
        errno = 0;
        long long a = strtoll(p, &end, 10), b;
        if (end == p || errno || a < 0)
            goto bad;
        b = a;
        if (*end == '-') {
            p = end + 1;
            b = strtoll(p, &end, 10);
            if (end == p || errno || b < a || b - a > 100000)
                goto bad;
        }
        for (long long f = a; f <= b; f++) {
            if (n == cap) {
                int64_t *g = realloc(v, sizeof(*v) * (size_t)(cap *= 2));
                if (!g)
                    goto bad;
                v = g;
            }
            v[n++] = f;
        }
        if (*end == ',')
            end++;
        else if (*end)
            goto bad;
        p = end;
    }
    if (!v || n == 0)
        goto bad;
    *out = v;
    return n;
bad:
    fprintf(stderr, "tubelet frames: --frames: cannot read '%s' (e.g. 0,10,20 or 100-115)\n", s);
    free(v);
    return -1;
}

/* --crop (fixed) or --crop-mode into spec's mode. 0, or 2 after saying why. */
static int parse_crop(const struct frames_config *c, struct tb_crop_spec *spec)
{
    if (c->crop[0]) {
        char tail;
        if (sscanf(c->crop, "%d,%d,%d,%d%c", &spec->x, &spec->y, &spec->w, &spec->h, &tail) != 4) {
            fprintf(stderr, "tubelet frames: --crop: expected X,Y,W,H, got '%s'\n", c->crop);
            return 2;
        }
        spec->mode = TB_CROP_FIXED;
    } else if (!strcmp(c->crop_mode, "center")) {
        spec->mode = TB_CROP_CENTER;
    } else if (!strcmp(c->crop_mode, "rrc")) {
        spec->mode = TB_CROP_RANDOM_RESIZED;
    } else if (!strcmp(c->crop_mode, "multiscale")) {
        spec->mode = TB_CROP_MULTISCALE;
    } else if (strcmp(c->crop_mode, "none")) {
        fprintf(stderr, "tubelet frames: --crop-mode: unknown mode '%s'\n", c->crop_mode);
        return 2;
    }
    return 0;
}

/* --scaler by name. 0, or 2 after saying why. */
static int parse_scaler(const char *name, enum tb_scaler *out)
{
    static const char *const scalers[] = {"bilinear", "bicubic", "area", "point"};
    *out = (enum tb_scaler)-1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, scalers[i]))
            *out = (enum tb_scaler)i;
    if ((int)*out < 0) {
        fprintf(stderr, "tubelet frames: --scaler: unknown '%s'\n", name);
        return 2;
    }
    return 0;
}

/* The output size: --size, else the crop's own (the fixed rectangle, the whole frame, the
 * square of the short side), or 224 for the random crops, which have no size of their own. */
static void out_size(const struct frames_config *c, const struct tb_crop_spec *spec,
                     const struct tb_video_info *info, int *w, int *h)
{
    *w = c->size.w;
    *h = c->size.h;
    if (*w > 0 && *h > 0)
        return;
    int side = info->width < info->height ? info->width : info->height;
    *w = spec->mode == TB_CROP_FIXED ? spec->w : spec->mode == TB_CROP_NONE ? info->width : side;
    *h = spec->mode == TB_CROP_FIXED ? spec->h : spec->mode == TB_CROP_NONE ? info->height : side;
    if (spec->mode == TB_CROP_RANDOM_RESIZED || spec->mode == TB_CROP_MULTISCALE)
        *w = *h = 224;
}

static int run_frames(void *config, int n_args, char **args)
{
    struct frames_config *c = config;
    struct tb_crop_spec spec = {.mode = TB_CROP_NONE, .scale_min = 0.08, .scale_max = 1,
                                .ratio_min = 3.0 / 4, .ratio_max = 4.0 / 3};
    struct tb_reader_opts ro = {0};
    struct tb_video_info info;
    tb_reader *r = NULL;
    int64_t *frames = NULL;
    uint8_t *rgb = NULL;
    int status = 1, rc, n, w, h;
    (void)n_args;

    if (!c->frames[0] || !c->out[0]) {
        fprintf(stderr, "tubelet frames: --frames LIST and --out FILE are required\n");
        return 2;
    }
    if (tb_image_format(c->out) < 0) {
        fprintf(stderr, "tubelet frames: --out %s\n", tb_errmsg());
        return 2;
    }
    if ((c->size.w == 0) != (c->size.h == 0)) {
        fprintf(stderr, "tubelet frames: --size %dx%d: give both sides (WxH), or 0x0 for the "
                "crop's own size\n", c->size.w, c->size.h);
        return 2;
    }
    if ((n = parse_frames(c->frames, &frames)) < 0)
        return 2;
    if (parse_crop(c, &spec) || parse_scaler(c->scaler, &ro.scaler)) {
        free(frames);
        return 2;
    }
    spec.flip = c->flip ? TB_FLIP_ALWAYS : TB_FLIP_NEVER;
    if ((rc = tb_reader_open(&r, &ro)) < 0 || (rc = tb_reader_info(r, args[0], &info)) < 0)
        goto fail;
    out_size(c, &spec, &info, &w, &h);
    if (!(rgb = malloc((size_t)w * h * 3 * (size_t)n))) {
        fprintf(stderr, "tubelet frames: out of memory\n");
        goto end;
    }
    tb_rng rng;
    tb_rng_init_for(&rng, (uint64_t)c->seed, TB_RNG_FRAMES, 0, 0);
    struct tb_clip_stats st;
    if ((rc = tb_reader_read(r, args[0], frames, n, &spec, &rng, w, h, rgb, &st)) < 0 ||
        (rc = tb_image_write(c->out, rgb, w, h, n)) < 0)
        goto fail;
    fprintf(stderr, "frames: %d frames %dx%d (crop %dx%d at %d,%d%s) -> %s; decoded %lld, "
            "skipped %lld, %d seeks\n", n, w, h, st.crop.w, st.crop.h, st.crop.x, st.crop.y,
            st.crop.flip ? ", flipped" : "", c->out, (long long)st.n_decoded,
            (long long)st.n_skipped, st.n_seeks);
    status = 0;
    goto end;
fail:
    cli_report("frames", rc);
end:
    tb_reader_close(&r);
    free(frames);
    free(rgb);
    return status;
}

const struct cli_command cli_cmd_frames = {
    .name = "frames",
    .args = "PATH",
    .summary = "decode exactly the given frames of a video, cropped and resized, to an image",
    .details = "PATH is a prepared video directory or any video file (a rotated one must be\n"
               "prepared first: prep turns it upright). Frame n is the n-th frame in\n"
               "presentation order, as ffmpeg's select=eq(n\\,N) counts. At the crop's own size\n"
               "(--size 0x0) the bytes are ffmpeg's -fps_mode passthrough -pix_fmt rgb24 (the\n"
               "whole command: docs/FORMATS.md); a resize uses --scaler\n"
               "(bilinear, as training does; bicubic gives ffmpeg's -vf scale=W:H). PNG and JPEG\n"
               "stack the frames top to bottom; PPM holds one image per frame; raw is RGB24.",
    .flags = frames_flags,
    .n_flags = (int)(sizeof(frames_flags) / sizeof(frames_flags[0])),
    .config_size = sizeof(struct frames_config),
    .min_args = 1,
    .max_args = 1,
    .run = run_frames,
};
