"""The model a ``ModelConfig`` describes."""
from __future__ import annotations

from .config import ModelConfig
from .hybrid import Hybrid
from .lm import LanguageModel
from .transformer import Transformer


def build_model(cfg: ModelConfig) -> LanguageModel:
    """A ``Hybrid`` if ``cfg`` has a pattern, else a ``Transformer``."""
    return Hybrid(cfg) if cfg.pattern else Transformer(cfg)
