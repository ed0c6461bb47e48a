#!/usr/bin/env python3
"""tests/ref/block_ref.py - the PyTorch twin of a stack of pre-LN transformer blocks as in OpenAI
CLIP's text transformer (ResidualAttentionBlock: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)),
mlp = c_fc -> activation -> c_proj), its attention PyTorch's own nn.MultiheadAttention in CLIP's
(S, B, D) layout. It runs one forward of the stack and one backward from an external output
gradient, for the C tests of the transformer block (a test_*.c that compares its forward and
backward against this). Runs on Debian's python3-torch (1.13) or any PyTorch 2.x; only numpy and
torch are needed (safetensors is read and written here).

    python3 tests/ref/block_ref.py --in IN.safetensors --out OUT.safetensors [--double]
    python3 tests/ref/block_ref.py --self-test

IN's __metadata__ (every value a string):
    "width"   D, the model width            "heads"  NH, D = NH * HS, scale HS^-0.5
    "layers"  L, the number of blocks       "mlp"    F, the MLP's hidden width
    "eps"     LayerNorm's eps, e.g. "1e-05"
    "act"     "gelu" (exact, erf) or "quickgelu" (x * sigmoid(1.702 x))
    "causal"  "1": CLIP's build_attention_mask (key j > query i gets -inf); "0": no mask
IN's tensors, all float32, and no others:
    x   (B, S, D)   the stack's input
    dy  (B, S, D)   the gradient on the stack's output y: the loss is L = sum(y * dy)
    per block i = 0 .. L-1, under "transformer.resblocks.{i}." (OpenAI CLIP's names):
        ln_1.weight (D), ln_1.bias (D),
        attn.in_proj_weight (3D, D), attn.in_proj_bias (3D)   q, k, v: rows [0:D], [D:2D], [2D:3D]
        attn.out_proj.weight (D, D), attn.out_proj.bias (D),
        ln_2.weight (D), ln_2.bias (D),
        mlp.c_fc.weight (F, D), mlp.c_fc.bias (F), mlp.c_proj.weight (D, F), mlp.c_proj.bias (D)
OUT's tensors, all float32: y (B, S, D), grad.x (B, S, D), and grad.<name> for every parameter
(the names above), in that order.

By default everything runs in float32; --double runs weights, inputs and both passes in float64
(for tight checks) and rounds only the outputs to float32. --self-test checks this stack against
an independent hand-written one (softmax(q k^T * scale + mask) v) in float64, causal and not, both
activations, and against central finite differences of L; it prints what it checked and exits 1
on a failure. Exit status 2: a bad input file."""
import argparse
import json
import math
import os
import struct
import sys
import tempfile
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
PARAMS = ["ln_1.weight", "ln_1.bias", "attn.in_proj_weight", "attn.in_proj_bias",
          "attn.out_proj.weight", "attn.out_proj.bias", "ln_2.weight", "ln_2.bias",
          "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]
META = ["width", "heads", "layers", "mlp", "eps", "act", "causal"]


class BadInput(Exception):
    pass


def st_read(path):
    """Tensors (numpy) and the __metadata__ dict ({} when absent) of a safetensors file."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    data = buf[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] not in DTYPES:
            raise BadInput("tensor '%s' has dtype %s, not F32" % (name, e["dtype"]))
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=DTYPES[e["dtype"]]).reshape(e["shape"]).copy()
    return out, header.get("__metadata__") or {}


def st_write(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
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


def parse_meta(meta):
    """The config from IN's metadata strings, checked."""
    missing = [k for k in META if k not in meta]
    if missing:
        raise BadInput("metadata lacks %s" % ", ".join('"%s"' % k for k in missing))
    c = {}
    try:
        for k in ("width", "heads", "layers", "mlp"):
            c[k] = int(meta[k])
        c["eps"] = float(meta["eps"])
    except ValueError as e:
        raise BadInput("metadata: %s" % e)
    c["act"], c["causal"] = meta["act"], meta["causal"]
    if min(c["width"], c["heads"], c["layers"], c["mlp"]) < 1 or c["width"] % c["heads"]:
        raise BadInput("metadata: width %d, heads %d, layers %d, mlp %d (all >= 1, heads must "
                       "divide width)" % (c["width"], c["heads"], c["layers"], c["mlp"]))
    if not c["eps"] > 0:
        raise BadInput("metadata: eps %r" % meta["eps"])
    if c["act"] not in ("gelu", "quickgelu"):
        raise BadInput('metadata: act "%s" (gelu or quickgelu)' % c["act"])
    if c["causal"] not in ("0", "1"):
        raise BadInput('metadata: causal "%s" (0 or 1)' % c["causal"])
    c["causal"] = c["causal"] == "1"
    return c


def param_names(layers):
    return ["transformer.resblocks.%d.%s" % (i, p) for i in range(layers) for p in PARAMS]


class QuickGELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class ResidualAttentionBlock(nn.Module):
    """CLIP's (openai/CLIP clip/model.py), with the activation and LayerNorm eps as parameters."""

    def __init__(self, d, heads, hidden, act, eps):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads)
        self.ln_1 = nn.LayerNorm(d, eps=eps)
        self.mlp = nn.Sequential(OrderedDict([
            ("c_fc", nn.Linear(d, hidden)),
            ("gelu", QuickGELU() if act == "quickgelu" else nn.GELU()),
            ("c_proj", nn.Linear(hidden, d))]))
        self.ln_2 = nn.LayerNorm(d, eps=eps)

    def forward(self, x, mask):
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, need_weights=False, attn_mask=mask)[0]
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.resblocks = nn.ModuleList([
            ResidualAttentionBlock(c["width"], c["heads"], c["mlp"], c["act"], c["eps"])
            for _ in range(c["layers"])])

    def forward(self, x, mask):
        for blk in self.resblocks:
            x = blk(x, mask)
        return x


class Stack(nn.Module):
    """Takes and gives (B, S, D); inside, CLIP's (S, B, D)."""

    def __init__(self, c):
        super().__init__()
        self.causal = c["causal"]
        self.transformer = Transformer(c)

    def forward(self, x):
        mask = None
        if self.causal:
            s = x.shape[1]  # CLIP's build_attention_mask, in x's dtype
            mask = torch.empty(s, s, dtype=x.dtype).fill_(float("-inf")).triu_(1)
        return self.transformer(x.permute(1, 0, 2), mask).permute(1, 0, 2)


def build(c, tensors, dtype):
    """The stack in dtype with IN's weights, strictly by name."""
    model = Stack(c).to(dtype)
    state = {}
    for name in param_names(c["layers"]):
        if name not in tensors:
            raise BadInput("IN lacks tensor '%s'" % name)
        state[name] = torch.tensor(tensors[name])
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise BadInput(str(e))
    return model


def run(c, tensors, dtype):
    """y and the gradients of L = sum(y * dy) as float32 numpy, in OUT's order."""
    known = set(param_names(c["layers"])) | {"x", "dy"}
    extra = sorted(set(tensors) - known)
    if extra:
        raise BadInput("IN has unknown tensors: %s" % ", ".join(extra))
    for k in ("x", "dy"):
        if k not in tensors:
            raise BadInput("IN lacks tensor '%s'" % k)
        t = tensors[k]
        if t.ndim != 3 or t.shape[2] != c["width"] or min(t.shape) < 1:
            raise BadInput("tensor '%s' has shape %s, not (B, S, %d)" % (k, tuple(t.shape),
                                                                        c["width"]))
    if tensors["x"].shape != tensors["dy"].shape:
        raise BadInput("x %s and dy %s differ in shape" % (tuple(tensors["x"].shape),
                                                           tuple(tensors["dy"].shape)))
    model = build(c, tensors, dtype)
    x = torch.tensor(tensors["x"]).to(dtype).requires_grad_(True)
    dy = torch.tensor(tensors["dy"]).to(dtype)
    y = model(x)
    (y * dy).sum().backward()
    out = OrderedDict()
    out["y"] = y.detach().float().numpy()
    out["grad.x"] = x.grad.float().numpy()
    prms = dict(model.named_parameters())
    for name in param_names(c["layers"]):
        out["grad." + name] = prms[name].grad.float().numpy()
    return out


# ---- self-test -------------------------------------------------------------------------------


def hand_stack(c, P, x):
    """An independent float64 stack: LayerNorm, attention, GELUs written out, no nn modules."""
    D, NH = c["width"], c["heads"]
    HS = D // NH
    B, S, _ = x.shape
    mask = torch.zeros(S, S, dtype=x.dtype)
    if c["causal"]:
        i = torch.arange(S)
        mask[i[None, :] > i[:, None]] = float("-inf")  # key j > query i

    def ln(t, w, b):
        mu = t.mean(-1, keepdim=True)
        var = ((t - mu) ** 2).mean(-1, keepdim=True)
        return (t - mu) / torch.sqrt(var + c["eps"]) * w + b

    def act(t):
        if c["act"] == "quickgelu":
            return t / (1 + torch.exp(-1.702 * t))
        return 0.5 * t * (1 + torch.erf(t / math.sqrt(2)))

    for i in range(c["layers"]):
        p = lambda n: P["transformer.resblocks.%d.%s" % (i, n)]
        h = ln(x, p("ln_1.weight"), p("ln_1.bias"))
        W, bias = p("attn.in_proj_weight"), p("attn.in_proj_bias")
        heads = lambda t: t.reshape(B, S, NH, HS).transpose(1, 2)
        q = heads(h @ W[:D].T + bias[:D])
        k = heads(h @ W[D:2 * D].T + bias[D:2 * D])
        v = heads(h @ W[2 * D:].T + bias[2 * D:])
        s = q @ k.transpose(-2, -1) * HS ** -0.5 + mask
        e = torch.exp(s - s.max(-1, keepdim=True).values)
        a = (e / e.sum(-1, keepdim=True)) @ v
        a = a.transpose(1, 2).reshape(B, S, D)
        x = x + a @ p("attn.out_proj.weight").T + p("attn.out_proj.bias")
        h = ln(x, p("ln_2.weight"), p("ln_2.bias"))
        m = act(h @ p("mlp.c_fc.weight").T + p("mlp.c_fc.bias"))
        x = x + m @ p("mlp.c_proj.weight").T + p("mlp.c_proj.bias")
    return x


def random_case(c, B, S, seed):
    g = np.random.default_rng(seed)
    D, F_ = c["width"], c["mlp"]
    shapes = {"ln_1.weight": (D,), "ln_1.bias": (D,), "attn.in_proj_weight": (3 * D, D),
              "attn.in_proj_bias": (3 * D,), "attn.out_proj.weight": (D, D),
              "attn.out_proj.bias": (D,), "ln_2.weight": (D,), "ln_2.bias": (D,),
              "mlp.c_fc.weight": (F_, D), "mlp.c_fc.bias": (F_,), "mlp.c_proj.weight": (D, F_),
              "mlp.c_proj.bias": (D,)}
    t = OrderedDict()
    t["x"] = g.standard_normal((B, S, D)).astype(np.float32)
    t["dy"] = g.standard_normal((B, S, D)).astype(np.float32)
    for i in range(c["layers"]):
        for p in PARAMS:
            shape = shapes[p]
            if p.endswith("weight") and len(shape) == 1:  # LayerNorm gain near 1
                a = 1 + 0.2 * g.standard_normal(shape)
            elif len(shape) == 2:  # large enough that attention is far from uniform
                a = g.standard_normal(shape) * (1.5 / math.sqrt(shape[1]))
            else:
                a = 0.3 * g.standard_normal(shape)
            t["transformer.resblocks.%d.%s" % (i, p)] = a.astype(np.float32)
    return t


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def self_test():
    torch.set_num_threads(1)
    failures = []

    def check(what, err, tol):
        ok = err <= tol
        print("%s %-62s %.2e (<= %.0e)" % ("ok  " if ok else "FAIL", what, err, tol))
        if not ok:
            failures.append(what)

    base = {"width": 16, "heads": 4, "layers": 2, "mlp": 24, "eps": 1e-5}
    B, S = 2, 5
    for n, (act, causal) in enumerate([(a, k) for a in ("gelu", "quickgelu") for k in (0, 1)]):
        c = dict(base, act=act, causal=bool(causal))
        name = "%s, %s" % (act, "causal" if causal else "no mask")
        t = random_case(c, B, S, 1 + n)
        dt = torch.float64
        # the MultiheadAttention stack in float64, its float64 outputs and gradients
        model = build(c, t, dt)
        x = torch.tensor(t["x"]).to(dt).requires_grad_(True)
        dy = torch.tensor(t["dy"]).to(dt)
        y = model(x)
        (y * dy).sum().backward()
        got = {"y": y.detach().numpy(), "grad.x": x.grad.numpy()}
        for pn, prm in model.named_parameters():
            got["grad." + pn] = prm.grad.numpy()
        # the hand-written stack
        P = {k: torch.tensor(v).to(dt).requires_grad_(True) for k, v in t.items() if k not in
             ("x", "dy")}
        hx = torch.tensor(t["x"]).to(dt).requires_grad_(True)
        hy = hand_stack(c, P, hx)
        (hy * dy).sum().backward()
        want = {"y": hy.detach().numpy(), "grad.x": hx.grad.numpy()}
        for k, v in P.items():
            want["grad." + k] = v.grad.numpy()
        assert sorted(got) == sorted(want)
        check("%s: y vs hand-written attention (float64)" % name, rel(got["y"], want["y"]),
              1e-12)
        check("%s: %d gradients vs hand-written (float64, worst)" % (name, len(got) - 1),
              max(rel(got[k], want[k]) for k in got if k != "y"), 1e-11)
        if causal:  # nothing later in the sequence reaches an earlier output
            with torch.no_grad():
                x2 = x.detach().clone()
                x2[:, -1] += 1.0
                y2 = model(x2)
            check("%s: y[:, :S-1] unchanged by x[:, S-1]" % name,
                  float((y2[:, :-1] - y[:, :-1]).abs().max()), 0.0)
        # the float32 path (the default) against float64, through the file interface
        with tempfile.TemporaryDirectory() as d:
            meta = dict(c, causal="1" if causal else "0")
            st_write(os.path.join(d, "in.safetensors"), t, meta)
            for flags, tol in (([], 1e-5), (["--double"], 1e-7)):
                main(["--in", os.path.join(d, "in.safetensors"),
                      "--out", os.path.join(d, "out.safetensors")] + flags)
                o, _ = st_read(os.path.join(d, "out.safetensors"))
                ok_keys = list(o) == ["y", "grad.x"] + ["grad." + k for k in
                                                         param_names(c["layers"])]
                ok_dt = all(v.dtype == np.float32 for v in o.values())
                check("%s: via files%s, float32 OUT vs float64 (%s)" % (
                    name, " --double" if flags else "", "names, dtypes ok" if ok_keys and ok_dt
                    else "NAMES OR DTYPES WRONG"),
                    max(rel(o[k], got[k]) for k in got) if ok_keys and ok_dt else 1.0, tol)
        # central finite differences of L, float64
        def loss():
            with torch.no_grad():
                return float((model(xf) * dy).sum())
        xf = x.detach().clone()
        h = 1e-6
        probes = [("x", xf, (0, 0, 3)), ("x", xf, (1, S - 1, 7)), ("x", xf, (1, 2, 0))]
        W = dict(model.named_parameters())["transformer.resblocks.0.attn.in_proj_weight"]
        D = c["width"]
        probes += [("resblocks.0.attn.in_proj_weight", W.data, (r, 5)) for r in (1, D + 2,
                                                                             2 * D + 3)]
        worst = 0.0
        for pn, ten, idx in probes:
            g = got["grad.x"][idx] if pn == "x" else got["grad.transformer." + pn][idx]
            old = float(ten[idx])
            ten[idx] = old + h
            lp = loss()
            ten[idx] = old - h
            lm = loss()
            ten[idx] = old
            fd = (lp - lm) / (2 * h)
            worst = max(worst, abs(fd - g) / max(abs(g), 1e-3))
        check("%s: finite differences, 3 of x, q/k/v rows of in_proj (worst)" % name, worst,
              1e-6)
    if failures:
        print("self-test: %d FAILED" % len(failures))
        return 1
    print("self-test: all passed")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description="PyTorch twin of a stack of CLIP text blocks")
    p.add_argument("--in", dest="inp")
    p.add_argument("--out")
    p.add_argument("--double", action="store_true", help="run in float64")
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args(argv)
    if a.self_test:
        return self_test()
    if not a.inp or not a.out:
        p.error("--in and --out are required")
    torch.set_num_threads(1)
    try:
        tensors, meta = st_read(a.inp)
        c = parse_meta(meta)
        out = run(c, tensors, torch.float64 if a.double else torch.float32)
    except BadInput as e:
        print("block_ref.py: %s: %s" % (a.inp, e), file=sys.stderr)
        return 2
    st_write(a.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
