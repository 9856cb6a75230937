"""The transformer the runner trains: a plain ``nn.Module`` that knows nothing about
quantization (``quant.convert`` swaps its linear layers afterwards).

``ModelConfig`` (``config.py``) is its shape and the Hydra schema of ``conf/model/``;
``Transformer`` and ``lm_loss`` (``transformer.py``) are the paper's 1.2B block design at any
size; ``MODEL_PRESETS`` (``presets.py``) names five sizes, ``nano`` to ``paper_1b2``.
"""
from .config import ModelConfig
from .presets import MODEL_PRESETS, model_preset
from .transformer import Transformer, lm_loss

__all__ = ["MODEL_PRESETS", "ModelConfig", "Transformer", "lm_loss", "model_preset"]
