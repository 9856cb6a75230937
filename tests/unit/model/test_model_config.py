"""ModelConfig validation, the presets' shapes and parameter counts (closed form, and the
table in presets.py's docstring), and the config as an OmegaConf structured schema."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from nvfp4_lab.model import MODEL_PRESETS, ModelConfig, Transformer, model_preset
from nvfp4_lab.model import presets as presets_module

TRANSFORMERS = [n for n, c in MODEL_PRESETS.items() if not c.pattern]
SCALING_FAMILY = ("w32", "w64", "w96")      # nano narrowed (results/preregistration.md)


def non_embedding_formula(c: ModelConfig) -> int:
    """Per block: qkv, proj, fc1 + fc2, two RMSNorm gains; then the final norm."""
    d, hd = c.d_model, c.d_model // c.n_heads
    qkv = d * (c.n_heads + 2 * c.n_kv_heads) * hd
    return c.n_layers * (qkv + d * d + 2 * c.ffn_mult * d * d + 2 * d) + d


def meta_model(cfg: ModelConfig) -> Transformer:
    """The model without memory or init cost (paper_1b2 would take 3+ GB on the CPU)."""
    with torch.device("meta"):
        return Transformer(cfg)


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_preset_param_counts_match_the_formula(name):
    cfg = model_preset(name, vocab_size=4096)
    model = meta_model(cfg)
    n = model.num_params()
    assert n == non_embedding_formula(cfg)
    assert model.num_params(non_embedding=False) == n + 2 * 4096 * cfg.d_model  # untied
    assert f"{n:,}" in presets_module.__doc__  # the docstring table stays true
    assert f"{n + 2 * 4096 * cfg.d_model:,}" in presets_module.__doc__


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_preset_param_count_from_the_shape(name):
    """ModelConfig's closed form against the modules' own count."""
    cfg = model_preset(name, vocab_size=4096)
    assert cfg.non_embedding_params() == meta_model(cfg).num_params()


def test_param_count_from_the_shape_refuses_a_hybrid():
    with pytest.raises(ValueError, match=r"model.pattern='M-M\*-M-'.*train.max_tokens"):
        MODEL_PRESETS["hybrid_nano"].non_embedding_params()


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_preset_dims_fit_every_block_size(name):
    """Multiples of 128 (FP8's blocks, RHT up to 128); the scaling family of 32 (NVFP4, MXFP4,
    the 16-point RHT)."""
    cfg = MODEL_PRESETS[name]
    assert cfg.name == name
    fits = 32 if name in SCALING_FAMILY else 128
    assert cfg.d_model % fits == 0 and cfg.ffn_dim % fits == 0 and cfg.head_dim % 16 == 0
    assert cfg.n_heads == 2 * cfg.n_kv_heads  # GQA 2:1 as the paper's 1.2B
    assert cfg.ffn_mult == 3


def test_paper_preset_is_the_paper_card():
    """docs/experiments.md, Models, M1.2B: 20 blocks, D 2048, FFN 6144, head dim 128, 16 Q / 8
    KV heads, peak LR 1.2e-3, sequence length 8192."""
    c = MODEL_PRESETS["paper_1b2"]
    assert (c.n_layers, c.d_model, c.ffn_dim, c.head_dim, c.n_heads, c.n_kv_heads) == \
        (20, 2048, 6144, 128, 16, 8)
    assert (c.lr, c.max_seq_len) == (1.2e-3, 8192)


def test_nano_and_base_sizes():
    assert non_embedding_formula(MODEL_PRESETS["nano"]) == 738_688
    # the scaling family, by hand: 5 * (9 D^2 + 2 D) + D
    assert [non_embedding_formula(MODEL_PRESETS[n]) for n in SCALING_FAMILY] == \
        [5 * (9 * d * d + 2 * d) + d for d in (32, 64, 96)]
    assert non_embedding_formula(MODEL_PRESETS["base"]) == 113_271_808


def test_model_preset_copies():
    cfg = model_preset("nano", vocab_size=256)
    assert cfg.vocab_size == 256 and MODEL_PRESETS["nano"].vocab_size == 0
    with pytest.raises(ValueError, match="model='huge' is not one of base, gpt2_small, "):
        model_preset("huge")
    with pytest.raises(ValueError, match="model.n_kv_heads=3"):
        model_preset("nano", n_kv_heads=3)


@pytest.mark.parametrize("changes, match", [
    ({"d_model": 130}, r"model.d_model=130 is not divisible by model.n_heads=4"),
    ({"n_kv_heads": 3}, r"model.n_heads=4 is not divisible by model.n_kv_heads=3"),
    ({"d_model": 12, "n_heads": 4, "n_kv_heads": 1}, r"head dim must be even"),
    ({"n_layers": 0}, r"model.n_layers=0 must be a positive integer"),
    ({"n_heads": -4}, r"model.n_heads=-4 must be a positive integer"),
    ({"ffn_mult": 0}, r"model.ffn_mult=0"),
    ({"ffn_mult": 2.001}, r"model.ffn_mult=2.001 gives 256.128 FFN channels"),
    ({"pattern": "M-x", "n_layers": 3}, r"model.pattern='M-x' has 'x'; a hybrid pattern uses M"),
    ({"pattern": "M-*"}, r"model.n_layers=5 but model.pattern has 3 blocks; set model.n_layers=3"),
    ({"pattern": "M-", "n_layers": 2, "mamba_head_dim": 48},
     r"model.mamba_head_dim=48 does not divide the 256 inner channels"),
    ({"pattern": "M-", "n_layers": 2, "mamba_groups": 3},
     r"model.mamba_groups=3 does not divide the 8 Mamba-2 heads"),
    ({"pattern": "M-", "n_layers": 2, "mamba_chunk": 0}, r"model.mamba_chunk=0 must be a positive"),
    ({"vocab_size": -1}, r"model.vocab_size=-1 must be positive, or 0"),
    ({"init_std": 0.0}, r"model.init_std=0.0 must be positive"),
    ({"lr": float("nan")}, r"model.lr=nan must be positive"),
])
def test_validation_names_the_key(changes, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(**changes)
    cfg = ModelConfig()  # validate() also catches a config changed after construction
    for key, value in changes.items():
        setattr(cfg, key, value)
    with pytest.raises(ValueError, match=match):
        cfg.validate()


def test_model_needs_a_vocabulary():
    with pytest.raises(ValueError, match="model.vocab_size=0: set it to the tokenizer"):
        Transformer(ModelConfig())


def test_omegaconf_schema():
    """The runner uses ModelConfig as a structured config: plain types, properties ignored,
    and validation when the config becomes an object."""
    omegaconf = pytest.importorskip("omegaconf")
    schema = omegaconf.OmegaConf.structured(ModelConfig)
    assert set(schema) == {f.name for f in dataclasses.fields(ModelConfig)}
    cfg = omegaconf.OmegaConf.merge(schema, {"d_model": 256, "vocab_size": 64})
    obj = omegaconf.OmegaConf.to_object(cfg)
    assert isinstance(obj, ModelConfig) and obj.head_dim == 64 and obj.ffn_dim == 768
    with pytest.raises(ValueError, match="model.n_heads=4 is not divisible"):
        omegaconf.OmegaConf.to_object(omegaconf.OmegaConf.merge(schema, {"n_kv_heads": 3}))
