"""examples/: train_ek100_cls.py (AVION's EK-100 classification data path on tubelet's loader)
trains a tiny model on the synthetic dataset, on the CPU, and its loss falls;
eval_ek100_cls.py scores those weights over views x crops, and its per-action averages are
the model's mean over the clips of a loader holding that action alone; docs/PYTHON.md's
averaging code is the example's."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tubelet

torch = pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples")


def run_example(name, *args):
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr.decode()
    return [json.loads(x) for x in p.stdout.decode().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The synthetic dataset, prepared, and the training example's 40 steps on it:
    {'root', 'ann': annotations dir, 'weights', 'lines': its output}."""
    d = tmp_path_factory.mktemp("example")
    tubelet.synth(d / "s", videos=4, seconds=20, size=(120, 160), preset="veryfast", threads=1)
    videos = sorted(str(p) for p in (d / "s" / "videos").glob("*.mp4"))
    tubelet.prep(videos, d / "chunks", chunk_seconds=10, short_side=64, preset="veryfast",
                 threads=1, jobs=2)
    ann = d / "s" / "annotations"
    lines = run_example("train_ek100_cls.py", "--data", str(d / "chunks"), "--train",
                        str(ann / "EPIC_100_train.csv"), "--steps", "40", "--size", "48",
                        "--device", "cpu", "--save", str(d / "tiny.pt"))
    return {"root": str(d / "chunks"), "ann": ann, "weights": str(d / "tiny.pt"),
            "lines": lines}


def test_example_trains_and_its_loss_falls(trained):
    lines = trained["lines"]
    losses = [x["loss"] for x in lines if "loss" in x]
    assert len(losses) == 40 and lines[-1]["done"] == 40 and lines[-1]["failures"] == 0
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.2, f"loss {first:.3f} -> {last:.3f}"


def test_eval_example_averages_each_actions_views_and_crops(trained, tmp_path):
    views, crops = 2, 3
    val = trained["ann"] / "EPIC_100_validation.csv"
    lines = run_example("eval_ek100_cls.py", "--data", trained["root"], "--val", str(val),
                        "--weights", trained["weights"], "--views", str(views), "--crops",
                        str(crops), "--batch", "4", "--device", "cpu")
    header, *rows = val.read_text().splitlines()
    items, summary = lines[:-1], lines[-1]
    assert [x["item"] for x in items] == list(range(len(rows))) and len(rows) > 1
    assert summary["items"] == len(rows) and summary["clips"] == len(rows) * views * crops
    top1 = np.mean([x["top1"] == x["label"] for x in items])
    assert summary["top1"] == pytest.approx(top1, abs=1e-4)
    # Each action alone in a loader: the mean of the model's softmax over all its clips.
    sys.path.insert(0, EXAMPLES)
    try:
        from eval_ek100_cls import load_model
    finally:
        sys.path.remove(EXAMPLES)
    model, saved = load_model(trained["weights"], "cpu")
    column = header.split(",").index(saved["label"] + "_class")
    for i, row in enumerate(rows):
        one = tmp_path / f"item{i}.csv"
        one.write_text(f"{header}\n{row}\n")
        with tubelet.Loader(trained["root"], str(one), frames=saved["frames"],
                            size=saved["size"], train=False, views=views, crops=crops,
                            batch=views * crops) as loader:
            (b,) = list(loader)
            with torch.no_grad():
                p = model(torch.from_numpy(b["video"])).softmax(-1).mean(0)
        assert np.allclose(items[i]["probs"], p.numpy(), atol=1e-5), f"item {i}"
        assert items[i]["label"] == int(row.split(",")[column])


def test_python_md_shows_the_examples_averaging():
    with open(os.path.join(HERE, "..", "..", "docs", "PYTHON.md")) as f:
        doc = f.read()
    with open(os.path.join(EXAMPLES, "eval_ek100_cls.py")) as f:
        example = f.read()
    start = doc.index("def average_views(")
    code = doc[start:doc.index("```", start)]
    assert len(code.splitlines()) > 10 and code in example
