"""Adversarial inputs for the compiled quantizers (tests/unit/quant/test_compiled.py and
test_packaged.py): E2M1 ties, signed zeros, tiny and zero block scales, non-finite blocks and
the whole fp32 range, and a bitwise comparison that treats NaN positions as equal."""
from __future__ import annotations

import torch

from nvfp4_lab.formats import QuantSpec

SHAPE = (64, 40)  # 40: a partial block for every block size (padding)
SR_SPEC = QuantSpec("nvfp4", rounding="sr", sr_mode="hw8")
SPECS = {
    "nvfp4_1d": QuantSpec("nvfp4"),
    "nvfp4_2d": QuantSpec("nvfp4", block=(16, 16)),
    "mxfp4_ceil": QuantSpec("mxfp4", mx_scale="ceil"),
    "nvfp4_rht16_axis0": QuantSpec("nvfp4", axis=0, rht=16),
    "fp8_block": QuantSpec("fp8_e4m3", block=(1, 32)),
}
TIES = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]


def adversarial(kind: str, dtype: torch.dtype, shape: tuple[int, ...] = SHAPE) -> torch.Tensor:
    """[64, 40] (default) tensors (padded to whole blocks inside), built in fp32 and cast to dtype.

    ties:      E2M1 ties and their fp32 neighbours in blocks whose amax is 6 (MXFP4 and
               NVFP4 encode factors ~1), +-0.0, and rows 2^-8 .. 2^-36 smaller than the
               tensor amax (subnormal and zero E4M3 scales, tiny E8M0 exponents).
    nonfinite: the same with NaN, +Inf, -Inf in a few blocks (including an RHT chunk).
    range:     one binade per row from 2^-140 (fp32 subnormal) to 2^126 (near FLT_MAX).
    """
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    if kind == "range":
        e = torch.linspace(-140, 126, shape[0]).round()
        x = x.clamp(-1.9, 1.9) * torch.exp2(e)[:, None]
        x[5, 7] = 3.0e38
        x[6, :] = 1e-45  # the smallest fp32 subnormal
    else:
        t = torch.tensor(TIES)
        ties = torch.stack([t, torch.nextafter(t, t + 1), torch.nextafter(t, t - 1)]).flatten()
        for r in range(0, 16):
            x[r, 1:22] = ties * (1 if r % 2 else -1)
        x[:, 0] = 6.0
        x[:, 32] = -6.0
        x[16:20, 5:11] = 0.0
        x[20:24, 5:11] = -0.0
        x[24:40] *= torch.exp2(-torch.arange(8, 40, 2.0))[:, None]
        if kind == "nonfinite":
            x[3, 36] = float("nan")
            x[10, 2] = float("inf")
            x[33, 17] = float("-inf")
            x[50, 39] = float("nan")
    return x.to(dtype)


def assert_bitwise(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    assert torch.equal(nan_a, nan_b)
    ia = a.view(torch.int16 if a.dtype == torch.bfloat16 else torch.int32)
    ib = b.view(ia.dtype)
    assert torch.equal(ia[~nan_a], ib[~nan_b])  # includes the sign of zero
