#!/usr/bin/env python3
"""bench/clip_peer.py - the PyTorch side of the video-text contrastive training-step benchmark
(bench/bench_clip.c): LaViLa's dual encoder with AVION's towers in OpenAI CLIP's names - the
parameters of tests/ref/clip_ref.py's DualEncoder, name for name - written as PyTorch 2.x runs
it fastest on the CPU: batch-first blocks, one fused q/k/v product, F.scaled_dot_product_attention
(is_causal for the text tower) instead of nn.MultiheadAttention's (B, N) transposes and float
mask, fused AdamW (betas 0.9/0.98, wd 0.01 in AVION's decay groups, lr 3e-5). Random weights
(AVION's initialisation stds), a random uint8 clip batch (B, T, H, W, 3) normalised with AVION's
"openai" mean/std inside the step (as tubelet's backend does), random 77-token captions laid out
as the tokenizer's; each step: both encoders, clip_ref's loss (temperature 0.07), backward,
AdamW. Times STEPS steps after one warm-up step; prints one JSON line (with the seconds
the forward - both towers and the loss -, the backward and the optimizer took per step).
--mha uses clip_ref's own blocks (nn.MultiheadAttention, (N, B, D), float causal mask);
--foreach / --for-loop pick AdamW's other implementations; --compile runs the model through
torch.compile (inductor; its compile time falls in the warm-up step); --check compares this
model's loss and gradients with clip_ref's DualEncoder on the same weights and exits.
Usage: clip_peer.py DIM DEPTH HEADS PATCH FRAMES SIZE BATCH EMBED TEXT_WIDTH TEXT_HEADS
       TEXT_DEPTH [--steps 3] [--threads 2] [--mha] [--foreach|--for-loop] [--compile]
       [--check]"""
import argparse
import importlib.util
import json
import os
import resource
import sys
import time

p = argparse.ArgumentParser()
for k in ("dim", "depth", "heads", "patch", "frames", "size", "batch", "embed", "text_width",
          "text_heads", "text_depth"):
    p.add_argument(k, type=int)
p.add_argument("--steps", type=int, default=3)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--mha", action="store_true")
adam_impl = p.add_mutually_exclusive_group()
adam_impl.add_argument("--foreach", action="store_true")
adam_impl.add_argument("--for-loop", action="store_true")
p.add_argument("--compile", action="store_true")
p.add_argument("--check", action="store_true")
a = p.parse_args()
os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

torch.set_num_threads(a.threads)
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "ref"))  # clip_ref imports decay_ref
spec = importlib.util.spec_from_file_location(
    "clip_ref", os.path.join(here, "..", "tests", "ref", "clip_ref.py"))
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)

VOCAB, CTX, SOT, EOT = 49408, 77, 49406, 49407
MEAN = (108.3272985, 116.7460125, 104.09373615)  # AVION's "openai", 0-255 (tb_mean_openai)
STD = (68.5005327, 66.6321579, 70.32316305)


class Attention(nn.Module):
    """nn.MultiheadAttention's parameters (in_proj_weight/bias, out_proj) on SDPA."""

    def __init__(self, d, heads, causal):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d, d))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * d))
        self.out_proj = nn.Linear(d, d)

    def forward(self, x):  # (B, N, D)
        B, N, D = x.shape
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        q, k, v = qkv.view(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out_proj(o.transpose(1, 2).reshape(B, N, D))


class Block(nn.Module):
    def __init__(self, d, heads, eps, causal):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=eps)
        self.attn = Attention(d, heads, causal)
        self.ln_2 = nn.LayerNorm(d, eps=eps)
        self.mlp = nn.Sequential()
        self.mlp.add_module("c_fc", nn.Linear(d, 4 * d))
        self.mlp.add_module("gelu", nn.GELU())
        self.mlp.add_module("c_proj", nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Blocks(nn.Module):
    def __init__(self, d, layers, heads, eps, causal):
        super().__init__()
        self.resblocks = nn.ModuleList([Block(d, heads, eps, causal) for _ in range(layers)])

    def forward(self, x, mask=None):  # batch first; mask: clip_ref's signature, unused
        for b in self.resblocks:
            x = b(x)
        return x


def make_model(c):
    """clip_ref's DualEncoder (its forwards: the video tokens, the caption's end-token row), on
    these blocks unless --mha; they take batch-first input, as clip_ref's Blocks does, and run
    the text tower's causal mask as is_causal (its float mask argument is not used)."""
    m = ref.DualEncoder(c)
    if not a.mha:
        m.visual.transformer = Blocks(c.dim, c.depth, c.heads, 1e-6, False)
        m.transformer = Blocks(c.text_width, c.text_depth, c.text_heads, 1e-5, True)
    return m


def init(model, c, g):
    """AVION's stds (transformer.py's initialize_parameters): embeddings 0.02 / 0.01, the
    class and positional embeddings D^-0.5 scaled, blocks' attention D^-0.5, output projections
    D^-0.5 (2L)^-0.5, c_fc (2D)^-0.5, both projections D^-0.5; biases zero, norms 1/0, the
    temporal embedding zero."""
    sd = {}
    for n, t in model.state_dict().items():
        d = c.dim if n.startswith("visual.") else c.text_width
        L = c.depth if n.startswith("visual.") else c.text_depth
        std = None
        if n.endswith("in_proj_weight"):
            std = d ** -0.5
        elif n.endswith("out_proj.weight") or n.endswith("c_proj.weight"):
            std = d ** -0.5 * (2 * L) ** -0.5
        elif n.endswith("c_fc.weight"):
            std = (2 * d) ** -0.5
        elif n in ("visual.proj", "text_projection"):
            std = d ** -0.5
        elif n == "token_embedding.weight":
            std = 0.02
        elif n == "positional_embedding":
            std = 0.01
        elif n in ("visual.class_embedding", "visual.positional_embedding", "visual.conv1.weight"):
            std = d ** -0.5
        if std is not None:
            sd[n] = torch.tensor(g.standard_normal(t.shape) * std, dtype=torch.float32)
        elif "ln" in n and n.endswith("weight"):
            sd[n] = torch.ones_like(t)
        else:
            sd[n] = torch.zeros_like(t)
    model.load_state_dict(sd)


def captions(g, B):
    ids = np.zeros((B, CTX), np.int64)
    for b in range(B):
        words = int(g.integers(8, 17))
        ids[b, 0] = SOT
        ids[b, 1:words + 1] = g.integers(1, SOT, words)
        ids[b, words + 1] = EOT
    return torch.tensor(ids)


cfg = ref.finish(ref.parser().parse_args(
    ["--dim", str(a.dim), "--depth", str(a.depth), "--heads", str(a.heads), "--patch",
     str(a.patch), "--frames", str(a.frames), "--size", "%dx%d" % (a.size, a.size), "--embed",
     str(a.embed), "--vocab", str(VOCAB), "--context", str(CTX), "--text-width",
     str(a.text_width), "--text-heads", str(a.text_heads), "--text-depth", str(a.text_depth),
     "--lr", "3e-5", "--wd", "0.01", "--beta1", "0.9", "--beta2", "0.98"]))
g = np.random.default_rng(0)
model = make_model(cfg)
init(model, cfg, g)
clips = torch.tensor(g.integers(0, 256, (a.batch, a.frames, a.size, a.size, 3), np.uint8))
ids = captions(g, a.batch)
mean = torch.tensor(MEAN, dtype=torch.float32)
istd = 1 / torch.tensor(STD, dtype=torch.float32)


def normalise(clips):
    """uint8 (B, T, H, W, 3) -> float (B, 3, T, H, W), (x - mean) / std."""
    return ((clips.float() - mean) * istd).permute(0, 4, 1, 2, 3)


if a.check:
    slow = ref.DualEncoder(cfg)
    slow.load_state_dict(model.state_dict())
    video = normalise(clips)
    worst = 0.0
    for m in (model, slow):
        m.zero_grad()
        ref.clip_loss(*m(video, ids), 0.07).backward()
    lf = ref.clip_loss(*model(video, ids), 0.07).item()
    ls = ref.clip_loss(*slow(video, ids), 0.07).item()
    grads = dict(slow.named_parameters())
    for n, prm in model.named_parameters():
        gs = grads[n].grad
        worst = max(worst, float((prm.grad - gs).abs().max() / gs.abs().max().clamp_min(1e-30)))
    print("check: loss %.6f vs clip_ref %.6f, worst gradient error %.2e (relative to each "
          "tensor's largest)" % (lf, ls, worst))
    sys.exit(0 if abs(lf - ls) < 1e-4 * abs(ls) and worst < 1e-3 else 1)

impl = "fused" if not (a.foreach or a.for_loop) else "foreach" if a.foreach else "for-loop"
groups = [{"params": [q for n, q in model.named_parameters() if ref.avion_rule(n, q)],
           "weight_decay": 0.01},
          {"params": [q for n, q in model.named_parameters() if not ref.avion_rule(n, q)],
           "weight_decay": 0.0}]
kw = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
opt = torch.optim.AdamW(groups, lr=3e-5, betas=(0.9, 0.98), eps=1e-8, **kw)
step_model = torch.compile(model) if a.compile else model
t0, phases = 0, {"forward": 0.0, "backward": 0.0, "optim": 0.0}
for s in range(a.steps + 1):
    if s == 1:
        t0 = time.time()
        phases = dict.fromkeys(phases, 0.0)
    tk = [time.time()]
    opt.zero_grad(set_to_none=True)
    v, t = step_model(normalise(clips), ids)
    loss = ref.clip_loss(v, t, 0.07)
    tk.append(time.time())
    loss.backward()
    tk.append(time.time())
    opt.step()
    tk.append(time.time())
    for k, key in enumerate(phases):
        phases[key] += tk[k + 1] - tk[k]
secs = time.time() - t0
print(json.dumps({"impl": f"pytorch-{torch.__version__}" + ("-mha" if a.mha else "-sdpa") +
                  "-adamw-" + impl + ("-compile" if a.compile else ""),
                  "task": "clip", "dim": a.dim, "depth": a.depth, "heads": a.heads,
                  "patch": a.patch, "frames": a.frames, "size": a.size, "batch": a.batch,
                  "embed": a.embed, "text_width": a.text_width, "text_heads": a.text_heads,
                  "text_depth": a.text_depth, "steps": a.steps, "seconds": round(secs, 3),
                  "clips_per_s": round(a.batch * a.steps / secs, 4),
                  "peak_rss_mb":
                      round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "params": sum(q.numel() for q in model.parameters()),
                  "loss": round(loss.item(), 4),
                  "phase_s": {k: round(x / a.steps, 3) for k, x in phases.items()}}))
