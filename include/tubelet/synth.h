/* include/tubelet/synth.h - a synthetic dataset in EPIC-Kitchens-100 form: long H.264 videos of
 * coloured shapes performing actions one after another on textured, slowly changing
 * backgrounds, with EK-100 style annotation CSVs. Verbs need motion to tell apart (a single
 * frame of "move left" looks like one of "move right"); distractor shapes drift slowly.
 * The embedded default for the demo and the tests. Deterministic for a seed.
 * Tests: tests/test_synth.c. */
#ifndef TUBELET_SYNTH_H
#define TUBELET_SYNTH_H

#include "tubelet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TB_SYNTH_N_VERBS 8
#define TB_SYNTH_N_SHAPES 4
#define TB_SYNTH_N_COLOURS 4
#define TB_SYNTH_N_NOUNS (TB_SYNTH_N_SHAPES * TB_SYNTH_N_COLOURS)

/* Verb keys, in class-id order: "move-left", "move-right", "move-up", "move-down",
 * "rotate-clockwise", "rotate-anticlockwise", "grow", "shrink". */
TB_API const char *tb_synth_verb(int verb_class);
/* Noun keys, in class-id order: colour-shape, e.g. "red-square"; class = shape * 4 + colour. */
TB_API const char *tb_synth_noun(int noun_class, char *buf, size_t size);
/* The RGB colour a noun class is drawn in (no distractor or background pixel comes near it). */
TB_API int tb_synth_noun_rgb(int noun_class, uint8_t rgb[3]);

struct tb_synth_opts {
    const char *out_dir;        /* borrowed: OUT; writes OUT/videos/, OUT/annotations/ */
    int n_videos;
    int seconds;                /* length of each video */
    int width, height;          /* even */
    double actor_scale;         /* size of the acting shapes, as a multiple of the usual 16-20%
                                 * of the short side across; 0 means 1 (0.5..2.5) */
    int fps_num, fps_den;
    uint64_t seed;
    int crf;                    /* x264 quality of the videos */
    const char *preset;         /* x264 preset */
    int n_threads;              /* encoder threads per video; 0 = FFmpeg's choice */
    int n_jobs;                 /* videos made in parallel (at least 1) */
    const volatile int *cancel; /* borrowed, may be NULL: stop soon with TB_ECANCELED */
};

struct tb_synth_result {
    int n_videos, n_train_videos, n_val_videos;
    int n_train_actions, n_val_actions;
};

/* Write the dataset. Videos whose file already exists are written again (same seed, same
 * content); every file appears atomically. */
TB_API int tb_synth(const struct tb_synth_opts *opts, struct tb_synth_result *res);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_SYNTH_H */
