"""``ModelConfig``: the shape of the model, as one flat dataclass.

The fields are the knobs of the paper's 1.2B "Nemotron Transformer" card (paper App. A.3, Table 5;
docs/experiments.md, Models): model width, depth, query and key/value heads (GQA), the FFN width as
a multiple of the model width (3x in the paper), and RoPE's base. The dataclass is also the Hydra
schema of ``conf/model/*.yaml``, so it holds plain types only (omegaconf 2.3 rejects
``typing.Literal``) and every bad value is refused when the config is built, with the key and the
fix in the message, rather than as a shape error deep inside a forward pass.

``vocab_size = 0`` means "not known yet": the runner sets it from the tokenizer before the
model is built; ``Transformer`` refuses a config that still says 0. ``lr`` is not a model
shape but the peak learning rate that suits this size; the training config reads it from
here so that ``model=small`` alone gives a sensible run.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ModelConfig:
    name: str = "nano"
    d_model: int = 128
    n_layers: int = 5
    n_heads: int = 4
    n_kv_heads: int = 2
    ffn_mult: float = 3.0
    vocab_size: int = 0  # 0: taken from the data at run time
    max_seq_len: int = 1024
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    init_std: float = 0.02
    lr: float = 3e-3
    pattern: str = ""  # "": transformer; else one of M - * per block (hybrid)
    mamba_expand: int = 2
    mamba_head_dim: int = 32
    mamba_groups: int = 2
    mamba_state: int = 32
    mamba_conv: int = 4
    mamba_chunk: int = 64

    def __post_init__(self) -> None:
        self.validate()

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ffn_dim(self) -> int:
        return round(self.ffn_mult * self.d_model)

    def non_embedding_params(self) -> int:
        """A transformer's parameters less its embedding and head (``num_params()``), from its
        shape: with H query heads, K key/value heads, hd = d_model / H, F = ffn_dim,

            N = L * (D * (H + 2K) * hd  +  D^2  +  2 * F * D  +  2D)  +  D
                     qkv                   proj    fc1 + fc2     norms    final norm

        It sizes a run by tokens per parameter (``train.tokens_per_param``)."""
        if self.pattern:
            raise ValueError(f"model.pattern={self.pattern!r}: the parameter count from the "
                             f"shape is a transformer's; size hybrid runs by train.max_tokens")
        d, hd = self.d_model, self.head_dim
        block = d * (self.n_heads + 2 * self.n_kv_heads) * hd + d * d + 2 * self.ffn_dim * d
        return self.n_layers * (block + 2 * d) + d

    @property
    def mamba_inner(self) -> int:
        return self.mamba_expand * self.d_model

    @property
    def mamba_heads(self) -> int:
        return self.mamba_inner // self.mamba_head_dim

    def validate(self) -> None:
        """Raise ValueError naming the first bad key and how to fix it."""
        self._require_positive("d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_mult",
                               "max_seq_len")
        if self.vocab_size < 0:
            raise ValueError(f"model.vocab_size={self.vocab_size} must be positive, or 0 to "
                             f"take it from the tokenizer")
        for key in ("rope_theta", "norm_eps", "init_std", "lr"):
            if not getattr(self, key) > 0:  # `not >` also catches NaN
                raise ValueError(f"model.{key}={getattr(self, key)} must be positive")
        if self.ffn_mult * self.d_model != self.ffn_dim:
            raise ValueError(f"model.ffn_mult={self.ffn_mult} gives {self.ffn_mult * self.d_model}"
                             f" FFN channels at d_model={self.d_model}; choose a multiple that "
                             f"gives a whole number")
        if self.pattern:
            self._validate_hybrid()
        if self.d_model % self.n_heads:
            raise ValueError(f"model.d_model={self.d_model} is not divisible by "
                             f"model.n_heads={self.n_heads}; choose n_heads dividing d_model")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"model.n_heads={self.n_heads} is not divisible by "
                             f"model.n_kv_heads={self.n_kv_heads}; GQA shares each key/value "
                             f"head among a whole number of query heads")
        if self.head_dim % 2:
            raise ValueError(f"model.d_model / model.n_heads = {self.head_dim} is odd; RoPE "
                             f"rotates pairs of channels, so the head dim must be even")

    def _require_positive(self, *keys: str) -> None:
        for key in keys:
            if getattr(self, key) <= 0:
                raise ValueError(f"model.{key}={getattr(self, key)} must be a positive integer")

    def _validate_hybrid(self) -> None:
        bad = sorted(set(self.pattern) - set("M-*"))
        if bad:
            raise ValueError(f"model.pattern={self.pattern!r} has {''.join(bad)!r}; a hybrid "
                             f"pattern uses M (Mamba-2), - (FFN) and * (attention) only")
        if self.n_layers != len(self.pattern):
            raise ValueError(f"model.n_layers={self.n_layers} but model.pattern has "
                             f"{len(self.pattern)} blocks; set model.n_layers="
                             f"{len(self.pattern)}, or a pattern of {self.n_layers} characters")
        self._require_positive("mamba_expand", "mamba_head_dim", "mamba_groups", "mamba_state",
                               "mamba_conv", "mamba_chunk")
        if self.mamba_inner % self.mamba_head_dim:
            raise ValueError(f"model.mamba_head_dim={self.mamba_head_dim} does not divide the "
                             f"{self.mamba_inner} inner channels (mamba_expand * d_model)")
        if self.mamba_heads % self.mamba_groups:
            raise ValueError(f"model.mamba_groups={self.mamba_groups} does not divide the "
                             f"{self.mamba_heads} Mamba-2 heads; B and C are shared by a whole "
                             f"number of heads")
