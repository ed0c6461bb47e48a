#!/usr/bin/env python3
"""PyTorch DataLoader baselines for tubelet's multi-worker loading benchmark.

Mimics AVION's EPIC-Kitchens-100 fine-tuning data path (facebookresearch/AVION,
avion/data/clip_dataset.py: VideoClassyDataset + video_loader + get_frame_ids):

    bench/venv/bin/python bench/loader_peers.py --impl {decord,torchcodec} \
        --root ROOT --ann EPIC_100_train.csv --frames T --size 224 \
        --workers N --batch B --clips C [--seed 0] [--chunk-seconds 15] [--fps 30] \
        [--ext mp4] [--scale-min 0.08 --scale-max 1.0] [--check-out FILE.npy]

ROOT/<video_id>.<ext>/<start_s>.<ext> are 15 s chunks (tubelet prep --gop 250
--tune none, or AVION's own chunking).  Each dataset item: AVION's jittered
segment sampling of T frame ids over the action, one decoder per chunk touched
reading all of its frames in one call, one RandomResizedCrop per clip
(torchvision, bilinear, antialias) and a random horizontal flip per clip.
Items are uint8 (T, size, size, 3) clips plus (verb_class, noun_class).

Prints exactly one JSON line to stdout (see bench/README-loader-peers.md).
"""

import os

# Single-threaded everything; must happen before numpy/torch are imported.  The
# DataLoader workers inherit the environment.
for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
           "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

IMPLS = ("decord", "torchcodec")
PROG = "loader_peers.py"


class LoaderError(Exception):
    """An error with a message meant for the user (exit status 1)."""


# ----------------------------------------------------------------------------
# annotations
# ----------------------------------------------------------------------------

def parse_timestamp(s):
    """EPIC-Kitchens 'HH:MM:SS.ff' -> seconds (AVION's datetime2sec)."""
    hh, mm, ss = s.strip().split(":")
    v = int(hh) * 3600 + int(mm) * 60 + float(ss)
    if not math.isfinite(v) or v < 0:
        raise ValueError(s)
    return v


def load_annotations(path):
    """Rows of an EPIC-Kitchens-100 CSV -> list of (vid, start_s, end_s, verb, noun, line)."""
    if not os.path.isfile(path):
        raise LoaderError(f"annotation file not found: {path}")
    need = ("video_id", "start_timestamp", "stop_timestamp", "verb_class", "noun_class")
    rows = []
    with open(path, "r", encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise LoaderError(f"{path}: empty file (expected an EPIC-Kitchens-100 CSV header)") from None
        except csv.Error as e:
            raise LoaderError(f"{path}:1: {e}") from None
        col = {name.strip(): k for k, name in enumerate(header)}
        missing = [n for n in need if n not in col]
        if missing:
            raise LoaderError(f"{path}:1: header lacks column(s) {', '.join(missing)}")
        idx = [col[n] for n in need]
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                raise LoaderError(f"{path}:{reader.line_num}: {e}") from None
            line = reader.line_num
            if not fields or all(not x.strip() for x in fields):
                continue
            where = f"{path}:{line}"
            if len(fields) <= max(idx):
                raise LoaderError(f"{where}: {len(fields)} fields, expected at least {max(idx) + 1}")
            vid, t0, t1, verb, noun = (fields[k].strip() for k in idx)
            if not vid or "/" in vid or vid in (".", ".."):
                raise LoaderError(f"{where}: bad video_id {vid!r}")
            try:
                start_s = parse_timestamp(t0)
                end_s = parse_timestamp(t1)
            except ValueError:
                raise LoaderError(f"{where}: bad timestamp(s) {t0!r}, {t1!r} "
                                  f"(expected HH:MM:SS.ff)") from None
            if end_s < start_s:
                raise LoaderError(f"{where}: stop_timestamp {t1} is before start_timestamp {t0}")
            try:
                verb_i, noun_i = int(verb), int(noun)
            except ValueError:
                raise LoaderError(f"{where}: bad verb_class/noun_class {verb!r}, {noun!r}") from None
            rows.append((vid, start_s, end_s, verb_i, noun_i, line))
    if not rows:
        raise LoaderError(f"{path}: no annotation rows")
    return rows


# ----------------------------------------------------------------------------
# AVION's frame sampling
# ----------------------------------------------------------------------------

def get_frame_ids(start_frame, end_frame, num_segments, jitter=True):
    """AVION's get_frame_ids (avion/data/clip_dataset.py), uses np.random."""
    seg_size = float(end_frame - start_frame - 1) / num_segments
    seq = []
    for i in range(num_segments):
        start = int(np.round(seg_size * i) + start_frame)
        end = int(np.round(seg_size * (i + 1)) + start_frame)
        end = min(end, end_frame)
        if jitter:
            frame_id = np.random.randint(low=start, high=(end + 1))
        else:
            frame_id = (start + end) // 2
        seq.append(frame_id)
    return seq


# ----------------------------------------------------------------------------
# chunk readers: open(path) -> (n_frames, read(rel_ids) -> uint8 (t, H, W, 3) tensor)
# ----------------------------------------------------------------------------

def _open_decord(path):
    import decord
    vr = decord.VideoReader(path, num_threads=1, ctx=decord.cpu(0))
    n = len(vr)

    def read(rel_ids):
        return torch.from_numpy(vr.get_batch(rel_ids).asnumpy())

    return n, read


def _open_torchcodec(path):
    from torchcodec.decoders import VideoDecoder
    dec = VideoDecoder(path, seek_mode="exact", num_ffmpeg_threads=1, dimension_order="NHWC")
    n = dec.metadata.num_frames
    if n is None:
        n = len(dec)

    def read(rel_ids):
        return dec.get_frames_at(indices=rel_ids).data

    return n, read


OPENERS = {"decord": _open_decord, "torchcodec": _open_torchcodec}


def versions(impl):
    import torchvision
    v = {"python": sys.version.split()[0], "torch": torch.__version__,
         "torchvision": torchvision.__version__, "numpy": np.__version__}
    if impl == "decord":
        import decord
        v["decord"] = decord.__version__
    else:
        import torchcodec
        v["torchcodec"] = torchcodec.__version__
        try:
            from torchcodec._core import get_ffmpeg_library_versions
            v["torchcodec_ffmpeg"] = str(get_ffmpeg_library_versions().get("ffmpeg_version"))
        except Exception:
            pass
    return v


# ----------------------------------------------------------------------------
# dataset
# ----------------------------------------------------------------------------

class AvionEpicDataset(torch.utils.data.Dataset):
    """AVION's VideoClassyDataset for EPIC-Kitchens-100 fine-tuning (chunked videos),
    uint8 output.  item -> (uint8 (T, size, size, 3), verb_class, noun_class)."""

    def __init__(self, impl, root, rows, frames, size, chunk_seconds=15, fps=30, ext="mp4",
                 scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), crop=True, meta=False,
                 ann_path="annotations"):
        if impl not in OPENERS:
            raise LoaderError(f"unknown impl {impl!r}")
        if not os.path.isdir(root):
            raise LoaderError(f"video root not found: {root}")
        self.impl = impl
        self.root = root
        self.rows = rows
        self.frames = frames
        self.size = [size, size]
        self.chunk_seconds = chunk_seconds
        self.fps = fps
        self.ext = ext
        self.chunk_frames = int(round(chunk_seconds * fps))
        if self.chunk_frames <= 0:
            raise LoaderError("--chunk-seconds * --fps must be at least one frame")
        self.scale = list(scale)
        self.ratio = list(ratio)
        self.crop = crop
        self.meta = meta
        self.ann_path = ann_path
        # Video lengths (frames): list the chunks once per video and probe the last one
        # with the library itself (AVION opens the end chunk to clamp end_second).
        self.n_frames = {}
        for vid, *_rest in rows:
            if vid not in self.n_frames:
                self.n_frames[vid] = self._probe_video(vid)
        # Reject rows AVION's get_frame_ids cannot sample (it raises for end == start).
        for i in range(len(rows)):
            self.frame_range(i)

    def _chunk_name(self, k):
        start = k * self.chunk_seconds
        if float(start).is_integer():
            start = int(start)
        return f"{start}.{self.ext}"

    def chunk_path(self, vid, k):
        return os.path.join(self.root, f"{vid}.{self.ext}", self._chunk_name(k))

    def _probe_video(self, vid):
        d = os.path.join(self.root, f"{vid}.{self.ext}")
        if not os.path.isdir(d):
            raise LoaderError(f"video directory not found: {d}")
        # The last chunk is the one with the largest start; every chunk before it must exist.
        k = 0
        suffix = "." + self.ext
        for name in os.listdir(d):
            if name.endswith(suffix):
                try:
                    start = float(name[:-len(suffix)])
                except ValueError:
                    continue
                if math.isfinite(start) and start >= 0:
                    k = max(k, int(round(start / self.chunk_seconds)) + 1)
        if k == 0:
            raise LoaderError(f"no chunks in {d} (expected {self.chunk_path(vid, 0)})")
        for j in range(k):
            if not os.path.isfile(self.chunk_path(vid, j)):
                raise LoaderError(f"chunk not found: {self.chunk_path(vid, j)} "
                                  f"(the last chunk of {vid} starts at {self._chunk_name(k - 1)})")
        last = self.chunk_path(vid, k - 1)
        try:
            n, _ = OPENERS[self.impl](last)
        except Exception as e:
            raise LoaderError(f"{last}: {self.impl} cannot open it: {type(e).__name__}: {e}") from None
        if not n:
            raise LoaderError(f"{last}: {self.impl} counts no frames")
        return (k - 1) * self.chunk_frames + n

    def __len__(self):
        return len(self.rows)

    def frame_range(self, i):
        """(start_frame, end_frame) of item i, AVION's rounding, end clamped to the video."""
        vid, start_s, end_s, _verb, _noun, line = self.rows[i]
        start_frame = int(round(self.fps * start_s))
        end_frame = min(int(math.ceil(self.fps * end_s)), self.n_frames[vid] - 1)
        where = f"{self.ann_path}:{line}"
        if start_frame >= self.n_frames[vid]:
            raise LoaderError(f"{where}: {vid} starts at frame {start_frame}, past the "
                              f"video's last frame {self.n_frames[vid] - 1}")
        if end_frame <= start_frame:
            raise LoaderError(f"{where}: empty action (start frame {start_frame}, end frame "
                              f"{end_frame}); AVION's get_frame_ids cannot sample it")
        return start_frame, end_frame

    def sample_frame_ids(self, i):
        return get_frame_ids(*self.frame_range(i), num_segments=self.frames, jitter=True)

    def read_frames(self, vid, frame_ids):
        """AVION's chunked reading: one decoder per chunk touched, all of its frames in one
        call; relative ids past a chunk's end clamp to its last frame.  uint8 (T, H, W, 3)."""
        parts = []
        k0 = 0
        while k0 < len(frame_ids):
            chunk = frame_ids[k0] // self.chunk_frames
            k1 = k0
            while k1 < len(frame_ids) and frame_ids[k1] // self.chunk_frames == chunk:
                k1 += 1
            path = self.chunk_path(vid, chunk)
            if not os.path.isfile(path):
                raise LoaderError(f"chunk not found: {path}")
            try:
                n, read = OPENERS[self.impl](path)
                rel = [min(f - chunk * self.chunk_frames, n - 1) for f in frame_ids[k0:k1]]
                parts.append(read(rel))
            except LoaderError:
                raise
            except Exception as e:
                raise LoaderError(f"{path}: {self.impl}: {type(e).__name__}: {e}") from None
            k0 = k1
        return parts[0] if len(parts) == 1 else torch.cat(parts, 0)

    def __getitem__(self, i):
        from torchvision.transforms import v2
        from torchvision.transforms.v2 import functional as F

        vid, _s, _e, verb, noun, line = self.rows[i]
        frame_ids = self.sample_frame_ids(i)
        # AVION's frame ids are sorted, so grouping consecutive ids by chunk is grouping by chunk.
        x = self.read_frames(vid, frame_ids)                     # (T, H, W, 3) uint8
        params = None
        flip = False
        if self.crop:
            x = x.permute(0, 3, 1, 2)                             # (T, 3, H, W) view
            params = v2.RandomResizedCrop.get_params(x, self.scale, self.ratio)
            x = F.resized_crop(x, *params, size=self.size,
                               interpolation=v2.InterpolationMode.BILINEAR, antialias=True)
            flip = bool(torch.rand(1) < 0.5)                      # RandomHorizontalFlip(0.5)
            if flip:
                x = F.horizontal_flip(x)
            x = x.permute(0, 2, 3, 1)                             # (T, size, size, 3)
        x = x.contiguous()
        if x.dtype != torch.uint8 or x.shape[0] != self.frames:
            raise LoaderError(f"item {i}: unexpected clip {x.dtype} {tuple(x.shape)}")
        if not self.meta:
            return x, verb, noun
        info = torch.utils.data.get_worker_info()
        m = {"index": i, "csv_line": line, "video_id": vid,
             "worker": info.id if info is not None else None, "pid": os.getpid(),
             "frame_ids": [int(f) for f in frame_ids],
             "crop": [int(p) for p in params] if params is not None else None, "flip": flip,
             "verb_class": verb, "noun_class": noun}
        return x, verb, noun, json.dumps(m)


def worker_init_fn(worker_id):
    """Per-worker RNG state: the DataLoader gives each worker torch seed base_seed + id;
    derive numpy's and random's from it (older torch did not seed numpy in workers, so
    every worker would draw the same frame ids)."""
    torch.set_num_threads(1)
    s = torch.initial_seed()
    np.random.seed(s % (2 ** 32))
    random.seed(s)


# ----------------------------------------------------------------------------
# process accounting (main process + workers, from /proc)
# ----------------------------------------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _status_kb(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _cpu_s(pid):
    """utime + stime of a whole process (all threads), seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        fields = s[s.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK   # fields 14, 15 of stat
    except (OSError, ValueError, IndexError):
        return 0.0


def _self_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def worker_pids(it):
    """PIDs of a multi-process DataLoader iterator's workers (private attribute; falls back
    to this process's child processes)."""
    ws = getattr(it, "_workers", None)
    if ws:
        return [w.pid for w in ws if w.pid]
    me = os.getpid()
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    s = f.read()
                if int(s[s.rindex(")") + 2:].split()[1]) == me:
                    pids.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return pids


def rss_mb(pids):
    return (_status_kb("self", "VmRSS") + sum(_status_kb(p, "VmRSS") for p in pids)) / 1024.0


def pss_mb(pids):
    """Proportional set size (shared pages split between the processes), main + workers;
    None where /proc/<pid>/smaps_rollup is unavailable."""
    total = 0
    for pid in ["self"] + list(pids):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                kb = [int(line.split()[1]) for line in f if line.startswith("Pss:")]
        except (OSError, ValueError, IndexError):
            return None
        if not kb:
            return None
        total += kb[0]
    return total / 1024.0


# ----------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", required=True, choices=IMPLS)
    p.add_argument("--root", required=True, help="chunk root: ROOT/<video_id>.<ext>/<start_s>.<ext>")
    p.add_argument("--ann", required=True, help="EPIC-Kitchens-100 annotation CSV")
    p.add_argument("--frames", type=int, required=True, help="frames per clip (T)")
    p.add_argument("--size", type=int, default=224, help="output side (default 224)")
    p.add_argument("--workers", type=int, required=True, help="DataLoader workers (0 = main process)")
    p.add_argument("--batch", type=int, required=True, help="clips per batch")
    p.add_argument("--clips", type=int, required=True,
                   help="clips to deliver (rounded up to whole batches)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk-seconds", type=float, default=15)
    p.add_argument("--fps", type=float, default=30)
    p.add_argument("--ext", default="mp4")
    p.add_argument("--scale-min", type=float, default=0.08)
    p.add_argument("--scale-max", type=float, default=1.0)
    p.add_argument("--check-out", metavar="FILE.npy",
                   help="save the first batch's clips, uint8 (B, T, size, size, 3)")
    p.add_argument("--no-crop", action="store_true",
                   help="debug: skip crop and flip; clips keep the decoded frame size")
    p.add_argument("--meta-out", metavar="FILE.jsonl",
                   help="debug: one line per delivered clip (index, worker, frame ids, crop, flip, labels)")
    a = p.parse_args(argv)
    if a.frames <= 0 or a.size <= 0 or a.batch <= 0 or a.clips <= 0:
        p.error("--frames, --size, --batch and --clips must be positive")
    if a.workers < 0:
        p.error("--workers must be >= 0")
    if not (a.chunk_seconds > 0 and a.fps > 0):
        p.error("--chunk-seconds and --fps must be positive")
    if not (0 < a.scale_min <= a.scale_max <= 1.0):
        p.error("need 0 < --scale-min <= --scale-max <= 1")
    if not a.ext or "/" in a.ext:
        p.error("bad --ext")
    return a


def run(a):
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    random.seed(a.seed)
    rss_after_import_mb = _status_kb("self", "VmRSS") / 1024.0

    rows = load_annotations(a.ann)
    t_init = time.perf_counter()
    ds = AvionEpicDataset(a.impl, a.root, rows, a.frames, a.size, chunk_seconds=a.chunk_seconds,
                          fps=a.fps, ext=a.ext, scale=(a.scale_min, a.scale_max),
                          crop=not a.no_crop, meta=bool(a.meta_out), ann_path=a.ann)
    seconds_init = time.perf_counter() - t_init
    if len(ds) < a.batch:
        raise LoaderError(f"{a.ann}: {len(ds)} clips, fewer than one batch of {a.batch} "
                          f"(drop_last=True would deliver nothing)")
    target_batches = -(-a.clips // a.batch)

    n = a.workers
    loader = torch.utils.data.DataLoader(
        ds, batch_size=a.batch, shuffle=True, num_workers=n, drop_last=True,
        persistent_workers=(n > 0), prefetch_factor=(2 if n > 0 else None), pin_memory=False,
        worker_init_fn=(worker_init_fn if n > 0 else None),
        generator=torch.Generator().manual_seed(a.seed))
    mp_method = None
    if n > 0:
        import multiprocessing
        mp_method = (loader.multiprocessing_context or multiprocessing).get_start_method()

    meta_f = open(a.meta_out, "w", encoding="utf-8") if a.meta_out else None
    try:
        t0 = time.perf_counter()
        cpu0 = _self_cpu_s()
        it = None
        pids = []
        delivered = batches = epochs = 0
        t_first = t_last = None
        rss_10 = None
        while batches < target_batches:
            it = iter(loader)      # persistent workers: the same iterator, reset per epoch
            if n > 0 and not pids:
                pids = worker_pids(it)
            epochs += 1
            got_any = False
            for batch in it:
                got_any = True
                clips, verbs, nouns = batch[0], batch[1], batch[2]
                now = time.perf_counter()
                if t_first is None:
                    t_first = now
                    if a.check_out:
                        np.save(a.check_out, clips.numpy())
                t_last = now
                delivered += clips.shape[0]
                batches += 1
                if meta_f is not None:   # debug: what each item drew + the labels delivered
                    for j, s in enumerate(batch[3]):
                        m = json.loads(s)
                        m.update(batch=batches - 1, slot=j, batch_verb=int(verbs[j]),
                                 batch_noun=int(nouns[j]))
                        meta_f.write(json.dumps(m) + "\n")
                if rss_10 is None and delivered >= a.clips / 10:
                    rss_10 = rss_mb(pids)
                del batch, clips, verbs, nouns
                if batches >= target_batches:
                    break
            if not got_any:
                raise LoaderError("the DataLoader delivered no batch in an epoch")
        t_end = time.perf_counter()
        # Read the workers before they are shut down.
        rss_end = rss_mb(pids)
        pss_end = pss_mb(pids)
        cpu_workers = sum(_cpu_s(p) for p in pids)
        hwm_kb = _status_kb("self", "VmHWM") + sum(_status_kb(p, "VmHWM") for p in pids)
        cpu_main = _self_cpu_s() - cpu0
        alive = [p for p in pids if os.path.exists(f"/proc/{p}/status")]
        if len(alive) != len(pids):
            raise LoaderError(f"only {len(alive)} of {len(pids)} workers still running at the end")
    finally:
        if meta_f is not None:
            meta_f.close()
    del it, loader  # shuts the persistent workers down

    seconds_total = t_end - t0
    seconds = t_last - t_first
    after_first = delivered - a.batch
    return {
        "loader": f"pytorch-{a.impl}",
        "versions": versions(a.impl),
        "workload_frames": a.frames,
        "workers": n,
        "batch": a.batch,
        "clips": delivered,
        "seconds": round(seconds, 6),
        "seconds_total": round(seconds_total, 6),
        "clips_per_s": round(after_first / seconds, 3) if seconds > 0 else None,
        "cpu_percent": round(100.0 * (cpu_main + cpu_workers) / seconds_total, 1),
        "peak_rss_mb": round(hwm_kb / 1024.0, 1),
        "rss_mb_at_10pct": round(rss_10 if rss_10 is not None else rss_end, 1),
        "rss_mb_at_end": round(rss_end, 1),
        "pss_mb_at_end": round(pss_end, 1) if pss_end is not None else None,
        "cpu_seconds_main": round(cpu_main, 3),
        "cpu_seconds_workers": round(cpu_workers, 3),
        "first_batch_s": round(t_first - t0, 6),
        "rss_after_import_mb": round(rss_after_import_mb, 1),
        "seconds_init": round(seconds_init, 6),
        "batches": batches,
        "epochs": epochs,
        "dataset_clips": len(ds),
        "size": a.size,
        "scale": [a.scale_min, a.scale_max],
        "crop": not a.no_crop,
        "seed": a.seed,
        "mp_start_method": mp_method,
        "torch_threads": torch.get_num_threads(),
    }


def _worker_error_message(e):
    """DataLoader re-raises a worker's exception as 'Caught X in DataLoader worker process
    k.\\nOriginal Traceback ...\\nX: message'; keep the worker and the message."""
    s = str(e)
    if "in DataLoader worker process" not in s:
        return s
    head = s.splitlines()[0].rstrip(".")
    tail = s.rstrip().splitlines()[-1]
    prefix = f"{type(e).__name__}: "
    if tail.startswith(prefix):
        tail = tail[len(prefix):]
    return f"{tail} ({head[len('Caught '):] if head.startswith('Caught ') else head})"


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        result = run(a)
    except LoaderError as e:
        print(f"{PROG}: error: {_worker_error_message(e)}", file=sys.stderr)
        return 1
    except Exception as e:  # library errors (corrupt file, decoder failure, ...)
        print(f"{PROG}: error ({a.impl}): {type(e).__name__}: {_worker_error_message(e)}",
              file=sys.stderr)
        return 1
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
