"""The steps-or-size study's analysis: paired gaps by hand, the exponent against scipy's
weighted least squares, the plan's decision rule branch by branch, the interval's coverage on
synthetic studies, and the report written from run directories whose every loss is known."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.optimize import least_squares

from nvfp4_lab.analysis.laws import steps_vs_size as svs
from nvfp4_lab.analysis.laws import steps_vs_size_report as rep
from nvfp4_lab.analysis.reports.report import write_report
from nvfp4_lab.analysis.sources.collect import collect

# (size, N) -> steps at 512 / 2048 / 8192 tokens a step: the plan's cells
STEPS = {("w64", 185_024): (7228, 1807, 452), ("w32", 46_432): (1814, 454, 114)}
PER_STEP = (512, 2048, 8192)


def _gaps(gap, seeds=3, noise=0.0, rng=None) -> pd.DataFrame:
    """paired_gaps' table with rel_gap = gap(size, params, steps, ref) + noise per seed."""
    rows = []
    for (size, params), steps in STEPS.items():
        for tps, s in zip(PER_STEP, steps):
            for seed in range(seeds):
                g = gap(size, params, s, steps[1]) + (noise * rng.standard_normal() if noise
                                                      else 0.0)
                rows.append({"size": size, "params": params, "tokens_per_step": tps,
                             "steps": s, "seed": seed, "loss": 1.5 * (1 + g),
                             "loss_against": 1.5, "abs_gap": 1.5 * g, "rel_gap": g})
    return pd.DataFrame(rows)


def _scipy_c(gaps: pd.DataFrame) -> float:
    """c by scipy's least squares on the weighted residuals, k per size free."""
    cells = gaps.groupby(["size", "steps"])["rel_gap"]
    mean, var, n = cells.mean(), cells.var(ddof=1), cells.size()
    ref = {"w64": 1807, "w32": 454}
    sizes = [s for s, _ in mean.index]
    x = np.log([st / ref[s] for s, st in mean.index])
    w = (n / var).to_numpy()

    def resid(p):
        k = np.array([p[1] if s == "w64" else p[2] for s in sizes])
        return np.sqrt(w) * (mean.to_numpy() - k * np.exp(p[0] * x))
    return float(least_squares(resid, [0.0, 0.03, 0.03]).x[0])


@pytest.mark.parametrize("c", [-0.362, 0.0, 0.5])
def test_the_exponent_matches_scipys_weighted_least_squares(c):
    rng = np.random.default_rng(7)
    gaps = _gaps(lambda size, n, s, ref: (0.03 if size == "w64" else 0.05) * (s / ref) ** c,
                 seeds=6, noise=0.004, rng=rng)
    cells = svs.Cells.of(gaps, "relative")
    ours = float(svs.fit_c(cells.means(), cells.weights(), cells.x, cells.size_of))
    assert ours == pytest.approx(_scipy_c(gaps), abs=0.0026)   # half the grid's step


def test_noiseless_cells_give_their_exponent_back():
    gaps = _gaps(lambda size, n, s, ref: 0.02 * (s / ref) ** -0.362, seeds=2)
    cells = svs.Cells.of(gaps, "relative")
    weights = np.arange(1.0, 7.0)          # any weights: an exact law fits every cell
    assert svs.fit_c(cells.means(), weights, cells.x, cells.size_of) == pytest.approx(-0.36,
                                                                                      abs=1e-9)


@pytest.mark.parametrize("lo, hi, mc, expected", [
    (0.05, 0.6, 0.0, "batch noise"),
    (0.05, 0.6, 0.03, "size"),                  # 0.05 - 2 x 0.03 < 0: 0 not excluded
    (-0.9, -0.5, 0.0, "steps, beyond the law"),
    (-0.5, -0.1, 0.0, "steps"),
    (-0.3, -0.1, 0.0, "between: both act"),
    (-0.3, 0.2, 0.0, "size"),
    (-0.3, 0.2, 0.04, "not resolved"),          # -0.3 - 0.08 < -0.362: steps not excluded
    (-0.5, 0.2, 0.0, "not resolved"),
])
def test_the_plans_rule_reads_each_interval(lo, hi, mc, expected):
    assert svs.reading(lo, hi, mc, mc) == expected


def test_paired_gaps_pair_each_nvfp4_run_with_its_bf16_run_by_hand():
    runs = pd.DataFrame([
        {"status": "done", "recipe": r, "model": "w64", "params": 185_024, "seed": s,
         "tokens": t * st, "steps": st, "final_val_loss": loss}
        for (r, s, t, st, loss) in [("bf16", 0, 512, 7228, 1.40), ("nvfp4", 0, 512, 7228, 1.47),
                                    ("bf16", 0, 8192, 452, 1.60), ("nvfp4", 0, 8192, 452, 1.62),
                                    ("bf16", 1, 512, 7228, 1.41)]])   # seed 1: no partner
    g = svs.paired_gaps(runs)
    assert list(zip(g["tokens_per_step"], g["seed"])) == [(8192, 0), (512, 0)]
    assert g["rel_gap"].tolist() == pytest.approx([0.02 / 1.60, 0.07 / 1.40])
    assert g["abs_gap"].tolist() == pytest.approx([0.02, 0.07])


def test_the_interval_covers_the_true_exponent_on_synthetic_studies():
    """Studies drawn from the plan's steps reading with grid-like noise: the 95% interval
    (fewer resamples than the plan's, for time) covers c = -0.362 in about 95% of them."""
    rng = np.random.default_rng(11)
    sd = {("w64", 0): 0.010, ("w64", 1): 0.010, ("w64", 2): 0.012,
          ("w32", 0): 0.020, ("w32", 1): 0.045, ("w32", 2): 0.050}
    covered, studies = 0, 120
    for _ in range(studies):
        rows = []
        for (size, params), steps in STEPS.items():
            for j, s in enumerate(steps):
                mu = 0.0317 * (s / 1807) ** -0.362
                for seed in range(8):
                    g = mu + sd[(size, j)] * rng.standard_normal()
                    rows.append({"size": size, "params": params, "tokens_per_step": PER_STEP[j],
                                 "steps": s, "seed": seed, "rel_gap": g})
        cells = svs.Cells.of(pd.DataFrame(rows), "relative")
        lo, hi = svs.interval(svs.resampled_c(cells, 200, int(rng.integers(1 << 30))))
        covered += lo <= -0.362 <= hi
    assert 0.88 <= covered / studies <= 0.99


def test_the_monte_carlo_error_is_the_sd_of_the_bounds_over_generator_seeds():
    rng = np.random.default_rng(3)
    gaps = _gaps(lambda size, n, s, ref: 0.03 * (s / ref) ** -0.2, seeds=4, noise=0.01, rng=rng)
    cells = svs.Cells.of(gaps, "relative")
    e = svs.exponent(cells, resamples=300, seed=5, mc_seeds=range(20, 25))
    bounds = np.array([svs.interval(svs.resampled_c(cells, 300, s)) for s in range(20, 25)])
    assert (e.mc_lo, e.mc_hi) == pytest.approx(tuple(bounds.std(axis=0, ddof=1)))
    assert (e.lo, e.hi) == svs.interval(svs.resampled_c(cells, 300, 5))
    assert e.reading == svs.reading(e.lo, e.hi, e.mc_lo, e.mc_hi)


def test_the_plans_predictions_are_the_numbers_it_wrote_down():
    """results/preregistration.md, Steps or size: the readings' gaps, in percent."""
    w64 = STEPS[("w64", 185_024)]
    got = {r: [round(100 * rep.predicted(r, 185_024, s, 1807), 2) for s in w64]
           for r in rep.READINGS}
    assert got == {"size": [3.17, 3.17, 3.17], "steps": [1.92, 3.17, 5.24],
                   "batch noise": [7.92, 3.17, 1.98]}
    w32 = [round(100 * rep.predicted(r, 46_432, 454, 454), 2) for r in ("size", "steps")]
    assert w32 == [5.23, 5.23]
    assert round(100 * rep.predicted("steps", 46_432, 114, 454), 2) == 8.62


def _study(runs_factory, gap, seeds=(0, 1)):
    """Run directories of the plan's cells: BF16 at 1.5, NVFP4 at 1.5 (1 + gap(...))."""
    num = 0
    for (size, _), steps in STEPS.items():
        d = {"w64": 64, "w32": 32}[size]
        for tps, s in zip(PER_STEP, steps):
            for seed in seeds:
                for quant in ("bf16", "nvfp4"):
                    loss = 1.5 * (1 + gap(size, s, seed)) if quant == "nvfp4" else 1.5
                    run = runs_factory(f"{num}_x/seed={seed}", quant=quant, seed=seed,
                                       steps=[s], val_loss=[loss], name="steps_vs_size",
                                       config={"model.name": size, "model.d_model": d,
                                               "model.n_heads": 2, "model.n_kv_heads": 1,
                                               "train.batch_size": tps // 128})
                    summary = json.loads((run / "summary.json").read_text())
                    summary.update(model=size, tokens_per_step=tps, tokens=tps * s,
                                   device="cpu (x86_64 AVX512)")
                    (run / "summary.json").write_text(json.dumps(summary))
                    num += 1
    return run.parents[1]


def test_the_report_tabulates_each_cell_and_draws_what_it_tabulates(runs_factory, monkeypatch):
    monkeypatch.setattr(svs, "RESAMPLES", 200)        # the plan's 4000 x 21 take minutes here
    monkeypatch.setattr(svs, "MC_SEEDS", range(3))
    gap = {0: 0.02, 1: 0.03}
    sweep = _study(runs_factory, lambda size, s, seed: gap[seed] * (1 + (size == "w32")))
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {
        "sweeper": {"params": {"seed": "0,1"}}, "overrides": {"task": []}}}))
    assert svs.is_study(collect([sweep]).runs)
    text = write_report([sweep]).read_text()
    assert "## Steps or size" in text
    cells = pd.read_csv(sweep / "tables" / "steps_vs_size_cells.csv")
    assert len(cells) == 6
    assert cells["rel_gap"].tolist() == pytest.approx([0.05] * 3 + [0.025] * 3)
    assert "2 whole seeds" in text and "Interim" in text
    fig = rep.figure(svs.paired_gaps(collect([sweep]).runs), cells)
    seeds = [ln for ln in fig.axes[0].lines if ln.get_gid() == "seeds"]
    drawn = sorted(float(y) for ln in seeds for y in ln.get_ydata())
    assert drawn == pytest.approx(sorted([2.0, 3.0] * 3 + [4.0, 6.0] * 3))
    steps_reading = [ln for ln in fig.axes[0].lines if ln.get_gid() == "if_steps"]
    assert sorted(float(y) for ln in steps_reading for y in ln.get_ydata()) == pytest.approx(
        sorted([1.92, 3.17, 5.24, 3.16, 5.23, 8.62]), abs=0.01)


def test_the_matched_steps_ratio_is_the_ratio_of_the_cells_means(runs_factory):
    sweep = _study(runs_factory, lambda size, s, seed: (0.04 if size == "w32" else 0.02)
                   + 0.002 * seed)
    m = rep.matched(svs.paired_gaps(collect([sweep]).runs), resamples=200)
    assert sorted(zip(m["steps_small"], m["steps_large"])) == [(454, 452), (1814, 1807)]
    assert m["ratio"].tolist() == pytest.approx([0.041 / 0.021] * 2)
    assert m["if_size"].tolist() == pytest.approx([(185_024 / 46_432) ** 0.362] * 2)
    assert math.isclose(m["if_size"].iloc[0], 1.649, abs_tol=0.001)


def test_step_counts_where_the_sizes_meet_share_one_tick():
    assert rep._ticks([114, 452, 454, 1807, 1814, 7228]) == {
        114: "114", 452: "452/454", 1807: "1,807/1,814", 7228: "7,228"}


def test_the_index_counts_the_published_runs_and_shows_the_fit_once_there_is_one(
        runs_factory, monkeypatch):
    monkeypatch.setattr(svs, "RESAMPLES", 200)
    monkeypatch.setattr(svs, "MC_SEEDS", range(3))
    sweep = _study(runs_factory, lambda size, s, seed: 0.02 + 0.01 * seed)
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"sweeper": {"params": {
        "seed": "0,1,2", "model": "w64,w32", "+tokens_per_step": "t512,t2048,t8192",
        "quant": "bf16,nvfp4"}}, "overrides": {"task": []}}}))
    before = rep.index_md(sweep, "steps_vs_size")
    assert "24 of the study's 36 planned runs" in before[1] and "No exponent" in before[2]
    write_report([sweep])
    after = rep.index_md(sweep, "steps_vs_size")
    fit = pd.read_csv(sweep / "tables" / "steps_vs_size_fit.csv")
    assert after[2]["c"].tolist() == [f"{c:+.3f}" for c in fit["c"]]
