"""The numbers of ``results/discussion.md``, written from ``claims.csv`` and nowhere else, and
the claim intervals the pre-registration's status lines quote, checked against it.

The discussion is prose by hand; every number in it that a verdict rule can change is a
marked span the index rewrites from the claims table each time it is generated:

    <!--= v2 | formats_nano | bf16 < nvfp4 | gap -->-0.95%<!--/-->

names a row of ``claims.csv`` (table, sweep, claim; a fifth part picks another metric than
final validation loss) and a field of it (``FIELDS``); ``<!--= count | family -->`` and
``<!--= count | current | reproduced -->`` count rows. A marker that names no row,
or a row named twice, stops the generator with the marker's text. A span holds one line.

``unmarked`` lists what a verdict rule could change but sits outside a marker: a bracketed
interval, a Holm phrase or a count of claims, in the sections above ``DATED`` (the notes per
ablation, written when each sweep was published, keep the numbers of their day).

The pre-registration is written once and never regenerated; ``quoted_disagreements`` lists each
claim interval its status lines quote that ``claims.csv`` does not hold, or whose Holm phrase
the row's Holm and BH p-values contradict. A status line dated before ``CLAIM_SIGN_CHANGED``
quotes the claim gap of its day, (a - b) / a: it is read against the row's interval negated.
"""
from __future__ import annotations

import re
from collections.abc import Callable

import pandas as pd

from ..inference.stats import CLAIM_SIGN_CHANGED
from .claims import PRIMARY

DATED = "## Notes per ablation"
MARK = re.compile(r"<!--= (?P<key>[^>]*?) -->(?P<value>[^\n]*?)<!--/-->")
INTERVAL = re.compile(r"\[[+-]?\d+(?:\.\d+)?, [+-]?\d+(?:\.\d+)?\]")
HOLM = re.compile(r"surviv\w* (?:BH, not Holm|Holm|neither)|BH only", re.IGNORECASE)
COUNT = re.compile(r"\b\d+ claims\b")


class DiscussionError(ValueError):
    """A marker the claims table cannot fill."""


def _num(x: float) -> str:
    return f"{x:+.2f}"


def _holm(row: pd.Series) -> str:
    if row["p_holm"] < 0.05:
        return "survives Holm"
    return "BH only" if row["p_bh"] < 0.05 else "survives neither"


FIELDS: dict[str, Callable[[pd.Series], str]] = {
    "gap": lambda r: f"{_num(r['mean'])}%",                      # -1.00%
    "interval": lambda r: f"[{_num(r['lo'])}, {_num(r['hi'])}]",   # [-1.88, -0.13]
    "size": lambda r: f"{abs(r['mean']):.2f}%",                  # 1.00%: prose says which way
    "size_interval": lambda r: "[{:.2f}, {:.2f}]".format(*sorted((abs(r["lo"]), abs(r["hi"])))),
    "verdict": lambda r: str(r["verdict"]),
    "on_size": lambda r: str(r["size"]) if isinstance(r["size"], str) else "nothing said",
    "carried": lambda r: f"{_num(r['carried_gap'])}% [{_num(r['carried_lo'])}, "
                         f"{_num(r['carried_hi'])}]",
    "holm": _holm,
    "n": lambda r: str(int(r["n"])),
}


def _count(claims: pd.DataFrame, parts: list[str]) -> str:
    """``count | family``: the primary rows Holm runs over; ``count | current [| verdict]``:
    the lab's current answers (of one verdict); ``count | on_size | word``: the current
    answers that say ``word`` on the paper's size (``carry.SIZE_WORDS``)."""
    primary = claims[claims["metric"] == PRIMARY]
    current = primary[primary["current"].astype(bool)]
    if parts == ["family"]:
        return str(len(primary))
    if parts and parts[0] == "current" and len(parts) <= 2:
        return str(len(current) if len(parts) == 1 else (current["verdict"] == parts[1]).sum())
    if len(parts) == 2 and parts[0] == "on_size":
        return str((current["size"] == parts[1]).sum())
    raise DiscussionError(f"count | {' | '.join(parts)}: not a count (family, current "
                          "[| verdict], on_size | word)")


def _row(claims: pd.DataFrame, table: str, sweep: str, claim: str, metric: str) -> pd.Series:
    rows = claims[(claims["table"] == table) & (claims["sweep"] == sweep)
                  & (claims["claim"] == claim) & (claims["metric"] == metric)]
    if len(rows) != 1:
        raise DiscussionError(f"{table} | {sweep} | {claim} | {metric}: {len(rows)} rows of "
                              "claims.csv, one expected")
    return rows.iloc[0]


def value(key: str, claims: pd.DataFrame) -> str:
    """What the marker ``key`` reads in ``claims``."""
    parts = [p.strip() for p in key.split("|")]
    if parts[0] == "count":
        return _count(claims, parts[1:])
    if len(parts) not in (4, 5) or parts[3] not in FIELDS:
        raise DiscussionError(f"<!--= {key} -->: write table | sweep | claim | field "
                              f"[| metric], field one of {', '.join(FIELDS)}")
    table, sweep, claim, field = parts[:4]
    metric = parts[4] if len(parts) == 5 else PRIMARY
    return FIELDS[field](_row(claims, table, sweep, claim, metric))


def refresh(text: str, claims: pd.DataFrame) -> str:
    """``text`` with every marked span rewritten from ``claims``."""
    return MARK.sub(lambda m: f"<!--= {m['key']} -->{value(m['key'], claims)}<!--/-->", text)


def unmarked(text: str) -> list[str]:
    """Intervals, Holm phrases and claim counts outside a marker above ``DATED``: numbers
    nobody rewrites."""
    head = MARK.sub("", text.split(DATED, 1)[0])
    return [m.group(0) for pattern in (INTERVAL, HOLM, COUNT) for m in pattern.finditer(head)]


QUOTED = re.compile(r"(?P<pooled>pooled )?(?P<mean>[+-]?\d+\.\d\d) \[(?P<lo>[+-]?\d+\.\d\d), "
                    r"(?P<hi>[+-]?\d+\.\d\d)\](?P<after>[^.;(]{0,40})")
LAWS = "## Scaling study"      # from here on the status lines quote laws' fits, not claims
DATE = re.compile(r"Status (\d{4}-\d\d-\d\d)")


def quoted_disagreements(plan: str, claims: pd.DataFrame) -> list[str]:
    """The claim intervals that the pre-registration's status lines quote by hand (``m [lo,
    hi]``; an interval marked "pooled" is the earlier rule's and is left as written) that no
    row of ``claims`` holds, or whose Holm phrase the row's p-values contradict."""
    status = [p.replace("\n", " ") for p in re.split(r"\n\s*\n", plan.split(LAWS, 1)[0])
              if p.startswith("Status")]
    return [f"{m.group(0).strip()}: {why}" for p in status for m in QUOTED.finditer(p)
            if not m["pooled"] and (why := _disagrees(m, _as_quoted(p, claims)))]


def _as_quoted(status: str, claims: pd.DataFrame) -> pd.DataFrame:
    """``claims`` in the sign of the day ``status`` is dated: before ``CLAIM_SIGN_CHANGED``
    the claim gap was (a - b) / a, so mean, lo and hi are negated and lo and hi swapped."""
    date = DATE.match(status)
    if date is None or date[1] >= CLAIM_SIGN_CHANGED:
        return claims
    return claims.assign(mean=-claims["mean"], lo=-claims["hi"], hi=-claims["lo"])


def _disagrees(m: re.Match, claims: pd.DataFrame) -> str:
    rows = claims[(claims["mean"].round(2) == float(m["mean"]))
                  & (claims["lo"].round(2) == float(m["lo"]))
                  & (claims["hi"].round(2) == float(m["hi"]))]
    if rows.empty:
        return "no claim row has this interval"
    said = HOLM.search(m["after"])
    if said is None:
        return ""
    says = "BH only" if said.group(0).endswith("BH, not Holm") else said.group(0)
    return "" if any(_holm(r) == says for _, r in rows.iterrows()) else \
        f"says {said.group(0)!r}, claims.csv: {_holm(rows.iloc[0])}"
