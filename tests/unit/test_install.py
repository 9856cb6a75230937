"""What a fresh machine gets from the README's commands: every module the code imports is
either ours, the standard library's, or installed by a requirement the project declares
(``pyproject.toml``, followed through the dependencies of the installed distributions), and
the pins that decide the numbers are in ``constraints.txt``.

A package installed by hand on the developer's machine would let the tests pass there and fail
on a fresh one (Triton was such a package: the CPU torch wheel does not pull it in).
"""
from __future__ import annotations

import ast
import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"nvfp4_lab", "nvfp4_kernels"}
# which extras each tree may rely on: the library itself only on the core dependencies
# (src: and the wandb, hf and eval extras, which train/wandb_log.py, data/hf_source.py and
# harness/ import only once they are needed, saying how to install them when they are not there)
TREES = {"src": ("wandb", "hf", "eval"), "kernels": ("test",),
         "tests": ("test", "wandb", "hf", "eval"), "benchmarks": ("test", "hf")}
NUMERICS = ("torch", "triton", "numpy", "tokenizers", "lightning", "hydra-core")


def top_level_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def declared_closure(extras: tuple[str, ...]) -> set[str]:
    """Canonical names of every distribution the project's requirements (with ``extras``)
    bring in, following the installed distributions' own requirements."""
    todo = [r for r in map(Requirement, md.requires("nvfp4-lab") or [])
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in ("", *extras))]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            sub = md.requires(req.name) or []
        except md.PackageNotFoundError:
            continue
        for r in map(Requirement, sub):
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                todo.append(r)
    return seen


@pytest.mark.parametrize("tree", TREES)
def test_every_import_is_declared(tree):
    providers = md.packages_distributions()
    allowed = declared_closure(TREES[tree])
    local = {tree} | {p.stem for p in (REPO / tree).rglob("*.py")} | {
        p.name for p in (REPO / tree).rglob("*") if (p / "__init__.py").exists()}
    missing = {}
    for path in (REPO / tree).rglob("*.py"):
        for name in top_level_imports(path):
            if name in sys.stdlib_module_names or name in FIRST_PARTY or name in local:
                continue
            dists = {canonicalize_name(d) for d in providers.get(name, [])}
            if not dists & allowed:
                missing.setdefault(name, set()).add(str(path.relative_to(REPO)))
    assert not missing, (f"imported in {tree}/ but brought in by no declared requirement "
                         f"(extras {TREES[tree] or 'none'}): {missing}")


def test_constraints_pin_what_decides_the_numbers():
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$",
                           (REPO / "constraints.txt").read_text(), re.M))
    pins = {canonicalize_name(k): v for k, v in pins.items()}
    for name in NUMERICS:
        assert name in pins, f"constraints.txt does not pin {name}"
    assert pins["torch"] == "2.13.0" and pins["triton"] == "3.6.0"


def test_ci_runs_the_readme_test_command_with_the_constraints():
    """.ci/run takes its command from the README (so the two cannot drift apart) and runs it
    in a virtual environment it creates outside the checkout, with every extra the tests rely
    on (``TREES``: their tests would be skipped or fail without them)."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)\n```", readme, re.S).group(1).splitlines()
    assert len(block) == 2, "the README opens with exactly two set-up commands"
    command = subprocess.run(["bash", str(REPO / ".ci" / "run"), "--print-command"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert command == block[1]
    extras = set(re.search(r"-e '\.\[([\w,]+)\]'", command).group(1).split(","))
    assert "-c constraints.txt" in command and "pytest" in command
    assert set(TREES["tests"]) <= extras, (command, TREES["tests"])
    assert "-c constraints.txt" in block[0] and "+ablation=quickstart" in block[0]
    script = (REPO / ".ci" / "run").read_text()
    assert "python3 -m venv" in script and "mktemp -d" in script
