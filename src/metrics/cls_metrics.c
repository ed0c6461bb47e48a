/* src/metrics/cls_metrics.c - EPIC-Kitchens-100 action classification metrics (see metrics.h):
 * a clip's views averaged into probabilities (logits or probabilities averaged), the action
 * list of numbered annotations, and top-1/top-5 and mean class accuracy of actions and, by
 * marginalising the actions, of verbs and nouns; or of one label alone (a Kinetics class, a
 * verb or noun model's). The definitions were read in AVION
 * (avion/utils/evaluation_ek100cls.py, scripts/main_lavila_finetune_cls.py) and LaViLa;
 * docs/METRICS.md states them and the tie rule. It runs no model and reads no file: an
 * evaluation hands it scores. Tests: tests/test_cls_metrics.c. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "metrics/cls_internal.h"
#include "tubelet/metrics.h"

/* ---- views ----------------------------------------------------------------------------------- */

void tbi_softmax_f64(const double *z, int n, double *p)
{
    double mx = z[0], sum = 0;
    for (int q = 1; q < n; q++)
        mx = z[q] > mx ? z[q] : mx;
    for (int q = 0; q < n; q++)
        sum += p[q] = exp(z[q] - mx);
    for (int q = 0; q < n; q++)
        p[q] /= sum;
}

int tb_cls_average_views(const float *logits, int64_t n_items, int n_views, int n_classes,
                         enum tb_cls_avg mode, double *prob)
{
    if (!logits || !prob)
        return tbi_err(TB_EINVAL, "averaging views: logits and prob must not be NULL");
    if (n_items < 1 || n_views < 1 || n_classes < 1)
        return tbi_err(TB_EINVAL, "averaging views: %" PRId64 " items, %d views, %d classes: "
                       "each must be at least 1", n_items, n_views, n_classes);
    if (mode != TB_CLS_AVG_LOGITS && mode != TB_CLS_AVG_PROBS)
        return tbi_err(TB_EINVAL, "averaging views: mode %d is neither TB_CLS_AVG_LOGITS nor "
                       "TB_CLS_AVG_PROBS", (int)mode);
    double *z = tbi_malloc(sizeof(double) * 2 * (size_t)n_classes); /* (2, K): a view, its softmax */
    if (!z)
        return tbi_err(TB_ENOMEM, "out of memory for %d classes", n_classes);
    double *pv = z + n_classes;
    for (int64_t i = 0; i < n_items; i++) {
        double *p = prob + (size_t)i * n_classes;
        for (int q = 0; q < n_classes; q++)
            p[q] = 0;
        for (int v = 0; v < n_views; v++) {
            const float *x = logits + ((size_t)i * n_views + v) * n_classes;
            for (int q = 0; q < n_classes; q++)
                if (!isfinite(x[q])) {
                    free(z);
                    return tbi_err(TB_ERANGE, "item %" PRId64 ", view %d, class %d: the logit "
                                   "is %f: the model is broken (NaN or infinite weights?)", i, v,
                                   q, (double)x[q]);
                }
            if (mode == TB_CLS_AVG_LOGITS) {
                for (int q = 0; q < n_classes; q++)
                    p[q] += x[q];
                continue;
            }
            for (int q = 0; q < n_classes; q++)
                z[q] = x[q];
            tbi_softmax_f64(z, n_classes, pv);
            for (int q = 0; q < n_classes; q++)
                p[q] += pv[q];
        }
        for (int q = 0; q < n_classes; q++)
            p[q] /= n_views;
        if (mode == TB_CLS_AVG_LOGITS)
            tbi_softmax_f64(p, n_classes, p);
    }
    free(z);
    return 0;
}

/* ---- the action list ------------------------------------------------------------------------- */

/* tb_cls_actions on sets that are only read. */
static int read_actions(const struct tb_annotations *const *sets, int n_sets, int n_actions,
                        int *verb, int *noun)
{
    if (!sets || n_sets < 1 || !verb || !noun)
        return tbi_err(TB_EINVAL, "the action list needs annotation sets and two arrays");
    if (n_actions < 1)
        return tbi_err(TB_EINVAL, "the action list needs at least 1 action (%d)", n_actions);
    for (int a = 0; a < n_actions; a++)
        verb[a] = noun[a] = -1;
    for (int s = 0; s < n_sets; s++) {
        const struct tb_annotations *ann = sets[s];
        if (!ann)
            return tbi_err(TB_EINVAL, "the action list: annotation set %d is NULL", s);
        for (int i = 0; i < ann->n_items; i++) {
            const struct tb_ann_item *it = &ann->items[i];
            int a = it->action;
            if (a < 0 || a >= n_actions)
                return tbi_err(TB_EINVAL, "%s:%d: action %d is not one of the %d actions (are "
                               "these the sets tb_ann_map_actions numbered?)", ann->path,
                               it->line, a, n_actions);
            if (it->verb < 0 || it->noun < 0)
                return tbi_err(TB_EINVAL, "%s:%d: verb %d, noun %d: EPIC classes are >= 0",
                               ann->path, it->line, it->verb, it->noun);
            if (verb[a] < 0) {
                verb[a] = it->verb;
                noun[a] = it->noun;
            } else if (verb[a] != it->verb || noun[a] != it->noun) {
                return tbi_err(TB_EINVAL, "%s:%d: action %d is %d:%d here but %d:%d on an "
                               "earlier item (were the sets numbered separately?)", ann->path,
                               it->line, a, it->verb, it->noun, verb[a], noun[a]);
            }
        }
    }
    for (int a = 0; a < n_actions; a++)
        if (verb[a] < 0)
            return tbi_err(TB_EINVAL, "action %d of %d: no item of the %d sets has it (are these "
                           "the sets tb_ann_map_actions numbered?)", a, n_actions, n_sets);
    return 0;
}

int tb_cls_actions(struct tb_annotations *const *sets, int n_sets, int n_actions, int *verb,
                   int *noun)
{
    return read_actions((const struct tb_annotations *const *)sets, n_sets, n_actions, verb,
                        noun);
}

void tb_cls_action_list_free(struct tb_cls_action_list **l)
{
    if (!*l)
        return;
    free((*l)->verb);
    free((*l)->noun);
    free(*l);
    *l = NULL;
}

int tb_cls_action_list_build(struct tb_cls_action_list **out,
                             const struct tb_annotations *const *sets, int n_sets)
{
    struct tb_cls_action_list *l = NULL;
    int n = 0, rc;
    *out = NULL;
    if (!sets || n_sets < 1)
        return tbi_err(TB_EINVAL, "the action list needs annotation sets");
    /* tb_ann_map_actions numbers the pairs 0 .. n - 1, every one carried by some item. */
    for (int s = 0; s < n_sets; s++)
        for (int i = 0; sets[s] && i < sets[s]->n_items; i++) {
            const struct tb_ann_item *it = &sets[s]->items[i];
            if (it->action < 0)
                return tbi_err(TB_EINVAL, "%s:%d: the item has no action id: number the sets "
                               "together first (tb_ann_map_actions over train + val)",
                               sets[s]->path, it->line);
            n = it->action >= n ? it->action + 1 : n;
        }
    if ((l = tbi_calloc(1, sizeof(*l)))) {
        l->verb = tbi_malloc(sizeof(int) * (size_t)(n ? n : 1));
        l->noun = tbi_malloc(sizeof(int) * (size_t)(n ? n : 1));
    }
    if (!l || !l->verb || !l->noun) {
        tb_cls_action_list_free(&l);
        return tbi_err(TB_ENOMEM, "out of memory for %d actions", n);
    }
    l->n_actions = n;
    if ((rc = read_actions(sets, n_sets, n, l->verb, l->noun)) < 0) {
        tb_cls_action_list_free(&l);
        return rc;
    }
    *out = l;
    return 0;
}

/* ---- scoring --------------------------------------------------------------------------------- */

/* One label level's columns for the item being scored and its tallies over the items. */
struct level {
    int n;                /* columns */
    double *col;          /* (n) the item's scores: its marginals (verbs, nouns) */
    int64_t *n_true;      /* (n) items whose truth is the class */
    int64_t *n_right;     /* (n) of those, the ones whose prediction is it too */
    int64_t *n_pred;      /* (n) items predicting the class */
    double top1, top5;    /* sums over the items */
};

static int level_alloc(struct level *l, int n, int marginal)
{
    memset(l, 0, sizeof(*l));
    l->n = n;
    l->n_true = tbi_calloc((size_t)n, sizeof(int64_t));
    l->n_right = tbi_calloc((size_t)n, sizeof(int64_t));
    l->n_pred = tbi_calloc((size_t)n, sizeof(int64_t));
    if (marginal)
        l->col = tbi_malloc(sizeof(double) * (size_t)n);
    return l->n_true && l->n_right && l->n_pred && (l->col || !marginal) ? 0 : -1;
}

static void level_free(struct level *l)
{
    free(l->col);
    free(l->n_true);
    free(l->n_right);
    free(l->n_pred);
}

/* Tally one item of true class y over the scores s (n). Top-k counts the probability that y is
 * among the k best when the classes tied with it are put in a uniformly random order: with g
 * classes above y and m tied with it (y included), y's rank is uniform on g .. g + m - 1, so
 * the hit is min(1, max(0, k - g) / m); untied, that is the strict rank. The prediction, for
 * the confusion rows, is the first best class (numpy's argmax, as AVION's confusion matrix). */
static void tally(struct level *l, const double *s, int y)
{
    int64_t above = 0, tied = 0;
    int best = 0;
    for (int q = 0; q < l->n; q++) {
        above += s[q] > s[y];
        tied += s[q] == s[y];
        best = s[q] > s[best] ? q : best;
    }
    double h1 = above < 1 ? (double)(1 - above) / (double)tied : 0;
    double h5 = above < 5 ? (double)(5 - above) / (double)tied : 0;
    l->top1 += h1 < 1 ? h1 : 1;
    l->top5 += h5 < 1 ? h5 : 1;
    l->n_true[y]++;
    l->n_pred[best]++;
    l->n_right[y] += best == y;
}

/* AVION's get_mean_accuracy over sklearn's confusion_matrix(truth, prediction): a row per
 * class seen in either, its recall (0 for a row with no true item), averaged. */
static void level_finish(const struct level *l, int64_t n_items, int n_placeholders,
                         struct tb_cls_part *out)
{
    double sum = 0;
    int n_mean = 0;
    for (int c = 0; c < l->n; c++) {
        if (!l->n_true[c] && !l->n_pred[c])
            continue;
        n_mean++;
        if (l->n_true[c])
            sum += (double)l->n_right[c] / (double)l->n_true[c];
    }
    out->top1 = l->top1 / (double)n_items;
    out->top5 = l->top5 / (double)n_items;
    out->mean_class = sum / n_mean;
    out->n_classes = l->n;
    out->n_placeholders = n_placeholders;
    out->n_mean_classes = n_mean;
}

struct pair {
    int verb, noun, action;
};

static int cmp_pair(const void *a, const void *b)
{
    const struct pair *x = a, *y = b;
    if (x->verb != y->verb)
        return x->verb < y->verb ? -1 : 1;
    if (x->noun != y->noun)
        return x->noun < y->noun ? -1 : 1;
    return (x->action > y->action) - (x->action < y->action);
}

enum { MAX_CLASS = 1 << 20 }; /* far above EPIC's 97 verbs and 300 nouns; bounds the tallies */

/* The action list's checks: classes in [0, MAX_CLASS], no (verb, noun) pair twice. Sets
 * *n_verbs and *n_nouns to the largest class + 1. */

static int check_actions(int n_actions, const int *verb, const int *noun, int *n_verbs,
                         int *n_nouns)
{
    int mv = 0, mn = 0;
    for (int a = 0; a < n_actions; a++) {
        if (verb[a] < 0 || noun[a] < 0 || verb[a] > MAX_CLASS || noun[a] > MAX_CLASS)
            return tbi_err(TB_EINVAL, "action %d is %d:%d: verb and noun classes are in [0, %d]",
                           a, verb[a], noun[a], MAX_CLASS);
        mv = verb[a] > mv ? verb[a] : mv;
        mn = noun[a] > mn ? noun[a] : mn;
    }
    struct pair *pairs = tbi_malloc(sizeof(*pairs) * (size_t)n_actions);
    if (!pairs)
        return tbi_err(TB_ENOMEM, "out of memory for %d actions", n_actions);
    for (int a = 0; a < n_actions; a++)
        pairs[a] = (struct pair){verb[a], noun[a], a};
    qsort(pairs, (size_t)n_actions, sizeof(*pairs), cmp_pair);
    int rc = 0;
    for (int a = 1; a < n_actions && rc == 0; a++)
        if (pairs[a].verb == pairs[a - 1].verb && pairs[a].noun == pairs[a - 1].noun)
            rc = tbi_err(TB_EINVAL, "actions %d and %d are both %d:%d: an action list names "
                         "each pair once", pairs[a - 1].action, pairs[a].action, pairs[a].verb,
                         pairs[a].noun);
    free(pairs);
    *n_verbs = mv + 1;
    *n_nouns = mn + 1;
    return rc;
}

/* The item's verb (or noun) marginals into l->col: each class's actions' probabilities summed
 * in action order; a class no action has (has[c] == 0) gets action 0's probability, AVION's
 * placeholder (get_marginal_indexes gives such a class the index list [0]). */
static void marginalise(const double *p, int n_actions, const int *cls, const char *has,
                        struct level *l)
{
    for (int c = 0; c < l->n; c++)
        l->col[c] = 0;
    for (int a = 0; a < n_actions; a++)
        l->col[cls[a]] += p[a];
    for (int c = 0; c < l->n; c++)
        if (!has[c])
            l->col[c] = p[0];
}

/* Item i's scores p (n) are finite and >= 0; what names a column in the message. */
static int check_row(const double *p, int n, int64_t i, const char *what)
{
    for (int q = 0; q < n; q++)
        if (!isfinite(p[q]) || p[q] < 0)
            return tbi_err(TB_ERANGE, "item %" PRId64 ", %s %d: the score is %g: scores must be "
                           "finite probabilities >= 0 (a softmax, e.g. tb_cls_average_views)", i,
                           what, q, p[q]);
    return 0;
}

int tb_cls_evaluate(const double *prob, int64_t n_items, int n_actions, const int *verb,
                    const int *noun, const int *truth, struct tb_cls_scores *out)
{
    struct level lv[3] = {{0}}; /* verb, noun, action */
    char *has = NULL;           /* (n_verbs + n_nouns): the class has an action */
    int n_verbs = 0, n_nouns = 0, rc = 0;
    if (!out)
        return tbi_err(TB_EINVAL, "scoring classification: out must not be NULL");
    memset(out, 0, sizeof(*out));
    if (!prob || !verb || !noun || !truth)
        return tbi_err(TB_EINVAL, "scoring classification: prob, verb, noun and truth must not "
                       "be NULL");
    if (n_items < 1 || n_actions < 1)
        return tbi_err(TB_EINVAL, "scoring classification: %" PRId64 " items, %d actions: each "
                       "must be at least 1", n_items, n_actions);
    TBI_TRY(check_actions(n_actions, verb, noun, &n_verbs, &n_nouns));
    if (level_alloc(&lv[0], n_verbs, 1) < 0 || level_alloc(&lv[1], n_nouns, 1) < 0 ||
        level_alloc(&lv[2], n_actions, 0) < 0 ||
        !(has = tbi_calloc((size_t)n_verbs + (size_t)n_nouns, 1))) {
        rc = tbi_err(TB_ENOMEM, "out of memory for %d actions", n_actions);
        goto end;
    }
    for (int a = 0; a < n_actions; a++) {
        has[verb[a]] = 1;
        has[n_verbs + noun[a]] = 1;
    }
    for (int64_t i = 0; i < n_items; i++) {
        const int *t = truth + 3 * (size_t)i;
        const double *p = prob + (size_t)i * n_actions;
        if (t[2] < 0 || t[2] >= n_actions) {
            rc = tbi_err(TB_ERANGE, "item %" PRId64 ": action %d is not one of the %d actions", i,
                         t[2], n_actions);
            goto end;
        }
        if (t[0] != verb[t[2]] || t[1] != noun[t[2]]) {
            rc = tbi_err(TB_EINVAL, "item %" PRId64 ": verb %d, noun %d, but its action %d is "
                         "%d:%d (truth and action list from different numberings?)", i, t[0],
                         t[1], t[2], verb[t[2]], noun[t[2]]);
            goto end;
        }
        if ((rc = check_row(p, n_actions, i, "action")) < 0)
            goto end;
        marginalise(p, n_actions, verb, has, &lv[0]);
        marginalise(p, n_actions, noun, has + n_verbs, &lv[1]);
        tally(&lv[0], lv[0].col, t[0]);
        tally(&lv[1], lv[1].col, t[1]);
        tally(&lv[2], p, t[2]);
    }
    int n_ph[2] = {0, 0};
    for (int c = 0; c < n_verbs + n_nouns; c++)
        n_ph[c >= n_verbs] += !has[c];
    level_finish(&lv[0], n_items, n_ph[0], &out->verb);
    level_finish(&lv[1], n_items, n_ph[1], &out->noun);
    level_finish(&lv[2], n_items, 0, &out->action);
    out->n_items = n_items;
end:
    for (int k = 0; k < 3; k++)
        level_free(&lv[k]);
    free(has);
    return rc;
}

int tb_cls_evaluate_level(const double *prob, int64_t n_items, int n_classes, const int *truth,
                          struct tb_cls_part *out)
{
    struct level l = {0};
    int rc = 0;
    if (!out)
        return tbi_err(TB_EINVAL, "scoring classification: out must not be NULL");
    memset(out, 0, sizeof(*out));
    if (!prob || !truth)
        return tbi_err(TB_EINVAL, "scoring classification: prob and truth must not be NULL");
    if (n_items < 1 || n_classes < 1)
        return tbi_err(TB_EINVAL, "scoring classification: %" PRId64 " items, %d classes: each "
                       "must be at least 1", n_items, n_classes);
    if (level_alloc(&l, n_classes, 0) < 0) {
        rc = tbi_err(TB_ENOMEM, "out of memory for %d classes", n_classes);
        goto end;
    }
    for (int64_t i = 0; i < n_items; i++) {
        const double *p = prob + (size_t)i * n_classes;
        if (truth[i] < 0 || truth[i] >= n_classes) {
            rc = tbi_err(TB_ERANGE, "item %" PRId64 ": class %d is not one of the %d classes", i,
                         truth[i], n_classes);
            goto end;
        }
        if ((rc = check_row(p, n_classes, i, "class")) < 0)
            goto end;
        tally(&l, p, truth[i]);
    }
    level_finish(&l, n_items, 0, out);
end:
    level_free(&l);
    return rc;
}
