"""Recipe: validation messages, groups, plain-data round trips, the operand plan of every
preset against docs/experiments.md, The recipe; the precision switch and the high-precision
block counts."""
from __future__ import annotations

import json

import pytest

from nvfp4_lab.formats import RHTSpec
from nvfp4_lab.quant import (
    GROUPS,
    OPERANDS,
    PRESETS,
    HighPrecision,
    QuantLinear,
    QuantState,
    Recipe,
    RHTConfig,
    Switch,
    from_dict,
    operand_plan,
    preset,
    switched_plan,
    to_dict,
)
from nvfp4_lab.quant.recipe import expand

BACKWARD = ("dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x")


# --- validation ---------------------------------------------------------------------------

# (changes, the field the message must name, the allowed values it must list)
BAD_VALUES = {
    "format": ({"format": "fp4"}, "format='fp4'", "bf16, fp8, mxfp4, nvfp4"),
    "weight_blocks": ({"weight_blocks": "2D"}, "weight_blocks='2D'", "1d, 1d_same_dim, 2d"),
    "act_blocks": ({"act_blocks": "2d"}, "act_blocks='2d'", "1d, 1d_same_dim"),
    "grad_blocks": ({"grad_blocks": "2d"}, "grad_blocks='2d'", "1d, 1d_same_dim"),
    "sr_mode": ({"sr_mode": "8bit"}, "sr_mode='8bit'", "hw8, exact"),
    "backend": ({"backend": "cuda"}, "backend='cuda'", "auto, reference, compiled, triton"),
    "mx_scale": ({"mx_scale": "up"}, "mx_scale='up'", "ceil, floor, even"),
    "rht.gemms": ({"rht": {"gemms": ["bprop"]}}, "rht.gemms='bprop'", "fprop, dgrad, wgrad"),
    "rht.signs": ({"rht": {"signs": "random"}}, "rht.signs='random'",
                  "none, fixed, per_layer, per_step, per_call"),
    "switch.passes": ({"switch": {"passes": "forward"}}, "switch.passes='forward'",
                      "fwd, bwd, both"),
    "switch.at_fraction>1": ({"switch": {"at_fraction": 1.5}}, "switch.at_fraction=1.5",
                             "float in [0, 1]"),
    "switch.at_fraction<0": ({"switch": {"at_fraction": -0.1}}, "switch.at_fraction=-0.1",
                             "float in [0, 1]"),
    "switch.at_fraction-str": ({"switch": {"at_fraction": "end"}},
                               "switch.at_fraction='end'", "float in [0, 1]"),
    "switch.at_step<0": ({"switch": {"at_step": -3}}, "switch.at_step=-3", "int >= 0"),
    "switch.at_step-str": ({"switch": {"at_step": "end"}}, "switch.at_step='end'", "int >= 0"),
    "hp.first<0": ({"high_precision": {"first": -1}}, "high_precision.first=-1", "int >= 0"),
    "hp.first=1.0": ({"high_precision": {"first": 1.0}}, "high_precision.first=1.0",
                     "float in [0, 1)"),
    "hp.last=1.5": ({"high_precision": {"last": 1.5}}, "high_precision.last=1.5",
                    "float in [0, 1)"),
    "hp.last-bool": ({"high_precision": {"last": True}}, "high_precision.last=True",
                     "int >= 0"),
    "block=24": ({"block": 24}, "block=24", "power of two >= 2"),
    "block=1": ({"block": 1}, "block=1", "power of two >= 2"),
    "block=0": ({"block": 0}, "block=0", "power of two >= 2"),
}


@pytest.mark.parametrize("build", [from_dict, lambda d: Recipe(**d)], ids=["from_dict", "Recipe"])
@pytest.mark.parametrize("case", list(BAD_VALUES), ids=list(BAD_VALUES))
def test_bad_value_names_the_field_and_the_allowed_values(case, build):
    changes, field, allowed = BAD_VALUES[case]
    with pytest.raises(ValueError) as err:
        build(changes)
    assert field in str(err.value)
    assert allowed in str(err.value)


@pytest.mark.parametrize("size", [0, 1, 12, 24, 512])
def test_rht_size_must_be_a_power_of_two(size):
    with pytest.raises(ValueError, match=r"power of two in 2\.\.256"):
        from_dict({"rht": {"size": size}})


def test_rht_size_error_names_the_field():
    with pytest.raises(ValueError, match=r"rht\.size"):
        from_dict({"rht": {"size": 12}})


@pytest.mark.parametrize("d, key, allowed", [
    ({"formats": "nvfp4"}, "'formats'", ("name, format, block, weight_blocks, act_blocks, "
                                         "grad_blocks, rht, sr, sr_mode, four_over_six, "
                                         "row_scaled, ms_eden, quantize, high_precision, "
                                         "switch, mx_scale, backend")),
    ({"rht": {"sizes": 16}}, "'sizes'", "gemms, size, signs, seed"),
    ({"high_precision": {"lasts": 2}}, "'lasts'", "first, last, names"),
    ({"switch": {"step": 100}}, "'step'", "at_step, at_fraction, passes"),
], ids=["top", "rht", "high_precision", "switch"])
def test_unknown_keys_are_named_with_the_allowed_keys(d, key, allowed):
    with pytest.raises(ValueError, match="unknown recipe key") as err:
        from_dict(d)
    msg = str(err.value)
    assert key in msg and f"allowed: {allowed}" in msg
    nested = next(iter(d))
    if isinstance(d[nested], dict):
        assert f"{nested}." in msg  # the nested key is reported with its section


def test_unknown_keys_in_replace_and_preset_changes():
    with pytest.raises(ValueError, match="'sizes'"):
        PRESETS["nvfp4"].replace(rht={"sizes": 32})
    with pytest.raises(ValueError, match="unknown recipe key 'fromat'"):
        preset("nvfp4", fromat="mxfp4")
    with pytest.raises(ValueError, match="quant='nvfp5' is not one of bf16, fp8, mxfp4, nvfp4, "
                                         "nvfp4_4over6, nvfp4_base, nvfp4_row_scaled, quartet_ii"):
        preset("nvfp5")


@pytest.mark.parametrize("field, items, bad", [
    ("sr", ["fprop.z"], "'fprop.z'"),
    ("sr", "grads", "'grads'"),
    ("quantize", ["weights", "everything"], "'everything'"),
    ("quantize", ["dgrad.x"], "'dgrad.x'"),
])
def test_unknown_operand_or_group_names_the_item_and_lists_choices(field, items, bad):
    with pytest.raises(ValueError) as err:
        from_dict({field: items})
    msg = str(err.value)
    assert msg.startswith(f"{field}: {bad} is not an operand or group")
    assert f"operands: {', '.join(OPERANDS)}" in msg
    assert f"groups: {', '.join(GROUPS)}" in msg


@pytest.mark.parametrize("fmt", ["fp8", "bf16"])
@pytest.mark.parametrize("sr", [["gradients"], ["fprop.x"], "all"])
def test_stochastic_rounding_is_for_fp4_only(fmt, sr):
    with pytest.raises(ValueError, match=f"stochastic rounding is for FP4 formats; "
                                         f"format={fmt} needs sr=\\[\\]"):
        from_dict({"format": fmt, "sr": sr, "rht": {"gemms": []}})
    assert from_dict({"format": fmt, "sr": [], "rht": {"gemms": []}}).sr == ()


def test_fp8_with_the_default_sr_is_rejected():
    """The default sr (gradients) is FP4-only: format=fp8 alone must not silently drop it."""
    with pytest.raises(ValueError, match="format=fp8 needs sr"):
        Recipe(format="fp8")


@pytest.mark.parametrize("d, fragments", [
    ({"weight_blocks": "2d", "sr": ["gradients", "dgrad.w"]},
     ["weight_blocks=2d", "reuses it in dgrad",
      "sr must list both fprop.w and dgrad.w or neither", "weight_blocks=1d"]),
    ({"weight_blocks": "1d_same_dim", "rht": {"gemms": []}, "quantize": ["fprop.w"]},
     ["weight_blocks=1d_same_dim", "quantize must list both fprop.w and dgrad.w"]),
    ({"act_blocks": "1d_same_dim", "sr": ["fprop.x"], "rht": {"gemms": []}},
     ["act_blocks=1d_same_dim", "sr must list both fprop.x and wgrad.x"]),
    ({"act_blocks": "1d_same_dim", "rht": {"gemms": ["wgrad"]}},
     ["act_blocks=1d_same_dim", "fprop and wgrad", "rht.gemms=['wgrad']",
      "needs act_blocks=1d"]),
    ({"weight_blocks": "2d", "rht": {"gemms": ["fprop"]}},
     ["weight_blocks=2d", "fprop and dgrad", "rht.gemms=['fprop']", "needs weight_blocks=1d"]),
    ({"weight_blocks": "2d", "rht": {"gemms": ["dgrad", "wgrad"]}},
     ["weight_blocks=2d", "rht.gemms=['dgrad', 'wgrad']"]),
    ({"grad_blocks": "1d_same_dim", "rht": {"gemms": ["wgrad"]}},
     ["grad_blocks=1d_same_dim", "dgrad and wgrad", "needs grad_blocks=1d"]),
], ids=["2d-sr-dgrad.w-only", "same-dim-w-quantize", "same-dim-x-sr", "same-dim-x-rht-wgrad",
        "2d-rht-fprop", "2d-rht-dgrad", "same-dim-dy-rht-wgrad"])
def test_reuse_conflicts(d, fragments):
    with pytest.raises(ValueError) as err:
        from_dict(d)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_reuse_is_free_of_conflicts_where_it_should_be():
    # 1D weights: each GEMM quantizes W itself, so the two uses may differ
    Recipe(weight_blocks="1d", sr=["gradients", "dgrad.w"], rht={"gemms": ["fprop"]})
    Recipe(weight_blocks="1d", quantize=["fprop.w"])
    # same-dim activations without RHT; 2D weights with RHT on Wgrad only (the paper's recipe)
    Recipe(act_blocks="1d_same_dim", rht={"gemms": []})
    Recipe(weight_blocks="2d", rht={"gemms": ["wgrad"]})
    # bf16 quantizes nothing, so an RHT cannot break a reuse
    Recipe(format="bf16", sr=[], rht={"gemms": ["fprop", "dgrad"]})


# --- groups, plain data -------------------------------------------------------------------

def test_groups_expand_to_the_documented_operands():
    assert OPERANDS == ("fprop.x", "fprop.w", "dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x")
    assert GROUPS == {
        "all": OPERANDS,
        "forward": ("fprop.x", "fprop.w"),
        "backward": BACKWARD,
        "weights": ("fprop.w", "dgrad.w"),
        "activations": ("fprop.x", "wgrad.x"),
        "gradients": ("dgrad.dy", "wgrad.dy"),
    }
    for group, ops in GROUPS.items():
        assert Recipe(quantize=[group], sr=[], weight_blocks="1d").quantize == ops
        assert expand("sr", group) == ops


def test_operand_lists_are_deduplicated_in_operand_order():
    assert expand("sr", ["wgrad.x", "gradients", "dgrad.dy", "fprop.x"]) == (
        "fprop.x", "dgrad.dy", "wgrad.dy", "wgrad.x")
    assert expand("sr", []) == ()
    r = Recipe(sr=["wgrad.dy", "dgrad.dy"], quantize="weights")  # a bare string is one item
    assert r.sr == ("dgrad.dy", "wgrad.dy")
    assert r.quantize == ("fprop.w", "dgrad.w")


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_round_trip_through_plain_data(name):
    recipe = PRESETS[name]
    d = to_dict(recipe)
    assert from_dict(d) == recipe
    # and through JSON, i.e. only plain types: what a YAML/JSON file gives back
    assert from_dict(json.loads(json.dumps(d))) == recipe
    assert preset(name) is recipe


def test_a_recipe_with_every_section_set_round_trips():
    recipe = from_dict({
        "name": "custom", "format": "mxfp4", "block": 32, "weight_blocks": "1d",
        "act_blocks": "1d", "grad_blocks": "1d",
        "rht": {"gemms": ["dgrad", "wgrad"], "size": 64, "signs": "per_call", "seed": 7},
        "sr": ["backward"], "sr_mode": "exact", "quantize": ["all"],
        "high_precision": {"first": 1, "last": 0.25, "names": ["*.fc2"]},
        "switch": {"at_fraction": 0.9, "passes": "fwd"}, "mx_scale": "even",
        "backend": "reference"})
    assert recipe.rht == RHTConfig(("dgrad", "wgrad"), 64, "per_call", 7)
    assert recipe.high_precision == HighPrecision(1, 0.25, ("*.fc2",))
    assert recipe.switch == Switch(at_fraction=0.9, passes="fwd")
    assert recipe.sr == BACKWARD
    assert from_dict(json.loads(json.dumps(to_dict(recipe)))) == recipe


def test_replace_with_nested_dicts():
    base = PRESETS["nvfp4"]
    r = base.replace(name="x", rht={"gemms": ["wgrad"], "size": 32, "signs": "per_call"},
                     high_precision={"last": 2, "names": ["*.fc2"]}, sr=["backward"],
                     weight_blocks="1d")
    assert r.rht == RHTConfig(gemms=("wgrad",), size=32, signs="per_call")
    assert r.high_precision == HighPrecision(last=2, names=("*.fc2",))
    assert r.sr == BACKWARD and r.weight_blocks == "1d" and r.name == "x"
    # fields not named are kept; the preset itself is unchanged (frozen)
    assert (r.format, r.quantize, r.sr_mode, r.switch) == (
        base.format, base.quantize, base.sr_mode, base.switch)
    assert base.high_precision == HighPrecision(last=0.2) and base.rht.size == 16
    # a nested dataclass is accepted as well as a dict
    assert base.replace(rht=RHTConfig(size=32)).rht.size == 32
    # and the result is validated like any recipe
    with pytest.raises(ValueError, match="format=fp8 needs sr"):
        base.replace(format="fp8")
    assert preset("nvfp4", rht={"size": 32}) == base.replace(rht={"size": 32})


def test_replace_merges_partial_nested_dicts():
    assert PRESETS["mxfp4"].replace(rht={"signs": "none"}).rht.size == 32
    assert preset("fp8", high_precision={"names": ["*.fc2"]}).high_precision.last == 2
    assert preset("nvfp4_base", rht={"size": 32}).rht.gemms == ()


def test_preset_can_rename():
    assert preset("nvfp4", name="E02-full").name == "E02-full"


def test_a_bare_string_is_one_name_pattern():
    assert from_dict({"high_precision": {"names": "blocks.0.*"}}).high_precision.names == (
        "blocks.0.*",)


@pytest.mark.parametrize("key", ["rht", "high_precision", "switch"])
def test_a_null_section_is_a_value_error(key):
    with pytest.raises(ValueError, match=key):
        from_dict({key: None})


# --- the operand plan of each preset (docs/experiments.md, The recipe) ------------------

def _describe(o):
    """(format, block, axis, rounding, rht size) of an operand, 'reuse <op>', or 'hp'."""
    if o.reuse:
        return f"reuse {o.reuse}"
    if o.spec is None:
        return "hp"
    s = o.spec
    assert o.rht == s.rht  # the operand's transform is the quantizer's transform
    return (s.fmt, s.block, s.axis, s.rounding, s.rht.size if s.rht else None)


EXPECTED_PLANS = {
    "nvfp4": {
        "fprop.x": ("nvfp4", (1, 16), -1, "rne", None),
        "fprop.w": ("nvfp4", (16, 16), -1, "rne", None),
        "dgrad.dy": ("nvfp4", (1, 16), -1, "sr", None),
        "dgrad.w": "reuse fprop.w",
        "wgrad.dy": ("nvfp4", (1, 16), 0, "sr", 16),
        "wgrad.x": ("nvfp4", (1, 16), 0, "rne", 16),
    },
    "mxfp4": {
        "fprop.x": ("mxfp4", (1, 32), -1, "rne", None),
        "fprop.w": ("mxfp4", (32, 32), -1, "rne", None),
        "dgrad.dy": ("mxfp4", (1, 32), -1, "sr", None),
        "dgrad.w": "reuse fprop.w",
        "wgrad.dy": ("mxfp4", (1, 32), 0, "sr", 32),
        "wgrad.x": ("mxfp4", (1, 32), 0, "rne", 32),
    },
    "fp8": {
        "fprop.x": ("fp8_e4m3", (1, 128), -1, "rne", None),
        "fprop.w": ("fp8_e4m3", (128, 128), -1, "rne", None),
        "dgrad.dy": ("fp8_e4m3", (1, 128), -1, "rne", None),
        "dgrad.w": "reuse fprop.w",
        "wgrad.dy": ("fp8_e4m3", (1, 128), 0, "rne", None),
        "wgrad.x": ("fp8_e4m3", (1, 128), 0, "rne", None),
    },
    "nvfp4_base": {
        "fprop.x": ("nvfp4", (1, 16), -1, "rne", None),
        "fprop.w": ("nvfp4", (1, 16), -1, "rne", None),
        "dgrad.dy": ("nvfp4", (1, 16), -1, "rne", None),
        "dgrad.w": ("nvfp4", (1, 16), 0, "rne", None),  # its own 1D quantization, out-features
        "wgrad.dy": ("nvfp4", (1, 16), 0, "rne", None),
        "wgrad.x": ("nvfp4", (1, 16), 0, "rne", None),
    },
}


@pytest.mark.parametrize("name", list(EXPECTED_PLANS))
def test_operand_plan_matches_the_paper(name):
    plan = operand_plan(PRESETS[name])
    assert list(plan) == list(OPERANDS)
    assert {op: _describe(o) for op, o in plan.items()} == EXPECTED_PLANS[name]
    for o in plan.values():
        if o.spec is not None:
            assert o.spec.sr_mode == "hw8" and o.stream_as is None
            if o.rht is not None:  # fixed sign vector, one seed (paper Sec. 4.2)
                assert o.rht == RHTSpec(size=o.rht.size, signs="fixed", seed=0)


def test_bf16_plan_quantizes_nothing():
    plan = operand_plan(PRESETS["bf16"])
    for op, o in plan.items():
        assert o.spec is None and o.rht is None, op
        if o.reuse:
            assert plan[o.reuse].spec is None


def test_plan_descriptions():
    plan = operand_plan(PRESETS["nvfp4"])
    assert plan["dgrad.w"].describe() == "= fprop.w"
    assert plan["fprop.w"].describe() == "nvfp4 16x16 axis=-1 rne"
    assert plan["wgrad.dy"].describe() == "nvfp4 1x16 axis=0 sr/hw8 rht16/fixed"
    assert operand_plan(PRESETS["bf16"])["fprop.x"].describe() == "high precision"


def test_unquantized_operand_keeps_its_gemms_transform():
    """An operand left out of `quantize` on an RHT GEMM still gets the transform, so that it
    cancels in the product."""
    plan = operand_plan(Recipe(quantize=["gradients"]))
    assert plan["wgrad.x"].spec is None and plan["wgrad.x"].rht == RHTSpec(16, "fixed", 0)
    assert plan["wgrad.dy"].spec.rht == RHTSpec(16, "fixed", 0)
    assert plan["fprop.x"].spec is None and plan["fprop.x"].rht is None


def test_block_override():
    plan = operand_plan(Recipe(format="fp8", block=32, sr=[], rht={"gemms": []}))
    assert plan["fprop.x"].spec.block == (1, 32)
    assert plan["fprop.w"].spec.block == (32, 32)
    assert PRESETS["fp8"].element_block == 128 and PRESETS["mxfp4"].element_block == 32


# --- the precision switch -----------------------------------------------------------------

def test_switched_plan_both():
    plan = operand_plan(PRESETS["nvfp4"])
    after = switched_plan(plan, Switch(at_step=10, passes="both").off)
    assert all(o.spec is None and o.rht is None and o.reuse is None for o in after.values())


def test_switched_plan_forward_only_keeps_the_2d_weight_for_dgrad():
    plan = operand_plan(PRESETS["nvfp4"])
    after = switched_plan(plan, Switch(at_step=10, passes="fwd").off)
    for op in ("fprop.x", "fprop.w"):
        assert after[op].spec is None and after[op].rht is None
    for op in ("dgrad.dy", "wgrad.dy", "wgrad.x"):
        assert after[op] == plan[op]
    # Dgrad reused Fprop's 2D weight; it now quantizes it itself, with Fprop's quantizer and
    # random stream, so backward sees the weight it saw before the switch
    assert after["dgrad.w"].reuse is None
    assert after["dgrad.w"].spec == plan["fprop.w"].spec
    assert after["dgrad.w"].stream_as == "fprop.w"


def test_switched_plan_forward_only_with_1d_weights_and_same_dim_activations():
    r = Recipe(weight_blocks="1d", act_blocks="1d_same_dim", sr=[], rht={"gemms": []})
    plan = operand_plan(r)
    after = switched_plan(plan, Switch(at_step=10, passes="fwd").off)
    assert after["dgrad.w"] == plan["dgrad.w"]  # its own 1D quantization, unchanged
    assert after["wgrad.x"].spec == plan["fprop.x"].spec
    assert after["wgrad.x"].stream_as == "fprop.x"


@pytest.mark.parametrize("name", ["nvfp4", "nvfp4_base"])
def test_switched_plan_backward_only(name):
    plan = operand_plan(PRESETS[name])
    after = switched_plan(plan, Switch(at_step=10, passes="bwd").off)
    assert after["fprop.x"] == plan["fprop.x"] and after["fprop.w"] == plan["fprop.w"]
    for op in BACKWARD:
        assert after[op].spec is None and after[op].rht is None and after[op].reuse is None


def test_switch_step_and_passes():
    assert Switch().step(1000) is None
    assert Switch(at_step=500).step(None) == 500
    assert Switch(at_fraction=0.82).step(1000) == 820
    assert Switch(at_fraction=1.0).step(1000) == 1000
    with pytest.raises(ValueError, match=r"switch\.at_fraction=0\.5 .*train\.max_steps"):
        Switch(at_fraction=0.5).step(None)
    assert [Switch(passes="fwd").off(g) for g in ("fprop", "dgrad", "wgrad")] == [
        True, False, False]
    assert [Switch(passes="bwd").off(g) for g in ("fprop", "dgrad", "wgrad")] == [
        False, True, True]
    assert all(Switch(passes="both").off(g) for g in ("fprop", "dgrad", "wgrad"))


def test_at_step_is_a_step_and_at_fraction_a_fraction_of_the_run():
    # the trap of the old `switch.at`: 1 meant step 1, 1.0 the end of the run
    assert from_dict({"switch": {"at_step": 1}}).switch.step(1000) == 1
    assert from_dict({"switch": {"at_fraction": 1.0}}).switch.step(1000) == 1000
    assert from_dict({"switch": {"at_step": 0}}).switch.step(1000) == 0
    # an int 0 or 1 is a fraction too
    assert Switch(at_fraction=1) == Switch(at_fraction=1.0)
    assert isinstance(Switch(at_fraction=1).at_fraction, float)
    assert Switch(at_fraction=0).step(1000) == 0
    # the step the old float `at` resolved to: round(fraction * max_steps)
    for max_steps in (10, 300, 1234, 10_000):
        for fraction in (0.82, 0.99, 0.5, 0.15):
            assert Switch(at_fraction=fraction).step(max_steps) == round(fraction * max_steps)


def test_switch_without_a_step_never_switches():
    for passes in ("fwd", "bwd", "both"):
        recipe = preset("nvfp4", switch={"passes": passes})
        assert recipe.switch.step(1000) is None and recipe.switch.step(None) is None


@pytest.mark.parametrize("build", [from_dict, lambda d: Recipe(**d),
                                   lambda d: preset("nvfp4", **d)],
                         ids=["from_dict", "Recipe", "preset"])
@pytest.mark.parametrize("switch, needles", [
    ({"at_step": 3, "at_fraction": 0.5},
     ["switch.at_step=3", "switch.at_fraction=0.5", "set one of switch.at_step, "
      "switch.at_fraction"]),
    ({"at_step": 0.82}, ["switch.at_step=0.82", "int >= 0", "switch.at_fraction=0.82"]),
    ({"at_step": 3.0}, ["switch.at_step=3.0", "int >= 0"]),
    ({"at_step": True}, ["switch.at_step=True", "int >= 0"]),
    ({"at_fraction": 5}, ["switch.at_fraction=5", "[0, 1]", "switch.at_step=5"]),
    ({"at_fraction": 1.01}, ["switch.at_fraction=1.01", "[0, 1]"]),
    ({"at_fraction": True}, ["switch.at_fraction=True", "[0, 1]"]),
    ({"at_fraction": float("nan")}, ["switch.at_fraction=nan", "[0, 1]"]),
    # the removed key, whatever its value, points at the two keys that replace it
    ({"at": 0.5}, ["switch.at=0.5", "switch.at_step", "switch.at_fraction"]),
    ({"at": 1}, ["switch.at=1", "switch.at_step", "switch.at_fraction"]),
    ({"at": None, "passes": "fwd"}, ["switch.at=None", "switch.at_step",
                                     "switch.at_fraction"]),
], ids=["both", "step-fraction", "step-float", "step-bool", "fraction-int", "fraction>1",
        "fraction-bool", "fraction-nan", "old-at-float", "old-at-int", "old-at-null"])
def test_bad_switch_is_refused_at_construction(build, switch, needles):
    with pytest.raises(ValueError) as err:
        build({"switch": switch})
    msg = str(err.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_the_removed_switch_at_names_the_keys_that_replace_it():
    with pytest.raises(ValueError, match=r"no longer a recipe key; set switch\.at_step .* or "
                                         r"switch\.at_fraction"):
        from_dict({"switch": {"at": 0.82, "passes": "both"}})


def test_layer_switches_plan_at_the_step():
    recipe = preset("nvfp4", switch={"at_fraction": 0.5, "passes": "fwd"})
    state = QuantState(max_steps=10)
    layer = QuantLinear(32, 32, recipe=recipe, state=state)
    assert layer.current_plan() == operand_plan(recipe)
    state.step = 4
    assert layer.current_plan() == operand_plan(recipe)
    state.step = 5
    assert layer.current_plan() == switched_plan(operand_plan(recipe), recipe.switch.off)


# --- HighPrecision.count ------------------------------------------------------------------

@pytest.mark.parametrize("value, n_blocks, expected", [
    (0.2, 4, 1),     # 0.8 rounds up
    (0.15, 20, 3),   # 0.15 * 20 = 3.0000000000000004: 3, not 4
    (0.2, 20, 4),    # the 1.2B model's last 4 of 20
    (0.1, 4, 1),
    (0.5, 5, 3),
    (0.3, 10, 3),
    (0.7, 10, 7),
    (0.0, 4, 0),
    (0.99, 4, 4),
    (0, 4, 0),
    (2, 4, 2),
    (4, 4, 4),
])
def test_high_precision_count(value, n_blocks, expected):
    hp = HighPrecision(first=value, last=value)
    assert hp.count("first", n_blocks) == expected
    assert hp.count("last", n_blocks) == expected


def test_exact_fractions_count_exactly():
    for n in range(1, 65):
        for k in range(n):
            assert HighPrecision(last=k / n).count("last", n) == k, (k, n)


@pytest.mark.parametrize("key, value", [("first", 5), ("last", 9)])
def test_high_precision_count_too_many_blocks(key, value):
    hp = HighPrecision(**{key: value})
    with pytest.raises(ValueError, match=f"high_precision.{key}={value} selects {value} "
                                         f"blocks, the model has 4"):
        hp.count(key, 4)


# ------------------------------------------------------------------------------ 4/6
def test_4over6_preset_plans_it_on_the_forward_activations_and_the_weights_only():
    plan = operand_plan(preset("nvfp4_4over6"))
    four6 = {op for op, o in plan.items() if o.spec is not None and o.spec.four_over_six}
    assert four6 == {"fprop.x", "fprop.w"}                      # dgrad.w reuses fprop.w
    assert plan["dgrad.w"].reuse == "fprop.w"
    assert (plan["fprop.x"].spec.four_over_six, plan["fprop.x"].spec.e4m3_limit) == ("mae", 256)
    assert plan["dgrad.dy"].spec.e4m3_limit == 448               # untouched operands keep 448


@pytest.mark.parametrize("change, message", [
    ({"four_over_six": {"operands": ["activations"]}},
     "lists wgrad.x, which has an RHT"),
    ({"four_over_six": {"operands": ["gradients"]}},
     "lists dgrad.dy, which has stochastic rounding"),
    ({"four_over_six": {"operands": ["fprop.w"]}},
     "four_over_six.operands must list both fprop.w and dgrad.w"),
    ({"format": "mxfp4", "four_over_six": {"operands": ["fprop.x"]}},
     "format=mxfp4 needs four_over_six.operands=\\[\\]"),
    ({"four_over_six": {"operands": ["fprop.x"], "error": "l2"}},
     "four_over_six.error='l2' is not one of mae, mse"),
    ({"four_over_six": {"operands": ["fprop.x"], "e4m3_limit": 300}},
     "four_over_six.e4m3_limit=300 is not one of 448, 256"),
    ({"quantize": ["weights", "gradients"], "sr": [], "four_over_six": {"operands": ["fprop.x"]}},
     "lists fprop.x, which is not quantized"),
])
def test_4over6_where_it_cannot_apply_is_refused_naming_the_operand(change, message):
    with pytest.raises(ValueError, match=message):
        preset("nvfp4").replace(**change)


def test_4over6_round_trips_through_plain_data():
    r = preset("nvfp4_4over6").replace(four_over_six={"error": "mse", "e4m3_limit": 448})
    assert from_dict(to_dict(r)) == r and r.four_over_six.operands == ("fprop.x", "fprop.w",
                                                                        "dgrad.w")


# ------------------------------------------------------------------------------ row-scaled
def test_row_scaled_preset_gives_fprop_x_one_amax_per_row():
    plan = operand_plan(preset("nvfp4_row_scaled"))
    assert {op for op, o in plan.items() if o.spec and o.spec.amax == "row"} == {"fprop.x"}


@pytest.mark.parametrize("change, message", [
    ({"row_scaled": ["wgrad.x"]}, "lists wgrad.x, which is not an operand whose rows"),
    ({"row_scaled": ["weights"]}, "lists fprop.w, which is not an operand whose rows"),
    ({"row_scaled": ["dgrad.dy"]}, "lists dgrad.dy, which has stochastic rounding"),
    ({"row_scaled": ["fprop.x"], "rht": {"gemms": ["fprop", "wgrad"]}, "weight_blocks": "1d"},
     "lists fprop.x, which has an RHT"),
    ({"row_scaled": ["dgrad.dy"], "sr": [], "grad_blocks": "1d_same_dim",
      "rht": {"gemms": []}}, "lists dgrad.dy, which is reused by another GEMM"),
    ({"format": "fp8", "sr": [], "rht": {"gemms": []}, "row_scaled": ["fprop.x"]},
     "format=fp8 needs row_scaled=\\[\\]"),
])
def test_row_scaled_where_it_cannot_apply_is_refused_naming_the_operand(change, message):
    with pytest.raises(ValueError, match=message):
        preset("nvfp4").replace(**change)


# ------------------------------------------------------------------------------ MS-EDEN
def test_quartet_ii_preset_rounds_the_backward_operands_by_ms_eden_after_rht_128():
    plan = operand_plan(preset("quartet_ii"))
    eden = {op for op, o in plan.items() if o.spec and o.spec.rounding == "ms_eden"}
    assert eden == {"dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x"}
    assert all(plan[op].rht == RHTSpec(128, "per_call") for op in eden)
    assert plan["fprop.x"].spec.rounding == "rne" and plan["fprop.x"].rht is None


@pytest.mark.parametrize("change, message", [
    ({"ms_eden": ["fprop.x"]}, "lists fprop.x, which has no RHT"),
    ({"ms_eden": ["wgrad.dy"]}, "lists wgrad.dy, which has stochastic rounding"),
    ({"ms_eden": ["wgrad.x"], "rht": {"size": 8}}, "rht.size a multiple of 16 \\(not 8\\)"),
    ({"ms_eden": ["wgrad.x"], "quantize": ["forward"], "sr": [], "weight_blocks": "1d"},
     "lists wgrad.x, which is not quantized"),
])
def test_ms_eden_where_it_cannot_apply_is_refused_naming_the_operand(change, message):
    with pytest.raises(ValueError, match=message):
        preset("nvfp4").replace(**change)
