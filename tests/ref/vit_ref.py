#!/usr/bin/env python3
"""tests/ref/vit_ref.py - the PyTorch twin of `tubelet step`: builds the same video ViT (timm /
VideoMAE layout and names) from the same safetensors weights, runs the same AdamW steps on the
same batch, and writes loss, first-step logits and gradients, and final weights in the same
file layout. tests/test_vit.c compares the two. Runs on Debian's python3-torch (1.13) or any
PyTorch 2.x; only numpy and torch are needed (safetensors is read and written here).

    python3 tests/ref/vit_ref.py MODEL-FLAGS [--steps N --lr ...] --weights W --batch X --out O
    python3 tests/ref/vit_ref.py MODEL-FLAGS --feature-grad --weights W --batch X --out O

MODEL-FLAGS: --dim --depth --heads --patch --tubelet --frames --size WxH --classes --pool
cls|mean|none --pos learned|sincos. W holds every parameter under its state_dict name, float32,
loaded strictly (a tensor of the model missing from W is an error; extra tensors are ignored).
head.* is a parameter (in both modes) unless --classes 0, which means no head at all and is
allowed only with --feature-grad. N = (frames/tubelet)(H/patch)(W/patch) is the number of patch
tokens, in the (t, h, w) order the Conv3d output flattens to; pos_embed (learned: a parameter,
sincos: VideoMAE's table, not in W) is (1, N+1, dim) for pool cls, (1, N, dim) otherwise.

Step mode (the default): X holds video (B, 3, T, H, W) float32 and label (B) int64, and
optionally drop float32 (depth, 2, B): drop path's factors (0 or 1 / keep probability) of
each block's attention and MLP branch outputs per clip, the same in every step; hmask float32
(B, dim): head dropout's factors on the features; mix float32 (5): lam, y0, y1, x0, x1 (y0 < 0:
mixup, else cutmix's box), timm's mixing of the batch with its reverse and soft targets with
--label-smoothing (mixup_ref.py), the same in every step; O gets logits (B, classes) and
grad.<name> of every parameter from the first step, loss (steps), and every parameter <name>
after the last step of AdamW, or of SGD with momentum --beta1 (--optim sgd); one parameter
group each; --layer-decay scales the lr by layers as VideoMAE's fine-tuning does. --qv-bias: VideoMAE's attention
biases (q_bias, v_bias parameters; no k bias) in place of qkv.bias.

--feature-grad (for C tests that put another loss on the encoder's features, the gradient on
them given): X holds video (B, 3, T, H, W) float32 and dfeat (B, dim) float32 (label may be
absent and is not read). One forward up to the pooled, normalised features feat (the input to
head: norm of the class token for pool cls, fc_norm of the token mean for pool mean), one
backward of L = sum(feat * dfeat), no optimizer step (--steps and the optimizer flags are
ignored); O gets feat (B, dim) and grad.<name> of every parameter except head.weight and
head.bias (head takes no part, and they are not written).

--precision bf16: tubelet's bf16 mode emulated exactly (bf16_ref.py: every product, attention
and GELU on bf16-rounded operands in float64, its output and gradients rounded once; the rest
float32), the same on every machine: the specification tests/test_vit.c checks tubelet's bf16
mode (docs/PRECISION.md) against. --precision autocast: the forward and the loss under
torch.autocast(DEVICE, dtype=torch.bfloat16), the backward outside it, as PyTorch's mixed
precision runs (parameters, gradients and AdamW stay float32; logits and features are written
as float32); how its products round depends on the CPU (oneDNN's round once on CPUs with
AVX-512; the fallback elsewhere rounds partial sums); on a GPU they round once
(bf16_ref.cuda_rounds_once). --bf16-attention eager (the default) runs
attention as written, so autocast rounds the scores, the scaled scores, the probabilities and
the output to bf16; fused computes it in float32 from the bf16 q, k, v and rounds only the
output, as a fused kernel does (FlashAttention; PyTorch 2's F.scaled_dot_product_attention) and
tubelet's.

--device cpu (the default) or cuda: where the model, the batch and the optimizer live (with
cuda, float32 products without TF32: bf16_ref.cuda_rounds_once); the outputs are written from
the CPU, float32, as ever. --precision bf16 runs on the CPU only (its emulation is the same on
every machine).

--pool none (only with --feature-grad): VideoMAE's pretraining encoder. No class token, no
pooling: the final LayerNorm (eps 1e-6, parameters norm.weight, norm.bias) applies to every
token and feat is (B, N, dim); dfeat must be (B, N, dim).

Visible tokens (--feature-grad only): X may hold keep, int64 (B, K) with 1 <= K <= N, each row
strictly ascending token indices in [0, N). The encoder embeds every patch and adds the
positions, then keeps x[b, keep[b]] (VideoMAE's x[~mask].reshape(B, -1, C)) and runs the blocks
and the norm on those K tokens only. pool none: feat and dfeat are (B, K, dim); pool mean:
fc_norm of the mean over the K kept tokens, feat and dfeat (B, dim); pool cls with keep is
rejected. A malformed keep (wrong dtype or shape, out of range, not ascending) or dfeat, or a
flag combination not allowed above, is a one-line message on stderr and exit status 2."""
import argparse
import contextlib
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import bf16_ref
from decay_ref import videomae_finetune_rule
import mixup_ref

DTYPES = {"F32": np.float32, "I64": np.int64}


def st_read(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    data = buf[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=DTYPES[e["dtype"]]).reshape(e["shape"]).copy()
    return out


def st_write(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        dt = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}[arr.dtype]
        raw = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


EMULATE = False  # --precision bf16: the products, attention and GELU through bf16_ref


def linear(x, w, b=None):
    return bf16_ref.linear(x, w, b) if EMULATE else F.linear(x, w, b)


def sincos_table(n, d):
    """VideoMAE's get_sinusoid_encoding_table."""
    pos = np.arange(n)[:, None].astype(np.float64)
    j = np.arange(d)[None, :]
    angle = pos / np.power(10000, 2 * (j // 2) / d)
    table = np.where(j % 2 == 0, np.sin(angle), np.cos(angle))
    return torch.tensor(table, dtype=torch.float32)[None]


class Attention(nn.Module):
    def __init__(self, dim, heads, qv_bias=False, fused=False):
        super().__init__()
        self.heads = heads
        self.fused = fused
        self.qv_bias = qv_bias
        self.qkv = nn.Linear(dim, 3 * dim, bias=not qv_bias)
        if qv_bias:  # VideoMAE's: q and v biases, no k bias
            self.q_bias = nn.Parameter(torch.zeros(dim))
            self.v_bias = nn.Parameter(torch.zeros(dim))
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        hs = C // self.heads
        if self.qv_bias:
            bias = torch.cat([self.q_bias, torch.zeros_like(self.v_bias), self.v_bias])
            qkv = linear(x, self.qkv.weight, bias)
        else:
            qkv = linear(x, self.qkv.weight, self.qkv.bias)
        qkv = qkv.reshape(B, N, 3, self.heads, hs).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if EMULATE:
            x = bf16_ref.attention(q, k, v, hs ** -0.5)
        elif self.fused and q.dtype == torch.bfloat16:
            # float32 inside, bf16 out: the fused kernel's rounding (--bf16-attention fused)
            with torch.autocast(q.device.type, enabled=False):
                q, k, v = q.float(), k.float(), v.float()
                attn = (q @ k.transpose(-2, -1)) * hs ** -0.5
                x = (attn.softmax(dim=-1) @ v).bfloat16()
        else:
            attn = (q @ k.transpose(-2, -1)) * hs ** -0.5
            x = attn.softmax(dim=-1) @ v
        return linear(x.transpose(1, 2).reshape(B, N, C), self.proj.weight, self.proj.bias)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        h = linear(x, self.fc1.weight, self.fc1.bias)
        h = bf16_ref.gelu(h) if EMULATE else self.act(h)
        return linear(h, self.fc2.weight, self.fc2.bias)


class Block(nn.Module):
    def __init__(self, dim, heads, qv_bias=False, fused=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads, qv_bias, fused)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, 4 * dim)

    def forward(self, x, drop=None):
        """drop (2, B): drop path's factors of the attention and MLP branches per clip."""
        a = self.attn(self.norm1(x))
        x = x + (a if drop is None else a * drop[0][:, None, None])
        m = self.mlp(self.norm2(x))
        return x + (m if drop is None else m * drop[1][:, None, None])


class PatchEmbed(nn.Module):
    def __init__(self, dim, tubelet, patch):
        super().__init__()
        k = (tubelet, patch, patch)
        self.proj = nn.Conv3d(3, dim, kernel_size=k, stride=k)


class VideoViT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.pool = a.pool
        self.patch_embed = PatchEmbed(a.dim, a.tubelet, a.patch)
        n = (a.frames // a.tubelet) * (a.height // a.patch) * (a.width // a.patch)
        self.n_tokens = n
        n += a.pool == "cls"
        if a.pool == "cls":
            self.cls_token = nn.Parameter(torch.zeros(1, 1, a.dim))
        if a.pos == "learned":
            self.pos_embed = nn.Parameter(torch.zeros(1, n, a.dim))
        else:
            self.register_buffer("pos_embed", sincos_table(n, a.dim), persistent=False)
        fused = a.bf16_attention == "fused"
        self.blocks = nn.ModuleList([Block(a.dim, a.heads, a.qv_bias, fused)
                                     for _ in range(a.depth)])
        norm = nn.LayerNorm(a.dim, eps=1e-6)
        if a.pool in ("cls", "none"):
            self.norm = norm
        else:
            self.fc_norm = norm
        if a.classes > 0:
            self.head = nn.Linear(a.dim, a.classes)

    def features(self, video, keep=None, drop=None):
        """The pooled, normalised features (the input to head); for pool none the normalised
        tokens (B, N, dim), or (B, K, dim) of the tokens keep (B, K) names."""
        pe = self.patch_embed.proj
        if EMULATE:
            x = bf16_ref.patch_embed(video, pe.weight, pe.bias, *pe.kernel_size[:2])
        else:
            x = pe(video).flatten(2).transpose(1, 2)
        if self.pool == "cls":
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.pos_embed
        if keep is not None:
            # x[b, keep[b]], gathered in x's own memory layout (the (B, dim, N) of the Conv3d
            # output): with every token kept the blocks then run on the very same tensor.
            xt = x.transpose(1, 2)
            x = xt.gather(2, keep[:, None, :].expand(-1, xt.shape[1], -1)).transpose(1, 2)
        for i, blk in enumerate(self.blocks):
            x = blk(x, None if drop is None else drop[i])
        if self.pool == "none":
            return self.norm(x)
        return self.norm(x)[:, 0] if self.pool == "cls" else self.fc_norm(x.mean(1))

    def forward(self, video, drop=None, hmask=None):
        f = self.features(video, drop=drop)
        return linear(f if hmask is None else f * hmask, self.head.weight, self.head.bias)


def autocast(a):
    """The forward's precision context: bf16 autocast on a.device, or none."""
    if a.precision == "autocast":
        return torch.autocast(a.device, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def feature_grad(model, batch, a):
    """--feature-grad: feat and the gradients of L = sum(feat * dfeat), head's excepted."""
    if "dfeat" not in batch:
        print("vit_ref.py: --feature-grad needs a tensor dfeat in %s" % a.batch, file=sys.stderr)
        return 2
    video = torch.tensor(batch["video"], device=a.device)
    dfeat = torch.tensor(batch["dfeat"], device=a.device)
    B, n, keep = video.shape[0], model.n_tokens, None
    if "keep" in batch:
        k = batch["keep"]
        msg = None
        if a.pool == "cls":
            msg = "keep is not supported with --pool cls"
        elif k.dtype != np.int64:
            msg = "keep must be int64"
        elif k.ndim != 2 or k.shape[0] != B or not 1 <= k.shape[1] <= n:
            msg = "keep has shape %s, not (%d, K) with 1 <= K <= %d" % (tuple(k.shape), B, n)
        elif k.min() < 0 or k.max() >= n:
            msg = "keep has an index outside [0, %d)" % n
        elif k.shape[1] > 1 and not (np.diff(k, axis=1) > 0).all():
            msg = "keep has a row that is not strictly ascending"
        if msg:
            print("vit_ref.py: " + msg, file=sys.stderr)
            return 2
        keep = torch.tensor(k, device=a.device)
    want = (B, a.dim) if a.pool != "none" else (B, n if keep is None else keep.shape[1], a.dim)
    if tuple(dfeat.shape) != want:
        print("vit_ref.py: dfeat has shape %s, not %s" % (tuple(dfeat.shape), want),
              file=sys.stderr)
        return 2
    with autocast(a):
        feat = model.features(video, keep)
    (feat.float() * dfeat).sum().backward()
    out = {"feat": feat.detach().float().cpu().numpy()}
    for name, prm in model.named_parameters():
        if not name.startswith("head."):
            out["grad." + name] = prm.grad.detach().cpu().numpy().copy()
    st_write(a.out, out)
    return 0


def main():
    p = argparse.ArgumentParser()
    for k, d in [("dim", 192), ("depth", 12), ("heads", 3), ("patch", 16), ("tubelet", 2),
                 ("frames", 8), ("classes", 10), ("steps", 1)]:
        p.add_argument("--" + k, type=int, default=d)
    p.add_argument("--size", default="112x112")
    p.add_argument("--pool", default="mean")
    p.add_argument("--pos", default="sincos")
    p.add_argument("--weights", required=True)
    p.add_argument("--batch", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--qv-bias", type=lambda s: s == "true", default=False,
                   help="VideoMAE's attention biases: attn.q_bias, attn.v_bias, no qkv bias")
    p.add_argument("--layer-decay", type=float, default=1.0,
                   help="layer-wise lr decay: block i's lr x decay^(depth - i), embeddings' "
                        "x decay^(depth + 1), the rest x 1")
    p.add_argument("--optim", default="adamw", help="adamw, or sgd (momentum --beta1)")
    p.add_argument("--precision", default="fp32",
                   help="fp32, bf16 (tubelet's bf16 mode emulated exactly), or autocast (the "
                        "forward and loss under CPU bf16 autocast)")
    p.add_argument("--bf16-attention", default="eager",
                   help="bf16: eager (autocast's roundings inside attention) or fused (float32 "
                        "inside, the output rounded)")
    p.add_argument("--device", default="cpu",
                   help="cpu or cuda: where the model, batch and optimizer live")
    p.add_argument("--feature-grad", action="store_true",
                   help="one backward of sum(feat * dfeat) from the batch's dfeat; no step")
    for k, d in [("lr", 1e-3), ("wd", 0.05), ("label-smoothing", 0.1), ("beta1", 0.9),
                 ("beta2", 0.999), ("eps", 1e-8)]:
        p.add_argument("--" + k, type=float, default=d)
    a = p.parse_args()
    a.width, a.height = (int(v) for v in a.size.split("x"))
    msg = None
    if a.pool not in ("cls", "mean", "none"):
        msg = "--pool must be cls, mean or none"
    elif a.pos not in ("learned", "sincos"):
        msg = "--pos must be learned or sincos"
    elif a.classes < 0 or (a.classes == 0 and not a.feature_grad):
        msg = "--classes must be positive (0, no head, only with --feature-grad)"
    elif (a.precision not in ("fp32", "bf16", "autocast")
          or a.bf16_attention not in ("eager", "fused")):
        msg = "--precision must be fp32, bf16 or autocast, --bf16-attention eager or fused"
    elif a.pool == "none" and not a.feature_grad:
        msg = "--pool none is only valid with --feature-grad"
    elif a.device not in ("cpu", "cuda") or (a.device == "cuda" and a.precision == "bf16"):
        msg = "--device must be cpu or cuda (--precision bf16: cpu only)"
    if msg:
        print("vit_ref.py: " + msg, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    global EMULATE
    EMULATE = a.precision == "bf16"
    model = VideoViT(a)
    weights = st_read(a.weights)
    state = {k: torch.tensor(weights[k]) for k in model.state_dict()}
    model.load_state_dict(state, strict=True)
    if a.device == "cuda":
        bf16_ref.cuda_rounds_once()
        model = model.to(a.device)
    batch = st_read(a.batch)
    if a.feature_grad:
        return feature_grad(model, batch, a)
    video = torch.tensor(batch["video"], device=a.device)
    label = torch.tensor(batch["label"], device=a.device)
    drop = None
    if "drop" in batch:
        d = batch["drop"]
        if d.dtype != np.float32 or d.shape != (a.depth, 2, video.shape[0]):
            print("vit_ref.py: drop must be float32 (%d, 2, %d)" % (a.depth, video.shape[0]),
                  file=sys.stderr)
            return 2
        drop = torch.tensor(d, device=a.device)
    B = video.shape[0]
    hmask = torch.tensor(batch["hmask"], device=a.device) if "hmask" in batch else None
    if hmask is not None and tuple(hmask.shape) != (B, a.dim):
        print("vit_ref.py: hmask must be float32 (%d, %d)" % (B, a.dim), file=sys.stderr)
        return 2
    mix = batch.get("mix")
    if mix is not None and (mix.dtype != np.float32 or mix.shape != (5,)):
        print("vit_ref.py: mix must be float32 (5): lam, y0, y1, x0, x1", file=sys.stderr)
        return 2
    groups = []
    for name, prm in model.named_parameters():
        wd = a.wd if videomae_finetune_rule(name, prm) else 0.0
        # BEiT's / VideoMAE's layer ids: embeddings 0, blocks.i i + 1, the rest depth + 1
        layer = a.depth + 1
        if name.startswith(("patch_embed", "cls_token", "pos_embed")):
            layer = 0
        elif name.startswith("blocks."):
            layer = int(name.split(".")[1]) + 1
        groups.append({"params": [prm], "weight_decay": wd,
                       "lr": a.lr * a.layer_decay ** (a.depth + 1 - layer)})
    if a.optim == "sgd":
        opt = torch.optim.SGD(groups, lr=a.lr, momentum=a.beta1)
    else:
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    out, losses = {}, []
    for s in range(a.steps):
        opt.zero_grad()
        with autocast(a):
            if mix is None:
                logits = model(video, drop, hmask)
                loss = F.cross_entropy(logits, label, label_smoothing=a.label_smoothing)
            else:
                lam = float(mix[0])
                box = None if mix[1] < 0 else tuple(int(v) for v in mix[1:])
                logits = model(mixup_ref.mix_batch(video.clone(), lam, box), drop, hmask)
                target = mixup_ref.mixup_target(label, a.classes, lam, a.label_smoothing)
                loss = mixup_ref.soft_target_cross_entropy(logits, target)
        loss.backward()
        losses.append(loss.item())
        if s == 0:
            out["logits"] = logits.detach().float().cpu().numpy()
            for name, prm in model.named_parameters():
                out["grad." + name] = prm.grad.detach().cpu().numpy().copy()
        opt.step()
    out["loss"] = np.array(losses, dtype=np.float32)
    for name, prm in model.named_parameters():
        out[name] = prm.detach().cpu().numpy()
    st_write(a.out, out)


if __name__ == "__main__":
    sys.exit(main())
