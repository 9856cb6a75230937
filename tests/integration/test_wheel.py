"""The package without its source tree: a built wheel, installed into a new environment, finds
its configs and the paper's numbers and runs the smoke ablation from a directory outside the
checkout.

The environment is a fresh venv without pip whose ``.pth`` file lists this interpreter's
site-packages, so torch and the other dependencies are reused instead of downloaded; a path in
a ``.pth`` file is added without reading the ``.pth`` files inside it, so the editable install
of the checkout (a meta-path finder started by a ``.pth``) is not seen there. The wheel is
installed into the venv by this interpreter's pip (``--python``).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 300


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert out.returncode == 0, f"{cmd} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A venv holding only the wheel built from this checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    # setuptools here builds it offline if it builds wheels (70.1 on, or with `wheel`); else
    # pip fetches one (a venv of torch 2.11, which caps setuptools < 82, keeps Python's 65.5)
    offline = ["--no-build-isolation"] if _builds_wheels() else []
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", *offline, "-q",
         "-w", str(tmp / "dist"), str(REPO)], cwd=tmp)
    wheel, = (tmp / "dist").glob("nvfp4_lab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in ("nvfp4_lab/conf/config.yaml", "nvfp4_lab/conf/ablation/smoke.yaml",
                 "nvfp4_lab/paper/formats.yaml", "nvfp4_lab/paper/lab_claims.csv",
                 "nvfp4_kernels/__init__.py"):
        assert path in names, f"{path} is not in {wheel.name}"
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site, = venv.glob("lib/python*/site-packages")
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_nvfp4_lab_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "-q", "--no-deps", "--no-index", str(wheel)], cwd=tmp)
    return venv


def _builds_wheels() -> bool:
    """Whether this environment's setuptools can build a wheel."""
    find = importlib.util.find_spec
    return find("setuptools") is not None and (
        find("wheel") is not None or find("setuptools.command.bdist_wheel") is not None)


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NVFP4_LAB_CONF", "PYTHONPATH")}
    return {**env, "CI": "1", "OMP_NUM_THREADS": "1"}


def test_wheel_finds_its_configs_outside_the_checkout(venv, tmp_path):
    out = run([str(venv / "bin" / "nvfp4-lab"), "info", "--no-compile"], tmp_path, clean_env())
    line, = (ln for ln in out.splitlines() if ln.startswith("conf: "))
    site, = venv.glob("lib/python*/site-packages")
    assert line == f"conf: {site.resolve() / 'nvfp4_lab' / 'conf'} (from package)"


def test_wheel_runs_the_smoke_ablation_outside_the_checkout(venv, tmp_path):
    run([str(venv / "bin" / "nvfp4-lab"), "run", "+ablation=smoke"], tmp_path, clean_env())
    sweep, = (tmp_path / "outputs" / "sweeps" / "smoke").iterdir()
    summary = pd.read_csv(sweep / "sweep_summary.csv")
    assert sorted(zip(summary["quant"], summary["seed"])) == [
        ("bf16", 0), ("bf16", 1), ("nvfp4", 0), ("nvfp4", 1)]
    assert set(summary["status"]) == {"done"}
    runs = [json.loads(p.read_text()) for p in sweep.rglob("summary.json")]
    assert len(runs) == 4 and all(r["git_sha"] is None for r in runs)  # not a checkout
    # what names the code instead: its version and the hash of the sources the wheel holds
    from nvfp4_lab import __version__
    from nvfp4_lab.rundir import code_sha256

    sources = code_sha256((REPO / "src" / "nvfp4_lab", REPO / "kernels" / "nvfp4_kernels"))
    assert all(r["code_sha256"] == sources for r in runs)
    assert all(r["versions"]["nvfp4-lab"] == __version__ for r in runs)
    assert (sweep / "report.md").is_file()
