"""The GPU benchmarks as far as a CPU can run them: real subprocesses, real tables.

``bench_kernels.py --cpu`` runs the kernels in Triton's interpreter and checks every result
against the reference bit for bit (its ``exact`` column); ``bench_step.py --quick`` trains one
step of a quantized nano model. ``gpu_check.sh`` is run with a stand-in interpreter that
records what it is asked to run: every stage must be reached, and every file it names must
exist, so renaming a test or a benchmark breaks this test rather than the next GPU check.
Timings on this CPU mean nothing and are not checked.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'kernels'}", "OMP_NUM_THREADS": "1"}


def run(*args: str, timeout: int = 300, env: dict | None = None) -> str:
    proc = subprocess.run(args, cwd=REPO, env=env or ENV, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def table(out: str) -> list[list[str]]:
    """The data rows of the markdown table in ``out``, as lists of cell texts."""
    rows = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in r] for r in rows if not r[0].strip().startswith("---")][1:]


def test_bench_kernels_cpu_smoke_is_exact():
    cases = "nvfp4 1x16 axis 0 rht16 sr (Wgrad dY),nvfp4 16x16,mxfp4 1x32,fp8_e4m3 1x128"
    out = run(sys.executable, "benchmarks/bench_kernels.py", "--quick", "--cpu", "--warmup",
              "0", "--reps", "1", "--cases", cases)
    rows = table(out)
    assert rows[0][:2] == ["copy, 0.09375 MiB moved", "torch"]
    got = {(r[0], r[1]): r[5] for r in rows[1:]}
    fp4 = cases.split(",")[:3]
    want = {(c, b) for c in fp4 for b in ("triton", "triton bf16", "triton codes")}
    assert set(got) == want | {("fp8_e4m3 1x128", "triton")}
    assert set(got.values()) == {"yes"}, got


def test_bench_step_quick_trains_a_quantized_step():
    out = run(sys.executable, "benchmarks/bench_step.py", "--quick", "--presets", "nvfp4")
    rows = table(out)
    assert [r[1] for r in rows[:2]] == ["bf16 (baseline)", "fp32 (no autocast)"]
    nvfp4 = rows[2]
    assert nvfp4[1].startswith("nvfp4 (") and nvfp4[2] == "triton"
    assert float(nvfp4[4]) > 0


def test_gpu_check_reaches_every_stage_with_real_paths(tmp_path):
    """A stand-in python3 logs its arguments (after NVFP4_KERNELS_AUTOTUNE); the script must
    run every kernel test file and the BF16-GEMM test (one pytest each), then the CUDA
    data-parallel test, both with autotuning off, then the two benchmarks, pass only paths
    and bench_kernels cases that exist, and report success."""
    log = tmp_path / "calls.txt"
    stub = tmp_path / "python3"
    # one write per call: the kernel tests' calls run side by side
    stub.write_text('#!/bin/bash\nline="${NVFP4_KERNELS_AUTOTUNE:-on}$(printf " %q" "$@")"\n'
                    f'echo "$line" >> {log}\n')
    stub.chmod(0o755)
    env = {**ENV, "PYTHON": str(stub), "OUT": str(tmp_path)}
    out = run("bash", "benchmarks/gpu_check.sh", env=env, timeout=60)
    assert "# gpu_check passed" in out
    assert (tmp_path / "gpu_check.txt").read_text() == out
    calls = [shlex.split(line) for line in log.read_text().splitlines()]
    calls = [c for c in calls if c[1] != "-c"]  # the version print is `python3 -c ...`
    *tests, parallel = [c for c in calls if c[1:3] == ["-m", "pytest"]]
    benchmarks = calls[len(tests) + 1:]
    want = {str(p.relative_to(REPO)) for p in (REPO / "tests/kernels").glob("test_*.py")}
    assert {c[-1] for c in tests} == want | {"tests/unit/quant/test_gemm_dtype.py"}
    assert all(c[0] == "0" for c in tests)
    assert parallel[:3] == ["0", "-m", "pytest"] and "cuda" in parallel
    assert parallel[-1] == "tests/integration/test_fsdp_quantized.py"
    assert [c[:2] for c in benchmarks] == [["on", "benchmarks/bench_kernels.py"],
                                           ["on", "benchmarks/bench_step.py"]]
    paths = [a for c in calls for a in c if a.startswith(("tests/", "benchmarks/"))]
    assert all((REPO / p).exists() for p in paths), paths
    kernels_call = benchmarks[0]
    cases = kernels_call[kernels_call.index("--cases") + 1].split(",")
    source = (REPO / "benchmarks/bench_kernels.py").read_text()
    assert [c for c in cases if f'    "{c}": QuantSpec(' not in source] == []


def test_bench_shards_quick_prints_each_orders_share_of_the_step():
    out = run(sys.executable, "benchmarks/bench_shards.py", "--quick", "--shipped-step")
    step = float(out.split("nano BF16 CPU step ")[1].split(" ms")[0])
    assert "(step_times.csv, " in out
    rows = table(out)
    assert [r[0] for r in rows] == ["random", "sequential"]
    for _, ms, share, under in rows:
        assert float(share.rstrip("%")) == pytest.approx(100 * float(ms) / step, abs=0.01)
        assert under == ("yes" if float(ms) / step < 0.05 else "no")


def test_bench_dispatch_counts_each_recipe_beside_the_bf16_linear():
    out = run(sys.executable, "benchmarks/bench_dispatch.py", "--presets",
              "bf16,fp8,nvfp4,nvfp4_row_scaled")
    assert "estimate (CPU trace of the CUDA code path; unconfirmed on a GPU)" in out
    assert "not traced (quantize nothing, the nn.Linear row): bf16" in out
    rows = table(out)
    assert [r[:2] for r in rows] == [["bf16 nn.Linear", "-"], ["fp8", "kernels"],
                                     ["nvfp4", "kernels"],
                                     ["nvfp4_row_scaled", "reference fallback: fprop.x"]]
    totals = {}
    for name, _, *counts, total in rows:
        assert sum(map(int, counts)) == int(total)
        totals[name] = int(total)
    # W cast, three mm, dW cast, the accumulating add (tests/unit/quant/test_launches.py)
    assert totals["bf16 nn.Linear"] == 6
    for name in ("fp8", "nvfp4", "nvfp4_row_scaled"):
        assert (f"{name}: launches per quantized linear step: {totals[name]} "
                f"(bf16 nn.Linear: 6)") in out
    gemms = [line.strip() for line in out.splitlines() if ": aten.mm." in line]
    dtypes = {"bf16 nn.Linear": ("bfloat16", "bfloat16"), "fp8": ("float32", "float32"),
              "nvfp4": ("bfloat16", "float32")}  # operands, output
    for name, (operand, output) in dtypes.items():
        mine = [g.split(": ")[-1].split(" -> ") for g in gemms if g.startswith(f"{name}: ")]
        assert len(mine) == 3, gemms
        assert all(a.count(f"{operand}[") == 2 and y.startswith(f"{output}[") for a, y in mine)
