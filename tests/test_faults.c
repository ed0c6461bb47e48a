/* tests/test_faults.c - fault injection (src/core/fault.c): each operation's fault points are
 * counted (allocations, and file opens and writes where it does file I/O), then the k-th one
 * is made to fail, for every k (the training runs: an evenly spread, fixed subset; see
 * k_at). Every case must end in a negative TB_E* code with a message (TB_ENOMEM for an
 * allocation, TB_EIO for an open or a write), or succeed with the right result where the
 * operation does without that call (the loader substitutes a clip whose file fails to open,
 * prep encodes again a chunk whose index it could not read, a training run drops its
 * TensorBoard file); never crash or hang (an alarm per case). After a failure nothing is
 * half-written under a final name, and the operation resumed from where it failed (on the same
 * reader, model or loader; on what prep, a checkpoint save or a training run left on disk)
 * gives the result of a run without faults, to the byte. Descriptors are counted around every
 * case; the ASan build checks for leaks after every case (LeakSanitizer), and again at exit.
 * Operations: the clip reader (info, three clips with crops, two probes), annotations +
 * dataset + loader (one worker, then two) and every batch of an epoch, the ViT, VideoMAE and
 * the dual encoder (open, init, plan, one forward and backward), a checkpoint's save (over
 * nothing and over an older one) and load, prep of a short video (from nothing and resuming
 * after a lost chunk), and two epochs of training of each task (clip with relevant captions;
 * checkpoints, metrics, TensorBoard events, the final evaluation). `test_faults NAME...` runs
 * those (main's list); ctest runs it on one OpenMP thread, which a machine busy with other
 * tests needs to keep it fast, and the models again on the portable kernels
 * (test_faults_portable). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "tb_test.h"
#include "tubelet/data.h"
#include "tubelet/prep.h"
#include "tubelet/synth.h"
#include "tubelet/train.h"
#include "tubelet/video.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define LEAK_CHECK() __lsan_do_recoverable_leak_check()
#else
#define LEAK_CHECK() 0
#endif

/* A sweep fails every one of an operation's n points, or where n is more than its case
 * limit that many points spread evenly from the first to the last. The component sweeps have
 * no limit below ALL_CASES (their counts are far below it); the training runs, a tenth of a
 * second each (ten times that under the sanitizers), which repeat what the component sweeps
 * cover and add the loop's own points, have TRAIN_CASES (cls: every point in the optimised
 * build). */
#if defined(__SANITIZE_ADDRESS__)
enum { ALL_CASES = 500, TRAIN_CASES = 48, TRAIN_CLS_CASES = 96 };
#else
enum { ALL_CASES = 500, TRAIN_CASES = 64, TRAIN_CLS_CASES = ALL_CASES };
#endif
enum { CASE_TIMEOUT_S = 60 };

static const char *const kind_names[TBI_FAULT_N] = {"allocation", "open", "write"};

static char case_name[512];

/* The i-th of the cases of a sweep of n points (1-based, ascending, the first and last
 * among them). */
static int64_t k_at(int64_t i, int64_t cases, int64_t n)
{
    return cases >= n ? i + 1 : 1 + i * (n - 1) / (cases - 1);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "FAIL: a case hung: ";
    ssize_t w = write(2, msg, sizeof(msg) - 1);
    w = write(2, case_name, strlen(case_name));
    w = write(2, "\n", 1);
    (void)w;
    _exit(1);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* The loader's warnings for replaced clips, counted; the last kept. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int n_replaced;
static char last_replaced[1024];

static void on_log(enum tb_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level > TB_LOG_WARN || !strstr(msg, "clip failed and was replaced: "))
        return;
    pthread_mutex_lock(&log_mu);
    n_replaced++;
    snprintf(last_replaced, sizeof(last_replaced), "%s", msg);
    pthread_mutex_unlock(&log_mu);
}

static int replaced_clips(void)
{
    pthread_mutex_lock(&log_mu);
    int n = n_replaced;
    pthread_mutex_unlock(&log_mu);
    return n;
}

/* ---- the sweep ---------------------------------------------------------------------------- */

/* An operation in steps. A failed step is run again after the fault, on what the failure left,
 * from resume_at (NULL: the step itself); verify then sees the result. */
struct op {
    const char *name;
    int n_steps;
    void (*prepare)(void *ctx, int64_t k);    /* before each case (may be NULL) */
    int (*step)(void *ctx, int i);            /* 0 or a negative TB_E* */
    int (*resume_at)(void *ctx, int failed);  /* may be NULL */
    void (*left)(void *ctx);                  /* what a failure left behind (may be NULL) */
    void (*verify)(void *ctx);                /* the finished operation's result */
    void (*cleanup)(void *ctx);               /* releases everything */
    void *ctx;
    int64_t max_cases;                        /* 0: ALL_CASES */
};

static int run_steps(const struct op *op, int from, int *failed)
{
    for (int i = from; i < op->n_steps; i++) {
        int rc = op->step(op->ctx, i);
        if (rc < 0) {
            *failed = i;
            return rc;
        }
    }
    return 0;
}

/* Counts op's fault points of one kind, then fails each in turn. */
static void sweep(const struct op *op, enum tbi_fault kind)
{
    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    snprintf(case_name, sizeof(case_name), "%s: counting %s points", op->name,
             kind_names[kind]);
    tbt_case = case_name;
    alarm(CASE_TIMEOUT_S);
    if (op->prepare)
        op->prepare(op->ctx, 0);
    int failed = -1;
    tbi_fault_count(kind);
    int rc = run_steps(op, 0, &failed);
    int64_t n = tbi_fault_calls(kind);
    tbi_fault_arm(kind, 0);
    CHECK_MSG(rc == 0, "step %d: %s", failed, tb_errmsg());
    CHECK_MSG(n > 0, "no %s points to sweep", kind_names[kind]);
    if (rc == 0)
        op->verify(op->ctx);
    op->cleanup(op->ctx);
    alarm(0);
    if (rc < 0 || n <= 0)
        return;

    int fds = count_fds(), failures_before = tbt_failures;
    int64_t limit = op->max_cases > 0 ? op->max_cases : ALL_CASES;
    int64_t n_cases = n < limit ? n : limit, cases = 0, n_failed = 0, n_absorbed = 0;
    for (int64_t i = 0; i < n_cases && tbt_failures - failures_before < 20; i++) {
        int64_t k = k_at(i, n_cases, n);
        snprintf(case_name, sizeof(case_name), "%s: %s %" PRId64 " of %" PRId64, op->name,
                 kind_names[kind], k, n);
        alarm(CASE_TIMEOUT_S);
        if (op->prepare)
            op->prepare(op->ctx, k);
        tb_errclear();
        failed = -1;
        tbi_fault_arm(kind, k);
        rc = run_steps(op, 0, &failed);
        int64_t calls = tbi_fault_calls(kind);
        tbi_fault_arm(kind, 0);
        cases++;
        if (rc < 0) {
            n_failed++;
            int want = kind == TBI_FAULT_ALLOC ? TB_ENOMEM : TB_EIO;
            CHECK_MSG(calls >= k, "step %d failed without its fault (%s): %s", failed,
                      tb_strerror(rc), tb_errmsg());
            CHECK_MSG(rc == want, "step %d: %s, not %s: %s", failed, tb_strerror(rc),
                      tb_strerror(want), tb_errmsg());
            CHECK_MSG(tb_errmsg()[0], "step %d: %s without a message", failed,
                      tb_strerror(rc));
            if (op->left)
                op->left(op->ctx);
            int from = op->resume_at ? op->resume_at(op->ctx, failed) : failed, again = -1;
            rc = run_steps(op, from, &again);
            CHECK_MSG(rc == 0, "resumed from step %d: step %d: %s", from, again, tb_errmsg());
        } else if (calls >= k) {
            n_absorbed++;
        }
        if (rc == 0)
            op->verify(op->ctx);
        op->cleanup(op->ctx);
        int now = count_fds();
        CHECK_MSG(now == fds, "%d descriptors open after the case, %d before", now, fds);
        fds = now;
        CHECK_MSG(!LEAK_CHECK(), "leaks (LeakSanitizer's report above)");
        alarm(0);
    }
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    /* absorbed: succeeded with the right result although the fault fired */
    printf("%-24s %-10s %6" PRId64 " points, %5" PRId64 " cases: %5" PRId64 " failed, %4" PRId64
           " absorbed; %6.2f s\n", op->name, kind_names[kind], n, cases, n_failed, n_absorbed,
           (double)(ts1.tv_sec - ts0.tv_sec) + (ts1.tv_nsec - ts0.tv_nsec) * 1e-9);
    fflush(stdout);
}

/* ---- data made once, without faults --------------------------------------------------------- */

enum { FPS = 10, CHUNK_S = 2, SHORT_SIDE = 32, SECONDS = 6, N_VIDEOS = 3 };

static char syn_dir[4200], root_dir[4200], src_video[4400], plain_video[4400];
static char prepared[N_VIDEOS][4400], train_csv[4400];

static struct tb_prep_opts prep_opts(const char *out_root)
{
    return (struct tb_prep_opts){.out_root = out_root, .chunk_seconds = CHUNK_S,
                                 .short_side = SHORT_SIDE, .fps_num = FPS, .fps_den = 1,
                                 .gop = 5, .crf = 23, .preset = "ultrafast", .tune = "",
                                 .ext = "mp4", .n_threads = 1};
}

static int make_data(void)
{
    snprintf(syn_dir, sizeof(syn_dir), "%s/syn", tbt_dir());
    snprintf(root_dir, sizeof(root_dir), "%s/root", tbt_dir());
    struct tb_synth_opts so = {.out_dir = syn_dir, .n_videos = N_VIDEOS, .seconds = SECONDS,
                               .width = 64, .height = 64, .fps_num = FPS, .fps_den = 1,
                               .seed = 3, .crf = 23, .preset = "ultrafast", .n_threads = 1,
                               .n_jobs = 1};
    struct tb_synth_result sr;
    int rc = tb_synth(&so, &sr);
    CHECK_MSG(rc == 0, "synth: %s", tb_errmsg());
    if (rc < 0)
        return rc;
    snprintf(src_video, sizeof(src_video), "%s/videos/P01_01.mp4", syn_dir);
    snprintf(plain_video, sizeof(plain_video), "%s/videos/P01_02.mp4", syn_dir);
    snprintf(train_csv, sizeof(train_csv), "%s/annotations/EPIC_100_train.csv", syn_dir);
    struct tb_prep_opts po = prep_opts(root_dir);
    for (int i = 0; i < N_VIDEOS; i++) {
        char src[4400];
        snprintf(src, sizeof(src), "%s/videos/P01_0%d.mp4", syn_dir, i + 1);
        rc = tb_prep_video(&po, src, NULL);
        CHECK_MSG(rc == 0, "prep %s: %s", src, tb_errmsg());
        if (rc < 0)
            return rc;
        snprintf(prepared[i], sizeof(prepared[i]), "%s/P01_0%d.mp4", root_dir, i + 1);
    }
    return 0;
}

static int same_bytes(const void *a, const void *b, size_t n)
{
    return a && b && !memcmp(a, b, n);
}

static void remove_tree(const char *dir)
{
    char *out = NULL;
    int rc = tbt_run(&out, 30, "rm -rf %s", dir);
    CHECK_MSG(rc == 0, "rm -rf %s: %s", dir, out);
    free(out);
}

/* ---- the clip reader ---------------------------------------------------------------------- */

enum { R_W = 24, R_H = 16, R_MAX_FRAMES = 5, R_CLIPS = 3, R_STEPS = 3 + R_CLIPS + 2 };

struct reader_clip {
    const char *video;
    int n;
    int64_t frames[R_MAX_FRAMES];
    struct tb_crop_spec crop;
};

struct probe_sum {
    int width, height, decoded;
    int64_t n_frames, n_keyframes, first_keys[4];
    int index_chunks;
};

struct reader_ctx {
    tb_reader *r;
    struct tb_video_info info[2];
    uint8_t out[R_CLIPS][R_MAX_FRAMES * R_W * R_H * 3];
    struct probe_sum probe[2];
    /* the run without faults */
    struct tb_video_info ref_info[2];
    uint8_t ref[R_CLIPS][R_MAX_FRAMES * R_W * R_H * 3];
    struct probe_sum ref_probe[2];
};

static const struct reader_clip reader_clips[R_CLIPS] = {
    {prepared[0], 5, {3, 19, 20, 45, 3},
     {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = 0.3, .scale_max = 1, .ratio_min = 0.75,
      .ratio_max = 4 / 3.0, .flip = TB_FLIP_RANDOM}},
    {plain_video, 3, {0, 12, 30}, {.mode = TB_CROP_CENTER}},
    {prepared[1], 2, {11, 10}, {.mode = TB_CROP_FIXED, .x = 4, .y = 2, .w = 20, .h = 16,
                               .flip = TB_FLIP_ALWAYS}},
};

static int probe_step(struct probe_sum *s, const char *path, int decode)
{
    struct tb_probe *p = NULL;
    int rc = tb_probe(&p, path, decode);
    if (rc < 0)
        return rc;
    memset(s, 0, sizeof(*s));
    s->width = p->width;
    s->height = p->height;
    s->decoded = p->decoded;
    s->n_frames = p->decoded ? p->n_frames : p->n_frames_declared;
    s->n_keyframes = p->n_keyframes;
    for (int64_t i = 0; i < 4 && i < p->n_keyframes && p->keyframes; i++)
        s->first_keys[i] = p->keyframes[i];
    s->index_chunks = p->index ? p->index->n_chunks : -1;
    tb_probe_free(&p);
    return 0;
}

/* open; info of a prepared video and of a plain file; three clips; two probes */
static int reader_step(void *p, int i)
{
    struct reader_ctx *c = p;
    if (i == 0)
        return tb_reader_open(&c->r, &(struct tb_reader_opts){.n_cached = 2});
    if (i <= 2)
        return tb_reader_info(c->r, i == 1 ? prepared[0] : plain_video, &c->info[i - 1]);
    if (i < 3 + R_CLIPS) {
        const struct reader_clip *rc = &reader_clips[i - 3];
        tb_rng rng;
        tb_rng_init_for(&rng, 9, TB_RNG_TEST, (uint64_t)i, 0);
        return tb_reader_read(c->r, rc->video, rc->frames, rc->n, &rc->crop, &rng, R_W, R_H,
                              c->out[i - 3], NULL);
    }
    return i == 3 + R_CLIPS ? probe_step(&c->probe[0], prepared[0], 0)
                            : probe_step(&c->probe[1], plain_video, 1);
}

static void reader_verify(void *p)
{
    struct reader_ctx *c = p;
    for (int v = 0; v < 2; v++) {
        CHECK(same_bytes(&c->info[v], &c->ref_info[v], sizeof(c->info[v])));
        CHECK_MSG(same_bytes(&c->probe[v], &c->ref_probe[v], sizeof(c->probe[v])),
                  "probe %d: %" PRId64 " frames, %" PRId64 " keyframes, not %" PRId64 ", %" PRId64,
                  v, c->probe[v].n_frames, c->probe[v].n_keyframes, c->ref_probe[v].n_frames,
                  c->ref_probe[v].n_keyframes);
    }
    for (int k = 0; k < R_CLIPS; k++)
        CHECK_MSG(same_bytes(c->out[k], c->ref[k], sizeof(c->out[k])), "clip %d differs", k);
}

static void reader_cleanup(void *p)
{
    struct reader_ctx *c = p;
    tb_reader_close(&c->r);
    memset(c->out, 0, sizeof(c->out));
    memset(c->info, 0, sizeof(c->info));
    memset(c->probe, 0, sizeof(c->probe));
}

static void test_reader(void)
{
    static struct reader_ctx c;
    struct op op = {.name = "reader", .n_steps = R_STEPS, .step = reader_step,
                    .verify = reader_verify, .cleanup = reader_cleanup, .ctx = &c};
    tbt_case = "reader: the run without faults";
    int failed = -1, rc = run_steps(&op, 0, &failed);
    CHECK_MSG(rc == 0, "step %d: %s", failed, tb_errmsg());
    if (rc < 0)
        return;
    memcpy(c.ref_info, c.info, sizeof(c.info));
    memcpy(c.ref, c.out, sizeof(c.out));
    memcpy(c.ref_probe, c.probe, sizeof(c.probe));
    CHECK(c.ref_info[0].n_frames == SECONDS * FPS && c.ref_probe[0].index_chunks == 3 &&
          c.ref_probe[1].decoded && c.ref_probe[1].n_frames == SECONDS * FPS);
    reader_cleanup(&c);
    sweep(&op, TBI_FAULT_ALLOC);
    sweep(&op, TBI_FAULT_OPEN);
}

/* ---- annotations, dataset, loader --------------------------------------------------------- */

enum { L_B = 2, L_T = 2, L_W = 16, L_H = 16, L_MAX_BATCHES = 8, L_MAX_SAMPLES = 64,
       L_SEED = 5, L_EPOCH = 1 };
#define L_CLIP_BYTES ((size_t)L_T * L_H * L_W * 3)

struct loader_ctx {
    int n_workers;
    struct tb_annotations *ann;
    tb_dataset *ds;
    tb_loader *l;
    int64_t n_batches, n_samples;
    int n[L_MAX_BATCHES];
    int64_t index[L_MAX_BATCHES][L_B];
    int32_t label[L_MAX_BATCHES][L_B][3];
    uint8_t video[L_MAX_BATCHES][L_B * L_CLIP_BYTES];
    struct tb_loader_stats stats;
    int replaced_before;
    /* without faults: the epoch's samples, every sample's clip and labels */
    int64_t ref_n_batches, ref_index[L_MAX_BATCHES * L_B];
    uint8_t ref_clip[L_MAX_SAMPLES][L_CLIP_BYTES];
    int32_t ref_label[L_MAX_SAMPLES][3];
};

static struct tb_dataset_opts dataset_opts(void)
{
    return (struct tb_dataset_opts){
        .root = root_dir, .ext = "mp4", .sampler = TB_SAMPLE_SEGMENTS, .n_frames = L_T,
        .train = 1, .width = L_W, .height = L_H,
        .crop = {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = 0.3, .scale_max = 1,
                 .ratio_min = 0.75, .ratio_max = 4 / 3.0, .flip = TB_FLIP_RANDOM}};
}

/* The same with RandAugment, whose frame of scratch is a worker's allocation too (the loader's
 * sweeps and cls training). */
static struct tb_dataset_opts dataset_opts_augmented(void)
{
    struct tb_dataset_opts o = dataset_opts();
    o.rand_augment = (struct tb_randaug_opts){.n_ops = 4, .magnitude = 9, .magnitude_std = 0.5,
                                              .fill = {128, 128, 128}};
    return o;
}

static void loader_prepare(void *p, int64_t k)
{
    struct loader_ctx *c = p;
    (void)k;
    c->replaced_before = replaced_clips();
}

/* annotations; dataset; loader; epoch; its batches, copied out; the end of the epoch */
static int loader_step(void *p, int i)
{
    struct loader_ctx *c = p;
    switch (i) {
    case 0:
        return tb_ann_load(&c->ann, train_csv, &(struct tb_ann_opts){.format = TB_ANN_EPIC});
    case 1: {
        struct tb_dataset_opts o = dataset_opts_augmented();
        return tb_dataset_open(&c->ds, c->ann, &o);
    }
    case 2: {
        struct tb_loader_opts o = {.batch_size = L_B, .n_workers = c->n_workers, .prefetch = 1,
                                   .seed = L_SEED, .shuffle = 1, .world = 1,
                                   .max_failure_rate = 0.5};
        c->n_samples = tb_dataset_size(c->ds);
        return tb_loader_open(&c->l, c->ds, &o);
    }
    case 3:
        c->n_batches = tb_loader_epoch(c->l, L_EPOCH);
        return c->n_batches < 0 ? (int)c->n_batches : 0;
    }
    struct tb_batch *b = NULL;
    int rc = tb_loader_next(c->l, &b);
    if (i == 4 + c->ref_n_batches) {
        /* the end of the epoch */
        tb_loader_get_stats(c->l, &c->stats);
        CHECK_MSG(rc == TB_EOF, "after the last batch: %s", tb_strerror(rc));
        return rc == TB_EOF ? 0 : rc < 0 ? rc : TB_EINVAL;
    }
    if (rc < 0)
        return rc;
    int j = i - 4;
    CHECK(b->number == j && b->epoch == L_EPOCH && b->n >= 1 && b->n <= L_B);
    c->n[j] = b->n;
    for (int k = 0; k < b->n; k++) {
        c->index[j][k] = b->index[k];
        memcpy(c->label[j][k], b->label + 3 * k, sizeof(c->label[j][k]));
    }
    memcpy(c->video[j], b->video, (size_t)b->n * L_CLIP_BYTES);
    tb_loader_release(c->l, b);
    return 0;
}

/* A batch that failed leaves the loader failed: a new one takes the epoch from the start. */
static int loader_resume_at(void *p, int failed)
{
    struct loader_ctx *c = p;
    if (failed < 4)
        return failed;
    tb_loader_close(&c->l);
    return 2;
}

/* The loader's contract: position p holds the epoch's sample, or where that clip failed the
 * substitute drawn for (seed, epoch, p, attempt 1); every clip is that sample's. */
static void loader_verify(void *p)
{
    struct loader_ctx *c = p;
    CHECK_EQ(c->n_batches, c->ref_n_batches);
    int64_t substituted = 0;
    for (int64_t j = 0; j < c->ref_n_batches; j++)
        for (int k = 0; k < c->n[j]; k++) {
            int64_t pos = j * L_B + k, s = c->index[j][k];
            if (s != c->ref_index[pos]) {
                tb_rng r;
                tb_rng_init_for3(&r, L_SEED, TB_RNG_SUBSTITUTE, L_EPOCH, (uint64_t)pos, 1);
                int64_t sub = (int64_t)tb_rng_below(&r, (uint64_t)c->n_samples);
                CHECK_MSG(s == sub, "position %" PRId64 ": sample %" PRId64 ", not %" PRId64
                          " or its substitute %" PRId64, pos, s, c->ref_index[pos], sub);
                substituted++;
            }
            if (s < 0 || s >= c->n_samples)
                continue;
            CHECK_MSG(same_bytes(c->video[j] + (size_t)k * L_CLIP_BYTES, c->ref_clip[s],
                                 L_CLIP_BYTES), "position %" PRId64 " (sample %" PRId64
                      "): another clip", pos, s);
            CHECK(same_bytes(c->label[j][k], c->ref_label[s], sizeof(c->ref_label[s])));
        }
    CHECK_MSG(substituted <= c->stats.failures && c->stats.failures <= 1,
              "%" PRId64 " substituted, %" PRId64 " failures", substituted, c->stats.failures);
    int warned = replaced_clips() - c->replaced_before;
    CHECK_EQ(warned, c->stats.failures);
    pthread_mutex_lock(&log_mu);
    if (warned) /* with the clip's message */
        CHECK_MSG(strlen(strstr(last_replaced, "replaced: ")) > 20, "warning: %s",
                  last_replaced);
    pthread_mutex_unlock(&log_mu);
}

static void loader_cleanup(void *p)
{
    struct loader_ctx *c = p;
    tb_loader_close(&c->l);
    tb_dataset_close(&c->ds);
    tb_ann_free(&c->ann);
    memset(c->n, 0, sizeof(c->n));
    memset(c->video, 0, sizeof(c->video));
    memset(&c->stats, 0, sizeof(c->stats));
    c->n_batches = 0;
}

static void test_loader(void)
{
    static struct loader_ctx c;
    tbt_case = "loader: the clips without faults";
    struct tb_annotations *ann = NULL;
    tb_dataset *ds = NULL;
    tb_reader *r = NULL;
    struct tb_dataset_opts o = dataset_opts_augmented();
    int rc = tb_ann_load(&ann, train_csv, &(struct tb_ann_opts){.format = TB_ANN_EPIC});
    if (rc == 0)
        rc = tb_dataset_open(&ds, ann, &o);
    if (rc == 0)
        rc = tb_reader_open(&r, NULL);
    CHECK_MSG(rc == 0, "%s", tb_errmsg());
    int64_t n = ds ? tb_dataset_size(ds) : 0;
    CHECK(n >= 3 && n <= L_MAX_SAMPLES && tb_dataset_sample_bytes(ds) == L_CLIP_BYTES);
    for (int64_t s = 0; rc == 0 && s < n && s < L_MAX_SAMPLES; s++) {
        struct tb_sample_info info;
        rc = tb_dataset_get(ds, r, L_SEED, L_EPOCH, s, c.ref_clip[s], &info);
        CHECK_MSG(rc == 0, "sample %" PRId64 ": %s", s, tb_errmsg());
        memcpy(c.ref_label[s], info.label, sizeof(c.ref_label[s]));
    }
    tb_reader_close(&r);
    tb_dataset_close(&ds);
    tb_ann_free(&ann);
    if (rc < 0 || n < 3 || n > L_MAX_SAMPLES)
        return;

    /* The epoch's order, from a loader without faults (the steps up to the epoch). */
    c.n_workers = 1;
    struct op op = {.name = "loader, 1 worker", .prepare = loader_prepare, .step = loader_step,
                    .resume_at = loader_resume_at, .verify = loader_verify,
                    .cleanup = loader_cleanup, .ctx = &c};
    op.n_steps = 4;
    int failed = -1;
    rc = run_steps(&op, 0, &failed);
    CHECK_MSG(rc == 0, "step %d: %s", failed, tb_errmsg());
    c.ref_n_batches = c.n_batches;
    CHECK(c.n_batches == (n + L_B - 1) / L_B && c.n_batches <= L_MAX_BATCHES);
    for (int64_t j = 0; rc == 0 && j < c.ref_n_batches; j++) {
        struct tb_batch *b = NULL;
        rc = tb_loader_next(c.l, &b);
        CHECK_MSG(rc == 0, "batch %" PRId64 ": %s", j, tb_errmsg());
        for (int k = 0; rc == 0 && k < b->n; k++)
            c.ref_index[j * L_B + k] = b->index[k];
        if (rc == 0)
            tb_loader_release(c.l, b);
    }
    loader_cleanup(&c);
    if (rc < 0 || c.ref_n_batches > L_MAX_BATCHES)
        return;
    op.n_steps = 4 + (int)c.ref_n_batches + 1;
    sweep(&op, TBI_FAULT_ALLOC);
    sweep(&op, TBI_FAULT_OPEN);
    /* Two workers: which allocation is the k-th depends on timing; the contract does not. */
    c.n_workers = 2;
    op.name = "loader, 2 workers";
    sweep(&op, TBI_FAULT_ALLOC);
}

/* ---- models ------------------------------------------------------------------------------- */

enum { M_B = 2, M_T = 4, M_S = 16 };

enum model_kind { M_VIT, M_MAE, M_CLIP };

struct model_ctx {
    enum model_kind kind;
    tb_vit *vit;
    tb_mae *mae;
    tb_clip *clip;
    uint8_t clips[M_B * M_T * M_S * M_S * 3];
    float loss, ref_loss;
    float *grad, *ref_grad;     /* every parameter's gradient, in registry order */
    int64_t n_floats;
};

static const struct tb_vit_config vit_config = {
    .dim = 32, .depth = 2, .heads = 2, .patch = 8, .tubelet = 2, .frames = M_T,
    .height = M_S, .width = M_S, .classes = 3, .pool = TB_POOL_MEAN, .pos = TB_POS_LEARNED};

static const struct tb_mae_config mae_config = {
    .enc = {.dim = 32, .depth = 1, .heads = 2, .patch = 8, .tubelet = 2, .frames = M_T,
            .height = M_S, .width = M_S},
    .mask_ratio = 0.5, .decoder_mask = TB_DECODER_MASK_RUNNING_CELL, .decoder_ratio = 0.5,
    .dec_dim = 16, .dec_depth = 1, .dec_heads = 2, .norm_target = 1};

enum { C_E = 16, C_VOCAB = 64, C_CTX = 8 };
static const struct tb_clip_config clip_config = {
    .video = {.dim = 32, .depth = 1, .heads = 2, .patch = 8, .tubelet = 1, .frames = M_T,
              .height = M_S, .width = M_S},
    .embed = C_E, .vocab = C_VOCAB, .ctx = C_CTX, .text_width = 16, .text_heads = 2,
    .text_layers = 1, .text_causal = 1, .temperature = 0.07, .learn_temperature = 1};

static tb_params *model_params(struct model_ctx *c)
{
    return c->kind == M_VIT ? tb_vit_params(c->vit)
           : c->kind == M_MAE ? tb_mae_params(c->mae)
                              : tb_clip_params(c->clip);
}

static int clip_step(struct model_ctx *c)
{
    float v[M_B * C_E], t[M_B * C_E], dv[M_B * C_E], dt[M_B * C_E];
    int32_t ids[M_B * C_CTX];
    for (int b = 0; b < M_B; b++)
        for (int j = 0; j < C_CTX; j++)
            ids[b * C_CTX + j] = j == 0 ? C_VOCAB - 2 : j < 3 + b ? 1 + (j * 7 + b) % 50
                                 : j == 3 + b ? C_VOCAB - 1 : 0;
    double scale, dscale = 0;
    int rc;
    if ((rc = tb_clip_encode_video(c->clip, v)) < 0 ||
        (rc = tb_clip_encode_text(c->clip, ids, M_B, t)) < 0 ||
        (rc = tb_clip_logit_scale(c->clip, &scale)) < 0)
        return rc;
    double loss = 0;
    if ((rc = tb_clip_infonce(v, t, M_B, C_E, scale, &loss, dv, dt, &dscale)) < 0)
        return rc;
    c->loss = (float)loss;
    return tb_clip_backward(c->clip, dv, dt, dscale);
}

/* open; init; plan; the input; forward and backward; the gradients to host memory */
static int model_step(void *p, int i)
{
    struct model_ctx *c = p;
    const float *mean = tb_mean_openai, *std = tb_std_openai;
    switch (i) {
    case 0:
        return c->kind == M_VIT   ? tb_vit_open(&c->vit, &vit_config)
               : c->kind == M_MAE ? tb_mae_open(&c->mae, &mae_config)
                                  : tb_clip_open(&c->clip, &clip_config);
    case 1:
        return c->kind == M_VIT   ? tb_vit_init(c->vit, 21)
               : c->kind == M_MAE ? tb_mae_init(c->mae, 21)
                                  : tb_clip_init(c->clip, 21);
    case 2:
        return c->kind == M_VIT   ? tb_vit_plan(c->vit, M_B, NULL)
               : c->kind == M_MAE ? tb_mae_plan(c->mae, M_B, NULL)
                                  : tb_clip_plan(c->clip, M_B, NULL);
    case 3: {
        if (c->kind == M_VIT)
            return tb_vit_set_clips(c->vit, c->clips, NULL, M_B, mean, std);
        if (c->kind == M_CLIP)
            return tb_clip_set_clips(c->clip, c->clips, NULL, M_B, mean, std);
        int rc = tb_mae_set_clips(c->mae, c->clips, NULL, M_B, mean, std);
        if (rc < 0)
            return rc;
        int N, vis, dec, values;
        tb_mae_sizes(c->mae, &N, &vis, &dec, &values);
        uint8_t mask[M_B * 64], drop[M_B * 64];
        TB_ASSERT(N <= 64);
        for (int b = 0; b < M_B; b++)
            if ((rc = tb_mae_make_mask(c->mae, 4, 0, b, mask + b * N, drop + b * N)) < 0)
                return rc;
        return tb_mae_set_mask(c->mae, mask, drop);
    }
    case 4:
        if (c->kind == M_VIT) {
            int64_t labels[M_B] = {2, 0};
            int rc = tb_vit_run(c->vit, labels, 0.1f, &c->loss);
            return rc < 0 ? rc : tb_vit_backward(c->vit);
        }
        if (c->kind == M_MAE) {
            int rc = tb_mae_run(c->mae, &c->loss);
            return rc < 0 ? rc : tb_mae_backward(c->mae);
        }
        return clip_step(c);
    }
    tb_params *reg = model_params(c);
    if (!c->grad) {
        c->n_floats = tb_params_floats(reg);
        c->grad = calloc((size_t)c->n_floats, sizeof(float));
        c->ref_grad = calloc((size_t)c->n_floats, sizeof(float));
    }
    for (int k = 0; k < tb_params_count(reg); k++) {
        int rc = tb_params_read_grad(reg, k, c->grad + tb_params_at(reg, k)->offset);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* A failed forward or backward takes a new input and forward. */
static int model_resume_at(void *p, int failed)
{
    (void)p;
    return failed >= 4 ? 3 : failed;
}

static void model_verify(void *p)
{
    struct model_ctx *c = p;
    CHECK_MSG(c->loss == c->ref_loss, "loss %.9g, not %.9g", c->loss, c->ref_loss);
    CHECK_MSG(same_bytes(c->grad, c->ref_grad, sizeof(float) * (size_t)c->n_floats),
              "the gradients differ");
}

static void model_cleanup(void *p)
{
    struct model_ctx *c = p;
    tb_vit_close(&c->vit);
    tb_mae_close(&c->mae);
    tb_clip_close(&c->clip);
    c->loss = 0;
    if (c->grad)
        memset(c->grad, 0, sizeof(float) * (size_t)c->n_floats);
}

static void test_model(enum model_kind kind, const char *name)
{
    static struct model_ctx c;
    free(c.grad);
    free(c.ref_grad);
    memset(&c, 0, sizeof(c));
    c.kind = kind;
    tb_rng r;
    tb_rng_init_for(&r, 17, TB_RNG_TEST, 0, 0);
    for (size_t i = 0; i < sizeof(c.clips); i++)
        c.clips[i] = (uint8_t)tb_rng_below(&r, 256);
    struct op op = {.name = name, .n_steps = 6, .step = model_step,
                    .resume_at = model_resume_at, .verify = model_verify,
                    .cleanup = model_cleanup, .ctx = &c};
    snprintf(case_name, sizeof(case_name), "%s: the run without faults", name);
    tbt_case = case_name;
    int failed = -1, rc = run_steps(&op, 0, &failed);
    CHECK_MSG(rc == 0, "step %d: %s", failed, tb_errmsg());
    if (rc == 0) {
        c.ref_loss = c.loss;
        memcpy(c.ref_grad, c.grad, sizeof(float) * (size_t)c.n_floats);
        double sum = 0;
        for (int64_t i = 0; i < c.n_floats; i++)
            sum += fabs(c.ref_grad[i]);
        CHECK(isfinite(c.ref_loss) && c.ref_loss > 0 && sum > 0);
    }
    model_cleanup(&c);
    if (rc == 0)
        sweep(&op, TBI_FAULT_ALLOC);
    free(c.grad);
    free(c.ref_grad);
    c.grad = c.ref_grad = NULL;
}

/* ---- checkpoints -------------------------------------------------------------------------- */

struct ckpt_ctx {
    char dir[4200], path[4300], check[4300];
    tb_vit *src, *dst;            /* the state saved; the model a load fills */
    struct tb_optim src_opt, dst_opt;
    struct tb_train_pos pos, loaded_pos;
    struct tb_ckpt_info info;
    char *older, *newer;          /* the file before the save; the file it writes */
    size_t older_len, newer_len;
    int had_older;
};

static const struct tb_train_pos ckpt_pos = {3, 1, 7};
static char ckpt_meta[512];

/* A model with moments from one update, or (step 0) as initialised. */
static int make_state(tb_vit **m, struct tb_optim *opt, uint64_t seed, int update)
{
    tb_rng r;
    uint8_t clips[M_B * M_T * M_S * M_S * 3];
    tb_rng_init_for(&r, seed, TB_RNG_TEST, 1, 0);
    for (size_t i = 0; i < sizeof(clips); i++)
        clips[i] = (uint8_t)tb_rng_below(&r, 256);
    int64_t labels[M_B] = {1, 2};
    float loss;
    *opt = (struct tb_optim){.kind = TB_OPT_ADAMW, .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f,
                             .eps = 1e-8f, .weight_decay = 0.05f};
    int rc = tb_vit_open(m, &vit_config);
    if (rc == 0)
        rc = tb_vit_init(*m, seed);
    if (rc == 0)
        rc = tb_optim_init(opt, tb_vit_params(*m));
    if (rc == 0 && update) {
        rc = tb_vit_plan(*m, M_B, NULL);
        if (rc == 0)
            rc = tb_vit_forward_clips(*m, clips, NULL, M_B, tb_mean_openai, tb_std_openai,
                                      labels, 0, &loss);
        if (rc == 0)
            rc = tb_vit_backward(*m);
        if (rc == 0)
            rc = tb_optim_update(opt, 1);
    }
    CHECK_MSG(rc == 0, "%s", tb_errmsg());
    return rc;
}

/* Files in dir other than the checkpoint: none may be left (a .part). */
static int stray_files(const char *dir, const char *keep)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, keep)) {
            TBT_FAIL("left in %s: %s", dir, e->d_name);
            n++;
        }
    if (d)
        closedir(d);
    return n;
}

static void write_bytes(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, len, f) == len);
    if (f)
        fclose(f);
}

/* Odd cases save over nothing, even ones over the older checkpoint. */
static void save_prepare(void *p, int64_t k)
{
    struct ckpt_ctx *c = p;
    c->had_older = k % 2 == 0;
    unlink(c->path);
    if (c->had_older)
        write_bytes(c->path, c->older, c->older_len);
}

static int save_step(void *p, int i)
{
    struct ckpt_ctx *c = p;
    (void)i;
    return tb_ckpt_save(c->path, tb_vit_params(c->src), &c->src_opt, &ckpt_pos, ckpt_meta);
}

/* A failed save leaves the older file whole, or nothing, and no temporary file. */
static void save_left(void *p)
{
    struct ckpt_ctx *c = p;
    size_t len = 0;
    char *now = tbt_read(c->path, &len);
    if (c->had_older)
        CHECK_MSG(now && len == c->older_len && same_bytes(now, c->older, len),
                  "%s: not the older checkpoint (%zu bytes)", c->path, now ? len : 0);
    else
        CHECK_MSG(!now, "%s: %zu bytes after a failed save over nothing", c->path, len);
    free(now);
    stray_files(c->dir, "ckpt.safetensors");
}

static void save_verify(void *p)
{
    struct ckpt_ctx *c = p;
    size_t len = 0;
    char *now = tbt_read(c->path, &len);
    CHECK_MSG(now && len == c->newer_len && same_bytes(now, c->newer, len),
              "%s: not the checkpoint a save without faults writes", c->path);
    free(now);
    stray_files(c->dir, "ckpt.safetensors");
}

static void ckpt_nothing(void *p)
{
    (void)p;
}

/* The model to load into holds the older state first (other weights, zero moments). */
static void load_prepare(void *p, int64_t k)
{
    struct ckpt_ctx *c = p;
    (void)k;
    write_bytes(c->check, c->older, c->older_len);
    CHECK_EQ(tb_ckpt_load(c->check, tb_vit_params(c->dst), &c->dst_opt, NULL), 0);
    unlink(c->check);
    memset(&c->info, 0, sizeof(c->info));
    memset(&c->loaded_pos, 0, sizeof(c->loaded_pos));
}

static int load_step(void *p, int i)
{
    struct ckpt_ctx *c = p;
    return i == 0 ? tb_ckpt_info(c->path, &c->info)
                  : tb_ckpt_load(c->path, tb_vit_params(c->dst), &c->dst_opt, &c->loaded_pos);
}

/* What was loaded, saved again, is the file: every weight, moment and the step. */
static void load_verify(void *p)
{
    struct ckpt_ctx *c = p;
    CHECK(c->info.model.dim == vit_config.dim && c->info.model.depth == vit_config.depth &&
          c->info.model.classes == vit_config.classes && c->info.model.pool == TB_POOL_MEAN);
    CHECK(same_bytes(&c->loaded_pos, &ckpt_pos, sizeof(ckpt_pos)));
    CHECK_EQ(tb_ckpt_save(c->check, tb_vit_params(c->dst), &c->dst_opt, &c->loaded_pos,
                          ckpt_meta), 0);
    size_t len = 0;
    char *now = tbt_read(c->check, &len);
    CHECK_MSG(now && len == c->newer_len && same_bytes(now, c->newer, len),
              "the loaded state is not the saved one");
    free(now);
    unlink(c->check);
}

static void test_checkpoint(void)
{
    static struct ckpt_ctx c;
    tbt_case = "checkpoint: the files without faults";
    snprintf(c.dir, sizeof(c.dir), "%s/ckpt", tbt_dir());
    snprintf(c.path, sizeof(c.path), "%s/ckpt.safetensors", c.dir);
    snprintf(c.check, sizeof(c.check), "%s/check.safetensors", tbt_dir());
    mkdir(c.dir, 0777);
    snprintf(ckpt_meta, sizeof(ckpt_meta), "\"task\":\"cls\",\"dim\":\"%d\",\"depth\":\"%d\","
             "\"heads\":\"%d\",\"patch\":\"%d\",\"tubelet\":\"%d\",\"frames\":\"%d\","
             "\"height\":\"%d\",\"width\":\"%d\",\"classes\":\"%d\",\"pool\":\"mean\","
             "\"pos\":\"learned\"", vit_config.dim, vit_config.depth, vit_config.heads,
             vit_config.patch, vit_config.tubelet, vit_config.frames, vit_config.height,
             vit_config.width, vit_config.classes);
    tb_vit *old = NULL;
    struct tb_optim old_opt;
    if (make_state(&old, &old_opt, 31, 0) < 0 || make_state(&c.src, &c.src_opt, 32, 1) < 0 ||
        make_state(&c.dst, &c.dst_opt, 33, 0) < 0)
        goto end;
    CHECK_EQ(tb_ckpt_save(c.path, tb_vit_params(old), &old_opt, &(struct tb_train_pos){0},
                          ckpt_meta), 0);
    c.older = tbt_read(c.path, &c.older_len);
    CHECK_EQ(tb_ckpt_save(c.path, tb_vit_params(c.src), &c.src_opt, &ckpt_pos, ckpt_meta), 0);
    c.newer = tbt_read(c.path, &c.newer_len);
    CHECK(c.older && c.newer && (c.older_len != c.newer_len ||
                                 memcmp(c.older, c.newer, c.older_len)));
    if (!c.older || !c.newer)
        goto end;
    struct op save = {.name = "checkpoint save", .n_steps = 1, .prepare = save_prepare,
                      .step = save_step, .left = save_left, .verify = save_verify,
                      .cleanup = ckpt_nothing, .ctx = &c};
    sweep(&save, TBI_FAULT_ALLOC);
    sweep(&save, TBI_FAULT_OPEN);
    sweep(&save, TBI_FAULT_WRITE);
    write_bytes(c.path, c.newer, c.newer_len);
    struct op load = {.name = "checkpoint load", .n_steps = 2, .prepare = load_prepare,
                      .step = load_step, .verify = load_verify, .cleanup = ckpt_nothing,
                      .ctx = &c};
    sweep(&load, TBI_FAULT_ALLOC);
    sweep(&load, TBI_FAULT_OPEN);
end:
    tb_optim_free(&old_opt);
    tb_optim_free(&c.src_opt);
    tb_optim_free(&c.dst_opt);
    tb_vit_close(&old);
    tb_vit_close(&c.src);
    tb_vit_close(&c.dst);
    free(c.older);
    free(c.newer);
}

/* ---- prep --------------------------------------------------------------------------------- */

enum { P_MAX_FILES = 16 };

struct prep_ctx {
    char out_root[4200], dir[4400];
    int resume;                   /* start from the finished video less its last chunk */
    struct tb_prep_result res, ref_res;
    int n_ref;
    char ref_name[P_MAX_FILES][64];
    char *ref_data[P_MAX_FILES];
    size_t ref_len[P_MAX_FILES];
};

/* The files of dir against the run without faults: each one present is that run's file of
 * its name, byte for byte; with complete, all of them are there. */
static void check_tree(const struct prep_ctx *c, int complete)
{
    DIR *d = opendir(c->dir);
    struct dirent *e;
    int seen = 0;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char path[4600];
        snprintf(path, sizeof(path), "%s/%s", c->dir, e->d_name);
        int i = 0;
        while (i < c->n_ref && strcmp(c->ref_name[i], e->d_name))
            i++;
        if (i == c->n_ref) {
            TBT_FAIL("%s: a file the run without faults does not leave", path);
            continue;
        }
        size_t len = 0;
        char *now = tbt_read(path, &len);
        CHECK_MSG(now && len == c->ref_len[i] && same_bytes(now, c->ref_data[i], len),
                  "%s: %zu bytes, not the %zu of the run without faults", path, len,
                  c->ref_len[i]);
        free(now);
        seen++;
    }
    if (d)
        closedir(d);
    if (complete)
        CHECK_MSG(seen == c->n_ref, "%s: %d files, not %d", c->dir, seen, c->n_ref);
}

static void prep_prepare(void *p, int64_t k)
{
    struct prep_ctx *c = p;
    (void)k;
    remove_tree(c->dir);
    memset(&c->res, 0, sizeof(c->res));
    if (!c->resume)
        return;
    /* An earlier run's files, less the last chunk (and so the finished index). */
    mkdir(c->dir, 0777);
    for (int i = 0; i < c->n_ref; i++) {
        char path[4600];
        if (!strcmp(c->ref_name[i], "4.mp4") || !strcmp(c->ref_name[i], "video.idx"))
            continue;
        snprintf(path, sizeof(path), "%s/%s", c->dir, c->ref_name[i]);
        write_bytes(path, c->ref_data[i], c->ref_len[i]);
    }
}

static int prep_step(void *p, int i)
{
    struct prep_ctx *c = p;
    (void)i;
    struct tb_prep_opts o = prep_opts(c->out_root);
    return tb_prep_video(&o, src_video, &c->res);
}

static void prep_left(void *p)
{
    check_tree(p, 0);
}

static void prep_verify(void *p)
{
    struct prep_ctx *c = p;
    check_tree(c, 1);
    CHECK(c->res.n_frames == c->ref_res.n_frames && c->res.n_chunks == c->ref_res.n_chunks &&
          c->res.width == c->ref_res.width && c->res.height == c->ref_res.height &&
          !strcmp(c->res.name, c->ref_res.name));
}

static void test_prep(void)
{
    static struct prep_ctx c;
    tbt_case = "prep: the run without faults";
    snprintf(c.out_root, sizeof(c.out_root), "%s/prep", tbt_dir());
    snprintf(c.dir, sizeof(c.dir), "%s/P01_01.mp4", c.out_root);
    struct op op = {.name = "prep", .n_steps = 1, .prepare = prep_prepare, .step = prep_step,
                    .left = prep_left, .verify = prep_verify, .cleanup = ckpt_nothing,
                    .ctx = &c};
    prep_prepare(&c, 0);
    int rc = prep_step(&c, 0);
    CHECK_MSG(rc == 0, "%s", tb_errmsg());
    DIR *d = rc == 0 ? opendir(c.dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d)) && c.n_ref < P_MAX_FILES) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char path[4600];
        snprintf(path, sizeof(path), "%s/%s", c.dir, e->d_name);
        snprintf(c.ref_name[c.n_ref], sizeof(c.ref_name[0]), "%s", e->d_name);
        c.ref_data[c.n_ref] = tbt_read(path, &c.ref_len[c.n_ref]);
        c.n_ref++;
    }
    if (d)
        closedir(d);
    c.ref_res = c.res;
    /* 3 chunks and their indexes, video.idx, .lock */
    CHECK_EQ(c.n_ref, 8);
    CHECK(c.res.n_chunks == 3 && c.res.n_frames == SECONDS * FPS);
    if (rc == 0 && c.n_ref == 8) {
        sweep(&op, TBI_FAULT_ALLOC);
        sweep(&op, TBI_FAULT_OPEN);
        sweep(&op, TBI_FAULT_WRITE);
        c.resume = 1;
        op.name = "prep, resuming";
        sweep(&op, TBI_FAULT_ALLOC);
        sweep(&op, TBI_FAULT_OPEN);
        sweep(&op, TBI_FAULT_WRITE);
    }
    for (int i = 0; i < c.n_ref; i++)
        free(c.ref_data[i]);
}

/* ---- training: tb_train, checkpoints, resume ------------------------------------------------ */

struct train_ctx {
    char out[4200], ckpt[4300], sim[4300], val_csv[4400], verbs_csv[4400];
    struct tb_annotations *train, *val;
    struct tb_train_opts o;
    struct tb_eval_result eval, ref_eval;
    char *ref_ckpt[2];            /* the run's checkpoints: after epoch 1, at the end */
    size_t ref_len[2];
    char *ref_sim;                /* clip: the evaluation's similarities (.npy) */
    size_t ref_sim_len;
    int capture;                  /* the run without faults: keeps the epoch-1 checkpoint */
    int replaced_before;
};

/* The reference run's first step of epoch 2: the epoch-1 checkpoint is on disk. */
static void train_on_step(void *user, const struct tb_train_progress *p)
{
    struct train_ctx *c = user;
    if (c->capture && p->epoch == 1 && !c->ref_ckpt[0])
        c->ref_ckpt[0] = tbt_read(c->ckpt, &c->ref_len[0]);
}

static void train_prepare(void *p, int64_t k)
{
    struct train_ctx *c = p;
    (void)k;
    remove_tree(c->out);
    memset(&c->eval, 0, sizeof(c->eval));
    c->replaced_before = replaced_clips();
}

static int train_step(void *p, int i)
{
    struct train_ctx *c = p;
    (void)i;
    return tb_train(&c->o, &c->eval);
}

/* The run's directory: a checkpoint (one the run without faults wrote, whole), metrics.jsonl,
 * event files, the similarities (whole); no temporary file. */
static void check_run_dir(const struct train_ctx *c, int finished)
{
    DIR *d = opendir(c->out);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, "metrics.jsonl") ||
            !strncmp(n, "events.out.tfevents.", 20) || !strcmp(n, "last.safetensors") ||
            !strcmp(n, "best.safetensors") ||
            (!strcmp(n, "sim.npy") && c->ref_sim))
            continue;
        TBT_FAIL("left in %s: %s", c->out, n);
    }
    if (d)
        closedir(d);
    size_t len = 0;
    char *now = tbt_read(c->ckpt, &len);
    int which = -1;
    for (int k = 0; now && k < 2; k++)
        if (len == c->ref_len[k] && same_bytes(now, c->ref_ckpt[k], len))
            which = k;
    if (finished)
        CHECK_MSG(which == 1, "%s: not the final checkpoint of the run without faults",
                  c->ckpt);
    else
        CHECK_MSG(!now || which >= 0, "%s: %zu bytes, none of the run's checkpoints", c->ckpt,
                  len);
    free(now);
    if (!c->ref_sim)
        return;
    now = tbt_read(c->sim, &len);
    CHECK_MSG(finished ? now != NULL : 1, "%s: missing", c->sim);
    CHECK_MSG(!now || (len == c->ref_sim_len && same_bytes(now, c->ref_sim, len)),
              "%s: not the similarities of the run without faults", c->sim);
    free(now);
}

static void train_left(void *p)
{
    check_run_dir(p, 0);
}

static int same_eval(const struct tb_eval_result *a, const struct tb_eval_result *b)
{
    return a->n_items == b->n_items && a->top1 == b->top1 && a->top5 == b->top5 &&
           a->loss == b->loss && a->map[2] == b->map[2] && a->ndcg[2] == b->ndcg[2] &&
           a->n_sentences == b->n_sentences;
}

/* The run without faults, or where a clip was replaced (the loader's policy for a file that
 * fails to open) a run as whole: a checkpoint of the model, an evaluation of every item. */
static void train_verify(void *p)
{
    struct train_ctx *c = p;
    if (replaced_clips() > c->replaced_before) {
        struct tb_ckpt_info info;
        CHECK_MSG(tb_ckpt_info(c->ckpt, &info) == 0 && info.model.dim == c->o.model.dim,
                  "%s", tb_errmsg());
        CHECK_EQ(c->eval.n_items, c->ref_eval.n_items);
        return;
    }
    check_run_dir(c, 1);
    CHECK_MSG(same_eval(&c->eval, &c->ref_eval), "evaluation: %" PRId64 " items, top-1 %g, "
              "loss %g, mAP %g, not %" PRId64 ", %g, %g, %g", c->eval.n_items, c->eval.top1,
              c->eval.loss, c->eval.map[2], c->ref_eval.n_items, c->ref_eval.top1,
              c->ref_eval.loss, c->ref_eval.map[2]);
}

/* Two epochs of a task on the synthetic data, an evaluation at the end (cls, clip). */
static void train_opts(struct train_ctx *c, const char *task)
{
    c->o = (struct tb_train_opts){
        .task = task,
        .model = {.dim = 16, .depth = 1, .heads = 2, .patch = 8, .tubelet = 2, .frames = L_T,
                  .height = L_H, .width = L_W, .pool = TB_POOL_MEAN, .pos = TB_POS_LEARNED},
        .train_ann = c->train, .val_ann = c->val, .label = TB_LABEL_VERB,
        .data = dataset_opts(), .norm = TB_NORM_OPENAI, .batch = L_B, .workers = 1,
        .prefetch = 1, .epochs = 2, .lr = 1e-3, .min_lr = 1e-5, .weight_decay = 0.05,
        .smoothing = 0.1, .clip_grad = 1, .beta1 = 0.9, .beta2 = 0.999, .adam_eps = 1e-8,
        .optimizer = TB_OPT_ADAMW, .seed = 3, .val_views = 1, .val_crops = 1, .log_every = 1,
        .tensorboard = 1, .out_dir = c->out, .on_step = train_on_step, .user = c};
    if (!strcmp(task, "cls")) {
        c->o.model.classes = TB_SYNTH_N_VERBS;
        c->o.data = dataset_opts_augmented();
    } else if (!strcmp(task, "mae")) {
        c->o.mae = (struct tb_mae_config){.mask_ratio = 0.5, .dec_dim = 16, .dec_depth = 1,
                                          .dec_heads = 2, .norm_target = 1};
    } else {
        c->o.model.tubelet = 1;
        c->o.clip = (struct tb_clip_config){.embed = 16, .vocab = 49408, .ctx = 8,
                                            .text_width = 4, .text_heads = 1,
                                            .text_layers = 1, .text_causal = 1,
                                            .temperature = 0.07};
        c->o.class_names = c->verbs_csv;
        c->o.similarity = c->sim;
        c->o.relevant_captions = 0.1; /* its sentences and sparse rows, allocated at open */
    }
}

static void test_train(const char *task)
{
    static struct train_ctx c;
    char name[64];
    snprintf(name, sizeof(name), "training %s", task);
    snprintf(case_name, sizeof(case_name), "%s: the run without faults", name);
    tbt_case = case_name;
    snprintf(c.out, sizeof(c.out), "%s/run", tbt_dir());
    snprintf(c.ckpt, sizeof(c.ckpt), "%s/last.safetensors", c.out);
    snprintf(c.sim, sizeof(c.sim), "%s/sim.npy", c.out);
    snprintf(c.val_csv, sizeof(c.val_csv), "%s/annotations/EPIC_100_validation.csv", syn_dir);
    snprintf(c.verbs_csv, sizeof(c.verbs_csv), "%s/annotations/EPIC_100_verb_classes.csv",
             syn_dir);
    struct tb_ann_opts epic = {.format = TB_ANN_EPIC};
    CHECK_EQ(tb_ann_load(&c.train, train_csv, &epic), 0);
    CHECK_EQ(tb_ann_load(&c.val, c.val_csv, &epic), 0);
    if (!c.train || !c.val)
        goto end;
    train_opts(&c, task);
    struct op op = {.name = name, .n_steps = 1, .prepare = train_prepare, .step = train_step,
                    .left = train_left, .verify = train_verify, .cleanup = ckpt_nothing,
                    .ctx = &c,
                    .max_cases = strcmp(task, "cls") ? TRAIN_CASES : TRAIN_CLS_CASES};
    train_prepare(&c, 0);
    c.capture = 1;
    int rc = train_step(&c, 0);
    c.capture = 0;
    CHECK_MSG(rc == 0, "%s", tb_errmsg());
    c.ref_ckpt[1] = tbt_read(c.ckpt, &c.ref_len[1]);
    c.ref_eval = c.eval;
    if (c.o.similarity)
        c.ref_sim = tbt_read(c.sim, &c.ref_sim_len);
    CHECK(c.ref_ckpt[0] && c.ref_ckpt[1]);
    CHECK((c.ref_eval.n_items > 0) == (strcmp(task, "mae") != 0) && (!c.o.similarity || c.ref_sim));
    if (rc == 0 && c.ref_ckpt[0] && c.ref_ckpt[1]) {
        sweep(&op, TBI_FAULT_ALLOC);
        sweep(&op, TBI_FAULT_OPEN);
        sweep(&op, TBI_FAULT_WRITE);
    }
end:
    tb_ann_free(&c.train);
    tb_ann_free(&c.val);
    for (int k = 0; k < 2; k++) {
        free(c.ref_ckpt[k]);
        c.ref_ckpt[k] = NULL;
    }
    free(c.ref_sim);
    c.ref_sim = NULL;
}

/* With names on the command line, only those operations. */
static int selected(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name))
            return 1;
    return argc < 2;
}

int main(int argc, char **argv)
{
    tbt_begin("faults");
    signal(SIGALRM, on_alarm);
    tb_set_log(on_log, NULL);
    if (make_data() < 0)
        TBT_EXIT();
#define RUN(name, call)                                                                        \
    do {                                                                                       \
        if (selected(argc, argv, name))                                                        \
            call;                                                                              \
    } while (0)
    RUN("reader", test_reader());
    RUN("loader", test_loader());
    RUN("vit", test_model(M_VIT, "ViT"));
    RUN("mae", test_model(M_MAE, "VideoMAE"));
    RUN("clip", test_model(M_CLIP, "dual encoder"));
    RUN("checkpoint", test_checkpoint());
    RUN("prep", test_prep());
    RUN("train", test_train("cls"));
    RUN("train-mae", test_train("mae"));
    RUN("train-clip", test_train("clip"));
    TBT_EXIT();
}
