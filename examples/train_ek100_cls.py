"""AVION's EPIC-Kitchens-100 classification data path with tubelet's loader in place of its
decord VideoClassyDataset, training a (tiny, CPU-sized) PyTorch model.

AVION (main_finetune.py) decodes 16 frames per action (segment sampling over
start_frame..stop_frame, random-resized-crop at 224 with scale 0.5-1, random flips) in
DataLoader workers, then on the GPU permutes (B, T, H, W, C) uint8 to (B, C, T, H, W) float and
normalises with the "openai" mean and std on the 0-255 scale. Here tubelet.torch.Loader does
the decoding with its own threads, straight into a pinned pool, and the same normalisation
runs on the model's device. Run on the synthetic dataset:

    tubelet synth --out data/synth --videos 4 --seconds 30
    tubelet prep data/synth/videos/*.mp4 --out data/chunks --chunk-seconds 15 --short-side 128
    PYTHONPATH=build/python /usr/bin/python3 examples/train_ek100_cls.py \\
        --data data/chunks --train data/synth/annotations/EPIC_100_train.csv --steps 50

It prints one JSON line per step ({"step", "loss", "clips_per_s"}); --save keeps the weights
for examples/eval_ek100_cls.py, which scores them over views x crops. A real run uses
--frames 16 --size 224 --model-width 768 and AVION's ViT; this one stays tiny so that it runs
on a laptop CPU in seconds.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

import tubelet.torch

MEAN_OPENAI = (108.3272985, 116.7460125, 104.09373615)
STD_OPENAI = (68.5005327, 66.6321579, 70.32316305)


class Normalize(torch.nn.Module):
    """AVION's GPU transform: (B, T, H, W, 3) uint8 -> (B, 3, T, H, W) float, normalised."""

    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, 3, 1, 1, 1))

    def forward(self, video):
        x = video.permute(0, 4, 1, 2, 3).float()
        return (x - self.mean) / self.std


class TinyVideoNet(torch.nn.Module):
    """A tubelet embedding (Conv3d 2x8x8, as a ViT's patch embedding), one MLP, mean pooling
    and a linear head: a stand-in for AVION's ViT, small enough for a CPU."""

    def __init__(self, n_classes, width):
        super().__init__()
        self.embed = torch.nn.Conv3d(3, width, kernel_size=(2, 8, 8), stride=(2, 8, 8))
        self.mlp = torch.nn.Sequential(torch.nn.LayerNorm(width), torch.nn.Linear(width, width),
                                       torch.nn.GELU(), torch.nn.Linear(width, width))
        self.head = torch.nn.Linear(width, n_classes)

    def forward(self, x):
        tokens = self.embed(x).flatten(2).transpose(1, 2)  # (B, N, D)
        tokens = tokens + self.mlp(tokens)
        return self.head(tokens.mean(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", "--root", dest="root", required=True,
                    help="prepared videos (tubelet prep --out), as tubelet train --data")
    ap.add_argument("--train", required=True, help="EPIC_100_train.csv")
    ap.add_argument("--label", choices=["verb", "noun", "action"], default="verb")
    ap.add_argument("--classes", type=int, default=0,
                    help="classes of --label; 0: the synthetic dataset's (8 verbs, 16 nouns)")
    ap.add_argument("--frames", type=int, default=4)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--model-width", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--save", help="write the weights and the model's settings here")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    column = {"verb": 0, "noun": 1, "action": 2}[args.label]
    # AVION's training clip: segment sampling, RRC scale 0.5-1, random flip.
    loader = tubelet.torch.Loader(args.root, args.train, format="epic", frames=args.frames,
                                  size=args.size, sampler="segments", crop="rrc",
                                  scale=(0.5, 1.0), flip="random", batch=args.batch,
                                  workers=args.workers, seed=args.seed, shuffle=True,
                                  drop_last=True, device=device)
    n_classes = args.classes or {"verb": 8, "noun": 16}.get(args.label, 0)
    if not n_classes:
        ap.error("--label action needs --classes (the number of verb:noun pairs)")
    normalize = Normalize(MEAN_OPENAI, STD_OPENAI).to(device)
    model = TinyVideoNet(n_classes, args.model_width).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)

    step, epoch, t0 = 0, 0, time.monotonic()
    with loader:
        while step < args.steps:
            loader.set_epoch(epoch)
            for b in loader:
                x = normalize(b["video"])
                y = b["label"][:, column].long().to(device)
                loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
                print(json.dumps({"step": step, "epoch": epoch, "loss": round(loss.item(), 5),
                                  "clips_per_s": round(step * args.batch /
                                                       (time.monotonic() - t0), 1)}),
                      flush=True)
                if step >= args.steps:
                    break
            epoch += 1
        st = loader.stats()
    if args.save:
        torch.save({"model": model.state_dict(), "classes": n_classes, "label": args.label,
                    "frames": args.frames, "size": args.size, "width": args.model_width},
                   args.save)
    print(json.dumps({"done": step, "clips": st["clips"], "failures": st["failures"]}))


if __name__ == "__main__":
    main()
