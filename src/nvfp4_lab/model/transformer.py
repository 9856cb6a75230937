"""The decoder-only transformer of the paper's 1.2B ablation model, at any size.

The paper runs most of its ablations on a 1.2B "Nemotron Transformer" (paper App. A.3;
docs/experiments.md, Models): 20 blocks of self-attention plus FFN, model dim 2048, FFN 6144
(3x), head dim 128, 16 query heads sharing 8 key/value heads (GQA), squared-ReLU FFN, RoPE, no
dropout, no linear biases, separate embedding and output weights. The norm is not stated;
RMSNorm is inferred from the paper's hybrid models. ``Transformer(cfg)`` builds that block at
the size the config asks for (``presets.py`` names five, from a CPU-sized ``nano`` up to
``paper_1b2``):

    idx [B, T] -> tok_emb -> blocks[0..L-1] -> norm -> lm_head -> logits [B, T, V]

    block:  x = x + attn.proj(SDPA(RoPE(q), RoPE(k), v))   q, k, v = attn.qkv(attn_norm(x))
            x = x + mlp.fc2(relu(mlp.fc1(mlp_norm(x)))^2)

There is no position embedding: RoPE on q and k is the only position signal, as in the paper.

This module knows nothing about quantization, yet it is shaped for ``quant.convert``: the
blocks are the ``nn.ModuleList`` named ``blocks``; each holds exactly four ``nn.Linear``s
(``attn.qkv``, ``attn.proj``, ``mlp.fc1``, ``mlp.fc2``: the GEMMs the paper quantizes), each
called on ``[B, T, in]`` activations; the embedding, norms, the attention BMMs inside SDPA and
the untied ``lm_head`` (outside the blocks) are what the paper keeps in high precision
(docs/experiments.md, High precision). q, k and v come from one fused ``qkv`` linear, as in
Megatron, so each block is quantized as four GEMMs, not six.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .lm import LanguageModel


def rope_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, ...]:
    """cos, sin: [max_seq_len, head_dim // 2] float32; channel pair i turns at theta^(-2i/hd)."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)
    # float64 for the angles: at position 8191 a float32 product is off by ~1e-3 rad
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs (i, i + hd/2) of x by the angle of x's position.

    x: [B, H, T, hd]; cos, sin: [T, hd/2]. Returns x's shape and dtype, computed in float32
    so that bf16 activations are rounded once, after the rotation.
    """
    x1, x2 = x.float().chunk(2, dim=-1)  # [B, H, T, hd/2] each (the "rotate half" layout)
    out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.to(x.dtype)


class Attention(nn.Module):
    """Causal self-attention with grouped key/value heads and RoPE."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        qkv_dim = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, qkv_dim, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def heads(self, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: [B, T, D] -> q [B, H, T, hd], k and v [B, Hkv, T, hd]; q and k rotated unless
        cos is None (the hybrid's attention has no position signal of its own)."""
        B, T, _ = x.shape
        hd = self.head_dim
        q, k, v = self.qkv(x).split(
            (self.n_heads * hd, self.n_kv_heads * hd, self.n_kv_heads * hd), dim=-1)
        q = q.view(B, T, self.n_heads, hd).transpose(1, 2)  # [B, H, T, hd]
        k = k.view(B, T, self.n_kv_heads, hd).transpose(1, 2)  # [B, Hkv, T, hd]
        v = v.view(B, T, self.n_kv_heads, hd).transpose(1, 2)  # [B, Hkv, T, hd]
        if cos is None:
            return q, k, v
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def forward(self, x: torch.Tensor, cos: torch.Tensor | None = None,
                sin: torch.Tensor | None = None) -> torch.Tensor:
        """x: [B, T, D]; cos, sin: [T, hd/2], or None for no RoPE -> [B, T, D]."""
        B, T, D = x.shape
        q, k, v = self.heads(x, cos, sin)
        # enable_gqa: query head h reads key/value head h // (H / Hkv), without materialising
        # the repeated k and v
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        y = y.transpose(1, 2).reshape(B, T, D)  # [B, H, T, hd] -> [B, T, H * hd]
        return self.proj(y)


class MLP(nn.Module):
    """The paper's FFN: fc1 to ffn_mult * D, squared ReLU, fc2 back to D."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.ffn_dim, bias=False)
        self.fc2 = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, T, D] -> [B, T, D]."""
        return self.fc2(F.relu(self.fc1(x)).square())


class Block(nn.Module):
    """Pre-norm residual block: attention, then FFN, each added to the residual stream."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x: [B, T, D]; cos, sin: [T, hd/2] -> [B, T, D]."""
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(LanguageModel):
    """Token ids to next-token logits; see the module docstring for the layout."""

    residual_projections = ("attn.proj", "mlp.fc2")

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        # not persistent: a pure function of the config, so checkpoints need not carry it
        cos, sin = rope_tables(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def build_blocks(self, cfg: ModelConfig) -> list[nn.Module]:
        return [Block(cfg) for _ in range(cfg.n_layers)]

    @property
    def residual_adds(self) -> int:
        return 2 * self.cfg.n_layers  # attention and FFN in every block

    def run_blocks(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]  # [T, hd/2]
        for block in self.blocks:
            x = block(x, cos, sin)
        return x

    def mixing_flops(self, seq_len: int) -> float:
        """The attention BMMs: QK^T and AV, 2 * T * D each forward, times 3 with backward.
        Counts the full T x T score matrix as PaLM and nanoGPT's MFU do; a causal kernel
        skips about half of it."""
        return 12 * self.cfg.n_layers * self.cfg.d_model * seq_len
