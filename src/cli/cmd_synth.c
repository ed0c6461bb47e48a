/* src/cli/cmd_synth.c - `tubelet synth --out DIR`: write the synthetic EPIC-Kitchens-style
 * dataset (videos and annotation CSVs). Tests: tests/test_synth.c. */
#include <stdio.h>

#include "cli/cli.h"
#include "tubelet/synth.h"

struct synth_config {
    char *out;
    int videos;
    int seconds;
    struct cli_size size;
    struct cli_rate fps;
    double actor_scale;
    int seed;
    int crf;
    char *preset;
    int threads;
    int jobs;
};

#define F(name, type, field, def, meta, help, ...)                                       \
    CLI_FLAG(name, type, struct synth_config, field, def, meta, help, __VA_ARGS__)
static const struct cli_flag synth_flags[] = {
    F("out", CLI_STR, out, NULL, "DIR",
      "output directory: DIR/videos/*.mp4 and DIR/annotations/EPIC_100_*.csv", CLI_NO_RANGE),
    F("videos", CLI_INT, videos, "8", "N",
      "number of videos", 1, 396),
    F("seconds", CLI_INT, seconds, "60", "S",
      "length of each video", 5, 86400),
    F("size", CLI_SIZE, size, "320x240", "WxH",
      "frame size (even)", 64, 4096),
    F("fps", CLI_RATE, fps, "30", "F",
      "frame rate", 1, 240),
    F("actor-scale", CLI_DOUBLE, actor_scale, "1", "X",
      "size of the acting shapes, times the usual 16-20% of the short side", 0.5, 2.5),
    F("seed", CLI_INT, seed, "0", "K",
      "random seed; same seed, same dataset", 0, 2147483647),
    F("crf", CLI_INT, crf, "18", "Q",
      "x264 quality of the videos", 0, 51),
    F("preset", CLI_STR, preset, "fast", "NAME",
      "x264 preset", CLI_NO_RANGE),
    F("threads", CLI_INT, threads, "4", "N",
      "encoder threads; x264's output depends on this, so a fixed count keeps a seed's videos "
      "byte-identical on every machine (0 = one per core)", 0, 1024),
    F("jobs", CLI_INT, jobs, "2", "J", "videos made in parallel (the files do not depend on it)",
      1, 64),
};
#undef F

static int run_synth(void *config, int n_args, char **args)
{
    struct synth_config *c = config;
    struct tb_synth_result res;
    (void)n_args;
    (void)args;
    if (!c->out[0]) {
        fprintf(stderr, "tubelet synth: --out DIR is required\n");
        return 2;
    }
    struct tb_synth_opts o = {
        .out_dir = c->out, .n_videos = c->videos, .seconds = c->seconds, .width = c->size.w,
        .height = c->size.h, .actor_scale = c->actor_scale, .fps_num = c->fps.num,
        .fps_den = c->fps.den, .seed = (uint64_t)c->seed, .crf = c->crf, .preset = c->preset,
        .n_threads = c->threads, .n_jobs = c->jobs, .cancel = &cli_cancel,
    };
    double t0 = cli_now();
    int rc = tb_synth(&o, &res);
    if (rc < 0) {
        cli_report("synth", rc);
        return 1;
    }
    printf("synth: %d videos (%d train, %d val), %d train and %d val actions in %s, %.1f s\n",
           res.n_videos, res.n_train_videos, res.n_val_videos, res.n_train_actions,
           res.n_val_actions, c->out, cli_now() - t0);
    return 0;
}

const struct cli_command cli_cmd_synth = {
    .name = "synth",
    .args = "",
    .summary = "write a synthetic EPIC-Kitchens-style dataset (the embedded default)",
    .details = "Shapes (square, triangle, cross, bar) in four colours move left/right/up/down,\n"
               "rotate either way, grow or shrink, one action after another, over textured,\n"
               "slowly changing backgrounds with drifting distractor shapes. Annotations:\n"
               "EPIC_100_train.csv and EPIC_100_validation.csv (split by video) with the\n"
               "EPIC-Kitchens-100 columns, plus the verb and noun class lists.",
    .flags = synth_flags,
    .n_flags = (int)(sizeof(synth_flags) / sizeof(synth_flags[0])),
    .config_size = sizeof(struct synth_config),
    .min_args = 0,
    .max_args = 0,
    .run = run_synth,
};
