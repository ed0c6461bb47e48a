/* src/cli/cmd_prep_plan.h - `tubelet prep --plan`, called by cmd_prep.c. */
#ifndef TUBELET_CLI_CMD_PREP_PLAN_H
#define TUBELET_CLI_CMD_PREP_PLAN_H

#include "tubelet/prep.h"
#include "tubelet/prep_plan.h"

struct cli_plan_args {
    char **srcs;
    int n_srcs;
    const char *ann;
    int n_frames;                   /* 4 (W1) or 16 (W2) */
    double target;                  /* clips per CPU-second */
    int n_videos;                   /* sources sampled; 0: the library's default */
    double seconds;                 /* seconds sampled from each; 0: the library's default */
    const struct tb_prep_opts *prep;
};

/* Print the plan's table and the prep command it recommends. Returns 1 with *chosen set when
 * an encoding meets the target, 0 when none does, -1 after printing an error. */
int cli_prep_plan(const struct cli_plan_args *a, struct tb_plan_encoding *chosen);

#endif /* TUBELET_CLI_CMD_PREP_PLAN_H */
