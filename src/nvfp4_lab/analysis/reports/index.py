"""The lab's published results: ``results/README.md``, one verdict per claim of the paper.

``nvfp4-lab plot --index results/`` writes the index from the folders ``publish`` made: the
paper's ablations in the order of ``ABLATIONS``, the comparisons beyond the paper
(``BEYOND_PAPER``), and the design-v2 sweeps under ``results/v2/``
(results/preregistration.md), each claim tested by ``analysis.claims`` (verdicts on each
claim's own spread, Holm and BH, seeds needed: ``analysis.verdicts``) on final validation
loss, v2 also on the paper's averaged train loss, each finding of the paper counted once
(``answers.owners``), and the headline figure ``figures/forest.png``. An ablation
without a published folder is listed as pending. A study (``STUDIES``) gets a section of its
own.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ...sweepdir import MULTIRUN, SweepDir
from ..findings import discussion
from ..findings.answers import (
    counted_answers,
    fresh_seeds,
    owners,
    rule_md,
    supersede,
    target_text,
    to_buy_md,
)
from ..findings.claims import (
    METRICS,
    PRIMARY,
    ClaimResult,
    Sweep,
    Table,
    carried,
    earlier,
    evaluate,
    load_sweep,
    tally,
)
from ..findings.context import CLAIM_COLUMNS, source, write_claims
from ..inference import verdicts as v
from ..inference.stats import CLAIM_CONVENTION, CLAIM_GAP, CLAIM_SIGN_CHANGED, GAP_CONVENTION
from ..laws import carry, scaling_report, steps_vs_size_report
from ..sources import machines
from ..sources.paper import GAP_METRICS, load_all, load_paper
from . import figures, paper_figures
from .publish import ABLATIONS, BEYOND_PAPER, STUDIES
from .sections import markdown, models_text, scale_text, signed

V2 = "v2"     # results/v2/<folder>: the design-v2 sweeps, one table each
V1, BEYOND = Table("v1"), Table("beyond")
# the pages that tell what the tables do not, linked from the first screen
PAGES = (("preregistration.md", "the plan, fixed before the runs, and its amendments"),
         ("discussion.md", "what the findings mean"),
         ("scaling/report.md", "the scaling study"),
         ("steps_vs_size/report.md", "steps or size"))


def _paper_numbers(r: ClaimResult, paper) -> str:
    """The paper's numbers for the claim's labels and the gap they imply, inferred ones marked."""
    parts = []
    for label in (r.claim.better, r.claim.worse):
        if label in paper.values:
            parts.append(f"{label} {_paper_value(paper, paper.values[label])}")
        elif label in paper.inferred:
            parts.append(f"{label} ≈{_paper_value(paper, paper.inferred[label])} "
                         "(inferred across figures)")
        elif label in paper.outcomes:
            parts.append(f"{label}: {paper.outcomes[label].split(' (')[0]}")
    text = "; ".join(parts) or "text only"
    return text + (f"; gap {signed(r.paper_gap)}" if r.paper_gap is not None else "")


def _paper_value(paper, x: float) -> str:
    """One of the paper's values as it reads: a gap to its baseline signed, in %."""
    return f"{x:+g}%" if paper.metric in GAP_METRICS else f"{x:g}"


def _ours(r: ClaimResult) -> str:
    if r.test is None:
        return r.note or f"{r.n} seeds"
    t = r.test
    return f"{signed(t.mean)} [{signed(t.lo)}, {signed(t.hi)}], {r.n} seeds"


def size_text(r: ClaimResult) -> str:
    """What the claim says on the paper's size (``carry``): the word, and the carried gap."""
    if not r.size:
        return ""
    c = r.carried
    return f"on the paper's size: *{r.size}*" + ("" if c is None else (
        f" ({signed(c.gap)} [{signed(c.lo)}, {signed(c.hi)}] at {c.regime}; {c.laws})"))


def _flags(r: ClaimResult) -> str:
    """What a reader must know beside the verdict: its size statement, kind, duplicate, owner,
    the verdicts of the earlier rules, Holm."""
    out = [size_text(r)] if r.size else []
    if r.claim.kind != "paper":
        out.append({"size": "size claim", "ours": "ours: not the paper's"}[r.claim.kind])
    if r.duplicate_of:
        out.append(f"same runs as {r.duplicate_of}: its verdict")
    if r.superseded_by:
        out.append(f"partial result, not counted: superseded by {r.superseded_by}")
    if r.counted_in:
        out.append(f"counted in {r.counted_in}")
    if r.test is not None and r.note:
        out.append(r.note)
    if r.verdict_v2_rule and r.verdict_v2_rule != r.verdict:
        out.append(f"published as *{r.verdict_v2_rule}* under design v2's rule")
    if r.verdict_amendment8 and r.verdict_amendment8 != r.verdict:
        out.append(f"published as *{r.verdict_amendment8}* under amendment 8")
    if r.verdict in v.RESOLVED:
        out.append("survives Holm" if r.holm_survives else
                   "survives BH, not Holm" if r.bh_survives else "not after Holm or BH")
    return "; ".join(out)


def _seeds(r: ClaimResult) -> str:
    if r.test is None:
        return ""
    return f"{v.seeds_text(fresh_seeds(r)) or '—'} ({target_text(r)})"


TABLE_HEAD = ("| sweep | paper | claim | paper's numbers (a gap to its baseline: % "
              f"{GAP_CONVENTION}; gap: the claim gap) | ours: claim gap {CLAIM_GAP}, % "
              f"({CLAIM_CONVENTION}) [95% CI] | verdict | "
              "notes | fresh seeds for 80% (at what) |\n"
              "|---|---|---|---|---|---|---|---|")


def _rows(sweeps: list[Sweep], results: list[ClaimResult], link_root: str = "") -> list[str]:
    rows = []
    papers = {s.name: s for s in sweeps}
    seen = set()
    for r in results:
        s = papers[r.sweep]
        head = " | "
        if r.sweep not in seen:
            seen.add(r.sweep)
            head = (f"[{r.sweep}]({link_root}{r.sweep}/report.md) | "
                    f"{s.paper.experiment}, {s.paper.figure}")
        rows.append(f"| {head} | `{r.claim}` | {_paper_numbers(r, s.paper)} | {_ours(r)} | "
                    f"**{r.verdict}** | {_flags(r)} | {_seeds(r)} |")
    return rows


def _pending_rows(names: list[str], paper_dir: Path | None) -> list[str]:
    rows = []
    for name in names:
        paper = load_paper(name, paper_dir)
        rows.append(f"| {name} | {paper.experiment}, {paper.figure} | "
                    f"{', '.join(f'`{c}`' for c in paper.claims)} | | not yet run: "
                    f"`nvfp4-lab run +ablation={name} +scale=lab` | **pending** | | |")
    return rows


def _sweeps(results: Path, names: tuple[str, ...], paper_dir) -> tuple[list[Sweep], list[str]]:
    published = [n for n in names if SweepDir.read(results / n) is not None]
    return ([load_sweep(results / n, paper_dir) for n in published],
            [n for n in names if n not in published])


def _v2_tables(results: Path, paper_dir) -> dict[Table, list[Sweep]]:
    """One table per design-v2 folder (each is one model: its own comparison classes)."""
    folders = sorted(p.parent for p in (results / V2).glob(f"*/{MULTIRUN}"))
    return {Table(V2, f.name): [load_sweep(f, paper_dir)] for f in folders}


def _scale_rows(sweeps: list[Sweep], link_root: str = "") -> list[str]:
    return [f"| [{s.name}]({link_root}{s.name}/report.md) | {scale_text(s.runs)} | {s.machine} | "
            f"`{SweepDir.read(s.folder).command}` |" for s in sweeps]


def _machines_md(tables: dict[Table, list[Sweep]], results: dict[Table, list[ClaimResult]]
                 ) -> str:
    """Claims tested in more than one sweep, with the machine class of each: where the classes
    differ, so do the float sums, and a gap is not comparable bit for bit."""
    by_name = _by_name(tables)
    seen: dict[str, list[tuple[Table, ClaimResult]]] = {}
    for t, rs in results.items():
        for r in rs:
            if r.test is not None:
                seen.setdefault(str(r.claim), []).append((t, r))
    lines = []
    for claim, where in seen.items():
        if len(where) < 2:
            continue
        labels = [by_name[(t, r.sweep)].machine for t, r in where]
        cells = "; ".join(f"{source(t.design, r.sweep)} ({m}): {signed(r.test.mean)}"
                          for (t, r), m in zip(where, labels))
        lines.append(f"| `{claim}` | {cells} | {machines.agreement(labels)} |")
    return ("| claim | where it was tested (machine class): mean claim gap "
            f"{CLAIM_GAP}, % ({CLAIM_CONVENTION}) | machine classes |"
            "\n|---|---|---|\n"
            + "\n".join(lines)) if lines else ""


FOREST_CAPTION = (
    "Every claim with an interval, each computation once (a claim repeated through another "
    "ablation, or replaced by a larger sweep, is not drawn again): the paper's, its size "
    "claims (marked size) and the lab's own (marked ours), whatever their verdict, counted "
    f"or not. Our claim gap {CLAIM_GAP} with its own 95% interval ({CLAIM_CONVENTION}), "
    "the paper's gap (diamond) where it gives both numbers, coloured by verdict; below a "
    "format claim, the paper's gap carried to the lab's regime (dotted, its 95% interval: "
    "results/preregistration.md, amendment 9).")
_KIND_MARK = {"paper": "", "size": " (size)", "ours": " (ours)"}


def forest_table(tested: dict[Table, list[ClaimResult]]) -> pd.DataFrame:
    """The headline figure's data: every claim with an interval, of every kind and verdict,
    each computation once (``FOREST_CAPTION``), by table."""
    rows = [{"label": f"{source(t.design, r.sweep)}: {r.claim}{_KIND_MARK[r.claim.kind]}",
             "mean": r.test.mean, "lo": r.test.lo, "hi": r.test.hi, "verdict": r.verdict,
             "paper_gap": math.nan if r.paper_gap is None else r.paper_gap,
             "carried_lo": math.nan if r.carried is None else r.carried.lo,
             "carried_hi": math.nan if r.carried is None else r.carried.hi}
            for t, rs in tested.items() for r in rs
            if r.test is not None and not r.duplicate_of and not r.superseded_by]
    return pd.DataFrame(rows, columns=["label", "mean", "lo", "hi", "verdict", "paper_gap",
                                       "carried_lo", "carried_hi"])


def _by_name(tables: dict[Table, list[Sweep]]) -> dict[tuple[Table, str], Sweep]:
    """(table, sweep name) -> the sweep, as ClaimResults name them."""
    return {(t, s.name): s for t, ss in tables.items() for s in ss}


def claims_table(tables: dict[Table, list[Sweep]], by_metric: dict[str, dict[Table, list]],
                 current: list[tuple[Sweep, ClaimResult]]) -> pd.DataFrame:
    """Every tested claim as data (``results/claims.csv``), on each metric it was tested on:
    its interval and spread, Holm and BH, whether it is one of the lab's counted answers, the
    sweep's machine and scale, the sweep superseding it, the one it is counted in, the claim
    whose runs it repeats, its verdict under design v2's earlier rule."""
    sweeps = _by_name(tables)
    answers = {id(r) for _, r in current}
    rows = [{"table": t.design, "sweep": r.sweep, "claim": str(r.claim), "metric": metric,
             "kind": r.claim.kind, "n": r.n, "mean": r.test.mean, "sd": r.test.sd,
             "lo": r.test.lo, "hi": r.test.hi, "verdict": r.verdict, "p_holm": r.p_holm,
             "p_bh": r.p_bh, "current": id(r) in answers,
             "seeds_fresh": fresh_seeds(r) if r.test else None,
             "seeds_target": target_text(r) if r.test else None,
             "machine": sweeps[(t, r.sweep)].machine,
             "scale": scale_text(sweeps[(t, r.sweep)].runs),
             "model": models_text(sweeps[(t, r.sweep)].runs),
             "superseded_by": r.superseded_by or None, "counted_in": r.counted_in or None,
             "same_runs_as": r.duplicate_of or None,
             "verdict_v2_rule": r.verdict_v2_rule or None,
             "verdict_amendment8": r.verdict_amendment8 or None, "size": r.size or None,
             **_carried_columns(r.carried), "gap_convention": GAP_COLUMN}
            for metric, tested in by_metric.items()
            for t, rs in tested.items() for r in rs if r.test is not None]
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


# each row says its sign: the CSV travels without the page that names it
GAP_COLUMN = (f"mean, lo, hi, carried_*: claim gap {CLAIM_GAP}, {CLAIM_CONVENTION} (since "
              f"{CLAIM_SIGN_CHANGED}; before, (a - b) / a)")


def _carried_columns(c: carry.Carried | None) -> dict:
    if c is None:
        return {"carried_gap": None, "carried_lo": None, "carried_hi": None,
                "carried_regime": None}
    return {"carried_gap": c.gap, "carried_lo": c.lo, "carried_hi": c.hi,
            "carried_regime": f"{c.regime}; {c.laws}"}


def index_markdown(results: Path, paper_dir: Path | None = None) -> str:
    """The whole ``results/README.md``; writes ``figures/forest.png`` and ``claims.csv`` (and
    the package's copy of it, for the checkout's own results/) on the way. Fresh seeds are
    costed on the class of the newest published run (``machines.newest``)."""
    ablations, pending = _sweeps(results, ABLATIONS, paper_dir)
    beyond, beyond_pending = _sweeps(results, BEYOND_PAPER, paper_dir)
    v2 = _v2_tables(results, paper_dir)
    tables = {V1: ablations, BEYOND: beyond, **v2}
    laws = carry.read_laws(results / "scaling", results / "steps_vs_size")
    by_metric = {PRIMARY: _tested(tables, v2, results, PRIMARY, laws),
                 **{m: _tested(v2, v2, results, m, laws)
                    for m in METRICS if m != PRIMARY and v2}}
    tested = by_metric[PRIMARY]
    current = counted_answers(tables, tested, [V1, *v2])
    machine_class = machines.newest(s.runs for t in tables.values() for s in t)
    figures.save(paper_figures.forest_figure(forest_table(tested)), results / "figures",
                 "forest", pdf=False)
    data = claims_table(tables, by_metric, current)
    write_claims(results, data)
    if (results / "discussion.md").is_file():
        page = results / "discussion.md"
        page.write_text(discussion.refresh(page.read_text(), data))
    sections = [
        "# Results: the paper's findings at lab scale",
        found_md(current, results),
        _summary_md(len(ablations), tested, v2, current),
        "![forest](figures/forest.png)\n\n" + FOREST_CAPTION,
        _findings_md(ablations, tested[V1], pending, paper_dir),
        _beyond_md(beyond, tested[BEYOND], beyond_pending, paper_dir),
        _v2_md(v2, by_metric),
        to_buy_md(current, machine_class) if machine_class else "",
        rule_md(by_metric),
        "## The same claim in several sweeps\n\n" + _machines_md(tables, tested),
        _scale_md(ablations + beyond, v2),
        *(_study_md(results / name, name) for name in STUDIES if (results / name).exists()),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"


def _tested(tables: dict[Table, list[Sweep]], v2: dict[Table, list[Sweep]], results: Path,
            metric: str, laws: carry.Laws | None) -> dict[Table, list[ClaimResult]]:
    """Every claim of ``tables`` on ``metric``: tested, superseded claims marked, each paper
    finding counted in its owner, beside its verdicts under the earlier rules, with what it
    says on the paper's size (``claims.carried``)."""
    tested = supersede(evaluate(tables, metric), v2)
    return carried(tables, earlier(owners(tables, tested), results, metric), laws)


def found_md(current: list[tuple[Sweep, ClaimResult]], results: Path) -> str:
    """The page's first screen: the lab's current answer to each of the paper's claims, by
    verdict, and where the rest of the story is told."""
    by_verdict = {w: [f"`{s.name}: {r.claim}`" for s, r in current if r.verdict == w]
                  for w in v.VERDICTS}
    lines = [f"- **{w}** ({len(names)}): {', '.join(names)}"
             for w, names in by_verdict.items() if names]
    sizes = {w: [f"`{s.name}: {r.claim}`" for s, r in current if r.size == w]
             for w in carry.SIZE_WORDS}
    size_lines = [f"- *{w}* ({len(names)}): {', '.join(names)}"
                  for w, names in sizes.items() if names]
    pages = [f"[{title}]({name})" for name, title in PAGES if (results / name).exists()]
    return ("## What the lab found\n\n"
            f"The paper's findings that the lab's scale can test, each counted once, in the "
            f"sweep that owns it (its own ablation's, at the latest design: the "
            f"pre-registered design v2 where it ran, else v1; final validation loss), "
            f"{len(current)} in all:\n\n" + "\n".join(lines) + "\n\n"
            + ("On the paper's size (amendment 9: the paper's gap carried to the lab's regime "
               "where its law applies):\n\n" + "\n".join(size_lines) + "\n\n"
               if size_lines else "")
            + "Every claim's numbers are in [claims.csv](claims.csv) and in the tables below. "
            + (f"The rest is told in its own pages: {', '.join(pages)}." if pages else ""))


def _summary_md(published: int, tested: dict[Table, list[ClaimResult]],
                v2: dict[Table, list[Sweep]],
                current: list[tuple[Sweep, ClaimResult]]) -> str:
    """The page's opening: what is published and the verdicts counted each way."""
    v1_flat = tested[V1]
    flat = [r for rs in tested.values() for r in rs]
    return (
        "Generated by `nvfp4-lab plot --index` from the runs in this folder; edit "
        "`preregistration.md` and `discussion.md`, not this file. "
        f"{published} of {len(ABLATIONS)} ablations published. The paper's findings, each "
        f"counted once, in the sweep that owns it ({len(current)} testable): "
        f"{tally([r for _, r in current])}. Design v1's sweeps own "
        f"{sum(r.counted for r in v1_flat)}: {tally(v1_flat)}; its size claims: "
        f"{tally(v1_flat, 'size')}; ours: {tally(v1_flat, 'ours')}. "
        + "".join(f"Design {t}: {_design_tally(tested[t])}. " for t in v2)
        + "The counts are per-claim verdicts; Holm (family-wise 5% over all "
        f"{sum(r.test is not None for r in flat)} tested claims of this page) says which "
        "survive testing them all at once, and Benjamini-Hochberg (false discovery rate 5%) "
        "which survive a looser correction.")


def _findings_md(ablations: list[Sweep], tested: list[ClaimResult], pending: list[str],
                 paper_dir: Path | None) -> str:
    """Design v1's table: every claim of the paper's ablations, the pending ones listed."""
    return (
        "## Findings (design v1: 3 seeds, final validation loss)\n\n"
        "Each claim is one finding of the paper over our arms: `a < b` means a ends with the "
        "lower loss, `a ~ b` no difference. Ours: the paired gap of b against a, "
        f"{CLAIM_GAP} per seed ({CLAIM_CONVENTION}, as `a < b` claims; for a claim whose a "
        "is the baseline, the gap to the baseline), mean and the claim's own 95% t interval. "
        f"Pages published before {CLAIM_SIGN_CHANGED} wrote the claim gap (a - b) / a x 100, "
        "the opposite sign. Verdicts (`analysis/inference/verdicts.py`): *reproduced*, "
        "*contradicted*, "
        f"*equivalent* (a `~` claim whose 90% interval lies inside ±{v.MARGIN_PCT}%, TOST at "
        "5%), *not resolved*, *not testable* (bit-identical arms). " + SIZE_RULE + " The "
        "margin was fixed before the nulls ran; it "
        f"is wider than the smallest differences the paper draws ({_smallest_gaps(paper_dir)}), "
        f"so an "
        f"*equivalent* rules out a difference of {v.MARGIN_PCT}% of the loss, not one of the "
        "size the paper reports. Fresh seeds for 80%: the paired seeds a two-sided 5% test "
        "needs, from the claim's own spread, at the paper's gap carried to the sweep's regime "
        "where it is carried, else at the margin, or for TOST to pass when the true gap is 0 "
        "(amendment 10); never at the gap just observed.\n\n"
        + TABLE_HEAD + "\n" + "\n".join(_rows(ablations, tested)
                                          + _pending_rows(pending, paper_dir)))


SIZE_RULE = (
    "On the paper's size (notes; results/preregistration.md, amendment 9, "
    "`analysis/laws/carry.py`): "
    "a gap between BF16 and a whole FP4 recipe, or two such recipes, is carried from the "
    "paper's run to the sweep's regime by the gap's law, and the claim's interval reads "
    f"*{carry.SMALLER}*, *{carry.LARGER}* or *{carry.AS_CARRIED}* against the carried 95% "
    "interval (the law's bootstrap; " + carry.CORPUS + "). Components, techniques and "
    f"placements, which the law was never fitted on, read *{carry.NOT_COMPARABLE}*. Until "
    "amendment 9, a direction claim whose interval held 0 and lay below the paper's raw gap "
    "read *rules out the paper's size*; those verdicts stay visible in the notes and in "
    "[claims.csv](claims.csv) (`verdict_amendment8`).")


def _smallest_gaps(paper_dir: Path | None, k: int = 5) -> str:
    """The ``k`` smallest gaps the paper's direction claims draw, from its claim files."""
    gaps = sorted((abs(g), f"{p.experiment} `{c}`") for p in load_all(paper_dir).values()
                  for c in p.claims if c.kind == "paper" and not c.same
                  and (g := p.gap(c)) is not None)
    return ", ".join(f"{g:.2f}% ({name})" for g, name in gaps[:k])


def _beyond_md(beyond: list[Sweep], tested: list[ClaimResult], pending: list[str],
               paper_dir: Path | None) -> str:
    """The published recipes' own claims, tested over our arms like the paper's."""
    return (
        "## Beyond the paper: the published FP4 recipes on equal terms\n\n"
        "Each source's claim, tested over our arms as above; the sources measured at their own "
        "scales against their own baselines (nvfp4_lab/paper/<sweep>.yaml names them). "
        f"{len(beyond)} of {len(BEYOND_PAPER)} published; claims: {tally(tested)}."
        "\n\n" + TABLE_HEAD + "\n"
        + "\n".join(_rows(beyond, tested) + _pending_rows(pending, paper_dir)))


def _scale_md(sweeps: list[Sweep], v2: dict[Table, list[Sweep]]) -> str:
    """Each published sweep's scale, machine and the command that re-runs it."""
    rows = _scale_rows(sweeps) + _scale_rows([s for ss in v2.values() for s in ss], f"{V2}/")
    return ("## Scale, machine and command of each published sweep\n\n| sweep | scale | "
            "machine class (as recorded, else machine_classes.csv) | re-run (from its "
            "multirun.yaml) |\n"
            "|---|---|---|---|\n" + ("\n".join(rows) or "| none yet | | | |"))


def _design_tally(tested: list[ClaimResult]) -> str:
    """A v2 table's verdicts, or the sweeps answering its claims where others do."""
    by = sorted({r.superseded_by for r in tested if r.superseded_by})
    if by and not any(r.test is not None and not r.superseded_by for r in tested):
        return f"superseded by {', '.join(by)}, not counted"
    gone = [f"; superseded by {o}: {sum(r.superseded_by == o for r in tested)}" for o in by]
    elsewhere = sorted({r.counted_in for r in tested if r.counted_in})
    return tally(tested) + "".join(gone) + "".join(
        f"; counted in {o}: {sum(r.counted_in == o for r in tested)}" for o in elsewhere)


def _v2_md(v2: dict[Table, list[Sweep]], by_metric: dict[str, dict[Table, list[ClaimResult]]]
           ) -> str:
    """The design-v2 tables: the primary metric's verdicts (Holm over the whole page), then
    the paper's metric's (Holm over v2's claims); a superseded sweep's rows say so."""
    if not v2:
        return ""
    parts = ["## Design v2: fresh paired seeds, pre-registered (results/preregistration.md)"]
    for metric, words in METRICS.items():
        rows = [row for t, ss in v2.items() for row in _rows(ss, by_metric[metric][t], f"{V2}/")]
        parts.append(f"### {words} ({'primary' if metric == PRIMARY else 'secondary'})"
                     "\n\n" + TABLE_HEAD + "\n" + "\n".join(rows))
    return "\n\n".join(parts)


def _study_md(folder: Path, link: str) -> str:
    section = {"steps_vs_size": steps_vs_size_report.index_md}.get(link, scaling_report.index_md)
    parts = section(folder, link)
    return "\n\n".join(map(markdown, parts))


def write_index(results: Path, paper_dir: Path | None = None) -> Path:
    """Write ``results/README.md`` (and its forest figure); returns its path."""
    out = results / "README.md"
    out.write_text(index_markdown(results, paper_dir))
    return out
