/* tests/test_cls_metrics.c - EPIC-Kitchens-100 action classification metrics
 * (src/metrics/cls_metrics.c).
 * - Against tests/ref/ek100_cls_ref.py (numpy, AVION's definitions): the action list of an
 *   EK-100-shaped train/val pair (tb_ann_load, tb_ann_map_actions, tb_cls_actions) with verbs
 *   and nouns no action has (the placeholder rule); random logits of 1, 3 and 4 views through
 *   both averaging modes (probabilities to 1e-12); top-1/top-5/mean class accuracy of verb,
 *   noun and action to 1e-12 and the class counts exactly, also on tied dyadic scores. That
 *   part skips without numpy.
 *   One level alone (tb_cls_evaluate_level) on verb probabilities, to 1e-12.
 * - Known answers worked out here: two views averaged both ways; Kinetics' 5 temporal x 3
 *   spatial views, where one view's huge logit decides the logit average but not the
 *   probability average (and where a right view's does the reverse, down to top-5), each
 *   class's probability written out in exp and the expected top-1/top-5 and mean class
 *   accuracy counted from them; perfect predictions score 1 everywhere, except where the
 *   placeholder ties with action 0's verb or noun (its value derived from the counts);
 *   constant scores the tie rule's chance level k / n; a 3-item case by hand.
 * - The action list as one object (tb_cls_action_list_build) equals tb_cls_actions'.
 * - Bad input: truth out of range or disagreeing with the action list, non-finite or negative
 *   scores, non-finite logits, empty sizes, repeated or negative actions, sets numbered
 *   separately, not numbered, or with the wrong action count; the same for one level. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "tb_test.h"
#include "tubelet/metrics.h"
#include "tubelet/rng.h"

#ifndef PYTHON
#define PYTHON TB_TEST_PYTHON
#endif

/* ---- an EK-100-shaped pair of CSVs ----------------------------------------------------------- */

#define HEADER "narration_id,participant_id,video_id,narration_timestamp,start_timestamp," \
               "stop_timestamp,start_frame,stop_frame,narration,verb,verb_class,noun," \
               "noun_class,all_nouns,all_noun_classes\n"

/* Verbs 0-11 but 3 and 7, nouns 1-24 but 5 and 13: verbs 3, 7 and nouns 0, 5, 13 are
 * placeholders. Every file starts with 0:1, the first action as strings sort, so items of
 * action 0 exist in both; 11:24 makes the largest classes appear. */
static void write_csv(const char *path, int n_rows, uint64_t stream)
{
    static const int verbs[] = {0, 1, 2, 4, 5, 6, 8, 9, 10, 11};
    tb_rng r;
    tb_rng_init(&r, 100, stream);
    FILE *f = fopen(path, "w");
    fputs(HEADER, f);
    for (int i = 0; i < n_rows; i++) {
        int v, n;
        if (i % 40 == 0) {
            v = 0;
            n = 1;
        } else if (i == 1) {
            v = 11;
            n = 24;
        } else {
            /* Skewed towards the small classes, as EK-100's long tail. */
            v = verbs[tb_rng_below(&r, 1 + tb_rng_below(&r, 10))];
            do
                n = 1 + (int)tb_rng_below(&r, 1 + tb_rng_below(&r, 24));
            while (n == 5 || n == 13);
        }
        int s = 10 + 3 * i;
        fprintf(f, "P01_%03d,P01,P01_01,00:00:%02d.00,00:00:%02d.00,00:00:%02d.50,%d,%d,v%d n%d,"
                "v%d,%d,n%d,%d,\"['n%d']\",[%d]\n", i, s % 60, s % 60, s % 60, 50 * s, 50 * s + 25,
                v, n, v, v, n, n, n, n);
    }
    fclose(f);
}

/* The test's split: train and val loaded and numbered together, the action list. */
struct split {
    struct tb_annotations *sets[2];
    int n_actions;
    int *verb, *noun;  /* (n_actions) */
    int *truth;        /* (val items, 3) */
    int n;             /* val items */
};

static int split_open(struct split *s)
{
    struct tb_ann_opts epic = {.format = TB_ANN_EPIC};
    memset(s, 0, sizeof(*s));
    write_csv(tbt_path("EPIC_100_train.csv"), 400, 1);
    write_csv(tbt_path("EPIC_100_validation.csv"), 150, 2);
    if (tb_ann_load(&s->sets[0], tbt_path("EPIC_100_train.csv"), &epic) < 0 ||
        tb_ann_load(&s->sets[1], tbt_path("EPIC_100_validation.csv"), &epic) < 0) {
        TBT_FAIL("%s", tb_errmsg());
        return -1;
    }
    s->n_actions = tb_ann_map_actions(s->sets, 2);
    CHECK(s->n_actions > 20);
    s->verb = malloc(sizeof(int) * (size_t)s->n_actions);
    s->noun = malloc(sizeof(int) * (size_t)s->n_actions);
    s->n = s->sets[1]->n_items;
    s->truth = malloc(sizeof(int) * 3 * (size_t)s->n);
    CHECK_EQ(tb_cls_actions(s->sets, 2, s->n_actions, s->verb, s->noun), 0);
    for (int i = 0; i < s->n; i++) {
        const struct tb_ann_item *it = &s->sets[1]->items[i];
        s->truth[3 * i] = it->verb;
        s->truth[3 * i + 1] = it->noun;
        s->truth[3 * i + 2] = it->action;
    }
    return 0;
}

static void split_close(struct split *s)
{
    tb_ann_free(&s->sets[0]);
    tb_ann_free(&s->sets[1]);
    free(s->verb);
    free(s->noun);
    free(s->truth);
}

static void check_part(const struct tb_cls_part *p, double top1, double top5, double mean,
                       int n_classes, int n_ph, int n_mean, double tol, const char *what)
{
    CHECK_MSG(fabs(p->top1 - top1) <= tol, "%s top1 %.17g != %.17g", what, p->top1, top1);
    CHECK_MSG(fabs(p->top5 - top5) <= tol, "%s top5 %.17g != %.17g", what, p->top5, top5);
    CHECK_MSG(fabs(p->mean_class - mean) <= tol, "%s mean class %.17g != %.17g", what,
              p->mean_class, mean);
    CHECK_MSG(p->n_classes == n_classes && p->n_placeholders == n_ph &&
              p->n_mean_classes == n_mean, "%s classes %d/%d, placeholders %d/%d, in the mean "
              "%d/%d", what, p->n_classes, n_classes, p->n_placeholders, n_ph,
              p->n_mean_classes, n_mean);
}

/* ---- known answers --------------------------------------------------------------------------- */

/* The hand list: a0 = 0:1, a1 = 0:4, a2 = 2:1, a3 = 2:3, a4 = 3:0. Verb 1 and noun 2 are
 * placeholders (action 0's probability); 4 verb columns, 5 noun columns. */
static const int hv[5] = {0, 0, 2, 2, 3}, hn[5] = {1, 4, 1, 3, 0};

static void test_average_views(void)
{
    tbt_case = "two views averaged";
    /* View 1 (0, 0), view 2 (ln 3, 0). Logits: the mean (ln 3 / 2, 0), whose softmax is
     * sqrt 3 / (sqrt 3 + 1). Probabilities: (1/2, 1/2) and (3/4, 1/4) average to (5/8, 3/8). */
    const float z[4] = {0, 0, (float)log(3.0), 0};
    double p[2];
    CHECK_EQ(tb_cls_average_views(z, 1, 2, 2, TB_CLS_AVG_LOGITS, p), 0);
    double r3 = sqrt(exp((double)z[2]));
    CHECK_NEAR(p[0], r3 / (r3 + 1), 1e-15);
    CHECK_NEAR(p[0] + p[1], 1, 1e-15);
    CHECK_EQ(tb_cls_average_views(z, 1, 2, 2, TB_CLS_AVG_PROBS, p), 0);
    CHECK_NEAR(p[0], 0.625, 1e-7); /* ln 3 in float32: 3 to 1e-7 */
    CHECK_NEAR(p[1], 0.375, 1e-7);
    /* Huge logits: the maximum is subtracted, no overflow. */
    const float big[3] = {1000, 999, -1000};
    double q[3];
    CHECK_EQ(tb_cls_average_views(big, 1, 1, 3, TB_CLS_AVG_LOGITS, q), 0);
    CHECK_NEAR(q[0], 1 / (1 + exp(-1.0)), 1e-15);
    CHECK(q[2] == 0);
}

/* Kinetics' evaluation: 5 temporal x 3 spatial views of 7 classes, three clips.
 *   clip 0, truth 1: 14 views with logit 2 on class 1 (0 elsewhere), one with 60 on class 3.
 *     Logits averaged: class 3 at 60/15 = 4 beats class 1 at 28/15: wrong, class 1 second.
 *     Probabilities averaged: class 1 keeps 14/15 of e^2 / (e^2 + 6) = 0.515, class 3 gets
 *     (14 / (e^2 + 6) + 1) / 15 = 0.136: right. One saturated view moves a probability
 *     average by at most 1/15.
 *   clip 1, truth 0: 14 views with logit 1 on classes 1-5, one with 40 on class 0.
 *     Logits: class 0 at 40/15 first. Probabilities: class 0 at (14 / (5e + 2) + 1) / 15 =
 *     0.127 below classes 1-5 at 14/15 of e / (5e + 2) = 0.163: sixth, outside the top 5.
 *   clip 2, truth 3: every view (3, 1, 0.5, 2, -1, 0, 2.5): both modes are that softmax,
 *     class 3 third behind classes 0 and 6.
 * Each class's probability is written out below; the expected scores are counted from those
 * rows (no two classes tie in them). */
enum { KIN_VIEWS = 15, KIN_K = 7 };

/* The softmax of one view kind's logits z (KIN_K), by the formula. */
static void kin_softmax(const double *z, double *p)
{
    double sum = 0;
    for (int q = 0; q < KIN_K; q++)
        sum += exp(z[q]);
    for (int q = 0; q < KIN_K; q++)
        p[q] = exp(z[q]) / sum;
}

/* A clip's logits z (KIN_VIEWS, KIN_K): n_a views of za, the others of zb, among them view
 * `special` (t = 2, c = 1 of 5 x 3) when n_a < 15; and its expected rows: want[TB_CLS_AVG_LOGITS],
 * the softmax of (n_a za + (15 - n_a) zb) / 15, and want[TB_CLS_AVG_PROBS], n_a / 15 of za's
 * softmax plus (15 - n_a) / 15 of zb's. */
static void kin_clip(const double *za, const double *zb, int n_a, float *z, double want[2][KIN_K])
{
    const int special = 2 * 3 + 1;
    double mean[KIN_K], pa[KIN_K], pb[KIN_K];
    for (int v = 0, k = 0; v < KIN_VIEWS; v++) {
        const double *src = v == special || k >= n_a ? zb : za;
        k += src == za;
        for (int q = 0; q < KIN_K; q++)
            z[v * KIN_K + q] = (float)src[q];
    }
    for (int q = 0; q < KIN_K; q++)
        mean[q] = (n_a * za[q] + (KIN_VIEWS - n_a) * zb[q]) / KIN_VIEWS;
    kin_softmax(mean, want[TB_CLS_AVG_LOGITS]);
    kin_softmax(za, pa);
    kin_softmax(zb, pb);
    for (int q = 0; q < KIN_K; q++)
        want[TB_CLS_AVG_PROBS][q] = (n_a * pa[q] + (KIN_VIEWS - n_a) * pb[q]) / KIN_VIEWS;
}

static void test_kinetics_views(void)
{
    static const double a0[KIN_K] = {0, 2, 0, 0, 0, 0, 0}, b0[KIN_K] = {0, 0, 0, 60, 0, 0, 0};
    static const double a1[KIN_K] = {0, 1, 1, 1, 1, 1, 0}, b1[KIN_K] = {40, 0, 0, 0, 0, 0, 0};
    static const double a2[KIN_K] = {3, 1, 0.5, 2, -1, 0, 2.5};
    static const int truth[3] = {1, 0, 3};
    static const char *const mode_name[2] = {"logits averaged", "probabilities averaged"};
    float z[3 * KIN_VIEWS * KIN_K];
    double want[3][2][KIN_K], p[3 * KIN_K];
    kin_clip(a0, b0, 14, z, want[0]);
    kin_clip(a1, b1, 14, z + KIN_VIEWS * KIN_K, want[1]);
    kin_clip(a2, a2, 15, z + 2 * KIN_VIEWS * KIN_K, want[2]);
    /* What the comment claims: the best class of each mode. */
    int best[3][2];
    for (int c = 0; c < 3; c++)
        for (int m = 0; m < 2; m++) {
            best[c][m] = 0;
            for (int q = 1; q < KIN_K; q++)
                best[c][m] = want[c][m][q] > want[c][m][best[c][m]] ? q : best[c][m];
        }
    tbt_case = "Kinetics 5 x 3 views: the cases";
    CHECK(best[0][TB_CLS_AVG_LOGITS] == 3 && best[0][TB_CLS_AVG_PROBS] == 1);
    CHECK(best[1][TB_CLS_AVG_LOGITS] == 0 && best[1][TB_CLS_AVG_PROBS] != 0);
    CHECK(best[2][TB_CLS_AVG_LOGITS] == 0 && best[2][TB_CLS_AVG_PROBS] == 0);
    for (int m = 0; m < 2; m++) {
        tbt_case = mode_name[m];
        CHECK_EQ(tb_cls_average_views(z, 3, KIN_VIEWS, KIN_K, (enum tb_cls_avg)m, p), 0);
        double worst = 0;
        for (int k = 0; k < 3 * KIN_K; k++)
            worst = fmax(worst, fabs(p[k] - want[k / KIN_K][m][k % KIN_K]));
        CHECK_MSG(worst <= 1e-12, "probabilities off the formulas by %.3g", worst);
        /* Top-k from the written-out rows: the classes strictly above the truth. Mean class:
         * the recall of each class some clip has as truth or as its best. */
        double top1 = 0, top5 = 0, recall = 0;
        int n_true[KIN_K] = {0}, n_right[KIN_K] = {0}, n_pred[KIN_K] = {0}, n_mean = 0;
        for (int c = 0; c < 3; c++) {
            int above = 0, y = truth[c];
            for (int q = 0; q < KIN_K; q++) {
                CHECK(q == y || want[c][m][q] != want[c][m][y]);
                above += want[c][m][q] > want[c][m][y];
            }
            top1 += above < 1;
            top5 += above < 5;
            n_true[y]++;
            n_pred[best[c][m]]++;
            n_right[y] += best[c][m] == y;
        }
        for (int q = 0; q < KIN_K; q++)
            if (n_true[q] || n_pred[q]) {
                n_mean++;
                recall += n_true[q] ? (double)n_right[q] / n_true[q] : 0;
            }
        struct tb_cls_part part;
        CHECK_EQ(tb_cls_evaluate_level(p, 3, KIN_K, truth, &part), 0);
        check_part(&part, top1 / 3, top5 / 3, recall / n_mean, KIN_K, 0, n_mean, 1e-15,
                   mode_name[m]);
    }
    /* The modes part as designed: clip 0 right only by probabilities, clip 1 right only by
     * logits (and out of the probabilities' top 5). */
    struct tb_cls_part pl, pp;
    CHECK_EQ(tb_cls_average_views(z, 3, KIN_VIEWS, KIN_K, TB_CLS_AVG_LOGITS, p), 0);
    CHECK_EQ(tb_cls_evaluate_level(p, 3, KIN_K, truth, &pl), 0);
    CHECK_EQ(tb_cls_average_views(z, 3, KIN_VIEWS, KIN_K, TB_CLS_AVG_PROBS, p), 0);
    CHECK_EQ(tb_cls_evaluate_level(p, 3, KIN_K, truth, &pp), 0);
    tbt_case = "Kinetics 5 x 3 views: the modes differ";
    CHECK_NEAR(pl.top1, 1 / 3., 1e-15);
    CHECK_NEAR(pp.top1, 1 / 3., 1e-15);
    CHECK_NEAR(pl.top5, 1, 1e-15);
    CHECK_NEAR(pp.top5, 2 / 3., 1e-15);
}

static void test_hand(void)
{
    struct tb_cls_scores sc;
    tbt_case = "3 items by hand";
    /* Sixteenths, so every sum is exact and the ties are real. Per item, the actions, then
     * the verb columns (v0 = a0 + a1, v1 = a0 placeholder, v2 = a2 + a3, v3 = a4) and the
     * noun columns (n0 = a4, n1 = a0 + a2, n2 = a0 placeholder, n3 = a3, n4 = a1):
     *   item 0, truth a2 (2:1): (2 3 5 1 5): a2 ties a4 first: top-1 1/2, argmax a2 (right);
     *     verbs (5 2 6 5): v2 first; nouns (5 7 2 1 3): n1 first.
     *   item 1, truth a3 (2:3): (6 1 1 2 6): a3 third, argmax a0; verbs (7 6 3 6): v2
     *     fourth, argmax v0; nouns (6 7 6 2 1): n3 fourth, argmax n1.
     *   item 2, truth a1 (0:4): (4 4 4 4 0): a1 in a tie of 4 first: top-1 1/4, argmax a0;
     *     verbs (8 4 8 0): v0 ties v2: 1/2, argmax v0 (right); nouns (0 8 4 4 4): n4 in a tie
     *     of 3 (the placeholder n2 among them) behind n1: top-1 0, argmax n1.
     * Top-5 is 1 throughout (at most 5 columns). Mean class accuracy:
     *   actions: truth {a1, a2, a3}, predictions {a2, a0, a0}: rows a0 (only predicted: 0),
     *     a1 0, a2 1, a3 0: 1/4;
     *   verbs: truth {v2, v2, v0}, predictions {v2, v0, v0}: v0 1, v2 1/2: 3/4;
     *   nouns: truth {n1, n3, n4}, predictions n1 thrice: n1 1, n3 0, n4 0: 1/3. */
    static const double p[15] = {2 / 16., 3 / 16., 5 / 16., 1 / 16., 5 / 16.,
                                 6 / 16., 1 / 16., 1 / 16., 2 / 16., 6 / 16.,
                                 4 / 16., 4 / 16., 4 / 16., 4 / 16., 0};
    static const int truth[9] = {2, 1, 2, 2, 3, 3, 0, 4, 1};
    CHECK_EQ(tb_cls_evaluate(p, 3, 5, hv, hn, truth, &sc), 0);
    check_part(&sc.verb, 0.5, 1, 0.75, 4, 1, 2, 1e-15, "verb");
    check_part(&sc.noun, 1 / 3., 1, 1 / 3., 5, 1, 3, 1e-15, "noun");
    check_part(&sc.action, 0.25, 1, 0.25, 5, 0, 4, 1e-15, "action");
    CHECK_EQ(sc.n_items, 3);

    tbt_case = "constant scores, hand list";
    /* All 1/5, one item of each action. Verbs (2 1 2 1)/5: v0 and v2 tie first (1/2 each),
     * v3 ties v1 behind them (0); argmax v0: mean over {v0, v2, v3} of (1, 0, 0). Nouns
     * (1 2 1 1 1)/5: n1 first (1), n0, n3, n4 tie behind it (0); argmax n1: mean over {n0,
     * n1, n3, n4} of (0, 1, 0, 0). Actions: 1/5 each, argmax a0. */
    double c[25];
    int t5[15];
    for (int k = 0; k < 25; k++)
        c[k] = 0.2;
    for (int a = 0; a < 5; a++) {
        t5[3 * a] = hv[a];
        t5[3 * a + 1] = hn[a];
        t5[3 * a + 2] = a;
    }
    CHECK_EQ(tb_cls_evaluate(c, 5, 5, hv, hn, t5, &sc), 0);
    check_part(&sc.verb, 0.4, 1, 1 / 3., 4, 1, 3, 1e-15, "verb");
    check_part(&sc.noun, 0.4, 1, 0.25, 5, 1, 4, 1e-15, "noun");
    check_part(&sc.action, 0.2, 1, 0.2, 5, 0, 5, 1e-15, "action");

    tbt_case = "perfect, no placeholders";
    /* 0:0, 0:1, 1:0, 1:2: every verb and noun has an action. */
    static const int pv[4] = {0, 0, 1, 1}, pn[4] = {0, 1, 0, 2};
    double one[24] = {0};
    int t6[18];
    for (int i = 0; i < 6; i++) {
        int a = (i * 3) % 4;
        one[i * 4 + a] = 1;
        t6[3 * i] = pv[a];
        t6[3 * i + 1] = pn[a];
        t6[3 * i + 2] = a;
    }
    CHECK_EQ(tb_cls_evaluate(one, 6, 4, pv, pn, t6, &sc), 0);
    check_part(&sc.verb, 1, 1, 1, 2, 0, 2, 0, "verb");
    check_part(&sc.noun, 1, 1, 1, 3, 0, 3, 0, "noun");
    check_part(&sc.action, 1, 1, 1, 4, 0, 4, 0, "action");
}

static void test_split_known(const struct split *s)
{
    struct tb_cls_scores sc;
    int A = s->n_actions, n = s->n;
    double *p = calloc((size_t)n * A, sizeof(double));

    tbt_case = "the action list as one object";
    const struct tb_annotations *read[2] = {s->sets[0], s->sets[1]};
    struct tb_cls_action_list *list = NULL;
    CHECK_EQ(tb_cls_action_list_build(&list, read, 2), 0);
    CHECK(list && list->n_actions == A && !memcmp(list->verb, s->verb, sizeof(int) * (size_t)A) &&
          !memcmp(list->noun, s->noun, sizeof(int) * (size_t)A));
    tb_cls_action_list_free(&list);
    CHECK(list == NULL);
    tb_cls_action_list_free(&list);

    tbt_case = "perfect predictions with placeholders";
    /* One-hot on the truth. Actions score 1. An item of action 0 (0:1) puts 1 on the
     * placeholders too (action 0's probability): verb 0 ties verbs 3 and 7 (top-1 1/3,
     * argmax verb 0: right), noun 1 ties nouns 0, 5 and 13 (top-1 1/4, argmax the
     * placeholder noun 0: wrong, and noun 0 joins the mean with recall 0). */
    int n0 = 0, seen_noun[32] = {0}, right_noun[32] = {0}, n_true_nouns = 0;
    int seen_verb[32] = {0}, n_true_verbs = 0, n_true = 0;
    char *seen = calloc((size_t)A, 1);
    for (int i = 0; i < n; i++) {
        const int *t = s->truth + 3 * i;
        p[(size_t)i * A + t[2]] = 1;
        n0 += t[2] == 0;
        CHECK(t[0] < 32 && t[1] < 32);
        n_true_verbs += !seen_verb[t[0]]++;
        seen_noun[t[1]]++;
        right_noun[t[1]] += t[2] != 0;
        n_true += !seen[t[2]];
        seen[t[2]] = 1;
    }
    double recall = 0;
    for (int c = 0; c < 32; c++)
        if (seen_noun[c]) {
            n_true_nouns++;
            recall += (double)right_noun[c] / seen_noun[c];
        }
    int vocab_v = 0, vocab_n = 0;
    for (int a = 0; a < A; a++) {
        vocab_v = s->verb[a] > vocab_v ? s->verb[a] : vocab_v;
        vocab_n = s->noun[a] > vocab_n ? s->noun[a] : vocab_n;
    }
    CHECK(n0 >= 2 && vocab_v == 11 && vocab_n == 24);
    CHECK_EQ(tb_cls_evaluate(p, n, A, s->verb, s->noun, s->truth, &sc), 0);
    check_part(&sc.action, 1, 1, 1, A, 0, n_true, 1e-15, "action");
    double v1 = (n - n0 + n0 / 3.0) / n, n1 = (n - n0 + n0 / 4.0) / n;
    check_part(&sc.verb, v1, 1, 1, 12, 2, n_true_verbs, 1e-14, "verb");
    check_part(&sc.noun, n1, 1, recall / (n_true_nouns + 1), 25, 3, n_true_nouns + 1, 1e-14,
               "noun");

    tbt_case = "constant scores: the chance level";
    /* Every order of the tied actions is equally likely: top-k is k / A whatever the labels;
     * argmax is action 0 for every item, so the mean is over the true actions and action 0,
     * at most one of them right. */
    int zero_true = seen[0];
    for (size_t k = 0; k < (size_t)n * A; k++)
        p[k] = 1.0 / A;
    CHECK_EQ(tb_cls_evaluate(p, n, A, s->verb, s->noun, s->truth, &sc), 0);
    check_part(&sc.action, 1.0 / A, 5.0 / A, (double)zero_true / (n_true + !zero_true), A, 0,
               n_true + !zero_true, 1e-14, "action");
    CHECK(sc.verb.top1 < 1 && sc.noun.top1 < 1);
    free(seen);
    free(p);
}

/* ---- against the reference ------------------------------------------------------------------- */

static void *read_raw(const char *name, size_t want)
{
    size_t len = 0;
    char *b = tbt_read(tbt_path(name), &len);
    if (!b || len != want) {
        TBT_FAIL("%s: %zu bytes, %zu expected", name, b ? len : 0, want);
        free(b);
        return NULL;
    }
    return b;
}

static void test_reference(const struct split *s)
{
    char *out = NULL;
    int A = s->n_actions, n = s->n;
    tbt_case = "ek100_cls_ref.py cases";
    int rc = tbt_run(&out, 120, PYTHON " %s/tests/ref/ek100_cls_ref.py cases %s %s %s",
                     TB_SOURCE_DIR, tbt_path("EPIC_100_train.csv"),
                     tbt_path("EPIC_100_validation.csv"), tbt_dir());
    CHECK_MSG(rc == 0, "ek100_cls_ref.py cases: %s", out);
    free(out);

    tbt_case = "AVION's action list";
    FILE *f = fopen(tbt_path("actions.txt"), "r");
    int k = 0, v, m, mismatch = 0;
    while (f && fscanf(f, "%d %d", &v, &m) == 2) {
        mismatch += k >= A || s->verb[k] != v || s->noun[k] != m;
        k++;
    }
    if (f)
        fclose(f);
    CHECK_EQ(k, A);
    CHECK_EQ(mismatch, 0);
    f = fopen(tbt_path("targets.txt"), "r");
    for (k = 0, mismatch = 0; f && fscanf(f, "%d", &v) == 1; k++)
        mismatch += k >= n || s->truth[3 * k + 2] != v;
    if (f)
        fclose(f);
    CHECK_EQ(k, n);
    CHECK_EQ(mismatch, 0);

    f = fopen(tbt_path("expected.txt"), "r");
    if (!f)
        return;
    char name[64], mode[16];
    int ni, nv, na, n_lines = 0;
    double w[18];
    while (fscanf(f, "%63s %15s %d %d %d", name, mode, &ni, &nv, &na) == 5) {
        for (k = 0; k < 18; k++)
            if (fscanf(f, "%lf", &w[k]) != 1)
                break;
        char what[96], file[96];
        snprintf(what, sizeof(what), "%s, %s", name, mode);
        tbt_case = what;
        CHECK(k == 18 && ni == n && na == A);
        if (k != 18 || ni != n || na != A)
            break;
        double *p = NULL;
        if (!strcmp(mode, "given")) {
            snprintf(file, sizeof(file), "%s.f64", name);
            p = read_raw(file, sizeof(double) * (size_t)n * A);
        } else {
            snprintf(file, sizeof(file), "%s.f32", name);
            float *z = read_raw(file, sizeof(float) * (size_t)n * nv * A);
            snprintf(file, sizeof(file), "%s.%s.f64", name, mode);
            double *want = read_raw(file, sizeof(double) * (size_t)n * A);
            p = malloc(sizeof(double) * (size_t)n * A);
            enum tb_cls_avg avg = !strcmp(mode, "logits") ? TB_CLS_AVG_LOGITS : TB_CLS_AVG_PROBS;
            if (z && want && p) {
                CHECK_EQ(tb_cls_average_views(z, n, nv, A, avg, p), 0);
                double worst = 0;
                for (size_t e = 0; e < (size_t)n * A; e++)
                    worst = fmax(worst, fabs(p[e] - want[e]));
                CHECK_MSG(worst <= 1e-12, "probabilities differ by %.3g", worst);
            }
            free(z);
            free(want);
        }
        struct tb_cls_scores sc;
        if (p) {
            CHECK_EQ(tb_cls_evaluate(p, n, A, s->verb, s->noun, s->truth, &sc), 0);
            const struct tb_cls_part *part[3] = {&sc.verb, &sc.noun, &sc.action};
            static const char *const lv[3] = {"verb", "noun", "action"};
            for (int l = 0; l < 3; l++)
                check_part(part[l], w[6 * l], w[6 * l + 1], w[6 * l + 2], (int)w[6 * l + 3],
                           (int)w[6 * l + 4], (int)w[6 * l + 5], 1e-12, lv[l]);
            /* Away from 0 and 1, so the comparison means something (the tied cases sit
             * near chance by design). */
            CHECK(!strcmp(mode, "given") ||
                  (sc.action.top1 > 0.05 && sc.action.top5 < 0.99 && sc.verb.top1 > 0.05));
        }
        free(p);
        n_lines++;
    }
    fclose(f);
    CHECK_EQ(n_lines, 8);

    tbt_case = "one level: verb probabilities";
    int n_verbs = 0, *yv = malloc(sizeof(int) * (size_t)n);
    for (int a = 0; a < A; a++)
        n_verbs = s->verb[a] >= n_verbs ? s->verb[a] + 1 : n_verbs;
    for (int i = 0; i < n; i++)
        yv[i] = s->truth[3 * i];
    double *p = read_raw("level.f64", sizeof(double) * (size_t)n * n_verbs);
    f = fopen(tbt_path("level.txt"), "r");
    for (k = 0; f && k < 6 && fscanf(f, "%lf", &w[k]) == 1; k++)
        ;
    if (f)
        fclose(f);
    CHECK_EQ(k, 6);
    struct tb_cls_part part;
    if (p && k == 6) {
        CHECK_EQ(tb_cls_evaluate_level(p, n, n_verbs, yv, &part), 0);
        check_part(&part, w[0], w[1], w[2], (int)w[3], (int)w[4], (int)w[5], 1e-12, "verb");
        CHECK(part.top1 > 0.05 && part.top5 < 0.99);
    }
    free(p);
    free(yv);
}

/* ---- bad input ------------------------------------------------------------------------------- */

static void test_bad_input(const struct split *s)
{
    struct tb_cls_scores sc;
    double p[10] = {0.2, 0.2, 0.2, 0.2, 0.2, 0.1, 0.1, 0.1, 0.1, 0.6};
    int truth[6] = {2, 1, 2, 2, 3, 3};

    tbt_case = "truth out of range";
    truth[5] = 5;
    CHECK_EQ(tb_cls_evaluate(p, 2, 5, hv, hn, truth, &sc), TB_ERANGE);
    CHECK_STR_HAS(tb_errmsg(), "item 1: action 5 is not one of the 5 actions");
    CHECK_EQ(sc.n_items, 0);
    truth[5] = -1;
    CHECK_EQ(tb_cls_evaluate(p, 2, 5, hv, hn, truth, &sc), TB_ERANGE);
    CHECK_STR_HAS(tb_errmsg(), "item 1: action -1 is not one of the 5 actions");
    truth[5] = 3;

    tbt_case = "truth disagrees with the action list";
    truth[0] = 0;
    CHECK_EQ(tb_cls_evaluate(p, 2, 5, hv, hn, truth, &sc), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "item 0: verb 0, noun 1, but its action 2 is 2:1");
    truth[0] = 2;
    CHECK_EQ(tb_cls_evaluate(p, 2, 5, hv, hn, truth, &sc), 0);

    tbt_case = "non-finite and negative scores";
    const double bad[] = {NAN, INFINITY, -INFINITY, -0.1};
    for (int k = 0; k < 4; k++) {
        p[8] = bad[k];
        CHECK_EQ(tb_cls_evaluate(p, 2, 5, hv, hn, truth, &sc), TB_ERANGE);
        CHECK_STR_HAS(tb_errmsg(), "item 1, action 3: the score is");
        CHECK_STR_HAS(tb_errmsg(), "finite probabilities >= 0");
    }
    p[8] = 0.1;

    tbt_case = "sizes";
    CHECK_EQ(tb_cls_evaluate(p, 0, 5, hv, hn, truth, &sc), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "0 items, 5 actions: each must be at least 1");
    CHECK_EQ(tb_cls_evaluate(p, 2, 0, hv, hn, truth, &sc), TB_EINVAL);
    CHECK_EQ(tb_cls_evaluate(NULL, 2, 5, hv, hn, truth, &sc), TB_EINVAL);
    CHECK_EQ(tb_cls_evaluate(p, 2, 5, hv, hn, truth, NULL), TB_EINVAL);
    /* A list of 4 actions for truth of 5: action 4's items are out of range. */
    truth[2] = 4;
    truth[0] = 3;
    truth[1] = 0;
    CHECK_EQ(tb_cls_evaluate(p, 2, 4, hv, hn, truth, &sc), TB_ERANGE);
    CHECK_STR_HAS(tb_errmsg(), "item 0: action 4 is not one of the 4 actions");

    tbt_case = "the action list";
    static const int dv[5] = {0, 0, 2, 0, 3}, dn[5] = {1, 4, 1, 4, 0};
    CHECK_EQ(tb_cls_evaluate(p, 2, 5, dv, dn, truth, &sc), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "actions 1 and 3 are both 0:4");
    static const int nv[5] = {0, 0, 2, -2, 3};
    CHECK_EQ(tb_cls_evaluate(p, 2, 5, nv, hn, truth, &sc), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "action 3 is -2:3: verb and noun classes are in [0,");

    tbt_case = "non-finite logits";
    float z[12] = {0};
    double q[4];
    z[7] = NAN;
    CHECK_EQ(tb_cls_average_views(z, 2, 3, 2, TB_CLS_AVG_PROBS, q), TB_ERANGE);
    CHECK_STR_HAS(tb_errmsg(), "item 1, view 0, class 1: the logit is nan");
    z[7] = -INFINITY;
    CHECK_EQ(tb_cls_average_views(z, 2, 3, 2, TB_CLS_AVG_LOGITS, q), TB_ERANGE);
    CHECK_STR_HAS(tb_errmsg(), "the logit is -inf: the model is broken");
    z[7] = 0;
    CHECK_EQ(tb_cls_average_views(z, 2, 0, 2, TB_CLS_AVG_LOGITS, q), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "2 items, 0 views, 2 classes: each must be at least 1");
    CHECK_EQ(tb_cls_average_views(z, 2, 3, 2, (enum tb_cls_avg)7, q), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "mode 7 is neither");

    tbt_case = "one level: bad input";
    int y2[2] = {4, 1};
    struct tb_cls_part part;
    CHECK_EQ(tb_cls_evaluate_level(p, 2, 5, y2, &part), 0);
    y2[0] = 5;
    CHECK_EQ(tb_cls_evaluate_level(p, 2, 5, y2, &part), TB_ERANGE);
    CHECK_STR_HAS(tb_errmsg(), "item 0: class 5 is not one of the 5 classes");
    CHECK_EQ(part.n_classes, 0);
    y2[0] = 4;
    p[6] = NAN;
    CHECK_EQ(tb_cls_evaluate_level(p, 2, 5, y2, &part), TB_ERANGE);
    CHECK_STR_HAS(tb_errmsg(), "item 1, class 1: the score is nan");
    p[6] = 0.1;
    CHECK_EQ(tb_cls_evaluate_level(p, 0, 5, y2, &part), TB_EINVAL);
    CHECK_EQ(tb_cls_evaluate_level(p, 2, 0, y2, &part), TB_EINVAL);
    CHECK_EQ(tb_cls_evaluate_level(p, 2, 5, NULL, &part), TB_EINVAL);
    CHECK_EQ(tb_cls_evaluate_level(p, 2, 5, y2, NULL), TB_EINVAL);

    tbt_case = "sets and the action count";
    int *av = malloc(sizeof(int) * (size_t)(s->n_actions + 1));
    int *an = malloc(sizeof(int) * (size_t)(s->n_actions + 1));
    CHECK_EQ(tb_cls_actions(s->sets, 2, s->n_actions - 1, av, an), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "is not one of the");
    CHECK_STR_HAS(tb_errmsg(), "are these the sets tb_ann_map_actions numbered?");
    CHECK_EQ(tb_cls_actions(s->sets, 2, s->n_actions + 1, av, an), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "no item of the 2 sets has it");
    /* Validation numbered alone: its ids mean other actions than train's. */
    struct tb_annotations *val = NULL;
    struct tb_ann_opts epic = {.format = TB_ANN_EPIC};
    CHECK_EQ(tb_ann_load(&val, tbt_path("EPIC_100_validation.csv"), &epic), 0);
    if (val) {
        struct tb_annotations *mixed[2] = {s->sets[0], val};
        int n_val = tb_ann_map_actions(&val, 1);
        CHECK(n_val > 0 && n_val < s->n_actions);
        CHECK_EQ(tb_cls_actions(mixed, 2, s->n_actions, av, an), TB_EINVAL);
        CHECK_STR_HAS(tb_errmsg(), "EPIC_100_validation.csv:");
        CHECK_STR_HAS(tb_errmsg(), "on an earlier item (were the sets numbered separately?)");
        const struct tb_annotations *read[2] = {s->sets[0], val};
        struct tb_cls_action_list *list = NULL;
        CHECK_EQ(tb_cls_action_list_build(&list, read, 2), TB_EINVAL);
        CHECK_STR_HAS(tb_errmsg(), "on an earlier item (were the sets numbered separately?)");
        CHECK(list == NULL);
    }
    tb_ann_free(&val);
    /* Loaded, never numbered: no action ids. */
    CHECK_EQ(tb_ann_load(&val, tbt_path("EPIC_100_validation.csv"), &epic), 0);
    if (val) {
        const struct tb_annotations *read[2] = {s->sets[0], val};
        struct tb_cls_action_list *list = NULL;
        CHECK_EQ(tb_cls_action_list_build(&list, read, 2), TB_EINVAL);
        CHECK_STR_HAS(tb_errmsg(), "EPIC_100_validation.csv:2: the item has no action id: "
                      "number the sets together first");
        CHECK(list == NULL);
    }
    tb_ann_free(&val);
    free(av);
    free(an);
}

int main(void)
{
    struct split s;
    tbt_begin("cls_metrics");
    int have_numpy = tbt_run(NULL, 60, PYTHON " -c 'import numpy'") == 0;
    test_average_views();
    test_kinetics_views();
    test_hand();
    if (split_open(&s) == 0) {
        test_split_known(&s);
        test_bad_input(&s);
        if (have_numpy)
            test_reference(&s);
        else
            fprintf(stderr, "skip: the comparisons with tests/ref/ek100_cls_ref.py (%s has no "
                    "numpy)\n", PYTHON);
    }
    split_close(&s);
    TBT_EXIT();
}
