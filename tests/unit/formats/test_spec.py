"""QuantSpec validation: every bad value fails at construction, naming the field and the choices."""
import pytest
import torch

from nvfp4_lab.formats import QuantSpec, RHTSpec, quantize


@pytest.mark.parametrize("field, value, allowed", [
    ("fmt", "nvfp8", "nvfp4, mxfp4, fp8_e4m3, fp8_e5m2, bf16"),
    ("rounding", "nearest", "rne, sr"),
    ("sr_mode", "hw4", "hw8, exact"),
    ("order", "te_v3", "te, te_v2_8, torchao"),
    ("mx_scale", "round", "ceil, floor, even"),
])
def test_bad_choice_names_field_and_allowed_values(field, value, allowed):
    with pytest.raises(ValueError) as err:
        QuantSpec(**{field: value})
    assert f"{field}={value!r}" in str(err.value) and allowed in str(err.value)


@pytest.mark.parametrize("kwargs, words", [
    (dict(fmt="nvfp4", block=None), "needs blocks"),
    (dict(fmt="nvfp4", block=(16, 32)), "(1, b), (b, 1) or (b, b)"),
    (dict(fmt="nvfp4", block=(1, 24)), "powers of two"),
    (dict(fmt="fp8_e4m3", rounding="sr"), "FP4 elements only"),
    (dict(fmt="nvfp4", block=(16, 16), rht=16), "needs 1D blocks"),
])
def test_inconsistent_specs_are_rejected(kwargs, words):
    with pytest.raises(ValueError, match=None) as err:
        QuantSpec(**kwargs)
    assert words in str(err.value)


@pytest.mark.parametrize("size", [0, 1, 3, 24, 512])
def test_rht_size_must_be_power_of_two_up_to_256(size):
    with pytest.raises(ValueError, match=f"got {size}"):
        RHTSpec(size=size)


def test_rht_sign_policy_is_checked():
    with pytest.raises(ValueError, match="rht.signs='random'"):
        RHTSpec(signs="random")


def test_defaults_per_format():
    assert QuantSpec("nvfp4").block == (1, 16)
    assert QuantSpec("mxfp4").block == (1, 32)
    assert QuantSpec("fp8_e4m3").block is None
    assert QuantSpec("nvfp4", rht=32).rht == RHTSpec(size=32)
    # (b, 1) means blocks along dim -2, the same as (1, b) with axis=-2
    assert QuantSpec("nvfp4", block=(16, 1)).layout == QuantSpec("nvfp4", axis=-2).layout


def test_spec_and_keywords_are_exclusive():
    with pytest.raises(TypeError, match="either a QuantSpec or keyword"):
        quantize(torch.ones(16), QuantSpec("nvfp4"), block=(1, 16))


def test_specs_are_hashable_and_compare_by_value():
    assert hash(QuantSpec("nvfp4", rht=16)) == hash(QuantSpec("nvfp4", rht=RHTSpec(16)))
    assert QuantSpec("nvfp4") != QuantSpec("nvfp4", rounding="sr")
