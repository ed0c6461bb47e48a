/* tests/python/loader_dump.c - the C loader's batches, written raw, for the Python tests to
 * compare tubelet.Loader's with: `loader_dump KEY=VALUE ...` (root, ann, out, format, frames,
 * width, height, batch, workers, prefetch, seed, shuffle, drop_last, rank, world, epochs,
 * crop: rrc|center|none, flip: random|never|always, skip_bad_rows, map_actions, train, views,
 * crops, info). Per batch: int32 n, int64 index[n], int32 label[n][3], uint8 flip[n],
 * uint8 video[n][T][H][W][3], and with info=1 per clip what tb_dataset_get reports of its
 * sample: int64 item, int32 view, int32 crop[4] (x, y, w, h); then one line on
 * stdout: the loader's counters. Errors print the library's message and exit 1. It tests
 * nothing itself: tests/python/test_loader.py runs it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tubelet/data.h"

static const char *arg(int argc, char **argv, const char *key, const char *def)
{
    size_t n = strlen(key);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], key, n) && argv[i][n] == '=')
            return argv[i] + n + 1;
    return def;
}

static int num(int argc, char **argv, const char *key, int def)
{
    const char *v = arg(argc, argv, key, NULL);
    return v ? atoi(v) : def;
}

int main(int argc, char **argv)
{
    const char *fmt = arg(argc, argv, "format", "epic"), *crop = arg(argc, argv, "crop", "rrc");
    const char *flip = arg(argc, argv, "flip", "random");
    struct tb_ann_opts ao = {.format = !strcmp(fmt, "kinetics")    ? TB_ANN_KINETICS
                                       : !strcmp(fmt, "narration") ? TB_ANN_NARRATION
                                                                   : TB_ANN_EPIC,
                             .skip_bad_rows = num(argc, argv, "skip_bad_rows", 0)};
    struct tb_dataset_opts d = {
        .root = arg(argc, argv, "root", ""), .ext = "mp4", .sampler = TB_SAMPLE_SEGMENTS,
        .n_frames = num(argc, argv, "frames", 4), .stride = 4,
        .train = num(argc, argv, "train", 1), .n_views = num(argc, argv, "views", 1),
        .n_crops = num(argc, argv, "crops", 1), .width = num(argc, argv, "width", 64),
        .height = num(argc, argv, "height", 64),
        .crop = {.mode = !strcmp(crop, "center") ? TB_CROP_CENTER
                         : !strcmp(crop, "none") ? TB_CROP_NONE
                                                 : TB_CROP_RANDOM_RESIZED,
                 .scale_min = 0.08, .scale_max = 1, .ratio_min = 3.0 / 4, .ratio_max = 4.0 / 3,
                 .flip = !strcmp(flip, "never")    ? TB_FLIP_NEVER
                         : !strcmp(flip, "always") ? TB_FLIP_ALWAYS
                                                   : TB_FLIP_RANDOM},
    };
    struct tb_loader_opts lo = {
        .batch_size = num(argc, argv, "batch", 4), .n_workers = num(argc, argv, "workers", 1),
        .prefetch = num(argc, argv, "prefetch", 2), .seed = (uint64_t)num(argc, argv, "seed", 0),
        .shuffle = num(argc, argv, "shuffle", 1), .drop_last = num(argc, argv, "drop_last", 0),
        .rank = num(argc, argv, "rank", 0), .world = num(argc, argv, "world", 1),
        .max_failure_rate = 0.05};
    struct tb_annotations *ann = NULL;
    tb_dataset *ds = NULL;
    tb_loader *l = NULL;
    tb_reader *r = NULL;
    uint8_t *scratch = NULL;
    FILE *out = NULL;
    int rc, status = 1;
    if ((rc = tb_ann_load(&ann, arg(argc, argv, "ann", ""), &ao)) < 0 ||
        (num(argc, argv, "map_actions", 1) && ao.format == TB_ANN_EPIC &&
         (rc = tb_ann_map_actions(&ann, 1)) < 0) ||
        (rc = tb_dataset_open(&ds, ann, &d)) < 0 || (rc = tb_loader_open(&l, ds, &lo)) < 0)
        goto fail;
    if (!(out = fopen(arg(argc, argv, "out", "batches.bin"), "wb"))) {
        fprintf(stderr, "loader_dump: cannot write the output\n");
        goto end;
    }
    size_t clip = tb_dataset_sample_bytes(ds);
    int info = num(argc, argv, "info", 0);
    if (info && ((rc = tb_reader_open(&r, NULL)) < 0 || !(scratch = malloc(clip))))
        goto fail;
    int epochs = num(argc, argv, "epochs", 1), first = num(argc, argv, "epoch", 0);
    for (int e = first; e < first + epochs; e++) {
        int64_t nb = tb_loader_epoch(l, e);
        for (int64_t k = 0; k < nb; k++) {
            struct tb_batch *b = NULL;
            if ((rc = tb_loader_next(l, &b)) < 0)
                goto fail;
            int32_t n = b->n;
            fwrite(&n, sizeof(n), 1, out);
            fwrite(b->index, sizeof(*b->index), (size_t)n, out);
            fwrite(b->label, sizeof(*b->label), (size_t)n * 3, out);
            fwrite(b->flip, 1, (size_t)n, out);
            fwrite(b->video, clip, (size_t)n, out);
            for (int j = 0; info && j < n; j++) {
                struct tb_sample_info si;
                if ((rc = tb_dataset_get(ds, r, lo.seed, e, b->index[j], scratch, &si)) < 0)
                    goto fail;
                int32_t view = si.view, rect[4] = {si.clip.crop.x, si.clip.crop.y,
                                                   si.clip.crop.w, si.clip.crop.h};
                fwrite(&si.item, sizeof(si.item), 1, out);
                fwrite(&view, sizeof(view), 1, out);
                fwrite(rect, sizeof(rect), 1, out);
            }
            tb_loader_release(l, b);
        }
    }
    struct tb_loader_stats st;
    tb_loader_get_stats(l, &st);
    printf("clips %lld failures %lld skipped_rows %d\n", (long long)st.clips,
           (long long)st.failures, ann->n_skipped);
    status = 0;
    goto end;
fail:
    fprintf(stderr, "%s\n", tb_errmsg()[0] ? tb_errmsg() : tb_strerror(rc));
end:
    if (out && fclose(out) != 0)
        status = 1;
    tb_loader_close(&l);
    tb_reader_close(&r);
    free(scratch);
    tb_dataset_close(&ds);
    tb_ann_free(&ann);
    return status;
}
