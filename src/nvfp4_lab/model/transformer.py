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

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig


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

    def heads(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: [B, T, D] -> q [B, H, T, hd], k and v [B, Hkv, T, hd]; q and k rotated."""
        B, T, _ = x.shape
        hd = self.head_dim
        q, k, v = self.qkv(x).split(
            (self.n_heads * hd, self.n_kv_heads * hd, self.n_kv_heads * hd), dim=-1)
        q = q.view(B, T, self.n_heads, hd).transpose(1, 2)  # [B, H, T, hd]
        k = k.view(B, T, self.n_kv_heads, hd).transpose(1, 2)  # [B, Hkv, T, hd]
        v = v.view(B, T, self.n_kv_heads, hd).transpose(1, 2)  # [B, Hkv, T, hd]
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x: [B, T, D]; cos, sin: [T, hd/2] -> [B, T, D]."""
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


class Transformer(nn.Module):
    """Token ids to next-token logits; see the module docstring for the layout."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        if cfg.vocab_size <= 0:
            raise ValueError(f"model.vocab_size={cfg.vocab_size}: set it to the tokenizer's "
                             f"vocabulary size before building the model")
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        # not persistent: a pure function of the config, so checkpoints need not carry it
        cos, sin = rope_tables(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, init_std) for the embedding and every linear; the two projections that write
        into the residual stream (attn.proj, mlp.fc2) get init_std / sqrt(2 * n_layers).

        Each block adds two branch outputs to the residual stream, so at init its variance
        grows with the 2 * n_layers additions; shrinking those projections keeps the final
        stream's scale independent of depth (GPT-2's scheme), so one init_std and one
        learning rate serve every preset. Norm gains start at 1.
        """
        std = self.cfg.init_std
        nn.init.normal_(self.tok_emb.weight, std=std)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                residual = name.endswith(("attn.proj", "mlp.fc2"))
                scale = 1 / math.sqrt(2 * self.cfg.n_layers) if residual else 1.0
                nn.init.normal_(module.weight, std=std * scale)
            elif isinstance(module, nn.RMSNorm):
                nn.init.ones_(module.weight)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx: [B, T] int64 token ids -> logits [B, T, V] (float32, or autocast's dtype)."""
        T = idx.shape[1]
        if T > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds model.max_seq_len="
                             f"{self.cfg.max_seq_len}; raise model.max_seq_len")
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]  # [T, hd/2]
        x = self.tok_emb(idx)  # [B, T, D]
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.lm_head(self.norm(x))

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; non_embedding leaves out tok_emb and lm_head (both V x D)."""
        skip = ("tok_emb.", "lm_head.") if non_embedding else ()
        return sum(p.numel() for n, p in self.named_parameters() if not n.startswith(skip))

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """Training FLOPs per token (forward + backward) at seq_len (default max_seq_len).

        6N for the weights that multiply (every block parameter and lm_head; the embedding is
        a lookup), plus 12 * L * D * T for the attention BMMs (QK^T and AV, 2 * T * D each
        forward, times 3 with backward). Counts the full T x T score matrix as PaLM and
        nanoGPT's MFU do; a causal kernel skips about half of it.
        """
        T = seq_len or self.cfg.max_seq_len
        n = self.num_params(non_embedding=True) + self.lm_head.weight.numel()
        return 6 * n + 12 * self.cfg.n_layers * self.cfg.d_model * T


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy in nats/token, computed in float32.

    logits: [B, T, V] (any float dtype); targets: [B, T] int64 (-100 entries are ignored).
    """
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
