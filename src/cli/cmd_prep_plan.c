/* src/cli/cmd_prep_plan.c - `tubelet prep --plan`: run the cost model (tb_plan_make), print its
 * table and the prep command it recommends, and with --apply hand the chosen encoding back to
 * prep. The model itself is in src/data/prep_plan.c. Tests: tests/test_prep_plan.c. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cmd_prep_plan.h"
#include "tubelet/prep_plan.h"

static void enc_flags(char *buf, size_t size, const struct tb_plan_encoding *e)
{
    snprintf(buf, size, "--gop %d%s --tune %s --short-side %d", e->gop,
             e->bframes || e->gop == 1 ? "" : " --no-bframes",
             e->fastdecode ? "fastdecode" : "none", e->short_side);
}

static void enc_name(char *buf, size_t size, const struct tb_plan_encoding *e)
{
    snprintf(buf, size, "g%d%s%s@%d", e->gop, e->bframes || e->gop == 1 ? "" : "nb",
             e->fastdecode ? "" : "-none", e->short_side);
}

static void print_table(const struct tb_plan *p, const struct cli_plan_args *a)
{
    printf("prep --plan: %d encodings of %.1f s from %d of %d videos with actions (%d actions "
           "in %s), %s (%d frames per clip), target %.1f clips/s per core\n",
           p->n_rows, p->sample_seconds, p->n_sample_videos, p->n_videos, p->n_actions,
           a->ann, a->n_frames == 4 ? "W1" : "W2", a->n_frames, a->target);
    char calib[64];
    enc_name(calib, sizeof(calib), &p->rows[p->calib_row].enc);
    printf("per-clip cost besides decoding: %.0f us (crop, scale, convert, seeks, batching; "
           "calibrated on the loader over the %s sample), %.0f us per chunk opened\n\n",
           p->overhead_us, calib, p->open_us);
    printf("| encoding | prep flags | MB per hour | frames decoded per clip | keyframes per clip "
           "| us per keyframe / other frame | predicted clips/s per core | |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < p->n_rows; i++) {
        const struct tb_plan_row *r = &p->rows[i];
        char name[64], flags[128];
        enc_name(name, sizeof(name), &r->enc);
        enc_flags(flags, sizeof(flags), &r->enc);
        printf("| %s | `%s` | %.0f | %.1f | %.1f | %.0f / %.0f | %.1f | %s |\n", name, flags,
               r->mb_per_hour, r->frames_per_clip, r->keys_per_clip, r->key_us, r->ref_us,
               r->clips_per_core,
               i == p->chosen ? "**chosen**" : !r->eligible ? "(other size)"
                                               : r->meets   ? "meets" : "");
    }
    printf("\nplanned in %.1f s\n", p->seconds);
}

static void print_command(const struct tb_plan *p, const struct cli_plan_args *a)
{
    if (p->chosen < 0) {
        printf("no encoding at short side %d reaches %.1f clips/s per core on this machine; "
               "the fastest is listed above (lower --target-clips-per-core, or add cores)\n",
               a->prep->short_side, a->target);
        return;
    }
    char flags[128];
    enc_flags(flags, sizeof(flags), &p->rows[p->chosen].enc);
    printf("chosen: %s (%.0f MB per hour, %.1f clips/s per core predicted)\nprep command:\n"
           "  tubelet prep", flags, p->rows[p->chosen].mb_per_hour,
           p->rows[p->chosen].clips_per_core);
    /* A long list of sources is the user's own glob: not repeated. */
    for (int i = 0; i < a->n_srcs && a->n_srcs <= 16; i++)
        printf(" %s", a->srcs[i]);
    if (a->n_srcs > 16)
        printf(" SRC...");
    printf(" --out %s %s --chunk-seconds %d --crf %d --preset %s\n",
           a->prep->out_root && a->prep->out_root[0] ? a->prep->out_root : "ROOT", flags,
           a->prep->chunk_seconds, a->prep->crf, a->prep->preset);
}

int cli_prep_plan(const struct cli_plan_args *a, struct tb_plan_encoding *chosen)
{
    const char *tmp = getenv("TMPDIR");
    char work[4096];
    snprintf(work, sizeof(work), "%s/tubelet-plan-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(work)) {
        fprintf(stderr, "tubelet prep: cannot make a scratch directory %s\n", work);
        return -1;
    }
    struct tb_plan_opts o = {
        .srcs = (const char *const *)a->srcs, .n_srcs = a->n_srcs, .ann_path = a->ann,
        .n_frames = a->n_frames, .target = a->target, .prep = a->prep, .work_dir = work,
        .n_sample_videos = a->n_videos, .sample_seconds = a->seconds, .seed = 1,
        .cancel = &cli_cancel,
    };
    struct tb_plan *p = NULL;
    int rc = tb_plan_make(&p, &o);
    rmdir(work);
    if (rc < 0) {
        cli_report("prep --plan", rc);
        return -1;
    }
    print_table(p, a);
    print_command(p, a);
    fflush(stdout);
    int found = p->chosen >= 0;
    if (found)
        *chosen = p->rows[p->chosen].enc;
    tb_plan_free(&p);
    return found;
}
