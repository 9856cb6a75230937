"""Every ablation arm of docs/experiments.md (E02, E04-E11) as a recipe built from plain data, the
way an ablation YAML gives it: a preset name plus changes (dicts, lists, numbers, strings).
Each arm is checked for the property that distinguishes it, then trained for one
forward/backward on a tiny model."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
from helpers.tiny_model import TinyLM, lm_loss

from nvfp4_lab.quant import (
    OPERANDS,
    PRESETS,
    Backend,
    QuantState,
    Recipe,
    convert,
    from_dict,
    operand_plan,
    preset,
    quant_layers,
    switched_plan,
    to_dict,
)

BACKWARD = ("dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x")


pytestmark = pytest.mark.usefixtures("one_thread")


@dataclass
class Arm:
    id: str
    base: str                       # preset name
    changes: dict                   # plain data, as in a YAML file
    check: Callable[[Recipe], None]
    tokens: tuple[int, int] = (2, 33)
    extra: dict = field(default_factory=dict)

    def recipe(self) -> Recipe:
        # not preset(base, name=..., **changes): preset's own first parameter is `name`
        return preset(self.base, **self.changes).replace(name=self.id)


# --- helpers ------------------------------------------------------------------------------

def quantized(plan) -> set[str]:
    """Operands that are quantized: their own quantizer, or the reuse of a quantized one."""
    return {op for op, o in plan.items()
            if o.spec is not None or (o.reuse and plan[o.reuse].spec is not None)}


def sr_ops(plan) -> set[str]:
    return {op for op, o in plan.items() if o.spec is not None and o.spec.rounding == "sr"}


def rht_ops(plan) -> dict[str, int]:
    return {op: o.rht.size for op, o in plan.items() if o.rht is not None}


def changed(a: Recipe, b: Recipe) -> set[str]:
    """Top-level fields in which two recipes differ (the name aside)."""
    da, db = to_dict(a), to_dict(b)
    return {k for k in da if k != "name" and da[k] != db[k]}


def spec_of(plan, op):
    s = plan[op].spec
    return (s.fmt, s.block, s.axis, s.rounding)


def is_base_method(r: Recipe) -> None:
    """The appendix base method: 1x16 everywhere, RNE, no RHT, Dgrad's W quantized itself."""
    assert (r.format, r.weight_blocks, r.act_blocks, r.grad_blocks) == ("nvfp4", "1d", "1d", "1d")
    assert r.rht.gemms == () and r.sr == ()


# --- E02: component removal on 12B (full recipe, first 2 + last 8 blocks BF16) --------------

FULL_12B = {"high_precision": {"first": 2, "last": 8}}
E02_FULL = preset("nvfp4", **FULL_12B)


def e02_full(r):
    assert operand_plan(r) == operand_plan(PRESETS["nvfp4"])
    assert (r.high_precision.first, r.high_precision.last) == (2, 8)


def e02_without_sr(r):
    assert changed(r, E02_FULL) == {"sr"}
    assert r.sr == () and sr_ops(operand_plan(r)) == set()


def e02_without_rht(r):
    assert changed(r, E02_FULL) == {"rht"}
    assert r.rht.gemms == () and rht_ops(operand_plan(r)) == {}


def e02_without_2d(r):
    assert changed(r, E02_FULL) == {"weight_blocks"}
    plan = operand_plan(r)
    assert spec_of(plan, "fprop.w") == ("nvfp4", (1, 16), -1, "rne")
    assert plan["dgrad.w"].reuse is None
    assert spec_of(plan, "dgrad.w") == ("nvfp4", (1, 16), 0, "rne")


def e02_last_four(r):
    assert changed(r, E02_FULL) == {"high_precision"}
    assert (r.high_precision.first, r.high_precision.last) == (0, 4)


# --- E04: switching to high precision late (12B, full recipe; 8.2T of 10T) ---------------

def _switch(at, passes):
    def check(r):
        assert changed(r, PRESETS["nvfp4"]) - {"weight_blocks"} == {"switch"}
        assert r.switch.at_step is None  # a fraction of the run, not a step
        assert isinstance(r.switch.at_fraction, float) and 0 < r.switch.at_fraction <= 1
        assert r.switch.at_fraction == at and r.switch.passes == passes
        plan = operand_plan(r)
        after = switched_plan(plan, r.switch.off)
        hp_after = {op for op in OPERANDS if op not in quantized(after)}
        assert hp_after == {"both": set(OPERANDS), "fwd": {"fprop.x", "fprop.w"},
                            "bwd": set(BACKWARD)}[passes]
        assert quantized(plan) == set(OPERANDS)  # fully NVFP4 before the switch
    return check


def e04_whole_run(r):
    assert r.switch.at_step is None and r.switch.at_fraction is None
    assert r.switch.step(10_000) is None
    assert r == PRESETS["nvfp4"].replace(name=r.name)


def e04_b(r):
    _switch(0.82, "both")(r)
    assert r.switch.step(10_000) == 8200


def e04_c(r):
    _switch(0.82, "fwd")(r)
    after = switched_plan(operand_plan(r), r.switch.off)
    assert after["dgrad.w"].spec.block == (16, 16)  # Dgrad keeps the 2D weight


def e04_d(r):
    _switch(0.82, "bwd")(r)
    assert r.weight_blocks == "1d"  # "marginally better than 2D in such a setup"


def e04_e(r):
    _switch(0.99, "both")(r)
    assert r.switch.step(10_000) >= 9900  # under 1% of training in BF16


# --- E05: cumulative techniques on 1.2B (base method + last 4 blocks BF16) ----------------

E05_1 = {"high_precision": {"last": 4}}
E05_2 = {**E05_1, "weight_blocks": "2d"}
E05_3 = {**E05_2, "rht": {"gemms": ["wgrad"]}}
E05_4 = {**E05_3, "sr": ["gradients"]}


def e05_1(r):
    is_base_method(r)
    assert r.high_precision.last == 4 and r.high_precision.first == 0


def e05_2(r):
    assert changed(r, preset("nvfp4_base", **E05_1)) == {"weight_blocks"}
    plan = operand_plan(r)
    assert plan["fprop.w"].spec.block == (16, 16) and plan["dgrad.w"].reuse == "fprop.w"


def e05_3(r):
    assert changed(r, preset("nvfp4_base", **E05_2)) == {"rht"}
    assert rht_ops(operand_plan(r)) == {"wgrad.dy": 16, "wgrad.x": 16}


def e05_4(r):
    assert changed(r, preset("nvfp4_base", **E05_3)) == {"sr"}
    assert sr_ops(operand_plan(r)) == {"dgrad.dy", "wgrad.dy"}
    # all four techniques together are the full method (with the 1.2B's last 4 blocks)
    assert changed(r, PRESETS["nvfp4"]) == {"high_precision"}
    assert operand_plan(r) == operand_plan(PRESETS["nvfp4"])


# --- E06: layer sensitivity on 1.2B (base method) -----------------------------------------

def _hp(first, last):
    def check(r):
        is_base_method(r)
        assert changed(r, PRESETS["nvfp4_base"]) == {"high_precision"}
        hp = r.high_precision
        assert (hp.first, hp.last, hp.names) == (first, last, ())
        assert isinstance(hp.first, int) and isinstance(hp.last, int)  # blocks, not fractions
        assert quantized(operand_plan(r)) == set(OPERANDS)
    return check


def bf16_reference(r):
    assert r.format == "bf16" and quantized(operand_plan(r)) == set()
    assert rht_ops(operand_plan(r)) == {}


# --- E07: SR placement on 1.2B (base method + last 4 blocks BF16) -------------------------

LAST4 = {"high_precision": {"last": 4}}


def _sr(expected):
    def check(r):
        assert changed(r, preset("nvfp4_base", **LAST4)) == {"sr"}
        assert r.weight_blocks == "1d"  # the base method's 1D weights
        assert r.sr == expected
        assert sr_ops(operand_plan(r)) == set(expected)
        assert quantized(operand_plan(r)) == set(OPERANDS)
    return check


# --- E08: which GEMM gets the RHT, on 1.2B (base method + last 4 blocks BF16) -------------

def _rht_on(gemm):
    def check(r):
        assert r.weight_blocks == "1d"  # 1D weights: an RHT on Fprop/Dgrad is allowed
        if gemm is None:
            assert changed(r, preset("nvfp4_base", **LAST4)) == set()
            assert rht_ops(operand_plan(r)) == {}
            return
        assert changed(r, preset("nvfp4_base", **LAST4)) == {"rht"}
        assert r.rht.gemms == (gemm,) and r.rht.signs == "fixed"
        assert rht_ops(operand_plan(r)) == {op: 16 for op in OPERANDS if op.startswith(gemm)}
    return check


# --- E09 / E10: Hadamard size and randomisation (full recipe, RHT on Wgrad) ----------------

def _rht_size(size):
    def check(r):
        assert changed(r, PRESETS["nvfp4"]) == (set() if size == 16 else {"rht"})
        assert rht_ops(operand_plan(r)) == {"wgrad.dy": size, "wgrad.x": size}
        assert operand_plan(r)["wgrad.x"].spec.block == (1, 16)  # blocks stay 1x16
    return check


def _signs(signs):
    def check(r):
        if signs != "fixed":
            assert changed(r, PRESETS["nvfp4"]) == {"rht"}
        assert {o.rht.signs for o in operand_plan(r).values() if o.rht} == {signs}
        assert rht_ops(operand_plan(r)) == {"wgrad.dy": 16, "wgrad.x": 16}
    return check


# --- E11: forward/backward consistency, one tensor quantized (base method) ----------------

def _weights_only(blocks):
    def check(r):
        plan = operand_plan(r)
        assert quantized(plan) == {"fprop.w", "dgrad.w"}
        assert r.weight_blocks == blocks
        if blocks == "1d":            # (2) along each GEMM's dot-product dim: inconsistent
            assert spec_of(plan, "fprop.w") == ("nvfp4", (1, 16), -1, "rne")
            assert spec_of(plan, "dgrad.w") == ("nvfp4", (1, 16), 0, "rne")
        elif blocks == "1d_same_dim":  # (1) along in-features in both: Fprop's W reused
            assert spec_of(plan, "fprop.w") == ("nvfp4", (1, 16), -1, "rne")
            assert plan["dgrad.w"].reuse == "fprop.w"
        else:                          # (3) 16x16 tiles, reused
            assert spec_of(plan, "fprop.w") == ("nvfp4", (16, 16), -1, "rne")
            assert plan["dgrad.w"].reuse == "fprop.w"
    return check


def _activations_only(blocks):
    def check(r):
        plan = operand_plan(r)
        assert quantized(plan) == {"fprop.x", "wgrad.x"}
        assert r.act_blocks == blocks and r.weight_blocks == "1d"
        assert spec_of(plan, "fprop.x") == ("nvfp4", (1, 16), -1, "rne")
        if blocks == "1d":            # (2) along tokens in Wgrad: inconsistent
            assert spec_of(plan, "wgrad.x") == ("nvfp4", (1, 16), 0, "rne")
        else:                          # (1) along in-features in both: Fprop's X reused
            assert plan["wgrad.x"].reuse == "fprop.x"
    return check


ARMS = [
    Arm("E02-full", "nvfp4", FULL_12B, e02_full),
    Arm("E02-without-sr", "nvfp4", {**FULL_12B, "sr": []}, e02_without_sr),
    Arm("E02-without-rht", "nvfp4", {**FULL_12B, "rht": {"gemms": []}}, e02_without_rht),
    Arm("E02-without-2d-weights", "nvfp4", {**FULL_12B, "weight_blocks": "1d"}, e02_without_2d),
    Arm("E02-only-last-4-bf16", "nvfp4", {"high_precision": {"first": 0, "last": 4}},
        e02_last_four),

    Arm("E04a-nvfp4-whole-run", "nvfp4", {}, e04_whole_run),
    Arm("E04b-switch-fwd-bwd", "nvfp4", {"switch": {"at_fraction": 0.82, "passes": "both"}}, e04_b),
    Arm("E04c-switch-fwd-only", "nvfp4", {"switch": {"at_fraction": 0.82, "passes": "fwd"}}, e04_c),
    Arm("E04d-switch-bwd-only-1d-weights", "nvfp4",
        {"switch": {"at_fraction": 0.82, "passes": "bwd"}, "weight_blocks": "1d"}, e04_d),
    Arm("E04e-switch-at-the-end", "nvfp4",
        {"switch": {"at_fraction": 0.99, "passes": "both"}}, e04_e),

    Arm("E05-1-last-4-bf16", "nvfp4_base", E05_1, e05_1),
    Arm("E05-2-plus-2d-weights", "nvfp4_base", E05_2, e05_2),
    Arm("E05-3-plus-rht-wgrad", "nvfp4_base", E05_3, e05_3),
    Arm("E05-4-plus-sr-gradients", "nvfp4_base", E05_4, e05_4),

    Arm("E06-bf16", "bf16", {}, bf16_reference),
    Arm("E06-last-1-bf16", "nvfp4_base", {"high_precision": {"last": 1}}, _hp(0, 1)),
    Arm("E06-last-2-bf16", "nvfp4_base", {"high_precision": {"last": 2}}, _hp(0, 2)),
    Arm("E06-last-4-bf16", "nvfp4_base", {"high_precision": {"last": 4}}, _hp(0, 4)),
    Arm("E06-first-4-bf16", "nvfp4_base", {"high_precision": {"first": 4}}, _hp(4, 0)),
    Arm("E06-first-2-last-2-bf16", "nvfp4_base", {"high_precision": {"first": 2, "last": 2}},
        _hp(2, 2)),

    Arm("E07-bf16", "bf16", {}, bf16_reference),
    Arm("E07-sr-gradients", "nvfp4_base", {**LAST4, "sr": ["gradients"]},
        _sr(("dgrad.dy", "wgrad.dy"))),
    Arm("E07-sr-wgrad-and-dgrad", "nvfp4_base", {**LAST4, "sr": ["backward"]}, _sr(BACKWARD)),
    Arm("E07-sr-activations", "nvfp4_base", {**LAST4, "sr": ["fprop.x"]}, _sr(("fprop.x",))),
    Arm("E07-sr-weights", "nvfp4_base", {**LAST4, "sr": ["fprop.w"]}, _sr(("fprop.w",))),

    Arm("E08-no-hadamard", "nvfp4_base", {**LAST4, "rht": {"gemms": []}}, _rht_on(None)),
    Arm("E08-rht-wgrad", "nvfp4_base", {**LAST4, "rht": {"gemms": ["wgrad"]}},
        _rht_on("wgrad")),
    Arm("E08-rht-dgrad", "nvfp4_base", {**LAST4, "rht": {"gemms": ["dgrad"]}},
        _rht_on("dgrad")),
    Arm("E08-rht-fprop", "nvfp4_base", {**LAST4, "rht": {"gemms": ["fprop"]}},
        _rht_on("fprop")),

    Arm("E09-rht-2", "nvfp4", {"rht": {"gemms": ["wgrad"], "size": 2}}, _rht_size(2)),
    Arm("E09-rht-4", "nvfp4", {"rht": {"gemms": ["wgrad"], "size": 4}}, _rht_size(4)),
    Arm("E09-rht-16", "nvfp4", {"rht": {"gemms": ["wgrad"], "size": 16}}, _rht_size(16)),
    # a 128-point transform along tokens needs 128 tokens per micro-batch
    Arm("E09-rht-128", "nvfp4", {"rht": {"gemms": ["wgrad"], "size": 128}}, _rht_size(128),
        tokens=(2, 65)),

    Arm("E10-signs-fixed", "nvfp4", {"rht": {"gemms": ["wgrad"], "signs": "fixed"}},
        _signs("fixed")),
    Arm("E10-signs-per-transform", "nvfp4", {"rht": {"gemms": ["wgrad"], "signs": "per_call"}},
        _signs("per_call")),
    Arm("E10-signs-none", "nvfp4", {"rht": {"gemms": ["wgrad"], "signs": "none"}},
        _signs("none")),

    Arm("E11-weights-1d-dot-dim", "nvfp4_base",
        {"quantize": ["weights"], "weight_blocks": "1d"}, _weights_only("1d")),
    Arm("E11-weights-1d-same-dim", "nvfp4_base",
        {"quantize": ["weights"], "weight_blocks": "1d_same_dim"}, _weights_only("1d_same_dim")),
    Arm("E11-weights-16x16", "nvfp4_base",
        {"quantize": ["weights"], "weight_blocks": "2d"}, _weights_only("2d")),
    Arm("E11-activations-1d-dot-dim", "nvfp4_base",
        {"quantize": ["activations"], "act_blocks": "1d"}, _activations_only("1d")),
    Arm("E11-activations-1d-same-dim", "nvfp4_base",
        {"quantize": ["activations"], "act_blocks": "1d_same_dim"},
        _activations_only("1d_same_dim")),
]
IDS = [a.id for a in ARMS]


def test_arm_ids_are_unique_and_cover_the_experiments():
    assert len(set(IDS)) == len(IDS)
    assert {i.split("-")[0].rstrip("abcde") for i in IDS} == {
        "E02", "E04", "E05", "E06", "E07", "E08", "E09", "E10", "E11"}


@pytest.mark.parametrize("arm", ARMS, ids=IDS)
def test_arm_recipe(arm):
    # the changes are plain data: they survive a trip through JSON (as YAML would give them)
    assert json.loads(json.dumps(arm.changes)) == arm.changes
    recipe = arm.recipe()
    # preset(name, **changes) and from_dict over the preset's plain data agree
    assert recipe == from_dict({**to_dict(PRESETS[arm.base]), **arm.changes, "name": arm.id})
    assert recipe.name == arm.id
    arm.check(recipe)


def _n_blocks(recipe: Recipe) -> int:
    """4 blocks, or enough that at least one block stays quantized (e.g. E02: 2 + 8 BF16)."""
    hp = recipe.high_precision
    ints = [v for v in (hp.first, hp.last) if isinstance(v, int)]
    return max(4, sum(ints) + 1)


@pytest.mark.parametrize("arm", ARMS, ids=IDS)
def test_arm_trains_one_step(arm):
    recipe = arm.recipe()
    n_blocks = _n_blocks(recipe)
    torch.manual_seed(0)
    model = TinyLM(vocab=64, d=128, n_blocks=n_blocks)
    state = QuantState(max_steps=100)
    report = convert(model, recipe, state=state, backend=Backend())
    # the blocks that are quantized are the ones high_precision leaves
    hp = recipe.high_precision
    first, last = hp.count("first", n_blocks), hp.count("last", n_blocks)
    want = [] if recipe.format == "bf16" else [
        f"blocks.{i}.{k}" for i in range(first, n_blocks - last)
        for k in ("qkv", "proj", "fc1", "fc2")]
    assert report.quantized == want
    assert recipe.format == "bf16" or want  # every FP4 arm exercises some quantized layer

    tokens = torch.randint(0, 64, arm.tokens, generator=torch.Generator().manual_seed(1))
    steps = [0]
    if recipe.switch.step(state.max_steps) is not None:  # also run the plan after the switch
        steps.append(recipe.switch.step(state.max_steps))
    for step in steps:
        state.step = step
        model.zero_grad()
        layers = quant_layers(model)
        if step:
            assert all(q.current_plan() is q.plan_after_switch for q in layers)
        loss = lm_loss(model, tokens)
        loss.backward()
        assert torch.isfinite(loss), (arm.id, step)
        for name, p in model.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), (arm.id, step, name)
