"""Starting ``nvfp4-lab`` from a test: the console script, its processes' environment, the
fast offline settings of a training run, and the processes a launcher started."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

# a console script sits beside the interpreter that installed it; else on PATH
_BESIDE = Path(sys.executable).with_name("nvfp4-lab")
SCRIPT = str(_BESIDE) if _BESIDE.exists() else shutil.which("nvfp4-lab")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]

# 2 blocks, bytes of the stdlib's pydoc text, 64-token windows: seconds per run
FAST = ["data=pydoc", "model.n_layers=2", "train.seq_len=64", "train.batch_size=4",
        "train.val_batches=2", "train.warmup=0", "trainer.progress=none"]

# set by torchrun or srun for a process of theirs: a test's own launch must not inherit them
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                      "MASTER_PORT", "HYDRA_FULL_ERROR")


def fast(tmp: Path, steps: int = 2) -> list[str]:
    """``FAST`` writing under ``tmp``, ``steps`` steps, one validation and checkpoint at the
    end, a logged row every step."""
    return [*FAST, f"output_root={tmp}", f"train.max_steps={steps}", f"train.val_every={steps}",
            f"train.ckpt_every={steps}", "train.log_every=1"]


def process_env() -> dict[str, str]:
    """This environment for a started process: plain progress lines (``CI``), one thread per
    process (tiny GEMMs on 2 busy cores), no launcher's variables."""
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    return {**base, "CI": "1", "OMP_NUM_THREADS": "1"}


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc (the children lists of each task). torchrun
    starts each rank in a session of its own: killing its process group leaves them."""
    out, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except FileNotFoundError:   # ended meanwhile
                continue
            out += kids
            todo += kids
    return out
