"""The lazy package namespaces (lazy.py): each public name is its submodule's object, none can be
shadowed by a submodule, and importing a config type loads no torch."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = ["nvfp4_lab.formats", "nvfp4_lab.quant", "nvfp4_lab.model", "nvfp4_lab.data"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_is_the_object_its_submodule_defines(package):
    pkg = importlib.import_module(package)
    for name, module in pkg._NAMES.items():
        defined = getattr(importlib.import_module(f"{package}.{module}"), name)
        assert getattr(pkg, name) is defined, (package, name)
    assert set(pkg._NAMES) <= set(dir(pkg)) and sorted(pkg.__all__) == sorted(pkg._NAMES)
    with pytest.raises(AttributeError, match="has no attribute 'nonexistent'"):
        pkg.nonexistent  # noqa: B018


@pytest.mark.parametrize("package", PACKAGES)
def test_no_public_name_is_a_submodule(package):
    """Importing ``pkg.x`` binds the submodule to ``pkg.x``: a public function named x (as
    ``formats.quantize`` was, beside quantize.py) would then be the module, depending on order."""
    pkg = importlib.import_module(package)
    here = Path(pkg.__file__).parent
    submodules = {p.stem for p in here.glob("*.py")} | {p.parent.name for p in
                                                         here.glob("*/__init__.py")}
    assert not set(pkg._NAMES) & submodules


def test_the_config_types_import_without_torch_or_lightning():
    code = ("import sys\n"
            "from nvfp4_lab.quant import Recipe, preset\n"
            "from nvfp4_lab.model import ModelConfig, model_preset\n"
            "from nvfp4_lab.data import DataConfig\n"
            "from nvfp4_lab.config.schema import TrainConfig\n"
            "assert preset('nvfp4').rht.size == 16 and model_preset('nano').d_model == 128\n"
            "print(sorted(m for m in ('torch', 'lightning', 'pandas') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
