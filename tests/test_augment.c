/* tests/test_augment.c - RandAugment's two families. timm's (src/data/randaug.c) against its
 * ops written out over Pillow (tests/ref/randaug_ref.py):
 * - every op of the increasing set at three magnitudes (both signs where it has one; the
 *   geometric ops with bicubic and bilinear) on real frames (opencv-doc's videos, square and
 *   not): the arguments equal, the pixels equal exactly for the pixel ops and within 1 level
 *   for the geometric ones; then whole drawn plans of 4 ops the same way;
 * - the draws: op choice uniform and with replacement, probability 0.5, the magnitude's
 *   clipped normal (mean, spread, mass at the clip), the signs, against their distributions.
 * pytorchvideo's (src/data/randaug_pv.c) against its RandAugment written out over
 * torchvision 0.14 (tests/ref/randaug_pv_ref.py), on the same frames as floats v / 255:
 * - every op at magnitudes 2.5, 7 and 9.6, both signs, and 0 and 10 where an end is special:
 *   the arguments equal, the floats equal, or within a tolerance stated per op where torch's
 *   sums follow its machine; tb_randaug_apply's levels the nearest to those floats; then
 *   24 drawn plans the same way; each op on frames made for it does what it says;
 * - the draws: distinct ops in a uniform order, prob, gaussian (float32, clipped) and
 *   uniform magnitudes, signs, against their distributions; the spec's grammar.
 * Both: a clip's frames all get the same ops, each frame's statistics its own; the settings'
 * parser; the loader: batches identical for 1 and 4 workers, and each clip the unaugmented
 * clip with its drawn plan applied (after the crop, in training only); `tubelet train
 * --rand-augment`: refused for --task mae, a bad value named. Skips the Pillow part without
 * python3-pil, the torchvision part without python3-torchvision, and the frames' parts
 * without opencv-doc. */
#define _POSIX_C_SOURCE 200809L
#include "data/randaug_pv.h"
#include "tb_test.h"
#include "tubelet/data.h"
#include "tubelet/rng.h"

/* timm's ops come first in enum tb_ra_op, pytorchvideo's after them */
#define TIMM_N_OPS TB_RA_PV_BRIGHTNESS

#ifndef PYTHON
#define PYTHON TB_TEST_PYTHON
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

/* ---- pytorchvideo's family --------------------------------------------------------------- */

static int pv_signed(enum tb_ra_op op)
{
    return op != TB_RA_PV_AUTO_CONTRAST && op != TB_RA_PV_EQUALIZE &&
           op != TB_RA_PV_INVERT && op != TB_RA_PV_POSTERIZE && op != TB_RA_PV_SOLARIZE;
}

static int pv_geometric(enum tb_ra_op op)
{
    return op == TB_RA_PV_ROTATE || op == TB_RA_PV_SHEAR_X || op == TB_RA_PV_SHEAR_Y ||
           op == TB_RA_PV_TRANSLATE_X || op == TB_RA_PV_TRANSLATE_Y;
}

/* The most an op's floats may differ from torchvision's (in units of the [0, 1] range), and
 * why. The pixel ops are float32 operations one at a time in torch's order: the same on every
 * machine. Three hold sums whose order is the machine's torch build's: here they are summed as
 * torch on x86-64 with AVX2 does (which this machine's gives to the bit), elsewhere they may
 * round otherwise. */
static double pv_tolerance(enum tb_ra_op op, const char **why)
{
    if (op == TB_RA_PV_CONTRAST) {
        *why = "torch.mean's float32 sum follows its vector width and threads; here the "
               "correctly rounded sum: a few ulp of the mean";
        return 1e-6;
    }
    if (op == TB_RA_PV_SHARPNESS) {
        *why = "the blur's 9 taps are summed in the order and with the fusing of the "
               "convolution kernel the CPU gets (oneDNN's): a few ulp";
        return 1e-6;
    }
    if (pv_geometric(op)) {
        *why = "the grid is an sgemm (the BLAS's order and fusing) and the sampler's fusing "
               "follows ATen's CPU capability: a source point an ulp off moves a value by its "
               "gradient times 2^-24 of the side";
        return 3e-5;
    }
    *why = "exact";
    return 0;
}

/* After an op that may differ by its tolerance, a truncation (Equalize, Posterize: to uint8
 * by truncation) or threshold (Solarize) can put a value on the other side of its step. */
static int pv_steps_after_inexact(const struct tb_ra_step *s, int n)
{
    int inexact = 0;
    for (int k = 0; k < n; k++) {
        const char *why;
        if (inexact && (s[k].op == TB_RA_PV_EQUALIZE || s[k].op == TB_RA_PV_POSTERIZE ||
                        s[k].op == TB_RA_PV_SOLARIZE))
            return 1;
        inexact |= pv_tolerance(s[k].op, &why) > 0;
    }
    return 0;
}

struct pv_job {
    int n;
    struct tb_ra_step step[TB_RA_MAX_OPS];
};

/* Runs randaug_pv_ref.py on f for jobs: *fp reads its floats job by job, *args gets its
 * printed lines. */
static int run_pv_ref(const struct frames *f, const struct pv_job *jobs, int n_jobs, FILE **fp,
                      char **args)
{
    const char *in = tbt_path("pv_frames.rgb"), *jp = tbt_path("pv_jobs.txt"),
               *op = tbt_path("pv_ref.f32");
    *fp = NULL;
    FILE *w = fopen(in, "wb");
    size_t bytes = (size_t)f->w * f->h * 3 * f->n;
    CHECK(w && fwrite(f->px, 1, bytes, w) == bytes);
    if (w)
        fclose(w);
    w = fopen(jp, "w");
    CHECK(w != NULL);
    for (int j = 0; w && j < n_jobs; j++) {
        for (int k = 0; k < jobs[j].n; k++)
            fprintf(w, "%s%s:%.17g:%d", k ? " " : "", tb_randaug_op_name(jobs[j].step[k].op),
                    jobs[j].step[k].magnitude, jobs[j].step[k].negate);
        fprintf(w, "\n");
    }
    if (w)
        fclose(w);
    int rc = tbt_run(args, 600, PYTHON " %s/tests/ref/randaug_pv_ref.py %s %d %d %d %s %s",
                     TB_SOURCE_DIR, in, f->w, f->h, f->n, jp, op);
    CHECK_MSG(rc == 0, "randaug_pv_ref.py: %s", *args ? *args : "");
    if (rc != 0)
        return -1;
    *fp = fopen(op, "rb");
    long len = -1;
    if (*fp && fseek(*fp, 0, SEEK_END) == 0)
        len = ftell(*fp);
    CHECK_MSG(len == (long)(bytes * 4 * (size_t)n_jobs), "randaug_pv_ref.py wrote %ld bytes, "
              "not %zu", len, bytes * 4 * (size_t)n_jobs);
    if (*fp)
        rewind(*fp);
    return *fp && len == (long)(bytes * 4 * (size_t)n_jobs) ? 0 : -1;
}

/* The next line of the reference's output (empty lines too), or NULL. */
static char *next_line(char **p)
{
    if (!*p || !**p)
        return NULL;
    char *line = *p, *nl = strchr(line, '\n');
    if (nl) {
        *nl = '\0';
        *p = nl + 1;
    } else {
        *p += strlen(line);
    }
    return line;
}

/* The clip of frames f as floats v / 255 through job (each frame alone), into out. */
static void pv_floats(const struct frames *f, const struct pv_job *job, float *out)
{
    size_t frame = (size_t)f->w * f->h * 3;
    float *scratch = malloc(sizeof(float) * frame);
    for (size_t k = 0; k < frame * f->n; k++)
        out[k] = (float)f->px[k] / 255.0f;
    for (int t = 0; t < f->n; t++)
        tbi_randaug_pv_frame(out + frame * t, f->w, f->h, job->step, job->n, scratch);
    free(scratch);
}

struct pv_result {
    double worst;              /* the largest difference from torchvision's float */
    size_t n_diff, n_over;     /* values not equal to it; beyond the tolerance */
    size_t n_levels;           /* levels other than the nearest to torchvision's float */
};

/* Job against the reference's clip ref: the arguments, our floats value by value, and the
 * public path (tb_randaug_apply's levels): the nearest level of our floats, always, and of
 * torchvision's but where the two floats straddle a level's edge. */
static struct pv_result compare_pv(const struct frames *f, const struct pv_job *jb,
                                   const float *ref, char *ref_line, const char *what,
                                   double tol, double allowed)
{
    struct pv_result r = {0};
    size_t n_val = (size_t)f->w * f->h * 3 * f->n;
    char *p = ref_line ? ref_line : "";
    for (int k = 0; k < jb->n; k++) {
        double a = ref_arg(p, &p);
        CHECK_MSG(a == jb->step[k].arg, "%s: op %d (%s): argument %.17g, pytorchvideo's %.17g",
                  what, k, tb_randaug_op_name(jb->step[k].op), jb->step[k].arg, a);
    }
    float *ours = malloc(sizeof(float) * n_val);
    pv_floats(f, jb, ours);
    size_t first = 0;
    for (size_t k = 0; k < n_val; k++) {
        double d = fabs((double)ours[k] - (double)ref[k]);
        if (d > 0 && !r.n_diff++)
            first = k;
        r.n_over += d > tol;
        r.worst = d > r.worst ? d : r.worst;
    }
    CHECK_MSG((double)r.n_over <= allowed * (double)n_val, "%s on %s: %zu of %zu values differ "
              "by more than %g (up to %.3g); first difference at %zu: %.9g, torchvision's "
              "%.9g", what, f->what, r.n_over, n_val, tol, r.worst, first, ours[first],
              ref[first]);
    /* the public path: the plan through tb_randaug_apply */
    struct tb_randaug_opts o;
    CHECK_EQ(tb_randaug_parse("pytorchvideo-m7-n4", &o), 0);
    struct tb_ra_plan plan = {.n = jb->n};
    memcpy(plan.step, jb->step, sizeof(jb->step[0]) * (size_t)jb->n);
    uint8_t *u8 = malloc(n_val);
    memcpy(u8, f->px, n_val);
    CHECK_EQ(tb_randaug_apply(&plan, &o, u8, f->n, f->w, f->h), 0);
    size_t n_bad = 0;
    for (size_t k = 0; k < n_val; k++) {
        n_bad += u8[k] != (uint8_t)rint((double)ours[k] * 255.0);
        r.n_levels += u8[k] != (uint8_t)rint((double)ref[k] * 255.0);
    }
    CHECK_MSG(n_bad == 0, "%s on %s: %zu levels are not the nearest to the floats", what,
              f->what, n_bad);
    CHECK_MSG(r.n_levels <= r.n_diff, "%s on %s: %zu levels differ from torchvision's, where "
              "%zu floats do", what, f->what, r.n_levels, r.n_diff);
    free(u8);
    free(ours);
    return r;
}

/* Every op: magnitudes 2.5, 7 and 9.6 with both signs, and the ends of the ops whose end is
 * an edge case (0 and 10: Posterize's 4 and 0 bits, Solarize's thresholds 1 and 0, Rotate's 0
 * degrees, which torchvision still resamples). */
static void test_pv_ops(const struct frames *f)
{
    enum { MAX_JOBS = 96 };
    struct pv_job jobs[MAX_JOBS];
    int n = 0;
    const double mags[] = {2.5, 7.0, 9.6, 0.0, 10.0};
    for (int op = TB_RA_PV_BRIGHTNESS; op < TB_RA_N_OPS; op++) {
        int ends = op == TB_RA_PV_POSTERIZE || op == TB_RA_PV_SOLARIZE || op == TB_RA_PV_ROTATE;
        int n_mags = pv_signed(op) || op == TB_RA_PV_POSTERIZE || op == TB_RA_PV_SOLARIZE ? 3
                                                                                         : 1;
        for (int m = 0; m < n_mags + 2 * ends; m++)
            for (int neg = 0; neg <= pv_signed(op); neg++) {
                struct pv_job *j = &jobs[n++];
                j->n = 1;
                j->step[0] = (struct tb_ra_step){.op = op, .apply = 1, .magnitude = mags[m],
                                                 .negate = neg};
                j->step[0].arg = tb_randaug_level_arg(op, mags[m], neg);
            }
    }
    CHECK(n <= MAX_JOBS);
    tbt_case = "pytorchvideo: each op against torchvision";
    FILE *fp = NULL;
    char *lines = NULL;
    struct pv_result per_op[TBI_PV_N_OPS] = {{0}};
    size_t n_val = (size_t)f->w * f->h * 3 * f->n;
    if (run_pv_ref(f, jobs, n, &fp, &lines) == 0) {
        float *ref = malloc(sizeof(float) * n_val);
        char *walk = lines;
        for (int j = 0; j < n; j++) {
            const struct tb_ra_step *s = &jobs[j].step[0];
            char what[128], *line = next_line(&walk);
            snprintf(what, sizeof(what), "%s m%g%s", tb_randaug_op_name(s->op), s->magnitude,
                     s->negate ? " negated" : "");
            CHECK_MSG(line != NULL, "%s: no line from the reference", what);
            if (!line || fread(ref, sizeof(float), n_val, fp) != n_val)
                break;
            /* no comparison of unchanged clips: above magnitude 0 each op changes these */
            size_t n_same = 0;
            for (size_t k = 0; k < n_val; k++)
                n_same += ref[k] == (float)f->px[k] / 255.0f;
            CHECK_MSG(s->magnitude == 0 || n_same < n_val, "%s leaves %s as they are", what,
                      f->what);
            const char *why;
            struct pv_result r = compare_pv(f, &jobs[j], ref, line, what,
                                            pv_tolerance(s->op, &why), 0);
            struct pv_result *acc = &per_op[s->op - TB_RA_PV_BRIGHTNESS];
            acc->worst = r.worst > acc->worst ? r.worst : acc->worst;
            acc->n_diff += r.n_diff;
            acc->n_over += r.n_over;
            acc->n_levels += r.n_levels;
        }
        free(ref);
        fclose(fp);
    }
    printf("%s, pytorchvideo's ops against torchvision (floats; levels of tb_randaug_apply):\n",
           f->what);
    for (int k = 0; k < TBI_PV_N_OPS; k++) {
        const char *why;
        double tol = pv_tolerance(TB_RA_PV_BRIGHTNESS + k, &why);
        printf("  %-16s largest difference %.3g (tolerance %g), %zu floats and %zu levels "
               "differ\n", tb_randaug_op_name(TB_RA_PV_BRIGHTNESS + k), per_op[k].worst, tol,
               per_op[k].n_diff, per_op[k].n_levels);
    }
    free(lines);
}

/* Whole plans as the loader draws them (pytorchvideo-m7-n4: AVION's). */
static void test_pv_plans(const struct frames *f)
{
    enum { N_PLANS = 24 };
    struct tb_randaug_opts o;
    CHECK_EQ(tb_randaug_parse("pytorchvideo-m7-n4", &o), 0);
    struct pv_job jobs[N_PLANS];
    int n_ops = 0;
    for (int j = 0; j < N_PLANS; j++) {
        struct tb_ra_plan plan;
        tb_randaug_draw(&o, 7, 1, j, &plan);
        jobs[j].n = 0;
        for (int k = 0; k < plan.n; k++)
            if (plan.step[k].apply)
                jobs[j].step[jobs[j].n++] = plan.step[k];
        n_ops += jobs[j].n;
    }
    tbt_case = "pytorchvideo: drawn plans against torchvision";
    CHECK(n_ops > N_PLANS);
    FILE *fp = NULL;
    char *lines = NULL;
    size_t n_val = (size_t)f->w * f->h * 3 * f->n, n_diff = 0, n_levels = 0;
    double worst = 0;
    if (run_pv_ref(f, jobs, N_PLANS, &fp, &lines) == 0) {
        float *ref = malloc(sizeof(float) * n_val);
        char *walk = lines;
        for (int j = 0; j < N_PLANS; j++) {
            char what[64], *line = next_line(&walk);
            snprintf(what, sizeof(what), "plan %d (%d ops)", j, jobs[j].n);
            if (!line || fread(ref, sizeof(float), n_val, fp) != n_val) {
                TBT_FAIL("%s: no output from the reference", what);
                break;
            }
            /* the plan's tolerance: its ops' added up, where truncations after them may put
             * 1 value in 10^4 on the other side of a step */
            double tol = 0;
            for (int k = 0; k < jobs[j].n; k++) {
                const char *why;
                tol += pv_tolerance(jobs[j].step[k].op, &why);
            }
            double allowed = pv_steps_after_inexact(jobs[j].step, jobs[j].n) ? 1e-4 : 0;
            struct pv_result r = compare_pv(f, &jobs[j], ref, line, what, tol, allowed);
            worst = r.worst > worst ? r.worst : worst;
            n_diff += r.n_diff;
            n_levels += r.n_levels;
        }
        free(ref);
        fclose(fp);
        printf("%s: %d drawn plans (%d ops) against torchvision: largest difference %.3g, "
               "%zu floats and %zu levels differ\n", f->what, N_PLANS, n_ops, worst, n_diff,
               n_levels);
    }
    free(lines);
}

/* ---- pytorchvideo's ops on frames made for them ------------------------------------------ */

/* A frame of S x S pixels from fn(x, y, c). */
enum { S = 48 };

static uint8_t *pv_frame(int (*fn)(int x, int y, int c))
{
    uint8_t *px = malloc(S * S * 3);
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++)
            for (int c = 0; c < 3; c++)
                px[(y * S + x) * 3 + c] = (uint8_t)fn(x, y, c);
    return px;
}

static int ramp(int x, int y, int c)
{
    return (y * S + x + 85 * c) % 256;
}

static uint8_t at(const uint8_t *px, int x, int y, int c)
{
    return px[(y * S + x) * 3 + c];
}

static uint8_t *pv_run(int (*fn)(int, int, int), enum tb_ra_op op, double arg)
{
    uint8_t *px = pv_frame(fn);
    CHECK_EQ(tb_randaug_op(px, 1, S, S, op, arg, TB_RESAMPLE_BICUBIC, gray), 0);
    return px;
}

static int two_tone(int x, int y, int c)
{
    (void)y;
    return x < S / 2 ? (c == 0 ? 200 : 40) : (c == 2 ? 180 : 60);
}

static int dot(int x, int y, int c)
{
    (void)c;
    return x == 5 && y == 6 ? 255 : 0;
}

static int mid_range(int x, int y, int c)
{
    (void)c;
    return (x + y) % 3 == 0 ? 50 : (x + y) % 3 == 1 ? 110 : 150;
}

static int three_values(int x, int y, int c)
{
    (void)y;
    return 10 + 10 * (x % 3) + c;
}

static void test_pv_each(void)
{
    tbt_case = "pytorchvideo: each op does what it says";
    uint8_t *in = pv_frame(ramp), *out;
    /* Brightness: each value times the factor (no ties at 0.4 and 1.6), saturating */
    out = pv_run(ramp, TB_RA_PV_BRIGHTNESS, 0.4);
    for (int k = 0; k < S * S * 3; k++)
        CHECK_EQ(out[k], (int)lround(in[k] * 0.4));
    free(out);
    out = pv_run(ramp, TB_RA_PV_BRIGHTNESS, 1.6);
    for (int k = 0; k < S * S * 3; k++)
        CHECK_EQ(out[k], in[k] * 1.6 > 255 ? 255 : (int)lround(in[k] * 1.6));
    free(out);
    /* Invert: 255 - v; Solarize at 0.5: from 128 up (128 / 255 >= 0.5) */
    out = pv_run(ramp, TB_RA_PV_INVERT, 0);
    for (int k = 0; k < S * S * 3; k++)
        CHECK_EQ(out[k], 255 - in[k]);
    free(out);
    out = pv_run(ramp, TB_RA_PV_SOLARIZE, 0.5);
    for (int k = 0; k < S * S * 3; k++)
        CHECK_EQ(out[k], in[k] >= 128 ? 255 - in[k] : in[k]);
    free(out);
    /* Posterize at 2 bits: the top two bits (v / 255 * 255 truncated is v again in float32,
     * for every level); at 0: black */
    out = pv_run(ramp, TB_RA_PV_POSTERIZE, 2);
    for (int k = 0; k < S * S * 3; k++)
        CHECK_EQ(out[k], in[k] & 0xC0);
    free(out);
    out = pv_run(ramp, TB_RA_PV_POSTERIZE, 0);
    for (int k = 0; k < S * S * 3; k++)
        CHECK_EQ(out[k], 0);
    free(out);
    /* Saturation 0: each pixel its grey (0.2989 r + 0.587 g + 0.114 b) in every channel */
    out = pv_run(two_tone, TB_RA_PV_SATURATION, 0);
    CHECK(at(out, 0, 0, 0) == 88 && at(out, 0, 0, 1) == 88 && at(out, 0, 0, 2) == 88);
    CHECK(at(out, S - 1, 3, 0) == 74 && at(out, S - 1, 3, 2) == 74);
    free(out);
    /* Contrast 0: the frame's mean grey everywhere (half 87.82, half 73.674: 80.747); 2:
     * twice the distance from it */
    out = pv_run(two_tone, TB_RA_PV_CONTRAST, 0);
    for (int k = 0; k < S * S * 3; k++)
        CHECK_EQ(out[k], 81);
    free(out);
    out = pv_run(two_tone, TB_RA_PV_CONTRAST, 2);
    CHECK(at(out, 0, 0, 0) == 255 && at(out, 0, 0, 1) == 0 && at(out, S - 1, 0, 2) == 255);
    CHECK_EQ(at(out, S - 1, 0, 0), 39); /* 2 * 60 - 80.747 */
    free(out);
    /* Sharpness 0: the blur, 5/13 of a dot at its place and 1/13 around it, the border as it
     * was */
    out = pv_run(dot, TB_RA_PV_SHARPNESS, 0);
    CHECK(at(out, 5, 6, 1) == 98 && at(out, 4, 5, 1) == 20 && at(out, 6, 7, 2) == 20);
    CHECK(at(out, 7, 6, 0) == 0);
    free(out);
    /* AutoContrast: 50..150 stretched to 0..255 (110: 153) */
    out = pv_run(mid_range, TB_RA_PV_AUTO_CONTRAST, 0);
    CHECK(at(out, 0, 0, 0) == 0 && at(out, 1, 0, 1) == 153 && at(out, 2, 0, 2) == 255);
    free(out);
    /* Equalize: three values of 768 pixels each to 0, (3 + 768) // 6 and 255 (step: 1536 //
     * 255 = 6) */
    out = pv_run(three_values, TB_RA_PV_EQUALIZE, 0);
    for (int c = 0; c < 3; c++)
        CHECK_MSG(at(out, 0, 0, c) == 0 && at(out, 1, 0, c) == 128 && at(out, 2, 0, c) == 255,
                  "Equalize: %d %d %d", at(out, 0, 0, c), at(out, 1, 0, c), at(out, 2, 0, c));
    free(out);
    /* Rotate 90: counter-clockwise about the centre (the top row to the left column) */
    out = pv_run(ramp, TB_RA_PV_ROTATE, 90);
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++)
            for (int c = 0; c < 3; c++)
                CHECK_EQ(at(out, x, y, c), at(in, S - 1 - y, x, c));
    free(out);
    /* TranslateX 0.25: the content 12 pixels left, the fill 0.5 (127.5: level 128) behind;
     * TranslateY -0.125: 6 pixels down */
    out = pv_run(ramp, TB_RA_PV_TRANSLATE_X, 0.25);
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++)
            CHECK_EQ(at(out, x, y, 1), x + 12 < S ? at(in, x + 12, y, 1) : 128);
    free(out);
    out = pv_run(ramp, TB_RA_PV_TRANSLATE_Y, -0.125);
    for (int y = 0; y < S; y++)
        CHECK_EQ(at(out, 3, y, 2), y >= 6 ? at(in, 3, y - 6, 2) : 128);
    free(out);
    /* ShearX 0.4: row y from x + 0.4 (y + 0.5): rows 2 and 7 one and three pixels; ShearY
     * the same down the columns */
    out = pv_run(ramp, TB_RA_PV_SHEAR_X, 0.4);
    for (int x = 0; x < S; x++) {
        CHECK_EQ(at(out, x, 2, 0), x + 1 < S ? at(in, x + 1, 2, 0) : 128);
        CHECK_EQ(at(out, x, 7, 0), x + 3 < S ? at(in, x + 3, 7, 0) : 128);
    }
    free(out);
    out = pv_run(ramp, TB_RA_PV_SHEAR_Y, 0.4);
    for (int y = 0; y < S; y++)
        CHECK_EQ(at(out, 7, y, 1), y + 3 < S ? at(in, 7, y + 3, 1) : 128);
    free(out);
    printf("pytorchvideo's ops on made frames: as documented\n");
    free(in);
    /* the arguments torchvision refuses */
    uint8_t px[12] = {0};
    CHECK_EQ(tb_randaug_op(px, 1, 2, 2, TB_RA_PV_BRIGHTNESS, -0.1, TB_RESAMPLE_BILINEAR, gray),
             TB_EINVAL);
    CHECK_EQ(tb_randaug_op(px, 1, 2, 2, TB_RA_PV_POSTERIZE, 9, TB_RESAMPLE_BILINEAR, gray),
             TB_EINVAL);
    CHECK_EQ(tb_randaug_op(px, 1, 2, 2, TB_RA_PV_SOLARIZE, 1.5, TB_RESAMPLE_BILINEAR, gray),
             TB_EINVAL);
}

/* ---- pytorchvideo's draws ---------------------------------------------------------------- */

static void test_pv_draws(const char *spec, uint64_t seed)
{
    char name[96];
    snprintf(name, sizeof(name), "pytorchvideo draws %s", spec);
    tbt_case = name;
    enum { N = 40000 };
    struct tb_randaug_opts o;
    CHECK_EQ(tb_randaug_parse(spec, &o), 0);
    int K = o.n_ops;
    int64_t count[TBI_PV_N_OPS] = {0}, first[TBI_PV_N_OPS] = {0}, level[11] = {0};
    int64_t applied = 0, signs = 0, negated = 0, at_top = 0, at_bottom = 0, n_steps = 0;
    int64_t not_f32 = 0;
    double s1 = 0, s2 = 0, lo = 1e9, hi = -1e9;
    for (int64_t i = 0; i < N; i++) {
        struct tb_ra_plan p;
        tb_randaug_draw(&o, seed, 3, i, &p);
        CHECK_EQ(p.n, K);
        int seen = 0;
        for (int k = 0; k < K; k++) {
            const struct tb_ra_step *s = &p.step[k];
            int op = s->op - TB_RA_PV_BRIGHTNESS;
            if (!tbi_randaug_is_pv(s->op) || (seen >> op) & 1) {
                TBT_FAIL("plan %" PRId64 ": step %d is op %d (a repeat or not pytorchvideo's)",
                         i, k, (int)s->op);
                return;
            }
            seen |= 1 << op;
            count[op]++;
            first[op] += k == 0;
            applied += s->apply;
            if (pv_signed(s->op)) {
                signs++;
                negated += s->negate;
            }
            double m = s->magnitude;
            s1 += m;
            s2 += m * m;
            lo = m < lo ? m : lo;
            hi = m > hi ? m : hi;
            at_top += m == 10;
            at_bottom += m == 0;
            not_f32 += o.sampling == TB_RA_GAUSSIAN && m != (double)(float)m;
            if (o.sampling == TB_RA_UNIFORM_INT && m == floor(m) && m >= 0 && m <= 10)
                level[(int)m]++;
            n_steps++;
            if (s->arg != tb_randaug_level_arg(s->op, m, s->negate))
                TBT_FAIL("step %d of plan %" PRId64 ": its argument is not its level's", k, i);
        }
    }
    /* distinct ops in a uniformly drawn order: each op in K of 14 plans, first in 1 of 14 */
    double chi2 = 0, chi2_first = 0, e = (double)N * K / TBI_PV_N_OPS,
           e1 = (double)N / TBI_PV_N_OPS;
    for (int op = 0; op < TBI_PV_N_OPS; op++) {
        chi2 += (count[op] - e) * (count[op] - e) / e;
        chi2_first += (first[op] - e1) * (first[op] - e1) / e1;
        check_rate(tb_randaug_op_name(TB_RA_PV_BRIGHTNESS + op), count[op], N,
                   (double)K / TBI_PV_N_OPS);
    }
    /* chi-square, 13 degrees of freedom: 34.5 is its 0.999 quantile; the counts of a plan's
     * distinct ops vary by 1 - K/14 of a free count's */
    if (K < TBI_PV_N_OPS)
        chi2 /= 1 - (double)K / TBI_PV_N_OPS;
    CHECK_MSG(chi2 < 34.5, "op counts chi-square %.1f", chi2);
    CHECK_MSG(chi2_first < 34.5, "first op chi-square %.1f", chi2_first);
    check_rate("share applied", applied, n_steps, o.prob);
    check_rate("share negated", negated, signs, 0.5);
    CHECK_EQ(not_f32, 0);
    if (o.sampling == TB_RA_GAUSSIAN) {
        double mean, std, top, bottom;
        clipped_normal(o.magnitude, o.magnitude_std, &mean, &std, &top, &bottom);
        double got_mean = s1 / n_steps, got_std = sqrt(s2 / n_steps - got_mean * got_mean);
        CHECK_MSG(fabs(got_mean - mean) <= 4 * std / sqrt((double)n_steps), "magnitude mean "
                  "%.5f, expected %.5f", got_mean, mean);
        CHECK_MSG(fabs(got_std - std) <= 4 * std / sqrt(2.0 * n_steps) + 1e-3, "magnitude std "
                  "%.5f, expected %.5f", got_std, std);
        check_rate("magnitudes clipped to 10", at_top, n_steps, top);
        check_rate("magnitudes clipped to 0", at_bottom, n_steps, bottom);
    } else if (o.sampling == TB_RA_UNIFORM_INT) {
        int a = (int)o.sampling_min, b = (int)o.magnitude;
        int64_t in_range = 0;
        for (int v = a; v <= b; v++) {
            check_rate("a uniform level", level[v], n_steps, 1.0 / (b - a + 1));
            in_range += level[v];
        }
        CHECK_EQ(in_range, n_steps);
    } else {
        double a = o.sampling_min, b = o.magnitude, w = b - a;
        CHECK(lo >= a && hi < b);
        CHECK_MSG(fabs(s1 / n_steps - (a + b) / 2) <= 4 * w / sqrt(12.0 * n_steps),
                  "uniform magnitude mean %.5f, expected %.5f", s1 / n_steps, (a + b) / 2);
    }
    printf("%s: %" PRId64 " steps, no op twice in a plan, chi-square %.1f (first %.1f), applied "
           "%.4f, negated %.4f, magnitudes %.3f..%.3f mean %.4f\n", name, n_steps, chi2,
           chi2_first, (double)applied / n_steps, (double)negated / signs, lo, hi,
           s1 / n_steps);
}

static void test_pv_parse(void)
{
    tbt_case = "pytorchvideo: parse";
    struct tb_randaug_opts o;
    CHECK_EQ(tb_randaug_parse("pytorchvideo-m7-n4", &o), 0);
    CHECK(o.family == TB_RA_PYTORCHVIDEO && o.n_ops == 4 && o.magnitude == 7 &&
          o.magnitude_std == 0.5 && o.prob == 0.5 && o.sampling == TB_RA_GAUSSIAN &&
          o.resample == TB_RESAMPLE_BILINEAR);
    CHECK_EQ(tb_randaug_check(&o), 0);
    CHECK_EQ(tb_randaug_parse("pytorchvideo-n14-p1-mstd0-m10", &o), 0);
    CHECK(o.n_ops == 14 && o.magnitude == 10 && o.magnitude_std == 0 && o.prob == 1);
    CHECK_EQ(tb_randaug_parse("pytorchvideo-m9-n2-uniform-min3", &o), 0);
    CHECK(o.sampling == TB_RA_UNIFORM_INT && o.sampling_min == 3 && o.magnitude == 9);
    CHECK_EQ(tb_randaug_parse("pytorchvideo-m7.5-n2-uniform-float-min0.5", &o), 0);
    CHECK(o.sampling == TB_RA_UNIFORM_FLOAT && o.sampling_min == 0.5 && o.magnitude == 7.5);
    CHECK_EQ(tb_randaug_parse("m7-n4", &o), 0); /* still timm's */
    CHECK(o.family == TB_RA_TIMM);
    const char *bad[] = {"pytorchvideo-m7", "pytorchvideo-m7-n15", "pytorchvideo-m7-n0",
                         "pytorchvideo-m7-n4-p1.5", "pytorchvideo-m7-n4-float",
                         "pytorchvideo-m7-n4-min2", "pytorchvideo-m7-n4-uniform-mstd1",
                         "pytorchvideo-m7.5-n4-uniform", "pytorchvideo-m3-n4-uniform-min4",
                         "pytorchvideo-m7-n4-inc1", "pytorchvideo-", "pytorchvideo-m7-n4-"};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        CHECK_MSG(tb_randaug_parse(bad[k], &o) == TB_EINVAL, "'%s' parsed", bad[k]);
        CHECK_STR_HAS(tb_errmsg(), "RandAugment '");
    }
    CHECK_EQ(tb_randaug_parse("pytorchvideo-m7-n15", &o), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "bad part 'n15'");
    o = (struct tb_randaug_opts){.family = TB_RA_PYTORCHVIDEO, .n_ops = 4, .magnitude = 7,
                                 .prob = 2};
    CHECK_EQ(tb_randaug_check(&o), TB_EINVAL);
    o = (struct tb_randaug_opts){.family = 7, .n_ops = 4, .magnitude = 7};
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

/* The loader with RandAugment spec; with_cli: `tubelet train --rand-augment` too. */
static void test_loader(const char *spec, int with_cli)
{
    char name[96];
    snprintf(name, sizeof(name), "loader, %s", spec);
    tbt_case = name;
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
    CHECK_EQ(tb_randaug_parse(spec, &d.rand_augment), 0);
    tb_dataset *ds = NULL, *ds_plain = NULL;
    CHECK_EQ(tb_dataset_open(&ds, ann, &d), 0);
    CHECK_EQ(tb_dataset_open(&ds_plain, ann, &plain), 0);
    struct run one, four, off;
    run_loader(ds, 1, &one);
    run_loader(ds, 4, &four);
    run_loader(ds_plain, 2, &off);
    size_t clip = (size_t)LT * LS * LS * 3;
    snprintf(name, sizeof(name), "loader, %s: 1 and 4 workers", spec);
    CHECK(one.n == 2 * n && one.n == four.n && one.n == off.n);
    CHECK(one.n > 0 && !memcmp(one.index, four.index, sizeof(int64_t) * (size_t)one.n));
    CHECK(one.n > 0 && !memcmp(one.video, four.video, clip * (size_t)one.n));
    /* Each clip is the unaugmented clip with its plan applied: after the crop, its draws
     * keyed by (seed, epoch, sample) alone. */
    snprintf(name, sizeof(name), "loader, %s: the plan of (epoch, sample) on the cropped clip",
             spec);
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
    printf("loader, %s: %" PRId64 " clips, identical for 1 and 4 workers; %d changed by "
           "RandAugment\n", spec, one.n, changed);
    /* Evaluation clips are never augmented. */
    snprintf(name, sizeof(name), "loader, %s: evaluation", spec);
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
    int rc = 0;
    if (!with_cli)
        goto done;
    rc = tbt_run(&out, 120, "%s train --task mae --format kinetics --data / --train %s "
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
    rc = tbt_run(&out, 60, "%s train --format kinetics --data / --train %s --out %s "
                 "--rand-augment pytorchvideo-m7-n15", t, list, tbt_path("cls"));
    CHECK_MSG(rc == 2 && out && strstr(out, "--rand-augment: RandAugment 'pytorchvideo-m7-n15': "
              "bad part 'n15'"), "%s", out);
    free(out);
done:
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
    test_pv_parse();
    test_pv_draws("pytorchvideo-m7-n4", 4); /* AVION's */
    test_pv_draws("pytorchvideo-m9.8-n14-p0.3", 5);
    test_pv_draws("pytorchvideo-m0.3-n1-mstd1-p1", 6);
    test_pv_draws("pytorchvideo-m9-n3-uniform-min2", 7);
    test_pv_draws("pytorchvideo-m7.5-n2-uniform-float-min0.5", 8);
    test_pv_each();

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
    if (tbt_run(NULL, 60, PYTHON " -c 'import numpy, torch, torchvision'") == 0) {
        test_pv_ops(&square);
        test_pv_ops(&odd);
        test_pv_plans(&square);
        test_pv_plans(&odd);
    } else {
        printf("skipping the comparisons with torchvision: " PYTHON " lacks numpy, torch or "
               "torchvision (python3-torch, python3-torchvision)\n");
    }
    test_clip(&square);
    test_clip(&odd);
    free(square.px);
    free(odd.px);
    test_loader("m9-n4", 1);
    test_loader("pytorchvideo-m9-n4", 0);
    TBT_EXIT();
}
