#!/usr/bin/env python3
"""bench/tfevents_check.py - a `tubelet train --tensorboard` run directory read by TensorBoard
itself (the `tensorboard` package of bench/setup.sh's venv), against its metrics.jsonl.

    bench/venv/bin/python bench/tfevents_check.py RUN_DIR

1. Every event file's records through TensorBoard's own record reader (its stub of
   TensorFlow's, which checks both CRC-32Cs of each record) to the end, with no data loss.
2. The directory through EventAccumulator (what `tensorboard --logdir` loads runs with):
   each tag's scalars, step by step, against what metrics.jsonl says of it - train/<key> for a
   step line's loss, lr, grad_norm and clips_per_s; eval/<key> for an evaluation line's
   metrics (eval/epoch its eval_epoch; zero-shot ones only where computed, not -1) at the
   step before it - equal within half the last printed digit plus float32 rounding. Nothing
   may be missing or extra.
Prints a count per tag and exits 1 on any difference. Not a test (ctest has no tensorboard):
tests/test_tfevents.c checks the same with a reader of its own."""
import glob
import json
import math
import os
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

TRAIN_KEYS = ("loss", "lr", "grad_norm", "clips_per_s")


def last_digit(text):
    """The unit of a printed number's last digit: "0.8333" 1e-4, "3.9e-05" 1e-6."""
    mant, _, exp = text.lower().partition("e")
    decimals = len(mant.partition(".")[2])
    return 10.0 ** ((int(exp) if exp else 0) - decimals)


def expected(run):
    """{tag: [(step, value, unit)]} from metrics.jsonl, in its order."""
    want, step = {}, 0
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            # the printed text of each number, for its precision
            texts = {k: v.strip() for k, v in (p.split(": ", 1) for p in
                     line.strip()[1:-1].replace('"', "").split(", "))}
            if "eval_epoch" in row:
                for key, value in row.items():
                    if key in ("items", "sentences", "views", "crops"):
                        continue
                    if key.startswith("zeroshot") and value == -1:
                        continue
                    tag = "eval/epoch" if key == "eval_epoch" else "eval/" + key
                    want.setdefault(tag, []).append((step, value, last_digit(texts[key])))
            elif "step" in row:  # not a start's line (start_step: rows, changed settings)
                step = row["step"]
                for key in TRAIN_KEYS:
                    want.setdefault("train/" + key, []).append(
                        (step, row[key], last_digit(texts[key])))
    return want


def check_records(path):
    """Every record of path through TensorBoard's reader: (events, the first's version)."""
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    n, version = 0, None
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return n, version
        ev = event_pb2.Event.FromString(reader.record())
        if n == 0:
            version = ev.file_version
        n += 1


def main(run):
    files = sorted(glob.glob(os.path.join(run, "events.out.tfevents.*")))
    if not files:
        print("tfevents_check.py: %s: no event files" % run, file=sys.stderr)
        return 1
    bad = 0
    for path in files:
        try:
            n, version = check_records(path)
        except errors.DataLossError as e:
            print("FAIL %s: %s" % (path, e.message), file=sys.stderr)
            bad += 1
            continue
        print("%s: %d records, CRCs good, file_version %s" % (os.path.basename(path), n, version))
        if version != "brain.Event:2":
            bad += 1
    acc = event_accumulator.EventAccumulator(run, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    got = {tag: acc.Scalars(tag) for tag in acc.Tags()["scalars"]}
    want = expected(run)
    for tag in sorted(set(got) | set(want)):
        # by step: TensorBoard takes a directory's files in name order, which for runs
        # started within one second (a test's, not a real run's) is not their time order
        g = sorted(got.get(tag, []), key=lambda a: a.step)
        w = sorted(want.get(tag, []), key=lambda x: x[0])
        diffs = [(a.step, a.value, s, v) for a, (s, v, unit) in zip(g, w)
                 if a.step != s or not abs(a.value - v) <= 0.5 * unit * (1 + 1e-9) +
                 abs(v) * 2.0 ** -23 and not (math.isnan(a.value) and math.isnan(v))]
        status = "ok" if len(g) == len(w) and not diffs else "FAIL"
        bad += status != "ok"
        print("%-22s %4d scalars in TensorBoard, %4d in metrics.jsonl  %s" %
              (tag, len(g), len(w), status))
        for d in diffs[:5]:
            print("    step %d value %.9g in TensorBoard, step %d value %s in metrics.jsonl" % d)
    total = sum(len(v) for v in got.values())
    print("%d tags, %d scalars, %d event files: %s" %
          (len(got), total, len(files), "all equal" if not bad else "%d differ" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
