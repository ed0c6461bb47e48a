"""Type hints of tubelet's extension module (python/tubelet/_tubelet.c)."""
from os import PathLike
from typing import Any, Dict, Iterator, List, Literal, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

StrPath = Union[str, bytes, "PathLike[str]"]
Size = Union[int, Tuple[int, int]]                 # an int is square; a tuple is (H, W)
Crop = Union[Literal["none", "center", "centre", "rrc", "random_resized", "multiscale"],
             Tuple[int, int, int, int]]            # (x, y, w, h): a fixed rectangle
Flip = Union[bool, Literal["random"]]

ENOENT: int
EDECODE: int
EFORMAT: int
ERANGE: int
EINVAL: int


class Error(RuntimeError):
    """A failure in tubelet's library. str(e) is the library's message, naming the file, frame
    or line; e.code is the TB_E* status (negative), e.reason its text."""
    code: int
    reason: str


class NotFoundError(Error, FileNotFoundError):
    """A file the library needed is missing (TB_ENOENT)."""


class InvalidError(Error, ValueError):
    """A value the library refused (TB_EINVAL, TB_ERANGE)."""


class RangeError(InvalidError, IndexError):
    """A frame out of the video's range (TB_ERANGE), from get_batch and vr[i] alike."""


def probe(path: StrPath, decode: bool = True) -> Dict[str, Any]:
    """What tubelet knows about a video file or a prepared video directory: the fields of
    `tubelet probe` (path, container, codec, pix_fmt, width, height, rotation, fps as
    (num, den), fps_value, start_time, duration, frames_declared, frames, bad_packets,
    keyframes; for a prepared directory also source, params, chunk_seconds, chunk_frames and
    chunks). decode=False skips decoding a file: frames and keyframes are then None."""


def prep(sources: Union[StrPath, Sequence[StrPath]], out: StrPath, chunk_seconds: int = 15,
         short_side: int = 320, fps: Union[int, Tuple[int, int], Literal["source"]] = 30,
         gop: int = 30,
         crf: int = 23, preset: str = "medium", tune: str = "fastdecode", ext: str = "mp4",
         jobs: int = 1, threads: int = 0, check: bool = True,
         bframes: bool = True) -> List[Dict[str, Any]]:
    """Prepare sources into out/<stem>.<ext>/ (fixed-length H.264 chunks, constant rate, short
    side resized, an index per chunk), as `tubelet prep`; a rerun skips finished chunks.
    bframes=False writes chunks without B-frames (`--no-bframes`); fps="source" keeps each
    video's own rate (`--fps source`: docs/FORMATS.md).
    Returns one dict per source: source, name, frames, chunks, chunks_skipped, bad_packets,
    width, height, error (None or the library's message). check=True raises tubelet.Error for
    the first source that failed (the others are still done). Ctrl-C stops it soon, keeping
    finished chunks, and raises KeyboardInterrupt. tune="none" for no x264 tune."""


def synth(out: StrPath, videos: int = 8, seconds: int = 60, size: Size = (240, 320),
          fps: Union[int, Tuple[int, int]] = 30, actor_scale: float = 1.0, seed: int = 0,
          crf: int = 18, preset: str = "fast", threads: int = 4,
          jobs: int = 2) -> Dict[str, int]:
    """Write the synthetic EPIC-Kitchens-style dataset (out/videos/*.mp4,
    out/annotations/EPIC_100_*.csv), as `tubelet synth`: the same seed and threads give the
    same files. size is (H, W). Returns videos, train_videos, val_videos, train_actions,
    val_actions. Ctrl-C stops it and raises KeyboardInterrupt."""


class VideoReader:
    """The frame-exact fused decode-crop reader over one video: a prepared (chunked) video
    directory or any file FFmpeg reads. One decode at a time per reader (calls from several
    threads wait for each other); the GIL is released while decoding.

    scaler: "bilinear" (default), "bicubic", "area" or "point"; threads: decoder threads per
    file (0: one); cached: files kept open (0: 4)."""

    def __init__(self, path: StrPath, scaler: str = "bilinear", threads: int = 0,
                 cached: int = 0) -> None: ...
    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> npt.NDArray[np.uint8]:
        """Frame i (negative: from the end) at its decoded size, uint8 (H, W, 3). RangeError
        (an IndexError) out of range."""
    @property
    def fps(self) -> float: ...
    @property
    def rate(self) -> Tuple[int, int]: ...
    @property
    def size(self) -> Tuple[int, int]:
        """(height, width) of the decoded frames."""
    @property
    def frame_count(self) -> int: ...
    @property
    def path(self) -> str: ...

    def get_batch(self, frames: Union[Sequence[int], npt.ArrayLike], size: Optional[Size] = None,
                  crop: Optional[Crop] = "none", flip: Flip = False, seed: int = 0,
                  scale: Optional[Tuple[float, float]] = None,
                  ratio: Optional[Tuple[float, float]] = None) -> npt.NDArray[np.uint8]:
        """Frames (integers, in presentation order, any order, repeats allowed, across chunks;
        negative numbers count from the end, as vr[i]; 1.7 or True is a TypeError) cropped and resized into a new uint8 array
        (T, H, W, 3), RGB. A frame out of range raises RangeError (an IndexError and an
        InvalidError), as vr[i] does.

        crop: "none" (the whole frame), "center" (the centred square of the short side),
        "rrc" (torchvision's RandomResizedCrop: area fraction in scale, default (0.08, 1),
        aspect log-uniform in ratio, default (3/4, 4/3)), "multiscale" (VideoMAE's
        GroupMultiScaleCrop) or (x, y, w, h). One crop is drawn per call and shared by every
        frame. flip: True, False or "random". seed keys the random choices exactly as
        `tubelet frames --seed` does, so both give the same bytes. size (H, W) or an int;
        without it, the crop's own size (224 for rrc and multiscale), as `tubelet frames`."""


class PoolBuffer:
    """One batch buffer of a Loader's pool: the .base of every batch's "video" array."""
    @property
    def address(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def detached(self) -> bool:
        """True once the Loader was closed while arrays still used this buffer: it then
        belongs to them and is freed with the last."""


class Loader:
    """The threaded, deterministic loader: worker threads decode clips into a fixed pool of
    prefetch + 1 batch buffers. Iterating yields dicts:

      video   uint8 (B, T, H, W, 3): a view of the pool buffer, no copy; valid until the next
              batch is asked for (it is then reused). Keep one with batch["video"].copy().
      label   int32 (B, 3): verb, noun, action (-1 where absent)
      index   int64 (B,): the dataset sample delivered (after any substitution)
      item    int64 (B,): its annotation item (row)
      view    int64 (B,): which temporal view of the item (evaluation; 0 in training)
      crop    int64 (B,): which spatial crop: 0 centre, 1 and 2 the ends of the long side
      flip    bool (B,): where the clip was flipped
      text    list of B narrations (str) or None
      epoch, number   which batch of which epoch

    train=False gives every item's views x crops, in item order unless shuffle=True; crop,
    flip, scale and ratio are training's and refused then, as views and crops in training.
    help(tubelet.Loader) describes every keyword. Batches equal the C loader's for the same
    settings, for any number of workers. A clip that fails is replaced by another sample,
    chosen deterministically; past max_failure_rate the iteration raises tubelet.Error naming
    the last failed file. One epoch per iteration: call set_epoch(e) before each (as with
    PyTorch's DistributedSampler). close() (or leaving a with block) joins the threads; arrays
    still alive then keep their buffer."""

    def __init__(self, root: StrPath, annotations: StrPath, *,
                 format: Literal["epic", "kinetics", "narration"] = "epic", frames: int = 16,
                 size: Size = 224, sampler: Literal["segments", "dense"] = "segments",
                 stride: int = 4, train: bool = True, crop: Optional[Crop] = None,
                 flip: Optional[Flip] = None, scale: Optional[Tuple[float, float]] = None,
                 ratio: Optional[Tuple[float, float]] = None, views: int = 1, crops: int = 1,
                 batch: int = 16, workers: int = 2, prefetch: int = 2, seed: int = 0,
                 shuffle: Optional[bool] = None, drop_last: bool = False, rank: int = 0,
                 world: int = 1, epoch: int = 0, ext: str = "mp4",
                 max_failure_rate: float = 0.05, clip_timeout: float = 0.0,
                 skip_bad_rows: bool = False, map_actions: bool = True) -> None: ...
    def __len__(self) -> int:
        """Batches of one epoch for this rank."""
    def __iter__(self) -> Iterator[Dict[str, Any]]: ...
    def __next__(self) -> Dict[str, Any]: ...
    def set_epoch(self, epoch: int) -> None: ...
    def stats(self) -> Dict[str, Union[int, float]]:
        """clips, failures, timeouts, frames_decoded, wait_s, skipped_rows."""
    def close(self) -> None: ...
    def __enter__(self) -> "Loader": ...
    def __exit__(self, *exc: object) -> None: ...
    @property
    def epoch(self) -> int: ...
    @property
    def dataset_size(self) -> int: ...
    @property
    def first_bad_row(self) -> Optional[str]: ...
    @property
    def closed(self) -> bool: ...

def checkpoint_settings_json(path: Union[str, "PathLike[str]"]) -> str: ...
