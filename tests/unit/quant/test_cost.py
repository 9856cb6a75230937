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


BF16_KEY = cost.RunKey(cost.NO_SPECS, "model", 2048, 2, "2.13.0")


@pytest.mark.parametrize("steps, best", [(450, "reference"), (550, "compiled")])
def test_a_bf16_step_bounds_an_unmeasured_reference(ledger, steps, best):
    """Only BF16 ran for this model and batch, at 300 ms/step (no backend; 310 filed under the
    reference by an older version): a reference step costs at least 300 ms, so compiling saves
    at least 0.4 x 300 ms a step, 54 s over 450 steps (less than the shipped 59.6 s cold
    compile) and 66 s over 550 (more)."""
    cost.record(BF16_KEY, "none", cost.Timing(300.0, 6.0), ledger)
    cost.record(BF16_KEY, "reference", cost.Timing(310.0, 2.0), ledger)
    choice = cost.choose(KEY, steps, ledger)
    assert choice.backend == best
    if best == "compiled":
        assert "BF16 step" in choice.reason and "(300 ms)" in choice.reason
        assert f"~{steps * 0.3 * (1 - cost.COMPILED_STEP_RATIO):.0f} s" in choice.reason
    other_model = cost.RunKey("specs", "other model", 2048, 2, "2.13.0")
    assert cost.choose(other_model, steps, ledger).backend == "reference"
    assert cost.finish_times(KEY, steps, ledger) is None     # estimates stay measured-only


def test_a_torch_older_than_the_compiled_backends_runs_the_reference(ledger):
    """The same timings that pick compiled at torch 2.13 pick the reference at 2.11, whose
    inductor is refused (quant/packaged.py, MIN_TORCH); the reason names both versions."""
    old = cost.RunKey("specs", "model", 2048, 2, "2.11.0+cu130")
    for key in (KEY, old):
        cost.record(key, "reference", cost.Timing(1000.0, 3.0), ledger)
    assert cost.choose(KEY, 1000, ledger).backend == "compiled"
    choice = cost.choose(old, 1000, ledger)
    assert choice == cost.Choice("reference", "torch 2.11.0+cu130 is older than 2.13, the "
                                              "compiled backend's (quant/packaged.py)")


def test_run_key_of_no_quantizer_is_the_bf16_key():
    assert cost.run_key([], "model", 2048, 2).specs == cost.NO_SPECS


@pytest.mark.parametrize("steps, best", [(80, "reference"), (1000, "compiled")])
def test_compiled_estimated_from_a_measured_reference(ledger, steps, best):
    """reference 1000 ms/step; compiled estimated at 600 ms/step after the shipped table's
    longest cold compile, 59.6 s (nothing compiled here yet): 80 steps 80 s vs 107.6 s, 1000
    steps 1000 s vs 659.6 s."""
    cost.record(KEY, "reference", cost.Timing(1000.0, 3.0), ledger)
    choice = cost.choose(KEY, steps, ledger)
    assert choice.backend == best
    t_comp = 59.6 + steps * 0.6
    assert f"compiled ~{t_comp:.0f} s" in choice.reason and f"reference ~{steps}" in choice.reason
    assert "estimated" in choice.reason


def test_the_cold_compile_is_the_longest_this_machine_measured(ledger):
    """Under load a cold compile took 220 s here: a recipe never compiled is counted at that,
    not at an assumed minute. 300 steps at 1000 ms on the reference (300 s) against 220 +
    180 = 400 s compiled: the reference; measured nothing compiled, 59.6 + 180 s: compiled."""
    cost.record(KEY, "reference", cost.Timing(1000.0, 3.0), ledger)
    assert cost.cold_compile_s(ledger) == 59.6                    # the shipped table's
    assert cost.choose(KEY, 300, ledger).backend == "compiled"
    other = cost.RunKey("other specs", "model", 2048, 2, "2.13.0")
    cost.record(other, "compiled", cost.Timing(500.0, 220.0), ledger)
    cost.record(cost.RunKey("third", "model", 2048, 2, "2.13.0"), "compiled",
                cost.Timing(500.0, 2.0), ledger)                   # a warm start, elsewhere
    assert cost.cold_compile_s(ledger) == 220.0
    choice = cost.choose(KEY, 300, ledger)
    assert choice.backend == "reference" and "compiled ~400 s" in choice.reason
    assert cost.cold_start_times(1000.0, 300, ledger)["compiled"] == pytest.approx(400.0)


NANO_BYTES = cost.work_per_token(128, 5, 256)          # 12 x 5 x 128^2 + 256 x 128
AMD = "x86_64 AVX512, AMD family 25"
INTEL = "x86_64 AVX512, Intel family 6"


def test_a_first_estimate_is_the_shipped_row_of_this_machine_class():
    """The quickstart's BF16 job (nano, bytes, 2048 tokens, one thread) on each shipped
    class: its row, 225 ms/step on AMD (start-up counted in), 230 ms + 0.3 s on Intel."""
    amd = cost.first_estimate(cost.Shape(AMD, "bf16", NANO_BYTES, 2048, 1), 400, "auto")
    assert (amd.seconds, amd.backend, amd.measured) == (pytest.approx(90.0), "none", False)
    assert amd.label() == f"estimate from the step times shipped for {AMD}"
    intel = cost.first_estimate(cost.Shape(INTEL, "bf16", NANO_BYTES, 2048, 1), 400, "auto")
    assert intel.seconds == pytest.approx(0.3 + 400 * 0.230) and INTEL in intel.label()


def test_a_first_estimate_of_auto_takes_the_sooner_backend():
    """NVFP4 on Intel: compiled 57.3 s + 400 x 0.516 s = 263.7 s, reference 0.3 s + 400 x
    1.187 s = 475.1 s; 40 steps: reference 47.8 s, compiled 77.9 s. A named backend is its
    own row."""
    shape = cost.Shape(INTEL, "nvfp4", NANO_BYTES, 2048, 1)
    assert cost.first_estimate(shape, 400, "auto").seconds == pytest.approx(263.7)
    assert cost.first_estimate(shape, 40, "auto").backend == "reference"
    assert cost.first_estimate(shape, 400, "reference").seconds == pytest.approx(475.1)


def test_a_first_estimate_scales_the_nearest_row_by_the_work():
    """BPE-4096 at twice the tokens on AMD: the BF16 row's 225 ms x (983040 + 524288) x 4096 /
    ((983040 + 32768) x 2048) = 667.7 ms/step. An unknown class takes a shipped class's row
    with the same threads; a format with no row (FP8) has no estimate."""
    bpe = cost.work_per_token(128, 5, 4096)
    big = cost.first_estimate(cost.Shape(AMD, "bf16", bpe, 4096, 1), 100, "auto")
    assert big.seconds == pytest.approx(100 * 0.225 * 1507328 * 2 / 1015808)
    elsewhere = cost.first_estimate(cost.Shape("arm64 DEFAULT, Apple family 1", "mxfp4",
                                               NANO_BYTES, 2048, 1), 400, "compiled")
    assert elsewhere.backend == "compiled" and not elsewhere.measured
    assert cost.first_estimate(cost.Shape(AMD, "fp8", NANO_BYTES, 2048, 1), 400, "auto") \
        is None


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
    assert saved[str(KEY)]["compiled"] == {"ms_per_step": 400.0, "startup_s": 5.0, "eval_s": 0.0}
    assert not list(ledger.parent.glob("*.tmp"))


def test_a_whole_run_adds_its_start_up_and_validations(ledger):
    """reference measured: 3 s start-up, 1000 ms/step, 0.5 s a validation. 100 steps with 4
    validations: 3 + 100 + 2 = 105 s; compiled (not measured): the shipped table's 59.6 s cold
    compile + 100 x 0.6 s + 4 x 0.5 s (the reference's validation cost) = 121.6 s."""
    cost.record(KEY, "reference", cost.Timing(1000.0, 3.0, 0.5), ledger)
    assert cost.run_seconds(KEY, 100, 4, "reference", ledger) == pytest.approx(105.0)
    assert cost.run_seconds(KEY, 100, 4, "compiled", ledger) == pytest.approx(121.6)
    cost.record(KEY, "compiled", cost.Timing(400.0, 8.0, 0.25), ledger)
    # compiled measured: its own 8 s start-up (the whole wait before steady steps), 0.25 s a
    # validation: 8 + 40 + 1 = 49 s
    assert cost.run_seconds(KEY, 100, 4, "compiled", ledger) == pytest.approx(49.0)
    assert cost.run_seconds(cost.RunKey("other", "model", 2048, 2, "2.13.0"), 100, 4,
                            "reference", ledger) is None


def test_a_ledger_written_before_validations_were_timed_still_reads(ledger):
    ledger.write_text(json.dumps({str(KEY): {"reference": {"ms_per_step": 500.0,
                                                           "startup_s": 1.0}}}))
    assert cost.run_seconds(KEY, 10, 3, "reference", ledger) == pytest.approx(6.0)


@pytest.mark.parametrize("backend, quantized, device, want", [
    ("auto", False, "cpu", "none"), ("triton", False, "cuda", "none"),   # nothing quantized
    ("reference", True, "cuda", "reference"), ("compiled", True, "cpu", "compiled"),
    ("auto", True, "cuda", "triton"),
])
def test_one_choice_for_the_run_its_dry_run_and_its_plan(backend, quantized, device, want):
    """The pure chooser: no ledger is read for these; auto on a CPU asks ``choose``."""
    assert cost.pick(backend, quantized, device, None, 100).backend == want


def test_auto_on_a_cpu_asks_the_ledger_and_with_nothing_measured_probes(tmp_path):
    key = cost.RunKey("specs", "model", 2048, 1, "2.13.0")
    choice = cost.pick("auto", True, "cpu", key, 100, tmp_path / "timings.json")
    assert (choice.backend, choice.probe) == ("reference", True)
    with pytest.raises(ValueError, match="ledger key"):
        cost.pick("auto", True, "cpu", None, 100)
