"""tubelet.checkpoint_settings: a checkpoint's settings as the library's one table gives them
(src/train/settings.c), the same values `tubelet train` was given, numbers as numbers."""
import os

import pytest

import tubelet
from conftest import run


@pytest.fixture(scope="module")
def checkpoint(dataset, tubelet_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    run([tubelet_bin, "train", "--data", dataset["root"], "--train", dataset["train_csv"],
         "--out", str(out), "--dim", "32", "--depth", "1", "--heads", "2", "--frames", "2",
         "--size", "32", "--batch", "2", "--epochs", "1", "--workers", "1", "--eval-every", "0",
         "--pool", "cls", "--pos", "learned", "--stride", "3"])
    return str(out / "last.safetensors")


def test_checkpoint_settings_are_the_runs(checkpoint):
    s = tubelet.checkpoint_settings(checkpoint)
    assert s["task"] == "cls"
    assert (s["dim"], s["depth"], s["heads"], s["frames"], s["height"]) == (32, 1, 2, 2, 32)
    assert all(isinstance(s[k], int) for k in ("dim", "depth", "classes", "stride"))
    assert (s["pool"], s["pos"], s["stride"]) == ("cls", "learned", 3)
    assert s["classes"] >= 1
    assert "attention" not in s  # a setting at its default is not recorded


def test_checkpoint_settings_missing_file(tmp_path):
    with pytest.raises(tubelet.NotFoundError):
        tubelet.checkpoint_settings(os.path.join(tmp_path, "none.safetensors"))
