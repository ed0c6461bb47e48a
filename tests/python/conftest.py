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
