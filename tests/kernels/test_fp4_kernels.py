"""The fused FP4 kernels (``nvfp4_kernels.fp4``) equal the reference bit for bit.

``fp4_operand(x, spec, key)`` must return ``fake_quantize_parts(x, spec, seed=, stream=)``
exactly: ``local`` compared on its int32 bit patterns (so -0.0 != +0.0), the NVFP4 global
scale likewise. NaN payloads are not compared, only NaN positions: the reference's payload
depends on which NaN operand its vectorised CPU code propagates (the input's or the NaN
scale's, which differs between layouts), and a GPU writes its canonical NaN.

Without CUDA the kernels run in the Triton interpreter (conftest.py), which costs ~0.3 s per
call on small tensors, so the cases are small and not a full Cartesian product: every
format / layout on adversarial inputs with RNE, every rounding and dtype on two layouts,
tails and odd shapes, and a direct check of the E4M3 rounding helper. GPU tests (skipped
here) add realistic shapes.
"""
from __future__ import annotations

import math

import pytest
import torch
import triton
import triton.language as tl
from helpers.kernel_cases import (
    BF16,
    CASES,
    DEVICE,
    F32,
    INF,
    ROUNDINGS,
    ROWS_STREAM,
    SR_STREAM,
    WGRAD_STREAM,
    adversarial,
    assert_bits_equal,
    gen,
    interpreter_warnings,
    needs_cuda,
    realistic_rows,
    realistic_wgrad,
    rounding_case,
    row_scaled,
)

from nvfp4_kernels import _bits, fp4
from nvfp4_lab.formats import QuantSpec, Stream, fake_quantize_parts
from nvfp4_lab.formats.rng import key_tensor, random_bits, stream_key

pytestmark = interpreter_warnings


# ----------------------------------------------------------------------------- helpers
def check(x: torch.Tensor, spec: QuantSpec, seed: int = 0, stream: Stream | None = None):
    """Kernel vs eager reference on the test device (a GPU if any: the kernels run compiled
    only on one): local and amax bit for bit."""
    x = x.to(DEVICE)  # keeps a transposed input's strides
    key = stream_key(seed, *(stream or Stream()).ids()) if spec.rounding == "sr" else None
    local, amax = fp4.fp4_operand(x, spec, key)
    ref_local, ref_amax = fake_quantize_parts(x, spec, seed=seed, stream=stream)
    assert_bits_equal(local, ref_local)
    if ref_amax is None:
        assert amax is None
    else:
        assert amax.dim() == 0
        assert_bits_equal(amax, ref_amax, "amax")


# ----------------------------------------------------------------------------- inputs
# every format and layout, every E8M0 mode once
LAYOUTS = {
    "nvfp4_1x16": QuantSpec("nvfp4"),
    "nvfp4_1x16_axis0": QuantSpec("nvfp4", axis=0),
    "nvfp4_16x16": QuantSpec("nvfp4", block=(16, 16)),
    "mxfp4_1x32_ceil": QuantSpec("mxfp4"),
    "mxfp4_1x32_floor_axis0": QuantSpec("mxfp4", axis=0, mx_scale="floor"),
    "mxfp4_1x32_even": QuantSpec("mxfp4", mx_scale="even"),
    "mxfp4_32x32_ceil": QuantSpec("mxfp4", block=(32, 32)),
    # 4/6 block-scale selection: both error metrics, both 1D axes, 2D tiles, both limits
    "nvfp4_1x16_4over6_mae": QuantSpec("nvfp4", four_over_six="mae"),
    "nvfp4_1x16_axis0_4over6_mse": QuantSpec("nvfp4", axis=0, four_over_six="mse"),
    "nvfp4_16x16_4over6_mae_448": QuantSpec("nvfp4", block=(16, 16), four_over_six="mae",
                                            e4m3_limit=448),
}


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_adversarial_inputs(layout, case):
    spec = LAYOUTS[layout]
    check(adversarial(case, spec), spec)


@pytest.mark.parametrize("error", ["mae", "mse"])
@pytest.mark.parametrize("block", [(1, 16), (16, 16)])
def test_4over6_ties_and_exact_map_to_4_tiles(block, error):
    """Tiles at the tensor amax 8 (L = 256: base 256): values both candidates hold exactly
    (errors 0 and 0, a tie that keeps map-to-6), values on the map-to-4 grid, and a tile whose
    x1.5 candidate saturates at 448 under L = 448."""
    g = gen(3)
    x = torch.empty(32, 32)
    x[:16, :16] = torch.tensor([0.0, 2.0, 4.0, 8.0])[torch.randint(0, 4, (16, 16), generator=g)]
    x[:16, 16:] = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0])[
        torch.randint(0, 7, (16, 16), generator=g)]
    x[16:] = torch.randn(16, 32, generator=g)
    x[0, 0] = x[0, 16] = 8.0
    for limit in (256, 448):
        check(x.to(DEVICE), QuantSpec("nvfp4", block=block, four_over_six=error,
                                      e4m3_limit=limit))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("layout", ["nvfp4_1x16_axis0", "mxfp4_1x32_ceil", "mxfp4_32x32_ceil"])
def test_bf16_local_is_the_reference_local(layout, case):
    """local_dtype=bf16 (the GPU GEMM's input): the kernel casts in registers; the bytes must
    be the reference's fp32 local, which bf16 holds exactly, cast."""
    spec = LAYOUTS[layout]
    x = adversarial(case, spec).to(DEVICE)
    local, amax = fp4.fp4_operand(x, spec, None, local_dtype=torch.bfloat16)
    ref_local, ref_amax = fake_quantize_parts(x, spec)
    assert local.dtype == BF16
    assert_bits_equal(local.float(), ref_local)
    if ref_amax is not None:
        assert_bits_equal(amax, ref_amax, "amax")


@pytest.mark.parametrize("mode", ["floor", "even"])
@pytest.mark.parametrize("case", ["ties", "scale_edges", "tiny_scales", "subnormal"])
def test_mxfp4_scale_modes_other_layouts(case, mode):
    """floor along rows and even along columns (LAYOUTS has them the other way round), on the
    inputs where the E8M0 modes differ."""
    spec = QuantSpec("mxfp4", mx_scale=mode, axis=0 if mode == "even" else -1)
    check(adversarial(case, spec), spec)


# shapes with partial blocks along every blocked dim, several leading dims, a 1-D tensor
TAIL_SHAPES = {
    "nvfp4_1x16": [(3, 40), (5, 7, 48), (50,)],
    "nvfp4_1x16_axis0": [(37, 24), (20, 33), (50,)],
    "nvfp4_16x16": [(33, 50), (2, 20, 18)],
    "mxfp4_1x32_ceil": [(3, 40), (2, 3, 70)],
    "mxfp4_1x32_floor_axis0": [(37, 24), (20, 33)],
    "mxfp4_32x32_ceil": [(33, 50), (3, 40, 20)],
}


@pytest.mark.parametrize("layout,shape",
                         [(k, s) for k, shapes in TAIL_SHAPES.items() for s in shapes])
def test_tails_and_leading_dims(layout, shape):
    check(row_scaled(shape), LAYOUTS[layout])


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("layout", ["nvfp4_1x16", "mxfp4_1x32_floor_axis0"])
def test_roundings_and_dtypes(layout, rounding, dtype):
    """SR bits are the reference's: same key, same element index, same comparisons."""
    spec, x = rounding_case(LAYOUTS[layout], rounding, dtype)
    check(x, spec, seed=1234, stream=SR_STREAM)


@pytest.mark.parametrize("sr_mode", ["hw8", "exact"])
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_sr_decision_boundaries(fmt, sr_mode):
    """Each element sits exactly on its SR decision boundary for its own random bits: hw8
    rounds up iff floor(256 f) + r8 >= 256, exact iff r24 < f * 2^24 (so here: hw8 up,
    exact down). Every block has amax 6, so enc = 1 (NVFP4: A = 2688, S_enc = 1) and y = x;
    x in (0, 0.5) has lo = 0, step 0.5 and f = 2 x, all exact."""
    spec = QuantSpec(fmt, rounding="sr", sr_mode=sr_mode)
    shape, seed, stream = (8, 64), 21, Stream(layer=5)
    key = key_tensor(seed, stream.ids(), "cpu")
    r = random_bits(torch.arange(math.prod(shape)).view(shape), key).long() & 0xFFFFFFFF
    if sr_mode == "hw8":
        x = (256 - (r >> 24).clamp_min(1)).float() / 512  # f = 1 - r8 / 256
    else:
        x = (r >> 8).float() * 2.0 ** -25  # f = r24 / 2^24
    x[:, ::16] = 6.0
    x[0, 0] = 2688.0
    x[1::2] = -x[1::2]
    check(x.to(DEVICE), spec, seed=seed, stream=stream)


@pytest.mark.parametrize("spec", [QuantSpec("nvfp4", block=(16, 16), rounding="sr"),
                                  QuantSpec("mxfp4", axis=0, rounding="sr", sr_mode="exact"),
                                  QuantSpec("nvfp4", axis=1, rounding="sr")],
                         ids=["nvfp4_16x16", "mxfp4_axis0_exact", "nvfp4_middle_axis"])
def test_sr_other_layouts(spec):
    """SR counters follow the row-major index of x as passed for every layout, including
    blocks along a middle axis of a 3-D tensor."""
    g = gen(11)
    x = torch.randn(3, 40, 21, generator=g) * 3
    check(x, spec, seed=7)


def test_middle_axis_and_noncontiguous():
    """Blocks along the middle axis of a 3-D tensor; a transposed (non-contiguous) input."""
    g = gen(12)
    check(torch.randn(4, 37, 6, generator=g), QuantSpec("nvfp4", axis=1))
    x = torch.randn(24, 40, generator=g).t()
    assert not x.is_contiguous()
    check(x, QuantSpec("nvfp4", axis=0))
    check(x, QuantSpec("mxfp4", block=(32, 32)))


def test_fp16_input():
    x = (torch.randn(6, 64, generator=gen(13)) * 100).half()
    check(x, QuantSpec("nvfp4"))
    check(x, QuantSpec("mxfp4", axis=0))


def test_mxfp4_amax_is_none_and_outputs_are_new_fp32():
    x = torch.randn(4, 64, generator=gen(14)).bfloat16().to(DEVICE)
    local, amax = fp4.fp4_operand(x, QuantSpec("mxfp4"), None)
    assert amax is None and local.dtype == F32 and local.shape == x.shape
    local, amax = fp4.fp4_operand(x, QuantSpec("nvfp4"), None)
    assert amax.dtype == F32 and amax.shape == () and local.data_ptr() != x.data_ptr()


def test_empty_tensor():
    """No launch; MXFP4 equals the reference, NVFP4 (where the reference's amax of nothing
    raises) gives A = 0."""
    x = torch.empty(0, 32)
    check(x, QuantSpec("mxfp4"))
    local, amax = fp4.fp4_operand(x, QuantSpec("nvfp4"), None)
    assert local.shape == x.shape and amax.item() == 0.0


def test_supports():
    yes = [QuantSpec("nvfp4"), QuantSpec("nvfp4", axis=0), QuantSpec("nvfp4", axis=-2),
           QuantSpec("nvfp4", block=(16, 1)), QuantSpec("nvfp4", block=(16, 16)),
           QuantSpec("nvfp4", rounding="sr", sr_mode="exact"), QuantSpec("mxfp4"),
           QuantSpec("mxfp4", block=(32, 32), mx_scale="even"), QuantSpec("mxfp4", axis=1),
           QuantSpec("nvfp4", block=(1, 32)), QuantSpec("nvfp4", rht=16),
           QuantSpec("nvfp4", axis=0, rht=256), QuantSpec("mxfp4", rht=32)]
    no = [QuantSpec("nvfp4", order="te_v2_8"), QuantSpec("nvfp4", order="torchao"),
          QuantSpec("nvfp4", order="torchao", rht=16), QuantSpec("fp8_e4m3"),
          QuantSpec("fp8_e4m3", block=(1, 32), rht=16),
          QuantSpec("fp8_e4m3", block=(1, 32)), QuantSpec("bf16"),
          QuantSpec("nvfp4", block=(128, 128)), QuantSpec("mxfp4", block=(1, 512))]
    assert all(fp4.supports(s) for s in yes)
    assert not any(fp4.supports(s) for s in no)


def test_bad_calls():
    x = torch.randn(4, 32)
    with pytest.raises(ValueError, match="SR key"):
        fp4.fp4_operand(x, QuantSpec("nvfp4", rounding="sr"), None)
    with pytest.raises(ValueError, match="no FP4 kernel"):
        fp4.fp4_operand(x, QuantSpec("nvfp4", order="torchao"), None)
    with pytest.raises(ValueError, match="2D tiles"):
        fp4.fp4_operand(x[0], QuantSpec("nvfp4", block=(16, 16)), None)


def test_autotune_off_launches_the_first_candidate(monkeypatch):
    """NVFP4_KERNELS_AUTOTUNE=0 on a GPU: the plain kernel with the first tile and its warps
    (the interpreter's launcher passes no num_warps)."""
    fp4._launcher.cache_clear()
    monkeypatch.setattr(fp4, "_INTERPRET", False)
    monkeypatch.setattr(fp4, "_AUTOTUNE", False)
    try:
        kernel, fixed = fp4._launcher("quantize", 16, 1, False, 32, 1)
        g, nt, warps = fp4._tiles(16, 1, False, 32, 1)[0]
        assert kernel is fp4._quantize_kernel and (g * 16) % 32 == 0
        assert fixed == {"G": g, "NT": nt, "num_warps": warps}
        monkeypatch.setattr(fp4, "_AUTOTUNE", True)
        fp4._launcher.cache_clear()
        kernel, fixed = fp4._launcher("quantize", 16, 1, False, 32, 1)
        assert kernel is not fp4._quantize_kernel and fixed == {}
        assert len(kernel.configs) == len(fp4._tiles(16, 1, False, 32, 1)) > 1
    finally:
        fp4._launcher.cache_clear()


@triton.jit
def _e4m3_kernel(s_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    s = tl.load(s_ptr + offs, mask=offs < N)
    tl.store(out_ptr + offs, _bits.e4m3_rne(s), mask=offs < N)


def test_e4m3_rounding_matches_torch_cast():
    """Every E4M3 value, every midpoint between neighbours and the fp32 values next to them,
    and random fp32 values over the whole scale range [0, 448]: equal to torch's RNE cast."""
    grid = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    mids = (grid[1:] + grid[:-1]) / 2
    pts = torch.cat([grid, mids])
    pts = torch.cat([pts, torch.nextafter(pts, torch.tensor(INF)),
                     torch.nextafter(pts, torch.tensor(0.0))])
    rnd = torch.exp2(torch.rand(1 << 16, generator=gen(15)) * 40 - 31).clamp_max(448)
    s = torch.cat([pts, rnd, torch.tensor([0.0, 1e-45, 1e-40, 448.0])])
    s = s.to(DEVICE)
    out = torch.empty_like(s)
    BLOCK = 1 << 14
    _e4m3_kernel[(triton.cdiv(s.numel(), BLOCK),)](s, out, s.numel(), BLOCK=BLOCK)
    assert_bits_equal(out, s.to(torch.float8_e4m3fn).float(), "e4m3")


# ----------------------------------------------------------------------------- GPU
@needs_cuda
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_adversarial_inputs_cuda(layout, case):
    spec = LAYOUTS[layout]
    check(adversarial(case, spec).cuda(), spec)


@needs_cuda
@pytest.mark.parametrize("spec", [
    QuantSpec("nvfp4"), QuantSpec("nvfp4", rounding="sr"),
    QuantSpec("nvfp4", block=(16, 16)), QuantSpec("mxfp4"),
    QuantSpec("mxfp4", mx_scale="even", rounding="sr", sr_mode="exact"),
    QuantSpec("mxfp4", block=(32, 32), mx_scale="floor")],
    ids=["nvfp4", "nvfp4_sr", "nvfp4_16x16", "mxfp4", "mxfp4_even_sr_exact", "mxfp4_32x32"])
def test_realistic_rowwise_cuda(spec):
    check(realistic_rows(), spec, seed=5, stream=ROWS_STREAM)


@needs_cuda
@pytest.mark.parametrize("spec", [
    QuantSpec("nvfp4", axis=0), QuantSpec("nvfp4", axis=0, rounding="sr"),
    QuantSpec("mxfp4", axis=0, rounding="sr")], ids=["nvfp4", "nvfp4_sr", "mxfp4_sr"])
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_realistic_wgrad_cuda(spec, dtype):
    check(realistic_wgrad(dtype), spec, seed=9, stream=WGRAD_STREAM)
