"""``nvfp4_kernels.quantize`` (the storage form) equals ``formats.quantize`` byte for byte.

Compared field by field: ``data`` (packed E2M1 codes, or fp8 bytes) and ``scales`` (E4M3 /
E8M0 bytes, or FP8's fp32 decode scales) on their bytes, in the reference's dtype, shape and
canonical layout; NVFP4's ``amax`` on its int32 bits; ``shape``, ``spec`` and ``rht_signs``;
and ``dequantize()`` of the two, bit for bit. ``check`` also makes sure the kernels ran (the
dispatcher hands some inputs to the reference).

NaN: FP4 storage holds no NaN payload (a non-finite block is codes 0 with the NaN scale byte,
E4M3 0x7F or E8M0 0xFF, all fixed by the reference), so it is compared exactly. FP8 stores a
non-finite block as NaN bytes with a NaN fp32 scale; the reference's are x * NaN cast to fp8,
whose sign bit and payload depend on which NaN the device's multiplication propagates (the
kernels write 0x7F and the canonical NaN), so there NaN positions are compared, not bytes.

On the CPU the kernels run in Triton's interpreter (conftest.py): small inputs, adversarial
cases for the byte encodings (ties, +-0, zero / subnormal / zero E4M3 scales, E8M0 down to
2^-127, huge values, NaN / Inf blocks) on every FP4 layout, partial blocks, SR and RHT, FP8.
The quantization arithmetic itself is the ``local`` kernels' (same code), tested on more
cases in ``test_fp4_kernels``. GPU tests (skipped here) add realistic shapes.
"""
from __future__ import annotations

from contextlib import nullcontext
from unittest import mock

import helpers.kernel_cases as cases
import pytest
import torch

import nvfp4_kernels
from nvfp4_lab.formats import QuantSpec, Stream, fake_quantize_parts, quantize
from nvfp4_lab.formats.spec import FP4_FORMATS

pytestmark = cases.interpreter_warnings
U8 = torch.uint8


# ----------------------------------------------------------------------------- helpers
def assert_bytes_equal(got: torch.Tensor, want: torch.Tensor, what: str,
                       nan_as_nan: bool = False) -> None:
    """Same dtype and shape, equal bytes; with nan_as_nan, NaN elements (fp8) only need to be
    NaN in both."""
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    g, w = got.view(U8), want.view(U8)
    if g.dim() == 0:  # nonzero() of a 0-d tensor has no elements, even where True
        g, w, got, want = g.reshape(1), w.reshape(1), got.reshape(1), want.reshape(1)
    differ = g != w
    if nan_as_nan:
        nan = torch.isnan(want.float())
        assert torch.equal(torch.isnan(got.float()), nan), f"{what}: NaN positions differ"
        differ &= ~nan
    bad = differ.nonzero()
    if bad.numel():
        i = tuple(bad[0].tolist())
        raise AssertionError(f"{what}: {len(bad)} bytes differ, first at {i}: kernel "
                             f"{g[i].item():#04x}, reference {w[i].item():#04x}")


def check(x: torch.Tensor, spec: QuantSpec, *, seed: int = 0, stream: Stream | None = None,
          signs: torch.Tensor | None = None, kernels: bool = True):
    """nvfp4_kernels.quantize vs formats.quantize, every field; with kernels,
    fail if the dispatcher used the reference. Returns the kernels' QTensor. On the test device
    (a GPU if any: the kernels run compiled only on one)."""
    x = x.to(cases.DEVICE)  # keeps a transposed input's strides
    signs = None if signs is None else signs.to(cases.DEVICE)
    no_reference = mock.patch.object(nvfp4_kernels, "formats_quantize",
                                     side_effect=AssertionError("the reference was used"))
    with no_reference if kernels else nullcontext():
        got = nvfp4_kernels.quantize(x, spec, seed=seed, stream=stream, signs=signs)
    want = quantize(x, spec, seed=seed, stream=stream, signs=signs)
    assert got.spec == want.spec and got.shape == want.shape
    fp8 = spec.fmt not in FP4_FORMATS
    assert_bytes_equal(got.data, want.data, "data", nan_as_nan=fp8)
    if fp8:
        cases.assert_bits_equal(got.scales, want.scales, "scales")
    else:
        assert_bytes_equal(got.scales, want.scales, "scales")
    if want.amax is None:
        assert got.amax is None
    else:
        assert got.amax.shape == () and torch.equal(got.amax.view(torch.int32),
                                                    want.amax.view(torch.int32))
    assert (got.rht_signs is None) == (want.rht_signs is None)
    if want.rht_signs is not None:
        assert torch.equal(got.rht_signs, want.rht_signs)
    cases.assert_bits_equal(got.dequantize(), want.dequantize(), "dequantize")
    return got


# ----------------------------------------------------------------------------- FP4
LAYOUTS = {
    "nvfp4_1x16": QuantSpec("nvfp4"),
    "nvfp4_1x16_axis0": QuantSpec("nvfp4", axis=0),
    "nvfp4_16x16": QuantSpec("nvfp4", block=(16, 16)),
    "mxfp4_1x32_ceil": QuantSpec("mxfp4"),
    "mxfp4_1x32_ceil_axis0": QuantSpec("mxfp4", axis=0),
    "mxfp4_1x32_floor": QuantSpec("mxfp4", mx_scale="floor"),
    "mxfp4_1x32_floor_axis0": QuantSpec("mxfp4", axis=0, mx_scale="floor"),
    "mxfp4_32x32": QuantSpec("mxfp4", block=(32, 32)),
}
# the cases that reach every code and scale byte encoding (see helpers/kernel_cases.py for each)
BYTE_CASES = ["ties", "scale_edges", "zeros", "all_zero", "tiny_scales", "huge", "subnormal",
              "nonfinite"]
assert set(BYTE_CASES) <= set(cases.CASES)


@pytest.mark.parametrize("case", BYTE_CASES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_adversarial_inputs(layout, case):
    spec = LAYOUTS[layout]
    check(cases.adversarial(case, spec), spec)


def test_signed_zeros_and_non_finite_blocks_bytes():
    """The bytes themselves, on one row of two blocks: NVFP4 (TE) stores -0.0 as code 0 and a
    tiny negative as 8 (-0); MXFP4 keeps -0.0's sign (code 8); a block with a NaN or an Inf is
    codes 0 with the NaN scale byte."""
    x = torch.zeros(2, 32)
    x[0, :4] = torch.tensor([6.0, -0.0, -1e-3, 3.0])
    x[1, 0], x[1, 1], x[1, 5] = 6.0, float("nan"), float("inf")
    nv = check(x, QuantSpec("nvfp4"))
    assert nv.data[0, :2].tolist() == [0x07, 0x58]  # codes 7, 0 | 8, 5
    assert nv.scales.view(U8)[1].tolist() == [0x7F, 0x00]  # the NaN block, a zero block
    assert not nv.data[1, :8].any()
    mx = check(x, QuantSpec("mxfp4"))
    assert mx.data[0, :2].tolist() == [0x87, 0x58]  # codes 7, 8 | 8, 5
    assert mx.scales.view(U8)[:, 0].tolist() == [127, 0xFF]  # 2^0 (6 / 6) and NaN
    assert not mx.data[1].any()


# partial blocks along every blocked dim, leading dims, a 1-D tensor, blocks along the middle
# axis of a 3-D tensor (stored with that axis moved last)
TAILS = [("nvfp4_1x16", (5, 40)), ("nvfp4_1x16", (2, 3, 70)), ("nvfp4_1x16_axis0", (37, 24)),
         ("nvfp4_1x16_axis0", (50,)), ("nvfp4_16x16", (33, 50)), ("nvfp4_16x16", (2, 20, 18)),
         ("mxfp4_1x32_ceil", (5, 40)), ("mxfp4_1x32_floor_axis0", (20, 33)),
         ("mxfp4_32x32", (33, 50)), ("nvfp4_1x16_axis1", (4, 37, 6))]


@pytest.mark.parametrize("layout,shape", TAILS)
def test_tails_and_leading_dims(layout, shape):
    spec = LAYOUTS.get(layout, QuantSpec("nvfp4", axis=1))
    check(cases.row_scaled(shape), spec)


def test_noncontiguous_input():
    x = cases.row_scaled((24, 40)).t()
    assert not x.is_contiguous()
    check(x, QuantSpec("nvfp4", axis=0))


# every rounding and dtype on the token-axis layout, SR on MXFP4 rows
ROUNDING_CASES = [("nvfp4_1x16_axis0", r, d) for r in cases.ROUNDINGS
                  for d in (torch.float32, torch.bfloat16)]
ROUNDING_CASES += [("mxfp4_1x32_ceil", "sr_hw8", torch.bfloat16),
                   ("mxfp4_1x32_floor", "sr_exact", torch.float32)]


@pytest.mark.parametrize("layout,rounding,dtype", ROUNDING_CASES)
def test_roundings_and_dtypes(layout, rounding, dtype):
    """SR codes use the reference's bits: same key, element index and comparisons."""
    spec, x = cases.rounding_case(LAYOUTS[layout], rounding, dtype)
    check(x, spec, seed=1234, stream=cases.SR_STREAM)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rht_sr_wgrad_operand(dtype):
    """The Wgrad gradient operand: 16-point RHT along the token axis (fused into the FP4
    kernel), then NVFP4 with SR; the amax is the rotated tensor's; rht_signs are kept."""
    x = (torch.randn(48, 40, generator=cases.gen(20)) * 4).to(dtype)
    x[:, 3] = 0.0
    check(x, QuantSpec("nvfp4", axis=0, rht=16, rounding="sr"), seed=3,
          stream=Stream(layer=1, step=2, operand=1))


def test_rht_along_rows_and_explicit_signs():
    x = torch.randn(6, 64, generator=cases.gen(21)) * 10
    check(x, QuantSpec("nvfp4", rht=16))
    signs = torch.tensor([1.0, -1.0] * 3 + [1.0] * 10)
    check(x.t(), QuantSpec("mxfp4", axis=0, rht=16), signs=signs)
    check(torch.randn(2, 32, 4, generator=cases.gen(23)), QuantSpec("nvfp4", axis=1, rht=16))


# ----------------------------------------------------------------------------- FP8
FP8_SPECS = {
    "e4m3_1x128": (QuantSpec("fp8_e4m3", block=(1, 128)), (1, 128)),
    "e4m3_1x128_axis0": (QuantSpec("fp8_e4m3", block=(1, 128), axis=0), (128, 1)),
    "e4m3_128x128_pow2": (QuantSpec("fp8_e4m3", block=(128, 128), pow2_scales=True), (128, 128)),
    "e5m2_1x32": (QuantSpec("fp8_e5m2", block=(1, 32)), (1, 32)),
}


@pytest.mark.parametrize("name", FP8_SPECS)
def test_fp8_blocks(name):
    spec, block = FP8_SPECS[name]
    check(cases.ties_tensor(spec.fmt, block), spec)
    check(cases.random_tensor().bfloat16(), spec)
    check(cases.special_tensor(), spec)


@pytest.mark.parametrize("pow2", [False, True])
def test_fp8_per_tensor(pow2):
    """Per-tensor scaling: a tensor of ties, a zero tensor (scale 1), a non-finite one (every
    byte NaN, NaN scale), a 0-d one."""
    spec = QuantSpec("fp8_e4m3", block=None, pow2_scales=pow2)
    check(cases.ties_tensor("fp8_e4m3", cases.FP8_SHAPE), spec)
    check(-torch.zeros(3, 5), spec)
    check(cases.special_tensor(), spec)
    check(torch.tensor(-3.5), spec)


# ----------------------------------------------------------------------------- dispatch
def test_reference_fallbacks():
    """What the kernels do not cover is the reference's QTensor (or its error)."""
    x = torch.randn(8, 32, generator=cases.gen(22))
    check(x, QuantSpec("nvfp4", order="torchao"), kernels=False)
    check(x, QuantSpec("nvfp4", block=(1, 1)), kernels=False)  # codes of 2 blocks per byte
    check(x, QuantSpec("fp8_e4m3", block=(1, 32), rht=16), kernels=False)  # FP8 with an RHT
    check(torch.zeros(0, 32), QuantSpec("fp8_e4m3", block=(1, 32)), kernels=False)
    check(x.double(), QuantSpec("fp8_e4m3", block=(1, 32)), kernels=False)
    with pytest.raises(ValueError, match="multiple of 16"):
        nvfp4_kernels.quantize(torch.ones(24, 32), QuantSpec("nvfp4", axis=0, rht=16))


def test_operand_is_the_stored_form_before_its_tensor_scale():
    """operand's local is the stored element values times their block scales (1x16 blocks
    along the last axis, cropped), and its amax the stored amax."""
    x = cases.adversarial("lognormal", QuantSpec("nvfp4")).bfloat16().to(cases.DEVICE)
    spec = QuantSpec("nvfp4", rounding="sr")
    local, amax = nvfp4_kernels.operand(x, spec, seed=4)
    q = nvfp4_kernels.quantize(x, spec, seed=4)
    by_hand = q.values() * q.scales.float().repeat_interleave(16, dim=-1)
    cases.assert_bits_equal(local, by_hand[..., : x.shape[-1]])
    cases.assert_bits_equal(amax, q.amax, "amax")


@pytest.mark.parametrize("spec", [
    QuantSpec("nvfp4", axis=0, rht=16, rounding="sr"), QuantSpec("mxfp4", block=(32, 32)),
    QuantSpec("fp8_e4m3", block=(1, 32))], ids=["nvfp4_rht_sr", "mxfp4_32x32", "fp8"])
def test_operand_and_quantize_in_one_pass(spec):
    """Both outputs equal the reference's; for FP4 they come from one quantize launch (after
    NVFP4's amax launch), not two quantizations."""
    x = cases.row_scaled((64, 48), seed=24).bfloat16().to(cases.DEVICE)
    stream = Stream(layer=3, step=1, operand=2)
    launches = []
    real_launch = nvfp4_kernels.fp4._launch
    with mock.patch.object(nvfp4_kernels.fp4, "_launch",
                           side_effect=lambda name, *a, **k: (launches.append(name),
                                                              real_launch(name, *a, **k))):
        local, amax, q = nvfp4_kernels.operand_and_quantize(x, spec, seed=6, stream=stream)
    want_local, want_amax = fake_quantize_parts(x, spec, seed=6, stream=stream)
    cases.assert_bits_equal(local, want_local)
    if want_amax is None:
        assert amax is None
    else:
        cases.assert_bits_equal(amax, want_amax, "amax")
    want = quantize(x, spec, seed=6, stream=stream)
    assert_bytes_equal(q.data, want.data, "data", nan_as_nan=spec.fmt == "fp8_e4m3")
    assert q.spec == spec and q.shape == x.shape
    if spec.fmt in FP4_FORMATS:
        assert_bytes_equal(q.scales, want.scales, "scales")
        assert launches == (["amax", "quantize"] if spec.fmt == "nvfp4" else ["quantize"])


# ----------------------------------------------------------------------------- GPU
@cases.needs_cuda
@pytest.mark.parametrize("spec", [
    QuantSpec("nvfp4"), QuantSpec("nvfp4", rounding="sr"), QuantSpec("nvfp4", block=(16, 16)),
    QuantSpec("mxfp4"), QuantSpec("mxfp4", block=(32, 32), mx_scale="floor"),
    QuantSpec("fp8_e4m3", block=(1, 128)), QuantSpec("fp8_e4m3", block=None)],
    ids=["nvfp4", "nvfp4_sr", "nvfp4_16x16", "mxfp4", "mxfp4_32x32", "fp8_1x128", "fp8_tensor"])
def test_realistic_rowwise_cuda(spec):
    check(cases.realistic_rows(), spec, seed=5, stream=cases.ROWS_STREAM)


@cases.needs_cuda
@pytest.mark.parametrize("spec", [
    QuantSpec("nvfp4", axis=0), QuantSpec("nvfp4", axis=0, rht=16, rounding="sr"),
    QuantSpec("mxfp4", axis=0, rounding="sr"), QuantSpec("fp8_e4m3", block=(1, 128), axis=0)],
    ids=["nvfp4", "nvfp4_rht_sr", "mxfp4_sr", "fp8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_realistic_wgrad_cuda(spec, dtype):
    check(cases.realistic_wgrad(dtype), spec, seed=9, stream=cases.WGRAD_STREAM)
