"""The command line's own answers, in process: a mistake in an override gets one line naming
the key, the value and the fix, exit status 2, and nothing written (the dry run and the run
alike, both answered by the command-line check before Hydra starts)."""
from __future__ import annotations

import pytest

from nvfp4_lab.cli import main

GROUP = ("no config tokens_per_step/512 (+tokens_per_step=512); the options of "
         "tokens_per_step: t2048, t512, t8192")


@pytest.mark.parametrize("argv, says", [
    (["run", "+tokens_per_step=512", "--dry-run"], GROUP),     # Hydra: "must be a string"
    (["run", "+tokens_per_step=512"], GROUP),
    (["run", "seed=0,1"], "seed=0,1 is a sweep: add -m to run one job per value, or sweep "
                          "with an ablation (+ablation=NAME)"),
    (["run", "ablation=rht_size", "--dry-run"],
     "ablation=rht_size: the group ablation is not in the defaults, so it is added with a +: "
     "write +ablation=rht_size"),
    (["run", "quant.rht.size=3"], "quant.rht.size=3 must be a power of two in 2..256"),
])
def test_a_mistake_gets_one_line_exit_2_and_nothing_written(argv, says, capsys, tmp_path,
                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert capsys.readouterr().err == f"nvfp4-lab: {says}\n"
    assert not any(tmp_path.iterdir())
