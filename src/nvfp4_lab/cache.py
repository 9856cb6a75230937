"""The user cache: one folder per user and machine for everything the tool compiles, downloads
or prepares, whatever directory a command runs from.

    $NVFP4_LAB_CACHE, else $XDG_CACHE_HOME/nvfp4-lab (default ~/.cache/nvfp4-lab)
      inductor/       inductor's caches, its precompiled headers, the compiled quantizers'
                      packages (quant/packaged.py)
      data/           downloaded corpora (data/downloads/) and prepared token shards
                      (data/prepared.py)
      timings.json    this machine's measured step times (quant/cost.py)

Work that two processes could start at once (two jobs of a sweep preparing one corpus) runs
under ``locked``: one does it, the other waits and then finds it done.
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ENV = "NVFP4_LAB_CACHE"


def cache_root() -> Path:
    """``$NVFP4_LAB_CACHE``, else ``$XDG_CACHE_HOME/nvfp4-lab`` (default ``~/.cache``)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nvfp4-lab"


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created if absent), waiting for any other
    process that holds it. The kernel releases it when its holder exits, killed or not."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
