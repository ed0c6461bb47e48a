#!/usr/bin/env python3
"""tests/ref/clip_ref.py - the PyTorch twin of `tubelet step --task clip`: LaViLa's video-text
dual encoder with AVION's towers (avion/models/transformer.py VisionTransformer and
TextTransformer, the non-flash path: nn.MultiheadAttention) from the same safetensors weights,
AVION's ClipLoss on one process, the same optimizer steps on the same batch; writes the losses,
the first step's features and gradients and the final weights in the layout of mae_ref.py.
Runs on Debian's python3-torch (1.13) or any PyTorch 2.x; only numpy and torch are needed.

    python3 tests/ref/clip_ref.py MODEL-FLAGS [OPTIM-FLAGS] [--double] --weights W --batch X --out O
    python3 tests/ref/clip_ref.py --self-test

MODEL-FLAGS: --dim D --depth L --heads NH --patch P [--tubelet TU] --frames T --size WxH --embed E --vocab V
--context N --text-width DT --text-heads NHT --text-depth LT. OPTIM-FLAGS: --optim adamw|lion
--steps S --lr --wd --beta1 --beta2 --eps --temperature (0.07) --loss infonce|max-margin
--margin (0.2).

The video tower (OpenAI CLIP names under visual.): conv1 = Conv2d(3, D, P, stride P, no bias)
on every frame (with --tubelet TU > 1 a Conv3d over (TU, P, P) tubes), tokens (t, h, w);
class_embedding (D) first; positional_embedding (1 + HW, D): the class token gets row 0, token
(t, s) row 1 + s plus temporal_embedding[t] (T / TU > 1 only);
ln_pre; blocks (ln_1, attn = nn.MultiheadAttention in_proj/out_proj, ln_2, mlp.c_fc, exact
GELU, mlp.c_proj; LayerNorm eps 1e-6); ln_post of the class token; @ proj (D, E). The text
tower: token_embedding (V, DT) + positional_embedding (N, DT), the same blocks with a causal
mask and eps 1e-5, ln_final, the row at text.argmax(-1), @ text_projection (DT, E).
Loss (ClipLoss, world 1): F.normalize both, logits = v @ t.T / temperature, the mean of the
two cross-entropies with targets arange(B); or AVION's MaxMarginRankingLoss (--loss
max-margin, its EK-100 MIR fine-tuning). Weight decay as AVION's main_lavila_pretrain.py
(decay_ref.avion_rule): none where p.ndim < 2 or 'bias', 'ln', 'bn', 'pos_embed' or
'positional_embedding' is in the name.

--precision bf16: tubelet's bf16 mode emulated exactly, as vit_ref.py's (bf16_ref.py: the patch
embedding, every Linear, the projections, attention (fused, causal in the text tower) and GELU
on bf16-rounded operands in float64, their outputs and gradients rounded once; LayerNorm, the
residual streams, positions, the class token and the loss float32).

--precision autocast: the forward and the loss under torch.autocast(DEVICE,
dtype=torch.bfloat16), the backward outside it, as AVION's training step runs the model and
ClipLoss under amp.autocast; parameters, gradients and the optimizer stay float32, the features
are written as float32. Unlike tubelet's bf16 mode, autocast also rounds the loss's normalised
features and similarity logits (a product) to bf16, and nn.MultiheadAttention's attention is
eager on the CPU (PyTorch 1.13: its scores and probabilities rounded too) and fused on a GPU
with PyTorch 2 (scaled_dot_product_attention).

--device cpu (the default) or cuda: where the model, batch and optimizer live (with cuda,
bf16_ref.cuda_rounds_once); the outputs are written from the CPU, float32. --precision bf16
runs on the CPU only.

Batch: 'video' float32 (B, 3, T, H, W), 'text' int64 (B, N) ids below V. Weights: every
parameter by name, float32, strictly (missing or misshapen: exit status 2)."""
import argparse
import contextlib
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bf16_ref  # noqa: E402
from decay_ref import avion_rule  # noqa: E402
from mae_ref import BadInput, Lion, st_read, st_write  # noqa: E402

PROG = "clip_ref.py"
EMULATE = False  # --precision bf16: the products, attention and GELU through bf16_ref


def product(x, w):
    """x @ w (AVION's projections), a bf16 product under --precision bf16."""
    return bf16_ref.linear(x, w.t()) if EMULATE else x @ w


class Block(nn.Module):
    """AVION's ResidualAttentionBlock without flash attention, layer scale or drop path."""

    def __init__(self, d, heads, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=eps)
        self.attn = nn.MultiheadAttention(d, heads)
        self.ln_2 = nn.LayerNorm(d, eps=eps)
        self.mlp = nn.Sequential()
        self.mlp.add_module("c_fc", nn.Linear(d, 4 * d))
        self.mlp.add_module("gelu", nn.GELU())
        self.mlp.add_module("c_proj", nn.Linear(4 * d, d))

    def forward(self, x, mask=None):  # x (N, B, D): MultiheadAttention's layout
        h = self.ln_1(x)
        if not EMULATE:
            x = x + self.attn(h, h, h, need_weights=False, attn_mask=mask)[0]
            return x + self.mlp(self.ln_2(x))
        x = x + self.attention_bf16(h, mask is not None)
        h = bf16_ref.linear(self.ln_2(x), self.mlp.c_fc.weight, self.mlp.c_fc.bias)
        return x + bf16_ref.linear(bf16_ref.gelu(h), self.mlp.c_proj.weight, self.mlp.c_proj.bias)

    def attention_bf16(self, h, causal):
        """nn.MultiheadAttention's computation with its products, attention and output
        through bf16_ref (fused attention: the scale applied to the scores in float64)."""
        N, B, D = h.shape
        nh = self.attn.num_heads
        qkv = bf16_ref.linear(h, self.attn.in_proj_weight, self.attn.in_proj_bias)
        q, k, v = (t.reshape(N, B, nh, D // nh).permute(1, 2, 0, 3) for t in qkv.chunk(3, -1))
        o = bf16_ref.attention(q, k, v, (D // nh) ** -0.5, causal)
        o = o.permute(2, 0, 1, 3).reshape(N, B, D)
        return bf16_ref.linear(o, self.attn.out_proj.weight, self.attn.out_proj.bias)


class Blocks(nn.Module):
    def __init__(self, d, layers, heads, eps):
        super().__init__()
        self.resblocks = nn.ModuleList([Block(d, heads, eps) for _ in range(layers)])

    def forward(self, x, mask=None):
        x = x.permute(1, 0, 2)
        for b in self.resblocks:
            x = b(x, mask)
        return x.permute(1, 0, 2)


class Visual(nn.Module):
    def __init__(self, a):
        super().__init__()
        d, s = a.dim, (a.height // a.patch) * (a.width // a.patch)
        self.a, self.s, self.tt = a, s, a.frames // a.tubelet
        if a.tubelet == 1:
            self.conv1 = nn.Conv2d(3, d, a.patch, stride=a.patch, bias=False)
        else:  # a tubelet embedding: Conv3d over (TU, P, P) tubes
            k = (a.tubelet, a.patch, a.patch)
            self.conv1 = nn.Conv3d(3, d, k, stride=k, bias=False)
        self.class_embedding = nn.Parameter(torch.zeros(d))
        self.positional_embedding = nn.Parameter(torch.zeros(s + 1, d))
        if self.tt > 1:
            self.temporal_embedding = nn.Parameter(torch.zeros(self.tt, d))
        self.ln_pre = nn.LayerNorm(d, eps=1e-6)
        self.transformer = Blocks(d, a.depth, a.heads, 1e-6)
        self.ln_post = nn.LayerNorm(d, eps=1e-6)
        self.proj = nn.Parameter(torch.zeros(d, a.embed))

    def forward(self, x):
        B, C, T, H, W = x.shape
        if EMULATE:  # one product either way: tokens (t, h, w)
            x = bf16_ref.patch_embed(x, self.conv1.weight, None, self.a.tubelet, self.a.patch)
        elif self.a.tubelet == 1:
            x = x.permute(0, 2, 1, 3, 4).reshape(B * T, C, H, W)
            x = self.conv1(x).flatten(2).transpose(2, 1).reshape(B, T * self.s, -1)
        else:  # tokens (t, h, w), as the Conv3d output flattens
            x = self.conv1(x).flatten(2).transpose(2, 1)
        cls = self.class_embedding + torch.zeros(B, 1, x.shape[-1], dtype=x.dtype,
                                                 device=x.device)
        x = torch.cat([cls, x], 1)
        pos = self.positional_embedding[1:].repeat(self.tt, 1)
        if self.tt > 1:
            pos = pos + self.temporal_embedding.repeat_interleave(self.s, 0)
        x = x + torch.cat([self.positional_embedding[:1], pos])[None]
        x = self.transformer(self.ln_pre(x))
        return product(self.ln_post(x[:, 0]), self.proj)


class DualEncoder(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.visual = Visual(a)
        d = a.text_width
        self.token_embedding = nn.Embedding(a.vocab, d)
        self.positional_embedding = nn.Parameter(torch.zeros(a.context, d))
        self.transformer = Blocks(d, a.text_depth, a.text_heads, 1e-5)
        self.ln_final = nn.LayerNorm(d, eps=1e-5)
        self.text_projection = nn.Parameter(torch.zeros(d, a.embed))
        if a.learn_temperature:  # CLIP's logit_scale, a 0-dim parameter
            self.logit_scale = nn.Parameter(torch.tensor(float(np.log(1 / a.temperature))))
        mask = torch.full((a.context, a.context), float("-inf")).triu_(1)
        self.register_buffer("attn_mask", mask, persistent=False)

    def encode_text(self, ids):
        x = self.token_embedding(ids) + self.positional_embedding
        x = self.ln_final(self.transformer(x, self.attn_mask.to(x.dtype)))
        rows = torch.arange(x.shape[0], device=x.device)
        return product(x[rows, ids.argmax(-1)], self.text_projection)

    def forward(self, video, ids):
        return self.visual(video), self.encode_text(ids)


def clip_loss(v, t, temperature, logit_scale=None):
    v, t = F.normalize(v, dim=-1), F.normalize(t, dim=-1)
    logits = v @ t.T * logit_scale.exp() if logit_scale is not None else v @ t.T / temperature
    labels = torch.arange(v.shape[0], device=v.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def max_margin_loss(v, t, margin):
    """AVION's MaxMarginRankingLoss(margin, fix_norm=True) on one process, written out: x =
    sim_matrix(text, video) (its norms floored at 1e-8, F.normalize's at 1e-12: the same for
    any feature not near zero)."""
    x = F.normalize(t, dim=-1) @ F.normalize(v, dim=-1).T
    n = x.shape[0]
    diag = torch.diag(x)[:, None].expand(n, n)
    off = ~torch.eye(n, dtype=torch.bool, device=x.device)
    terms = torch.cat([F.relu(margin - (diag - x))[off], F.relu(margin - (diag - x.T))[off]])
    return terms.mean()


def make_optimizer(model, a):
    groups = [{"params": [p for n, p in model.named_parameters() if avion_rule(n, p)],
               "weight_decay": a.wd},
              {"params": [p for n, p in model.named_parameters() if not avion_rule(n, p)],
               "weight_decay": 0.0}]
    if a.optim == "lion":
        return Lion(groups, lr=a.lr, betas=(a.beta1, a.beta2))
    return torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)


def load_weights(model, path, dtype):
    w = st_read(path)
    state = {}
    for name, prm in model.state_dict().items():
        if name not in w:
            raise BadInput("%s: tensor '%s' missing" % (path, name))
        if w[name].dtype != np.float32 or tuple(w[name].shape) != tuple(prm.shape):
            raise BadInput("%s: '%s' is %s %s, want float32 %s" % (
                path, name, w[name].dtype, list(w[name].shape), list(prm.shape)))
        state[name] = torch.tensor(w[name])
    model.load_state_dict(state, strict=True)
    return model.to(dtype)


def read_batch(path, a):
    b = st_read(path)
    v, t = b.get("video"), b.get("text")
    if v is None or v.dtype != np.float32 or v.shape[1:] != (3, a.frames, a.height, a.width):
        raise BadInput("%s: 'video' must be float32 (B, 3, %d, %d, %d)" % (
            path, a.frames, a.height, a.width))
    if t is None or t.dtype != np.int64 or t.shape != (v.shape[0], a.context) or \
            t.min() < 0 or t.max() >= a.vocab:
        raise BadInput("%s: 'text' must be int64 (B, %d) ids below %d" % (path, a.context, a.vocab))
    return torch.tensor(v), torch.tensor(t)


def run_steps(a):
    dtype = torch.float64 if a.double else torch.float32
    model = load_weights(DualEncoder(a), a.weights, dtype).to(a.device)
    video, ids = (x.to(a.device) for x in read_batch(a.batch, a))
    video = video.to(dtype)
    opt = make_optimizer(model, a)
    out, losses = {}, []

    def host(x):  # a tensor as numpy on the CPU, bf16 (autocast's) as float32
        x = x.detach().cpu()
        return (x.float() if x.dtype == torch.bfloat16 else x).numpy()
    for s in range(a.steps):
        opt.zero_grad()
        with (torch.autocast(a.device, dtype=torch.bfloat16) if a.precision == "autocast"
              else contextlib.nullcontext()):
            v, t = model(video, ids)
            loss = max_margin_loss(v, t, a.margin) if a.loss == "max-margin" else \
                clip_loss(v, t, a.temperature, getattr(model, "logit_scale", None))
        loss.backward()
        losses.append(loss.item())
        if s == 0:
            out["video_emb"] = host(v)
            out["text_emb"] = host(t)
            for n, p in model.named_parameters():
                out["grad." + n] = host(p.grad).copy()
        opt.step()
    out["loss"] = np.array(losses)
    for n, p in model.named_parameters():
        out[n] = host(p)
    st_write(a.out, {k: np.asarray(v, np.float32) for k, v in out.items()})


def parser():
    p = argparse.ArgumentParser(description="PyTorch twin of tubelet step --task clip")
    for k, d in [("dim", 64), ("depth", 2), ("heads", 2), ("patch", 8), ("frames", 4),
                 ("tubelet", 1),
                 ("embed", 32), ("vocab", 49408), ("context", 77), ("text-width", 32),
                 ("text-heads", 2), ("text-depth", 2), ("steps", 1)]:
        p.add_argument("--" + k, type=int, default=d)
    p.add_argument("--size", default="32x32")
    p.add_argument("--optim", default="adamw", choices=("adamw", "lion"))
    p.add_argument("--loss", default="infonce", choices=("infonce", "max-margin"))
    p.add_argument("--learn-temperature", action="store_true",
                   help="CLIP's logit_scale as a parameter, log(1 / temperature) in the weights")
    for k, d in [("lr", 1e-3), ("wd", 0.05), ("beta1", 0.9), ("beta2", 0.999), ("eps", 1e-8),
                 ("temperature", 0.07), ("margin", 0.2)]:
        p.add_argument("--" + k, type=float, default=d)
    p.add_argument("--weights")
    p.add_argument("--batch")
    p.add_argument("--out")
    p.add_argument("--double", action="store_true", help="run in float64, write float32")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "autocast"),
                   help="bf16: tubelet's bf16 mode emulated exactly (bf16_ref.py); autocast: "
                        "the forward and the loss under bf16 autocast")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="where the model, batch and optimizer live (bf16: cpu only)")
    p.add_argument("--self-test", action="store_true")
    return p


def finish(a):
    a.width, a.height = (int(x) for x in a.size.split("x"))
    if a.height % a.patch or a.width % a.patch or a.dim % a.heads or \
            a.text_width % a.text_heads or a.tubelet < 1 or a.frames % a.tubelet:
        raise BadInput("bad model flags")
    return a


def main(argv=None):
    a = parser().parse_args(argv)
    if a.self_test:
        return self_test()
    try:
        finish(a)
        if not (a.weights and a.batch and a.out):
            raise BadInput("--weights, --batch and --out are required")
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


def numpy_infonce(v, t, temperature):
    """The loss written out in float64 numpy, independently of F.cross_entropy."""
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    t = t / np.linalg.norm(t, axis=1, keepdims=True)
    s = v @ t.T / temperature

    def xent(m):
        mx = m.max(1, keepdims=True)
        lse = (mx + np.log(np.exp(m - mx).sum(1, keepdims=True)))[:, 0]
        return float(np.mean(lse - np.diag(m)))
    return (xent(s) + xent(s.T)) / 2


def self_test():
    torch.set_num_threads(1)
    failures = []

    def check(what, err, tol):
        ok = err <= tol
        print("%s %-66s %.2e (<= %.0e)" % ("ok  " if ok else "FAIL", what, err, tol))
        if not ok:
            failures.append(what)

    base = ["--dim", "16", "--depth", "2", "--heads", "2", "--patch", "4", "--frames", "3",
            "--size", "8x12", "--embed", "8", "--vocab", "20", "--context", "6",
            "--text-width", "12", "--text-depth", "2", "--text-heads", "3"]
    a = finish(parser().parse_args(base))
    g = np.random.default_rng(3)
    model = DualEncoder(a).to(torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(g.standard_normal(p.shape) * 0.3))
    B = 4
    video = torch.tensor(g.standard_normal((B, 3, a.frames, a.height, a.width)))
    ids = torch.tensor(g.integers(1, a.vocab - 1, (B, a.context)))
    for b in range(B):
        ids[b, 2 + b % 3] = a.vocab - 1
    v, t = model(video, ids)
    loss = clip_loss(v, t, 0.07)
    check("loss vs numpy's InfoNCE (float64)",
          abs(loss.item() - numpy_infonce(v.detach().numpy(), t.detach().numpy(), 0.07)), 1e-12)
    loss.backward()
    vn, tn = v.detach().numpy(), t.detach().numpy()
    vn, tn = vn / np.linalg.norm(vn, axis=1, keepdims=True), tn / np.linalg.norm(tn, axis=1, keepdims=True)
    x, terms = tn @ vn.T, []
    for i in range(B):
        for j in range(B):
            if i != j:
                terms += [max(0.0, 0.2 - (x[i, i] - x[i, j])), max(0.0, 0.2 - (x[i, i] - x[j, i]))]
    check("max-margin loss vs a loop over the pairs (float64)",
          abs(max_margin_loss(v, t, 0.2).item() - np.mean(terms)), 1e-12)
    # the causal mask: a caption's features do not depend on tokens after its end token
    ids2 = ids.clone()
    ids2[0, -1] = (ids2[0, -1] + 1) % (a.vocab - 1)
    t2 = model.encode_text(ids2)
    check("causal: a token after the end token changes nothing",
          float((t2[0] - t[0]).abs().max()), 1e-12)
    probes = [("visual.conv1.weight", (3, 1, 2, 0)), ("visual.temporal_embedding", (2, 5)),
              ("visual.positional_embedding", (0, 3)), ("visual.class_embedding", (7,)),
              ("visual.transformer.resblocks.1.attn.in_proj_weight", (20, 3)),
              ("visual.proj", (4, 2)), ("token_embedding.weight", (int(ids[1, 0]), 1)),
              ("positional_embedding", (3, 4)), ("transformer.resblocks.0.mlp.c_fc.bias", (9,)),
              ("text_projection", (5, 6)), ("ln_final.weight", (2,))]
    prms = dict(model.named_parameters())
    worst = 0.0
    for name, idx in probes:
        ten, h = prms[name].data, 1e-5
        old = float(ten[idx])
        with torch.no_grad():
            ten[idx] = old + h
            lp = clip_loss(*model(video, ids), 0.07).item()
            ten[idx] = old - h
            lm = clip_loss(*model(video, ids), 0.07).item()
            ten[idx] = old
        fd = (lp - lm) / (2 * h)
        gg = float(prms[name].grad[idx])
        worst = max(worst, abs(fd - gg) / max(abs(gg), 1e-3))
    check("finite differences, %d entries (worst)" % len(probes), worst, 1e-6)
    # through the files, and bad inputs
    d = tempfile.mkdtemp(prefix="clip_ref_")
    wp, xp, op = (os.path.join(d, f) for f in ("w.safetensors", "x.safetensors", "o.safetensors"))
    st_write(wp, {n: p.detach().numpy().astype(np.float32) for n, p in model.named_parameters()})
    st_write(xp, {"video": video.numpy().astype(np.float32), "text": ids.numpy()})
    rc = main(base + ["--double", "--weights", wp, "--batch", xp, "--out", op])
    o = st_read(op)
    err = max([rel(o["grad." + n], p.grad.numpy()) for n, p in prms.items()] +
              [abs(o["loss"][0] - loss.item()) / loss.item()]) if rc == 0 else 1.0
    check("via files --double vs in memory", err, 1e-6)
    bad = {"video": video.numpy().astype(np.float32), "text": ids.numpy() + a.vocab}
    st_write(xp, bad)
    stderr, sys.stderr = sys.stderr, open(os.devnull, "w")
    try:
        rc = main(base + ["--weights", wp, "--batch", xp, "--out", op])
    finally:
        sys.stderr.close()
        sys.stderr = stderr
    check("bad input: ids outside the vocabulary -> exit status %d" % rc, float(rc != 2), 0)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    os.rmdir(d)
    if failures:
        print("self-test: %d FAILED" % len(failures))
        return 1
    print("self-test: OK")
    return 0


def rel(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30))


if __name__ == "__main__":
    sys.exit(main())
