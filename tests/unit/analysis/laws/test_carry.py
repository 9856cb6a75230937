"""analysis.laws.carry: the paper's gap carried to the lab's regime by a law written here as a
product of powers, by hand; which claims are carried; the size words; a sweep's regime."""
import dataclasses

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.laws import law

from nvfp4_lab.analysis.inference.verdicts import GapTest
from nvfp4_lab.analysis.laws import carry
from nvfp4_lab.analysis.laws import steps_law as sl
from nvfp4_lab.analysis.sources.paper import Claim
from nvfp4_lab.configs import paper_dir

LAB = carry.Regime(740_000, 1_230_000, 2048)
PAPER_8B = (8e9, 1e12, 768 * 8192)          # the paper's 8B run: N, D, tokens a step


def _power_law(coef, at, paper) -> float:
    """L(at) / L(paper) for g = k (D/N)^a N^b S^c, S = D / B (c absent for law A)."""
    (n, d, b), (n_p, d_p, b_p) = at, paper
    ratio = ((d / n) / (d_p / n_p)) ** coef[1] * (n / n_p) ** coef[2]
    return ratio * ((d / b) / (d_p / b_p)) ** coef[3] if len(coef) == 4 else ratio


def _paper_gap(label: str) -> float:
    """The paper's 8B gap to BF16 (%, positive = worse), from its file: it prints -gap."""
    return -yaml.safe_load((paper_dir() / "formats.yaml").read_text())["values"][label]


S_COEF, S_DRAWS = (-3.0, 0.5, -0.3, -0.2), [(-3.0, 0.4, -0.2, -0.1), (-2.0, 0.6, -0.4, -0.3),
                                            (-3.5, 0.5, 0.1, -0.5), (-2.5, 0.3, -0.3, 0.0)]
A_COEF, A_DRAWS = (-1.0, 0.3, -0.1), [(-1.0, 0.2, -0.2), (-1.1, 0.4, 0.0), (-0.9, 0.3, -0.1)]
LAWS = carry.Laws({"nvfp4": law("S", S_COEF, S_DRAWS), "mxfp4": law("A", A_COEF, A_DRAWS)},
                  sl.LawReading("S", "chosen"))
AT = (LAB.params, LAB.tokens, LAB.tokens_per_step)


def test_a_gap_to_bf16_is_carried_by_the_product_of_powers_at_each_refit():
    c = carry.carry(LAWS, Claim("bf16", "nvfp4"), "formats", LAB)
    g = _paper_gap("nvfp4")
    per_draw = [g * _power_law(d, AT, PAPER_8B) for d in S_DRAWS]
    assert c.paper_gap == pytest.approx(g, rel=1e-12)
    assert c.gap == pytest.approx(g * _power_law(S_COEF, AT, PAPER_8B), rel=1e-9)
    assert (c.lo, c.hi) == pytest.approx(tuple(np.percentile(per_draw, [2.5, 97.5])), rel=1e-9)
    assert c.regime == LAB and c.laws == "nvfp4 by law S"


def test_two_recipes_are_carried_side_by_side_each_by_its_own_law():
    c = carry.carry(LAWS, Claim("nvfp4", "mxfp4"), "formats", LAB)
    nv, mx = _paper_gap("nvfp4"), _paper_gap("mxfp4")

    def claim_gap(g_nv: float, g_mx: float) -> float:
        return ((1 + g_mx / 100) / (1 + g_nv / 100) - 1) * 100

    assert c.paper_gap == pytest.approx(claim_gap(nv, mx), rel=1e-12)
    assert c.gap == pytest.approx(claim_gap(nv * _power_law(S_COEF, AT, PAPER_8B),
                                            mx * _power_law(A_COEF, AT, PAPER_8B)), rel=1e-9)
    pairs = [claim_gap(nv * _power_law(s, AT, PAPER_8B), mx * _power_law(a, AT, PAPER_8B))
             for s, a in zip(S_DRAWS, A_DRAWS)]       # refit i beside refit i, 3 of them
    assert (c.lo, c.hi) == pytest.approx(tuple(np.percentile(pairs, [2.5, 97.5])), rel=1e-9)
    assert c.laws == "nvfp4 by law S and mxfp4 by law A"


def test_the_1_2b_run_carries_its_full_recipe_from_its_own_regime():
    c = carry.carry(LAWS, Claim("bf16", "4_plus_sr"), "cumulative", LAB)
    g = -yaml.safe_load((paper_dir() / "cumulative.yaml").read_text())["values"]["4_plus_sr"]
    assert c.gap == pytest.approx(g * _power_law(S_COEF, AT, (1.2e9, 1e12, 768 * 8192)),
                                  rel=1e-9)


@pytest.mark.parametrize("ablation, claim, pair", [
    ("formats", Claim("bf16", "nvfp4"), ("bf16", "nvfp4")),
    ("formats", Claim("nvfp4", "mxfp4"), ("nvfp4", "mxfp4")),
    ("formats", Claim("fp8", "nvfp4"), None),              # FP8's gap was never fitted
    ("formats", Claim("bf16", "nvfp4", same=True), None),
    ("cumulative", Claim("bf16", "4_plus_sr"), ("bf16", "nvfp4")),
    ("cumulative", Claim("2_plus_2d", "1_last_bf16"), None),   # a component
    ("components", Claim("full", "without_rht"), None),
    ("consistency", Claim("bf16", "weights_1d_dot_dim"), None),
])
def test_only_format_claims_of_the_papers_runs_are_carried(ablation, claim, pair):
    assert carry.format_pair(claim, ablation) == pair


def test_a_claim_that_is_not_a_format_claim_is_refused():
    with pytest.raises(ValueError, match="not a format claim"):
        carry.carry(LAWS, Claim("full", "without_rht"), "components", LAB)


@pytest.mark.parametrize("mean, half, word", [
    (0.1, 0.2, carry.SMALLER), (3.0, 0.5, carry.LARGER), (1.0, 0.5, carry.AS_CARRIED),
    (0.75, 0.1, carry.AS_CARRIED), (0.6, 0.1, carry.SMALLER),
])
def test_the_size_word_sets_the_labs_interval_against_the_carried_one(mean, half, word):
    c = carry.Carried(1.5, 1.0, 0.8, 2.0, LAB, "nvfp4 by law A")
    test = GapTest(3, mean, 1.0)
    test = dataclasses.replace(test, sd=half / test.half)        # an interval mean +- half
    assert (test.lo, test.hi) == pytest.approx((mean - half, mean + half))
    assert c.word(test) == word


def test_a_sweeps_regime_is_its_two_arms_median_size_tokens_and_tokens_a_step():
    runs = pd.DataFrame({"label": ["bf16", "nvfp4", "nvfp4", "fp8"],
                         "params": [100.0, 100.0, 100.0, 999.0],
                         "tokens": [4096.0, 4096.0, 8192.0, 1.0],
                         "steps": [2.0, 2.0, 2.0, 1.0]})
    r = carry.regime_of(runs, Claim("bf16", "nvfp4"))
    assert (r.params, r.tokens, r.tokens_per_step) == (100.0, 4096.0, 2048.0)
    assert str(r) == "N 0.0001M, 41 tokens a parameter, 2,048 tokens a step"


def test_no_law_is_read_without_both_folders(tmp_path):
    (tmp_path / "scaling").mkdir()
    (tmp_path / "scaling" / "multirun.yaml").write_text("name: scaling\n")
    assert carry.read_laws(tmp_path / "scaling", tmp_path / "steps_vs_size") is None
