"""examples/train_ek100_cls.py: AVION's EK-100 classification data path on tubelet's loader
trains a tiny model on the synthetic dataset, on the CPU, and its loss falls."""
import json
import os
import subprocess
import sys

import pytest

import tubelet

pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "train_ek100_cls.py")


def test_example_trains_and_its_loss_falls(tmp_path):
    tubelet.synth(tmp_path / "s", videos=4, seconds=20, size=(120, 160), preset="veryfast",
                  threads=1)
    videos = sorted(str(p) for p in (tmp_path / "s" / "videos").glob("*.mp4"))
    tubelet.prep(videos, tmp_path / "chunks", chunk_seconds=10, short_side=64,
                 preset="veryfast", threads=1, jobs=2)
    p = subprocess.run([sys.executable, EXAMPLE, "--root", str(tmp_path / "chunks"), "--train",
                        str(tmp_path / "s" / "annotations" / "EPIC_100_train.csv"), "--steps",
                        "40", "--size", "48", "--device", "cpu"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=300, env=dict(os.environ,
                                                                     OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr.decode()
    lines = [json.loads(x) for x in p.stdout.decode().splitlines()]
    losses = [x["loss"] for x in lines if "loss" in x]
    assert len(losses) == 40 and lines[-1]["done"] == 40 and lines[-1]["failures"] == 0
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.2, f"loss {first:.3f} -> {last:.3f}"
