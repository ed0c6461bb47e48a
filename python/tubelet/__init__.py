"""tubelet from Python: the frame-exact fused decode-crop reader, the threaded deterministic
loader and probe, over tubelet's C library (the extension module ``tubelet._tubelet``).

    import tubelet
    vr = tubelet.VideoReader("data/chunks/P01_01.mp4")      # a prepared directory or a file
    clip = vr.get_batch([0, 8, 16, 24], size=(224, 224), crop="center")  # uint8 (T, H, W, 3)

    with tubelet.Loader("data/chunks", "ann/train.csv", frames=16, size=224, batch=32) as loader:
        for b in loader:            # b["video"]: uint8 (B, T, H, W, 3), a view of the pool
            ...

docs/PYTHON.md is the walkthrough. Errors raise tubelet.Error (a RuntimeError) carrying the
library's message (file, frame, line); a missing file raises tubelet.NotFoundError (also a
FileNotFoundError), a refused value tubelet.InvalidError (also a ValueError), a frame out of
range tubelet.RangeError (an InvalidError, also an IndexError).
"""
import json as _json
import os as _os
from typing import Any as _Any, Dict as _Dict, Union as _Union

from ._tubelet import (EDECODE, EFORMAT, EINVAL, ENOENT, ERANGE, Error, InvalidError, Loader,
                       NotFoundError, PoolBuffer, RangeError, VideoReader, prep, probe, synth)
from ._tubelet import checkpoint_settings_json as _checkpoint_settings_json

__all__ = ["Error", "NotFoundError", "InvalidError", "RangeError", "VideoReader", "Loader",
           "PoolBuffer", "probe", "prep", "synth", "checkpoint_settings", "ENOENT", "EDECODE",
           "EFORMAT", "ERANGE", "EINVAL"]


def checkpoint_settings(path: _Union[str, "_os.PathLike[str]"]) -> _Dict[str, _Any]:
    """A tubelet checkpoint's settings (its task, model, sampling, labels, loss) as a dict, as
    `tubelet eval` and --init read them: the library's one table of settings
    (src/train/settings.c), numbers as numbers, names as text."""
    settings: _Dict[str, _Any] = _json.loads(_checkpoint_settings_json(_os.fspath(path)))
    return settings
__version__ = "0.1.0"
