"""convert(): which layers it swaps and why (the report), the errors it raises instead of
training something else than asked, parameter sharing, and one optimizer step per preset."""
from __future__ import annotations

import copy
import json

import pytest
import torch
from helpers.tiny_model import TinyLM, lm_loss
from torch import nn

from nvfp4_lab.quant import (
    OPERANDS,
    PRESETS,
    Backend,
    HighPrecision,
    QuantLinear,
    QuantState,
    Report,
    convert,
    from_dict,
    operand_plan,
    preset,
    quant_layers,
    quant_state,
    to_dict,
)

KINDS = ("qkv", "proj", "fc1", "fc2")


pytestmark = pytest.mark.usefixtures("one_thread")


def layers_of(*blocks: int) -> list[str]:
    return [f"blocks.{i}.{k}" for i in blocks for k in KINDS]


def run(recipe, d: int = 64, n_blocks: int = 4, **kwargs):
    torch.manual_seed(0)
    model = TinyLM(vocab=64, d=d, n_blocks=n_blocks)
    return model, convert(model, recipe, backend=Backend(), **kwargs)


# --- the report ---------------------------------------------------------------------------

def test_report_nvfp4_keeps_the_last_20_percent():
    model, report = run(PRESETS["nvfp4"])
    assert report.quantized == layers_of(0, 1, 2)
    rows = {r.name: r for r in report.layers}
    assert list(rows) == layers_of(0, 1, 2, 3) + ["lm_head"]
    for name in layers_of(3):
        assert not rows[name].quantized and rows[name].block == 3
        assert "last 1 of 4 blocks" in rows[name].reason
        assert "high_precision.last=0.2" in rows[name].reason
        assert type(model.get_submodule(name)) is nn.Linear
    plan = operand_plan(PRESETS["nvfp4"])
    for name in layers_of(0, 1, 2):
        row = rows[name]
        assert row.quantized and row.reason == "" and row.block == int(name.split(".")[1])
        assert row.operands == {op: plan[op].describe() for op in OPERANDS}
        assert isinstance(model.get_submodule(name), QuantLinear)
    assert (rows["blocks.0.qkv"].in_features, rows["blocks.0.qkv"].out_features) == (64, 192)
    assert report.backend == "reference"
    assert report.summary().startswith("recipe nvfp4 (reference backend): 12/17 linear layers "
                                       "quantized")


def test_report_fp8_keeps_the_first_block_and_the_last_two():
    _, report = run(PRESETS["fp8"], d=128)
    assert report.quantized == layers_of(1)
    rows = {r.name: r for r in report.layers}
    for name in layers_of(0):
        assert "first 1 of 4 blocks (high_precision.first=1)" in rows[name].reason
    for name in layers_of(2, 3):
        assert "last 2 of 4 blocks (high_precision.last=2)" in rows[name].reason
    assert rows["blocks.1.fc1"].operands["fprop.w"] == "fp8_e4m3 128x128 axis=-1 rne"


def test_report_name_patterns():
    recipe = preset("nvfp4", high_precision={"last": 0.2, "names": ["*.fc2", "blocks.0.qkv"]})
    model, report = run(recipe)
    assert report.quantized == [n for n in layers_of(0, 1, 2)
                                if not n.endswith("fc2") and n != "blocks.0.qkv"]
    rows = {r.name: r for r in report.layers}
    assert rows["blocks.1.fc2"].reason == "matches '*.fc2' (high_precision.names)"
    assert rows["blocks.0.qkv"].reason == "matches 'blocks.0.qkv' (high_precision.names)"
    assert "high_precision.last" in rows["blocks.3.fc2"].reason  # block rules come first
    assert type(model.blocks[1].fc2) is nn.Linear


def test_report_table_save_and_to_dict(tmp_path):
    recipe = preset("nvfp4", backend="reference")
    _, report = run(recipe)
    table = report.table()
    lines = table.splitlines()
    assert lines[0] == report.summary()
    assert len(lines) == 1 + len(report.layers)
    for row in report.layers:
        line = next(ln for ln in lines[1:] if ln.split()[0] == row.name)
        assert f"[{row.out_features}x{row.in_features}]" in line
        if row.quantized:
            assert "wgrad.dy nvfp4 1x16 axis=0 sr/hw8 rht16/fixed" in line
        else:
            assert f"high precision: {row.reason}" in line

    d = report.to_dict()
    assert d["recipe"] == to_dict(recipe) and from_dict(d["recipe"]) == recipe
    assert d["backend"] == "reference"

    path = tmp_path / "layer_report.json"
    report.save(path)
    loaded = json.loads(path.read_text())
    assert loaded == json.loads(json.dumps(d))
    assert [row["name"] for row in loaded["layers"]] == [r.name for r in report.layers]
    assert [row["quantized"] for row in loaded["layers"]] == [r.quantized for r in report.layers]
    assert [row["reason"] for row in loaded["layers"]] == [r.reason for r in report.layers]
    assert from_dict(loaded["recipe"]) == recipe  # the run's recipe can be rebuilt from it
    # a Report can be rebuilt from the JSON as well
    assert Report(loaded["recipe"], loaded["backend"], report.layers).summary() == \
        report.summary()


class EmbedProjLM(TinyLM):
    """TinyLM whose embedding ends in a linear projection: a linear layer outside blocks."""

    def __init__(self, **kw):
        super().__init__(**kw)
        d = self.embed.embedding_dim
        self.embed = nn.Sequential(self.embed, nn.Linear(d, d, bias=False))


@pytest.mark.parametrize("name", ["nvfp4_base", "nvfp4", "mxfp4"])
def test_embeddings_and_head_are_never_converted(name):
    recipe = preset(name, high_precision=HighPrecision())
    torch.manual_seed(0)
    model = EmbedProjLM(vocab=64, d=64, n_blocks=4)
    report = convert(model, recipe, backend=Backend())
    assert report.quantized == layers_of(0, 1, 2, 3)  # every block layer, nothing else
    assert type(model.lm_head) is nn.Linear
    assert type(model.embed[0]) is nn.Embedding and type(model.embed[1]) is nn.Linear
    rows = {r.name: r for r in report.layers}
    for outside in ("embed.1", "lm_head"):
        assert not rows[outside].quantized and rows[outside].block is None
        assert "outside the transformer blocks" in rows[outside].reason
    assert not any(isinstance(m, QuantLinear) for m in (model.embed, model.lm_head, model.norm))


def test_bf16_converts_nothing():
    model, report = run(PRESETS["bf16"])
    assert report.quantized == [] and quant_layers(model) == [] and quant_state(model) is None
    rows = {r.name: r for r in report.layers}
    assert rows["blocks.0.qkv"].reason == "the recipe quantizes nothing"
    assert "outside the transformer blocks" in rows["lm_head"].reason


def test_a_recipe_that_quantizes_nothing_names_no_backend():
    """The report (and so summary.json) says what runs: no quantization backend at all, not
    the one it was handed."""
    _, report = run(PRESETS["bf16"])
    assert report.backend == "none" and report.to_dict()["backend"] == "none"
    _, report = run(PRESETS["nvfp4"])
    assert report.backend == "reference"


# --- errors -------------------------------------------------------------------------------

def test_name_pattern_matching_nothing():
    recipe = preset("nvfp4", high_precision={"names": ["*.fc3"]})
    with pytest.raises(ValueError) as err:
        run(recipe)
    msg = str(err.value)
    assert "'*.fc3' matches no linear layer" in msg
    assert "the linear layers are " + ", ".join(layers_of(0, 1, 2, 3)) in msg


@pytest.mark.parametrize("hp", [{"first": 5}, {"last": 7}])
def test_more_blocks_than_the_model_has(hp):
    key, value = next(iter(hp.items()))
    with pytest.raises(ValueError, match=f"high_precision.{key}={value} selects {value} blocks, "
                                         f"the model has 4"):
        run(preset("nvfp4_base", high_precision=hp))


@pytest.mark.parametrize("name, d, block", [("nvfp4", 40, 16), ("mxfp4", 48, 32),
                                            ("fp8", 64, 128)])
def test_dims_not_a_multiple_of_the_block(name, d, block):
    recipe = PRESETS[name]
    first = recipe.high_precision.count("first", 4)
    layer = f"blocks.{first}.qkv"  # the first layer the recipe quantizes
    with pytest.raises(ValueError) as err:
        run(recipe, d=d)
    msg = str(err.value)
    assert msg.startswith(f"layer {layer}: in_features={d} is not a multiple of the "
                          f"{recipe.format} block ({block})")
    assert f"quant.high_precision.names=['{layer}']" in msg


def test_the_suggested_fix_works():
    """Keeping the misfit layers in high precision, as the message suggests, converts."""
    torch.manual_seed(0)
    model = TinyLM(vocab=64, d=48, n_blocks=4)  # 48: 3 x 16 fits NVFP4; fc2's 96 too
    report = convert(model, preset("nvfp4", backend="reference"), backend=Backend())
    assert report.quantized == layers_of(0, 1, 2)
    with pytest.raises(ValueError, match="not a multiple of the fp8 block"):
        convert(TinyLM(d=48), PRESETS["fp8"], backend=Backend())
    hp = {"first": 1, "last": 2, "names": ["blocks.1.*"]}
    report = convert(TinyLM(d=48), preset("fp8", high_precision=hp), backend=Backend())
    assert report.quantized == []


def test_rht_dims_on_fprop():
    recipe = preset("nvfp4_base", rht={"gemms": ["fprop"], "size": 128})
    with pytest.raises(ValueError, match=r"layer blocks.0.qkv: RHT on fprop needs in_features "
                                         r"\(64\) to be a multiple of rht.size \(128\)"):
        run(recipe)


def test_blocks_must_be_a_module_list():
    with pytest.raises(ValueError, match="blocks='lm_head' is a Linear, not a ModuleList"):
        run(PRESETS["nvfp4"], blocks="lm_head")
    with pytest.raises(ValueError, match="blocks='blocks.0' is a Block, not a ModuleList"):
        run(PRESETS["nvfp4"], blocks="blocks.0")


def test_model_without_a_block_list():
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
    with pytest.raises(ValueError, match="Sequential has no ModuleList of blocks holding linear "
                                         "layers; pass blocks="):
        convert(model, PRESETS["nvfp4"], backend=Backend())


def test_explicit_blocks_and_the_longest_list():
    class TwoLists(TinyLM):
        def __init__(self):
            super().__init__(d=64, n_blocks=4)
            self.adapters = nn.ModuleList(nn.Sequential(nn.Linear(64, 64)) for _ in range(2))

    model = TwoLists()
    report = convert(model, PRESETS["nvfp4_base"], backend=Backend())
    assert report.quantized == layers_of(0, 1, 2, 3)  # the longest list is the blocks
    model = TwoLists()
    report = convert(model, PRESETS["nvfp4_base"], blocks="adapters", backend=Backend())
    assert report.quantized == ["adapters.0.0", "adapters.1.0"]


# --- the converted model ------------------------------------------------------------------

def test_converted_model_shares_parameters_and_state_dict_keys():
    torch.manual_seed(0)
    model = TinyLM(vocab=64, d=64, n_blocks=4)
    before = dict(model.named_parameters())
    keys = list(model.state_dict())
    original = {k: v.clone() for k, v in model.state_dict().items()}
    report = convert(model, PRESETS["nvfp4"], backend=Backend())
    after = dict(model.named_parameters())
    assert list(after) == list(before)
    assert all(after[n] is before[n] for n in before)  # the same Parameter objects: no copy
    assert list(model.state_dict()) == keys
    assert all(torch.equal(v, original[k]) for k, v in model.state_dict().items())
    # a checkpoint of the unquantized model loads into the converted one, strictly
    model.load_state_dict(original, strict=True)
    assert len(report.quantized) == 12


def test_one_shared_quant_state_and_layer_indices():
    model, report = run(PRESETS["nvfp4"])
    layers = quant_layers(model)
    state = quant_state(model)
    assert isinstance(state, QuantState)
    assert all(q.state is state for q in layers)
    assert [q.index for q in layers] == list(range(len(layers))) == list(range(12))
    assert [q.name for q in layers] == report.quantized
    own = QuantState(seed=3)
    model, _ = run(PRESETS["nvfp4"], state=own)
    assert quant_state(model) is own


def test_wgrad_rht_needs_a_multiple_of_16_tokens():
    model, _ = run(PRESETS["nvfp4"])
    tokens = torch.randint(0, 64, (1, 10))  # 9 input tokens
    with pytest.raises(ValueError) as err:
        lm_loss(model, tokens)
    msg = str(err.value)
    assert msg.startswith("layer blocks.0.qkv:")
    assert "9 tokens" in msg and "multiple of 16" in msg


def test_inference_takes_any_token_count_and_computes_fprop_as_training_does():
    """Without gradients there is no Wgrad, so its token chunks do not apply: 9 tokens run
    (refused before the fix); on 16 tokens the logits equal the training forward's."""
    model, _ = run(PRESETS["nvfp4"])
    with torch.no_grad():
        logits = model(torch.randint(0, 64, (1, 9)))
    assert logits.shape == (1, 9, 64) and torch.isfinite(logits).all()
    tokens = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    trained = model(tokens)
    assert trained.requires_grad
    with torch.no_grad():
        assert torch.equal(model(tokens), trained.detach())


# --- one optimizer step with every preset -------------------------------------------------

@pytest.fixture(scope="module")
def start():
    """A tiny LM, a fixed batch, and the unquantized (FP32) gradients at its start."""
    torch.manual_seed(0)
    model = TinyLM(vocab=64, d=128, n_blocks=4)  # d=128: FP8's 128x128 blocks fit
    tokens = torch.randint(0, 64, (4, 33), generator=torch.Generator().manual_seed(0))
    ref = copy.deepcopy(model)
    lm_loss(ref, tokens).backward()
    return model, tokens, {n: p.grad for n, p in ref.named_parameters()}


@pytest.mark.parametrize("name", list(PRESETS))
def test_one_optimizer_step_with_every_preset(name, start):
    base, tokens, ref_grads = start
    model = copy.deepcopy(base)
    report = convert(model, preset(name, backend="reference"))
    assert report.backend == ("none" if name == "bf16" else "reference")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss0 = lm_loss(model, tokens)
    loss0.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    for n, g in grads.items():
        assert torch.isfinite(g).all(), n
    opt.step()
    opt.zero_grad()
    state = quant_state(model)
    if state is not None:
        state.step += 1
    with torch.no_grad():
        loss1 = lm_loss(model, tokens)
    assert torch.isfinite(loss0) and torch.isfinite(loss1)
    assert loss1 < loss0

    if name == "bf16":
        assert report.quantized == []
        assert all(torch.equal(grads[n], ref_grads[n]) for n in grads)
        return
    assert report.quantized
    # quantization really happened: the gradient of a quantized layer is not the FP32 one,
    # but it points the same way
    for layer in (report.quantized[0], report.quantized[-1]):
        g, r = grads[f"{layer}.weight"], ref_grads[f"{layer}.weight"]
        assert not torch.equal(g, r), layer
        assert (g - r).norm() > 1e-3 * r.norm(), layer
        assert torch.nn.functional.cosine_similarity(g.flatten(), r.flatten(), dim=0) > 0.9
