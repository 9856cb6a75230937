"""The GPU benchmarks as far as a CPU can run them: real subprocesses, real tables.

``bench_kernels.py --cpu`` runs the kernels in Triton's interpreter and checks every result
against the reference bit for bit (its ``exact`` column); ``bench_step.py --quick`` trains one
step of a quantized nano model; ``profile_step.py --cpu`` profiles one, and what it prints is
counted again from the chrome trace it writes. ``gpu_check.sh`` is run with a stand-in
interpreter that records what it is asked to run: every stage must be reached, and every file
it names must exist, so renaming a test or a benchmark breaks this test rather than the next
GPU check.
Timings on this CPU mean nothing and are not checked.
"""
from __future__ import annotations

import gzip
import json
import os
import re
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


STAGES = ("machine", "kernel tests", "data parallel", "kernel bandwidth", "training step",
          "profile")
# kernel test files the GPU check leaves to the CPU (gpu_check.sh's header says why)
CPU_ONLY = {"tests/kernels/test_gpu_compile.py", "tests/kernels/test_launch_trace.py"}


def test_gpu_check_reaches_every_stage_with_real_paths(tmp_path):
    """A stand-in python3 logs its arguments (after NVFP4_KERNELS_AUTOTUNE) and prints them;
    the script must run the kernel test files that need a GPU and the BF16-GEMM test (one
    pytest each), then the CUDA data-parallel test, both with autotuning off, then the three
    benchmarks, pass only paths, options and bench_kernels cases that exist, keep its limits
    within 6 minutes, write each stage's output to $OUT/<stage>.txt before the next stage
    runs, and report success."""
    log, snapshot = tmp_path / "calls.txt", tmp_path / "before_profile.txt"
    stub = tmp_path / "python3"
    # one write per call: the kernel tests' calls run side by side; the profile's call notes
    # how many lines each stage file holds by then
    stub.write_text('#!/bin/bash\nline="${NVFP4_KERNELS_AUTOTUNE:-on}$(printf " %q" "$@")"\n'
                    f'echo "$line" >> {log}\necho "stub $line"\n'
                    'if [[ $1 == benchmarks/profile_step.py ]]; then\n'
                    f'  wc -l "$OUT"/*.txt > {snapshot}\nfi\n')
    stub.chmod(0o755)
    env = {**ENV, "PYTHON": str(stub), "OUT": str(tmp_path)}
    out = run("bash", "benchmarks/gpu_check.sh", env=env, timeout=60)
    assert "# gpu_check passed" in out
    assert (tmp_path / "gpu_check.txt").read_text() == out
    limits = [int(n) for n in re.findall(r"^=== .*: start .*, limit (\d+) s$", out, re.M)]
    assert len(limits) == len(STAGES) and sum(limits) <= 350  # + the banner: under 6 minutes
    calls = [shlex.split(line) for line in log.read_text().splitlines()]
    calls = [c for c in calls if c[1] != "-c"]  # the version print is `python3 -c ...`
    *tests, parallel = [c for c in calls if c[1:3] == ["-m", "pytest"]]
    benchmarks = calls[len(tests) + 1:]
    want = {str(p.relative_to(REPO)) for p in (REPO / "tests/kernels").glob("test_*.py")}
    assert CPU_ONLY <= want
    assert {c[-1] for c in tests} == want - CPU_ONLY | {"tests/unit/quant/test_gemm_dtype.py"}
    assert all(c[0] == "0" for c in tests)
    assert parallel[:3] == ["0", "-m", "pytest"] and "cuda" in parallel
    assert parallel[-1] == "tests/integration/test_fsdp_quantized.py"
    assert [c[:2] for c in benchmarks] == [["on", "benchmarks/bench_kernels.py"],
                                           ["on", "benchmarks/bench_step.py"],
                                           ["on", "benchmarks/profile_step.py"]]
    paths = [a for c in calls for a in c if a.startswith(("tests/", "benchmarks/"))]
    assert all((REPO / p).exists() for p in paths), paths
    for call in benchmarks:
        source = (REPO / call[1]).read_text()
        assert [a for a in call if a.startswith("--") and f'"{a}"' not in source] == []
    kernels_call = benchmarks[0]
    cases = kernels_call[kernels_call.index("--cases") + 1].split(",")
    source = (REPO / "benchmarks/bench_kernels.py").read_text()
    assert [c for c in cases if f'    "{c}": QuantSpec(' not in source] == []
    assert benchmarks[2][-2:] == ["--out", str(tmp_path / "profile")]
    before = {Path(p).name: int(n) for n, p in
              (line.split() for line in snapshot.read_text().splitlines()[:-1])}  # less total
    for name in STAGES:
        text = (tmp_path / f"{name.replace(' ', '_')}.txt").read_text()
        section = re.search(rf"^=== {name}: start [^\n]*\n(.*?)^=== {name}: ok", out,
                            re.M | re.S)
        assert text == section[1]
        if name != "profile":
            assert before[f"{name.replace(' ', '_')}.txt"] == text.count("\n") > 0


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


def outermost_aten(events: list[dict]) -> list[dict]:
    """The trace's aten ops that no other aten op on their thread encloses (times in ns)."""
    ops = sorted((e for e in events if e.get("cat") == "cpu_op" and e["name"].startswith(
        "aten::")), key=lambda e: (e["pid"], e["tid"], round(e["ts"] * 1e3), -e["dur"]))
    out, end, thread = [], -1, None
    for e in ops:
        start, stop = round(e["ts"] * 1e3), round((e["ts"] + e["dur"]) * 1e3)
        if (e["pid"], e["tid"]) != thread or start >= end:
            out.append(e)
            thread, end = (e["pid"], e["tid"]), stop
    return out


def test_profile_step_cpu_prints_what_its_trace_holds(tmp_path):
    """Launches, GEMM calls and FLOPs and device time per step, recounted from the chrome
    trace: the outermost aten ops (the CPU's launches), 2 M N K from each mm's input dims."""
    out = run(sys.executable, "benchmarks/profile_step.py", "--cpu", "--batch", "1", "--seq",
              "16", "--warmup", "0", "--steps", "2", "--out", str(tmp_path))
    assert re.search(r"; 2 steps timed and 2 profiled after 0 warm-up", out)
    sections = {m["name"]: m for m in re.finditer(
        r"(?ms)^## (?P<name>nano \S+) \((?P<q>\d+)/(?P<n>\d+) linear quantized.*?\n\n"
        r".*?^GEMMs in all[^\n]*", out)}
    assert set(sections) == {"nano bf16", "nano nvfp4"}
    launches = {}
    for name, m in sections.items():
        text = m.group(0)
        assert (tmp_path / f"{name.replace(' ', '_')}.txt").read_text() == text + "\n"
        with gzip.open(tmp_path / f"{name.replace(' ', '_')}.trace.json.gz") as f:
            events = json.load(f)["traceEvents"]
        top = outermost_aten(events)
        head = re.search(r"device busy ([\d.]+) ms/step .*; launches ([\d.]+)/step", text)
        launches[name] = float(head[2])
        assert launches[name] == len(top) / 2
        assert float(head[1]) == pytest.approx(sum(e["dur"] for e in top) / 2e3, abs=0.051)
        mms = [e["args"]["Input Dims"] for e in events if e.get("name") == "aten::mm"]
        gemms = re.search(r"GEMMs in all: ([\d.]+) calls/step, ([\d.e+-]+) GFLOP/step", text)
        assert float(gemms[1]) == len(mms) / 2 == 3 * int(m["n"])  # every linear's 3 GEMMs
        flops = sum(2 * a[0] * a[1] * b[1] for a, b, *_ in mms) / 2
        assert float(gemms[2]) == pytest.approx(flops / 1e9, rel=1e-5)
    quantized = int(sections["nano nvfp4"]["q"])
    assert quantized > 0 and sections["nano bf16"]["q"] == "0"
    rows = {tuple(r[:2]): r for r in table(out)}
    extra = (launches["nano nvfp4"] - launches["nano bf16"]) / quantized
    assert rows[("nano", "nvfp4")][7] == f"{extra:.1f}" and rows[("nano", "bf16")][7] == "-"
