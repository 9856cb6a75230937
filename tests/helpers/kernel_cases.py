"""Inputs and comparisons shared by the kernel tests.

FP4 (``test_fp4_kernels``, ``test_quantize_storage``): adversarial blocks, one builder per
case (``CASES``), placed where a layout has its blocks (``adversarial``), so that every layout
sees the same block contents. FP8 (``test_fp8_kernels``, ``test_quantize_storage``): tensors
of ``FP8_SHAPE`` with RNE ties in every block, random magnitudes, and zero / subnormal / huge
/ non-finite regions.
"""
from __future__ import annotations

import math

import pytest
import torch

from nvfp4_lab.formats import QuantSpec, Stream, e2m1
from nvfp4_lab.formats.nvfp4 import block_scales
from nvfp4_lab.formats.scales import rdiv

F32, BF16 = torch.float32, torch.bfloat16
FLT_MAX = torch.finfo(F32).max
INV6 = float(torch.tensor(1 / 6, dtype=F32))
NAN, INF = float("nan"), float("inf")
CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
# the interpreter runs the kernels in numpy, which warns about the inf/NaN lanes of non-finite
# blocks, 2688 / 0 for an all-zero tensor and fp8 scales that overflow before their clamp
interpreter_warnings = pytest.mark.filterwarnings("ignore:.* encountered in :RuntimeWarning")


# ----------------------------------------------------------------------------- comparison
def assert_bits_equal(got: torch.Tensor, ref: torch.Tensor, what: str = "local") -> None:
    """Same shape and dtype, NaN at the same positions, equal int32 bit patterns elsewhere."""
    assert got.shape == ref.shape and got.dtype == ref.dtype == F32, (got.shape, ref.shape)
    if got.dim() == 0:  # nonzero() of a 0-d tensor has no elements, even where True
        got, ref = got.reshape(1), ref.reshape(1)
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(got), nan), f"{what}: NaN positions differ"
    g, r = got.view(torch.int32), ref.view(torch.int32)
    bad = ((g != r) & ~nan).nonzero()
    if bad.numel():
        i = tuple(bad[0].tolist())
        raise AssertionError(f"{what}: {len(bad)} elements differ, first at {i}: kernel "
                             f"{got[i].item()!r} ({int(g[i].item()) & 0xFFFFFFFF:#010x}), "
                             f"reference {ref[i].item()!r} ({int(r[i].item()) & 0xFFFFFFFF:#010x})")


# ----------------------------------------------------------------------------- FP4 inputs
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
        for chunk in torch.split(t, e - 1):  # every block starts with its amax 6
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


def adversarial(case: str, spec: QuantSpec) -> torch.Tensor:
    br, bc = block_shape(spec)
    return place(CASES[case](br * bc), spec)


def row_scaled(shape: tuple[int, ...], seed: int = 10) -> torch.Tensor:
    """Normal values times e^(3 N(0, 1)) per index of the leading dims: for tails and odd
    shapes, blocks of very different magnitudes."""
    g = gen(seed)
    return torch.randn(shape, generator=g) * torch.exp(torch.randn(shape[:-1] + (1,),
                                                                   generator=g) * 3)


ROUNDINGS = ("rne", "sr_hw8", "sr_exact")
SR_STREAM = Stream(layer=3, step=17, gemm=2, operand=1)


def rounding_case(base: QuantSpec, rounding: str,
                  dtype: torch.dtype) -> tuple[QuantSpec, torch.Tensor]:
    """base with rounding "rne" | "sr_hw8" | "sr_exact", and lognormal blocks in dtype with a
    -0.0 (seed 1234 and ``SR_STREAM`` pick the SR bits)."""
    sr = rounding != "rne"
    spec = QuantSpec(base.fmt, axis=base.axis, mx_scale=base.mx_scale,
                     rounding="sr" if sr else "rne", sr_mode=rounding[3:] if sr else "hw8")
    x = adversarial("lognormal", spec).to(dtype)
    x[1, 1] = -0.0
    return spec, x


def realistic_rows() -> torch.Tensor:
    """bf16 [4096, 4096] on the GPU, rows of magnitudes e^(2 N(0, 1)): activations."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(4096, 4096, device="cuda", generator=g)
    return (x * torch.exp(torch.randn(4096, 1, device="cuda", generator=g) * 2)).bfloat16()


def realistic_wgrad(dtype: torch.dtype) -> torch.Tensor:
    """[8192 tokens, 1024] on the GPU: a Wgrad operand, blocked along the tokens (axis 0)."""
    g = torch.Generator(device="cuda").manual_seed(1)
    return torch.randn(8192, 1024, device="cuda", generator=g).to(dtype)


ROWS_STREAM = Stream(layer=1, step=2)  # with seed 5, for realistic_rows
WGRAD_STREAM = Stream(layer=4, step=100, operand=1)  # with seed 9, for realistic_wgrad

# ----------------------------------------------------------------------------- FP8 inputs
FP8_SHAPE = (130, 140)  # one partial block along each dim for 128-element blocks
FP8_DTYPE = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def fp8_grid(fmt: str) -> torch.Tensor:
    """The non-negative finite values of ``fmt``, ascending, fp32."""
    v = torch.arange(128, dtype=torch.uint8).view(FP8_DTYPE[fmt]).float()
    return v[torch.isfinite(v)]


def tie_values(fmt: str) -> torch.Tensor:
    """Grid values, midpoints (RNE ties) and their fp32 neighbours, +-0.0, both signs."""
    g = fp8_grid(fmt)
    mid = (g[:-1] + g[1:]) / 2  # exact in fp32
    v = torch.cat([g, mid, torch.nextafter(mid, mid + 1), torch.nextafter(mid, mid - 1)])
    return torch.cat([v, -v, torch.tensor([0.0, -0.0])])


def block_ids(block: tuple[int, int], shape: tuple[int, int] = FP8_SHAPE) -> torch.Tensor:
    """int64 [shape]: the index of the block each element belongs to."""
    i = torch.arange(shape[0])[:, None] // block[0]
    j = torch.arange(shape[1])[None, :] // block[1]
    ids: torch.Tensor = i * (shape[1] // block[1] + 1) + j
    return ids


def ties_tensor(fmt: str, block: tuple[int, int], seed: int = 0) -> torch.Tensor:
    """Tie values in every block, the block's first element +-fp8_max, all times 2^k(block)."""
    g = torch.Generator().manual_seed(seed)
    v = tie_values(fmt)
    x = v[torch.randint(len(v), FP8_SHAPE, generator=g)]
    ids = block_ids(block)
    i, j = torch.arange(FP8_SHAPE[0])[:, None], torch.arange(FP8_SHAPE[1])[None, :]
    first = (i % block[0] == 0) & (j % block[1] == 0)
    fp8_max = float(fp8_grid(fmt)[-1])
    x = torch.where(first, fp8_max * torch.sign(torch.randn(FP8_SHAPE, generator=g)), x)
    k = torch.randint(-130, 101, (int(ids.max()) + 1,), generator=g)
    return x * torch.exp2(k[ids].float())


def random_tensor(seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(FP8_SHAPE, generator=g)
    return x * torch.exp(3 * torch.randn(FP8_SHAPE[0], 1, generator=g))


def special_tensor(seed: int = 2) -> torch.Tensor:
    """Zero, subnormal, huge and non-finite blocks in rows and columns of their own."""
    x = random_tensor(seed)
    x[0:40, 0:40] = 0.0
    x[40:60, 0:40] = -0.0
    x[60:70, :] = 1e-45 * torch.randint(-3, 4, (10, FP8_SHAPE[1]), generator=torch.Generator()
                                        .manual_seed(seed)).float()
    x[70:75, :] *= 1e-40
    x[75:80, :] = x[75:80, :].clamp(-1, 1) * 3.0e38
    x[100, 3], x[129, 139], x[3, 135] = float("nan"), float("inf"), float("-inf")
    return x
