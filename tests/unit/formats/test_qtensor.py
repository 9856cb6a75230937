"""QTensor's storage form: the bf16 identity format, packing, and the readable repr."""
import torch

from nvfp4_lab.formats import fake_quantize, quantize


def test_bf16_format_is_a_bf16_round_trip():
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(0)) * 1e3
    q = quantize(x, "bf16")
    assert q.data.dtype == torch.bfloat16 and q.scales is None and q.amax is None
    expected = x.to(torch.bfloat16).float()
    assert torch.equal(q.dequantize(), expected)
    assert torch.equal(fake_quantize(x, "bf16"), expected)


def test_packed_data_halves_the_canonical_length():
    x = torch.randn(3, 33)  # padded to 48 along the blocked axis
    q = quantize(x, "nvfp4")
    assert q.data.shape == (3, 24) and q.codes().shape == (3, 48)
    assert q.scales.shape == (3, 3) and q.scales.dtype == torch.float8_e4m3fn


def test_repr_names_format_layout_and_dtypes():
    q = quantize(torch.randn(32, 64), "nvfp4", axis=0, rht=16, rounding="sr")
    r = repr(q)
    for part in ("nvfp4", "shape=(32, 64)", "axis=0", "rht=16/fixed", "rounding=sr/hw8",
                 "float8_e4m3fn (64, 2)", "uint8 (64, 16)"):
        assert part in r, (part, r)
