"""Named model sizes, from a CPU-minutes toy to the paper's 1.2B ablation model.

Every preset is the paper's 1.2B block (paper App. A.3; docs/experiments.md, Models) scaled down:
FFN at 3x, GQA with two query heads per key/value head, dims multiples of 128 (so every linear layer
fits NVFP4's 16-element and MXFP4's 32-element blocks, FP8's 128-blocks, and RHT sizes up to 128).
Non-embedding parameters (every block plus the final norm; ``Transformer.num_params()``)
are, with H query heads, K key/value heads and hd = D / H:

    N = L * (D * (H + 2K) * hd  +  D^2  +  2 * ffn_mult * D^2  +  2D)  +  D
             qkv                   proj    fc1 + fc2               norms    final norm

    preset      D     L   H  K   hd  FFN    non-embedding   + emb + head at V = 4096   lr
    nano        128   5   4  2   32   384         738,688                  1,787,264   3e-3
    micro       256   8   4  2   64   768       4,722,944                  6,820,096   2e-3
    small       512  10   8  4   64  1536      23,603,712                 27,798,016   1.5e-3
    base       1024  12   8  4  128  3072     113,271,808                121,660,416   6e-4
    paper_1b2  2048  20  16  8  128  6144     755,058,688                771,835,904   1.2e-3

The paper states no vocabulary for its 1.2B model; with a Nemotron-sized V = 131,072 the
embedding and head add 537M, for 1.29B in all, which is where "1.2B" comes from. Its 1.2e-3
is the paper's peak learning rate (WSD, decayed over the last 15%); the smaller presets' rates
are the usual larger ones for narrower models. ``paper_1b2`` keeps the paper's sequence length
of 8192; RoPE's base is not stated, so it is the common 10000.

The presets are shared instances: copy before changing one (``model_preset(name, **changes)``
does), or set the vocabulary through the config system.
"""
from __future__ import annotations

from dataclasses import replace

from .config import ModelConfig

MODEL_PRESETS: dict[str, ModelConfig] = {
    "nano": ModelConfig(name="nano", d_model=128, n_layers=5, n_heads=4, n_kv_heads=2,
                        lr=3e-3),
    "micro": ModelConfig(name="micro", d_model=256, n_layers=8, n_heads=4, n_kv_heads=2,
                         lr=2e-3),
    "small": ModelConfig(name="small", d_model=512, n_layers=10, n_heads=8, n_kv_heads=4,
                         lr=1.5e-3),
    "base": ModelConfig(name="base", d_model=1024, n_layers=12, n_heads=8, n_kv_heads=4,
                        lr=6e-4),
    "paper_1b2": ModelConfig(name="paper_1b2", d_model=2048, n_layers=20, n_heads=16,
                             n_kv_heads=8, max_seq_len=8192, lr=1.2e-3),
}


def model_preset(name: str, /, **changes) -> ModelConfig:
    """A copy of the preset ``name`` with ``changes`` applied (validated again)."""
    if name not in MODEL_PRESETS:
        raise ValueError(f"model={name!r} is not one of {', '.join(MODEL_PRESETS)}")
    return replace(MODEL_PRESETS[name], **changes)
