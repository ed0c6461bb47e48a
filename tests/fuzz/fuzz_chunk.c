/* tests/fuzz/fuzz_chunk.c - a prepared video directory whose video.idx is the input, beside
 * three real chunks (data/chunk: tubelet prep of a synth video, 25 frames of 32x32 at 5 fps,
 * chunks of 10 frames; make_seeds.sh). An index that parses sends the probe and the reader
 * into real files with whatever frame counts, keyframes, sizes, rates and file names it
 * states: the directory is probed, then the reader reads its first frame, its last and its
 * second, then its middle one (seeks ahead and back). Failures must be TB_E* codes with a
 * message naming the directory or the chunk; frames that come back are read to their last
 * byte. Seeds: the chunks' own video.idx. This target decodes video (docs/ROBUSTNESS.md
 * counts it so). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tubelet/video.h"

#define OUT 16

static const char *const chunks[] = {"0.mp4", "2.mp4", "4.mp4"};

/* The scratch directory with links to the chunks, made on the first input. */
static const char *video_dir(void)
{
    static int made;
    for (size_t i = 0; !made && i < sizeof(chunks) / sizeof(chunks[0]); i++) {
        char target[4096];
        snprintf(target, sizeof(target), "%s/chunk/%s", TBF_DATA_DIR, chunks[i]);
        tbf_link(chunks[i], target);
    }
    made = 1;
    return tbf_dir();
}

static void probe(const char *dir)
{
    struct tb_probe *p = NULL;
    tb_errclear();
    int rc = tb_probe(&p, dir, 0);
    tbf_check_error(rc, "tb_probe", dir);
    if (rc == 0 && !p->index)
        tbf_fail("tb_probe of a prepared directory without its index");
    tb_probe_free(&p);
}

static void read_clips(const char *dir)
{
    tb_reader *r = NULL;
    if (tb_reader_open(&r, NULL) < 0)
        tbf_fail("tb_reader_open: %s", tb_errmsg());
    struct tb_video_info info;
    tb_errclear();
    int rc = tb_reader_info(r, dir, &info);
    tbf_check_error(rc, "tb_reader_info", dir);
    if (rc == 0) {
        uint8_t out[2 * OUT * OUT * 3];
        const int64_t first = 0, ends[2] = {info.n_frames - 1, 1}, middle = info.n_frames / 2;
        const struct tb_crop_spec center = {.mode = TB_CROP_CENTER};
        const struct tb_crop_spec random = {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = 0.08,
                                            .scale_max = 1, .ratio_min = 0.75,
                                            .ratio_max = 4.0 / 3, .flip = TB_FLIP_RANDOM};
        tb_rng rng;
        tb_rng_init(&rng, 1, 0);
        tb_errclear();
        rc = tb_reader_read(r, dir, &first, 1, &center, NULL, OUT, OUT, out, NULL);
        tbf_check_error(rc, "tb_reader_read", dir);
        tb_errclear();
        rc = tb_reader_read(r, dir, ends, info.n_frames > 1 ? 2 : 1, &center, NULL, OUT, OUT,
                            out, NULL);
        tbf_check_error(rc, "tb_reader_read", dir);
        tb_errclear();
        rc = tb_reader_read(r, dir, &middle, 1, &random, &rng, OUT, OUT, out, NULL);
        tbf_check_error(rc, "tb_reader_read", dir);
        tbf_touch(out, sizeof(out));
    }
    tb_reader_close(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = video_dir();
    tbf_write(TB_VIDEO_INDEX_NAME, data, size);
    probe(dir);
    read_clips(dir);
    return 0;
}
