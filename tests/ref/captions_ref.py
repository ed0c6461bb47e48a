#!/usr/bin/env python3
"""tests/ref/captions_ref.py - the NumPy twin of the relevant captions of training
(src/metrics/mir_captions.c), for tests/test_captions.c. Needs numpy only.

    python3 tests/ref/captions_ref.py EPIC.csv SENTENCES.csv OUTDIR THRESHOLD...

SENTENCES.csv names a clip of EPIC.csv per row by narration_id (the header's column), in the
relevancy's column order. Writes to OUTDIR:
  rel_f8.npy, rel_f4.npy        the (clips, sentences) caption relevancy, float64 and float32
  rel_p3.pkl, rel_p4.pkl, rel_p5.pkl   the float64 one as pickle.dump writes it (protocols 3-5:
                                numpy's _reconstruct, then _frombuffer), as EK-100 ships it
  rel_p2.pkl                    protocol 2, whose data Python 3 keeps as text (refused)
  rel_fortran.pkl               the array in Fortran order (refused)
  not_array.pkl                 a dict of the array (refused)
  pos_f8_<k>.txt, pos_f4_<k>.txt  for the k-th threshold, a line per clip: the sentences above
                                it, as AVION takes them (clip_dataset.py, ek100_mir):
                                np.where(relevancy_mat[i] > threshold)[0], relevancy_mat read
                                back with pickle.load (f8) or np.load (f4), so the comparison
                                is NumPy's own (a float32 array meets a Python float in
                                float32).

The relevancy is EK-100's caption relevancy (JPoSE's create_relevancy_files.py): the verb IoU
(1 if the classes are equal, else 0) and the IoU of the noun-class sets, averaged, in float64.
"""
import ast
import csv
import os
import pickle
import sys

import numpy as np


def load_clips(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["verb"] = int(r["verb_class"])
        r["nouns"] = frozenset(ast.literal_eval(r["all_noun_classes"])
                               if "all_noun_classes" in r else [int(r["noun_class"])])
    return rows


def relevancy(rows, sentences):
    verb_inter = np.zeros((len(rows), len(sentences)))
    verb_union = np.zeros((len(rows), len(sentences)))
    noun_inter = np.zeros((len(rows), len(sentences)))
    noun_union = np.zeros((len(rows), len(sentences)))
    for i, v in enumerate(rows):
        for j, t in enumerate(sentences):
            same = v["verb"] == t["verb"]
            verb_inter[i, j] = 1 if same else 0
            verb_union[i, j] = 1 if same else 2
            noun_inter[i, j] = len(v["nouns"] & t["nouns"])
            noun_union[i, j] = len(v["nouns"] | t["nouns"])
    return (verb_inter / verb_union + noun_inter / noun_union) / 2


def dump(obj, path, protocol):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)


def positives(mat, threshold):
    return ["".join(" %d" % j for j in np.where(mat[i] > threshold)[0].tolist()).strip()
            for i in range(mat.shape[0])]


def main(argv):
    if len(argv) < 5:
        sys.stderr.write(__doc__)
        return 2
    rows = load_clips(argv[1])
    by_id = {r["narration_id"]: r for r in rows}
    with open(argv[2], newline="") as f:
        sentences = [by_id[r["narration_id"]] for r in csv.DictReader(f)]
    out = argv[3]
    rel = relevancy(rows, sentences)
    np.save(os.path.join(out, "rel_f8.npy"), rel)
    np.save(os.path.join(out, "rel_f4.npy"), rel.astype(np.float32))
    for p in (2, 3, 4, 5):
        dump(rel, os.path.join(out, "rel_p%d.pkl" % p), p)
    dump(np.asfortranarray(rel), os.path.join(out, "rel_fortran.pkl"), 4)
    dump({"relevancy": rel}, os.path.join(out, "not_array.pkl"), 4)
    with open(os.path.join(out, "rel_p4.pkl"), "rb") as f:
        mat8 = pickle.load(f)  # as clip_dataset.py loads it
    mat4 = np.load(os.path.join(out, "rel_f4.npy"))
    for k, t in enumerate(argv[4:]):
        for name, mat in (("f8", mat8), ("f4", mat4)):
            with open(os.path.join(out, "pos_%s_%d.txt" % (name, k)), "w") as f:
                f.write("".join(line + "\n" for line in positives(mat, float(t))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
