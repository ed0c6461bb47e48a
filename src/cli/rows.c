/* src/cli/rows.c - one policy, in every command that makes clips (train, eval, peek,
 * bench-load), for the annotation rows no clip can be made of: the file is loaded with its
 * bad rows skipped and counted, then (with a root) the rows whose video is missing or
 * unreadable, or whose window lies outside it, are dropped too (tb_ann_drop_unreadable).
 * Then either a report (how many, and the first few as file:line: cause), or a refusal
 * with the same lines where every row must be scored (evaluation without --skip-bad-rows).
 * The rows kept whose window runs past their video (clamped to it) are reported the same way,
 * never refused: AVION clamps them too. */
#include <stdio.h>

#include "cli/cli.h"
#include "tubelet/data.h"
#include "tubelet/video.h"

static void print_rows(const struct tb_ann_bad_row *rows, int n_kept, int n)
{
    for (int i = 0; i < n_kept; i++)
        fprintf(stderr, "  %s\n", rows[i].message);
    if (n > n_kept)
        fprintf(stderr, "  and %d more\n", n - n_kept);
}

/* The rows kept whose window runs outside their video: how many, the first few. */
static void print_clamped(const struct tb_annotations *a, const char *cmd)
{
    if (!a->n_clamped)
        return;
    fprintf(stderr, "tubelet %s: %s: %d of %d rows' windows run past their video: their clips "
            "come from the part inside it (clamped, as AVION's loader does):\n", cmd, a->path,
            a->n_clamped, a->n_items);
    print_rows(a->clamped, a->n_clamped_kept, a->n_clamped);
}

int cli_ann_load(struct tb_annotations **out, const char *cmd, const char *path,
                 enum tb_ann_format format)
{
    struct tb_ann_opts ao = {.format = format, .skip_bad_rows = 1};
    int rc = tb_ann_load(out, path, &ao);
    if (rc < 0) /* every process says its own failure (it may be this one's alone) */
        cli_report(cmd, rc);
    return rc < 0 ? -1 : 0;
}

int cli_ann_check(struct tb_annotations *a, const char *cmd, const char *root, const char *ext,
                  enum cli_rows policy, int quiet)
{
    tb_reader *r = NULL;
    int rc = 0;
    if (root && root[0] && (rc = tb_reader_open(&r, NULL)) == 0)
        rc = tb_ann_drop_unreadable(a, r, root, ext);
    tb_reader_close(&r);
    if (rc < 0) {
        cli_report(cmd, rc);
        return -1;
    }
    if (quiet)
        return policy == CLI_ROWS_REFUSE && a->n_skipped ? -1 : 0;
    print_clamped(a, cmd);
    if (a->n_skipped == 0)
        return 0;
    int total = a->n_items + a->n_skipped;
    if (policy == CLI_ROWS_REFUSE) {
        fprintf(stderr, "tubelet %s: %s: %d of %d rows cannot be scored:\n", cmd, a->path,
                a->n_skipped, total);
        print_rows(a->bad, a->n_bad_kept, a->n_skipped);
        fprintf(stderr, "  fix or remove them, or pass --skip-bad-rows to score the other %d\n",
                a->n_items);
        return -1;
    }
    fprintf(stderr, "tubelet %s: %s: skipping %d of %d rows", cmd, a->path, a->n_skipped, total);
    if (a->n_unreadable)
        fprintf(stderr, " (%d for their video)", a->n_unreadable);
    fprintf(stderr, ":\n");
    print_rows(a->bad, a->n_bad_kept, a->n_skipped);
    return 0;
}
