#!/usr/bin/env python3
"""bench/train_peer.py - the PyTorch side of the training-step benchmark: the same video ViT
(tests/ref/vit_ref.py's model, timm/VideoMAE layout), random weights and batch, forward +
backward + gradient clipping + AdamW, timed over STEPS steps after one warm-up step. With
--sdpa (PyTorch 2.x) attention uses F.scaled_dot_product_attention. Prints one JSON line
(impl ends in -thp when THP_MEM_ALLOC_ENABLE=1 has PyTorch ask for transparent huge pages).
Usage: train_peer.py DIM DEPTH HEADS FRAMES SIZE BATCH [--steps 3] [--threads 2] [--sdpa]
                     [--patch 16] [--tubelet 2]"""
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
p.add_argument("--patch", type=int, default=16)
p.add_argument("--tubelet", type=int, default=2)
a = p.parse_args()
os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(a.threads)
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "ref"))  # vit_ref imports mixup_ref
spec = importlib.util.spec_from_file_location("vit_ref", os.path.join(here, "..", "tests", "ref", "vit_ref.py"))
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)

if a.sdpa:
    def attn_forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        x = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        return self.proj(x.transpose(1, 2).reshape(B, N, C))
    ref.Attention.forward = attn_forward

cfg = argparse.Namespace(dim=a.dim, depth=a.depth, heads=a.heads, patch=a.patch, tubelet=a.tubelet,
                         frames=a.frames, height=a.size, width=a.size, classes=400,
                         pool="mean", pos="sincos", qv_bias=False, bf16_attention="eager")
torch.manual_seed(0)
model = ref.VideoViT(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
video = torch.randn(a.batch, 3, a.frames, a.size, a.size)
label = torch.randint(0, 400, (a.batch,))
t0 = 0
for s in range(a.steps + 1):
    if s == 1:
        t0 = time.time()
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(video), label, label_smoothing=0.1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
secs = time.time() - t0
thp = os.environ.get("THP_MEM_ALLOC_ENABLE") == "1"  # PyTorch's opt-in to huge pages
print(json.dumps({"impl": f"pytorch-{torch.__version__}" + ("-sdpa" if a.sdpa else "") +
                  ("-thp" if thp else ""),
                  "dim": a.dim, "depth": a.depth, "frames": a.frames, "size": a.size,
                  "batch": a.batch, "steps": a.steps, "seconds": round(secs, 3),
                  "clips_per_s": round(a.batch * a.steps / secs, 3),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "loss": round(loss.item(), 4)}))
