"""The ``nvfp4-lab`` console script: a small dispatcher over subcommands.

    nvfp4-lab info                      versions, devices, formats, a bit-exactness self-check

Each subcommand is a function taking the remaining argv. ``run``, ``plot``, ``compare`` and
``prepare-data`` join this table as the runner and the analysis land (shared/design.md).
"""
from __future__ import annotations

import platform
import sys


def info(argv: list[str]) -> int:
    """Print versions, the accelerator, the formats, and an eager-vs-compiled self-check."""
    import torch

    from . import __version__
    from .formats import FORMATS, QuantSpec, fake_quantize

    print(f"nvfp4-lab {__version__}  python {platform.python_version()}  torch {torch.__version__}")
    cuda = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    print(f"cpu: {platform.machine()}, {torch.get_num_threads()} threads; cuda: {cuda}")
    print(f"formats: {', '.join(FORMATS)}")
    if "--no-compile" in argv:
        return 0
    x = torch.randn(64, 256)
    for spec in (QuantSpec("nvfp4"), QuantSpec("mxfp4")):
        eager = fake_quantize(x, spec)
        same = torch.equal(eager, fake_quantize(x, spec, backend="compiled"))
        print(f"compiled {spec.fmt} == eager: {same}")
        if not same:
            return 1
    return 0


COMMANDS = {"info": info}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        got = f"unknown subcommand {argv[0]!r}; " if argv else ""
        print(f"usage: nvfp4-lab {{{','.join(COMMANDS)}}} ...\n{got}"
              f"available: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
