"""The kernel tests under the Triton that the newest supported torch's CUDA build pins
(kernels/README.md, Requirements and limits: the table of versions), not only under the 3.6
that constraints.txt pins: that Triton is installed with ``pip --target`` beside this
environment's torch, put first on PYTHONPATH, and the kernel tests run with it in two
subprocesses side by side: the interpreter's numerics and the sm_80/sm_90 compile checks,
which are what a Triton version changes. Not ``test_dispatch.py``: it tests which backend
quantizes an operand, over the same kernels, and runs under the pinned Triton in the main
suite."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\s*\| (\d+\.\d+\.\d+) \| (\d+\.\d+\.\d+) \|", re.M)


def newest_pinned() -> tuple[str, str]:
    """(torch, Triton) of the newest torch in kernels/README.md's table."""
    rows = ROW.findall((REPO / "kernels" / "README.md").read_text())
    assert len(rows) >= 3, rows
    return max(rows, key=lambda r: tuple(int(p) for p in r[0].split(".")))


@pytest.mark.slow
def test_kernel_tests_pass_under_the_newest_pinned_triton(tmp_path):
    pytest.importorskip("triton")
    _, version = newest_pinned()
    target = tmp_path / "triton"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                          "--target", str(target), f"triton=={version}"],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(target), *filter(None, [os.environ.get("PYTHONPATH")])]), "OMP_NUM_THREADS": "1"}
    check = subprocess.run([sys.executable, "-c", "import triton; print(triton.__version__)"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert check.stdout.strip() == version, check.stderr[-2000:]
    files = [f for f in sorted((REPO / "tests" / "kernels").glob("test_*.py"))
             if f.name != "test_dispatch.py"]
    # two pytest processes, one per core: the fp4 kernels' tests, and the rest
    halves = [[f for f in files if f.name == "test_fp4_kernels.py"],
              [f for f in files if f.name != "test_fp4_kernels.py"]]
    runs = [subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              *map(str, half)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for half in halves]
    for run in runs:
        out = run.communicate(timeout=900)[0]
        summary = out.strip().splitlines()[-1] if out.strip() else ""
        assert run.returncode == 0 and " passed" in summary and "failed" not in summary, \
            out[-5000:]
