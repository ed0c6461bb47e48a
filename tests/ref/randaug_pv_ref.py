#!/usr/bin/env python3
"""tests/ref/randaug_pv_ref.py - pytorchvideo's RandAugment (pytorchvideo/transforms/
rand_augment.py and augmentations.py of release 0.1.5, the one AVION's requirements.txt pins),
written out from that source for Debian's python3-torch and python3-torchvision (0.14.1, the
torchvision AVION installs), where pytorchvideo is not packaged: its level functions with the
sign's coin given, and its op functions (torchvision.transforms.functional, and
functional_tensor.affine for the shears and translations) on the clip as AVION's
VideoClsDataset hands it to RandAugment in mode 'train': the frames as float32 / 255
(_load_frames(norm=True)), made (C, T, H, W) and contiguous by the crop, then viewed as
(T, C, H, W). Fill (0.5, 0.5, 0.5): TRANSFORM_DEFAULT_HPARAS, as AVION passes no
transform_hparas. One thread, as in a DataLoader worker.

    python3 tests/ref/randaug_pv_ref.py FRAMES W H N JOBS OUT

FRAMES holds N RGB frames of W x H (uint8, back to back), one clip. Each line of JOBS is one or
more ops, NAME:MAGNITUDE:NEGATE, applied in order to the clip, as AugmentTransform applies an
op with its drawn magnitude and sign. OUT gets each job's clip as float32 (N, H, W, 3); stdout
one line per job: the ops' arguments (repr; None for the ops without one)."""
import sys

import numpy as np
import torch
import torchvision.transforms.functional as F
import torchvision.transforms.functional_tensor as F_t
from torchvision.transforms.functional import InterpolationMode

MAX_LEVEL = 10  # _AUGMENTATION_MAX_LEVEL
FILL = (0.5, 0.5, 0.5)  # TRANSFORM_DEFAULT_HPARAS["fill"]

# _TRANSFORM_RANDAUG_MAX_PARAMS, each with its _LEVEL_TO_ARG function's kind
LEVELS = {
    "AdjustBrightness": ("increasing_negate", (1, 0.9)),
    "AdjustContrast": ("increasing_negate", (1, 0.9)),
    "AdjustSaturation": ("increasing_negate", (1, 0.9)),
    "AdjustSharpness": ("increasing_negate", (1, 0.9)),
    "AutoContrast": (None, None),
    "Equalize": (None, None),
    "Invert": (None, None),
    "Rotate": ("increasing_negate", (0, 30)),
    "Posterize": ("decreasing_int", (4, 4)),
    "Solarize": ("decreasing", (1, 1)),
    "ShearX": ("increasing_negate", (0, 0.3)),
    "ShearY": ("increasing_negate", (0, 0.3)),
    "TranslateX": ("increasing_negate", (0, 0.45)),
    "TranslateY": ("increasing_negate", (0, 0.45)),
}


def level_args(name, level, negate):
    """The level function's tuple; _randomly_negate's coin is negate."""
    kind, params = LEVELS[name]
    if kind is None:
        return ()
    magnitude = (level / MAX_LEVEL) * params[1]
    if kind == "increasing_negate":
        return (params[0] + (-magnitude if negate else magnitude),)
    if kind == "decreasing_int":
        return (params[0] - int(magnitude),)
    return (params[0] - magnitude,)


def through_uint8(video, fn):
    """_equalize's and _posterize's way with a float video: to uint8, the op, / 255."""
    if video.dtype != torch.uint8:
        kind = video.dtype
        return (fn((video * 255).to(torch.uint8)) / 255).to(kind)
    return fn(video)


def run_op(video, name, args):
    """augmentations.py's transform function of name on video (T, C, H, W)."""
    if name == "AdjustBrightness":
        return F.adjust_brightness(video, *args)
    if name == "AdjustContrast":
        return F.adjust_contrast(video, *args)
    if name == "AdjustSaturation":
        return F.adjust_saturation(video, *args)
    if name == "AdjustSharpness":
        return F.adjust_sharpness(video, *args)
    if name == "AutoContrast":
        return F.autocontrast(video)
    if name == "Equalize":
        return through_uint8(video, F.equalize)
    if name == "Invert":
        return F.invert(video)
    if name == "Rotate":
        return F.rotate(video, args[0], fill=FILL, interpolation=InterpolationMode.BILINEAR)
    if name == "Posterize":
        if args[0] >= 8:
            return video
        return through_uint8(video, lambda v: F.posterize(v, args[0]))
    if name == "Solarize":
        if video.dtype == torch.uint8:
            return F.solarize(video, int(args[0] * 255.0))
        return F.solarize(video, args[0])
    factor = args[0]
    h, w = video.size(-2), video.size(-1)
    matrix = {
        "ShearX": [1, factor, h * factor / 2, 0, 1, 0],
        "ShearY": [1, 0, 0, factor, 1, w * factor / 2],
        "TranslateX": [1, 0, factor * w, 0, 1, 0],
        "TranslateY": [1, 0, 0, 0, 1, factor * h],
    }[name]
    return F_t.affine(video, matrix, fill=FILL, interpolation="bilinear")


def main():
    frames_path, w, h, n, jobs_path, out_path = sys.argv[1:7]
    w, h, n = int(w), int(h), int(n)
    torch.set_num_threads(1)
    frames = np.fromfile(frames_path, dtype=np.uint8).reshape(n, h, w, 3)
    buffer = frames.astype(np.float32)
    buffer /= 255.0
    # Permute([3, 0, 1, 2]); the crop's resize writes a new tensor; Permute([1, 0, 2, 3])
    clip = torch.from_numpy(buffer).permute(3, 0, 1, 2).contiguous().permute(1, 0, 2, 3)
    with open(jobs_path) as f, open(out_path, "wb") as out:
        for line in f:
            ops = []
            for p in line.split():
                name, level, negate = p.split(":")
                ops.append((name, level_args(name, float(level), negate == "1")))
            video = clip
            for name, args in ops:
                video = run_op(video, name, args)
            out.write(video.permute(0, 2, 3, 1).contiguous().numpy().tobytes())
            print(" ".join(repr(a[0]) if a else "None" for _, a in ops))


if __name__ == "__main__":
    main()
