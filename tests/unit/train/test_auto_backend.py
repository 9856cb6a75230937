"""A CPU run with backend=auto records its timing and says why it chose its backend."""
from __future__ import annotations

import json

import pytest
from conftest import fast

from nvfp4_lab.quant import cost
from nvfp4_lab.train.task import train

pytestmark = pytest.mark.usefixtures("one_thread")


def test_auto_run_states_its_choice_and_feeds_the_next(composer, tmp_path, monkeypatch):
    monkeypatch.setenv("NVFP4_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    over = [*fast(tmp_path, steps=4), "quant=nvfp4_base", "quant.backend=auto"]
    first = train(composer(over), tmp_path / "a")
    assert first["backend"] == "reference" and "no timings measured" in first["backend_reason"]
    ledger = cost.load(cost.ledger_path())
    (key, timings), = ledger.items()
    assert set(timings) == {"reference"} and timings["reference"].ms_per_step > 0
    second = train(composer(over), tmp_path / "b")      # now a measured reference exists
    assert "estimated from one measured backend" in second["backend_reason"]
    assert second["backend"] == "reference"             # 4 steps never pay for a compile
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["backend_reason"]
