"""The models the runner trains: plain ``nn.Module``s that know nothing about quantization
(``quant.convert`` swaps their linear layers afterwards).

``ModelConfig`` (``config.py``) is their shape and the Hydra schema of ``conf/model/``;
``Transformer`` (``transformer.py``) is the paper's 1.2B block design at any size, ``Hybrid``
(``hybrid.py``) its Mamba-2 / FFN / attention hybrids (``mamba2.py`` and the scan in ``ssd.py``);
both share ``LanguageModel`` and ``lm_loss`` (``lm.py``). ``MODEL_PRESETS`` (``presets.py``)
names the sizes, ``nano`` to ``paper_1b2`` and ``hybrid_nano`` to ``nemotron_h_12b``.
"""
from ..lazy import by_module, exports

_NAMES = by_module({
    "config": "ModelConfig",
    "hybrid": "Hybrid",
    "lm": "LanguageModel lm_loss",
    "presets": "MODEL_PRESETS model_preset",
    "transformer": "Transformer",
    "build": "build_model",
})
__getattr__, __dir__ = exports(__name__, _NAMES)
__all__ = sorted(_NAMES)
