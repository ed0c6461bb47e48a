#!/usr/bin/env python3
"""bench/randaug_peer.py - VideoMAE's RandAugment in PyTorch's DataLoader, the peer of
bench/bench_randaug.c: WORKERS worker processes, batches of BATCH clips, each clip a decoded
one (K clips of T x H x W x 3 in CLIPS.rgb, taken in turn) put through VideoMAE's video
RandAugment (rand_augment.py: frames to PIL images, N ops chosen with replacement, each with
probability 0.5 at a gauss(M, 0.5) magnitude clipped to [0, 10] and a random sign, one draw
for the clip, every frame alike; bicubic, grey fill) and stacked back into a uint8 tensor.
The ops are timm's own (timm.data.auto_augment) when timm imports, else the written-out ones
of tests/ref/randaug_ref.py. Time from the first batch on (worker start-up excluded). Prints
one JSON line.

    python3 bench/randaug_peer.py CLIPS.rgb K T H W WORKERS N_CLIPS [M=7] [N=4] [BATCH=16]"""
import json
import os
import random
import sys
import time

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "ref"))
import randaug_ref  # noqa: E402

OPS = ["AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing",
       "SolarizeIncreasing", "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing",
       "BrightnessIncreasing", "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel",
       "TranslateYRel"]

try:
    from timm.data import auto_augment as timm_aa
    OPS_FROM = "timm " + __import__("timm").__version__
except ImportError:
    timm_aa = None
    OPS_FROM = "tests/ref/randaug_ref.py (timm is not installed)"


def op_args(name, level):
    if timm_aa is not None:
        fn = timm_aa.LEVEL_TO_ARG[name]
        return fn(level, {"translate_const": 100}) if fn else ()
    arg = randaug_ref.level_arg(name, level, random.random() > 0.5)
    return () if arg is None else (arg,)


def apply(img, name, args):
    if timm_aa is not None:
        return timm_aa.NAME_TO_OP[name](img, *args, fillcolor=randaug_ref.FILL,
                                         resample=Image.BICUBIC)
    return randaug_ref.apply_op(img, name, args[0] if args else None, Image.BICUBIC)


class Clips(torch.utils.data.Dataset):
    def __init__(self, path, k, t, h, w, n, magnitude, n_ops):
        self.clips = np.fromfile(path, dtype=np.uint8).reshape(k, t, h, w, 3)
        self.n, self.magnitude, self.n_ops = n, magnitude, n_ops

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        frames = [Image.fromarray(f) for f in self.clips[i % len(self.clips)]]
        for name in np.random.choice(OPS, self.n_ops, replace=True):
            if random.random() > 0.5:
                continue
            level = min(10.0, max(0.0, random.gauss(self.magnitude, 0.5)))
            args = op_args(name, level)
            frames = [apply(f, name, args) for f in frames]
        return torch.from_numpy(np.stack([np.asarray(f) for f in frames]))


def seed_numpy(worker):
    """Each worker its own op choices (the DataLoader seeds random and torch, not numpy)."""
    np.random.seed((torch.initial_seed() + worker) % 2**32)


def main():
    path, k, t, h, w, workers, n = sys.argv[1:8]
    k, t, h, w, workers, n = int(k), int(t), int(h), int(w), int(workers), int(n)
    magnitude = float(sys.argv[8]) if len(sys.argv) > 8 else 7.0
    n_ops = int(sys.argv[9]) if len(sys.argv) > 9 else 4
    batch = int(sys.argv[10]) if len(sys.argv) > 10 else 16
    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(Clips(path, k, t, h, w, n + batch, magnitude, n_ops),
                                         batch_size=batch, num_workers=workers,
                                         prefetch_factor=2, persistent_workers=True,
                                         worker_init_fn=seed_numpy)
    it = iter(loader)
    next(it)
    t0, clips = time.perf_counter(), 0
    for b in it:
        clips += b.shape[0]
    secs = time.perf_counter() - t0
    print(json.dumps({"augment": "pytorch-pil", "ops": OPS_FROM, "workers": workers,
                      "clips": clips, "frames": t, "size": f"{w}x{h}",
                      "seconds": round(secs, 3), "clips_per_s": round(clips / secs, 2)}))


if __name__ == "__main__":
    main()
