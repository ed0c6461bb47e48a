#!/usr/bin/env python3
"""tests/ref/randaug_ref.py - timm's RandAugment ops (timm/data/auto_augment.py, the increasing
set of rand_augment_transform("rand-m7-n4-mstd0.5-inc1"), as VideoMAE's rand_augment.py copies
it), written out over Pillow for Debian's python3-pil, where timm is not installed: each op's
level-to-argument rule and its Pillow call, with VideoMAE's hparams (fill (128, 128, 128):
timm's _FILL, as VideoMAE passes no img_mean; the resampling filter named per job).

    python3 tests/ref/randaug_ref.py FRAMES W H N JOBS OUT

FRAMES holds N RGB frames of W x H (uint8, back to back). Each line of JOBS is a resampling
filter (bicubic or bilinear) and one or more ops, each NAME:MAGNITUDE:NEGATE, applied in order
to every frame, as timm's AugmentOp applies an op with its drawn magnitude and sign. OUT gets
each job's N frames in turn; stdout one line per job: the ops' arguments (repr)."""
import sys

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

MAX_LEVEL = 10.0
FILL = (128, 128, 128)  # timm's _FILL; VideoMAE's hparams carry no img_mean
RESAMPLE = {"bicubic": Image.BICUBIC, "bilinear": Image.BILINEAR}


def signed(v, negate):
    """timm's _randomly_negate with its coin given."""
    return -v if negate else v


def level_arg(name, level, negate):
    """timm's LEVEL_TO_ARG for the increasing set."""
    if name == "Rotate":
        return signed((level / MAX_LEVEL) * 30.0, negate)
    if name == "PosterizeIncreasing":
        return 4 - int((level / MAX_LEVEL) * 4)
    if name == "SolarizeIncreasing":
        return 256 - int((level / MAX_LEVEL) * 256)
    if name == "SolarizeAdd":
        return int((level / MAX_LEVEL) * 110)
    if name in ("ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing",
                "SharpnessIncreasing"):
        return 1.0 + signed((level / MAX_LEVEL) * 0.9, negate)
    if name in ("ShearX", "ShearY"):
        return signed((level / MAX_LEVEL) * 0.3, negate)
    if name in ("TranslateXRel", "TranslateYRel"):
        return signed((level / MAX_LEVEL) * 0.45, negate)
    if name in ("AutoContrast", "Equalize", "Invert"):
        return None
    raise ValueError(name)


def affine(img, matrix, resample):
    return img.transform(img.size, Image.AFFINE, matrix, resample=resample, fillcolor=FILL)


def apply_op(img, name, arg, resample):
    """timm's op functions (auto_contrast, ..., translate_y_rel) on one PIL image."""
    if name == "AutoContrast":
        return ImageOps.autocontrast(img)
    if name == "Equalize":
        return ImageOps.equalize(img)
    if name == "Invert":
        return ImageOps.invert(img)
    if name == "Rotate":
        return img.rotate(arg, resample=resample, fillcolor=FILL)
    if name == "PosterizeIncreasing":
        return img if arg >= 8 else ImageOps.posterize(img, arg)
    if name == "SolarizeIncreasing":
        return ImageOps.solarize(img, arg)
    if name == "SolarizeAdd":
        lut = [min(255, i + arg) if i < 128 else i for i in range(256)]
        return img.point(lut * 3)
    if name == "ColorIncreasing":
        return ImageEnhance.Color(img).enhance(arg)
    if name == "ContrastIncreasing":
        return ImageEnhance.Contrast(img).enhance(arg)
    if name == "BrightnessIncreasing":
        return ImageEnhance.Brightness(img).enhance(arg)
    if name == "SharpnessIncreasing":
        return ImageEnhance.Sharpness(img).enhance(arg)
    if name == "ShearX":
        return affine(img, (1, arg, 0, 0, 1, 0), resample)
    if name == "ShearY":
        return affine(img, (1, 0, 0, arg, 1, 0), resample)
    if name == "TranslateXRel":
        return affine(img, (1, 0, arg * img.size[0], 0, 1, 0), resample)
    if name == "TranslateYRel":
        return affine(img, (1, 0, 0, 0, 1, arg * img.size[1]), resample)
    raise ValueError(name)


def main():
    frames_path, w, h, n, jobs_path, out_path = sys.argv[1:7]
    w, h, n = int(w), int(h), int(n)
    frames = np.fromfile(frames_path, dtype=np.uint8).reshape(n, h, w, 3)
    with open(jobs_path) as f, open(out_path, "wb") as out:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            resample = RESAMPLE[parts[0]]
            ops = []
            for p in parts[1:]:
                name, level, negate = p.split(":")
                ops.append((name, level_arg(name, float(level), negate == "1")))
            for k in range(n):
                img = Image.fromarray(frames[k], "RGB")
                for name, arg in ops:
                    img = apply_op(img, name, arg, resample)
                out.write(np.asarray(img, dtype=np.uint8).tobytes())
            print(" ".join(repr(a) for _, a in ops))


if __name__ == "__main__":
    main()
