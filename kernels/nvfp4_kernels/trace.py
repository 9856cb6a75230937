"""Each Triton kernel launch reported before it runs: the instrument that counts what a
training step launches (``nvfp4_lab.quant.launches``). Triton is this package's dependency,
so the hook on its launcher lives here."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from triton.runtime.jit import KernelInterface


@contextlib.contextmanager
def launches(record: Callable[[object, tuple], None],
             quiet: Callable[[], contextlib.AbstractContextManager]) -> Iterator[None]:
    """Inside the block every ``kernel[grid](*args)`` calls ``record(kernel, args)``, then
    runs under ``quiet()`` (so that what the launch itself does is not recorded)."""
    original = KernelInterface.__getitem__

    def getitem(kernel, grid):
        launch = original(kernel, grid)

        def run(*args, **kwargs):
            record(kernel, args)
            with quiet():
                return launch(*args, **kwargs)
        return run

    KernelInterface.__getitem__ = getitem
    try:
        yield
    finally:
        KernelInterface.__getitem__ = original
