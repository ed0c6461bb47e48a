/* tests/fuzz/fuzz_reader.c - the clip reader on an arbitrary file (include/tubelet/video.h):
 * probe it (half the inputs: it opens a decoder of FFmpeg's thread count, which costs more than
 * the rest), open a reader, read a clip of a few frames with a crop, then a second clip with
 * the same reader (its open decoder, seeks back and forth). Every failure must be a TB_E*
 * code with a message naming the file; frames that come back are read to their last byte.
 * The input is an 8-byte request, then the file: [0] crop mode (mod 5) and flip (bits 4-5,
 * mod 3); [1] [2] output width and height - 1 (mod 48); [3] scaler (mod 4), bit 6: probe,
 * bit 7: the probe decodes; [4] frames per clip - 1 (mod 4), bit 7: the second clip's last
 * frame is past the end; [5] [6] [7] where the frames lie, and the FIXED crop's rectangle.
 * Seeds (corpus/reader) are synth's videos, a prepared chunk and remuxes of them (make_seeds.sh).
 * Not here: prepared directories (fuzz_chunk.c). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tubelet/video.h"

#define REQUEST 8
#define MAX_CLIP 4

static void probe(const char *path, int decode)
{
    struct tb_probe *p = NULL;
    tb_errclear();
    int rc = tb_probe(&p, path, decode);
    tbf_check_error(rc, "tb_probe", path);
    if (rc < 0) {
        if (p)
            tbf_fail("tb_probe failed but left a probe");
        return;
    }
    if (p->n_keyframes < 0 || (p->n_keyframes && !p->keyframes))
        tbf_fail("tb_probe: %lld keyframes at %p", (long long)p->n_keyframes,
                 (void *)p->keyframes);
    tbf_touch(p->keyframes, sizeof(*p->keyframes) * (size_t)p->n_keyframes);
    tb_probe_free(&p);
}

/* Clip c's frames: spread by the request's bytes over the video; with bit 7 of byte 4, the
 * second clip's last one is past the end. */
static int clip_frames(const uint8_t *req, int c, int64_t n_frames, int64_t *frames)
{
    int n = 1 + req[4] % MAX_CLIP;
    for (int i = 0; i < n; i++) {
        uint64_t pick = (uint64_t)req[5 + (i + c) % 3] * (uint64_t)(i + 1) + 7u * (uint64_t)c;
        frames[i] = (int64_t)(pick % (uint64_t)n_frames);
    }
    if (c == 1 && req[4] & 0x80)
        frames[n - 1] = n_frames;
    return n;
}

static void read_clips(const char *path, const uint8_t *req)
{
    tb_reader *r = NULL;
    struct tb_reader_opts o = {.scaler = (enum tb_scaler)(req[3] % 4)};
    if (tb_reader_open(&r, &o) < 0)
        tbf_fail("tb_reader_open: %s", tb_errmsg());
    struct tb_video_info info;
    tb_errclear();
    int rc = tb_reader_info(r, path, &info);
    tbf_check_error(rc, "tb_reader_info", path);
    if (rc == 0) {
        if (info.width <= 0 || info.height <= 0 || info.n_frames <= 0)
            tbf_fail("tb_reader_info: %dx%d, %lld frames", info.width, info.height,
                     (long long)info.n_frames);
        struct tb_crop_spec spec = {
            .mode = (enum tb_crop_mode)(req[0] % 5),
            .scale_min = 0.08, .scale_max = 1, .ratio_min = 0.75, .ratio_max = 4.0 / 3,
            .x = req[5] % info.width, .y = req[6] % info.height,
            .w = 1 + req[7] % info.width, .h = 1 + req[7] % info.height,
            .flip = (enum tb_flip)((req[0] >> 4) % 3),
        };
        int out_w = 1 + req[1] % 48, out_h = 1 + req[2] % 48;
        size_t frame_bytes = (size_t)out_w * out_h * 3;
        uint8_t *out = malloc(frame_bytes * MAX_CLIP);
        tb_rng rng;
        tb_rng_init(&rng, 1, 0);
        for (int c = 0; c < 2 && out; c++) {
            int64_t frames[MAX_CLIP];
            int n = clip_frames(req, c, info.n_frames, frames);
            struct tb_clip_stats stats;
            tb_errclear();
            rc = tb_reader_read(r, path, frames, n, &spec, &rng, out_w, out_h, out, &stats);
            tbf_check_error(rc, "tb_reader_read", path);
            if (rc == 0)
                tbf_touch(out, frame_bytes * (size_t)n);
        }
        free(out);
    }
    tb_reader_close(&r);
    if (r)
        tbf_fail("tb_reader_close left the pointer set");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < REQUEST)
        return 0;
    const char *path = tbf_put(0, data + REQUEST, size - REQUEST);
    if (data[3] & 0x40)
        probe(path, data[3] >> 7);
    read_clips(path, data);
    return 0;
}
