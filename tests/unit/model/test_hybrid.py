"""The hybrid Mamba-2 / FFN / attention model: its blocks, causality, gradients, the presets'
parameter counts against a closed formula and the paper's model sizes, and how
``quant.convert`` counts its blocks for the BF16 policy."""
from __future__ import annotations

import pytest
import torch

from nvfp4_lab.model import MODEL_PRESETS, Hybrid, ModelConfig, build_model, lm_loss, model_preset
from nvfp4_lab.model import presets as presets_module
from nvfp4_lab.quant import PRESETS, convert
from nvfp4_lab.quant.backends import Backend

HYBRIDS = [n for n, c in MODEL_PRESETS.items() if c.pattern]


def tiny(**changes) -> ModelConfig:
    base = dict(d_model=64, n_layers=4, n_heads=4, n_kv_heads=2, vocab_size=97, pattern="M-*M",
                mamba_head_dim=16, mamba_groups=2, mamba_state=8, mamba_chunk=8,
                max_seq_len=64)
    return ModelConfig(**{**base, **changes})


def mamba_block_params(c: ModelConfig) -> int:
    """mamba_ssm's Mamba2 layout: in_proj to z, xBC, dt (rows padded to 128), a depthwise
    conv with bias over xBC, dt_bias, A_log and D per head, the gated norm's gain, out_proj."""
    di, H = c.mamba_expand * c.d_model, c.mamba_expand * c.d_model // c.mamba_head_dim
    conv = di + 2 * c.mamba_groups * c.mamba_state
    rows = -(-(di + conv + H) // 128) * 128
    return c.d_model * rows + conv * (c.mamba_conv + 1) + 3 * H + di + di * c.d_model


def non_embedding_formula(c: ModelConfig) -> int:
    d, hd = c.d_model, c.d_model // c.n_heads
    per_kind = {"M": mamba_block_params(c),
                "-": 2 * d * round(c.ffn_mult * d),
                "*": d * (c.n_heads + 2 * c.n_kv_heads) * hd + d * d}
    return sum(per_kind[s] + d for s in c.pattern) + d  # + each block's norm; + final norm


def meta_model(cfg: ModelConfig) -> Hybrid:
    with torch.device("meta"):
        return Hybrid(cfg)


@pytest.mark.parametrize("name", HYBRIDS)
def test_preset_param_counts(name):
    V = 131_072 if name.startswith("nemotron") else 4096
    cfg = model_preset(name, vocab_size=V)
    model = meta_model(cfg)
    n = model.num_params()
    assert n == non_embedding_formula(cfg)
    assert model.num_params(non_embedding=False) == n + 2 * V * cfg.d_model
    assert f"{n:,}" in presets_module.__doc__ and f"{n + 2 * V * cfg.d_model:,}" in \
        presets_module.__doc__


@pytest.mark.parametrize("name, total, blocks, counts, d, ffn", [
    ("nemotron_h_8b", 8e9, 52, (24, 24, 4), 4096, 21504),      # paper App. A.2, Table 4
    ("nemotron_h_12b", 12e9, 62, (28, 28, 6), 5120, 20480),    # paper App. A.1, Table 3
])
def test_paper_models(name, total, blocks, counts, d, ffn):
    """The paper's dimensions, block counts, and its model size within 3% (at the Nemotron
    tokenizer's 131,072 tokens: 8.08B and 12.33B)."""
    c = MODEL_PRESETS[name]
    assert (len(c.pattern), tuple(c.pattern.count(s) for s in "M-*")) == (blocks, counts)
    assert (c.d_model, c.ffn_dim, c.head_dim) == (d, ffn, 128)
    assert (c.mamba_groups, c.mamba_state, c.mamba_head_dim, c.mamba_expand, c.mamba_conv) == \
        (8, 128, 64, 2, 4)
    n = meta_model(model_preset(name, vocab_size=131_072)).num_params(non_embedding=False)
    assert abs(n / total - 1) < 0.03


@pytest.mark.parametrize("name", HYBRIDS)
def test_preset_dims_fit_every_format(name):
    """Every linear layer's dims are multiples of 128: FP8's 128x128 blocks, RHT up to 128."""
    model = meta_model(model_preset(name, vocab_size=128))
    for layer_name, m in model.blocks.named_modules():
        if isinstance(m, torch.nn.Linear):
            assert m.in_features % 128 == 0 and m.out_features % 128 == 0, layer_name


@pytest.mark.parametrize("name, first, last, hp_layers, linear_layers, percent", [
    ("nemotron_h_12b", 2, 8, 20, 124, "16.1"),   # paper: "16% of linear layers"
    ("nemotron_h_8b", 0, 8, 16, 104, "15.4"),    # paper: "about 15%"
])
def test_bf16_blocks_counted_over_the_pattern(name, first, last, hp_layers, linear_layers,
                                              percent):
    """The paper's BF16 policy (App. A) counts blocks of the pattern, two linear layers each."""
    model = meta_model(model_preset(name, vocab_size=131_072))
    recipe = PRESETS["nvfp4"].replace(high_precision={"first": first, "last": last})
    report = convert(model, recipe, backend=Backend())
    in_blocks = [r for r in report.layers if r.block is not None]
    kept = [r for r in in_blocks if not r.quantized]
    assert (len(kept), len(in_blocks)) == (hp_layers, linear_layers)
    assert f"{100 * len(kept) / len(in_blocks):.1f}" == percent
    last_kinds = {r.kind for r in kept if r.block >= len(model.blocks) - last}
    assert last_kinds == {"mamba", "mlp"}  # "FFN or Mamba-2", as the paper says


def test_report_counts_layers_per_block_kind():
    model = Hybrid(tiny(pattern="M-*M-", n_layers=5))
    recipe = PRESETS["nvfp4"].replace(high_precision={"first": 0, "last": 2, "names": []})
    report = convert(model, recipe, backend=Backend())
    assert report.summary().endswith("; by block kind: mamba 2/4, mlp 2/4, attn 2/2")
    assert [r.name for r in report.layers if r.kind == "mamba"] == [
        "blocks.0.mamba.in_proj", "blocks.0.mamba.out_proj",
        "blocks.3.mamba.in_proj", "blocks.3.mamba.out_proj"]


def test_blocks_follow_the_pattern():
    model = Hybrid(tiny(pattern="M-*-M", n_layers=5))
    assert [b.kind for b in model.blocks] == ["mamba", "mlp", "attn", "mlp", "mamba"]
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert linears[:4] == ["blocks.0.mamba.in_proj", "blocks.0.mamba.out_proj",
                           "blocks.1.mlp.fc1", "blocks.1.mlp.fc2"]
    assert sum(n.startswith("blocks.") for n in linears) == 10  # two per block
    assert isinstance(build_model(tiny()), Hybrid)


def test_causal_exactly():
    """Changing token t leaves the logits of every earlier position bit-identical (conv padding,
    scan and attention mask all causal)."""
    torch.manual_seed(0)
    model = Hybrid(tiny()).eval()
    idx = torch.randint(0, 97, (2, 40))
    with torch.no_grad():
        base = model(idx)
        for t in (0, 7, 8, 39):
            changed = idx.clone()
            changed[:, t] = (changed[:, t] + 1) % 97
            out = model(changed)
            assert torch.equal(out[:, :t], base[:, :t])
            assert not torch.equal(out[:, t], base[:, t])


def test_gradients_reach_every_parameter_and_padding_stays_zero():
    """One backward: every parameter gets a nonzero gradient, except in_proj's alignment rows,
    whose gradient is exactly zero; after AdamW steps (weight decay on) they are still zero."""
    torch.manual_seed(0)
    model = Hybrid(tiny())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    idx = torch.randint(0, 97, (2, 24))
    for _ in range(3):
        opt.zero_grad()
        lm_loss(model(idx[:, :-1]), idx[:, 1:]).backward()
        for name, p in model.named_parameters():
            if name.endswith("in_proj.weight"):
                rows = model.get_submodule(name.rsplit(".", 2)[0]).proj_dim
                assert p.grad[:rows].abs().sum() > 0, name
                assert torch.equal(p.grad[rows:], torch.zeros_like(p.grad[rows:])), name
            else:
                assert p.grad.abs().sum() > 0, name
        opt.step()
    for block in model.blocks:
        if block.kind == "mamba":
            w = block.mamba.in_proj.weight
            assert w.shape[0] % 128 == 0 and torch.equal(w[block.mamba.proj_dim:],
                                                         torch.zeros_like(w[block.mamba.proj_dim:]))


def test_mamba_initialisation():
    """A in [1, 16], softplus(dt_bias) in [1e-3, 1e-1], D = 1 (mamba_ssm's Mamba2 defaults)."""
    torch.manual_seed(0)
    mixer = Hybrid(tiny(mamba_head_dim=4)).blocks[0].mamba
    A = mixer.A_log.exp()
    dt = torch.nn.functional.softplus(mixer.dt_bias)
    assert ((1 <= A) & (A <= 16)).all() and ((1e-3 * 0.999 <= dt) & (dt <= 0.1001)).all()
    assert torch.equal(mixer.D, torch.ones_like(mixer.D))


def test_chunk_size_does_not_change_the_model():
    """The whole model with chunk 1 (the scan is then the recurrence, token by token) and 8
    gives the same logits to float32 accuracy."""
    torch.manual_seed(0)
    model = Hybrid(tiny())
    idx = torch.randint(0, 97, (2, 30))
    with torch.no_grad():
        a = model(idx)
        for block in model.blocks:
            if block.kind == "mamba":
                block.mamba.chunk = 1
        b = model(idx)
    assert (a - b).abs().max() <= 1e-5 * a.abs().max()
