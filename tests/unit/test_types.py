"""The type check: mypy, strict, on the modules ``[tool.mypy]`` in pyproject.toml lists."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_the_strict_modules_type_check() -> None:
    r = mypy()
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Success: no issues found" in r.stdout


def test_the_check_finds_a_planted_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def half(x):\n    return x / 2\n\n\nn: int = 'two'\n")
    r = mypy(str(bad))
    assert r.returncode == 1, r.stdout
    assert "bad.py:1: error: Function is missing a type annotation" in r.stdout
    assert "bad.py:5: error: Incompatible types in assignment" in r.stdout
