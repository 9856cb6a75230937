"""backend=auto on a CPU picks the backend that finishes the run soonest, from this machine's
measured timings (``quant/cost.py``); the arithmetic is checked by hand here."""
from __future__ import annotations

import json

import pytest

from nvfp4_lab.quant import cost

KEY = cost.RunKey("specs", "model", 2048, 2, "2.13.0")


@pytest.fixture
def ledger(tmp_path):
    return tmp_path / "timings.json"


def test_nothing_measured_runs_the_reference_and_says_why(ledger):
    choice = cost.choose(KEY, 1000, ledger)
    assert choice.backend == "reference" and "no timings measured" in choice.reason


@pytest.mark.parametrize("steps, best", [(100, "reference"), (1000, "compiled")])
def test_compiled_estimated_from_a_measured_reference(ledger, steps, best):
    """reference 1000 ms/step; compiled estimated at 600 ms/step after a 50 s cold compile:
    100 steps 100 s vs 110 s, 1000 steps 1000 s vs 650 s."""
    cost.record(KEY, "reference", cost.Timing(1000.0, 3.0), ledger)
    choice = cost.choose(KEY, steps, ledger)
    assert choice.backend == best
    t_comp = cost.COLD_COMPILE_S + steps * 1000 * cost.COMPILED_STEP_RATIO / 1000
    assert f"compiled ~{t_comp:.0f} s" in choice.reason and f"reference ~{steps}" in choice.reason
    assert "estimated" in choice.reason


def test_both_measured_use_the_warm_start_up(ledger):
    """Compiled ran before (warm cache: 5 s start-up, 400 ms/step): 10 steps take 9 s against
    the reference's 10 s, so even a short run compiles."""
    cost.record(KEY, "reference", cost.Timing(1000.0, 3.0), ledger)
    cost.record(KEY, "compiled", cost.Timing(900.0, 80.0), ledger)
    cost.record(KEY, "compiled", cost.Timing(400.0, 5.0), ledger)   # the newest replaces
    choice = cost.choose(KEY, 10, ledger)
    assert choice.backend == "compiled" and "measured" in choice.reason
    assert "compiled ~9 s" in choice.reason and "reference ~10 s" in choice.reason
    assert cost.choose(cost.RunKey("other", "model", 2048, 2, "2.13.0"), 10, ledger).backend \
        == "reference"                                   # another key knows nothing
    saved = json.loads(ledger.read_text())
    assert saved[str(KEY)]["compiled"] == {"ms_per_step": 400.0, "startup_s": 5.0}
    assert not list(ledger.parent.glob("*.tmp"))
