#!/usr/bin/env python3
"""tests/ref/mixup_ref.py - timm's batch mixing, written out from timm's data/mixup.py and
loss/cross_entropy.py (and VideoMAE's mixup.py, whose cutmix box spans a clip's frames) for
Debian's python3-torch, where timm is not installed. vit_ref.py imports it for `tubelet step`
batches that carry a 'mix' tensor; run alone, it prints timm's rand_bbox for given centres:

    python3 tests/ref/mixup_ref.py box H W LAM CY CX [LAM CY CX ...]

prints one line "y0 y1 x0 x1 lam" per (LAM, CY, CX): the box and the corrected lambda."""
import sys

import numpy as np
import torch


def rand_bbox(h, w, lam, cy, cx):
    """timm's rand_bbox with the centre given (margin 0), and correct_lam's lambda."""
    ratio = np.sqrt(1 - lam)
    cut_h, cut_w = int(h * ratio), int(w * ratio)
    yl = int(np.clip(cy - cut_h // 2, 0, h))
    yh = int(np.clip(cy + cut_h // 2, 0, h))
    xl = int(np.clip(cx - cut_w // 2, 0, w))
    xh = int(np.clip(cx + cut_w // 2, 0, w))
    lam = 1. - (yh - yl) * (xh - xl) / float(h * w)
    return (yl, yh, xl, xh), lam


def mix_batch(x, lam, box=None):
    """Mixup._mix_batch on x (B, C, T, H, W) in place, lambda and box given: cutmix replaces
    the box of every frame with the reversed batch's (VideoMAE's x[..., yl:yh, xl:xh]), mixup
    blends with it."""
    if box is not None:
        yl, yh, xl, xh = box
        x[..., yl:yh, xl:xh] = x.flip(0)[..., yl:yh, xl:xh]
    else:
        x_flipped = x.flip(0).mul_(1. - lam)
        x.mul_(lam).add_(x_flipped)
    return x


def one_hot(x, num_classes, on_value=1., off_value=0.):
    x = x.long().view(-1, 1)
    return torch.full((x.size()[0], num_classes), off_value, device=x.device).scatter_(1, x,
                                                                                     on_value)


def mixup_target(target, num_classes, lam=1., smoothing=0.0):
    off_value = smoothing / num_classes
    on_value = 1. - smoothing + off_value
    y1 = one_hot(target, num_classes, on_value=on_value, off_value=off_value)
    y2 = one_hot(target.flip(0), num_classes, on_value=on_value, off_value=off_value)
    return y1 * lam + y2 * (1. - lam)


def soft_target_cross_entropy(x, target):
    """timm's SoftTargetCrossEntropy."""
    loss = torch.sum(-target * torch.nn.functional.log_softmax(x, dim=-1), dim=-1)
    return loss.mean()


def main():
    if len(sys.argv) < 7 or sys.argv[1] != "box" or (len(sys.argv) - 4) % 3:
        print(__doc__, file=sys.stderr)
        return 2
    h, w = int(sys.argv[2]), int(sys.argv[3])
    rest = sys.argv[4:]
    for i in range(0, len(rest), 3):
        box, lam = rand_bbox(h, w, float(rest[i]), int(rest[i + 1]), int(rest[i + 2]))
        print("%d %d %d %d %.9g" % (box + (lam,)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
