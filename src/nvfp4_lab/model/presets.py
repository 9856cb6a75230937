"""Named model sizes, from a CPU-minutes toy to the paper's 1.2B, 8B and 12B models, read from
``conf/model/<name>.yaml`` of the tree the command line composes (``configs.Presets``): one
definition for the command line and the library.

Every preset is the paper's 1.2B block (paper App. A.3; docs/experiments.md, Models) scaled down:
FFN at 3x, GQA with two query heads per key/value head, dims multiples of 128 (so every linear layer
fits NVFP4's 16-element and MXFP4's 32-element blocks, FP8's 128-blocks, and RHT sizes up to 128).
The scaling study's family ``w32``, ``w64``, ``w96`` and ``nano`` keeps nano's five blocks (so
the paper recipe's last 20% in BF16 is one block at every size) and narrows them to multiples of
32: NVFP4, MXFP4 and the 16-point RHT fit, FP8's 128-blocks do not. Its learning rate is nano's
scaled as 1/width, 3e-3 * 128 / D (muP's rule for Adam's hidden weights). Non-embedding
parameters (``ModelConfig.non_embedding_params``, the formula):

    preset      D     L   H  K   hd  FFN    non-embedding   + emb + head at V = 4096   lr
    w32          32   5   2  1   16    96          46,432                    308,576   1.2e-2
    w64          64   5   2  1   32   192         185,024                    709,312   6e-3
    w96          96   5   2  1   48   288         415,776                  1,202,208   4e-3
    nano        128   5   4  2   32   384         738,688                  1,787,264   3e-3
    micro       256   8   4  2   64   768       4,722,944                  6,820,096   2e-3
    small       512  10   8  4   64  1536      23,603,712                 27,798,016   1.5e-3
    gpt2_small  768  12  12  6   64  2304      63,720,192                 70,011,648   6e-4
    base       1024  12   8  4  128  3072     113,271,808                121,660,416   6e-4
    paper_1b2  2048  20  16  8  128  6144     755,058,688                771,835,904   1.2e-3

``gpt2_small`` is GPT-2 small's shape (12 x 768, 12 heads, context 1024) in this block, for the
GPU scale (``conf/scale/gpu_124m.yaml``); with GPT-2's vocabulary padded to 50304 it has 141M
parameters in all, and 6e-4 is GPT-3's rate for its 125M model of that width.

The paper states no vocabulary for its 1.2B model; with a Nemotron-sized V = 131,072 the
embedding and head add 537M, for 1.29B in all, which is where "1.2B" comes from. Its 1.2e-3
is the paper's peak learning rate (WSD, decayed over the last 15%); the smaller presets' rates
are the usual larger ones for narrower models. ``paper_1b2`` keeps the paper's sequence length
of 8192; RoPE's base is not stated, so it is the common 10000.

The hybrids (``hybrid.py``; paper App. A.1-A.2) mix Mamba-2 (M), FFN (-) and attention (*)
blocks in the Nemotron-H ratio, about 45/45/10. The three CPU sizes match the transformer of the
same width in parameters (within 3%), so a step time or a loss compares architectures, not
sizes; their Mamba-2 mixers keep the paper's expansion 2 and conv window 4 with heads, groups
and state scaled down. The two paper models have the paper's dimensions (Tables 3-4: 8 groups,
state 128, head dim 64) and the layer patterns reported for Nemotron-H-8B and
Nemotron-Nano-12B-v2 (the paper prints the block counts, 24/24/4 and 28/28/6, not the order).
They are for GPU clusters, and the tests only build them on the meta device:

    preset          D     blocks  pattern              Mamba P/G/N  non-embedding   with V
    hybrid_nano     128    7      M-M*-M-              32/2/32            744,904   1,793,480
    hybrid_micro    256   12      M-M*-M-M*-M-         64/2/64          4,842,104   6,939,256
    hybrid_small    512   13      M-M-M-M*-M-M-        64/8/64         23,274,784  27,469,088
    nemotron_h_8b  4096   52      (24 M, 24 -, 4 *)    64/8/128     7,010,333,696  8,084,075,520
    nemotron_h_12b 5120   62      (28 M, 28 -, 6 *)    64/8/128    10,986,176,640  12,328,353,920

(V = 4096 for the CPU sizes, the Nemotron tokenizer's 131,072 for the paper's: 8.1B and 12.3B,
the paper's "8B" and "12B". Their in_proj rows are 18,560 and 22,784, the 12B's padded from
22,688; ``mamba2.py``.) Learning rates: the paper's peak rates for its models, the transformer
preset's of the same width for the CPU sizes.

The presets are shared instances: copy before changing one (``model_preset(name, **changes)``
does), or set the vocabulary through the config system.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..configs import Presets
from .config import ModelConfig

MODEL_PRESETS: Mapping[str, ModelConfig] = Presets("model", lambda s: ModelConfig(**s))


def model_preset(name: str, /, **changes: Any) -> ModelConfig:
    """A copy of the preset ``name`` with ``changes`` applied (validated again)."""
    if name not in MODEL_PRESETS:
        raise ValueError(f"model={name!r} is not one of {', '.join(MODEL_PRESETS)}")
    return replace(MODEL_PRESETS[name], **changes)
