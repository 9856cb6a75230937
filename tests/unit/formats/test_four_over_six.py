"""4/6 block-scale selection: byte equality with an independent transcription of TE's
reference (tests/helpers/four_over_six_reference.py, from docs/numerics.md), on inputs built to
hit its edges: exact ties between the candidates, the x1.5 candidate saturating at the E4M3
limit, zero blocks, subnormal and zero block scales, huge and tiny magnitudes, -0.0; 1x16
blocks and 16x16 tiles, MAE and MSE, L = 256 and 448, fp32 and bf16; eager and compiled."""
from __future__ import annotations

import pytest
import torch
from helpers.four_over_six_reference import decode, four_over_six_reference
from helpers.te_reference import e4m3_round, te_nvfp4_reference, te_qgemm

from nvfp4_lab.formats import QuantSpec, fake_quantize, quantize
from nvfp4_lab.quant import Backend, compiled
from nvfp4_lab.quant.gemm import Parts, gemm

TILES = ((1, 16), (16, 16))


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def adversarial(seed: int, dtype=torch.float32) -> torch.Tensor:
    """A 64x64 tensor whose 16x16 tiles (and 1x16 rows) mix the cases that matter."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 64, generator=g)
    # tile (0, 0): values k/12 of a power-of-two amax that both candidates hold exactly
    # (k in 0, 3, 6, 12): every error is 0, a tie, which must keep the standard scale
    ks = torch.tensor([0.0, 3.0, 6.0, 12.0])
    x[:16, :16] = ks[torch.randint(0, 4, (16, 16), generator=g)] / 12 * 8.0
    x[:16, 0] = 8.0
    x[:16, 1] = -0.0
    # tile (0, 1): values on the map-to-4 grid (k/4 of the amax): map-to-4 is exact there
    grid4 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]) / 4
    x[:16, 16:32] = grid4[torch.randint(0, 7, (16, 16), generator=g)] * 8.0
    x[:16, 16] = 8.0
    x[16:32, :16] = 0.0                                      # a zero tile
    x[16:32, 16:32] *= 1e-36                                 # tiny: subnormal / zero scales
    x[32:48, :16] *= 1e-3                                    # small beside the rest
    x[48:, 48:] *= 1e30                                      # huge: sets the tensor amax
    x[48:, 48] = 3.0e38                                      # near FLT_MAX
    return x.to(dtype)


def random_blocks(seed: int) -> torch.Tensor:
    """Many random blocks with heavy-tailed amaxes: plenty of near-ties."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(128, 256, generator=g)
    return x * torch.exp(2 * torch.randn(128, 16, generator=g)).repeat_interleave(16, dim=1)


def check(x: torch.Tensor, error: str, limit: int, tile) -> None:
    q = quantize(x, "nvfp4", block=tile, four_over_six=error, e4m3_limit=limit)
    codes, scales, amax = four_over_six_reference(x, error, limit, tile)
    assert torch.equal(q.codes(), codes)
    assert torch.equal(bits(q.scales), bits(scales))
    assert torch.equal(bits(q.amax), bits(amax))
    expected = decode(codes, scales, amax, limit, tile)
    assert torch.equal(bits(q.dequantize()), bits(expected))
    assert torch.equal(bits(fake_quantize(x.float(), "nvfp4", block=tile, four_over_six=error,
                                          e4m3_limit=limit)), bits(expected))


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("error", ["mae", "mse"])
@pytest.mark.parametrize("limit", [256, 448])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bytes_equal_the_transcription_on_adversarial_tensors(tile, error, limit, dtype):
    for seed in range(3):
        check(adversarial(seed, dtype), error, limit, tile)


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("error", ["mae", "mse"])
def test_bytes_equal_the_transcription_on_random_blocks(tile, error):
    for seed in range(4):
        check(random_blocks(seed), error, 256, tile)


def test_ties_keep_the_standard_scale_and_exact_map_to_4_blocks_take_it():
    """Two tiles at the tensor amax 8 (L = 256: base = fp32(8/6) * 192 = 256): one of values
    both candidates hold exactly (errors 0 and 0, a tie), one on the map-to-4 grid."""
    g = torch.Generator().manual_seed(0)
    x = torch.empty(16, 32)
    x[:, :16] = torch.tensor([0.0, 2.0, 4.0, 8.0])[torch.randint(0, 4, (16, 16), generator=g)]
    x[:, 16:] = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0])[
        torch.randint(0, 7, (16, 16), generator=g)]
    x[0, 0] = x[0, 16] = 8.0
    x[1, 16] = 3.0                       # 3/8 of the amax: 2.25 on map-to-6, 1.5 on map-to-4
    q = quantize(x, "nvfp4", block=(16, 16), four_over_six="mae")
    assert q.scales.float().tolist() == [[256.0, 384.0]]


def test_random_blocks_choose_both_candidates():
    """Over heavy-tailed random blocks both candidates win somewhere (a test that only saw
    one could not tell 4/6 from plain NVFP4)."""
    x = random_blocks(0)
    q = quantize(x, "nvfp4", four_over_six="mae")
    a_b = x.reshape(128, 16, 16).abs().amax(-1)
    s_enc = torch.tensor(1536.0) / x.abs().amax()
    s6 = e4m3_round(torch.minimum((a_b / torch.tensor(6.0)) * s_enc, torch.tensor(448.0)))
    took6 = (q.scales.float() == s6).float().mean()
    assert 0.05 < took6 < 0.95, took6


def test_the_x15_candidate_saturates_at_the_e4m3_limit_with_l448():
    x = torch.zeros(1, 16)
    x[0, 0], x[0, 1] = 1.0, 0.7      # block amax = tensor amax: base = 448, x1.5 -> 448
    q = quantize(x, "nvfp4", four_over_six="mae", e4m3_limit=448)
    codes, scales, _ = four_over_six_reference(x, "mae", 448)
    assert float(scales.float()[0, 0]) == 448.0 and torch.equal(q.codes(), codes)


@pytest.mark.parametrize("tile", TILES)
def test_compiled_equals_eager(tile):
    x = adversarial(1)
    spec = QuantSpec("nvfp4", block=tile, four_over_six="mse")
    assert torch.equal(bits(compiled.fake_quantize(x, spec)),
                       bits(fake_quantize(x, spec)))


def test_4over6_lowers_the_error_it_minimises():
    x = random_blocks(5)
    plain = (quantize(x, "nvfp4", order="te_v2_8").dequantize() - x).abs().sum()
    four6 = (quantize(x, "nvfp4", four_over_six="mae", e4m3_limit=256).dequantize() - x)
    assert four6.abs().sum() < plain


@pytest.mark.parametrize("fields,named", [
    ({"fmt": "mxfp4"}, "fmt=mxfp4"), ({"rounding": "sr"}, "rounding=sr"),
    ({"rht": 16}, "rht=16"), ({"block": (1, 32)}, "block=(1, 32)"),
    ({"order": "torchao"}, "order=torchao"), ({"four_over_six": "l1"}, "four_over_six='l1'"),
])
def test_refused_combinations_name_the_field(fields, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        QuantSpec(**{"fmt": "nvfp4", "four_over_six": "mae", **fields})


def test_the_256_limit_is_for_4over6_only():
    with pytest.raises(ValueError, match="e4m3_limit=256 is for 4/6"):
        QuantSpec("nvfp4", e4m3_limit=256)
    assert QuantSpec("nvfp4", four_over_six="mae").e4m3_limit == 256
    assert QuantSpec("nvfp4").e4m3_limit == 448


@pytest.mark.parametrize("four6_x,four6_w", [(True, True), (True, False), (False, True)])
def test_gemm_alpha_uses_each_operands_limit(four6_x, four6_w):
    """K = 16: every partial sum is exact, so the emulated GEMM must equal TE's qgemm bit for
    bit, alpha = (A_x A_w) / (6 L_x * 6 L_w) with L = 256 for a 4/6 operand."""
    def operand(t, four6):
        spec = QuantSpec("nvfp4", four_over_six="mae" if four6 else None)
        local, amax = Backend().operand(t, spec)
        ref = four_over_six_reference(t) if four6 else te_nvfp4_reference(t)
        return Parts(local, amax, True, spec.e4m3_limit), ref

    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(32, 16, generator=g) * 2.0 ** float(torch.randint(-30, 30, (1,)))
        w = torch.randn(24, 16, generator=g)
        (a, (cx, sx, ax)), (b, (cw, sw, aw)) = operand(x, four6_x), operand(w, four6_w)
        want = te_qgemm(cx, sx, ax, cw, sw, aw, (256 if four6_x else 448, 256 if four6_w else 448))
        assert torch.equal(bits(gemm(a, b.T, torch.float32)), bits(want)), seed
