"""Markers for tests of the compiled backend, which is refused under a torch older than the one
it is checked on (``quant/packaged.py``, MIN_TORCH)."""
import pytest

from nvfp4_lab.quant.packaged import MIN_TORCH, torch_checked

needs_compiled = pytest.mark.skipif(
    not torch_checked(), reason=f"the compiled backend needs torch >= {MIN_TORCH}")
