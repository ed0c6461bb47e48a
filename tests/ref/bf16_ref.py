"""tests/ref/bf16_ref.py - tubelet's bf16 mode as an exact emulation (docs/PRECISION.md), the
specification its tests compare with: the same on every machine, since it never runs a bf16
kernel of PyTorch's (whose rounding depends on the CPU: oneDNN rounds a product once on CPUs
with AVX-512, the fallback elsewhere rounds partial sums).

Every bf16 operation (a product, attention, GELU) takes its operands rounded to bf16, computes
in float64 (sums of products of bf16 values are exact there in practice, so the order of the
sum does not matter) and rounds its output to bf16 once, round to nearest even, straight from
float64. Its backward recomputes in float64 and rounds the incoming gradient and every gradient
it writes. Tensors stay float32 holding bf16 values, so everything else (LayerNorm, the residual
stream, pooling, the loss) is plain float32, as in tubelet. tubelet sums in float32 in its own
order before it rounds, so the two differ only where that sum lands within a float32 rounding
error of a bf16 tie: rare, and counted by the tests."""
import math

import torch
import torch.nn.functional as F


def cuda_rounds_once():
    """For --device cuda in the references: float32 products in float32 (no TF32, in cuBLAS or
    cuDNN's Conv3d), and bf16 products summed in float32 and rounded once (no reduced-precision
    split-K sums), as tubelet's CUDA backend computes them and as the CPU's autocast comparison
    requires (tbt_autocast_rounds_once in tests/tb_test.c)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if hasattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction"):
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False

def check_precision(a, bad):
    """The references' shared rule for --precision, --double and --device (a.precision,
    a.double, a.device); bad is the caller's error class. On cuda: cuda_rounds_once()."""
    if a.precision != "fp32" and a.double:
        raise bad("--precision %s runs in float32 (bf16's emulation in float64)" % a.precision)
    if a.precision == "bf16" and a.device != "cpu":
        raise bad("--precision bf16 runs on the CPU (its emulation is the same on every "
                  "machine)")
    if a.device == "cuda":
        cuda_rounds_once()

def rnd(x):
    """x (any float dtype) rounded once to bf16 (nearest, ties to even), as float32."""
    x = x.double()
    m, e = torch.frexp(x)                     # x = m 2^e, 0.5 <= |m| < 1
    q = torch.clamp(e.double() - 8, min=-133)  # 8 significant bits; bf16's least step 2^-133
    y = torch.round(x * torch.pow(2.0, -q)) * torch.pow(2.0, q)  # round(): ties to even
    y = torch.where(torch.isfinite(x), y, x)
    # beyond bf16's largest finite value (2^128 (1 - 2^-9)) the float32 conversion gives inf
    return y.float()


class _Op(torch.autograd.Function):
    """f(*xs) in float64 on the rounded operands, the output rounded; the backward recomputes f
    in float64 and rounds the incoming gradient and each input's gradient."""

    @staticmethod
    def forward(ctx, f, *xs):
        xr = [rnd(x) for x in xs]
        ctx.f = f
        ctx.save_for_backward(*xr)
        return rnd(f(*[x.double() for x in xr]))

    @staticmethod
    def backward(ctx, g):
        xs = [x.double().requires_grad_(need) for x, need in
              zip(ctx.saved_tensors, ctx.needs_input_grad[1:])]
        want = [x for x in xs if x.requires_grad]
        with torch.enable_grad():
            y = ctx.f(*xs)
            grads = iter(torch.autograd.grad(y, want, rnd(g).double(), allow_unused=True))
        out = [None]
        for x in xs:
            d = next(grads) if x.requires_grad else None
            out.append(None if d is None else rnd(d))
        return tuple(out)


def linear(x, w, b=None):
    """x (..., K) @ w (M, K)^T + b (M): a bf16 product with its bias (added before rounding)."""
    if b is None:
        return _Op.apply(lambda x, w: x @ w.t(), x, w)
    return _Op.apply(lambda x, w, b: x @ w.t() + b, x, w, b)


def gelu(x):
    """Exact-erf GELU of a bf16 input, its output rounded."""
    return _Op.apply(lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))), x)


def _probs(q, k, scale, causal):
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:  # key j > query i masked
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return s.softmax(-1)


class _Attention(torch.autograd.Function):
    """Fused attention (B, NH, N, HS) on bf16 q, k, v: float64 inside, the output rounded. Its
    backward is a fused kernel's (FlashAttention's): P recomputed, dS = P (dP - rowsum(dO O))
    with O the stored, rounded output; dq, dk, dv rounded."""

    @staticmethod
    def forward(ctx, q, k, v, scale, causal):
        q, k, v = rnd(q), rnd(k), rnd(v)
        p = _probs(q.double(), k.double(), scale, causal)
        o = rnd(p @ v.double())
        ctx.scale, ctx.causal = scale, causal
        ctx.save_for_backward(q, k, v, o)
        return o

    @staticmethod
    def backward(ctx, g):
        q, k, v, o = (t.double() for t in ctx.saved_tensors)
        g = rnd(g).double()
        p = _probs(q, k, ctx.scale, ctx.causal)
        ds = p * (g @ v.transpose(-2, -1) - (g * o).sum(-1, keepdim=True)) * ctx.scale
        return (rnd(ds @ k), rnd(ds.transpose(-2, -1) @ q), rnd(p.transpose(-2, -1) @ g), None,
                None)


def attention(q, k, v, scale, causal=False):
    """Fused attention (B, NH, N, HS), softmax over keys (causal: key j > query i masked):
    _Attention."""
    return _Attention.apply(q, k, v, scale, causal)


def patch_embed(video, w, b, tubelet, patch):
    """Conv3d with kernel = stride = (tubelet, patch, patch) as a bf16 product of the patches
    (B, N, 3 tubelet patch^2, in the (t, h, w) order the conv's output flattens to) with the
    weight (D, 3, tubelet, patch, patch); (B, N, D)."""
    B, C, T, H, W = video.shape
    x = video.reshape(B, C, T // tubelet, tubelet, H // patch, patch, W // patch, patch)
    x = x.permute(0, 2, 4, 6, 1, 3, 5, 7).reshape(B, -1, C * tubelet * patch * patch)
    return linear(x, w.reshape(w.shape[0], -1), b)


def self_check():
    """rnd agrees with PyTorch's float32 -> bf16 conversion (a rounding, not arithmetic: the same
    on every CPU), ties and specials included."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(100000, generator=g) * torch.pow(2.0, torch.randint(-140, 120, (100000,),
                                                                         generator=g).float())
    bits = torch.randint(0, 1 << 16, (4096,), generator=g, dtype=torch.int32)
    ties = ((bits << 16) | 0x8000).view(torch.float32)
    x = torch.cat([x, ties, torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 3.4e38])])
    a, b = rnd(x), x.bfloat16().float()
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    return bool(same.all())


if __name__ == "__main__":
    raise SystemExit(0 if self_check() else 1)
