/* src/cli/cmd_prep.c - `tubelet prep SRC... --out ROOT`: sources to prepared chunked videos,
 * one line per source, exit 1 if any failed. Tests: tests/test_prep.c, tests/test_cli.c. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cmd_prep_plan.h"
#include "tubelet/prep.h"

#define STR2(x) #x
#define STR(x) STR2(x)

struct prep_config {
    char *out;
    int chunk_seconds;
    int short_side;
    char *fps;            /* a rate, or "source" (prep_resolve reads it into rate) */
    struct cli_rate rate; /* 0/0 for source */
    int gop;
    int crf;
    char *preset;
    char *tune;
    int bframes;
    char *ext;
    int jobs;
    int threads;
    int overwrite;
    int plan;
    int apply;
    char *ann;
    char *workload;
    double target;
    int plan_videos;
    double plan_seconds;
};

#define F(name, type, field, def, meta, help, ...)                                       \
    CLI_FLAG(name, type, struct prep_config, field, def, meta, help, __VA_ARGS__)
static const struct cli_flag prep_flags[] = {
    F("out", CLI_STR, out, NULL, "ROOT",
      "output root; videos go to ROOT/<name>.<ext>/", CLI_NO_RANGE),
    F("chunk-seconds", CLI_INT, chunk_seconds, STR(TB_PREP_DEFAULT_CHUNK_SECONDS), "S",
      "chunk length in seconds", 1, 86400),
    F("short-side", CLI_INT, short_side, STR(TB_PREP_DEFAULT_SHORT_SIDE), "PX",
      "resize so the shorter side is PX (even); 0 keeps the source size and pixels (an odd "
      "width or height loses its last column or row)", 0, 8192),
    F("fps", CLI_STR, fps, TB_PREP_DEFAULT_FPS, "F",
      "constant output frame rate (30, 30000/1001, ...), or source: each video at its own "
      "rate (above)", CLI_NO_RANGE),
    F("gop", CLI_INT, gop, STR(TB_PREP_DEFAULT_GOP), "N",
      "keyframe interval in frames (x264's own default is 250)", 1, 100000),
    F("crf", CLI_INT, crf, STR(TB_PREP_DEFAULT_CRF), "Q",
      "x264 constant rate factor; 0 is lossless", 0, 51),
    F("preset", CLI_STR, preset, TB_PREP_DEFAULT_PRESET, "NAME",
      "x264 preset (ultrafast ... veryslow)", CLI_NO_RANGE),
    F("tune", CLI_STR, tune, TB_PREP_DEFAULT_TUNE, "NAME",
      "x264 tune, or none; fastdecode (CAVLC, no deblocking) decodes ~1.3-1.9x faster for "
      "~10% more bytes", CLI_NO_RANGE),
    F("bframes", CLI_BOOL, bframes, "true", "",
      "B-frames as the preset has them (3); --no-bframes: none, so no frame waits for a "
      "later one", CLI_NO_RANGE),
    F("ext", CLI_STR, ext, TB_PREP_DEFAULT_EXT, "EXT",
      "chunk file extension and directory suffix (AVION's EPIC-Kitchens data: MP4)", CLI_NO_RANGE),
    F("jobs", CLI_INT, jobs, "1", "J",
      "sources prepared in parallel", 1, 1024),
    F("threads", CLI_INT, threads, "0", "N",
      "decoder/encoder threads per source; 0 = all cores / jobs", 0, 1024),
    F("overwrite", CLI_BOOL, overwrite, "false", "",
      "replace a video prepared from another source with the same stem, or with other "
      "encoding settings (else refused)",
      CLI_NO_RANGE),
    F("plan", CLI_BOOL, plan, "false", "",
      "measure candidate encodings (GOP 250/30/16/8/1, B-frames, tune, short side) on a "
      "sample of SRC and print MB per hour and predicted clips/s per core for the clips of "
      "--ann; encodes nothing unless --apply", CLI_NO_RANGE),
    F("apply", CLI_BOOL, apply, "false", "",
      "with --plan: then prepare SRC into --out with the chosen encoding (--gop, --bframes, "
      "--tune given are replaced)", CLI_NO_RANGE),
    F("ann", CLI_STR, ann, NULL, "FILE",
      "with --plan: EPIC-Kitchens-100 CSV whose rows (video id = source file stem) give the "
      "clip windows", CLI_NO_RANGE),
    F("workload", CLI_STR, workload, "w1", "w1|w2",
      "with --plan: w1 (4 frames per clip) or w2 (16), AVION's segment sampling", CLI_NO_RANGE),
    F("target-clips-per-core", CLI_DOUBLE, target, "0", "X",
      "with --plan: clips per CPU-second to reach; 0 means 60 for w1, 10 for w2 (one H200 "
      "on 16 cores)", 0, 1e6),
    F("plan-videos", CLI_INT, plan_videos, "4", "N",
      "with --plan: sources sampled (spread over those with actions)", 1, 64),
    F("plan-seconds", CLI_DOUBLE, plan_seconds, "3", "S",
      "with --plan: seconds sampled from the start of each", 0.5, 60),
};
#undef F

struct report {
    pthread_mutex_t lock;
    const char *root;
    double t0;
};

static void on_done(void *user, int i_src, const char *src, int status,
                    const struct tb_prep_result *res, const char *errmsg)
{
    struct report *r = user;
    (void)i_src;
    pthread_mutex_lock(&r->lock);
    if (status < 0) {
        fprintf(stderr, "FAIL %s: %s\n", src, errmsg[0] ? errmsg : tb_strerror(status));
    } else {
        printf("ok   %s -> %s/%s: %lld frames, %d chunks (%d reused), %dx%d, %.1f s\n", src,
               r->root, res->name, (long long)res->n_frames, res->n_chunks,
               res->n_chunks_skipped, res->width, res->height, cli_now() - r->t0);
        if (res->n_bad_packets > 0)
            fprintf(stderr, "tubelet prep: warning: %s: %lld packets failed to decode and were "
                    "skipped\n", src, (long long)res->n_bad_packets);
    }
    fflush(stdout);
    pthread_mutex_unlock(&r->lock);
}

/* --fps: "source", or a rate as CLI_RATE takes it ("30", "30000/1001", 0.001 to 1000 fps).
 * cli_command.resolve: 0, or -1 after saying why (exit 2). */
static int prep_resolve(void *config)
{
    struct prep_config *c = config;
    const char *v = c->fps, *slash = strchr(v, '/');
    char *end = NULL;
    long long num, den = 1;
    if (!strcmp(v, "source")) {
        c->rate = (struct cli_rate){0, 0};
        return 0;
    }
    errno = 0;
    num = strtoll(v, &end, 10);
    if (end != v && slash && end == slash)
        den = strtoll(slash + 1, &end, 10);
    if (end == v || *end || errno || (slash && end == slash + 1) || num <= 0 || den <= 0 ||
        num > 2147483647 || den > 2147483647) {
        fprintf(stderr, "tubelet: --fps: malformed value '%s' (expected a rate such as 30 or "
                "30000/1001, or source)\n", v);
        return -1;
    }
    if ((double)num / (double)den < 0.001 || (double)num / (double)den > 1000) {
        fprintf(stderr, "tubelet: --fps: %s is out of range [0.001, 1000]\n", v);
        return -1;
    }
    c->rate = (struct cli_rate){(int)num, (int)den};
    return 0;
}

/* --plan: print the table. Returns 1 to go on preparing (--apply: c now holds the chosen
 * encoding), or 0 to stop with exit status *status. */
static int plan_first(struct prep_config *c, const struct tb_prep_opts *o, int n_args,
                      char **args, int *status)
{
    int n_frames = !strcmp(c->workload, "w1") ? 4 : !strcmp(c->workload, "w2") ? 16 : 0;
    *status = 2;
    if (!n_frames) {
        fprintf(stderr, "tubelet prep: unknown --workload '%s' (w1 or w2)\n", c->workload);
        return 0;
    }
    if (!c->ann[0]) {
        fprintf(stderr, "tubelet prep: --plan needs --ann FILE (the annotation CSV)\n");
        return 0;
    }
    struct cli_plan_args a = {
        .srcs = args, .n_srcs = n_args, .ann = c->ann, .n_frames = n_frames,
        .target = c->target > 0 ? c->target : n_frames == 4 ? 60 : 10,
        .n_videos = c->plan_videos, .seconds = c->plan_seconds, .prep = o,
    };
    struct tb_plan_encoding e;
    int found = cli_prep_plan(&a, &e);
    *status = found < 0 || (c->apply && found == 0);
    if (found <= 0 || !c->apply) {
        if (found == 0 && c->apply)
            fprintf(stderr, "tubelet prep: --apply: no encoding meets the target; nothing "
                    "prepared\n");
        return 0;
    }
    c->gop = e.gop;
    c->bframes = e.bframes;
    c->tune = e.fastdecode ? "fastdecode" : "none";
    c->short_side = e.short_side;
    printf("applying: preparing %d sources into %s\n", n_args, c->out);
    return 1;
}

static int run_prep(void *config, int n_args, char **args)
{
    struct prep_config *c = config;
    if (!c->out[0] && (!c->plan || c->apply)) {
        fprintf(stderr, "tubelet prep: --out ROOT is required\n");
        return 2;
    }
    if (c->apply && !c->plan) {
        fprintf(stderr, "tubelet prep: --apply goes with --plan\n");
        return 2;
    }
    if (c->plan && !c->rate.num) {
        fprintf(stderr, "tubelet prep: --plan measures at one rate: give --fps F (the rate of "
                "most of SRC) instead of --fps source\n");
        return 2;
    }
    if (c->plan) {
        struct tb_prep_opts po = {
            .out_root = c->out, .chunk_seconds = c->chunk_seconds, .short_side = c->short_side,
            .fps_num = c->rate.num, .fps_den = c->rate.den, .crf = c->crf, .preset = c->preset,
            .ext = c->ext, .n_threads = c->threads ? c->threads : cli_n_cpus(),
            .cancel = &cli_cancel,
        };
        int status;
        if (!plan_first(c, &po, n_args, args, &status))
            return status;
    }
    int threads = c->threads;
    if (threads == 0) {
        int jobs = c->jobs < n_args ? c->jobs : n_args;
        threads = cli_n_cpus() / (jobs > 0 ? jobs : 1);
        if (threads < 1)
            threads = 1;
    }
    struct tb_prep_opts o = {
        .out_root = c->out, .chunk_seconds = c->chunk_seconds, .short_side = c->short_side,
        .fps_num = c->rate.num, .fps_den = c->rate.den, .fps_source = !c->rate.num,
        .gop = c->gop, .crf = c->crf,
        .preset = c->preset, .tune = c->tune, .no_bframes = !c->bframes, .ext = c->ext,
        .n_threads = threads,
        .cancel = &cli_cancel, .overwrite = c->overwrite,
    };
    struct report r = {.root = c->out, .t0 = cli_now()};
    pthread_mutex_init(&r.lock, NULL);
    int rc = tb_prep_many(&o, (const char *const *)args, n_args, c->jobs, on_done, &r);
    pthread_mutex_destroy(&r.lock);
    if (rc < 0) {
        cli_report("prep", rc);
        return 1;
    }
    if (rc > 0) {
        fprintf(stderr, "tubelet prep: %d of %d sources failed%s\n", rc, n_args,
                cli_cancel ? " (canceled)" : "");
        return 1;
    }
    return 0;
}

const struct cli_command cli_cmd_prep = {
    .name = "prep",
    .args = "SRC...",
    .summary = "re-encode videos into short, resized, constant-rate H.264 chunks with an index",
    .details = "Frame n of the source resampled to --fps is frame n - k*chunk_frames of chunk k.\n"
               "--fps source keeps each video's own rate, recorded in its index: r_frame_rate\n"
               "for a constant-rate stream (every frame as it is), the average for a variable-\n"
               "rate one (avg_frame_rate more than 1% off r_frame_rate). A video longer than\n"
               "one chunk needs --chunk-seconds to be whole frames at its rate (15 s at\n"
               "30000/1001 is not; the refusal names a length that is: 1001 s).\n"
               "A rerun skips chunks already finished with the same settings; Ctrl-C stops\n"
               "after the current frame and keeps finished chunks. A video is named after its\n"
               "file's stem; another source with the same stem, or other encoding settings\n"
               "(--short-side, --gop, ...) for a finished video, is refused (video.idx names\n"
               "the source and settings) unless --overwrite is given.\n"
               "--plan --ann FILE: measure candidate encodings on a sample and print the table\n"
               "and the prep command of the cheapest meeting the target (docs/FORMATS.md,\n"
               "\"Choosing the encoding\"); --plan --apply: then prepare with it.",
    .flags = prep_flags,
    .n_flags = (int)(sizeof(prep_flags) / sizeof(prep_flags[0])),
    .config_size = sizeof(struct prep_config),
    .min_args = 1,
    .max_args = -1,
    .resolve = prep_resolve,
    .run = run_prep,
};
