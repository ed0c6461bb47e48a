/* tests/test_prep_plan.c - prep --plan (tb_plan_make, `tubelet prep --plan`): on synthetic
 * videos, the frames the plan says a clip decodes are what the reader decodes on the chunks
 * prep writes with the same settings (and what an independent count over their index says),
 * the chosen encoding is the one of fewest bytes that meets the target, --apply prepares with
 * it, and bad inputs are errors that name their cause. */
#include <unistd.h>

#include "tb_test.h"
#include "tubelet/prep.h"
#include "tubelet/prep_plan.h"
#include "tubelet/sample.h"
#include "tubelet/video.h"

#define N_CLIPS 300
#define T 4
#define CHUNK_S 4
#define FPS 30

static char syn[4200], csv[4300], srcs[2][4300];

static const struct tb_plan_encoding encs[] = {
    {8, 0, 1, 0},  /* --gop 8 --no-bframes */
    {1, 0, 1, 0},  /* all-intra */
    {30, 0, 0, 0}, /* --gop 30 --no-bframes --tune none */
    {30, 1, 1, 0}, /* --gop 30 with B-frames */
};
#define N_ENCS (int)(sizeof(encs) / sizeof(encs[0]))

static struct tb_prep_opts prep_opts(const char *root, const struct tb_plan_encoding *e)
{
    struct tb_prep_opts o = {.out_root = root, .chunk_seconds = CHUNK_S, .short_side = 0,
                             .fps_num = FPS, .fps_den = 1, .gop = 30, .crf = 23,
                             .preset = "veryfast", .tune = "fastdecode", .ext = "mp4",
                             .n_threads = 2};
    if (e) {
        o.gop = e->gop;
        o.no_bframes = !e->bframes;
        o.tune = e->fastdecode ? "fastdecode" : "none";
    }
    return o;
}

static int make_plan(struct tb_plan **p, double target, const struct tb_prep_opts *po,
                     const char *ann)
{
    const char *const list[] = {srcs[0], srcs[1]};
    struct tb_plan_opts o = {
        .srcs = list, .n_srcs = 2, .ann_path = ann, .n_frames = T, .target = target,
        .prep = po, .work_dir = tbt_path("work"), .n_sample_videos = 2, .sample_seconds = 2,
        .n_clips = N_CLIPS, .n_calib_clips = 32, .seed = 7, .encodings = encs,
        .n_encodings = N_ENCS,
    };
    return tb_plan_make(p, &o);
}

/* Frames a reader must decode for frames[0..n) (ascending) of one prepared video, from its
 * real index: per chunk, from the keyframe before each wanted frame unless decoding on
 * reaches it. Written apart from the library's rule, which assumes keyframes every GOP. */
static int64_t index_count(const struct tb_video_index *idx, const int64_t *frames, int n)
{
    int64_t total = 0, pos = -1;
    int cur = -1;
    for (int i = 0; i < n; i++) {
        int c = (int)(frames[i] / idx->chunk_frames);
        const struct tb_chunk_info *ch = &idx->chunks[c];
        int64_t want = frames[i] - ch->start_frame, key = 0;
        for (int j = 0; j < ch->n_keyframes && ch->keyframes[j] <= want; j++)
            key = ch->keyframes[j];
        if (c != cur) {
            cur = c;
            pos = 0;
        }
        if (want < pos)
            continue;
        if (key > pos)
            pos = key;
        total += want - pos + 1;
        pos = want + 1;
    }
    return total;
}

/* 1 if every chunk's keyframes are exactly the multiples of gop. */
static int keys_on_grid(const struct tb_video_index *idx, int gop)
{
    for (int c = 0; c < idx->n_chunks; c++) {
        const struct tb_chunk_info *ch = &idx->chunks[c];
        if (ch->n_keyframes != (ch->n_frames + gop - 1) / gop)
            return 0;
        for (int j = 0; j < ch->n_keyframes; j++)
            if (ch->keyframes[j] != (int64_t)j * gop)
                return 0;
    }
    return 1;
}

static void setup(void)
{
    char *out = NULL;
    snprintf(syn, sizeof(syn), "%s/syn", tbt_dir());
    int rc = tbt_run(&out, 300, "%s synth --out %s --videos 2 --seconds 10 --size 320x240",
                     tbt_tubelet(), syn);
    CHECK_MSG(rc == 0, "synth: %s", out);
    free(out);
    snprintf(csv, sizeof(csv), "%s/annotations/EPIC_100_train.csv", syn);
    /* synth splits videos into training and validation: take both files' rows. */
    char *val = NULL;
    rc = tbt_run(&val, 30, "tail -n +2 %s/annotations/EPIC_100_validation.csv >> %s", syn, csv);
    CHECK_EQ(rc, 0);
    free(val);
    for (int v = 0; v < 2; v++)
        snprintf(srcs[v], sizeof(srcs[v]), "%s/videos/P01_0%d.mp4", syn, v + 1);
}

/* Each row's frames per clip against the reader on the full videos prepared that way. */
static void check_row(const struct tb_plan_row *row, int i)
{
    char root[4300], dirs[2][4400];
    snprintf(root, sizeof(root), "%s/full%d", tbt_dir(), i);
    struct tb_prep_opts po = prep_opts(root, &row->enc);
    struct tb_video_index *idx[2] = {NULL, NULL};
    int64_t nf[2];
    const char *names[2] = {"P01_01", "P01_02"};
    for (int v = 0; v < 2; v++) {
        CHECK_EQ(tb_prep_video(&po, srcs[v], NULL), 0);
        snprintf(dirs[v], sizeof(dirs[v]), "%s/%s.mp4", root, names[v]);
        CHECK_EQ(tb_index_load(&idx[v], dirs[v]), 0);
        if (!idx[v])
            return;
        nf[v] = idx[v]->n_frames;
        CHECK_EQ(nf[v], 10 * FPS); /* the plan takes lengths from the container: the same */
    }
    static int64_t clips[N_CLIPS * T];
    int video_of[N_CLIPS];
    int n_rows = tb_plan_draw_clips(csv, names, nf, 2, FPS, 1, T, N_CLIPS, 7, clips, video_of);
    CHECK_MSG(n_rows >= 4, "%d usable rows: %s", n_rows, tb_errmsg());
    tb_reader *r = NULL;
    uint8_t *buf = malloc((size_t)T * 32 * 32 * 3);
    struct tb_crop_spec spec = {.mode = TB_CROP_CENTER};
    double reader = 0, indexed = 0;
    for (int c = 0; c < N_CLIPS && n_rows > 0; c++) {
        struct tb_clip_stats st;
        /* A fresh reader per clip: the plan counts each clip from closed files. */
        CHECK_EQ(tb_reader_open(&r, NULL), 0);
        int rc = tb_reader_read(r, dirs[video_of[c]], clips + c * T, T, &spec, NULL, 32, 32,
                                buf, &st);
        CHECK_MSG(rc == 0, "clip %d: %s", c, tb_errmsg());
        tb_reader_close(&r);
        reader += (double)st.n_decoded;
        indexed += (double)index_count(idx[video_of[c]], clips + c * T, T);
    }
    reader /= N_CLIPS;
    indexed /= N_CLIPS;
    int grid = keys_on_grid(idx[0], row->enc.gop) && keys_on_grid(idx[1], row->enc.gop);
    fprintf(stderr, "gop %d bframes %d: plan %.3f, reader %.3f, index %.3f frames per clip%s\n",
            row->enc.gop, row->enc.bframes, row->frames_per_clip, reader, indexed,
            grid ? "" : " (x264 added keyframes)");
    if (!row->enc.bframes) {
        /* Without B-frames the reader decodes exactly what the index says... */
        CHECK_NEAR(reader, indexed, 1e-9);
        /* ...and with keyframes where the GOP puts them, exactly what the plan says. */
        if (grid)
            CHECK_NEAR(row->frames_per_clip, reader, 1e-9);
        else
            CHECK_NEAR(row->frames_per_clip, reader, 0.05 * reader);
        CHECK_NEAR(row->skip_fraction, 0, 0);
    } else {
        /* With B-frames the plan skips the sample's share of disposable frames. */
        CHECK_MSG(row->skip_fraction > 0.1, "skip fraction %g", row->skip_fraction);
        CHECK_MSG(reader < indexed, "reader %g, index %g", reader, indexed);
        CHECK_NEAR(row->frames_per_clip, reader, 0.15 * reader);
    }
    free(buf);
    tb_index_free(&idx[0]);
    tb_index_free(&idx[1]);
}

static void check_choice(const struct tb_plan *p, double target)
{
    int best = -1;
    for (int i = 0; i < p->n_rows; i++) {
        const struct tb_plan_row *r = &p->rows[i];
        CHECK(r->clips_per_core > 0 && r->mb_per_hour > 0);
        CHECK_EQ(r->meets, r->eligible && r->clips_per_core >= target);
        if (r->meets && (best < 0 || r->mb_per_hour < p->rows[best].mb_per_hour))
            best = i;
    }
    CHECK_EQ(p->chosen, best);
}

static void test_plan_matches_reader(void)
{
    tbt_case = "plan against the reader";
    struct tb_prep_opts po = prep_opts(NULL, NULL);
    struct tb_plan *p = NULL;
    int rc = make_plan(&p, 1, &po, csv);
    CHECK_MSG(rc == 0, "%s", tb_errmsg());
    if (!p)
        return;
    CHECK_EQ(p->n_rows, N_ENCS);
    CHECK_EQ(p->n_videos, 2);
    CHECK(p->overhead_us > 0 && p->open_us > 0);
    for (int i = 0; i < p->n_rows; i++)
        check_row(&p->rows[i], i);
    /* All-intra decodes the wanted frames alone; the longer the interval, the more. */
    CHECK_NEAR(p->rows[1].frames_per_clip, T, 0.05);
    CHECK(p->rows[0].frames_per_clip < p->rows[2].frames_per_clip);
    CHECK(p->rows[1].mb_per_hour > p->rows[0].mb_per_hour);
    CHECK(p->rows[1].clips_per_core > p->rows[2].clips_per_core);
    check_choice(p, 1);
    /* A target between the rows' predictions: the cheapest in bytes of those above it. */
    double lo = 1e30, hi = 0;
    for (int i = 0; i < p->n_rows; i++) {
        lo = fmin(lo, p->rows[i].clips_per_core);
        hi = fmax(hi, p->rows[i].clips_per_core);
    }
    tb_plan_free(&p);
    double mid = (lo + hi) / 2;
    rc = make_plan(&p, mid, &po, csv);
    CHECK_MSG(rc == 0, "%s", tb_errmsg());
    if (p)
        check_choice(p, mid);
    tb_plan_free(&p);
    CHECK(p == NULL);
}

static void test_bad_inputs(void)
{
    tbt_case = "bad inputs";
    struct tb_prep_opts po = prep_opts(NULL, NULL);
    struct tb_plan *p = NULL;
    CHECK_EQ(make_plan(&p, 0, &po, csv), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "makes no sense");
    CHECK_EQ(make_plan(&p, NAN, &po, csv), TB_EINVAL);
    CHECK(p == NULL);
    /* A CSV naming none of the videos. */
    const char *other = tbt_path("other.csv");
    FILE *f = fopen(other, "w");
    fprintf(f, "narration_id,participant_id,video_id,narration_timestamp,start_timestamp,"
               "stop_timestamp,start_frame,stop_frame,narration,verb,verb_class,noun,"
               "noun_class,all_nouns,all_noun_classes\n"
               "P09_01_0,P09,P09_01,00:00:01.00,00:00:01.00,00:00:02.00,30,60,take cup,take,"
               "0,cup,0,\"['cup']\",\"[0]\"\n");
    fclose(f);
    CHECK_EQ(make_plan(&p, 60, &po, other), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "no row names any of the 2 source videos with a window");
    CHECK_EQ(make_plan(&p, 60, &po, tbt_path("missing.csv")), TB_ENOENT);
    /* A source that is not a video. */
    char bad[4300];
    snprintf(bad, sizeof(bad), "%s", srcs[1]);
    snprintf(srcs[1], sizeof(srcs[1]), "%s", tbt_path("P01_02.mp4"));
    tbt_write_noise(srcs[1], -1, 4096, 3);
    int rc = make_plan(&p, 60, &po, csv);
    CHECK(rc < 0);
    CHECK_STR_HAS(tb_errmsg(), "P01_02.mp4");
    snprintf(srcs[1], sizeof(srcs[1]), "%s", bad);
    CHECK(p == NULL);
}

static void test_cli(void)
{
    tbt_case = "cli";
    char *out = NULL;
    const char *root = tbt_path("applied");
    int rc = tbt_run(&out, 300, "%s prep --plan --apply --ann %s %s %s --out %s --short-side 0 "
                     "--chunk-seconds 4 --preset veryfast --plan-videos 1 --plan-seconds 1 "
                     "--target-clips-per-core 1", tbt_tubelet(), csv, srcs[0], srcs[1], root);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "| encoding | prep flags | MB per hour | frames decoded per clip");
    CHECK_STR_HAS(out, "**chosen**");
    CHECK_STR_HAS(out, "prep command:");
    /* The prepared video carries the chosen keyframe interval. */
    const char *c = out ? strstr(out, "chosen: --gop ") : NULL;
    int gop = c ? atoi(c + strlen("chosen: --gop ")) : 0;
    char want[64], idx_path[4400];
    snprintf(want, sizeof(want), "gop=%d ", gop);
    snprintf(idx_path, sizeof(idx_path), "%s/P01_02.mp4/video.idx", root);
    char *idx = tbt_read(idx_path, NULL);
    CHECK_MSG(gop > 0 && idx, "no video.idx after --apply: %s", out);
    CHECK_STR_HAS(idx, want);
    free(idx);
    free(out);
    rc = tbt_run(&out, 60, "%s prep --plan %s", tbt_tubelet(), srcs[0]);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "--plan needs --ann FILE");
    free(out);
    rc = tbt_run(&out, 60, "%s prep --plan --ann %s --workload w3 %s", tbt_tubelet(), csv,
                 srcs[0]);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "--workload: 'w3' is none of w1|w2");
    free(out);
    rc = tbt_run(&out, 60, "%s prep --plan --ann %s --target-clips-per-core -3 %s",
                 tbt_tubelet(), csv, srcs[0]);
    CHECK_EQ(rc, 2);
    free(out);
}

int main(void)
{
    tbt_begin("prep_plan");
    setup();
    if (tbt_failures)
        TBT_EXIT();
    test_plan_matches_reader();
    test_bad_inputs();
    test_cli();
    TBT_EXIT();
}
