"""``ModelConfig``: the shape of the transformer, as one flat dataclass.

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
    ffn_mult: int = 3
    vocab_size: int = 0  # 0: taken from the data at run time
    max_seq_len: int = 1024
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    init_std: float = 0.02
    lr: float = 3e-3

    def __post_init__(self) -> None:
        self.validate()

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ffn_dim(self) -> int:
        return self.ffn_mult * self.d_model

    def validate(self) -> None:
        """Raise ValueError naming the first bad key and how to fix it."""
        for key in ("d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_mult", "max_seq_len"):
            if getattr(self, key) <= 0:
                raise ValueError(f"model.{key}={getattr(self, key)} must be a positive integer")
        if self.vocab_size < 0:
            raise ValueError(f"model.vocab_size={self.vocab_size} must be positive, or 0 to "
                             f"take it from the tokenizer")
        for key in ("rope_theta", "norm_eps", "init_std", "lr"):
            if not getattr(self, key) > 0:  # `not >` also catches NaN
                raise ValueError(f"model.{key}={getattr(self, key)} must be positive")
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
