#!/usr/bin/env python3
"""tests/ref/ek100_cls_ref.py - the numpy twin of EPIC-Kitchens-100 action classification
metrics (src/metrics/cls_metrics.c), for tests/test_cls_metrics.c and (score) tests/test_train.c.
Written from AVION
(zhaoyue-zephyrus/AVION: avion/utils/evaluation_ek100cls.py's get_marginal_indexes,
marginalize and get_mean_accuracy; scripts/main_lavila_finetune_cls.py's main and validate;
avion/utils/misc.py's generate_label_map) and LaViLa's copies
(lavila/utils/evaluation_ek100cls.py, evaluation.py, preprocess.py,
main_finetune_classification.py).
Needs numpy only (Debian's python3-numpy): sklearn's confusion_matrix and
top_k_accuracy_score are written out below as AVION calls them.

    python3 tests/ref/ek100_cls_ref.py cases TRAIN.csv VAL.csv OUTDIR
        AVION's action list of the two EPIC CSVs into OUTDIR/actions.txt ("verb noun" a line,
        in action order), the validation items' actions into OUTDIR/targets.txt, and metric
        cases: OUTDIR/<case>.f32 (logits, float32 (n_items, n_views, n_actions), raw
        little-endian) or <case>.f64 (probabilities, float64 (n_items, n_actions)); for a
        logits case OUTDIR/<case>.<mode>.f64 the probabilities of each averaging mode. A line
        per case and mode in OUTDIR/expected.txt:
            case mode n_items n_views n_actions, then for verb, noun and action:
            top1 top5 mean_class n_classes n_placeholders n_mean_classes
        (mode: logits, probs, or given for a probabilities case).
        Also OUTDIR/level.f64, probabilities (n_items, n_verbs) of verb classes scored as
        one level (no marginals) against the items' verbs, and OUTDIR/level.txt: its
        top1 top5 mean_class n_classes n_placeholders n_mean_classes.
    python3 tests/ref/ek100_cls_ref.py score TRAIN.csv VAL.csv EVAL.csv LOGITS.f32 N_VIEWS
        scores a model's own logits, float32 (n_items, N_VIEWS, n_actions) raw little-endian
        for the items of EVAL.csv (numbered with AVION's list over TRAIN + VAL): prints a line
        per mode (logits, probs): the mode, then for verb, noun and action
        top1 top5 mean_class n_classes n_placeholders n_mean_classes.
    python3 tests/ref/ek100_cls_ref.py deviation TRAIN.csv VAL.csv
        prints how far AVION's own tie handling (sklearn's top_k_accuracy_score, numpy's
        argmax) is from the tie rule on tied scores (docs/METRICS.md quotes it).

The definitions, as AVION evaluates (main_lavila_finetune_cls.py, end of validate):
  views: 'logits' averages the views' logits and takes one softmax; 'probs' takes a softmax
         per view and averages the probabilities. AVION reports both.
  actions: the sorted unique "verb:noun" strings over train + val, numbered in that order.
  verbs/nouns: the marginal of class v is the sum of the probabilities of the actions whose
         verb is v, for v in 0 .. max verb of the action list; a v that no action has gets
         index list [0], so its column is action 0's probability (the placeholder). The true
         verb/noun is the true action's.
  top-k: the true class among the k best. AVION's sklearn sorts with a stable argsort and
         reverses it, so ties go to the higher index; the rule here (and in C) is the mean
         over every order of the tied classes: min(1, max(0, k - above) / tied).
  mean class accuracy: sklearn's confusion_matrix(truth, argmax) has a row per label in
         truth or prediction; get_mean_accuracy averages each row's recall, a row with no
         true item counting 0. argmax is numpy's (ties to the lower index)."""
import csv
import os
import sys

import numpy as np


# ---- AVION's definitions ---------------------------------------------------------------------

def generate_label_map(train_csv, val_csv):
    """AVION's mapping over train + val: {"verb:noun": action}, the strings sorted."""
    vn_list = []
    for path in (train_csv, val_csv):
        with open(path) as f:
            reader = csv.reader(f)
            next(reader)
            for row in reader:
                vn = "{}:{}".format(int(row[10]), int(row[12]))
                if vn not in vn_list:
                    vn_list.append(vn)
    return {vn: i for i, vn in enumerate(sorted(vn_list))}


def get_marginal_indexes(classes):
    """For each class 0 .. max: the actions that have it, or [0] where none does."""
    out = []
    for v in range(classes.max() + 1):
        vals = np.nonzero(classes == v)[0]
        out.append(vals if len(vals) > 0 else np.array([0]))
    return out


def marginalize(probs, indexes):
    """AVION's marginalize, the sum taken in action order (as C does), so tied sums of
    dyadic probabilities come out bit for bit alike; checked against AVION's form."""
    m = np.zeros((probs.shape[0], len(indexes)))
    for c, ilist in enumerate(indexes):
        for a in ilist:
            m[:, c] += probs[:, a]
    avion = np.array([probs[:, ilist].sum(1) for ilist in indexes]).T
    assert np.allclose(m, avion, rtol=1e-13, atol=1e-15)
    return m


def confusion_matrix(y_true, y_pred):
    """sklearn's, labels=None: a row and column per label of y_true or y_pred, sorted."""
    labels = np.unique(np.concatenate([y_true, y_pred]))
    index = {c: k for k, c in enumerate(labels)}
    cm = np.zeros((len(labels), len(labels)), np.int64)
    for t, p in zip(y_true, y_pred):
        cm[index[t], index[p]] += 1
    return cm


def get_mean_accuracy(cm):
    """AVION's (and LaViLa's), as fractions: mean per-row recall, and the trace's share."""
    list_acc = []
    for i in range(len(cm)):
        acc = 0
        if cm[i, :].sum() > 0:
            acc = cm[i, i] / cm[i, :].sum()
        list_acc.append(acc)
    return np.mean(list_acc), np.trace(cm) / np.sum(cm)


def sklearn_top_k(y_true, y_score, k):
    """sklearn's top_k_accuracy_score for multiclass scores, as AVION calls it, per item."""
    sorted_pred = np.argsort(y_score, axis=1, kind="mergesort")[:, ::-1]
    return (y_true == sorted_pred[:, :k].T).any(axis=0)


def softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def average_views(logits, mode):
    """logits (n_items, n_views, n_classes) -> probabilities (n_items, n_classes)."""
    x = logits.astype(np.float64)
    if mode == "logits":
        return softmax(x.mean(axis=1))
    return softmax(x).mean(axis=1)


# ---- the tie rule ------------------------------------------------------------------------------

def top_k_items(scores, y, k):
    """Per item, the probability that y is among the k best, the classes tied with it put
    in a uniformly random order; and whether any class ties with y."""
    s_true = scores[np.arange(len(y)), y][:, None]
    above = (scores > s_true).sum(axis=1)
    tied = (scores == s_true).sum(axis=1)
    return np.clip((k - above) / tied, 0, 1), tied > 1


def top_k(scores, y, k):
    return top_k_items(scores, y, k)[0].mean()


def level(scores, y, n_placeholders, check_avion):
    pred = scores.argmax(axis=1)
    cm = confusion_matrix(y, pred)
    mean, _ = get_mean_accuracy(cm)
    h1, tied = top_k_items(scores, y, 1)
    h5, _ = top_k_items(scores, y, 5)
    if check_avion:
        # Where nothing ties with the truth, the rule gives AVION's hits exactly (ties do
        # occur here: a placeholder column equals a verb whose one action is action 0).
        free = ~tied
        assert (h1[free] == sklearn_top_k(y, scores, 1)[free]).all()
        assert (h5[free] == sklearn_top_k(y, scores, 5)[free]).all()
        assert (h1[free] == (pred == y)[free]).all()
    return [h1.mean(), h5.mean(), mean, scores.shape[1], n_placeholders, len(cm)]


def evaluate(probs, target, act_verb, act_noun, check_avion):
    vi, ni = get_marginal_indexes(act_verb), get_marginal_indexes(act_noun)
    verb_scores, noun_scores = marginalize(probs, vi), marginalize(probs, ni)
    ph_v = sum(1 for v in range(act_verb.max() + 1) if not (act_verb == v).any())
    ph_n = sum(1 for n in range(act_noun.max() + 1) if not (act_noun == n).any())
    return (level(verb_scores, act_verb[target], ph_v, check_avion) +
            level(noun_scores, act_noun[target], ph_n, check_avion) +
            level(probs, target, 0, check_avion))


# ---- cases -------------------------------------------------------------------------------------

def load(train_csv, val_csv, eval_csv=None):
    """AVION's action list over train + val, and the actions of eval_csv's items (val's by
    default)."""
    vn2act = generate_label_map(train_csv, val_csv)
    act_verb = np.array([int(vn.split(":")[0]) for vn in vn2act])
    act_noun = np.array([int(vn.split(":")[1]) for vn in vn2act])
    with open(eval_csv or val_csv) as f:
        reader = csv.reader(f)
        next(reader)
        target = np.array([vn2act["{}:{}".format(int(r[10]), int(r[12]))] for r in reader])
    return act_verb, act_noun, target


def as_line(vals):
    return " ".join("%.17g" % float(v) if k % 6 < 3 else "%d" % v for k, v in enumerate(vals))


def make_logits(rng, target, n_views, n_actions, scale, boost):
    """Random logits whose true class is raised on about half the items, so that top-1
    and top-5 land away from 0 and 1."""
    z = rng.standard_normal((len(target), n_views, n_actions)) * scale
    lift = (rng.random(len(target)) < 0.5) * boost
    z[np.arange(len(target)), :, target] += lift[:, None]
    return z.astype(np.float32)


def cmd_cases(train_csv, val_csv, outdir):
    act_verb, act_noun, target = load(train_csv, val_csv)
    n, n_actions = len(target), len(act_verb)
    with open(os.path.join(outdir, "actions.txt"), "w") as f:
        f.write("".join("%d %d\n" % (v, m) for v, m in zip(act_verb, act_noun)))
    with open(os.path.join(outdir, "targets.txt"), "w") as f:
        f.write("".join("%d\n" % a for a in target))
    rng = np.random.default_rng(19)
    lines = []

    def put(case, mode, n_views, vals):
        lines.append("%s %s %d %d %d %s\n" % (case, mode, n, n_views, n_actions, as_line(vals)))

    for case, n_views, scale, boost in (("views3", 3, 2.0, 4.0), ("views1", 1, 1.0, 3.0),
                                        ("views4_sharp", 4, 6.0, 9.0)):
        logits = make_logits(rng, target, n_views, n_actions, scale, boost)
        logits.astype("<f4").tofile(os.path.join(outdir, case + ".f32"))
        for mode in ("logits", "probs"):
            probs = average_views(logits, mode)
            probs.astype("<f8").tofile(os.path.join(outdir, "%s.%s.f64" % (case, mode)))
            vals = evaluate(probs, target, act_verb, act_noun, check_avion=True)
            put(case, mode, n_views, vals)
    # Tied: dyadic probabilities (sums exact in any order), some rows constant, some zero.
    tied = rng.integers(0, 4, (n, n_actions)) / 8.0
    tied[::7] = 1.0 / 16
    tied[3::11] = 0.0
    # Coarser still: two levels, so the true class often sits in a tie across the 5th rank.
    coarse = rng.integers(0, 2, (n, n_actions)) / 4.0
    for case, probs in (("tied", tied), ("coarse", coarse)):
        probs.astype("<f8").tofile(os.path.join(outdir, case + ".f64"))
        vals = evaluate(probs, target, act_verb, act_noun, check_avion=False)
        put(case, "given", 1, vals)
    with open(os.path.join(outdir, "expected.txt"), "w") as f:
        f.write("".join(lines))
    # One level alone: verb probabilities straight from a model of verbs, no marginals.
    n_verbs = act_verb.max() + 1
    verb_probs = average_views(make_logits(rng, act_verb[target], 2, n_verbs, 2.0, 3.0), "probs")
    verb_probs.astype("<f8").tofile(os.path.join(outdir, "level.f64"))
    with open(os.path.join(outdir, "level.txt"), "w") as f:
        f.write(as_line(level(verb_probs, act_verb[target], 0, check_avion=True)) + "\n")
    return 0


def cmd_score(train_csv, val_csv, eval_csv, logits_path, n_views):
    act_verb, act_noun, target = load(train_csv, val_csv, eval_csv)
    logits = np.fromfile(logits_path, "<f4").reshape(len(target), n_views, len(act_verb))
    for mode in ("logits", "probs"):
        vals = evaluate(average_views(logits, mode), target, act_verb, act_noun,
                        check_avion=True)
        print(mode, as_line(vals))
    return 0


def cmd_deviation(train_csv, val_csv):
    act_verb, act_noun, target = load(train_csv, val_csv)
    n, n_actions = len(target), len(act_verb)
    rng = np.random.default_rng(5)
    print("| scores | action top-1 / top-5, AVION (sklearn) | tie rule | verb top-1, AVION "
          "(argmax) | tie rule |")
    print("|---|---|---|---|---|")
    for name, probs in (("constant", np.full((n, n_actions), 1.0 / n_actions)),
                        ("two levels (0, 1/4)", rng.integers(0, 2, (n, n_actions)) / 4.0)):
        vi = get_marginal_indexes(act_verb)
        vs = marginalize(probs, vi)
        yv = act_verb[target]
        print("| %s | %.4f / %.4f | %.4f / %.4f | %.4f | %.4f |" % (
            name, sklearn_top_k(target, probs, 1).mean(), sklearn_top_k(target, probs, 5).mean(),
            top_k(probs, target, 1), top_k(probs, target, 5),
            (vs.argmax(axis=1) == yv).mean(), top_k(vs, yv, 1)))
    return 0


def main(argv):
    if len(argv) == 5 and argv[1] == "cases":
        return cmd_cases(argv[2], argv[3], argv[4])
    if len(argv) == 7 and argv[1] == "score":
        return cmd_score(argv[2], argv[3], argv[4], argv[5], int(argv[6]))
    if len(argv) == 4 and argv[1] == "deviation":
        return cmd_deviation(argv[2], argv[3])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
