#!/usr/bin/env python3
"""bench/mae_peer.py - the PyTorch side of the MAE pretraining-step benchmark: VideoMAE
pretraining (tests/ref/mae_ref.py's model and loss, patch 16, tubelet 2), random weights
(mae_ref's --init-weights values, seed 0), a random normalised video batch, tube masks
(VideoMAE's TubeMaskingGenerator: per clip int(ratio * HW) of the HW spatial positions masked,
the same in every temporal slice) and, with --decoder-mask running-cell, VideoMAE v2's
RunningCellMaskingGenerator decoder mask (ratio 0.5, a random one of its 4 patterns per clip;
on an odd grid, where the 2x2 cell does not tile evenly and patterns drop different numbers of
tokens, one pattern for the whole batch). Times STEPS steps of target + forward + loss +
backward + AdamW (betas 0.9/0.95, wd 0.05, VideoMAE's decay groups, no clipping) after one
warm-up step. With --sdpa (PyTorch 2.x) attention uses F.scaled_dot_product_attention. Prints
one JSON line (impl ends in -thp when THP_MEM_ALLOC_ENABLE=1 has PyTorch ask for transparent
huge pages).
Usage: mae_peer.py DIM DEPTH HEADS FRAMES SIZE BATCH [--steps 3] [--threads 2] [--sdpa]
       [--mask-ratio 0.9] [--decoder-mask none|running-cell] [--dec-dim 384 --dec-depth 4
       --dec-heads 6]"""
import argparse
import importlib.util
import json
import os
import resource
import sys
import time

p = argparse.ArgumentParser()
for k in ("dim", "depth", "heads", "frames", "size", "batch"):
    p.add_argument(k, type=int)
p.add_argument("--steps", type=int, default=3)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--sdpa", action="store_true")
p.add_argument("--mask-ratio", type=float, default=0.9)
p.add_argument("--decoder-mask", default="none", choices=("none", "running-cell"))
p.add_argument("--dec-dim", type=int, default=384)
p.add_argument("--dec-depth", type=int, default=4)
p.add_argument("--dec-heads", type=int, default=6)
p.add_argument("--optim", default="adamw", choices=("adamw", "lion"))
a = p.parse_args()
os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(a.threads)
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "ref"))  # mae_ref imports decay_ref
spec = importlib.util.spec_from_file_location("mae_ref", os.path.join(here, "..", "tests", "ref", "mae_ref.py"))
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)

if a.sdpa:
    def attn_forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv_heads(x)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))
    ref.Attention.forward = attn_forward

cfg = ref.parser().parse_args(
    ["--dim", str(a.dim), "--depth", str(a.depth), "--heads", str(a.heads), "--patch", "16",
     "--tubelet", "2", "--frames", str(a.frames), "--size", "%dx%d" % (a.size, a.size),
     "--dec-dim", str(a.dec_dim), "--dec-depth", str(a.dec_depth), "--dec-heads", str(a.dec_heads),
     "--lr", "1.5e-4", "--wd", "0.05", "--beta1", "0.9", "--beta2", "0.95",
     "--optim", a.optim])
try:
    ref.check_config(cfg)
except ref.BadInput as e:
    sys.exit("mae_peer.py: %s" % e)
hw = (a.size // 16) ** 2
if not 0 < int(a.mask_ratio * hw) < hw:
    sys.exit("mae_peer.py: --mask-ratio %g masks %d of %d positions" % (a.mask_ratio, int(a.mask_ratio * hw), hw))
g = np.random.default_rng(0)
model = ref.PretrainVideoMAE(cfg)
model.load_state_dict({k: torch.tensor(v) for k, v in ref.init_weights(cfg, 0).items()})
opt = ref.make_optimizer(model, cfg)
video = torch.tensor(g.standard_normal((a.batch, 3, a.frames, a.size, a.size)).astype(np.float32))
mask = torch.tensor(np.stack([ref.tube_mask(g, cfg, a.mask_ratio) for _ in range(a.batch)]).astype(bool))
dmask = None
if a.decoder_mask == "running-cell":
    even = (a.size // 16) % 2 == 0
    ptr = g.integers(4, size=a.batch) if even else np.full(a.batch, g.integers(4))
    dmask = torch.tensor(np.stack([ref.running_cell_mask(cfg, int(q)) for q in ptr]).astype(bool))
    if not (mask & ~dmask).any():
        sys.exit("mae_peer.py: no decoded token is masked")
t0 = 0
for s in range(a.steps + 1):
    if s == 1:
        t0 = time.time()
    opt.zero_grad(set_to_none=True)
    target = ref.make_target(video, cfg)
    loss = ref.mae_loss(model(video, mask, dmask), target, mask, dmask)
    loss.backward()
    opt.step()
secs = time.time() - t0
thp = os.environ.get("THP_MEM_ALLOC_ENABLE") == "1"  # PyTorch's opt-in to huge pages
print(json.dumps({"impl": f"pytorch-{torch.__version__}" + ("-sdpa" if a.sdpa else "") +
                  ("-thp" if thp else ""),
                  "task": "mae", "dim": a.dim, "depth": a.depth, "frames": a.frames,
                  "size": a.size, "batch": a.batch, "steps": a.steps,
                  "mask_ratio": a.mask_ratio, "decoder_mask": a.decoder_mask,
                  "dec_dim": a.dec_dim, "dec_depth": a.dec_depth, "optim": a.optim,
                  "seconds": round(secs, 3),
                  "clips_per_s": round(a.batch * a.steps / secs, 3),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "loss": round(loss.item(), 4)}))
