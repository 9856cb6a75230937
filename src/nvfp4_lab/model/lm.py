"""What every model the runner trains shares: token ids in, next-token logits out.

    idx [B, T] -> tok_emb -> blocks[0..L-1] -> norm -> lm_head -> logits [B, T, V]

Subclasses say what a block is (``build_blocks``) and how the stream runs through the blocks
(``run_blocks``): ``Transformer`` (attention plus FFN per block) and ``Hybrid`` (one Mamba-2,
FFN or attention mixer per block). The embedding and the untied ``lm_head`` sit outside the
``blocks`` ``nn.ModuleList``, which is where ``quant.convert`` looks for the linear layers to
quantize: what the paper keeps in high precision (docs/experiments.md, High precision) stays out
of its reach by construction.

``lm_loss`` is the training loss; ``model.build_model(cfg)`` picks the class from the config.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig


class LanguageModel(nn.Module):
    """Embedding, blocks, final RMSNorm and LM head; see the module docstring."""

    #: names of the linear layers that write into the residual stream (their init is shrunk)
    residual_projections: tuple[str, ...] = ()

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        if cfg.vocab_size <= 0:
            raise ValueError(f"model.vocab_size={cfg.vocab_size}: set it to the tokenizer's "
                             f"vocabulary size before building the model")
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(self.build_blocks(cfg))
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def build_blocks(self, cfg: ModelConfig) -> list[nn.Module]:
        raise NotImplementedError

    def run_blocks(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, T, D] -> [B, T, D] through every block."""
        raise NotImplementedError

    @property
    def residual_adds(self) -> int:
        """How many branch outputs are added to the residual stream in one forward."""
        raise NotImplementedError

    def reset_parameters(self) -> None:
        """N(0, init_std) for the embedding and every linear; the projections that write into
        the residual stream get init_std / sqrt(residual_adds).

        Each branch output added to the residual stream adds variance at init; shrinking the
        projections that write them keeps the final stream's scale independent of depth
        (GPT-2's scheme), so one init_std and one learning rate serve every preset. Norm gains
        start at 1.
        """
        std = self.cfg.init_std
        nn.init.normal_(self.tok_emb.weight, std=std)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                residual = name.endswith(self.residual_projections)
                scale = 1 / math.sqrt(self.residual_adds) if residual else 1.0
                nn.init.normal_(module.weight, std=std * scale)
            elif isinstance(module, nn.RMSNorm):
                nn.init.ones_(module.weight)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx: [B, T] int64 token ids -> logits [B, T, V] (float32, or autocast's dtype)."""
        T = idx.shape[1]
        if T > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds model.max_seq_len="
                             f"{self.cfg.max_seq_len}; raise model.max_seq_len")
        return self.lm_head(self.norm(self.run_blocks(self.tok_emb(idx))))

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; non_embedding leaves out tok_emb and lm_head (both V x D)."""
        skip = ("tok_emb.", "lm_head.") if non_embedding else ()
        return sum(p.numel() for n, p in self.named_parameters() if not n.startswith(skip))

    def mixing_flops(self, seq_len: int) -> float:
        """Training FLOPs per token that no weight matrix accounts for (attention, scans)."""
        raise NotImplementedError

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """Training FLOPs per token (forward + backward) at seq_len (default max_seq_len):
        6N for the weights that multiply (every block parameter and lm_head; the embedding is
        a lookup), plus ``mixing_flops``."""
        T = seq_len or self.cfg.max_seq_len
        n = self.num_params(non_embedding=True) + self.lm_head.weight.numel()
        return 6 * n + self.mixing_flops(T)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy in nats/token, computed in float32.

    logits: [B, T, V] (any float dtype); targets: [B, T] int64 (-100 entries are ignored).
    """
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
