/* tests/test_augment.c - RandAugment (src/data/randaug.c) against timm's ops written out over
 * Pillow (tests/ref/randaug_ref.py):
 * - every op of the increasing set at three magnitudes (both signs where it has one; the
 *   geometric ops with bicubic and bilinear) on real frames (opencv-doc's videos, square and
 *   not): the arguments equal, the pixels equal exactly for the pixel ops and within 1 level
 *   for the geometric ones; then whole drawn plans of 4 ops the same way;
 * - a clip's frames all get the same ops, each frame's statistics its own;
 * - the draws: op choice uniform and with replacement, probability 0.5, the magnitude's
 *   clipped normal (mean, spread, mass at the clip), the signs, against their distributions;
 * - the settings' parser; the loader: batches identical for 1 and 4 workers, and each clip
 *   the unaugmented clip with its drawn plan applied (after the crop, in training only);
 *   `tubelet train --rand-augment`: refused for --task mae, a bad value named.
 * Skips the Pillow part without python3-pil, and the frames' parts without opencv-doc. */
#define _POSIX_C_SOURCE 200809L
#include "tb_test.h"
#include "tubelet/data.h"
#include "tubelet/rng.h"

/* timm's ops come first in enum tb_ra_op, pytorchvideo's after them */
#define TIMM_N_OPS TB_RA_PV_BRIGHTNESS

#ifndef PYTHON
#define PYTHON "/usr/bin/python3"
#endif

static const uint8_t gray[3] = {128, 128, 128};
static const double magnitudes[3] = {2.5, 7.0, 9.6};

static int is_geometric(enum tb_ra_op op)
{
    return op == TB_RA_ROTATE || op == TB_RA_SHEAR_X || op == TB_RA_SHEAR_Y ||
           op == TB_RA_TRANSLATE_X || op == TB_RA_TRANSLATE_Y;
}

static int is_signed(enum tb_ra_op op)
{
    return is_geometric(op) || op == TB_RA_COLOR || op == TB_RA_CONTRAST ||
           op == TB_RA_BRIGHTNESS || op == TB_RA_SHARPNESS;
}

/* ---- frames ------------------------------------------------------------------------------ */

struct frames {
    const char *what;
    int w, h, n;
    uint8_t *px;
};

/* n frames of video (indices at), the whole picture scaled to w x h, appended to f. */
static int add_frames(struct frames *f, tb_reader *r, const char *video, const int64_t *at,
                      int n)
{
    struct tb_video_info vi;
    if (!video || tb_reader_info(r, video, &vi) < 0)
        return -1;
    struct tb_crop_spec spec = {.mode = TB_CROP_FIXED, .w = vi.width, .h = vi.height};
    size_t frame = (size_t)f->w * f->h * 3;
    f->px = realloc(f->px, frame * (size_t)(f->n + n));
    int rc = tb_reader_read(r, video, at, n, &spec, NULL, f->w, f->h, f->px + frame * f->n,
                            NULL);
    CHECK_MSG(rc == 0, "%s: %s", video, tb_errmsg());
    if (rc == 0)
        f->n += n;
    return rc;
}

/* ---- against the reference --------------------------------------------------------------- */

struct job {
    enum tb_resample rs;
    int n;                       /* ops */
    struct tb_ra_step step[TB_RA_MAX_OPS];
};

/* Runs randaug_ref.py on f for jobs; *out gets each job's frames, *args its printed line. */
static int run_ref(const struct frames *f, const struct job *jobs, int n_jobs, uint8_t **out,
                   char **args)
{
    const char *in = tbt_path("frames.rgb"), *jp = tbt_path("jobs.txt"),
               *op = tbt_path("ref.rgb");
    FILE *fp = fopen(in, "wb");
    size_t bytes = (size_t)f->w * f->h * 3 * f->n;
    CHECK(fp && fwrite(f->px, 1, bytes, fp) == bytes);
    if (fp)
        fclose(fp);
    fp = fopen(jp, "w");
    CHECK(fp != NULL);
    for (int j = 0; fp && j < n_jobs; j++) {
        fprintf(fp, "%s", jobs[j].rs == TB_RESAMPLE_BICUBIC ? "bicubic" : "bilinear");
        for (int k = 0; k < jobs[j].n; k++)
            fprintf(fp, " %s:%.17g:%d", tb_randaug_op_name(jobs[j].step[k].op),
                    jobs[j].step[k].magnitude, jobs[j].step[k].negate);
        fprintf(fp, "\n");
    }
    if (fp)
        fclose(fp);
    int rc = tbt_run(args, 600, PYTHON " %s/tests/ref/randaug_ref.py %s %d %d %d %s %s",
                     TB_SOURCE_DIR, in, f->w, f->h, f->n, jp, op);
    CHECK_MSG(rc == 0, "randaug_ref.py: %s", *args ? *args : "");
    size_t len = 0;
    *out = rc == 0 ? (uint8_t *)tbt_read(op, &len) : NULL;
    CHECK_MSG(rc != 0 || (*out && len == bytes * (size_t)n_jobs), "randaug_ref.py wrote %zu "
              "bytes, not %zu", len, bytes * (size_t)n_jobs);
    return *out && len == bytes * (size_t)n_jobs ? 0 : -1;
}

/* The reference's printed argument: "None" for the ops without one. */
static double ref_arg(const char *s, char **end)
{
    while (*s == ' ')
        s++;
    if (!strncmp(s, "None", 4)) {
        *end = (char *)s + 4;
        return 0;
    }
    return strtod(s, end);
}

/* Our clip for job j against the reference's: the arguments, then the pixels. Returns the
 * largest difference. */
static int compare_job(const struct frames *f, const struct job *jb, const uint8_t *ref,
                       const char *ref_line, const char *what, int tol)
{
    size_t bytes = (size_t)f->w * f->h * 3 * f->n;
    uint8_t *ours = malloc(bytes);
    memcpy(ours, f->px, bytes);
    char *p = (char *)ref_line;
    for (int k = 0; k < jb->n; k++) {
        double a = ref_arg(p, &p);
        CHECK_MSG(a == jb->step[k].arg, "%s: op %d (%s): argument %.17g, timm's %.17g", what,
                  k, tb_randaug_op_name(jb->step[k].op), jb->step[k].arg, a);
        CHECK_EQ(tb_randaug_op(ours, f->n, f->w, f->h, jb->step[k].op, jb->step[k].arg, jb->rs,
                               gray), 0);
    }
    int worst = 0;
    size_t n_diff = 0, first = 0;
    for (size_t k = 0; k < bytes; k++) {
        int d = abs((int)ours[k] - (int)ref[k]);
        if (d && !n_diff++)
            first = k;
        worst = d > worst ? d : worst;
    }
    /* The geometric ops: within 1 level, on at most 1 value in 1000 (the double arithmetic is
     * Pillow's term by term; a libm whose cos or sin rounds otherwise could move a few). */
    CHECK_MSG(worst <= tol && n_diff * 1000 <= bytes * (size_t)tol, "%s on %s: %zu of %zu "
              "values differ, by up to %d (tolerance %d); first at byte %zu: %d, Pillow's %d",
              what, f->what, n_diff, bytes, worst, tol, first, ours[first], ref[first]);
    if (n_diff)
        printf("  %s on %s: %zu values differ by up to %d\n", what, f->what, n_diff, worst);
    free(ours);
    return worst;
}

/* Every op at three magnitudes, both signs, both filters for the geometric ones. */
static void test_ops(const struct frames *f)
{
    struct job jobs[15 * 3 * 4];
    int n = 0;
    for (int op = 0; op < TIMM_N_OPS; op++)
        for (int m = 0; m < 3; m++)
            for (int neg = 0; neg <= is_signed(op); neg++)
                for (int rs = 0; rs <= is_geometric(op); rs++) {
                    struct job *j = &jobs[n++];
                    j->rs = rs ? TB_RESAMPLE_BILINEAR : TB_RESAMPLE_BICUBIC;
                    j->n = 1;
                    j->step[0] = (struct tb_ra_step){.op = op, .apply = 1,
                                                     .magnitude = magnitudes[m], .negate = neg};
                    j->step[0].arg = tb_randaug_level_arg(op, magnitudes[m], neg);
                }
    uint8_t *ref = NULL;
    char *lines = NULL;
    tbt_case = "each op against Pillow";
    if (run_ref(f, jobs, n, &ref, &lines) == 0) {
        size_t bytes = (size_t)f->w * f->h * 3 * f->n;
        char *save = NULL, *line = strtok_r(lines, "\n", &save);
        int worst_geo = 0;
        for (int j = 0; j < n; j++, line = strtok_r(NULL, "\n", &save)) {
            const struct tb_ra_step *s = &jobs[j].step[0];
            char what[128];
            snprintf(what, sizeof(what), "%s m%g%s%s", tb_randaug_op_name(s->op), s->magnitude,
                     s->negate ? " negated" : "",
                     jobs[j].rs == TB_RESAMPLE_BILINEAR ? " bilinear" : "");
            CHECK_MSG(line != NULL, "%s: no line from the reference", what);
            if (!line)
                break;
            /* no comparison of unchanged frames: each op changes these */
            CHECK_MSG(memcmp(ref + bytes * j, f->px, bytes) != 0, "%s leaves %s as they are",
                      what, f->what);
            int w = compare_job(f, &jobs[j], ref + bytes * j, line, what,
                                is_geometric(s->op) ? 1 : 0);
            worst_geo = is_geometric(s->op) && w > worst_geo ? w : worst_geo;
        }
        printf("%s: %d op settings against Pillow; largest difference of the geometric ops: "
               "%d\n", f->what, n, worst_geo);
    }
    free(ref);
    free(lines);
}

/* Whole plans as the loader draws them (m7-n4-mstd0.5: VideoMAE's), applied in order. */
static void test_plans(const struct frames *f)
{
    enum { N_PLANS = 24 };
    struct tb_randaug_opts o;
    CHECK_EQ(tb_randaug_parse("m7-n4", &o), 0);
    struct job jobs[N_PLANS];
    struct tb_ra_plan plans[N_PLANS];
    int n_ops = 0;
    for (int j = 0; j < N_PLANS; j++) {
        o.resample = j % 3 == 2 ? TB_RESAMPLE_BILINEAR : TB_RESAMPLE_BICUBIC;
        tb_randaug_draw(&o, 7, 1, j, &plans[j]);
        jobs[j].rs = o.resample;
        jobs[j].n = 0;
        for (int k = 0; k < plans[j].n; k++)
            if (plans[j].step[k].apply)
                jobs[j].step[jobs[j].n++] = plans[j].step[k];
        n_ops += jobs[j].n;
    }
    tbt_case = "drawn plans against Pillow";
    CHECK(n_ops > N_PLANS);
    uint8_t *ref = NULL;
    char *lines = NULL;
    if (run_ref(f, jobs, N_PLANS, &ref, &lines) == 0) {
        size_t bytes = (size_t)f->w * f->h * 3 * f->n;
        char *save = NULL, *line = strtok_r(lines, "\n", &save);
        for (int j = 0; j < N_PLANS; j++) {
            char what[64];
            snprintf(what, sizeof(what), "plan %d (%d ops)", j, jobs[j].n);
            int geo = 0;
            for (int k = 0; k < jobs[j].n; k++)
                geo |= is_geometric(jobs[j].step[k].op);
            compare_job(f, &jobs[j], ref + bytes * j, jobs[j].n ? line : "", what, geo ? 1 : 0);
            /* tb_randaug_apply is those ops in order */
            uint8_t *clip = malloc(bytes), *each = malloc(bytes);
            memcpy(clip, f->px, bytes);
            memcpy(each, f->px, bytes);
            o.resample = jobs[j].rs;
            CHECK_EQ(tb_randaug_apply(&plans[j], &o, clip, f->n, f->w, f->h), 0);
            for (int k = 0; k < jobs[j].n; k++)
                tb_randaug_op(each, f->n, f->w, f->h, jobs[j].step[k].op, jobs[j].step[k].arg,
                              jobs[j].rs, gray);
            CHECK_MSG(!memcmp(clip, each, bytes), "%s: tb_randaug_apply differs from its ops",
                      what);
            free(clip);
            free(each);
            if (jobs[j].n)
                line = strtok_r(NULL, "\n", &save);
        }
    }
    free(ref);
    free(lines);
}

/* ---- one clip ---------------------------------------------------------------------------- */

/* Frames 0 and 2 equal: every op leaves them equal (one op and argument for the clip); frame
 * 1 differs, and each frame comes out as it would alone (its own statistics). */
static void test_clip(const struct frames *f)
{
    tbt_case = "the same op on every frame";
    if (f->n < 2)
        return;
    size_t frame = (size_t)f->w * f->h * 3;
    uint8_t *clip = malloc(frame * 3), *alone = malloc(frame);
    for (int op = 0; op < TB_RA_N_OPS; op++) {
        memcpy(clip, f->px, frame);
        memcpy(clip + frame, f->px + frame, frame);
        memcpy(clip + 2 * frame, f->px, frame);
        double arg = tb_randaug_level_arg(op, 7.3, op % 2);
        CHECK_EQ(tb_randaug_op(clip, 3, f->w, f->h, op, arg, TB_RESAMPLE_BICUBIC, gray), 0);
        CHECK_MSG(!memcmp(clip, clip + 2 * frame, frame), "%s: equal frames came out different",
                  tb_randaug_op_name(op));
        for (int t = 0; t < 2; t++) {
            memcpy(alone, f->px + t * frame, frame);
            tb_randaug_op(alone, 1, f->w, f->h, op, arg, TB_RESAMPLE_BICUBIC, gray);
            CHECK_MSG(!memcmp(alone, clip + t * frame, frame), "%s: frame %d differs from the "
                      "frame alone", tb_randaug_op_name(op), t);
        }
    }
    free(clip);
    free(alone);
}

/* ---- the draws --------------------------------------------------------------------------- */

static double phi(double z)
{
    return 0.5 * erfc(-z / sqrt(2.0));
}

/* Mean and standard deviation of N(mu, sd) clipped to [0, 10], and the mass at 10: the
 * interior integrated by the midpoint rule; the masses at 10 and at 0. */
static void clipped_normal(double mu, double sd, double *mean, double *std, double *at_top,
                           double *at_bottom)
{
    double p_hi = 1 - phi((10 - mu) / sd);
    double m1 = 10 * p_hi, m2 = 100 * p_hi;
    int n = 200000;
    for (int k = 0; k < n; k++) {
        double x = (k + 0.5) * 10.0 / n, z = (x - mu) / sd;
        double w = exp(-0.5 * z * z) / (sd * sqrt(2 * 3.141592653589793)) * (10.0 / n);
        m1 += x * w;
        m2 += x * x * w;
    }
    *mean = m1;
    *std = sqrt(m2 - m1 * m1);
    *at_top = p_hi;
    *at_bottom = phi((0 - mu) / sd);
}

static void check_rate(const char *what, int64_t hits, int64_t n, double p)
{
    double sigma = sqrt(p * (1 - p) / (double)n), got = (double)hits / (double)n;
    CHECK_MSG(fabs(got - p) <= 4 * sigma, "%s: %.5f, expected %.5f (4 sigma %.5f)", what, got, p,
              4 * sigma);
}

static int same_plan(const struct tb_ra_plan *a, const struct tb_ra_plan *b)
{
    int same = a->n == b->n;
    for (int k = 0; same && k < a->n; k++)
        same = a->step[k].op == b->step[k].op && a->step[k].apply == b->step[k].apply &&
               a->step[k].magnitude == b->step[k].magnitude &&
               a->step[k].negate == b->step[k].negate && a->step[k].arg == b->step[k].arg;
    return same;
}

static void test_draws(double mu, double sd, uint64_t seed)
{
    char name[64];
    snprintf(name, sizeof(name), "draws m%g mstd%g", mu, sd);
    tbt_case = name;
    enum { N = 60000, K = 4 };
    struct tb_randaug_opts o = {.n_ops = K, .magnitude = mu, .magnitude_std = sd};
    int64_t count[TIMM_N_OPS] = {0}, applied = 0, signs = 0, negated = 0, repeats = 0,
            at_top = 0, at_bottom = 0, n_steps = 0;
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < N; i++) {
        struct tb_ra_plan p, again;
        tb_randaug_draw(&o, seed, 5, i, &p);
        CHECK_EQ(p.n, K);
        int seen = 0, repeated = 0;
        for (int k = 0; k < K; k++) {
            const struct tb_ra_step *s = &p.step[k];
            count[s->op]++;
            repeated |= (seen >> s->op) & 1;
            seen |= 1 << s->op;
            applied += s->apply;
            if (is_signed(s->op)) {
                signs++;
                negated += s->negate;
            }
            s1 += s->magnitude;
            s2 += s->magnitude * s->magnitude;
            at_top += s->magnitude == 10;
            at_bottom += s->magnitude == 0;
            n_steps++;
            if (s->magnitude < 0 || s->magnitude > 10)
                TBT_FAIL("magnitude %g outside [0, 10]", s->magnitude);
            if (s->arg != tb_randaug_level_arg(s->op, s->magnitude, s->negate))
                TBT_FAIL("step %d of plan %" PRId64 ": its argument is not its level's", k, i);
        }
        repeats += repeated;
        if (i < 100) { /* the same keys, the same plan */
            tb_randaug_draw(&o, seed, 5, i, &again);
            CHECK(same_plan(&p, &again));
        }
    }
    double chi2 = 0, e = (double)n_steps / TIMM_N_OPS;
    for (int op = 0; op < TIMM_N_OPS; op++) {
        chi2 += (count[op] - e) * (count[op] - e) / e;
        char what[64];
        snprintf(what, sizeof(what), "share of %s", tb_randaug_op_name(op));
        check_rate(what, count[op], n_steps, 1.0 / TIMM_N_OPS);
    }
    /* chi-square, 14 degrees of freedom: 36.1 is its 0.999 quantile */
    CHECK_MSG(chi2 < 36.1, "op choice chi-square %.1f", chi2);
    check_rate("share applied", applied, n_steps, 0.5);
    check_rate("share negated", negated, signs, 0.5);
    /* with replacement: a plan repeats an op with 1 - 15*14*13*12 / 15^4 */
    double distinct = 1;
    for (int k = 0; k < K; k++)
        distinct *= (double)(TIMM_N_OPS - k) / TIMM_N_OPS;
    check_rate("plans repeating an op", repeats, N, 1 - distinct);
    double mean, std, top, bottom;
    clipped_normal(mu, sd, &mean, &std, &top, &bottom);
    double got_mean = s1 / n_steps, got_std = sqrt(s2 / n_steps - got_mean * got_mean);
    CHECK_MSG(fabs(got_mean - mean) <= 4 * std / sqrt((double)n_steps), "magnitude mean %.5f, "
              "expected %.5f", got_mean, mean);
    CHECK_MSG(fabs(got_std - std) <= 4 * std / sqrt(2.0 * n_steps) + 1e-3, "magnitude std %.5f, "
              "expected %.5f", got_std, std);
    check_rate("magnitudes clipped to 10", at_top, n_steps, top);
    check_rate("magnitudes clipped to 0", at_bottom, n_steps, bottom);
    printf("%s: %" PRId64 " steps, op chi-square %.1f, applied %.4f, negated %.4f, repeats "
           "%.4f (%.4f), magnitude mean %.4f (%.4f) std %.4f (%.4f) at 10 %.4f (%.4f) at 0 %.4f "
           "(%.4f)\n", name, n_steps, chi2, (double)applied / n_steps, (double)negated / signs,
           (double)repeats / N, 1 - distinct, got_mean, mean, got_std, std,
           (double)at_top / n_steps, top, (double)at_bottom / n_steps, bottom);
}

static void test_no_noise(void)
{
    tbt_case = "mstd0: the magnitude as given";
    struct tb_randaug_opts o;
    CHECK_EQ(tb_randaug_parse("m6-n3-mstd0", &o), 0);
    for (int i = 0; i < 200; i++) {
        struct tb_ra_plan p;
        tb_randaug_draw(&o, 1, 0, i, &p);
        for (int k = 0; k < p.n; k++)
            CHECK(p.step[k].magnitude == 6.0);
    }
}

/* ---- the settings ------------------------------------------------------------------------ */

static void test_parse(void)
{
    tbt_case = "parse";
    struct tb_randaug_opts o;
    CHECK_EQ(tb_randaug_parse("m7-n4", &o), 0);
    CHECK(o.n_ops == 4 && o.magnitude == 7 && o.magnitude_std == 0.5 &&
          o.resample == TB_RESAMPLE_BICUBIC && o.fill[0] == 128 && o.fill[2] == 128);
    CHECK_EQ(tb_randaug_parse("rand-m9-n2-mstd1-inc1", &o), 0);
    CHECK(o.n_ops == 2 && o.magnitude == 9 && o.magnitude_std == 1);
    CHECK_EQ(tb_randaug_parse("n3-mstd0-m10", &o), 0);
    CHECK(o.n_ops == 3 && o.magnitude == 10 && o.magnitude_std == 0);
    const char *off[] = {"none", "", NULL};
    for (int k = 0; k < 3; k++) {
        CHECK_EQ(tb_randaug_parse(off[k], &o), 0);
        CHECK_EQ(o.n_ops, 0);
    }
    const char *bad[] = {"m7", "n4", "m11-n4", "m7-n17", "m7-n2.5", "m7-n4-mstd-1",
                         "m7-n4-inc0", "m7-n4-w0", "m7-n4-", "mx-n4", "m7--n4", "rand"};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        CHECK_MSG(tb_randaug_parse(bad[k], &o) == TB_EINVAL, "'%s' parsed", bad[k]);
        CHECK_STR_HAS(tb_errmsg(), "RandAugment '");
    }
    CHECK_EQ(tb_randaug_parse("m7-n4-inc0", &o), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "increasing op set");
    o = (struct tb_randaug_opts){.n_ops = 4, .magnitude = 12};
    CHECK_EQ(tb_randaug_check(&o), TB_EINVAL);
    o = (struct tb_randaug_opts){.n_ops = 4, .magnitude = 7, .resample = 5};
    CHECK_EQ(tb_randaug_check(&o), TB_EINVAL);
}

/* ---- the loader -------------------------------------------------------------------------- */

enum { LT = 4, LS = 48, LB = 3 };

struct run {
    uint8_t *video;
    int64_t *index;
    int64_t n;
};

static void run_loader(tb_dataset *ds, int workers, struct run *r)
{
    struct tb_loader_opts o = {.batch_size = LB, .n_workers = workers, .prefetch = 2,
                               .seed = 11, .shuffle = 1, .world = 1};
    tb_loader *l = NULL;
    size_t clip = (size_t)LT * LS * LS * 3;
    memset(r, 0, sizeof(*r));
    int rc = tb_loader_open(&l, ds, &o);
    CHECK_MSG(rc == 0, "%s", tb_errmsg());
    int64_t cap = 2 * tb_dataset_size(ds);
    r->video = malloc(clip * (size_t)cap);
    r->index = malloc(sizeof(int64_t) * (size_t)cap);
    for (int e = 0; l && e < 2; e++) {
        int64_t nb = tb_loader_epoch(l, e);
        for (int64_t k = 0; k < nb; k++) {
            struct tb_batch *b = NULL;
            rc = tb_loader_next(l, &b);
            CHECK_MSG(rc == 0, "%s", tb_errmsg());
            if (rc < 0)
                break;
            for (int j = 0; j < b->n && r->n < cap; j++, r->n++) {
                memcpy(r->video + clip * (size_t)r->n, b->video + clip * (size_t)j, clip);
                r->index[r->n] = b->index[j];
            }
            tb_loader_release(l, b);
        }
    }
    tb_loader_close(&l);
}

static void test_loader(void)
{
    tbt_case = "loader";
    const char *videos[] = {"vtest.avi", "tree.avi", "Megamind.avi", "box.mp4", "cup.mp4"};
    const char *list = tbt_path("k.txt");
    FILE *f = fopen(list, "w");
    int n = 0;
    for (int rep = 0; rep < 2; rep++)
        for (size_t k = 0; f && k < sizeof(videos) / sizeof(videos[0]); k++) {
            const char *p = tbt_opencv_video(videos[k]);
            if (p) {
                fprintf(f, "%s %d\n", p, (int)k);
                n++;
            }
        }
    if (f)
        fclose(f);
    if (n < 2) {
        printf("loader: skipped, no opencv-doc videos\n");
        return;
    }
    struct tb_annotations *ann = NULL;
    struct tb_ann_opts ao = {.format = TB_ANN_KINETICS};
    CHECK_EQ(tb_ann_load(&ann, list, &ao), 0);
    struct tb_dataset_opts d = {
        .root = "", .sampler = TB_SAMPLE_DENSE, .stride = 3, .n_frames = LT, .train = 1,
        .width = LS, .height = LS,
        .crop = {.mode = TB_CROP_RANDOM_RESIZED, .scale_min = 0.08, .scale_max = 1,
                 .ratio_min = 3.0 / 4, .ratio_max = 4.0 / 3, .flip = TB_FLIP_RANDOM}};
    struct tb_dataset_opts plain = d;
    CHECK_EQ(tb_randaug_parse("m9-n4", &d.rand_augment), 0);
    tb_dataset *ds = NULL, *ds_plain = NULL;
    CHECK_EQ(tb_dataset_open(&ds, ann, &d), 0);
    CHECK_EQ(tb_dataset_open(&ds_plain, ann, &plain), 0);
    struct run one, four, off;
    run_loader(ds, 1, &one);
    run_loader(ds, 4, &four);
    run_loader(ds_plain, 2, &off);
    size_t clip = (size_t)LT * LS * LS * 3;
    tbt_case = "loader: 1 and 4 workers";
    CHECK(one.n == 2 * n && one.n == four.n && one.n == off.n);
    CHECK(one.n > 0 && !memcmp(one.index, four.index, sizeof(int64_t) * (size_t)one.n));
    CHECK(one.n > 0 && !memcmp(one.video, four.video, clip * (size_t)one.n));
    /* Each clip is the unaugmented clip with its plan applied: after the crop, its draws
     * keyed by (seed, epoch, sample) alone. */
    tbt_case = "loader: the plan of (epoch, sample) on the cropped clip";
    CHECK(!memcmp(one.index, off.index, sizeof(int64_t) * (size_t)one.n));
    int changed = 0, per_epoch = n;
    uint8_t *want = malloc(clip);
    for (int64_t c = 0; c < one.n && c < off.n; c++) {
        struct tb_ra_plan p;
        tb_randaug_draw(&d.rand_augment, 11, c / per_epoch, one.index[c], &p);
        memcpy(want, off.video + clip * (size_t)c, clip);
        CHECK_EQ(tb_randaug_apply(&p, &d.rand_augment, want, LT, LS, LS), 0);
        CHECK_MSG(!memcmp(want, one.video + clip * (size_t)c, clip), "clip %" PRId64 " (sample "
                  "%" PRId64 ") is not its plan on the plain clip", c, one.index[c]);
        changed += memcmp(want, off.video + clip * (size_t)c, clip) != 0;
    }
    CHECK_MSG(changed > one.n / 2, "RandAugment changed %d of %" PRId64 " clips", changed,
              one.n);
    printf("loader: %" PRId64 " clips, identical for 1 and 4 workers; %d changed by "
           "RandAugment\n", one.n, changed);
    /* Evaluation clips are never augmented. */
    tbt_case = "loader: evaluation";
    tb_dataset *ev = NULL, *ev_plain = NULL;
    d.train = plain.train = 0;
    CHECK_EQ(tb_dataset_open(&ev, ann, &d), 0);
    CHECK_EQ(tb_dataset_open(&ev_plain, ann, &plain), 0);
    tb_reader *r = NULL;
    CHECK_EQ(tb_reader_open(&r, NULL), 0);
    uint8_t *got = malloc(clip);
    CHECK_EQ(tb_dataset_get(ev, r, 11, 0, 1, got, NULL), 0);
    CHECK_EQ(tb_dataset_get(ev_plain, r, 11, 0, 1, want, NULL), 0);
    CHECK(!memcmp(got, want, clip));
    /* Bad settings are refused when the dataset opens. */
    d.rand_augment.magnitude = 11;
    tb_dataset *bad = NULL;
    CHECK_EQ(tb_dataset_open(&bad, ann, &d), TB_EINVAL);
    CHECK(bad == NULL);
    /* The flag: for --task cls; a bad value is a usage error naming the bad part. */
    tbt_case = "tubelet train --rand-augment";
    char *out = NULL;
    const char *t = tbt_tubelet();
    int rc = tbt_run(&out, 120, "%s train --task mae --format kinetics --data / --train %s "
                     "--out %s --dim 32 --depth 1 --heads 2 --frames 4 --size 32 --batch 2 "
                     "--epochs 1 --rand-augment m7-n4", t, list, tbt_path("mae"));
    CHECK_MSG(rc != 0 && out && strstr(out, "--rand-augment m7-n4 (the command line) would be "
              "ignored: only --task cls reads it, not --task mae"), "%s", out);
    free(out);
    rc = tbt_run(&out, 60, "%s train --format kinetics --data / --train %s --out %s "
                 "--rand-augment m7-n4-w0", t, list, tbt_path("cls"));
    CHECK_MSG(rc == 2 && out && strstr(out, "--rand-augment: RandAugment 'm7-n4-w0': bad part "
              "'w0'"), "%s", out);
    free(out);
    free(got);
    free(want);
    tb_reader_close(&r);
    tb_dataset_close(&ev);
    tb_dataset_close(&ev_plain);
    tb_dataset_close(&ds);
    tb_dataset_close(&ds_plain);
    tb_ann_free(&ann);
    free(one.video);
    free(one.index);
    free(four.video);
    free(four.index);
    free(off.video);
    free(off.index);
}

int main(void)
{
    tbt_begin("augment");
    test_parse();
    test_draws(7.0, 0.5, 1); /* VideoMAE's */
    test_draws(9.8, 0.5, 2); /* a third of the magnitudes clipped at 10 */
    test_draws(0.3, 1.0, 3); /* and at 0 */
    test_no_noise();

    tbt_case = "frames";
    tb_reader *r = NULL;
    CHECK_EQ(tb_reader_open(&r, NULL), 0);
    /* AVION's square crops, and an odd-sized frame that is not square (width and height
     * swapped would show) */
    struct frames square = {.what = "224x224 frames", .w = 224, .h = 224};
    struct frames odd = {.what = "123x77 frames", .w = 123, .h = 77};
    const int64_t at_vtest[] = {100, 400}, at_mega[] = {30, 200}, at_tree[] = {10, 50};
    int have = add_frames(&square, r, tbt_opencv_video("vtest.avi"), at_vtest, 2) == 0;
    have &= add_frames(&square, r, tbt_opencv_video("Megamind.avi"), at_mega, 2) == 0;
    have &= add_frames(&odd, r, tbt_opencv_video("tree.avi"), at_tree, 2) == 0;
    tb_reader_close(&r);
    if (!have) {
        printf("skipped: opencv-doc's videos are missing (apt-get install opencv-doc)\n");
        free(square.px);
        free(odd.px);
        return tbt_failures ? 1 : TBT_SKIP;
    }
    if (tbt_run(NULL, 60, PYTHON " -c 'import numpy, PIL'") == 0) {
        test_ops(&square);
        test_ops(&odd);
        test_plans(&square);
        test_plans(&odd);
    } else {
        printf("skipping the comparisons with Pillow: " PYTHON " lacks numpy or PIL "
               "(python3-pil)\n");
    }
    test_clip(&square);
    test_clip(&odd);
    free(square.px);
    free(odd.px);
    test_loader();
    TBT_EXIT();
}
