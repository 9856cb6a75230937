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

from nvfp4_kernels import _bits, fp4
from nvfp4_lab.formats import QuantSpec, Stream, e2m1, fake_quantize_parts
from nvfp4_lab.formats.nvfp4 import block_scales
from nvfp4_lab.formats.rng import key_tensor, random_bits
from nvfp4_lab.formats.scales import rdiv

pytestmark = pytest.mark.filterwarnings(
    # the interpreter runs the kernels in numpy, which warns about the inf/NaN lanes of
    # non-finite blocks and 2688 / 0 for an all-zero tensor (both intended)
    "ignore:.* encountered in :RuntimeWarning")

F32, BF16 = torch.float32, torch.bfloat16
FLT_MAX = torch.finfo(F32).max
INV6 = float(torch.tensor(1 / 6, dtype=F32))
NAN, INF = float("nan"), float("inf")
CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")


# ----------------------------------------------------------------------------- helpers
def assert_bits_equal(got: torch.Tensor, ref: torch.Tensor, what: str = "local") -> None:
    """Same shape and dtype, NaN at the same positions, equal int32 bit patterns elsewhere."""
    assert got.shape == ref.shape and got.dtype == ref.dtype == F32, (got.shape, ref.shape)
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(got), nan), f"{what}: NaN positions differ"
    g, r = got.view(torch.int32), ref.view(torch.int32)
    bad = ((g != r) & ~nan).nonzero()
    if bad.numel():
        i = tuple(bad[0].tolist())
        raise AssertionError(f"{what}: {len(bad)} elements differ, first at {i}: kernel "
                             f"{got[i].item()!r} ({g[i].item() & 0xFFFFFFFF:#010x}), "
                             f"reference {ref[i].item()!r} ({r[i].item() & 0xFFFFFFFF:#010x})")


def check(x: torch.Tensor, spec: QuantSpec, seed: int = 0, stream: Stream | None = None):
    """Kernel vs eager reference on x's device: local and scale bit for bit."""
    key = (key_tensor(seed, (stream or Stream()).ids(), x.device)
           if spec.rounding == "sr" else None)
    local, scale = fp4.fp4_operand(x, spec, key)
    ref_local, ref_scale = fake_quantize_parts(x, spec, seed=seed, stream=stream)
    assert_bits_equal(local, ref_local)
    if ref_scale is None:
        assert scale is None
    else:
        assert scale.dim() == 0
        assert_bits_equal(scale, ref_scale, "scale")


def block_shape(spec: QuantSpec) -> tuple[int, int]:
    """(rows, cols) of one block of a 2-D tensor under spec."""
    lay = spec.layout
    if lay.kind == "2d":
        return lay.size, lay.size
    return (1, lay.size) if lay.axis in (-1, 1) else (lay.size, 1)


def place(blocks: torch.Tensor, spec: QuantSpec, per_row: int = 4) -> torch.Tensor:
    """blocks [n, elems] (one block's elements per row) -> a 2-D x in which block i of the
    layout holds blocks[i]: blocks laid out row-major, ``per_row`` per block row."""
    br, bc = block_shape(spec)
    n = blocks.shape[0]
    g = blocks.reshape(n // per_row, per_row, br, bc).permute(0, 2, 1, 3)
    return g.reshape(n // per_row * br, per_row * bc)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- inputs
# Each case returns blocks [n, e] (one block's e elements per row, n a multiple of 4); block 0
# usually holds the tensor amax. ``place`` puts them where the layout under test has its
# blocks, so every layout sees the same block contents.
TIES = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])


def _fill(rows: list[torch.Tensor], e: int, seed: int) -> torch.Tensor:
    """Blocks from patterns, each repeated / cut to e elements; random normal blocks fill up
    to at least 12 blocks and a multiple of 4."""
    out = torch.randn(max(12, -(-len(rows) // 4) * 4), e, generator=gen(seed))
    for i, r in enumerate(rows):
        out[i] = r.repeat(math.ceil(e / r.numel()))[:e]
    return out


def case_ties(e: int) -> torch.Tensor:
    """E2M1 ties and their fp32 neighbours at block scales 2^j. Block 0 has amax 2688, so
    NVFP4's S_enc = 1 and a block with amax 6 * 2^j gets s_b = 2^j and enc = 2^-j exactly;
    MXFP4 ceil/floor give k = j (even: j + 1, moving the ties to other grid points)."""
    t = torch.cat([TIES, -TIES, torch.nextafter(TIES, torch.tensor(INF)),
                   torch.nextafter(-TIES, torch.tensor(0.0))])
    rows = [torch.tensor([2688.0, 1.0, -3.0])]
    for j in (-9, -5, -1, 0, 2, 8):
        for chunk in t.split(e - 1):  # every block starts with its amax 6
            rows.append(torch.cat([torch.tensor([6.0]), chunk, torch.zeros(e - 1 - len(chunk))])
                        * 2.0 ** j)
    return _fill(rows, e, 1)


def case_scale_edges(e: int) -> torch.Tensor:
    """Block amaxes at E4M3 rounding ties (NVFP4 with S_enc = 1: s = a_b * fp32(1/6)) and at
    E8M0 boundaries (v * 2^j and the fp32 values next to them); the rest of each block is
    random below its amax."""
    mids = torch.tensor([1.0625, 1.1875, 1.9375, 432.0, 3 * 2.0 ** -10, 5 * 2.0 ** -10,
                         2.0 ** -10, 15 * 2.0 ** -10]) * 6
    mx = torch.tensor([6.0, 4.0, 3.5, 7.0, 8.0, 6 * 2.0 ** -127, 6 * 2.0 ** -128,
                       6 * 2.0 ** -140])
    amaxes = torch.cat([mids, mx, torch.nextafter(mx, torch.tensor(INF)),
                        torch.nextafter(mx, torch.tensor(0.0))])
    g = gen(2)
    rows = [torch.tensor([2688.0])]
    rows += [torch.cat([a.view(1), (torch.rand(e - 1, generator=g) * 2 - 1) * a]) for a in amaxes]
    return _fill(rows, e, 2)


def case_scale_order(e: int) -> torch.Tensor:
    """Block amaxes for which TE's older scale order (a_b / 6) * S_enc gives another E4M3
    scale than the "te" order a_b * (S_enc * fp32(1/6)), picked with the reference. Such
    blocks are rare and need a suitable tensor amax (bf16 values, A = 376: ~1 % of them)."""
    g = gen(16)
    amax = torch.tensor(376.0)
    a = (torch.rand(1 << 12, generator=g) * amax).bfloat16().float()
    te, _ = block_scales(a, amax, "te")
    old, _ = block_scales(a, amax, "te_v2_8")
    picked = a[te.float() != old.float()][:27]
    assert len(picked) == 27
    rows = [amax.view(1)]
    rows += [torch.cat([v.view(1), (torch.rand(e - 1, generator=g) * 2 - 1) * v]) for v in picked]
    return _fill(rows, e, 16)


def case_enc_formula(e: int) -> torch.Tensor:
    """Elements whose E2M1 rounding depends on the exact encode-scale formula: for some E4M3
    scales the reference's 1 / (s_b * (1 / S_enc)) and S_enc / s_b differ in the last bit,
    and these x (at and next to threshold / enc) round differently under the two."""
    amax = torch.tensor(1234.567)
    s_enc = rdiv(2688.0, amax)
    s_b = torch.arange(1, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    enc, alt = 1.0 / (s_b * (1.0 / s_enc)), s_enc / s_b
    d = enc != alt
    rows = [amax.view(1)]
    for sb, en, al in zip(s_b[d][:27], enc[d], alt[d]):
        x = TIES / en
        x = torch.cat([x, torch.nextafter(x, torch.tensor(INF)),
                       torch.nextafter(x, torch.tensor(0.0))])
        a_b = (sb / (s_enc * INV6)).view(1)  # a block amax whose E4M3 scale is s_b
        assert block_scales(a_b, amax)[0].float() == sb
        rows.append(torch.cat([a_b, x[e2m1.round_rne(x * en) != e2m1.round_rne(x * al)]]))
    return _fill(rows, e, 17)


def case_zeros(e: int) -> torch.Tensor:
    """+-0.0 (NVFP4 writes +0 for -0.0, MXFP4 keeps -0.0), all-zero blocks, tiny negatives
    that round to -0."""
    rows = [torch.tensor([5.0, -0.0, 0.0, -1e-3, 1e-3, -0.0]), torch.zeros(1),
            torch.tensor([-0.0]), torch.tensor([0.0, -0.0]),
            torch.tensor([1.0, -0.0, -0.05, -0.125, -0.1249, 0.0])]
    return _fill(rows, e, 3)


def case_all_zero(e: int) -> torch.Tensor:
    """A zero tensor with some -0.0: A = 0, S_enc = FLT_MAX, every scale 0."""
    x = torch.zeros(12, e)
    x[::3, 1::2] = -0.0
    return x


def case_tiny_scales(e: int) -> torch.Tensor:
    """Blocks far below the tensor amax (1e4): E4M3 scales normal, subnormal and zero (their
    elements clamp to +-6 and decode to 0); MXFP4 exponents down to the -127 clamp."""
    x = torch.randn(12, e, generator=gen(4))
    x[0, 0] = 1e4
    for i, s in enumerate([1.0, 0.3, 0.1, 0.03, 0.01, 1e-3, 1e-4, 1e-6, 1e-30, 1e-38, 1e-44]):
        x[i + 1] *= s
    return x


def case_huge(e: int) -> torch.Tensor:
    """1e38, +-FLT_MAX and small values beside them (A = FLT_MAX)."""
    rows = [torch.tensor([FLT_MAX, 1.0, -2.0, 1e30]), torch.tensor([-FLT_MAX, 3e38, 0.5]),
            torch.tensor([1e38, -1e38, 1e37, 6.0]), torch.tensor([1e-3, 2.0])]
    return _fill(rows, e, 5)


def case_subnormal(e: int) -> torch.Tensor:
    """fp32 subnormal inputs: blocks of them beside normal blocks, and a block mixing them
    with a normal value."""
    sub = torch.tensor([1e-40, -1e-45, 3e-39, -5e-42, 1.1754942e-38, -2e-44])
    return _fill([torch.tensor([1.0, 0.5]), sub, sub * 0.5, torch.cat([sub, torch.ones(1)])],
                 e, 6)


def case_all_subnormal(e: int) -> torch.Tensor:
    """A tensor of fp32 subnormals only: A is subnormal, 2688 / A overflows to FLT_MAX."""
    return torch.randn(12, e, generator=gen(7)) * 1e-39


def case_nonfinite(e: int) -> torch.Tensor:
    """NaN in one block, +Inf in another, -Inf and NaN in a third: those decode to NaN, the
    tensor amax comes from the finite blocks."""
    x = torch.randn(12, e, generator=gen(8))
    x[0, 0] = 30.0
    x[2, 3], x[5, 0], x[7, e - 1], x[7, 1] = NAN, INF, -INF, NAN
    x[9, 2] = 1e5  # a big value in a non-finite block must not reach A
    x[9, 0] = NAN
    return x


def case_lognormal(e: int) -> torch.Tensor:
    """Random normal values with a lognormal scale per block (spread over ~25 binades)."""
    g = gen(9)
    return torch.randn(12, e, generator=g) * torch.exp(torch.randn(12, 1, generator=g) * 4)


CASES = {f.__name__[5:]: f for f in (
    case_ties, case_scale_edges, case_scale_order, case_enc_formula, case_zeros, case_all_zero,
    case_tiny_scales, case_huge, case_subnormal, case_all_subnormal, case_nonfinite,
    case_lognormal)}

# every format and layout, every E8M0 mode once
LAYOUTS = {
    "nvfp4_1x16": QuantSpec("nvfp4"),
    "nvfp4_1x16_axis0": QuantSpec("nvfp4", axis=0),
    "nvfp4_16x16": QuantSpec("nvfp4", block=(16, 16)),
    "mxfp4_1x32_ceil": QuantSpec("mxfp4"),
    "mxfp4_1x32_floor_axis0": QuantSpec("mxfp4", axis=0, mx_scale="floor"),
    "mxfp4_1x32_even": QuantSpec("mxfp4", mx_scale="even"),
    "mxfp4_32x32_ceil": QuantSpec("mxfp4", block=(32, 32)),
}


def adversarial(case: str, spec: QuantSpec) -> torch.Tensor:
    br, bc = block_shape(spec)
    return place(CASES[case](br * bc), spec)


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_adversarial_inputs(layout, case):
    spec = LAYOUTS[layout]
    check(adversarial(case, spec), spec)


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
    g = gen(10)
    x = torch.randn(shape, generator=g) * torch.exp(torch.randn(shape[:-1] + (1,),
                                                                generator=g) * 3)
    check(x, LAYOUTS[layout])


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("rounding", ["rne", "sr_hw8", "sr_exact"])
@pytest.mark.parametrize("layout", ["nvfp4_1x16", "mxfp4_1x32_floor_axis0"])
def test_roundings_and_dtypes(layout, rounding, dtype):
    """SR bits are the reference's: same key, same element index, same comparisons."""
    base = LAYOUTS[layout]
    sr = rounding != "rne"
    spec = QuantSpec(base.fmt, axis=base.axis, mx_scale=base.mx_scale,
                     rounding="sr" if sr else "rne", sr_mode=rounding[3:] if sr else "hw8")
    x = adversarial("lognormal", spec).to(dtype)
    x[1, 1] = -0.0
    check(x, spec, seed=1234, stream=Stream(layer=3, step=17, gemm=2, operand=1))


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
    r = random_bits(torch.arange(math.prod(shape)).view(shape), key)
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


def test_mxfp4_scale_is_none_and_outputs_are_new_fp32():
    x = torch.randn(4, 64, generator=gen(14)).bfloat16()
    local, scale = fp4.fp4_operand(x, QuantSpec("mxfp4"), None)
    assert scale is None and local.dtype == F32 and local.shape == x.shape
    local, scale = fp4.fp4_operand(x, QuantSpec("nvfp4"), None)
    assert scale.dtype == F32 and scale.shape == () and local.data_ptr() != x.data_ptr()


def test_empty_tensor():
    """No launch; MXFP4 equals the reference, NVFP4 (where the reference's amax of nothing
    raises) gives A = 0."""
    x = torch.empty(0, 32)
    check(x, QuantSpec("mxfp4"))
    local, scale = fp4.fp4_operand(x, QuantSpec("nvfp4"), None)
    assert local.shape == x.shape and scale.item() == 0.0


def test_supports():
    yes = [QuantSpec("nvfp4"), QuantSpec("nvfp4", axis=0), QuantSpec("nvfp4", axis=-2),
           QuantSpec("nvfp4", block=(16, 1)), QuantSpec("nvfp4", block=(16, 16)),
           QuantSpec("nvfp4", rounding="sr", sr_mode="exact"), QuantSpec("mxfp4"),
           QuantSpec("mxfp4", block=(32, 32), mx_scale="even"), QuantSpec("mxfp4", axis=1),
           QuantSpec("nvfp4", block=(1, 32))]
    no = [QuantSpec("nvfp4", order="te_v2_8"), QuantSpec("nvfp4", order="torchao"),
          QuantSpec("nvfp4", rht=16), QuantSpec("nvfp4", axis=0, rht=16),
          QuantSpec("mxfp4", rht=32), QuantSpec("fp8_e4m3"),
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
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(4096, 4096, device="cuda", generator=g)
    x = (x * torch.exp(torch.randn(4096, 1, device="cuda", generator=g) * 2)).bfloat16()
    check(x, spec, seed=5, stream=Stream(layer=1, step=2))


@needs_cuda
@pytest.mark.parametrize("spec", [
    QuantSpec("nvfp4", axis=0), QuantSpec("nvfp4", axis=0, rounding="sr"),
    QuantSpec("mxfp4", axis=0, rounding="sr")], ids=["nvfp4", "nvfp4_sr", "mxfp4_sr"])
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_realistic_wgrad_cuda(spec, dtype):
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(8192, 1024, device="cuda", generator=g).to(dtype)
    check(x, spec, seed=9, stream=Stream(layer=4, step=100, operand=1))
