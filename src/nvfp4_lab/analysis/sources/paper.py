"""The paper's reported numbers, stored as data: one ``nvfp4_lab/paper/<ablation>.yaml`` per
ablation.

Each file holds, for one ``conf/ablation/<ablation>.yaml``, what arXiv 2509.25149v1 reported for
the experiment that ablation reproduces (docs/experiments.md, ids E01-E12): the figure, the scale,
the metric, the paper's conclusion, the ordering it found (best first) and its number for each
of OUR labels (quant preset, arm name or swept value, as a string). Labels the paper did not
run are omitted; arms that diverged in the paper carry an ``outcomes`` entry instead of a value.

How the numbers were read (docs/experiments.md, Reading the numbers): ``source: read`` means the
number is in the text, a table or a caption; ``plot≈`` means it was read off a figure by eye
(about ±0.05 points on relative-difference plots, ±0.002 on loss plots). Gap metrics are
stored as the paper prints them, ``(ref - exp) / ref * 100`` (negative: higher loss than the
reference), and turned around once, here, as they are read: a ``PaperResult``'s gaps are the
lab's ``(exp - ref) / ref * 100``, positive = worse (``stats.paired_gaps``). ``reference`` is
the label of our sweep that the report compares the others against.
``baseline`` is the label of OUR sweep the numbers are relative to, or null when they are
absolute or relative to a run we do not have (FP8 at 12B, BF16 where the sweep has no bf16 arm;
``notes`` says which). An ``ordering`` of null means the paper reports no difference at the
scale nearest ours.

``claims`` are the paper's findings as tests our runs can pass or fail, one string each:
``"a < b"`` (a ends with the lower loss) or ``"a ~ b"`` (no difference), over our labels, taken
from the finding, the ordering and the outcomes (an arm that diverged in the paper is worse than
any that converged). ``sizes`` are claims about the size of an effect (an exchange rate), tested
the same way and counted apart; ``ours`` are the lab's own comparisons, which the paper does not
make. ``inferred`` holds a number the paper implies only across figures (label -> value, the
notes say how), shown as inferred. ``counted_in`` maps a claim of the file that another file
states first to that one (``"bf16 < 4_plus_sr": "formats: bf16 < nvfp4"``): one finding of the
paper, counted once, in the sweep that owns it (``answers.owners``). ``analysis.claims`` gives
each claim a verdict.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ...configs import paper_dir

METRICS = ("train_loss_gap_pct", "val_loss_gap_pct", "val_loss", "train_loss", "token_multiplier")
GAP_METRICS = ("train_loss_gap_pct", "val_loss_gap_pct")
ABSOLUTE_METRICS = ("val_loss", "train_loss")
SOURCES = ("read", "plot≈")
REQUIRED = ("experiment", "figure", "scale", "metric", "baseline", "reference", "axis", "finding",
            "ordering", "values", "source", "claims")
_CLAIM = re.compile(r"^\s*(?P<a>\S+)\s+(?P<op>[<~])\s+(?P<b>\S+)\s*$")
OPTIONAL = ("outcomes", "notes", "sizes", "ours", "inferred", "counted_in")
_FINDING = re.compile(r"^\w+: \S+ [<~] \S+$")   # "ablation: a < b"
KINDS = ("paper", "size", "ours")       # a claim of the paper, about a size, of the lab


@dataclass(frozen=True)
class Claim:
    """One finding of the paper: ``better`` ends with a lower loss than ``worse``, or, when
    ``same``, the two do not differ."""

    better: str
    worse: str
    same: bool = False
    kind: str = "paper"

    def __str__(self) -> str:
        return f"{self.better} {'~' if self.same else '<'} {self.worse}"


@dataclass(frozen=True)
class PaperResult:
    """What the paper reported for one ablation (the fields of its
    ``nvfp4_lab/paper/<ablation>.yaml``)."""

    ablation: str                      # the file's stem, = the conf/ablation name
    experiment: str                    # docs/experiments.md id(s), e.g. "E01/E03"
    figure: str                        # e.g. "Fig. 6a"
    scale: str                         # the paper's model and token count, for captions
    metric: str                        # one of METRICS
    baseline: str | None               # our label the values are relative to; None: absolute
    reference: str                     # our label the report compares the others against
    axis: str                          # the swept key: quant | arm | quant.rht.size | ...
    finding: str
    ordering: list[str] | None         # our labels, best (lowest loss) first; None: no difference
    values: dict[str, float]           # our label -> the paper's number (a gap: positive = worse)
    source: dict[str, str]             # our label -> "read" | "plot≈"
    claims: list[Claim]                # the findings our runs are checked against
    outcomes: dict[str, str] = field(default_factory=dict)   # label -> "converges" / "diverges.."
    notes: str = ""
    inferred: dict[str, float] = field(default_factory=dict)  # label -> value across figures
    counted_in: dict[str, str] = field(default_factory=dict)  # claim -> "ablation: claim"

    def stated(self, claim: Claim) -> str:
        """Where the paper's finding that ``claim`` tests is stated, "ablation: claim"."""
        return self.counted_in.get(str(claim), f"{self.ablation}: {claim}")

    def gap(self, claim: Claim) -> float | None:
        """The paper's gap for ``claim`` in our units, (b - a) / a x 100 of the loss, from its
        values (or inferred ones); None where it gives no number for one of the two. A gap
        g (positive = worse) relative to a reference R stands for the loss R (1 + g / 100)."""
        known = {**self.inferred, **self.values}
        if claim.better not in known or claim.worse not in known:
            return None
        a, b = known[claim.better], known[claim.worse]
        if self.metric in GAP_METRICS:
            a, b = 1 + a / 100, 1 + b / 100
        elif self.metric not in ABSOLUTE_METRICS:
            return None
        return (b - a) / a * 100


def _labels(path: Path, key: str, raw, kind: type) -> dict[str, object]:
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: key {key!r} must be a mapping of label -> {kind.__name__}")
    out = {}
    for label, value in raw.items():
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(value)) if kind is float else isinstance(value, str)
        if not ok:
            raise ValueError(f"{path}: key {key!r}: {label!r} -> {value!r} is not a "
                             f"{kind.__name__}")
        out[str(label)] = kind(value)
    return out


def _parse(path: Path) -> PaperResult:
    raw = yaml.safe_load(path.read_text())
    _check_keys(path, raw)
    metric = raw["metric"]
    values = _lab_sign(metric, _labels(path, "values", raw["values"], float))
    source = _labels(path, "source", raw["source"], str)
    outcomes = _labels(path, "outcomes", raw.get("outcomes") or {}, str)
    if set(source) != set(values) or any(s not in SOURCES for s in source.values()):
        raise ValueError(f"{path}: key 'source' must give one of {SOURCES} for exactly the "
                         f"labels of 'values'")
    claims = [*_claims(path, raw["claims"]), *_claims(path, raw.get("sizes") or [], "size"),
              *_claims(path, raw.get("ours") or [], "ours")]
    inferred = _lab_sign(metric, _labels(path, "inferred", raw.get("inferred") or {}, float))
    return PaperResult(path.stem, raw["experiment"], raw["figure"], raw["scale"], metric,
                       _baseline(path, raw["baseline"], metric, values), raw["reference"],
                       raw["axis"], raw["finding"], _ordering(path, raw["ordering"], values),
                       values, source, claims, outcomes, raw.get("notes") or "", inferred,
                       _counted_in(path, raw.get("counted_in") or {}, claims))


def _counted_in(path: Path, raw, claims: list[Claim]) -> dict[str, str]:
    """claim -> "ablation: claim" of the file that states it first; keys among the paper's
    claims of this file."""
    mine = {str(c) for c in claims if c.kind == "paper"}
    out = _labels(path, "counted_in", raw, str)
    for claim, finding in out.items():
        if claim not in mine or not _FINDING.match(finding):
            raise ValueError(f"{path}: key 'counted_in': {claim!r} -> {finding!r} must map one "
                             f"of this file's claims to 'ablation: a < b'")
    return out


def _lab_sign(metric: str, values: dict[str, float]) -> dict[str, float]:
    """A gap metric's values turned from the paper's sign (negative = worse) to the lab's
    (positive = worse); other metrics as they are."""
    if metric not in GAP_METRICS:
        return values
    return {label: 0.0 - value for label, value in values.items()}    # 0.0 - 0.0 is +0.0


def _check_keys(path: Path, raw: object) -> None:
    """The file's keys: none unknown, none required missing, the strings non-empty."""
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    for key in raw:
        if key not in REQUIRED + OPTIONAL:
            raise ValueError(f"{path}: unknown key {key!r} (allowed: "
                             f"{', '.join(REQUIRED + OPTIONAL)})")
    for key in REQUIRED:
        if key not in raw:
            raise ValueError(f"{path}: missing key {key!r}")
    for key in ("experiment", "figure", "scale", "metric", "reference", "axis", "finding"):
        if not isinstance(raw[key], str) or not raw[key]:
            raise ValueError(f"{path}: key {key!r} must be a non-empty string")
    if raw["metric"] not in METRICS:
        raise ValueError(f"{path}: key 'metric': unknown metric {raw['metric']!r} "
                         f"(one of {METRICS})")
    if not isinstance(raw.get("notes") or "", str):
        raise ValueError(f"{path}: key 'notes' must be a string")


def _baseline(path: Path, baseline: object, metric: str, values: dict[str, float]
              ) -> str | None:
    """The label the gaps are to; null for an absolute metric."""
    if baseline is None:
        return None
    if metric in ABSOLUTE_METRICS:
        raise ValueError(f"{path}: key 'baseline' must be null for the absolute {metric}")
    if metric in GAP_METRICS and values.get(str(baseline), 0.0) != 0.0:
        raise ValueError(f"{path}: key 'values': the baseline {baseline!r} has a nonzero gap")
    return str(baseline)


def _ordering(path: Path, ordering: object, values: dict[str, float]) -> list[str] | None:
    """The paper's order of the labels, best first, each label of ``values`` once."""
    if ordering is None:
        return None
    if not isinstance(ordering, list):
        raise ValueError(f"{path}: key 'ordering' must be a list of labels or null")
    order = [str(label) for label in ordering]
    if len(set(order)) != len(order) or set(order) != set(values):
        raise ValueError(f"{path}: key 'ordering' must list each label of 'values' once: "
                         f"missing {sorted(set(values) - set(order))}, extra or repeated "
                         f"{sorted(set(order) - set(values)) or order}")
    return order


def _claims(path: Path, raw, kind: str = "paper") -> list[Claim]:
    key = {"paper": "claims", "size": "sizes", "ours": "ours"}[kind]
    if not isinstance(raw, list) or (kind == "paper" and not raw):
        raise ValueError(f"{path}: key {key!r} must be a {'non-empty ' * (kind == 'paper')}"
                         f"list of 'a < b' or 'a ~ b'")
    out = []
    for item in raw:
        m = _CLAIM.match(str(item))
        if not m or m["a"] == m["b"]:
            raise ValueError(f"{path}: key {key!r}: {item!r} is not 'a < b' or 'a ~ b' over "
                             f"two different labels")
        out.append(Claim(m["a"], m["b"], same=m["op"] == "~", kind=kind))
    return out


def load_paper(ablation: str, directory: Path | str | None = None) -> PaperResult | None:
    """The paper's numbers for ``ablation``; None when ``directory`` (default: ``paper_dir()``)
    has no ``<ablation>.yaml``. A malformed file raises ValueError naming the file and key."""
    path = Path(directory if directory is not None else paper_dir()) / f"{ablation}.yaml"
    return _parse(path) if path.is_file() else None


def load_all(directory: Path | str | None = None) -> dict[str, PaperResult]:
    """Every paper file, by ablation name."""
    root = Path(directory if directory is not None else paper_dir())
    return {p.stem: _parse(p) for p in sorted(root.glob("*.yaml"))}


def paper_ordering_agrees(paper: PaperResult, ours: dict[str, float]) -> bool | None:
    """Whether our mean losses (label -> loss, lower is better) order the labels present in
    both as the paper did. Pairs the paper reports as tied (equal values) may come in either
    order, and equal losses of ours never contradict; a non-finite loss of ours (a diverged run)
    counts as the worst. None when the paper reports no ordering, fewer than 2 labels are
    common, or every common pair is tied in the paper."""
    if paper.ordering is None:
        return None
    common = [label for label in paper.ordering if label in ours]
    loss = {k: v if math.isfinite(v) else math.inf for k, v in ours.items()}
    compared = False
    for i, better in enumerate(common):
        for worse in common[i + 1:]:
            if paper.values.get(better) == paper.values.get(worse):
                continue
            compared = True
            if loss[better] > loss[worse]:
                return False
    return True if compared else None
