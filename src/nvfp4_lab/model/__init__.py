"""The models the runner trains: plain ``nn.Module``s that know nothing about quantization
(``quant.convert`` swaps their linear layers afterwards).

``ModelConfig`` (``config.py``) is their shape and the Hydra schema of ``conf/model/``;
``Transformer`` (``transformer.py``) is the paper's 1.2B block design at any size, ``Hybrid``
(``hybrid.py``) its Mamba-2 / FFN / attention hybrids (``mamba2.py`` and the scan in ``ssd.py``);
both share ``LanguageModel`` and ``lm_loss`` (``lm.py``). ``MODEL_PRESETS`` (``presets.py``)
names the sizes, ``nano`` to ``paper_1b2`` and ``hybrid_nano`` to ``nemotron_h_12b``.
"""
from .config import ModelConfig
from .hybrid import Hybrid
from .lm import LanguageModel, lm_loss
from .presets import MODEL_PRESETS, model_preset
from .transformer import Transformer


def build_model(cfg: ModelConfig) -> LanguageModel:
    """The model ``cfg`` describes: a ``Hybrid`` if it has a pattern, else a ``Transformer``."""
    return Hybrid(cfg) if cfg.pattern else Transformer(cfg)


__all__ = ["MODEL_PRESETS", "Hybrid", "LanguageModel", "ModelConfig", "Transformer",
           "build_model", "lm_loss", "model_preset"]
