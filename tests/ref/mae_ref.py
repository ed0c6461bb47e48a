#!/usr/bin/env python3
"""tests/ref/mae_ref.py - the PyTorch twin of `tubelet step --task mae`: VideoMAE pretraining
(OpenGVLab/VideoMAEv2 models/modeling_pretrain.py, engine_for_pretraining.py) from the same
safetensors weights, the same optimizer steps on the same batch, and the loss, first-step
prediction and gradients, and final weights written in the file layout of vit_ref.py. Runs on
Debian's python3-torch (1.13) or any PyTorch 2.x; only numpy and torch are needed (safetensors
is read and written here).

    python3 tests/ref/mae_ref.py MODEL-FLAGS [OPTIM-FLAGS] [--double] --weights W --batch X --out O
    python3 tests/ref/mae_ref.py MODEL-FLAGS --init-weights W [--seed 0]
    python3 tests/ref/mae_ref.py --self-test

MODEL-FLAGS: --dim D --depth L --heads NH --patch P --tubelet TU --frames T --size WxH
--dec-dim 384 --dec-depth 4 --dec-heads 6 [--no-norm-target]. OPTIM-FLAGS: --optim adamw|lion
--steps S (1) --lr 1e-3 --wd 0.05 --beta1 0.9 --beta2 0.95 --eps 1e-8 (eps: AdamW's only).

The model (VideoMAE's PretrainVisionTransformer, qkv_bias=True, LayerNorm eps 1e-6, MLP 4x exact
GELU, no layer scale, no drop path): the encoder embeds the video with a Conv3d, kernel = stride
= (TU, P, P), tokens in the (t, h, w) order the Conv3d output flattens to, N = (T/TU)(H/P)(W/P);
adds VideoMAE's fixed sin-cos table (get_sinusoid_encoding_table(N, D), float32, not a
parameter) to every token, keeps the visible ones x[~mask].reshape(B, -1, D), runs L pre-LN
blocks and encoder.norm. Attention: qkv Linear without bias, plus q_bias and v_bias (qkv's bias
is cat(q_bias, 0, v_bias)), heads from reshape(B, N, 3, NH, HS), q * HS^-0.5 before q k^T. The
decoder maps the tokens with encoder_to_decoder (no bias), builds x_full = cat(x_vis +
pos[~mask], mask_token + pos[decode_vis]) with the sin-cos table of width dec-dim, decode_vis =
mask (VideoMAE v1) or ~dmask (v2's decoder masking), runs dec-depth blocks of dec-heads heads
and returns decoder.head(decoder.norm(x[:, -Nq:])), Nq = the number of decoded tokens.

Target (no grad), as engine_for_pretraining.py: unnorm = video * std + mean (ImageNet, 0-1
scale); by default each patch 'b c (t p0) (h p1) (w p2) -> b (t h w) (p0 p1 p2) c' is normalised
over its p0 p1 p2 pixels per channel, (x - mean) / (unbiased var .sqrt() + 1e-6), then flattened
'(p c)'; --no-norm-target flattens '(p0 p1 p2 c)'. labels = target[decode_vis]; loss = sum(w *
mean((pred - labels)^2, -1)) / sum(w), w = mask[decode_vis] (all ones without dmask).

Parameters (state_dict names, float32; NAMES below), in W strictly: a missing tensor or a wrong
shape or dtype is an error, extra tensors are ignored:
    mask_token (1, 1, dec-dim)
    encoder.patch_embed.proj.weight (D, 3, TU, P, P), encoder.patch_embed.proj.bias (D)
    encoder.blocks.{i}.  norm1.weight/.bias, attn.q_bias, attn.v_bias, attn.qkv.weight (3D, D),
        attn.proj.weight/.bias, norm2.weight/.bias, mlp.fc1.weight (4D, D)/.bias,
        mlp.fc2.weight (D, 4D)/.bias
    encoder.norm.weight/.bias
    decoder.blocks.{i}.  the same names, width dec-dim
    decoder.norm.weight/.bias, decoder.head.weight (3 TU P P, dec-dim), decoder.head.bias
    encoder_to_decoder.weight (dec-dim, D)

X: video float32 (B, 3, T, H, W), already normalised; mask int64 (B, N), 1 = masked by the
encoder, every row the same number of 1s, at least one 0; optionally dmask int64 (B, N), 1 =
dropped by the decoder (v2's decode_masked_pos), every row the same number of 0s. At least one
decoded token per row (v1: one masked token), and at least one decoded token in the batch must
be masked (else the loss is 0/0). A bad X or W or a bad flag: one line on stderr, exit status 2.

Step mode: S steps on the same batch. O gets pred (B, Nq, 3 TU P P), the decoder output of the
first step, grad.<name> of every parameter from the first step, loss (S) float32, and every
parameter <name> after the last step. Optimizers: two groups, weight decay as AVION's
main_videomae_pretrain.py (decay_ref.avion_rule: none for 1-D tensors and names with 'bias',
'ln', 'bn', 'pos_embed' or 'positional_embedding'; so the mask token is decayed, which
VideoMAE's own run_mae_pretraining.py spares); constant lr, no gradient clipping.
adamw: torch.optim.AdamW(lr, (beta1, beta2), eps, wd). lion: AVION's avion/optim/lion.py, per
parameter p *= 1 - lr wd; p -= lr sign(beta1 m + (1 - beta1) g); m = beta2 m + (1 - beta2) g,
m starting at 0. --double runs weights, batch, model, target, loss and optimizer in float64 and
rounds only the outputs to float32 (the sin-cos tables and the ImageNet constants stay the
float32 values, as VideoMAE makes them, widened).

--precision bf16: tubelet's bf16 mode emulated exactly, as vit_ref.py's (bf16_ref.py: the
patch embedding, every Linear, attention and GELU on bf16-rounded operands in float64, their
outputs and gradients rounded once; LayerNorm, the residual stream, positions, the mask token,
the target and the loss float32).

--precision autocast: the model's forward and the loss under torch.autocast(DEVICE,
dtype=torch.bfloat16), the target and the backward outside it, as VideoMAE v2's
engine_for_pretraining.py runs (with bf16 for its fp16); parameters, gradients and the
optimizer stay float32, pred is written as float32. Unlike tubelet's bf16 mode, the encoder's
residual stream is bf16 there: the patch embedding's bf16 output plus pos_embed.type_as(x) (the
table rounded to bf16) is a bf16 sum, and so is every block's x + branch (LayerNorm takes it as
float32, as on a GPU: the LayerNorm class below); and attention runs as
VideoMAE writes it, so autocast rounds its intermediates too (the scaled q, the scores), where
tubelet's attention is fused.

--device cpu (the default) or cuda: where the model, batch and optimizer live (with cuda,
bf16_ref.cuda_rounds_once); the outputs are written from the CPU, float32. --precision bf16
runs on the CPU only.

--init-weights W writes random weights for MODEL-FLAGS (numpy, --seed): every parameter of
ndim >= 2 and mask_token trunc-normal std 0.02 (cut at 2 std), every bias (q_bias, v_bias too)
and LayerNorm bias normal std 0.02, LayerNorm weights 1 + normal std 0.1 (not 0/1, so that
their gradients are exercised).

--self-test checks, on tiny models, v1 and v2 masking, both targets: Nq; the model, target and
loss against an independent hand-written float64 version (per-token slicing and gathers, no
reshape tricks) for loss, pred and every gradient; central finite differences of the float64
loss; float32 against float64 through the file interface; AdamW and Lion steps against the
update formulas written out; and that bad inputs give exit status 2. Prints what it checked,
"self-test: OK" at the end, or exits 1 on a failure."""
import argparse
import contextlib
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import bf16_ref
from decay_ref import avion_rule

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
          "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
MEAN = (0.485, 0.456, 0.406)  # timm's IMAGENET_DEFAULT_MEAN / _STD
STD = (0.229, 0.224, 0.225)
PROG = "mae_ref.py"


class BadInput(Exception):
    pass


def st_read(path):
    """The tensors of a safetensors file as numpy arrays (__metadata__ is skipped)."""
    try:
        with open(path, "rb") as f:
            buf = f.read()
        (n,) = struct.unpack("<Q", buf[:8])
        header = json.loads(buf[8:8 + n])
    except (OSError, struct.error, ValueError) as e:
        raise BadInput("%s: not a readable safetensors file (%s)" % (path, e))
    data = buf[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e.get("dtype") not in DTYPES:
            raise BadInput("%s: tensor '%s' has unsupported dtype %s" % (path, name, e.get("dtype")))
        a, b = e["data_offsets"]
        try:
            out[name] = np.frombuffer(data[a:b], dtype=DTYPES[e["dtype"]]).reshape(e["shape"]).copy()
        except ValueError as err:
            raise BadInput("%s: tensor '%s': %s" % (path, name, err))
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
    """VideoMAE's get_sinusoid_encoding_table(n, d): (1, n, d) float32."""
    pos = np.arange(n)[:, None].astype(np.float64)
    j = np.arange(d)[None, :]
    angle = pos / np.power(10000, 2 * (j // 2) / d)
    table = np.where(j % 2 == 0, np.sin(angle), np.cos(angle))
    return torch.tensor(table, dtype=torch.float32)[None]


# ---- the model (VideoMAE's names) -------------------------------------------------------------


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm, in float32 for a bf16 input (the encoder's stream under autocast), as CUDA's
    autocast runs it; PyTorch 1.13's CPU autocast passes the bf16 input on to the float32 weight
    and fails."""

    def forward(self, x):
        return super().forward(x.float() if x.dtype == torch.bfloat16 else x)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(dim))
        self.v_bias = nn.Parameter(torch.zeros(dim))
        self.proj = nn.Linear(dim, dim)

    def qkv_heads(self, x):
        """q, k, v (B, NH, N, HS), VideoMAE's: bias cat(q_bias, 0, v_bias), reshape, permute."""
        B, N, C = x.shape
        bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias, requires_grad=False),
                          self.v_bias))
        qkv = linear(x, self.qkv.weight, bias)
        qkv = qkv.reshape(B, N, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        return qkv[0], qkv[1], qkv[2]

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv_heads(x)
        if EMULATE:
            x = bf16_ref.attention(q, k, v, self.scale)
        else:
            x = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1) @ v
        x = x.transpose(1, 2).reshape(B, N, -1)
        return linear(x, self.proj.weight, self.proj.bias)


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
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, dim, tubelet, patch):
        super().__init__()
        k = (tubelet, patch, patch)
        self.proj = nn.Conv3d(3, dim, kernel_size=k, stride=k)

    def forward(self, x):
        if EMULATE:
            return bf16_ref.patch_embed(x, self.proj.weight, self.proj.bias,
                                        *self.proj.kernel_size[:2])
        return self.proj(x).flatten(2).transpose(1, 2)


class Encoder(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.patch_embed = PatchEmbed(a.dim, a.tubelet, a.patch)
        self.register_buffer("pos_embed", sincos_table(a.n_tokens, a.dim), persistent=False)
        self.blocks = nn.ModuleList([Block(a.dim, a.heads) for _ in range(a.depth)])
        self.norm = LayerNorm(a.dim, eps=1e-6)

    def forward(self, x, mask):
        x = self.patch_embed(x)
        x = x + self.pos_embed.type_as(x).clone().detach()
        B, _, C = x.shape
        x = x[~mask].reshape(B, -1, C)  # ~mask means visible
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)


class Decoder(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.blocks = nn.ModuleList([Block(a.dec_dim, a.dec_heads) for _ in range(a.dec_depth)])
        self.norm = LayerNorm(a.dec_dim, eps=1e-6)
        self.head = nn.Linear(a.dec_dim, 3 * a.tubelet * a.patch * a.patch)

    def forward(self, x, return_token_num):
        for blk in self.blocks:
            x = blk(x)
        return linear(self.norm(x[:, -return_token_num:]), self.head.weight, self.head.bias)


class PretrainVideoMAE(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.encoder = Encoder(a)
        self.decoder = Decoder(a)
        self.encoder_to_decoder = nn.Linear(a.dim, a.dec_dim, bias=False)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, a.dec_dim))
        self.register_buffer("pos_embed", sincos_table(a.n_tokens, a.dec_dim), persistent=False)

    def forward(self, x, mask, decode_mask=None):
        """x (B, 3, T, H, W); mask, decode_mask bool (B, N), True = masked / dropped."""
        decode_vis = mask if decode_mask is None else ~decode_mask
        x_vis = linear(self.encoder(x, mask), self.encoder_to_decoder.weight)
        B, N_vis, C = x_vis.shape
        pos = self.pos_embed.expand(B, -1, -1).type_as(x).clone().detach()
        pos_vis = pos[~mask].reshape(B, -1, C)
        pos_dec = pos[decode_vis].reshape(B, -1, C)
        x_full = torch.cat([x_vis + pos_vis, self.mask_token + pos_dec], dim=1)
        return self.decoder(x_full, pos_dec.shape[1])


def patchify(video, tubelet, patch):
    """'b c (t p0) (h p1) (w p2) -> b (t h w) (p0 p1 p2) c' with reshape and permute."""
    B, C, T, H, W = video.shape
    x = video.reshape(B, C, T // tubelet, tubelet, H // patch, patch, W // patch, patch)
    x = x.permute(0, 2, 4, 6, 3, 5, 7, 1)
    return x.reshape(B, (T // tubelet) * (H // patch) * (W // patch), tubelet * patch * patch, C)


def make_target(video, a):
    """engine_for_pretraining.py's images_patch (B, N, 3 TU P P), no grad."""
    with torch.no_grad():
        mean = torch.as_tensor(MEAN).to(video.device, video.dtype)[None, :, None, None, None]
        std = torch.as_tensor(STD).to(video.device, video.dtype)[None, :, None, None, None]
        unnorm = video * std + mean
        sq = patchify(unnorm, a.tubelet, a.patch)
        B, N, Pn, C = sq.shape
        if a.norm_target:
            sq = (sq - sq.mean(dim=-2, keepdim=True)) / (
                torch.var(sq, dim=-2, unbiased=True, keepdim=True).sqrt() + 1e-6)
        return sq.reshape(B, N, Pn * C)  # '(p c)' and '(p0 p1 p2 c)' are the same order here


def mae_loss(pred, target, mask, dmask):
    """VideoMAE v2's loss; mask, dmask bool (dmask None = v1)."""
    decode_vis = mask if dmask is None else ~dmask
    B, N, C = target.shape
    labels = target[decode_vis].reshape(B, -1, C)
    loss = ((pred - labels) ** 2).mean(dim=-1)
    w = mask[decode_vis].reshape(B, -1).to(loss.dtype)  # float32 under autocast: counts exact
    return (loss * w).sum() / w.sum()


# ---- config, weights, batch -------------------------------------------------------------------


def param_shapes(a):
    """[(name, shape)] of every parameter, in the model's named_parameters order."""
    def block(prefix, d):
        return [(prefix + "norm1.weight", (d,)), (prefix + "norm1.bias", (d,)),
                (prefix + "attn.q_bias", (d,)), (prefix + "attn.v_bias", (d,)),
                (prefix + "attn.qkv.weight", (3 * d, d)),
                (prefix + "attn.proj.weight", (d, d)), (prefix + "attn.proj.bias", (d,)),
                (prefix + "norm2.weight", (d,)), (prefix + "norm2.bias", (d,)),
                (prefix + "mlp.fc1.weight", (4 * d, d)), (prefix + "mlp.fc1.bias", (4 * d,)),
                (prefix + "mlp.fc2.weight", (d, 4 * d)), (prefix + "mlp.fc2.bias", (d,))]
    D, E = a.dim, a.dec_dim
    out = [("mask_token", (1, 1, E)),
           ("encoder.patch_embed.proj.weight", (D, 3, a.tubelet, a.patch, a.patch)),
           ("encoder.patch_embed.proj.bias", (D,))]
    for i in range(a.depth):
        out += block("encoder.blocks.%d." % i, D)
    out += [("encoder.norm.weight", (D,)), ("encoder.norm.bias", (D,))]
    for i in range(a.dec_depth):
        out += block("decoder.blocks.%d." % i, E)
    out += [("decoder.norm.weight", (E,)), ("decoder.norm.bias", (E,)),
            ("decoder.head.weight", (3 * a.tubelet * a.patch * a.patch, E)),
            ("decoder.head.bias", (3 * a.tubelet * a.patch * a.patch,)),
            ("encoder_to_decoder.weight", (E, D))]
    return out


def is_norm(name):
    return ".norm" in name or name.startswith("norm")


def init_weights(a, seed, scale=None):
    """Random weights (numpy float32) as --init-weights writes them. scale (self-test): larger
    values, so that attention is far from uniform."""
    g = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(a):
        if len(shape) >= 2:
            if scale is None:
                v = g.standard_normal(shape)
                while True:  # trunc-normal: redraw what falls outside 2 std
                    bad = np.abs(v) > 2
                    if not bad.any():
                        break
                    v[bad] = g.standard_normal(int(bad.sum()))
                v = 0.02 * v
            else:
                fan_in = int(np.prod(shape[1:])) if name != "mask_token" else 4
                v = g.standard_normal(shape) * (scale / math.sqrt(fan_in))
        elif is_norm(name) and name.endswith(".weight"):
            v = 1 + (0.1 if scale is None else 0.2) * g.standard_normal(shape)
        else:
            v = (0.02 if scale is None else 0.3) * g.standard_normal(shape)
        out[name] = v.astype(np.float32)
    return out


def check_config(a):
    for k in ("dim", "depth", "heads", "patch", "tubelet", "frames", "dec_dim", "dec_depth",
              "dec_heads"):
        if getattr(a, k) < 1:
            raise BadInput("--%s must be >= 1" % k.replace("_", "-"))
    if a.dim % a.heads or a.dec_dim % a.dec_heads:
        raise BadInput("--heads must divide --dim and --dec-heads --dec-dim")
    try:
        a.width, a.height = (int(v) for v in a.size.split("x"))
    except ValueError:
        raise BadInput("--size must be WxH, not '%s'" % a.size)
    if a.frames % a.tubelet or a.height % a.patch or a.width % a.patch or min(a.height, a.width) < 1:
        raise BadInput("--frames must be a multiple of --tubelet, H and W of --patch")
    if a.norm_target and a.tubelet * a.patch * a.patch < 2:
        raise BadInput("the normalised target needs at least 2 pixels a patch")
    a.n_tokens = (a.frames // a.tubelet) * (a.height // a.patch) * (a.width // a.patch)


def load_weights(model, path, dtype):
    w = st_read(path)
    state = {}
    for name, want in model.state_dict().items():
        if name not in w:
            raise BadInput("%s lacks tensor '%s'" % (path, name))
        t = w[name]
        if t.dtype != np.float32:
            raise BadInput("%s: tensor '%s' is %s, not float32" % (path, name, t.dtype))
        if tuple(t.shape) != tuple(want.shape):
            raise BadInput("%s: tensor '%s' has shape %s, not %s" % (path, name, tuple(t.shape),
                                                                     tuple(want.shape)))
        state[name] = torch.tensor(t).to(dtype)
    model.load_state_dict(state, strict=True)


def check_batch(batch, a, path="X"):
    """video (dtype), mask and dmask (bool tensors, dmask None for v1) from X, validated."""
    if "video" not in batch or "mask" not in batch:
        raise BadInput("%s needs tensors video and mask" % path)
    v = batch["video"]
    if v.dtype != np.float32:
        raise BadInput("%s: video is %s, not float32" % (path, v.dtype))
    want = (3, a.frames, a.height, a.width)
    if v.ndim != 5 or tuple(v.shape[1:]) != want or v.shape[0] < 1:
        raise BadInput("%s: video has shape %s, not (B, %d, %d, %d, %d)" % ((path, tuple(v.shape)) + want))
    if not np.isfinite(v).all():
        raise BadInput("%s: video has a value that is not finite" % path)
    B, N = v.shape[0], a.n_tokens
    out = []
    for key, what in (("mask", "masked"), ("dmask", "dropped")):
        if key not in batch:
            out.append(None)
            continue
        m = batch[key]
        if m.dtype != np.int64:
            raise BadInput("%s: %s is %s, not int64" % (path, key, m.dtype))
        if tuple(m.shape) != (B, N):
            raise BadInput("%s: %s has shape %s, not (%d, %d)" % (path, key, tuple(m.shape), B, N))
        if not np.isin(m, (0, 1)).all():
            raise BadInput("%s: %s has a value other than 0 and 1" % (path, key))
        c = m.sum(1)
        if (c != c[0]).any():
            raise BadInput("%s: the rows of %s have different numbers of %s tokens" % (path, key, what))
        out.append(m.astype(bool))
    mask, dmask = out
    if mask[0].all():
        raise BadInput("%s: mask leaves no visible token" % path)
    dec = mask if dmask is None else ~dmask
    if not dec[0].any():
        raise BadInput("%s: no token is decoded (%s)" % (path, "mask has no 1" if dmask is None
                                                         else "dmask has no 0"))
    if not (mask & dec).any():
        raise BadInput("%s: no decoded token is masked by the encoder (the loss is 0/0)" % path)
    return (torch.tensor(v), torch.tensor(mask),
            None if dmask is None else torch.tensor(dmask))


# ---- optimizers -------------------------------------------------------------------------------


class Lion(torch.optim.Optimizer):
    """AVION's avion/optim/lion.py (_single_tensor_lion), reduced to what it computes."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, wd = group["lr"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                exp_avg = state["exp_avg"]
                p.mul_(1 - lr * wd)
                update = exp_avg.clone().mul_(beta1).add(p.grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-lr)
                exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)


def make_optimizer(model, a):
    decay, no_decay = [], []
    for name, prm in model.named_parameters():
        (decay if avion_rule(name, prm) else no_decay).append(prm)
    groups = [{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}]
    if a.optim == "lion":
        return Lion(groups, lr=a.lr, betas=(a.beta1, a.beta2))
    return torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)


# ---- command line -----------------------------------------------------------------------------


def parser():
    p = argparse.ArgumentParser(description="PyTorch twin of tubelet step --task mae")
    for k, d in [("dim", 192), ("depth", 12), ("heads", 3), ("patch", 16), ("tubelet", 2),
                 ("frames", 16), ("dec-dim", 384), ("dec-depth", 4), ("dec-heads", 6),
                 ("steps", 1), ("seed", 0)]:
        p.add_argument("--" + k, type=int, default=d)
    p.add_argument("--size", default="224x224")
    p.add_argument("--no-norm-target", dest="norm_target", action="store_false")
    p.add_argument("--optim", default="adamw", choices=("adamw", "lion"))
    for k, d in [("lr", 1e-3), ("wd", 0.05), ("beta1", 0.9), ("beta2", 0.95), ("eps", 1e-8)]:
        p.add_argument("--" + k, type=float, default=d)
    p.add_argument("--weights")
    p.add_argument("--batch")
    p.add_argument("--out")
    p.add_argument("--init-weights", metavar="W", help="write random weights to W and exit")
    p.add_argument("--double", action="store_true", help="run in float64, write float32")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "autocast"),
                   help="bf16: tubelet's bf16 mode emulated exactly (bf16_ref.py); autocast: "
                        "the forward and the loss under bf16 autocast")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="where the model, batch and optimizer live (bf16: cpu only)")
    p.add_argument("--self-test", action="store_true")
    return p


def run_steps(a):
    dtype = torch.float64 if a.double else torch.float32
    model = PretrainVideoMAE(a)
    load_weights(model, a.weights, dtype)
    model = model.to(a.device, dtype)
    video, mask, dmask = (None if t is None else t.to(a.device)
                          for t in check_batch(st_read(a.batch), a, a.batch))
    video = video.to(dtype)
    target = make_target(video, a)
    opt = make_optimizer(model, a)
    out, losses = {}, []
    for s in range(a.steps):
        opt.zero_grad()
        with (torch.autocast(a.device, dtype=torch.bfloat16) if a.precision == "autocast"
              else contextlib.nullcontext()):
            pred = model(video, mask, dmask)
            loss = mae_loss(pred, target, mask, dmask)
        loss.backward()
        losses.append(loss.item())
        if s == 0:
            out["pred"] = pred.detach().float().cpu().numpy().copy()
            for name, prm in model.named_parameters():  # a copy: zero_grad may zero in place
                out["grad." + name] = prm.grad.detach().float().cpu().numpy().copy()
        opt.step()
    out["loss"] = np.array(losses, dtype=np.float32)
    for name, prm in model.named_parameters():
        out[name] = prm.detach().float().cpu().numpy()
    st_write(a.out, out)


def main(argv=None):
    p = parser()
    a = p.parse_args(argv)
    if a.self_test:
        return self_test()
    try:
        check_config(a)
        if a.steps < 1:
            raise BadInput("--steps must be >= 1")
        if a.init_weights:
            st_write(a.init_weights, init_weights(a, a.seed))
            return 0
        if not (a.weights and a.batch and a.out):
            raise BadInput("--weights, --batch and --out are required (or --init-weights)")
        bf16_ref.check_precision(a, BadInput)
        global EMULATE
        EMULATE = a.precision == "bf16"
        torch.set_num_threads(1)
        run_steps(a)
    except BadInput as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 2
    return 0


# ---- self-test --------------------------------------------------------------------------------


def tube_mask(g, a, ratio):
    """VideoMAE's TubeMaskingGenerator: int(ratio HW) of the HW positions, in every slice."""
    hw = (a.height // a.patch) * (a.width // a.patch)
    m = np.zeros(hw, np.int64)
    m[g.permutation(hw)[:int(ratio * hw)]] = 1
    return np.tile(m, a.frames // a.tubelet)


def running_cell_mask(a, ptr):
    """VideoMAE v2's RunningCellMaskingGenerator(ratio 0.5), pattern ptr, 1 = dropped; the 2x2
    cell is laid over any H/P, W/P (for even ones the same as np.tile)."""
    queue = np.array([1, 1, 0, 0], np.int64)
    h, w = a.height // a.patch, a.width // a.patch
    rows = []
    for t in range(a.frames // a.tubelet):
        cell = queue[(np.arange(4) + ptr + t + 1) % 4].reshape(2, 2)
        rows.append(cell[np.arange(h)[:, None] % 2, np.arange(w)[None, :] % 2].reshape(-1))
    return np.concatenate(rows)


def hand_forward(a, P, video, mask, dmask):
    """An independent float64 VideoMAE: per-token slices, index gathers, written-out layers.
    Returns pred (B, Nq, 3 TU P P) and the loss."""
    TU, Pp = a.tubelet, a.patch
    t_n, h_n, w_n = a.frames // TU, a.height // Pp, a.width // Pp
    B = video.shape[0]
    dt = video.dtype

    def ln(x, w, b):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-6) * w + b

    def block(x, pre, nh):
        p = lambda n: P[pre + n]
        d = x.shape[2]
        hs = d // nh
        h = ln(x, p("norm1.weight"), p("norm1.bias"))
        Wq = p("attn.qkv.weight")
        q = h @ Wq[:d].T + p("attn.q_bias")
        k = h @ Wq[d:2 * d].T
        v = h @ Wq[2 * d:].T + p("attn.v_bias")
        heads = []
        for i in range(nh):
            sl = slice(i * hs, (i + 1) * hs)
            s = q[:, :, sl] @ k[:, :, sl].transpose(1, 2) / math.sqrt(hs)
            e = torch.exp(s - s.max(-1, keepdim=True).values)
            heads.append((e / e.sum(-1, keepdim=True)) @ v[:, :, sl])
        x = x + torch.cat(heads, -1) @ p("attn.proj.weight").T + p("attn.proj.bias")
        h = ln(x, p("norm2.weight"), p("norm2.bias"))
        m = h @ p("mlp.fc1.weight").T + p("mlp.fc1.bias")
        m = 0.5 * m * (1 + torch.erf(m / math.sqrt(2)))
        return x + m @ p("mlp.fc2.weight").T + p("mlp.fc2.bias")

    def pos(d):
        n = np.arange(t_n * h_n * w_n)[:, None]
        j = np.arange(d)[None, :]
        ang = n / 10000.0 ** (2 * (j // 2) / d)
        tab = np.where(j % 2 == 0, np.sin(ang), np.cos(ang)).astype(np.float32)
        return torch.tensor(tab).to(dt)

    def patch(vid, b, t, i, j):  # (3, TU, P, P)
        return vid[b, :, t * TU:(t + 1) * TU, i * Pp:(i + 1) * Pp, j * Pp:(j + 1) * Pp]

    cells = [(t, i, j) for t in range(t_n) for i in range(h_n) for j in range(w_n)]
    Wp = P["encoder.patch_embed.proj.weight"].reshape(a.dim, -1)
    tok = torch.stack([torch.stack([patch(video, b, *c).reshape(-1) for c in cells])
                       for b in range(B)]) @ Wp.T + P["encoder.patch_embed.proj.bias"]
    tok = tok + pos(a.dim)
    dec = (~dmask) if dmask is not None else mask
    vis_idx = [torch.nonzero(~mask[b]).reshape(-1) for b in range(B)]
    dec_idx = [torch.nonzero(dec[b]).reshape(-1) for b in range(B)]
    x = torch.stack([tok[b, vis_idx[b]] for b in range(B)])
    for i in range(a.depth):
        x = block(x, "encoder.blocks.%d." % i, a.heads)
    x = ln(x, P["encoder.norm.weight"], P["encoder.norm.bias"])
    x = x @ P["encoder_to_decoder.weight"].T
    pd = pos(a.dec_dim)
    x = torch.stack([torch.cat([x[b] + pd[vis_idx[b]], P["mask_token"][0] + pd[dec_idx[b]]])
                     for b in range(B)])
    for i in range(a.dec_depth):
        x = block(x, "decoder.blocks.%d." % i, a.dec_heads)
    nq = len(dec_idx[0])
    x = ln(x[:, x.shape[1] - nq:], P["decoder.norm.weight"], P["decoder.norm.bias"])
    pred = x @ P["decoder.head.weight"].T + P["decoder.head.bias"]
    # the target, one patch at a time
    mean = torch.tensor(np.array(MEAN, np.float32)).to(dt)
    std = torch.tensor(np.array(STD, np.float32)).to(dt)
    unnorm = video * std[None, :, None, None, None] + mean[None, :, None, None, None]
    num = den = 0
    for b in range(B):
        for q, n in enumerate(dec_idx[b].tolist()):
            px = patch(unnorm, b, *cells[n]).permute(1, 2, 3, 0).reshape(-1, 3)  # (p, c)
            if a.norm_target:
                mu = px.mean(0)
                sd = torch.sqrt(((px - mu) ** 2).sum(0) / (px.shape[0] - 1))
                px = (px - mu) / (sd + 1e-6)
            wgt = float(mask[b, n])
            num = num + wgt * ((pred[b, q] - px.reshape(-1)) ** 2).mean()
            den += wgt
    return pred, num / den


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def self_test():
    torch.set_num_threads(1)
    failures = []

    def check(what, err, tol):
        ok = err <= tol
        print("%s %-70s %.2e (<= %.0e)" % ("ok  " if ok else "FAIL", what, err, tol))
        if not ok:
            failures.append(what)

    base = ["--dim", "16", "--depth", "2", "--heads", "2", "--patch", "2", "--tubelet", "2",
            "--frames", "4", "--size", "4x8", "--dec-dim", "12", "--dec-depth", "2",
            "--dec-heads", "3"]
    a = parser().parse_args(base)
    check_config(a)
    N = a.n_tokens  # 2 * 2 * 4 = 16; 8 per temporal slice
    B = 2
    g = np.random.default_rng(7)
    dt = torch.float64
    cases = [("v1", True, False), ("v2", True, True), ("v1 no-norm", False, False),
             ("v2 no-norm", False, True)]
    d = tempfile.mkdtemp(prefix="mae_ref_")
    for ci, (label, norm_target, v2) in enumerate(cases):
        a = parser().parse_args(base + ([] if norm_target else ["--no-norm-target"]))
        check_config(a)
        w = init_weights(a, 11 + ci, scale=1.5)
        mask = np.stack([tube_mask(g, a, 0.75) for _ in range(B)])
        batch = {"video": g.standard_normal((B, 3, a.frames, a.height, a.width)).astype(np.float32),
                 "mask": mask}
        if v2:
            batch["dmask"] = np.stack([running_cell_mask(a, b % 4) for b in range(B)])
        video, mk, dmk = check_batch(batch, a)
        nq_want = int(mask[0].sum()) if not v2 else N - int(batch["dmask"][0].sum())
        # the model in float64
        model = PretrainVideoMAE(a)
        model.load_state_dict({k: torch.tensor(v) for k, v in w.items()}, strict=True)
        model = model.to(dt)
        vid = video.to(dt)
        pred = model(vid, mk, dmk)
        loss = mae_loss(pred, make_target(vid, a), mk, dmk)
        loss.backward()
        got = {"pred": pred.detach().numpy(), "loss": loss.item()}
        for n_, prm in model.named_parameters():
            got["grad." + n_] = prm.grad.numpy().copy()
        check("%s: Nq = %d (%s)" % (label, nq_want, "N - dropped" if v2 else "masked count"),
              float(pred.shape[1] != nq_want or pred.shape[2] != 3 * a.tubelet * a.patch ** 2), 0)
        # the hand-written one
        P = {k: torch.tensor(v).to(dt).requires_grad_(True) for k, v in w.items()}
        hpred, hloss = hand_forward(a, P, vid, mk, dmk)
        hloss.backward()
        check("%s: pred vs hand-written (float64)" % label, rel(got["pred"], hpred.detach().numpy()), 1e-12)
        check("%s: loss %.4f vs hand-written" % (label, got["loss"]), rel(got["loss"], hloss.item()), 1e-12)
        check("%s: %d gradients vs hand-written (float64, worst)" % (label, len(P)),
              max(rel(got["grad." + k], P[k].grad.numpy()) for k in P), 1e-10)
        # central finite differences of the loss
        prms = dict(model.named_parameters())
        probes = [("encoder.patch_embed.proj.weight", (3, 1, 1, 0, 1)),
                  ("encoder.blocks.0.attn.q_bias", (5,)), ("encoder.blocks.1.attn.v_bias", (2,)),
                  ("encoder.blocks.0.attn.qkv.weight", (17, 3)), ("mask_token", (0, 0, 4)),
                  ("encoder_to_decoder.weight", (7, 9)), ("decoder.blocks.1.norm1.weight", (1,)),
                  ("decoder.head.bias", (10,))]
        target = make_target(vid, a)
        worst = 0.0
        for name, idx in probes:
            ten, h = prms[name].data, 1e-6
            old = float(ten[idx])
            with torch.no_grad():
                ten[idx] = old + h
                lp = mae_loss(model(vid, mk, dmk), target, mk, dmk).item()
                ten[idx] = old - h
                lm = mae_loss(model(vid, mk, dmk), target, mk, dmk).item()
                ten[idx] = old
            fd = (lp - lm) / (2 * h)
            gg = got["grad." + name][idx]
            worst = max(worst, abs(fd - gg) / max(abs(gg), 1e-4))
        check("%s: finite differences, %d entries (worst)" % (label, len(probes)), worst, 1e-6)
        # through the files: float32 and --double against float64, one step
        wp, xp, op = (os.path.join(d, f) for f in ("w.safetensors", "x.safetensors", "o.safetensors"))
        st_write(wp, w)
        st_write(xp, batch)
        for flags, tol in (([], 2e-4), (["--double"], 1e-6)):
            rc = main(base + ([] if norm_target else ["--no-norm-target"]) + flags +
                      ["--weights", wp, "--batch", xp, "--out", op])
            o = st_read(op)
            names = ["pred"] + ["grad." + k for k in prms] + ["loss"] + list(prms)
            ok = rc == 0 and list(o) == names and all(v.dtype == np.float32 for v in o.values())
            err = max([rel(o[k], got[k]) for k in got if k != "loss"] +
                      [rel(o["loss"][0], got["loss"])]) if ok else 1.0
            check("%s: via files%s vs float64 (%s)" % (label, " --double" if flags else "",
                                                      "names ok" if ok else "NAMES/DTYPES/RC WRONG"),
                  err, tol)
        # two optimizer steps against the update formulas written out, float64
        if ci < 2:
            for optim in ("adamw", "lion"):
                flags = ["--optim", optim, "--steps", "3", "--lr", "1e-2", "--wd", "0.1",
                         "--double"]
                main(base + flags + ["--weights", wp, "--batch", xp, "--out", op])
                o = st_read(op)
                oa = parser().parse_args(base + flags)
                m2 = PretrainVideoMAE(a).to(dt)
                m2.load_state_dict({k: torch.tensor(v).to(dt) for k, v in w.items()})
                st, losses, grads0 = {}, [], {}
                for s in range(3):
                    m2.zero_grad()
                    lo = mae_loss(m2(vid, mk, dmk), make_target(vid, a), mk, dmk)
                    lo.backward()
                    losses.append(lo.item())
                    if s == 0:
                        grads0 = {n_: p_.grad.numpy().copy() for n_, p_ in m2.named_parameters()}
                    with torch.no_grad():
                        for n_, p_ in m2.named_parameters():
                            gr, wd = p_.grad, oa.wd if avion_rule(n_, p_) else 0.0
                            m, v = st.get(n_, (torch.zeros_like(p_), torch.zeros_like(p_)))
                            p_.mul_(1 - oa.lr * wd)
                            if optim == "lion":
                                p_.sub_(oa.lr * torch.sign(oa.beta1 * m + (1 - oa.beta1) * gr))
                                m = oa.beta2 * m + (1 - oa.beta2) * gr
                            else:
                                m = oa.beta1 * m + (1 - oa.beta1) * gr
                                v = oa.beta2 * v + (1 - oa.beta2) * gr * gr
                                mh = m / (1 - oa.beta1 ** (s + 1))
                                vh = v / (1 - oa.beta2 ** (s + 1))
                                p_.sub_(oa.lr * mh / (vh.sqrt() + oa.eps))
                            st[n_] = (m, v)
                err = max(rel(o[n_], p_.detach().numpy()) for n_, p_ in m2.named_parameters())
                err = max(err, rel(o["loss"], np.array(losses)))
                err = max([err] + [rel(o["grad." + n_], g_) for n_, g_ in grads0.items()])
                check("%s: %s, 3 steps vs the formulas (losses, first grads, weights)" % (
                    label, optim), err, 1e-6)
                main(base + flags[:-1] + ["--weights", wp, "--batch", xp, "--out", op])
                o = st_read(op)  # float32: the first step's gradients, not the last one's
                err = max([rel(o["loss"], np.array(losses))] +
                          [rel(o["grad." + n_], g_) for n_, g_ in grads0.items()])
                check("%s: %s, 3 steps, float32: losses, first grads" % (label, optim), err, 2e-4)
    # bad inputs: exit status 2
    a = parser().parse_args(base)
    check_config(a)
    w = init_weights(a, 3)
    good = {"video": g.standard_normal((B, 3, a.frames, a.height, a.width)).astype(np.float32),
            "mask": np.stack([tube_mask(g, a, 0.75) for _ in range(B)])}
    uneven = good["mask"].copy()
    uneven[1, np.nonzero(uneven[1] == 0)[0][0]] = 1
    allm = np.ones((B, N), np.int64)
    bad = [("float mask", dict(good, mask=good["mask"].astype(np.float32))),
           ("mask 0/1/2", dict(good, mask=good["mask"] * 2)),
           ("mask shape", dict(good, mask=good["mask"][:, 1:])),
           ("unequal mask rows", dict(good, mask=uneven)),
           ("no visible token", dict(good, mask=allm)),
           ("no masked token (v1)", dict(good, mask=allm * 0)),
           ("dmask drops every token", dict(good, dmask=allm)),
           ("dmask keeps only visible", dict(good, dmask=good["mask"])),
           ("video shape", dict(good, video=good["video"][:, :, 1:])),
           ("no mask", {"video": good["video"]})]
    wp, xp, op = (os.path.join(d, f) for f in ("w.safetensors", "x.safetensors", "o.safetensors"))
    for what, bt in bad:
        st_write(wp, w)
        st_write(xp, bt)
        stderr, sys.stderr = sys.stderr, open(os.devnull, "w")
        try:
            rc = main(base + ["--weights", wp, "--batch", xp, "--out", op])
        finally:
            sys.stderr.close()
            sys.stderr = stderr
        check("bad input: %s -> exit status %d" % (what, rc), float(rc != 2), 0)
    w2 = dict(w)
    del w2["decoder.blocks.1.attn.v_bias"]
    st_write(wp, w2)
    st_write(xp, good)
    stderr, sys.stderr = sys.stderr, open(os.devnull, "w")
    try:
        rc = main(base + ["--weights", wp, "--batch", xp, "--out", op])
    finally:
        sys.stderr.close()
        sys.stderr = stderr
    check("bad input: weight missing -> exit status %d" % rc, float(rc != 2), 0)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    os.rmdir(d)
    if failures:
        print("self-test: %d FAILED" % len(failures))
        return 1
    print("self-test: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
