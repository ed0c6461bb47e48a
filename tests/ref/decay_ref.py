#!/usr/bin/env python3
"""Which parameters AVION's training scripts decay, for the PyTorch twins' models.

The rules, written out as github.com/zhaoyue-zephyrus/AVION's scripts write them:

- main_lavila_pretrain.py, main_lavila_finetune_cls.py, main_lavila_finetune_mir.py and
  main_videomae_pretrain.py: no decay where p.ndim < 2 or the name contains 'bias', 'ln',
  'bn', 'pos_embed' or 'positional_embedding' (avion_rule);
- main_videomae_finetune.py: no decay where p.ndim < 2, 'bias' is in the name or the name is
  in the model's no_weight_decay() = {'pos_embed', 'cls_token'} (videomae_finetune_rule).

Usage: decay_ref.py MODEL [flags of the model's twin]; prints one line per parameter of the
twin, in named_parameters order: "<name> <0|1>" (1: decayed). MODEL:
  vit       vit_ref.py's VideoViT (tubelet's cls task, timm layout), VideoMAE fine-tuning's rule
  vit-clip  AVION's VideoClassifier: clip_ref.py's video tower without its projection and a
            head on ln_post (tubelet's cls task, --cls-backbone clip), the fine-tuning rule of
            main_lavila_finetune_cls.py; tubelet's names, AVION's without "visual." and with
            "fc_cls" called "head"
  mae       mae_ref.py's PretrainVideoMAE, main_videomae_pretrain.py's rule
  clip      clip_ref.py's DualEncoder, main_lavila_pretrain.py's rule"""
import argparse
import sys

import torch.nn as nn


def avion_rule(n, p):
    """AVION's main_lavila_*.py and main_videomae_pretrain.py: True where p is decayed."""
    return not (p.ndim < 2 or 'bias' in n or
                'ln' in n or 'bn' in n or
                'pos_embed' in n or 'positional_embedding' in n)


def videomae_finetune_rule(n, p, skip_list=('pos_embed', 'cls_token')):
    """AVION's main_videomae_finetune.py (VideoMAE's own): True where p is decayed."""
    return not (p.ndim < 2 or 'bias' in n or n in skip_list)


def vit_model(argv):
    import vit_ref
    p = argparse.ArgumentParser(prog="decay_ref.py vit")
    for k, d in [("dim", 64), ("depth", 2), ("heads", 2), ("patch", 8), ("tubelet", 2),
                 ("frames", 4), ("classes", 5)]:
        p.add_argument("--" + k, type=int, default=d)
    p.add_argument("--size", default="32x32")
    p.add_argument("--pool", default="cls")
    p.add_argument("--pos", default="learned")
    p.add_argument("--qv-bias", type=lambda s: s == "true", default=False)
    a = p.parse_args(argv)
    a.width, a.height = (int(v) for v in a.size.split("x"))
    a.bf16_attention = "eager"
    return vit_ref.VideoViT(a), videomae_finetune_rule


def vit_clip_model(argv):
    import clip_ref

    class Classifier(clip_ref.Visual):
        def __init__(self, a, classes):
            super().__init__(a)
            del self.proj
            self.head = nn.Linear(a.dim, classes)

    p = argparse.ArgumentParser(prog="decay_ref.py vit-clip")
    for k, d in [("dim", 64), ("depth", 2), ("heads", 2), ("patch", 8), ("tubelet", 1),
                 ("frames", 4), ("classes", 5)]:
        p.add_argument("--" + k, type=int, default=d)
    p.add_argument("--size", default="32x32")
    a = p.parse_args(argv)
    a.width, a.height = (int(v) for v in a.size.split("x"))
    a.embed = 1
    return Classifier(a, a.classes), avion_rule


def mae_model(argv):
    import mae_ref
    a = mae_ref.parser().parse_args(argv)
    mae_ref.check_config(a)
    return mae_ref.PretrainVideoMAE(a), avion_rule


def clip_model(argv):
    import clip_ref
    a = clip_ref.parser().parse_args(argv)
    clip_ref.finish(a)
    return clip_ref.DualEncoder(a), avion_rule


def main(argv):
    models = {"vit": vit_model, "vit-clip": vit_clip_model, "mae": mae_model, "clip": clip_model}
    if not argv or argv[0] not in models:
        print("usage: decay_ref.py %s [flags]" % "|".join(models), file=sys.stderr)
        return 2
    model, rule = models[argv[0]](argv[1:])
    for n, p in model.named_parameters():
        print(n, int(rule(n, p)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
