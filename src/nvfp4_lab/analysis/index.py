"""The lab's published results: ``results/README.md``, one verdict per claim of the paper.

``nvfp4-lab publish SWEEP`` copies a finished sweep's small files (per run: ``config.yaml``,
``summary.json``, ``metrics.csv``; per sweep: ``multirun.yaml``, ``sweep_summary.csv``) into
``results/<ablation>/`` and draws its report there; ``nvfp4-lab plot --index results/`` then
writes the index over every published ablation, in the order of ``ABLATIONS``, and, in a
table of their own, over the comparisons beyond the paper (``BEYOND_PAPER``: the published FP4
recipes, each source's claims in its own paper entry):

    for each claim of nvfp4_lab/paper/<ablation>.yaml ("a < b": a ends with the lower loss;
    "a ~ b": no difference), the paired gap of b against a in final validation loss,
    gap = (loss_a - loss_b) / loss_a x 100 per seed, its mean and 95% t interval, and

        reproduced      "a < b" and the interval lies below 0 (b resolved worse)
        contradicted    the interval lies on the other side of 0 from the claim, or a "~"
                        claim whose interval excludes 0
        not resolved    "a < b" and the interval includes 0
        consistent      "a ~ b" and the interval includes 0 (a null is never proven; the
                        interval's width says how large a difference the seeds could miss)

An arm whose every seed diverged counts as worse than any that finished. An ablation without a
published folder is listed as pending. The verdicts use only final validation loss: the paper's
figures mix training and validation loss, but at our scale the validation loss on held-out
plays is the quantity with the least noise per run (8 batches, same for every run).
"""
from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from .collect import collect
from .paper import Claim, PaperResult, load_paper
from .report import scale_text
from .stats import mean_ci, paired_gaps

# The order results are run and listed in: the headline (formats) first, then roughly by how
# likely a small scale is to show the effect (docs/experiments.md, Small scale).
ABLATIONS = ("formats", "consistency", "sr_placement", "precision_switch", "components",
             "cumulative", "rht_gemms", "token_efficiency", "bf16_layers", "rht_size",
             "rht_signs")
# sweeps that go beyond the paper, each with its sources' claims in nvfp4_lab/paper/<name>.yaml:
# published and indexed like the ablations, in a table of their own
BEYOND_PAPER = ("recipes",)
RUN_FILES = ("config.yaml", "summary.json", "metrics.csv")
SWEEP_FILES = ("multirun.yaml", "sweep_summary.csv")
METRIC = "final_val_loss"
VERDICTS = ("reproduced", "consistent", "not resolved", "contradicted", "too few seeds",
            "not run")


@dataclass(frozen=True)
class ClaimResult:
    """Our test of one claim: n paired seeds, the gap of ``worse`` against ``better`` in %
    (mean, 95% interval; negative = ``worse`` has the higher loss), the verdict."""

    claim: Claim
    n: int
    gap_pct: float
    lo: float
    hi: float
    verdict: str
    note: str = ""


def claim_verdict(claim: Claim, lo: float, hi: float) -> str:
    """The verdict word for a gap interval [lo, hi] (see the module docstring)."""
    if claim.same:
        return "contradicted" if lo > 0.0 or hi < 0.0 else "consistent"
    if hi < 0.0:
        return "reproduced"
    return "contradicted" if lo > 0.0 else "not resolved"


def check_claim(claim: Claim, runs: pd.DataFrame, diverged: set[str]) -> ClaimResult:
    """``runs``: collect's runs table of one sweep; ``diverged``: labels whose every seed
    diverged (absent from ``runs``)."""
    missing = [lb for lb in (claim.better, claim.worse)
               if lb not in set(runs["label"]) and lb not in diverged]
    if missing:
        return ClaimResult(claim, 0, math.nan, math.nan, math.nan, "not run",
                           f"no runs of {', '.join(missing)}")
    if diverged & {claim.better, claim.worse}:
        both = {claim.better, claim.worse} <= diverged
        verdict = ("not resolved" if both else
                   "reproduced" if claim.worse in diverged and not claim.same else "contradicted")
        return ClaimResult(claim, 0, math.nan, math.nan, math.nan, verdict,
                           f"diverged: {', '.join(sorted(diverged & {claim.better, claim.worse}))}")
    gaps = paired_gaps(runs, claim.better, METRIC)
    ci = mean_ci(gaps.loc[gaps["label"] == claim.worse, "gap_pct"])
    if ci.n < 2:
        return ClaimResult(claim, ci.n, ci.mean, math.nan, math.nan, "too few seeds")
    return ClaimResult(claim, ci.n, ci.mean, ci.lo, ci.hi, claim_verdict(claim, ci.lo, ci.hi))


@dataclass(frozen=True)
class AblationResult:
    """One published ablation: its paper entry, its claims tested, its scale and command."""

    name: str
    paper: PaperResult
    claims: list[ClaimResult]
    scale: str
    command: str


def diverged_labels(coll) -> set[str]:
    """Labels none of whose runs finished because every one diverged."""
    div = coll.skipped[coll.skipped["status"] == "diverged"]["label"].dropna()
    return set(div) - set(coll.runs["label"])


def sweep_command(folder: Path) -> str:
    """The command line that re-runs the sweep, from Hydra's ``multirun.yaml``."""
    raw = yaml.safe_load((folder / "multirun.yaml").read_text())
    task = [o for o in raw["hydra"]["overrides"]["task"]
            if not o.startswith(("hydra.sweep.dir=", "trainer.progress="))]
    return "nvfp4-lab run -m " + " ".join(task)


def load_ablation(folder: Path, paper_dir: Path | None = None) -> AblationResult:
    """Test every claim of the paper entry named like ``folder`` against its runs."""
    paper = load_paper(folder.name, paper_dir)
    if paper is None:
        raise ValueError(f"{folder}: no paper entry nvfp4_lab/paper/{folder.name}.yaml")
    coll = collect([folder])
    diverged = diverged_labels(coll)
    claims = [check_claim(c, coll.runs, diverged) for c in paper.claims]
    return AblationResult(folder.name, paper, claims, scale_text(coll.runs),
                          sweep_command(folder))


def publish(sweep: Path, results: Path) -> Path:
    """Copy a finished sweep's small files to ``results/<its name>/``; never over an existing
    folder (a published result is replaced only by deleting it first, on purpose)."""
    raw = yaml.safe_load((sweep / "multirun.yaml").read_text())
    name = raw.get("name")
    if name not in ABLATIONS + BEYOND_PAPER:
        raise ValueError(f"{sweep}: name={name!r} is not a paper ablation "
                         f"({', '.join(ABLATIONS)}) or a comparison beyond it "
                         f"({', '.join(BEYOND_PAPER)})")
    dest = results / name
    if dest.exists():
        raise FileExistsError(f"{dest} exists: a published result is never overwritten; "
                              f"delete it first to replace it")
    summary = pd.read_csv(sweep / "sweep_summary.csv")
    unfinished = summary[~summary["status"].isin(["done", "diverged"])]
    if len(unfinished):
        raise ValueError(f"{sweep}: {len(unfinished)} jobs not finished "
                         f"({', '.join(unfinished['job'])}); resume the sweep before publishing")
    for job in summary["job"]:
        for f in RUN_FILES:
            if (sweep / job / f).exists():
                (dest / job).mkdir(parents=True, exist_ok=True)
                shutil.copy2(sweep / job / f, dest / job / f)
    for f in SWEEP_FILES:
        shutil.copy2(sweep / f, dest / f)
    return dest


def _num(x: float, digits: int = 2) -> str:
    return "" if not math.isfinite(x) else f"{x:+.{digits}f}"


def _paper_numbers(paper: PaperResult, claim: Claim) -> str:
    """The paper's values (or outcomes) of the claim's two labels, in its metric."""
    unit = "%" if paper.metric.endswith("gap_pct") else ""
    parts = []
    for label in (claim.better, claim.worse):
        if label in paper.values:
            parts.append(f"{label} {paper.values[label]:g}{unit}")
        elif label in paper.outcomes:
            parts.append(f"{label}: {paper.outcomes[label].split(' (')[0]}")
    return "; ".join(parts) + (f" ({paper.metric})" if paper.values.keys() & {
        claim.better, claim.worse} else "") if parts else "text only"


def _claim_rows(result: AblationResult) -> list[str]:
    rows = []
    link = f"[{result.name}]({result.name}/report.md)"
    for i, c in enumerate(result.claims):
        head = (f"{link} | {result.paper.experiment}, {result.paper.figure}" if i == 0
                else " | ")
        ours = (f"{_num(c.gap_pct)} [{_num(c.lo)}, {_num(c.hi)}], {c.n} seeds"
                if math.isfinite(c.lo) else c.note or f"{c.n} seeds")
        rows.append(f"| {head} | `{c.claim}` | {_paper_numbers(result.paper, c.claim)} | "
                    f"{ours} | **{c.verdict}** |")
    return rows


def _tables(names: tuple[str, ...], results: Path, paper_dir: Path | None):
    """(published AblationResults, claim rows, scale rows) of the sweeps ``names``."""
    published, rows, scales = [], [], []
    for name in names:
        folder = results / name
        if (folder / "multirun.yaml").exists():
            result = load_ablation(folder, paper_dir)
            published.append(result)
            rows += _claim_rows(result)
            scales.append(f"| [{name}]({name}/report.md) | {result.scale} | "
                          f"`{result.command}` |")
        else:
            paper = load_paper(name, paper_dir)
            rows.append(f"| {name} | {paper.experiment}, {paper.figure} | "
                        f"{', '.join(f'`{c}`' for c in paper.claims)} | | not yet run: "
                        f"`nvfp4-lab run +ablation={name} +scale=lab` | **pending** |")
    return published, rows, scales


def _tally(published: list[AblationResult]) -> str:
    verdicts = [c.verdict for r in published for c in r.claims]
    return ", ".join(f"{verdicts.count(v)} {v}" for v in VERDICTS if v in verdicts) or "none"


def index_markdown(results: Path, paper_dir: Path | None = None) -> str:
    """The whole ``results/README.md``: preregistration, findings table, the comparisons
    beyond the paper, scales, discussion."""
    published, rows, scales = _tables(ABLATIONS, results, paper_dir)
    beyond, beyond_rows, beyond_scales = _tables(BEYOND_PAPER, results, paper_dir)
    tally = _tally(published)
    sections = [
        "# Results: the paper's findings at lab scale",
        "Generated by `nvfp4-lab plot --index` from the runs in this folder; edit "
        "`preregistration.md` and `discussion.md`, not this file. "
        f"{len(published)} of {len(ABLATIONS)} ablations published; claims: {tally}.",
        _include(results / "preregistration.md"),
        "## Findings\n\n"
        "Each claim is one finding of the paper over our arms: `a < b` means a ends with the "
        "lower loss, `a ~ b` no difference. Ours: the paired gap of b against a in final "
        "validation loss, (a - b) / a x 100 per seed (negative: b worse), mean and 95% t "
        "interval. Verdict: *reproduced* (the interval is on the claim's side of 0), *not "
        "resolved* (it includes 0), *contradicted* (it is on the other side, or excludes 0 "
        "for a `~` claim), *consistent* (a `~` claim whose interval includes 0).\n\n"
        "| ablation | paper | claim | paper's numbers | ours: gap % [95% CI] | verdict |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows),
        "## Beyond the paper: the published FP4 recipes on equal terms\n\n"
        "Each source's claim, tested over our arms as above; the sources measured at their own "
        "scales against their own baselines (nvfp4_lab/paper/<sweep>.yaml names them). "
        f"{len(beyond)} of {len(BEYOND_PAPER)} published; claims: {_tally(beyond)}.\n\n"
        "| sweep | sources | claim | sources' numbers | ours: gap % [95% CI] | verdict |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(beyond_rows),
        "## Scale and command of each published sweep\n\n"
        "| sweep | scale | re-run (from its multirun.yaml) |\n|---|---|---|\n"
        + ("\n".join(scales + beyond_scales) or "| none yet | | |"),
        _include(results / "discussion.md"),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"


def _include(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


def write_index(results: Path, paper_dir: Path | None = None) -> Path:
    """Write ``results/README.md``; returns its path."""
    out = results / "README.md"
    out.write_text(index_markdown(results, paper_dir))
    return out
