"""The emulated NVFP4 GEMM against TE's reference ``qgemm``, transcribed independently in
``tests/helpers/te_reference.py``: per 16-wide block the FP32 partial products times the two block
scales, accumulated in FP32, then one alpha = fp32(A_x * A_w) / 2688^2 on the output.

With K = 16 every partial sum is exact (16 products of E2M1 values, times two E4M3 scales,
hold in FP32), so the accumulation order cannot differ and the outputs must be equal bit for
bit; what is left to differ is how the two tensor amaxes reach the output.
"""
from __future__ import annotations

import torch
from helpers.te_reference import te_nvfp4_reference, te_qgemm

from nvfp4_lab.formats import QuantSpec
from nvfp4_lab.quant import Backend
from nvfp4_lab.quant.gemm import Parts, gemm


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def operands(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """X [32, 16], W [24, 16]: normal values with tensor amaxes spread over 2^-40 .. 2^40."""
    g = torch.Generator().manual_seed(seed)
    ex, ew = (torch.randint(-40, 40, (2,), generator=g) + torch.rand(2, generator=g)).tolist()
    x = torch.randn(32, 16, generator=g) * 2.0 ** ex
    w = torch.randn(24, 16, generator=g) * 2.0 ** ew
    return x, w


def test_gemm_is_te_qgemm_bit_for_bit_and_not_the_product_of_decode_scales():
    old_differs = 0
    for seed in range(200):
        x, w = operands(seed)
        a = Parts(*Backend().operand(x, QuantSpec("nvfp4")), True)
        b = Parts(*Backend().operand(w, QuantSpec("nvfp4")), True).T
        y = gemm(a, b, torch.float32)
        cx, sx, ax = te_nvfp4_reference(x)
        cw, sw, aw = te_nvfp4_reference(w)
        want = te_qgemm(cx, sx, ax, cw, sw, aw)
        assert torch.equal(bits(y), bits(want)), f"seed {seed}"
        # the factor used before: fp32(A_x / 2688) * fp32(A_w / 2688), three roundings
        r = torch.tensor(2688.0)
        old = (a.local @ b.local) * ((ax / r) * (aw / r))
        old_differs += int(not torch.equal(bits(old), bits(want)))
    assert old_differs > 0
