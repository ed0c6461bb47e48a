/* bench/clips.c - the clip list of the reader benchmark, AVION's training workloads:
 *   w1: 4 frames over a random 2 s window; w2: 16 frames over a random 3 s window;
 * frames by AVION's segment sampler with jitter, windows uniform over each video, videos
 * chosen in proportion to their length. One JSON object per clip and line, with the absolute
 * frame numbers (for tubelet) and the same frames as per-chunk-file segments (for the peers):
 *   {"video": DIR, "frames": [..], "segments": [{"path": DIR/0.mp4, "frames": [..]}, ..]}
 * Usage: clips w1|w2 N_CLIPS SEED VIDEO_DIR... > clips.jsonl */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tubelet/sample.h"
#include "tubelet/video.h"

int main(int argc, char **argv)
{
    if (argc < 5 || (strcmp(argv[1], "w1") && strcmp(argv[1], "w2"))) {
        fprintf(stderr, "usage: clips w1|w2 N_CLIPS SEED VIDEO_DIR...\n");
        return 2;
    }
    int w2 = !strcmp(argv[1], "w2"), n_clips = atoi(argv[2]), n_videos = argc - 4;
    int n = w2 ? 16 : 4;
    double seconds = w2 ? 3.0 : 2.0;
    struct tb_video_index **idx = calloc((size_t)n_videos, sizeof(*idx));
    int64_t total = 0;
    for (int v = 0; v < n_videos; v++) {
        if (tb_index_load(&idx[v], argv[4 + v]) < 0) {
            fprintf(stderr, "%s\n", tb_errmsg());
            return 1;
        }
        total += idx[v]->n_frames;
    }
    tb_rng rng;
    tb_rng_init(&rng, (uint64_t)atoll(argv[3]), 0);
    for (int c = 0; c < n_clips; c++) {
        int64_t pick = (int64_t)tb_rng_below(&rng, (uint64_t)total);
        int v = 0;
        while (pick >= idx[v]->n_frames)
            pick -= idx[v++]->n_frames;
        const struct tb_video_index *x = idx[v];
        int64_t span = (int64_t)(seconds * x->fps_num / x->fps_den + 0.5);
        if (span > x->n_frames)
            span = x->n_frames;
        int64_t start = (int64_t)tb_rng_below(&rng, (uint64_t)(x->n_frames - span + 1));
        int64_t f[16];
        tb_sample_segments(start, start + span, n, 1, &rng, f);
        printf("{\"video\": \"%s\", \"frames\": [", argv[4 + v]);
        for (int i = 0; i < n; i++)
            printf("%s%lld", i ? ", " : "", (long long)f[i]);
        printf("], \"segments\": [");
        int open_chunk = -1;
        for (int i = 0; i < n; i++) {
            int k = (int)(f[i] / x->chunk_frames);
            if (k != open_chunk) {
                printf("%s{\"path\": \"%s/%s\", \"frames\": [", open_chunk >= 0 ? "]}, " : "",
                       argv[4 + v], x->chunks[k].file);
                open_chunk = k;
            } else {
                printf(", ");
            }
            printf("%lld", (long long)(f[i] - x->chunks[k].start_frame));
        }
        printf("]}]}\n");
    }
    for (int v = 0; v < n_videos; v++)
        tb_index_free(&idx[v]);
    free(idx);
    return 0;
}
