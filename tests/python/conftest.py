"""Shared fixtures of the Python package's tests: the tubelet program (TUBELET_BIN, set by
ctest), and a small prepared dataset made with `tubelet synth` and `tubelet prep` once per
session. Run by ctest's test_python; alone: PYTHONPATH=build/python TUBELET_BIN=build/tubelet
/usr/bin/python3 -m pytest -q tests/python."""
import os
import shutil
import subprocess

import pytest

import tubelet  # noqa: F401  (a failing import fails every test, not a fixture)


def _bin():
    path = os.environ.get("TUBELET_BIN")
    if not path:
        here = os.path.dirname(os.path.abspath(__file__))
        path = os.path.join(here, "..", "..", "build", "tubelet")
    if not os.access(path, os.X_OK):
        pytest.skip("the tubelet program is not built (set TUBELET_BIN)")
    return path


@pytest.fixture(scope="session")
def tubelet_bin():
    return _bin()


def run(cmd, check=True):
    """Runs cmd (a list), returning (returncode, stdout bytes, stderr text)."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} failed ({p.returncode}): {p.stderr.decode()}")
    return p.returncode, p.stdout, p.stderr.decode()


@pytest.fixture(scope="session")
def dataset(tmp_path_factory, tubelet_bin):
    """Two synthetic 10 s videos (160x120) and their prepared chunks (4 s, short side 96):
    {'dir', 'videos': [plain files], 'root': prepared root, 'prepared': [video dirs],
    'train_csv', 'val_csv'}."""
    d = tmp_path_factory.mktemp("data")
    run([tubelet_bin, "synth", "--out", str(d / "s"), "--videos", "2", "--seconds", "10",
         "--size", "160x120", "--preset", "veryfast", "--threads", "1"])
    videos = sorted(str(p) for p in (d / "s" / "videos").glob("*.mp4"))
    run([tubelet_bin, "prep", *videos, "--out", str(d / "chunks"), "--chunk-seconds", "4",
         "--short-side", "96", "--preset", "veryfast", "--threads", "1"])
    prepared = sorted(str(p) for p in (d / "chunks").iterdir())
    return {"dir": d, "videos": videos, "root": str(d / "chunks"), "prepared": prepared,
            "train_csv": str(d / "s" / "annotations" / "EPIC_100_train.csv"),
            "val_csv": str(d / "s" / "annotations" / "EPIC_100_validation.csv")}


@pytest.fixture
def copy_of_root(dataset, tmp_path):
    """A private copy of the prepared root, free to damage."""
    dst = tmp_path / "chunks"
    shutil.copytree(dataset["root"], dst)
    return str(dst)


@pytest.fixture(scope="session")
def loader_dump():
    path = os.environ.get("TUBELET_LOADER_DUMP")
    if not path:
        here = os.path.dirname(os.path.abspath(__file__))
        path = os.path.join(here, "..", "..", "build", "tests", "loader_dump")
    if not os.access(path, os.X_OK):
        pytest.skip("loader_dump is not built (set TUBELET_LOADER_DUMP)")
    return path


EPIC_HEADER = ("narration_id,participant_id,video_id,narration_timestamp,start_timestamp,"
               "stop_timestamp,start_frame,stop_frame,narration,verb,verb_class,noun,noun_class,"
               "all_nouns,all_noun_classes")


def stamp(s):
    return f"{int(s // 3600):02d}:{int(s % 3600 // 60):02d}:{s % 60:05.2f}"


def epic_csv(path, videos, n_rows, seed, fps=30, seconds=10):
    """An EPIC-Kitchens-100 CSV of n_rows actions drawn over videos (ids): random windows of
    0.3-3 s inside seconds, random verb and noun classes. Returns the path."""
    import numpy as np
    rng = np.random.default_rng(seed)
    lines = [EPIC_HEADER]
    for i in range(n_rows):
        v = videos[i % len(videos)]
        start = float(rng.uniform(0, seconds - 3.2))
        stop = start + float(rng.uniform(0.3, 3.0))
        verb, noun = int(rng.integers(0, 8)), int(rng.integers(0, 16))
        lines.append(f"{v}_{i},P01,{v},{stamp(start)},{stamp(start)},{stamp(stop)},"
                     f"{int(start * fps)},{int(stop * fps)},action {i} of {v},verb{verb},{verb},"
                     f"noun{noun},{noun},\"['noun{noun}']\",\"[{noun}]\"")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)
