#!/usr/bin/env python3
"""Single-threaded peer baselines for tubelet's clip-decoding benchmark.

One peer per process:

    bench/venv/bin/python bench/peers.py --peer {decord,torchcodec,torchcodec-native,pyav} \
        --clips CLIPS.jsonl --size 224 [--scale-min 0.08 --scale-max 1.0] \
        [--warmup 5] [--repeat 1] [--seed 0] [--check OUT.npy]

CLIPS.jsonl: one JSON object per line, one clip each:

    {"segments": [{"path": "/abs/chunk/0.mp4", "frames": [3, 18, 33, 48]},
                  {"path": "/abs/chunk/15.mp4", "frames": [2]}]}

Frame numbers are 0-based presentation-order indices within that file (what
ffmpeg's select=eq(n,N) counts).  Each segment is read from its own file and the
frames of all segments are concatenated in order.  Each clip then gets ONE
RandomResizedCrop(size, scale=(scale_min, scale_max), ratio=(3/4, 4/3)) drawn
with torchvision.transforms.v2 (get_params once per clip, F.resized_crop on the
(T, C, H, W) uint8 tensor, bilinear, antialias=True), as AVION does.  The
result of every clip is a uint8 tensor (T, 3, size, size).

Prints exactly one JSON line to stdout:
    {"peer", "versions", "clips", "seconds", "clips_per_s", "frames_per_s",
     "peak_rss_mb", ...}
"clips"/"seconds" cover the timed clips only: the first --warmup clips are run
but not timed; the remaining clips are then run --repeat times.

--check OUT.npy saves the decoded RGB frames (before the crop) of the first 3
clips, stacked along the frame axis, as a uint8 array (N, H, W, 3).
"""

import os

# Single-threaded everything; must happen before numpy/torch are imported.
for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
           "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from fractions import Fraction  # noqa: E402

PEERS = ("decord", "torchcodec", "torchcodec-native", "pyav")
CHECK_CLIPS = 3


class PeerError(Exception):
    """An error with a message meant for the user (exit status 1)."""


# ----------------------------------------------------------------------------
# clips file
# ----------------------------------------------------------------------------

def load_clips(path):
    if not os.path.isfile(path):
        raise PeerError(f"clips file not found: {path}")
    clips = []
    with open(path, "r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise PeerError(f"{where}: invalid JSON: {e}") from None
            segs = obj.get("segments") if isinstance(obj, dict) else None
            if not isinstance(segs, list) or not segs:
                raise PeerError(f"{where}: expected an object with a non-empty \"segments\" list")
            clip = []
            for s in segs:
                if not isinstance(s, dict) or not isinstance(s.get("path"), str):
                    raise PeerError(f"{where}: each segment needs a string \"path\"")
                frames = s.get("frames")
                if (not isinstance(frames, list) or not frames
                        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                   for n in frames)):
                    raise PeerError(f"{where}: \"frames\" must be a non-empty list of "
                                    f"non-negative integers")
                if not os.path.isfile(s["path"]):
                    raise PeerError(f"{where}: video file not found: {s['path']}")
                clip.append((s["path"], list(frames)))
            clips.append(clip)
    if not clips:
        raise PeerError(f"no clips in {path}")
    return clips


# ----------------------------------------------------------------------------
# peers: each returns decode_segment(path, frames) -> uint8 tensor (T, 3, H, W)
# (possibly a non-contiguous view) and a dict of versions.
# ----------------------------------------------------------------------------

def make_decord():
    import decord
    import torch
    from decord import VideoReader, cpu

    def decode(path, frames):
        # A fresh reader per segment, as AVION opens one per clip.
        vr = VideoReader(path, num_threads=1, ctx=cpu(0))
        n = len(vr)
        bad = [i for i in frames if i >= n]
        if bad:
            raise PeerError(f"{path}: frame(s) {bad} out of range (decord counts {n} frames)")
        arr = vr.get_batch(frames).asnumpy()  # (T, H, W, 3) uint8
        del vr
        return torch.from_numpy(arr).permute(0, 3, 1, 2)

    return decode, {"decord": decord.__version__}


def _torchcodec_versions():
    import torchcodec
    v = {"torchcodec": torchcodec.__version__}
    try:
        from torchcodec._core import get_ffmpeg_library_versions
        v["torchcodec_ffmpeg"] = str(get_ffmpeg_library_versions().get("ffmpeg_version"))
    except Exception:
        pass
    return v


def _torchcodec_get(dec, path, frames):
    n = dec.metadata.num_frames
    if n is not None:
        bad = [i for i in frames if i >= n]
        if bad:
            raise PeerError(f"{path}: frame(s) {bad} out of range (torchcodec counts {n} frames)")
    return dec.get_frames_at(indices=frames).data


def make_torchcodec():
    from torchcodec.decoders import VideoDecoder

    def decode(path, frames):
        dec = VideoDecoder(path, seek_mode="exact", num_ffmpeg_threads=1,
                           dimension_order="NCHW")
        return _torchcodec_get(dec, path, frames)  # (T, 3, H, W) uint8

    return decode, _torchcodec_versions()


def make_torchcodec_native(size, scale, ratio):
    """torchcodec with decoder-native transforms: the crop and the resize run
    inside the decoder's colour conversion (FFmpeg filters/swscale) instead of
    torchvision.  torchcodec has no RandomResizedCrop, so a small
    DecoderTransform draws the torchvision RandomResizedCrop params from the
    frame size (the same RNG draws as the other peers) and emits
    "crop, h, w, left, top; resize, size, size".  The resize is FFmpeg's
    bilinear, not torchvision's antialiased bilinear, so pixels differ
    slightly from the other peers.  Uses torchcodec's private spec hook."""
    import torch
    from torchcodec.decoders import VideoDecoder
    from torchcodec.transforms import DecoderTransform
    from torchvision.transforms import v2

    class ClipResizedCrop(DecoderTransform):
        def __init__(self):
            self.params = None  # drawn once per clip, reused for every segment

        def _make_transform_spec(self, input_dims):
            h_in, w_in = input_dims
            if h_in is None or w_in is None:
                raise PeerError("torchcodec-native: video metadata has no frame size")
            if self.params is None:
                fake = torch.empty((1, 1, 1), dtype=torch.uint8).expand(1, h_in, w_in)
                self.params = v2.RandomResizedCrop.get_params(fake, scale, ratio)
            top, left, h, w = self.params
            return f"crop, {h}, {w}, {left}, {top};resize, {size}, {size}"

        def _get_output_dims(self):
            return (size, size)

    state = {"t": None}

    def new_clip():
        state["t"] = ClipResizedCrop()

    def decode(path, frames):
        dec = VideoDecoder(path, seek_mode="exact", num_ffmpeg_threads=1,
                           dimension_order="NCHW", transforms=[state["t"]])
        return _torchcodec_get(dec, path, frames)  # (T, 3, size, size) uint8

    return decode, new_clip, _torchcodec_versions()


def make_pyav():
    import av
    import numpy as np
    import torch

    def frame_index(frame, start, tb_fps):
        pts = frame.pts
        if pts is None:
            raise PeerError("pyav: decoded frame without pts")
        return round((pts - start) * tb_fps)

    def decode(path, frames):
        wanted = sorted(set(frames))
        first, last = wanted[0], wanted[-1]
        got = {}
        with av.open(path) as container:
            if not container.streams.video:
                raise PeerError(f"{path}: no video stream")
            stream = container.streams.video[0]
            cc = stream.codec_context
            cc.thread_type = "NONE"
            cc.thread_count = 1
            fps = stream.average_rate or stream.guessed_rate
            if not fps or stream.time_base is None:
                raise PeerError(f"{path}: stream has no frame rate / time base")
            tb = stream.time_base
            start = stream.start_time or 0
            tb_fps = Fraction(tb) * Fraction(fps)   # pts units -> frames

            def run(seek_to):
                # seek_to: None = decode from the start of the file.
                got.clear()
                if seek_to is not None:
                    container.seek(seek_to, stream=stream, backward=True, any_frame=False)
                first_idx = None
                for frame in container.decode(stream):
                    idx = frame_index(frame, start, tb_fps)
                    if first_idx is None:
                        first_idx = idx
                        if idx > first:
                            return False  # landed after the first wanted frame
                    if idx in got or idx < first:
                        pass
                    elif idx in wanted_set:
                        got[idx] = frame.to_ndarray(format="rgb24")
                    if idx >= last:
                        break
                return True

            wanted_set = set(wanted)
            if first == 0:
                ok = run(None)
            else:
                # pts of the first wanted frame; seek lands on the keyframe at or
                # before it (closed GOPs assumed, as x264/ffmpeg write by default).
                target = start + int(Fraction(first) / tb_fps)
                ok = run(target)
                if not ok:
                    container.seek(start, stream=stream, backward=True, any_frame=False)
                    ok = run(None)
            if not ok:
                raise PeerError(f"{path}: pyav could not position before frame {first}")
        missing = [i for i in wanted if i not in got]
        if missing:
            raise PeerError(f"{path}: frame(s) {missing} not found (past end of stream?)")
        arr = np.stack([got[i] for i in frames])  # (T, H, W, 3), original order
        return torch.from_numpy(arr).permute(0, 3, 1, 2)

    return decode, {"av": av.__version__,
                    "av_ffmpeg": getattr(av, "ffmpeg_version_info", "?")}


# ----------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------

def current_rss_mb():
    """Resident set size now (MB), to separate library footprint from decoding."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        pass
    return None


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peer", required=True, choices=PEERS)
    p.add_argument("--clips", required=True, help="clips .jsonl file")
    p.add_argument("--size", type=int, default=224, help="output side (default 224)")
    p.add_argument("--scale-min", type=float, default=0.08)
    p.add_argument("--scale-max", type=float, default=1.0)
    p.add_argument("--warmup", type=int, default=5, help="untimed clips first (default 5)")
    p.add_argument("--repeat", type=int, default=1,
                   help="timed passes over the clips after the warmup (default 1)")
    p.add_argument("--seed", type=int, default=0, help="torch RNG seed for the crops")
    p.add_argument("--check", metavar="OUT.npy",
                   help="save decoded RGB frames (before crop) of the first 3 clips")
    a = p.parse_args(argv)
    if a.size <= 0:
        p.error("--size must be positive")
    if not (0 < a.scale_min <= a.scale_max <= 1.0):
        p.error("need 0 < --scale-min <= --scale-max <= 1")
    if a.warmup < 0 or a.repeat < 1:
        p.error("need --warmup >= 0 and --repeat >= 1")
    if a.check and a.peer == "torchcodec-native":
        p.error("--check is not available for torchcodec-native (no uncropped frames); "
                "check --peer torchcodec instead")
    return a


def run(a):
    clips = load_clips(a.clips)
    if a.warmup >= len(clips):
        raise PeerError(f"--warmup {a.warmup} leaves no timed clips ({len(clips)} in {a.clips})")

    import numpy as np
    import torch
    import torchvision
    from torchvision.transforms import v2
    from torchvision.transforms.v2 import functional as F

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(a.seed)

    size = [a.size, a.size]
    scale = [a.scale_min, a.scale_max]
    ratio = [3.0 / 4.0, 4.0 / 3.0]
    bilinear = v2.InterpolationMode.BILINEAR

    new_clip = None
    if a.peer == "decord":
        decode, peer_versions = make_decord()
    elif a.peer == "torchcodec":
        decode, peer_versions = make_torchcodec()
    elif a.peer == "torchcodec-native":
        decode, new_clip, peer_versions = make_torchcodec_native(a.size, scale, ratio)
    else:
        decode, peer_versions = make_pyav()

    versions = {"python": sys.version.split()[0], "torch": torch.__version__,
                "torchvision": torchvision.__version__, "numpy": np.__version__}
    versions.update(peer_versions)

    rss_after_import_mb = current_rss_mb()
    check_frames = [] if a.check else None

    def one_clip(ci, clip):
        if new_clip is not None:
            new_clip()
        parts = [decode(path, frames) for path, frames in clip]
        x = parts[0] if len(parts) == 1 else torch.cat(parts, 0)  # (T, 3, H, W)
        if check_frames is not None and ci < CHECK_CLIPS:
            check_frames.append(x.permute(0, 2, 3, 1).contiguous().numpy())
        if new_clip is None:
            top, left, h, w = v2.RandomResizedCrop.get_params(x, scale, ratio)
            x = F.resized_crop(x, top, left, h, w, size=size,
                               interpolation=bilinear, antialias=True)
        t = sum(len(f) for _, f in clip)
        if x.dtype != torch.uint8 or tuple(x.shape) != (t, 3, a.size, a.size):
            raise PeerError(f"clip {ci}: unexpected output {x.dtype} {tuple(x.shape)}")
        return t

    for ci in range(a.warmup):
        one_clip(ci, clips[ci])

    timed = clips[a.warmup:]
    n_clips = n_frames = 0
    t0 = time.perf_counter()
    for _ in range(a.repeat):
        for k, clip in enumerate(timed):
            n_frames += one_clip(a.warmup + k, clip)
            n_clips += 1
    seconds = time.perf_counter() - t0

    if check_frames is not None:
        shapes = {f.shape[1:] for f in check_frames}
        if len(shapes) != 1:
            raise PeerError(f"--check: first clips have different frame sizes {sorted(shapes)}")
        np.save(a.check, np.concatenate(check_frames, 0))

    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    return {
        "peer": a.peer,
        "versions": versions,
        "clips": n_clips,
        "seconds": round(seconds, 6),
        "clips_per_s": round(n_clips / seconds, 3) if seconds > 0 else None,
        "frames_per_s": round(n_frames / seconds, 3) if seconds > 0 else None,
        "peak_rss_mb": round(peak_rss_mb, 1),
        "rss_after_import_mb": rss_after_import_mb,
        "frames": n_frames,
        "warmup": a.warmup,
        "repeat": a.repeat,
        "size": a.size,
        "scale": scale,
        "torch_threads": torch.get_num_threads(),
    }


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        result = run(a)
    except PeerError as e:
        print(f"peers.py: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # library errors (corrupt file, decoder failure, ...)
        print(f"peers.py: error ({a.peer}): {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
