"""collect -> report on hand-made run directories: labels, robustness, tables, figures, CLI."""
from __future__ import annotations

import json
import os
import re

import pandas as pd
import pytest
import yaml

from nvfp4_lab.analysis import collect, figures, find_sweeps, load_paper, write_report
from nvfp4_lab.analysis.sources.collect import recipe_axes
from nvfp4_lab.cli import main
from nvfp4_lab.configs import conf_dir
from nvfp4_lab.rundir import read_metrics

PNG = b"\x89PNG\r\n\x1a\n"


def val(final: float, n: int = 4) -> list[float]:
    """A validation curve over n points ending at ``final`` (0.5 above it at the start)."""
    return [final + 0.5 * (n - 1 - i) / (n - 1) for i in range(n)]


# ------------------------------------------------------------------------------ collect

def test_recipes_are_labelled_by_the_preset_that_differs(runs_factory):
    for seed in (0, 1):
        runs_factory(f"0_quant=bf16/seed={seed}", quant="bf16", seed=seed, val_loss=val(3.0))
        runs_factory(f"1_quant=nvfp4/seed={seed}", quant="nvfp4", seed=seed, val_loss=val(3.1))
    c = collect([runs_factory("x", quant="bf16").parent])
    assert c.axes == ["quant.name"]
    assert c.labels == ["bf16", "nvfp4"]
    assert sorted(c.runs["seed"]) == [0, 0, 0, 1, 1]
    assert len(c.curves) == 5 * 4
    one = c.runs.set_index("run").loc["1_quant=nvfp4/seed=1"]
    assert one["label"] == "nvfp4" and one["final_val_loss"] == pytest.approx(3.1)
    # WSD over 40 steps with decay 0.25 decays from step 30
    assert one["decay_start"] == 30 * runs_factory.tokens_per_step


def test_a_swept_key_labels_runs_when_the_preset_is_the_same(runs_factory):
    for size in (2, 16):
        runs_factory(f"size={size}", quant="nvfp4", config={"quant.rht_size": size})
    c = collect([runs_factory("other", quant="nvfp4", config={"quant.rht_size": 4}).parent])
    assert c.axes == ["quant.rht_size"]
    assert sorted(c.labels) == ["16", "2", "4"]


def test_two_axes_name_both(runs_factory):
    for quant in ("nvfp4", "mxfp4"):
        for size in (2, 16):
            runs_factory(f"{quant}_{size}", quant=quant, config={"quant.rht_size": size})
    c = collect([runs_factory("bf16", quant="bf16", config={"quant.rht_size": 16}).parent])
    assert c.axes == ["quant.name", "quant.rht_size"]
    assert "quant=nvfp4, rht_size=2" in c.labels and "quant=bf16, rht_size=16" in c.labels


def test_a_model_preset_name_labels_runs_without_the_fields_it_fixes(runs_factory):
    """Two models (their width, depth and pattern follow from the name) x two recipes: the
    labels are the two names, not every model field that differs; a depth overridden within
    one model name is still an axis."""
    models = {"nano": {"model.d_model": 128, "model.n_layers": 5, "model.pattern": ""},
              "hybrid_nano": {"model.d_model": 128, "model.n_layers": 7,
                              "model.pattern": "M-M*-M-"}}
    for quant in ("nvfp4", "bf16"):
        for name, fields in models.items():
            runs_factory(f"{quant}_{name}", quant=quant, config={"model.name": name, **fields})
    c = collect([runs_factory("last", quant="bf16", config={
        "model.name": "nano", **models["nano"]}).parent])
    assert c.axes == ["quant.name", "model.name"]
    assert set(c.labels) == {f"quant={q}, model={m}" for q in ("nvfp4", "bf16") for m in models}
    configs = pd.DataFrame({"model.name": ["nano", "nano", "hybrid_nano"],
                            "model.n_layers": [5, 3, 7], "quant.name": ["nvfp4"] * 3})
    assert recipe_axes(configs) == ["model.name", "model.n_layers"]


def test_arms_win_and_runs_outside_the_arms_keep_their_preset(runs_factory):
    runs_factory("a", quant="nvfp4", arm="full")
    runs_factory("b", quant="nvfp4", arm="without_sr", config={"quant.sr": []})
    c = collect([runs_factory("c", quant="bf16", arm=None).parent])
    assert c.axes == ["arm"]
    assert sorted(c.labels) == ["bf16", "full", "without_sr"]


def test_failed_diverged_unreadable_are_listed_and_running_runs_kept(runs_factory):
    runs_factory("ok", quant="bf16", val_loss=val(3.0))
    runs_factory("bad", quant="nvfp4", status="failed", error="RuntimeError: boom")
    runs_factory("nan", quant="mxfp4", status="diverged", error="non-finite loss at step 3")
    live = runs_factory("live", quant="fp8", steps=[10, 20], status="running")
    broken = runs_factory("broken", quant="nvfp4")
    (broken / "summary.json").write_text('{"status": "do')          # half-written
    fresh = runs_factory("fresh", quant="fp8", summary=False)           # no summary yet
    (fresh / "metrics.csv").unlink()
    c = collect([live.parent])
    skipped = c.skipped.set_index("run")
    assert skipped.loc["bad", "status"] == "failed" and "boom" in skipped.loc["bad", "reason"]
    assert skipped.loc["nan", "status"] == "diverged"
    assert skipped.loc["broken", "status"] == "unreadable"
    status = c.runs.set_index("run")["status"]
    assert status.to_dict() == {"ok": "done", "live": "running", "fresh": "running"}
    assert list(c.curves[c.curves["run"] == "live"]["step"]) == [10, 20]
    assert c.curves[c.curves["run"] == "fresh"].empty


def test_attempt_logs_merge_with_the_later_attempt_winning(tmp_path):
    run = tmp_path / "run"
    for version, rows in ((0, [(1000, 5.0), (2000, 4.0), (3000, 3.9)]),   # killed after step 3
                          (1, [(3000, 3.5), (4000, 3.0)])):               # resumed from step 2
        d = run / "logs" / "csv" / f"version_{version}"
        d.mkdir(parents=True)
        pd.DataFrame({"step": range(len(rows)), "tokens": [t for t, _ in rows],
                      "train_loss": [v for _, v in rows]}).to_csv(d / "metrics.csv", index=False)
    df = read_metrics(run, 1000)
    assert list(df["step"]) == [1, 2, 3, 4]
    assert list(df["train_loss"]) == [5.0, 4.0, 3.5, 3.0]
    assert not (run / "metrics.csv").exists()     # reading never writes


def test_paths_may_be_globs_and_a_missing_path_is_named(runs_factory, tmp_path):
    runs_factory("0_quant=bf16/seed=0")
    runs_factory("1_quant=nvfp4/seed=0", quant="nvfp4")
    assert len(collect([str(tmp_path / "sweep" / "*_quant=*")]).runs) == 2
    with pytest.raises(FileNotFoundError, match="nowhere"):
        collect([tmp_path / "nowhere"])


def test_find_sweeps_returns_each_sweep_under_a_parent(tmp_path):
    for stamp in ("2026-01-01", "2026-01-02"):
        (tmp_path / stamp).mkdir()
        (tmp_path / stamp / "multirun.yaml").write_text("{}")
    assert [p.name for p in find_sweeps(tmp_path)] == ["2026-01-01", "2026-01-02"]
    assert find_sweeps(tmp_path / "2026-01-01") == [tmp_path / "2026-01-01"]


# ------------------------------------------------------------------------------ report

def three_seed_sweep(runs_factory, name="synthetic", nvfp4=(3.03, 3.04, 3.05),
                     mxfp4=(3.00, 3.10, 2.95)):
    """bf16 final val loss 3.0 on every seed; nvfp4 consistently worse; mxfp4 noisy. Train
    losses are the val losses + 0.1 (the paper's E03 numbers are train-loss gaps)."""
    for seed in range(3):
        for job, quant, final, n in ((f"0_quant=bf16/seed={seed}", "bf16", 3.0, 4),
                                     (f"1_quant=nvfp4/seed={seed}", "nvfp4", nvfp4[seed], 4),
                                     # mxfp4 logs twice as often: a different step grid
                                     (f"2_quant=mxfp4/seed={seed}", "mxfp4", mxfp4[seed], 8)):
            curve = val(final, n)
            runs_factory(job, quant=quant, seed=seed, name=name,
                         steps=[40 // n * (i + 1) for i in range(n)], val_loss=curve,
                         train_loss=[v + 0.1 for v in curve])


@pytest.fixture
def sweep(runs_factory, tmp_path):
    three_seed_sweep(runs_factory)
    return tmp_path / "sweep"


def test_report_table_is_paired_and_says_what_is_resolved(sweep):
    path = write_report([sweep])
    table = pd.read_csv(sweep / "tables" / "final_loss.csv").set_index("label")
    assert table.loc["nvfp4", "mean"] == pytest.approx(3.04)
    # paired gaps (x - 3.0) / 3.0 * 100 = 1, 4/3, 5/3: mean +4/3, worse on every seed
    assert table.loc["nvfp4", "gap_pct"] == pytest.approx(4 / 3)
    assert table.loc["nvfp4", "verdict"] == "worse"
    assert table.loc["mxfp4", "verdict"] == "not resolved"   # gaps 0, +3.33, -1.67
    assert table.loc["bf16", "verdict"] == "baseline"
    text = path.read_text()
    assert "| `nvfp4` | 3 | 3.0400 |" in text and "worse" in text and "not resolved" in text
    assert "| gap to bf16, % (positive = worse) |" in text    # the header names the sign
    assert "| +1.33 | [" in text                               # and the cell carries it
    for fig in ("loss", "loss_gap"):
        assert (sweep / "figures" / f"{fig}.png").read_bytes()[:8] == PNG
        assert (sweep / "figures" / f"{fig}.pdf").read_bytes()[:5] == b"%PDF-"
        assert f"figures/{fig}.png" in text
    assert not (sweep / "figures" / "paper_vs_ours.png").exists()   # no paper file: no panel


def test_gap_curves_table_follows_the_baseline_grid(sweep):
    write_report([sweep])
    gaps = pd.read_csv(sweep / "tables" / "loss_gap.csv")
    nv = gaps[gaps["label"] == "nvfp4"].sort_values("tokens")
    # every run has >= 4 validation points, so the gap is in val_loss; at the last point it
    # is the final gap
    assert nv["n"].max() == 3
    assert nv["mean"].iloc[-1] == pytest.approx(4 / 3)       # positive = worse
    assert set(gaps["metric"]) == {"val_loss"}
    mx = gaps[gaps["label"] == "mxfp4"]
    assert set(mx["tokens"]) <= {10_000, 20_000, 30_000, 40_000}   # the baseline's grid


def test_skipped_runs_appear_in_the_report(sweep, runs_factory):
    runs_factory("3_quant=fp8/seed=0", quant="fp8", status="diverged",
                 error="non-finite loss at step 7 in blocks.1.mlp.fc1")
    text = write_report([sweep]).read_text()
    assert "## Skipped runs" in text and "step 7 in blocks.1.mlp.fc1" in text


def test_a_redrawn_report_that_says_nothing_new_keeps_its_date(sweep, runs_factory):
    path = write_report([sweep])
    old = re.sub(r"^Generated [\d-]+ [\d:]+ ", "Generated 2001-02-03 04:05 ", path.read_text(),
                 flags=re.M)
    path.write_text(old)
    assert write_report([sweep]).read_text() == old
    runs_factory("3_quant=fp8/seed=0", quant="fp8", status="diverged", error="step 7")
    new = write_report([sweep]).read_text()
    assert "2001-02-03" not in new and "## Skipped runs" in new


def test_paper_panel_and_ordering_for_an_ablation_with_paper_numbers(runs_factory, tmp_path):
    # the quickstart's paper numbers (E03): bf16 < nvfp4 < mxfp4; ours agree
    three_seed_sweep(runs_factory, name="quickstart", mxfp4=(3.06, 3.07, 3.08))
    text = write_report([tmp_path / "sweep"]).read_text()
    assert (tmp_path / "sweep" / "figures" / "paper_vs_ours.png").read_bytes()[:8] == PNG
    assert "## The paper beside this run" in text and "Fig. 6a" in text
    assert "bf16 < nvfp4 < mxfp4; it agrees with the paper" in text, text


def test_one_seed_says_only_what_was_measured(runs_factory, tmp_path):
    """The quickstart's case: one seed orders the recipes as the paper does, but without an
    interval the report must not call that agreement; and its scale says "1 seed"."""
    for job, quant, final in (("0_quant=bf16/seed=0", "bf16", 3.0),
                              ("1_quant=nvfp4/seed=0", "nvfp4", 3.03),
                              ("2_quant=mxfp4/seed=0", "mxfp4", 3.06)):
        runs_factory(job, quant=quant, seed=0, name="quickstart", val_loss=val(final, 4))
    text = write_report([tmp_path / "sweep"]).read_text()
    assert "one seed): bf16 < nvfp4 < mxfp4; one sample without an interval" in text, text
    assert "it agrees" not in text and "1 seed." in text and "seed(s)" not in text


def test_paper_ordering_disagreement_is_reported(runs_factory, tmp_path):
    three_seed_sweep(runs_factory, name="quickstart", mxfp4=(3.01, 3.01, 3.01))
    text = write_report([tmp_path / "sweep"]).read_text()
    assert "bf16 < mxfp4 < nvfp4; it does not agree with the paper" in text


def test_layer_error_figure_when_runs_logged_statistics(runs_factory, tmp_path):
    for q in ("nvfp4", "mxfp4"):
        run = runs_factory(f"{q}", quant=q, val_loss=val(3.0))
        m = pd.read_csv(run / "metrics.csv")
        for block in range(3):
            m[f"blocks.{block}.mlp.fc1/wgrad/rel_err"] = [0.1 * (block + 1)] * 4
            m[f"blocks.{block}.mlp.fc1/fprop.x/rel_err"] = [0.05] * 4
        m.to_csv(run / "metrics.csv", index=False)
    c = collect([tmp_path / "sweep"])
    w = c.layers[c.layers["metric"] == "wgrad/rel_err"]
    assert sorted(w["block"].unique()) == [0, 1, 2]
    assert w.groupby("block")["value"].mean().tolist() == pytest.approx([0.1, 0.2, 0.3])
    write_report([tmp_path / "sweep"])
    assert (tmp_path / "sweep" / "figures" / "layer_error.png").read_bytes()[:8] == PNG
    assert not (tmp_path / "sweep" / "figures" / "noise_ratio.png").exists()  # none logged


def test_layer_type_table_groups_a_hybrids_layers_across_blocks(runs_factory, tmp_path):
    """Mamba-2 in_proj in blocks 0 and 2 logs fprop.x errors 0.1 and 0.3, attention qkv in
    block 1 logs 0.05, on two seeds; wgrad only for in_proj. The table averages each type over
    blocks, steps and seeds, keeps first-seen order, and leaves a metric a type never logged
    empty."""
    for seed in (0, 1):
        run = runs_factory(f"nv/seed={seed}", quant="nvfp4", seed=seed, val_loss=val(3.0))
        m = pd.read_csv(run / "metrics.csv")
        m["blocks.0.mamba.in_proj/fprop.x/rel_err"] = [0.1] * 4
        m["blocks.1.attn.qkv/fprop.x/rel_err"] = [0.05 + 0.01 * seed] * 4
        m["blocks.2.mamba.in_proj/fprop.x/rel_err"] = [0.3] * 4
        m["blocks.2.mamba.in_proj/wgrad/rel_err"] = [0.2, 0.4, 0.2, 0.4]
        m.to_csv(run / "metrics.csv", index=False)
    path = write_report([tmp_path / "sweep"], pdf=False)
    report = path.read_text()
    table = pd.read_csv(path.parent / "tables" / "layer_type_error.csv")
    assert table["type"].tolist() == ["mamba.in_proj", "attn.qkv"]
    rows = table.set_index("type")
    assert rows.loc["mamba.in_proj", "fprop.x/rel_err"] == pytest.approx(0.2)
    assert rows.loc["attn.qkv", "fprop.x/rel_err"] == pytest.approx(0.055)
    assert rows.loc["mamba.in_proj", "wgrad/rel_err"] == pytest.approx(0.3)
    assert pd.isna(rows.loc["attn.qkv", "wgrad/rel_err"])
    section = _section(report, "Quantization error by layer type")
    assert "| mamba.in_proj | nvfp4 | 0.2" in section and "| attn.qkv | nvfp4 | 0.055" in section


def test_noise_ratio_table_figure_and_verdict_come_from_the_logged_ratios(runs_factory,
                                                                          tmp_path):
    """Three layers per run log ratios base x (block + 1) x (i + 1) / 4 at the 4 logged steps:
    nvfp4 with base 4, mxfp4 with base 1, so mxfp4's lowest layer ends below sqrt(3)."""
    for q, base in (("nvfp4", 4.0), ("mxfp4", 1.0)):
        run = runs_factory(q, quant=q, val_loss=val(3.0))
        m = pd.read_csv(run / "metrics.csv")
        for block in range(3):
            m[f"blocks.{block}.mlp.fc1/wgrad/noise_ratio"] = [
                base * (block + 1) * (i + 1) / 4 for i in range(4)]
        m.to_csv(run / "metrics.csv", index=False)
    report = write_report([tmp_path / "sweep"], pdf=False).read_text()
    table = pd.read_csv(tmp_path / "sweep" / "tables" / "noise_ratio.csv")
    last = table.sort_values("tokens").groupby("label").tail(1).set_index("label")
    assert last.loc["nvfp4", "median"] == pytest.approx(8.0)          # layers 4, 8, 12
    assert last.loc["nvfp4", "min"] == pytest.approx(4.0)
    assert last.loc["mxfp4", "min"] == pytest.approx(1.0)
    first = table.sort_values("tokens").groupby("label").head(1).set_index("label")
    assert first.loc["mxfp4", "median"] == pytest.approx(0.5)         # 2 x 1 / 4
    section = _section(report, "Gradient noise")
    assert "`mxfp4` ended with a layer below it" in section and "`nvfp4`: median" in section
    c = collect([tmp_path / "sweep"])
    fig = figures.noise_figure(figures.noise_table(c.layers),
                               figures.palette(["nvfp4", "mxfp4"]), [])
    ax = fig.axes[0]
    drawn = {tuple(line.get_ydata()) for line in ax.lines}
    nv = table[table["label"] == "nvfp4"].sort_values("tokens")
    assert tuple(nv["median"]) in drawn and tuple(nv["min"]) in drawn
    assert (figures.NOISE_THRESHOLD,) * 2 in drawn and ax.get_yscale() == "log"
    assert (tmp_path / "sweep" / "figures" / "noise_ratio.png").read_bytes()[:8] == PNG


def test_token_efficiency_from_budgets(runs_factory, tmp_path):
    # reference nvfp4 at 40 steps reaches 3.0; mxfp4 at 40/50/60 steps: 3.1, 3.02, 2.98
    runs_factory("nv", quant="nvfp4", arm="nvfp4_1x", val_loss=val(3.0))
    for arm, n, final in (("mxfp4_1x", 4, 3.1), ("mxfp4_1.25x", 5, 3.02),
                          ("mxfp4_1.5x", 6, 2.98)):
        steps = [10 * (i + 1) for i in range(n)]
        runs_factory(arm, quant="mxfp4", arm=arm, steps=steps, val_loss=val(final, n),
                     train_loss=[4.0] * n)
    write_report([tmp_path / "sweep"], baseline="nvfp4_1x")
    eff = pd.read_csv(tmp_path / "sweep" / "tables" / "token_efficiency.csv")
    row = eff[eff["recipe"] == "mxfp4"].iloc[0]
    # 3.02 -> 2.98 crosses 3.0 halfway between 1.25x and 1.5x
    assert row["multiplier_mean"] == pytest.approx(1.375)
    section = _section((tmp_path / "sweep" / "report.md").read_text(), "Token efficiency")
    assert "| `mxfp4` | 1 | 1.0x, 1.25x, 1.5x | 1.375× | — | reached |" in section
    assert (tmp_path / "sweep" / "figures" / "token_efficiency.png").exists()


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_curve_token_efficiency_is_a_readable_table(sweep):
    # mxfp4 vs bf16's 3.0: seed 0 ends exactly at 3.0 (1.0x); seed 1 ends at 3.10 (never);
    # seed 2's curve 2.95 + 0.5 (7 - i) / 7 at steps 5(i + 1) crosses 3.0 three tenths of the
    # way from step 35 to 40: 36.5 / 40 = 0.9125x. Mean over the two that reached: 0.95625x.
    section = _section(write_report([sweep], pdf=False).read_text(),
                       "Token efficiency (approximate)")
    assert "| `mxfp4` | 3 | 0.956× | " in section and "mixed: 2/3 reached" in section
    assert "| `nvfp4` | 3 | — | — | never within 1.0x |" in section
    assert "multiplier_mean" not in section and "|  |" not in section


def test_curve_token_efficiency_says_so_when_no_recipe_reaches_the_reference(runs_factory,
                                                                              tmp_path):
    for seed in range(2):
        runs_factory(f"bf16/{seed}", quant="bf16", seed=seed, val_loss=val(3.0))
        runs_factory(f"nvfp4/{seed}", quant="nvfp4", seed=seed, val_loss=val(3.1))
    section = _section(write_report([tmp_path / "sweep"], pdf=False).read_text(),
                       "Token efficiency (approximate)")
    assert "No recipe reached `bf16`'s final validation loss" in section
    assert "`nvfp4` (2 seeds)" in section and "|" not in section


# ------------------------------------------------------------------------------ CLI

def test_plot_and_compare_subcommands(sweep, tmp_path, capsys):
    assert main(["plot", str(sweep)]) == 0
    assert (sweep / "report.md").exists()
    out = tmp_path / "cmp"
    assert main(["compare", str(sweep / "0_quant=bf16"), str(sweep / "1_quant=nvfp4"),
                 "--out", str(out)]) == 0
    table = pd.read_csv(out / "tables" / "final_loss.csv")
    assert list(table["label"]) == ["bf16", "nvfp4"]


def test_the_command_line_draws_headless_unless_mplbackend_says_otherwise(sweep, monkeypatch):
    """The figures choose no backend (a notebook shows them inline); the command picks the
    headless one before drawing, and a user's MPLBACKEND stands."""
    monkeypatch.setenv("MPLBACKEND", "restored after the test")
    monkeypatch.delenv("MPLBACKEND")
    assert main(["plot", str(sweep)]) == 0
    assert os.environ["MPLBACKEND"] == "Agg"
    monkeypatch.setenv("MPLBACKEND", "pdf")
    assert main(["plot", str(sweep)]) == 0
    assert os.environ["MPLBACKEND"] == "pdf"


def test_cli_errors_name_the_problem(sweep, tmp_path, capsys):
    assert main(["plot", str(sweep), "--baseline", "fp16"]) == 2
    err = capsys.readouterr().err
    assert "fp16" in err and "bf16, nvfp4, mxfp4" in err
    assert main(["compare", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err


def test_a_sweep_of_only_failed_runs_is_an_error_listing_them(runs_factory, tmp_path):
    runs_factory("a", status="failed", error="OSError: disk full")
    with pytest.raises(ValueError, match="disk full"):
        write_report([tmp_path / "sweep"])


def test_summary_numbers_survive_json_roundtrip(sweep):
    """The runs table carries summary.json's numbers unchanged (no re-derivation)."""
    c = collect([sweep])
    for row in c.runs.itertuples():
        s = json.loads((sweep / row.run / "summary.json").read_text())
        assert row.final_val_loss == s["final_val_loss"]
        assert row.tokens == s["tokens"] and row.seed == s["seed"]


ABLATIONS = sorted(p.stem for p in (conf_dir() / "ablation").glob("*.yaml"))


@pytest.mark.parametrize("ablation", ABLATIONS)
def test_each_ablation_names_the_figures_its_report_will_contain(ablation):
    text = (conf_dir() / "ablation" / f"{ablation}.yaml").read_text()
    line = re.search(r"^# Report figures: (.+)$", text, re.M)
    assert line, f"{ablation}.yaml has no '# Report figures:' header line"
    cfg = yaml.safe_load(text)
    expected = {"loss.png", "loss_gap.png"}
    if load_paper(cfg["name"]) is not None:
        expected.add("paper_vs_ours.png")
    if any("tokens_multiplier" in (arm.get("train") or {}) for arm in cfg.get("arms", {}).values()):
        expected.add("token_efficiency.png")
    if (cfg.get("train") or {}).get("stats_every"):
        expected |= {"layer_error.png", "noise_ratio.png"}
    if cfg["name"] == "steps_vs_size":     # its report draws one figure of its own
        expected = {"steps_vs_size.png"}
    assert {f.strip() for f in line[1].split(",")} == expected


def test_compare_names_a_repeated_seed_and_counts_it_once(runs_factory, tmp_path):
    """Two runs of one config and seed given to compare: one sample, said so in the report."""
    for job in ("a/seed=0", "b/seed=0"):
        runs_factory(job, quant="nvfp4", seed=0, val_loss=val(3.05, 4))
    runs_factory("c/seed=0", quant="bf16", seed=0, val_loss=val(3.0, 4))
    text = write_report([tmp_path / "sweep"]).read_text()
    assert "`nvfp4` seed 0 x2" in text
    row = next(line for line in text.splitlines() if line.startswith("| `nvfp4` |"))
    assert row.split("|")[2].strip() == "1"        # seeds column: one sample


@pytest.mark.parametrize(("tokenizer", "unit"), [("bytes", "nats/byte"), ("bpe", "nats/token"),
                                                 (None, "nats/token")])
def test_losses_are_labelled_per_the_runs_tokenizer(runs_factory, tmp_path, tokenizer, unit):
    """A byte-level run's cross entropy is per byte: the report's table and the figures say
    so; any other tokenizer, or none recorded, is per token."""
    from nvfp4_lab.analysis.reports.figures import loss_figure, palette
    from nvfp4_lab.analysis.sources.collect import collect

    config = {"data.tokenizer": tokenizer} if tokenizer else {}
    for seed in range(2):
        for quant, final in (("bf16", 3.0), ("nvfp4", 3.04 + 0.01 * seed)):
            runs_factory(f"{quant}/seed={seed}", quant=quant, seed=seed, config=config,
                         val_loss=[None, None, None, final])
    text = write_report([tmp_path / "sweep"]).read_text()
    assert f"## Final validation loss ({unit})" in text
    coll = collect([tmp_path / "sweep"])
    fig = loss_figure(coll.runs, coll.curves, coll.axes, palette(coll.labels))
    assert [ax.get_ylabel() for ax in fig.axes[:2]] == [f"train loss ({unit})",
                                                         f"validation loss ({unit})"]


def test_recipes_are_listed_bf16_first_then_in_launch_order(runs_factory, tmp_path):
    """The quickstart launches mxfp4, nvfp4, bf16; a sweep of 11 jobs sorts "10_" before
    "2_" as text: the order is BF16, then the job numbers, as numbers."""
    from nvfp4_lab.analysis.sources.collect import collect

    for job, quant in ((0, "mxfp4"), (1, "nvfp4"), (2, "fp8"), (10, "bf16"), (11, "quartet")):
        runs_factory(f"{job}_quant={quant}/seed=0", quant=quant, val_loss=[None, None, None, 3])
    assert collect([tmp_path / "sweep"]).labels == ["bf16", "mxfp4", "nvfp4", "fp8", "quartet"]
    text = write_report([tmp_path / "sweep"]).read_text()
    rows = [line.split("`")[1] for line in text.splitlines() if line.startswith("| `")]
    assert rows[:5] == ["bf16", "mxfp4", "nvfp4", "fp8", "quartet"]


def test_paper_vs_ours_is_not_drawn_against_another_baseline(runs_factory, tmp_path):
    """Runs of the formats ablation without BF16: ours would be gaps against MXFP4 on the
    axis of the paper's gaps against BF16. The report says why instead of drawing it."""
    for seed in range(2):
        for job, quant, final in ((0, "mxfp4", 3.05), (1, "nvfp4", 3.02 + 0.01 * seed)):
            runs_factory(f"{job}_quant={quant}/seed={seed}", quant=quant, seed=seed,
                         name="formats", val_loss=[None, None, None, final])
    text = write_report([tmp_path / "sweep"]).read_text()
    assert "Not drawn: the paper's gaps are against `bf16` and ours here against `mxfp4`" \
        in text
    assert not (tmp_path / "sweep" / "figures" / "paper_vs_ours.png").exists()
    assert "paper_vs_ours" not in text.split("Not drawn")[1]


# ------------------------------------------------------------------------------ compare

def _tokenizer_sweep(runs_factory, name: str, tokenizer: str, finals=(3.0, 3.04),
                     model: str | None = None, machine: str | None = None):
    """A sweep ``name`` of bf16 and nvfp4 over two seeds whose runs record ``tokenizer`` (and
    a model and machine class, where given)."""
    for seed in range(2):
        for quant, final in zip(("bf16", "nvfp4"), finals):
            run = runs_factory(f"{name}/{quant}/seed={seed}", quant=quant, seed=seed,
                               config={"data.tokenizer": tokenizer},
                               val_loss=[None, None, None, final + 0.01 * seed])
            summary = json.loads((run / "summary.json").read_text())
            summary.update({k: v for k, v in (("model", model), ("machine_class", machine))
                            if v})
            (run / "summary.json").write_text(json.dumps(summary))
    return runs_factory.root / name


def test_compare_refuses_runs_whose_losses_are_in_different_units(runs_factory, tmp_path,
                                                                  capsys):
    """A bytes sweep beside a BPE sweep: nats/byte against nats/token is no gap. One line
    naming the tokenizers and the fix, exit 2, nothing written."""
    a = _tokenizer_sweep(runs_factory, "bytes", "bytes")
    b = _tokenizer_sweep(runs_factory, "bpe", "bpe", finals=(5.0, 5.1))
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "tokenizer: bytes (4 runs), bpe (4 runs)" in err and "one tokenizer" in err, err
    assert not out.exists()


def test_compare_says_what_it_compared_and_warns_of_other_models_and_machines(runs_factory,
                                                                            tmp_path):
    """Two sweeps of one tokenizer on two machine classes and models: the report is written
    from the sweeps given (not from its --out folder) and opens with a warning naming both
    differences."""
    a = _tokenizer_sweep(runs_factory, "a", "bytes", model="nano",
                         machine="x86_64 AVX512, Intel family 6")
    b = _tokenizer_sweep(runs_factory, "b", "bytes", model="hybrid_nano",
                         machine="x86_64 AVX512, AMD family 25")
    out = tmp_path / "cmp"
    text = write_report([a, b], out).read_text()
    stamp = next(line for line in text.splitlines() if line.startswith("Generated "))
    assert f"from `{a}`, `{b}`:" in stamp and str(out) not in stamp, stamp
    head, _, rest = text.partition("\n\n**Read with care: these runs differ in model: ")
    assert "## " not in head and rest, text                  # before the first section
    warning = rest.split("\n\n")[0]
    assert "nano (4 runs)" in warning and "hybrid_nano (4 runs)" in warning
    assert "machine class: x86_64 AVX512, Intel family 6 (4 runs)" in warning


def test_one_sweep_gets_no_warning(runs_factory):
    text = write_report([_tokenizer_sweep(runs_factory, "a", "bytes", model="nano")]).read_text()
    assert "Read with care" not in text


def test_a_gap_figure_of_train_loss_says_so_in_its_table_and_caption(sweep, runs_factory):
    """A run with fewer than 4 validation points turns the gap curves to train loss: the
    table's metric column and the figure's caption name it."""
    runs_factory("3_quant=fp8/seed=0", quant="fp8", val_loss=[None, None, 3.2, 3.1])
    text = write_report([sweep], pdf=False).read_text()
    gaps = pd.read_csv(sweep / "tables" / "loss_gap.csv")
    assert set(gaps["metric"]) == {"train_loss"}
    caption = text.split("![loss_gap](figures/loss_gap.png)\n\n")[1].split("\n")[0]
    assert caption.startswith("The train loss gap to the baseline") and \
        "fewer than 4 validation points" in caption and "positive = worse" in caption


def test_paper_vs_ours_draws_the_interval_its_verdict_uses(runs_factory, tmp_path,
                                                          monkeypatch):
    """nvfp4's and mxfp4's gaps to BF16 would pass Bartlett's check, yet each verdict and
    bar uses the gap's own t interval (df 2), never a pooled one (df 4)."""
    from matplotlib.container import BarContainer

    three_seed_sweep(runs_factory, name="quickstart", mxfp4=(3.06, 3.07, 3.08))
    drawn = {}
    monkeypatch.setattr(figures, "save", lambda fig, d, name, pdf=True: drawn.update({name: fig}))
    write_report([tmp_path / "sweep"])
    table = pd.read_csv(tmp_path / "sweep" / "tables" / "final_loss.csv").set_index("label")
    right = drawn["paper_vs_ours"].axes[1]
    (bars,) = [c for c in right.containers if isinstance(c, BarContainer)]
    spans = [sorted((s[0][1], s[1][1])) for s in bars.errorbar.lines[2][0].get_segments()]
    for i, label in ((1, "nvfp4"), (2, "mxfp4")):
        gaps = table.loc[label, ["gap_lo", "gap_hi"]].tolist()
        assert spans[i] == pytest.approx(gaps), label
    assert "pooled_lo" not in table.columns
