/* bench/decode_cost.c - how many frames a reader must decode per clip on a prepared video,
 * computed from its index (nothing is decoded). Clips follow AVION's training sampler: a
 * random window of SPAN frames, N_FRAMES frames at the midpoints of N_FRAMES equal segments.
 *   naive:  per chunk touched, seek once to the keyframe before the first wanted frame and
 *           decode forward to the last wanted frame (what decord/PyAV readers do);
 *   reseek: like naive, but jump again whenever a keyframe lies between the decode position
 *           and the next wanted frame (what tubelet's reader does).
 * Usage: decode_cost VIDEO_DIR [n_frames=4] [span_frames=60] [clips=20000] */
#include <stdio.h>
#include <stdlib.h>

#include "tubelet/rng.h"
#include "tubelet/video.h"

/* Last keyframe at or before f in chunk c. */
static int64_t key_before(const struct tb_chunk_info *c, int64_t f)
{
    int64_t k = 0;
    for (int i = 0; i < c->n_keyframes && c->keyframes[i] <= f; i++)
        k = c->keyframes[i];
    return k;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: decode_cost VIDEO_DIR [n_frames] [span_frames] [clips]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 4;
    int span = argc > 3 ? atoi(argv[3]) : 60;
    int clips = argc > 4 ? atoi(argv[4]) : 20000;
    struct tb_video_index *idx = NULL;
    if (tb_index_load(&idx, argv[1]) < 0) {
        fprintf(stderr, "%s\n", tb_errmsg());
        return 1;
    }
    if (idx->n_frames < span) {
        fprintf(stderr, "%s: shorter than the clip span\n", argv[1]);
        return 1;
    }
    tb_rng r;
    tb_rng_init(&r, 1, 0);
    double naive = 0, reseek = 0, bytes = 0;
    for (int i = 0; i < idx->n_chunks; i++)
        bytes += (double)idx->chunks[i].bytes;
    for (int c = 0; c < clips; c++) {
        int64_t start = (int64_t)tb_rng_below(&r, (uint64_t)(idx->n_frames - span + 1));
        int64_t chunk_pos = -1, pos = -1; /* decoder position, absolute; -1 none */
        int cur = -1;
        for (int j = 0; j < n; j++) {
            int64_t f = start + (int64_t)((j + 0.5) * span / n);
            int k = (int)(f / idx->chunk_frames);
            const struct tb_chunk_info *ch = &idx->chunks[k];
            int64_t rel = f - ch->start_frame, kb = key_before(ch, rel) + ch->start_frame;
            if (k != cur) { /* open the chunk: seek to the keyframe before f */
                cur = k;
                chunk_pos = kb;
                naive += (double)(f - kb + 1);
                pos = kb;
            } else {
                naive += (double)(f - chunk_pos + 1);
            }
            chunk_pos = f + 1;
            if (kb > pos)  /* a keyframe lies ahead: jump to it */
                pos = kb;
            reseek += (double)(f - pos + 1);
            pos = f + 1;
        }
    }
    double minutes = (double)idx->n_frames * idx->fps_den / idx->fps_num / 60.0;
    printf("%s chunk_s=%d frames=%lld bytes_per_min=%.0f naive=%.1f reseek=%.1f\n", argv[1],
           idx->chunk_seconds, (long long)idx->n_frames, bytes / minutes, naive / clips,
           reseek / clips);
    tb_index_free(&idx);
    return 0;
}
