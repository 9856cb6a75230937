"""A CPU run with backend=auto records its timing and says why it chose its backend; with
nothing measured it times the reference and switches to compiled when that pays, same bits."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from helpers.backends import needs_compiled
from helpers.runs import fast

from nvfp4_lab.model import ModelConfig
from nvfp4_lab.quant import cost, preset
from nvfp4_lab.quant.packaged import compile_cache_dir
from nvfp4_lab.train.auto_backend import PROBE, WARM, AutoBackend
from nvfp4_lab.train.task import train

pytestmark = pytest.mark.usefixtures("one_thread")


@needs_compiled
def test_auto_run_states_its_choice_and_feeds_the_next(composer, tmp_path, monkeypatch):
    monkeypatch.setenv("NVFP4_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    over = [*fast(tmp_path, steps=4), "quant=nvfp4_base", "quant.backend=auto"]
    first = train(composer(over), tmp_path / "a")
    assert first.backend == "reference" and "no timings measured" in first.backend_reason
    assert "timed the reference" not in first.backend_reason   # 4 steps: no probe ended
    ledger = cost.load(cost.ledger_path())
    (key, timings), = ledger.items()
    assert set(timings) == {"reference"} and timings["reference"].ms_per_step > 0
    second = train(composer(over), tmp_path / "b")      # now a measured reference exists
    assert "estimated from one measured backend" in second.backend_reason
    assert second.backend == "reference"             # 4 steps never pay for a compile
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["backend_reason"]


@needs_compiled
@pytest.mark.parametrize("cold_compile_s, switched", [(0.0, True), (1e9, False)])
def test_auto_times_the_reference_then_compiles_if_it_pays(composer, tmp_path, monkeypatch,
                                                             cold_compile_s, switched):
    """Nothing measured: the first WARM + PROBE steps run on the reference and are timed. With
    a free compile the compiled backend finishes the rest sooner whatever the pace, so the run
    switches; with an endless one it stays. Either way every logged loss equals a reference
    run's to the last bit, and the probe's reference timing is in the ledger."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(compile_cache_dir()))  # shared graphs
    monkeypatch.setenv("NVFP4_LAB_CACHE", str(tmp_path / "cache"))           # empty ledger
    monkeypatch.setattr(cost, "cold_compile_s", lambda path=None: cold_compile_s)
    steps = WARM + PROBE + 3
    over = [*fast(tmp_path, steps=steps), "quant=nvfp4_base"]
    auto = train(composer([*over, "quant.backend=auto"]), tmp_path / "auto")
    assert "timed the reference" in auto.backend_reason
    assert auto.backend == ("compiled" if switched else "reference")
    assert (f"switched to compiled at step {WARM + PROBE}" in auto.backend_reason) == switched
    (timings,) = cost.load(cost.ledger_path()).values()
    assert timings["reference"].ms_per_step > 0            # the probe's, or the run's own
    assert set(timings) == ({"reference", "compiled"} if switched else {"reference"})

    reference = train(composer([*over, "quant.backend=reference"]), tmp_path / "reference")
    a, r = (pd.read_csv(tmp_path / d / "metrics.csv") for d in ("auto", "reference"))
    assert a["train_loss"].dropna().tolist() == r["train_loss"].dropna().tolist()
    assert len(a["train_loss"].dropna()) == steps
    assert auto.final_val_loss == reference.final_val_loss


def test_start_up_is_what_precedes_steady_steps_not_a_later_pause(tmp_path, monkeypatch):
    """Resumed at step 100 (the row at step 100 is the earlier attempt's); 5 s to the first step;
    the first interval, 10 steps at 500 tokens/s, holds 19 s more than 10 steady steps at
    100 ms; a later interval was suspended for ~90 s. Steady: 100 ms/step (median); start-up:
    5 + 19 = 24 s, the pause in neither. Validations of 1, 3, 2 and (paused) 30 s: 2.5 s, their
    median."""
    monkeypatch.setenv("NVFP4_LAB_CACHE", str(tmp_path))
    df = pd.DataFrame({"step": [100, 110, 120, 130, 140, 150],
                       "tokens_per_second": [1.0, 500.0, 10_000, 100.0, 10_000, 10_000]})
    auto = AutoBackend(preset("nvfp4"), ModelConfig(), tokens_per_step=1000, max_steps=200)
    auto.key = cost.RunKey("specs", "model", 1000, 1, "2.13.0")
    auto.start_step, auto.train_started = 100, 105.0
    auto.validation_seconds = [1.0, 3.0, 2.0, 30.0]
    auto.backend = SimpleNamespace(name="compiled")
    auto.record(df, wall=100.0)
    assert cost.load()[str(auto.key)]["compiled"] == cost.Timing(100.0, 24.0, 2.5)


@pytest.mark.parametrize("asked, chosen, resolved", [("auto", "compiled", "auto"),
                                                     ("auto", "reference", "reference"),
                                                     ("compiled", "compiled", "compiled")])
def test_the_ledgers_choice_is_a_preference_that_may_fall_back(monkeypatch, asked, chosen,
                                                               resolved):
    """auto's compiled choice is resolved as auto (a failed self-test falls back to the
    reference, as auto does, instead of ending the run); a named backend stays named."""
    from nvfp4_lab.train import auto_backend

    recipe = dataclasses.replace(preset("nvfp4"), backend=asked)
    monkeypatch.setattr(cost, "choose",
                        lambda key, steps, path=None: cost.Choice(chosen, "the ledger"))
    asks = []
    monkeypatch.setattr(auto_backend, "resolve", lambda name, *a: asks.append(name) or "ok")
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu")),
                              precision="32-true")
    given = []
    task = SimpleNamespace(use_backend=given.append)
    auto = AutoBackend(recipe, ModelConfig(), tokens_per_step=1000, max_steps=200)
    auto.setup(trainer, task, "fit")
    auto.setup(trainer, task, "validate")      # chosen once
    assert asks == [resolved] and given == ["ok"]


@pytest.mark.parametrize("recipe, used", [("bf16", "none"), ("nvfp4", "reference")])
def test_the_run_reads_the_backend_it_used_from_the_callback(monkeypatch, recipe, used):
    """``summary.json``'s backend: none for a recipe with nothing to quantize, else the one
    handed to the module; nothing before setup chose one."""
    from nvfp4_lab.quant import Backend
    from nvfp4_lab.train import auto_backend

    monkeypatch.setattr(auto_backend, "resolve", lambda *a: Backend())
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu")),
                              precision="32-true")
    auto = AutoBackend(dataclasses.replace(preset(recipe), backend="reference"), ModelConfig(),
                       tokens_per_step=1000, max_steps=200)
    assert auto.used().backend is None
    auto.setup(trainer, SimpleNamespace(use_backend=lambda b: None), "fit")
    assert auto.used().backend == used
