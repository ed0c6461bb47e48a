#!/usr/bin/env python3
"""tests/ref/mir_ref.py - the numpy twin of EPIC-Kitchens-100 multi-instance retrieval
(src/metrics/mir.c), for tests/test_mir.c. Written from the definitions in JPoSE
(mwray/Joint-Part-of-Speech-Embeddings: src/evaluation/mAP.py and nDCG.py, the sentence list of
src/scripts/create_sentence_df.py, the caption relevancy of create_relevancy_files.py), which
AVION and LaViLa copy (utils/evaluation_ek100mir.py). Needs numpy only (Debian's python3-numpy).

    python3 tests/ref/mir_ref.py cases OUTDIR
        metric cases: OUTDIR/<name>.sim.npy (float32), <name>.rel.npy (float32, float64 or
        big-endian, header version 1 or 2, as numpy writes them) and OUTDIR/expected.txt, a
        line per case: name n_video n_text mAP(v2t t2v avg) nDCG(v2t t2v avg)
        n_map(v2t t2v) n_ndcg(v2t t2v). Also OUTDIR/reader.*.npy for the file reader.
    python3 tests/ref/mir_ref.py relevancy EPIC.csv OUTDIR
        OUTDIR/rel.npy (float64), OUTDIR/sentences.txt (the clip, 0-based row, of each
        sentence, a line each) for the EPIC CSV.
    python3 tests/ref/mir_ref.py deviation
        prints how far the official code's numpy argsort is from the tie rule on tied
        matrices (docs/METRICS.md quotes it).

The metrics, for one query (a row of sim and rel; text->video uses the transposes):
  AP   = (1/R) sum over ranks p (0-based) with rel_(p) == 1 of C_p / (p + 1), where
         C_p = rel_(0) + ... + rel_(p) sums graded relevancy and R = #{rel == 1};
  nDCG = DCG / IDCG over the first K ranks, K = #{rel > 0}, DCG = sum rel_(p) / log2(p + 2),
         IDCG the same for rel sorted descending.
The official code ranks with numpy's unstable argsort; the tie rule here (and in C) is the mean
over every order of tied items, computed in closed form (harmonic sums) and checked, on small
cases, against the official formulas averaged over all those orders by enumeration. Queries
whose AP or nDCG is 0/0 (the official code's NaN) are left out of the mean and counted."""
import ast
import csv
import itertools
import os
import sys

import numpy as np


# ---- the official definitions, for one order per query --------------------------------------

def official_ap(rel, order):
    """AP per query (row) for the given ranking (indices, best first); NaN where R == 0."""
    n = rel.shape[1]
    ranked = np.take_along_axis(rel, order, axis=1)
    hits = ranked == 1
    cum = np.cumsum(ranked, axis=1)
    precision = np.where(hits, cum / np.arange(1, n + 1), 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return precision / hits.sum(axis=1)


def discounts(n):
    return 1.0 / np.log2(np.arange(n) + 2.0)


def official_ndcg(rel, order):
    """nDCG per query for the given ranking; NaN where no relevancy is above 0."""
    n = rel.shape[1]
    k = (rel > 0).sum(axis=1)
    keep = np.arange(n)[None, :] < k[:, None]
    ranked = np.take_along_axis(rel, order, axis=1)
    ideal = -np.sort(-rel, axis=1)
    d = discounts(n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (ranked * keep * d).sum(axis=1) / (ideal * keep * d).sum(axis=1)


# ---- the tie rule: the expectation over the orders of tied items ----------------------------

def tie_average(sim, rel):
    """(AP, nDCG) per query, ties scored as the mean over their orders, in closed form: a group
    of m tied items at ranks [a, b) with relevancy sum G, n1 of them at 1, S before it, adds
    (n1/m) [(S + 1)(H_b - H_a) + (G - 1)/(m - 1) (m - (a + 1)(H_b - H_a))] to the AP sum,
    H_p = sum_{q<p} 1/(q+1), and (G/m)(D_min(b,K) - D_min(a,K)) to the DCG, D the prefix sums
    of the discounts."""
    n_q, n = sim.shape
    harm = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, n + 1))])
    dpre = np.concatenate([[0.0], np.cumsum(discounts(n))])
    ap = np.full(n_q, np.nan)
    ndcg = np.full(n_q, np.nan)
    for q in range(n_q):
        order = np.argsort(-sim[q], kind="stable")
        s, r = sim[q][order], rel[q][order]
        starts = np.concatenate([[0], np.nonzero(np.diff(s))[0] + 1])
        ends = np.concatenate([starts[1:], [n]])
        m = (ends - starts).astype(np.float64)
        g = np.add.reduceat(r, starts)
        n1 = np.add.reduceat((r == 1).astype(np.float64), starts)
        before = np.concatenate([[0.0], np.cumsum(g)[:-1]])
        dh = harm[ends] - harm[starts]
        step = np.where(m > 1, (g - 1) / np.maximum(m - 1, 1), 0.0)
        ap_sum = (n1 / m * ((before + 1) * dh + step * (m - (starts + 1) * dh))).sum()
        n_rel, k = (r == 1).sum(), (r > 0).sum()
        if n_rel:
            ap[q] = ap_sum / n_rel
        if k:
            dcg = (g / m * (dpre[np.minimum(ends, k)] - dpre[np.minimum(starts, k)])).sum()
            ideal = -np.sort(-r)
            ndcg[q] = dcg / (ideal[:k] * discounts(n)[:k]).sum()
    return ap, ndcg


def enumerate_orders(sim, rel):
    """The same by brute force: the official AP and nDCG averaged over every order of the
    tied items (small matrices only)."""
    n_q, n = sim.shape
    ap, ndcg = np.full(n_q, np.nan), np.full(n_q, np.nan)
    for q in range(n_q):
        levels = sorted(set(sim[q].tolist()), reverse=True)
        groups = [[i for i in range(n) if sim[q][i] == v] for v in levels]
        orders = [sum(p, []) for p in itertools.product(
            *[[list(x) for x in itertools.permutations(gr)] for gr in groups])]
        order = np.array(orders)
        rows = np.repeat(rel[q:q + 1], len(orders), axis=0)
        a, d = official_ap(rows, order), official_ndcg(rows, order)
        ap[q], ndcg[q] = a.mean(), d.mean()
    return ap, ndcg


def scores(sim, rel):
    """The six scores and the four counts, by the tie rule."""
    out, counts = [], []
    v_ap, v_nd = tie_average(sim, rel)
    t_ap, t_nd = tie_average(sim.T.copy(), rel.T.copy())
    for v, t in ((v_ap, t_ap), (v_nd, t_nd)):
        a, b = np.nanmean(v), np.nanmean(t)
        out += [a, b, (a + b) / 2]
        counts += [int((~np.isnan(v)).sum()), int((~np.isnan(t)).sum())]
    return out, counts


def official_numpy(sim, rel):
    """mAP and nDCG (v2t, t2v) exactly as the official code ranks: (-sim).argsort() for mAP,
    argsort(sim)[:, ::-1] for nDCG (numpy's default quicksort; not stable)."""
    res = []
    for s, r in ((sim, rel), (sim.T.copy(), rel.T.copy())):
        res.append((np.nanmean(official_ap(r, (-s).argsort())),
                    np.nanmean(official_ndcg(r, np.argsort(s)[:, ::-1]))))
    return res


# ---- cases ----------------------------------------------------------------------------------

def ek_like(rng, n_video, n_text, n_verbs=4, n_nouns=6):
    """Graded relevancy as EK-100 makes it: clips with a verb and a noun set, texts the
    classes of some of the clips, relevancy the mean of the verb and noun-set IoUs."""
    verbs = rng.integers(0, n_verbs, n_video)
    nouns = [frozenset(rng.choice(n_nouns, rng.integers(1, 3), replace=False).tolist())
             for _ in range(n_video)]
    pick = rng.integers(0, n_video, n_text)
    rel = np.zeros((n_video, n_text))
    for i in range(n_video):
        for j, c in enumerate(pick):
            rel[i, j] = ((verbs[i] == verbs[c]) + len(nouns[i] & nouns[c]) /
                         len(nouns[i] | nouns[c])) / 2
    return rel.astype(np.float32)


def make_cases(rng):
    cases = []

    def add(name, sim, rel, fmt="<f4", version=(1, 0), exhaustive=False, untied=False):
        cases.append((name, np.asarray(sim, np.float32), np.asarray(rel, np.float32), fmt,
                      version, exhaustive, untied))

    add("random", rng.standard_normal((37, 23)), ek_like(rng, 37, 23), untied=True)
    add("wide", rng.standard_normal((12, 90)), ek_like(rng, 12, 90), "<f8", untied=True)
    add("tall", rng.standard_normal((90, 12)), ek_like(rng, 90, 12), ">f4", untied=True)
    add("mid", rng.standard_normal((400, 150)), ek_like(rng, 400, 150), "<f4", (2, 0),
        untied=True)
    add("tied3", np.round(rng.uniform(0, 1, (40, 30)) * 2) / 2, ek_like(rng, 40, 30))
    half = ((rng.standard_normal((60, 50)) * 0.05 + 0.3 + 1) / 2).astype(np.float16)
    add("fp16", half, ek_like(rng, 60, 50), "<f8")
    add("constant", np.full((25, 20), 0.5), ek_like(rng, 25, 20))
    tiny = rng.integers(0, 3, (5, 7)).astype(np.float32)
    tiny[tiny == 0] = -0.0
    tiny[0, :3] = 0.0
    add("tiny_ties", tiny, ek_like(rng, 5, 7), exhaustive=True)
    add("tiny_untied", rng.standard_normal((6, 5)), ek_like(rng, 6, 5), exhaustive=True,
        untied=True)
    sparse = ek_like(rng, 30, 25)
    sparse[3, :] = 0                       # a video with nothing relevant
    sparse[5, :] = np.minimum(sparse[5, :], 0.5)  # relevant, but nothing at 1
    sparse[:, 7] = 0                       # a text with nothing relevant
    add("sparse", rng.standard_normal((30, 25)), sparse, untied=True)
    return cases


def save(path, a, fmt, version):
    a = np.ascontiguousarray(a.astype(np.dtype(fmt)))
    with open(path, "wb") as f:
        np.lib.format.write_array(f, a, version=version)


def cmd_cases(outdir):
    rng = np.random.default_rng(20240611)
    lines = []
    for name, sim, rel, fmt, version, exhaustive, untied in make_cases(rng):
        s, r = sim.astype(np.float64), rel.astype(np.float64)
        vals, counts = scores(s, r)
        # Self-checks: untied, the tie rule is the official definition; small, it is the
        # official definition averaged over every order of the ties.
        if untied:
            for a, b in ((s, r), (s.T.copy(), r.T.copy())):
                ap, nd = tie_average(a, b)
                order = np.argsort(-a, axis=1)
                assert np.allclose(ap, official_ap(b, order), rtol=0, atol=1e-13,
                                   equal_nan=True), name
                assert np.allclose(nd, official_ndcg(b, order), rtol=0, atol=1e-13,
                                   equal_nan=True), name
        if exhaustive:
            for a, b in ((s, r), (s.T.copy(), r.T.copy())):
                ta, tn = tie_average(a, b)
                ea, en = enumerate_orders(a, b)
                assert np.allclose(ta, ea, rtol=0, atol=1e-13, equal_nan=True), name
                assert np.allclose(tn, en, rtol=0, atol=1e-13, equal_nan=True), name
        save(os.path.join(outdir, name + ".sim.npy"), sim, "<f4", (1, 0))
        save(os.path.join(outdir, name + ".rel.npy"), rel, fmt, version)
        lines.append("%s %d %d %s %s" % (name, sim.shape[0], sim.shape[1],
                                         " ".join("%.17g" % v for v in vals),
                                         " ".join(str(c) for c in counts)))
    with open(os.path.join(outdir, "expected.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    # Files for the reader: one matrix in every layout numpy writes that it must read, and
    # two it must refuse.
    m = (np.arange(12, dtype=np.float32).reshape(3, 4) / 11)
    save(os.path.join(outdir, "reader.f4.npy"), m, "<f4", (1, 0))
    save(os.path.join(outdir, "reader.f8.npy"), m, "<f8", (1, 0))
    save(os.path.join(outdir, "reader.be.npy"), m, ">f8", (1, 0))
    save(os.path.join(outdir, "reader.v2.npy"), m, "<f4", (2, 0))
    save(os.path.join(outdir, "reader.v3.npy"), m, "<f4", (3, 0))
    np.save(os.path.join(outdir, "reader.fortran.npy"), np.asfortranarray(m))
    np.save(os.path.join(outdir, "reader.i4.npy"), (m * 11).astype(np.int32))
    return 0


# ---- sentences and relevancy from an EPIC CSV -----------------------------------------------

def cmd_relevancy(csv_path, outdir):
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["nouns"] = frozenset(ast.literal_eval(r["all_noun_classes"])
                               if "all_noun_classes" in r else [int(r["noun_class"])])
        r["action"] = (int(r["verb_class"]), int(r["noun_class"]))
    # create_sentence_df: the distinct narrations by first appearance, each with its first
    # row; then the action classes no sentence has, each with its first row (JPoSE iterates a
    # Python set here; we, like the C code, take them in order of that first row).
    first = {}
    for i, r in enumerate(rows):
        first.setdefault(r["narration"], i)
    sentences = sorted(first.values())
    have = {rows[i]["action"] for i in sentences}
    extra = {}
    for i, r in enumerate(rows):
        if r["action"] not in have:
            extra.setdefault(r["action"], i)
    sentences += sorted(extra.values())
    # create_relevancy_files: verb IoU (1 or 0) and noun-set IoU, averaged.
    rel = np.zeros((len(rows), len(sentences)))
    for i, v in enumerate(rows):
        for j, c in enumerate(sentences):
            t = rows[c]
            verb = 1.0 if v["verb_class"] == t["verb_class"] else 0.0
            noun = len(v["nouns"] & t["nouns"]) / len(v["nouns"] | t["nouns"])
            rel[i, j] = (verb + noun) / 2
    np.save(os.path.join(outdir, "rel.npy"), rel)
    with open(os.path.join(outdir, "sentences.txt"), "w") as f:
        f.write("".join("%d\n" % c for c in sentences))
    return 0


def cmd_deviation():
    rng = np.random.default_rng(7)
    print("| matrix | mAP v2t / t2v, official argsort | tie rule | nDCG v2t / t2v, official "
          "| tie rule |")
    print("|---|---|---|---|---|")
    for name, sim, rel in (
            ("constant, relevant texts first", np.zeros((200, 120)), None),
            ("constant, random relevancy", np.zeros((200, 120)), ek_like(rng, 200, 120)),
            ("float16 similarities", ((rng.standard_normal((400, 300)) * 0.05 + 1.3) / 2)
             .astype(np.float16), ek_like(rng, 400, 300)),
            ("float32 similarities", rng.standard_normal((400, 300)), ek_like(rng, 400, 300))):
        if rel is None:
            rel = np.zeros((200, 120), np.float32)
            rel[:, :10] = 1
        s, r = sim.astype(np.float64), rel.astype(np.float64)
        (om_v, on_v), (om_t, on_t) = official_numpy(s, r)
        vals, _ = scores(s, r)
        print("| %s | %.4f / %.4f | %.4f / %.4f | %.4f / %.4f | %.4f / %.4f |" % (
            name, om_v, om_t, vals[0], vals[1], on_v, on_t, vals[3], vals[4]))
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "cases":
        return cmd_cases(argv[2])
    if len(argv) == 4 and argv[1] == "relevancy":
        return cmd_relevancy(argv[2], argv[3])
    if len(argv) == 2 and argv[1] == "deviation":
        return cmd_deviation()
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
