"""FP8 E4M3 / E5M2 current scaling (per tensor, 1x128 blocks, 128x128 tiles) against an
independent transcription of TE's ``scale_from_amax_tensor`` (docs/numerics.md, FP8):

    scale = fp8_max / amax  (FLT_MAX if that overflows; 2^floor(log2 scale) with pow2;
                             1 if amax == 0)
    scale_inv = 1 / scale;   q = fp8(clamp(x * scale, +-fp8_max)), RNE

Scales are computed with Python floats (a double division rounded once to fp32 is correctly
rounded), the FP8 rounding and byte encoding by hand. Non-finite blocks (our extension) get a
NaN decode scale and decode to NaN.
"""
from __future__ import annotations

import math

import pytest
import torch

from nvfp4_lab.formats import fake_quantize, quantize

F32, BF16 = torch.float32, torch.bfloat16
FLT_MAX = float(torch.finfo(F32).max)
# format: (torch dtype, max, mantissa bits, min normal exponent, exponent bias, max byte)
FMT = {"fp8_e4m3": (torch.float8_e4m3fn, 448.0, 3, -6, 7, 0x7E),
       "fp8_e5m2": (torch.float8_e5m2, 57344.0, 2, -14, 15, 0x7B)}


def f32(v: float) -> float:
    return float(torch.tensor(v, dtype=F32))       # RNE; inf on overflow


def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


# --------------------------------------------------------------------- transcription
def te_scale(amax: float, fmt: str, pow2: bool) -> float:
    fp8_max = FMT[fmt][1]
    if amax == 0.0:
        return 1.0
    s = min(f32(fp8_max / amax), FLT_MAX)
    if pow2:
        _, e = math.frexp(s)                        # s = m * 2^e, m in [0.5, 1)
        s = math.ldexp(1.0, e - 1)
    return s


def fp8_bytes(y: torch.Tensor, fmt: str) -> torch.Tensor:
    """fp32 y with |y| <= fp8_max -> FP8 bytes, RNE, by hand (no float8 cast)."""
    _, _, mbits, emin, bias, _ = FMT[fmt]
    a = y.abs().double()
    _, e = torch.frexp(a)
    exp = torch.clamp(e - 1, min=emin)             # binade of a (subnormals: emin)
    quantum = torch.ldexp(torch.ones_like(a), exp - mbits)
    r = torch.round(a / quantum) * quantum         # half to even
    _, e = torch.frexp(r)
    exp = e - 1
    normal = r >= 2.0 ** emin
    mant_n = torch.round((torch.ldexp(r, -exp) - 1) * 2 ** mbits).long()
    byte_n = ((exp + bias) << mbits) | mant_n
    byte_s = torch.round(r / 2.0 ** (emin - mbits)).long()
    byte = torch.where(normal, byte_n, byte_s)
    return (byte | (torch.signbit(y).long() << 7)).to(torch.uint8)


def ref_blocks(xb: torch.Tensor, fmt: str, pow2: bool):
    """xb: [n, block] finite -> (bytes uint8 [n, block], scale_inv fp32 [n], decoded fp32)."""
    fp8_max = FMT[fmt][1]
    xf = xb.float()
    scales = [te_scale(a, fmt, pow2) for a in xf.abs().amax(-1).tolist()]
    s = torch.tensor(scales, dtype=F32).unsqueeze(1)
    y = torch.clamp(xf * s, -fp8_max, fp8_max)
    b = fp8_bytes(y, fmt)
    s_inv = torch.tensor([f32(1.0 / v) for v in scales], dtype=F32)
    return b, s_inv, b.view(FMT[fmt][0]).float() * s_inv.unsqueeze(1)


def tiles(x: torch.Tensor, b: int):
    """2D x zero-padded to multiples of b -> (blocked [R/b * C/b, b*b], (R/b, C/b), padded)."""
    r, c = x.shape
    xp = torch.nn.functional.pad(x, (0, -c % b, 0, -r % b))
    R, C = xp.shape
    t = xp.reshape(R // b, b, C // b, b).transpose(1, 2).reshape(-1, b * b)
    return t, (R // b, C // b), xp


def untile(t: torch.Tensor, grid, b: int):
    return t.reshape(*grid, b, b).transpose(1, 2).reshape(grid[0] * b, grid[1] * b)


def check(x: torch.Tensor, fmt: str, block, pow2: bool):
    """Compare quantize(x) with the transcription: fp8 bytes, scale_inv bits, decode."""
    q = quantize(x, fmt, block=block, pow2_scales=pow2)
    assert q.data.dtype == FMT[fmt][0] and q.scales.dtype == F32
    if block is None:
        b_ref, s_ref, d_ref = ref_blocks(x.reshape(1, -1), fmt, pow2)
        b_ref, d_ref = b_ref.reshape(x.shape), d_ref.reshape(x.shape)
    elif block[0] == 1:
        n = block[1]
        xp = torch.nn.functional.pad(x, (0, -x.shape[-1] % n))
        b_ref, s_ref, d_ref = ref_blocks(xp.reshape(-1, n), fmt, pow2)
        b_ref, s_ref = b_ref.reshape(xp.shape), s_ref.reshape(*xp.shape[:-1], -1)
        d_ref = d_ref.reshape(xp.shape)[..., : x.shape[-1]]
    else:
        t, grid, xp = tiles(x, block[0])
        b_ref, s_ref, d_ref = ref_blocks(t, fmt, pow2)
        b_ref, s_ref = untile(b_ref, grid, block[0]), s_ref.reshape(grid)
        d_ref = untile(d_ref, grid, block[0])[: x.shape[0], : x.shape[1]]
    assert torch.equal(q.data.view(torch.uint8), b_ref)
    assert torch.equal(bits(q.scales), bits(s_ref))
    assert torch.equal(bits(q.dequantize()), bits(d_ref))     # fp32(q) * scale_inv
    assert torch.equal(bits(fake_quantize(x, fmt, block=block, pow2_scales=pow2)),
                       bits(q.dequantize(x.dtype)))
    return q


def data(seed: int, shape=(64, 256), dtype=F32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * torch.exp(2 * torch.randn(shape[0], 1, generator=g))
    return x.to(dtype)


# ---------------------------------------------------------------------------- tests
def test_fp8_bytes_helper_against_torch_cast():
    """The hand encoder agrees with torch's float8 casts (RNE) on in-range values."""
    g = torch.Generator().manual_seed(0)
    for fmt, (dtype, mx, *_rest) in FMT.items():
        y = torch.randn(4096, generator=g) * torch.exp(4 * torch.randn(4096, generator=g))
        y = torch.clamp(y, -mx, mx)
        assert torch.equal(fp8_bytes(y, fmt), y.to(dtype).view(torch.uint8))


@pytest.mark.parametrize("pow2", [False, True], ids=["fp32scale", "pow2"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("fmt", list(FMT))
def test_per_tensor(fmt, dtype, pow2):
    for i, mag in enumerate((1.0, 1e-3, 3e4, 1e-38)):
        q = check(data(i, (32, 64), F32).mul(mag).to(dtype), fmt, None, pow2)
        assert q.scales.shape == (1,)


@pytest.mark.parametrize("fmt", list(FMT))
def test_per_tensor_zero_and_tiny(fmt):
    q = check(torch.zeros(4, 8), fmt, None, False)
    assert q.scales.item() == 1.0 and (q.data.view(torch.uint8) == 0).all()
    x = torch.zeros(4, 8)
    x[1, 2] = 2.0 ** -149                          # 448 / amax overflows: scale = FLT_MAX
    x[2, 3] = -(2.0 ** -148)
    for pow2 in (False, True):
        q = check(x, fmt, None, pow2)
        assert q.scales.item() == f32(1.0 / (2.0 ** 127 if pow2 else FLT_MAX))


@pytest.mark.parametrize("pow2", [False, True], ids=["fp32scale", "pow2"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("fmt", list(FMT))
def test_1x128_blocks(fmt, dtype, pow2):
    x = data(1, (16, 300), F32)                    # 300: the last block is padded
    x[0, :128] = 0.0
    x[1, 128:256] *= 1e-40                         # subnormal block amax
    x[2, :128] = torch.linspace(-1, 1, 128)
    x[3] *= torch.exp(3 * torch.randn(300, generator=torch.Generator().manual_seed(2)))
    q = check(x.to(dtype), fmt, (1, 128), pow2)
    assert q.data.shape == (16, 384) and q.scales.shape == (16, 3)
    assert q.scales[0, 0] == 1.0


@pytest.mark.parametrize("pow2", [False, True], ids=["fp32scale", "pow2"])
@pytest.mark.parametrize("fmt", list(FMT))
def test_128x128_tiles_and_transpose(fmt, pow2):
    w = data(3, (200, 300), F32)
    w[:128, 128:256] *= 1e-3
    w[128:, :128] = 0.0
    q = check(w, fmt, (128, 128), pow2)
    qt = check(w.T.contiguous(), fmt, (128, 128), pow2)
    assert q.scales.shape == (2, 3) and qt.scales.shape == (3, 2)
    assert torch.equal(bits(qt.scales), bits(q.scales.T.contiguous()))
    assert torch.equal(qt.data.view(torch.uint8), q.data.view(torch.uint8).T.contiguous())
    assert torch.equal(bits(qt.dequantize()), bits(q.dequantize().T.contiguous()))


@pytest.mark.parametrize("fmt", list(FMT))
def test_saturation_at_fp8_max(fmt):
    """The amax element lands on +-fp8_max (never NaN/inf), also when fp32(x * scale)
    overshoots fp8_max (the clamp)."""
    _, mx, _, _, _, max_byte = FMT[fmt]
    amax = next(a for a in (f32(1 + i / 997) for i in range(1, 997))
                if f32(a * f32(mx / a)) > mx)       # x * scale rounds above fp8_max
    for block in (None, (1, 128), (128, 128)):
        x = data(4, (128, 128)).clamp(-0.9, 0.9)
        x[5, 7], x[9, 100] = amax, -amax
        q = check(x, fmt, block, False)
        by = q.data.view(torch.uint8)
        assert by[5, 7] == max_byte and by[9, 100] == max_byte | 0x80


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("fmt", list(FMT))
def test_nonfinite_blocks(fmt, bad):
    """A NaN/Inf element: its block's decode scale is NaN and it decodes to all NaN (never a
    saturated finite value); other blocks match the transcription."""
    x = data(5, (128, 256))
    x[3, 200] = bad
    q = quantize(x, fmt)                           # per tensor: everything NaN
    assert torch.isnan(q.scales).all() and torch.isnan(q.dequantize()).all()
    assert q.has_nonfinite

    q = quantize(x, fmt, block=(1, 128))
    assert torch.isnan(q.scales[3, 1]) and torch.isnan(q.scales).sum() == 1
    d = q.dequantize()
    assert torch.isnan(d[3, 128:]).all() and torch.isfinite(d[3, :128]).all()
    xf = x.clone()
    xf[3, 200] = 0.0                               # the reference is for finite blocks
    b_ref, s_ref, _ = ref_blocks(xf.reshape(-1, 128), fmt, False)
    keep = torch.arange(256) != 7                  # block (3, 1) in row-major order
    assert torch.equal(q.data.view(torch.uint8).reshape(-1, 128)[keep], b_ref[keep])
    assert torch.equal(bits(q.scales.flatten()[keep]), bits(s_ref[keep]))

    q = quantize(x, fmt, block=(128, 128))
    assert torch.isnan(q.scales[0, 1]) and torch.isnan(q.scales).sum() == 1
    d = q.dequantize()
    assert torch.isnan(d[:, 128:]).all() and torch.isfinite(d[:, :128]).all()
    fq = fake_quantize(x, fmt, block=(128, 128))
    assert torch.isnan(fq[:, 128:]).all() and torch.isfinite(fq[:, :128]).all()


@pytest.mark.parametrize("fmt", list(FMT))
def test_stochastic_rounding_rejected(fmt):
    with pytest.raises(ValueError, match=fmt):
        quantize(torch.ones(4, 128), fmt, rounding="sr")
    with pytest.raises(ValueError, match=fmt):
        fake_quantize(torch.ones(4, 128), fmt, block=(1, 128), rounding="sr")
