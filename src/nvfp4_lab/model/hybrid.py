"""The paper's own architecture: a hybrid of Mamba-2, FFN and attention blocks (Nemotron-H).

The paper's headline runs (E01 12B, E03 8B, E04 precision switch, E09 Hadamard size at 12B;
docs/experiments.md) train hybrids (paper App. A.1-A.2): 62 or 52 blocks, most of them Mamba-2
or squared-ReLU FFN, a few self-attention, "each block has 2 linear layers". ``Hybrid(cfg)``
builds one from ``cfg.pattern``, one block per character in the Nemotron-H convention:

    M  Mamba-2 mixer    (mamba.in_proj, mamba.out_proj; mamba2.py)
    -  FFN              (mlp.fc1, mlp.fc2; the transformer's squared-ReLU MLP)
    *  self-attention   (attn.qkv, attn.proj; the transformer's GQA attention, without RoPE)

    block:  x = x + mixer(norm(x))      pre-norm RMSNorm, residual on every block

There is no position embedding and no RoPE, as in the paper's hybrids: the Mamba-2 blocks'
causal convolution and scan carry the order. Each block holds two linear layers, so
``quant.convert`` sees the paper's block structure as it is: ``high_precision.first/last`` count
blocks of the pattern (12B: first 2 and last 8 blocks, 20 of 124 linear layers, the paper's
"16%"), and the layer report groups layers by block kind (``HybridBlock.kind``).
"""
from __future__ import annotations

import torch
from torch import nn

from .config import ModelConfig
from .lm import LanguageModel
from .mamba2 import Mamba2
from .transformer import MLP, Attention

#: pattern character -> (block kind, the mixer's attribute name)
KINDS = {"M": "mamba", "-": "mlp", "*": "attn"}


class HybridBlock(nn.Module):
    """Pre-norm residual block around one mixer: Mamba-2, FFN or attention."""

    def __init__(self, symbol: str, cfg: ModelConfig):
        super().__init__()
        self.kind = KINDS[symbol]
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        mixer = {"mamba": Mamba2, "mlp": MLP, "attn": Attention}[self.kind](cfg)
        self.add_module(self.kind, mixer)  # so that names read blocks.3.mamba.in_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, T, D] -> [B, T, D]."""
        return x + getattr(self, self.kind)(self.norm(x))


class Hybrid(LanguageModel):
    """Token ids to next-token logits through the pattern's blocks; see the module docstring."""

    residual_projections = ("mamba.out_proj", "mlp.fc2", "attn.proj")

    def __init__(self, cfg: ModelConfig):
        if not cfg.pattern:
            raise ValueError("model.pattern is empty: a hybrid needs a pattern of M, - and *")
        super().__init__(cfg)
        self.reset_parameters()

    def build_blocks(self, cfg: ModelConfig) -> list[nn.Module]:
        return [HybridBlock(symbol, cfg) for symbol in cfg.pattern]

    @property
    def residual_adds(self) -> int:
        return len(self.blocks)  # one mixer per block

    def reset_parameters(self) -> None:
        """The shared init (``LanguageModel.reset_parameters``), then each Mamba-2 mixer's own
        (state-space parameters; in_proj's alignment rows back to zero)."""
        super().reset_parameters()
        for module in self.modules():
            if isinstance(module, Mamba2):
                module.reset_mixer()

    def run_blocks(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x

    def mixing_flops(self, seq_len: int) -> float:
        """Attention BMMs as in ``Transformer.mixing_flops`` (12 * D * T per attention block),
        plus the chunked scan per Mamba-2 block, forward 2 Q (G N + di) for the in-chunk
        scores and their product with x, 4 N di for the chunk states in and out, times 3 with
        backward (Q the chunk length; the full Q x Q block counted, as for attention)."""
        c = self.cfg
        counts = {kind: sum(KINDS[s] == kind for s in c.pattern) for kind in KINDS.values()}
        Q = min(c.mamba_chunk, seq_len)
        scan = 3 * (2 * Q * (c.mamba_groups * c.mamba_state + c.mamba_inner)
                    + 4 * c.mamba_state * c.mamba_inner)
        return 12 * counts["attn"] * c.d_model * seq_len + counts["mamba"] * scan
