"""The command line, in process: a mistake in an override gets one line naming the key, the
value and the fix, exit status 2, and nothing written (the dry run and the run alike, both
answered by the command-line check before Hydra starts); and the console script's
process-wide settings."""
from __future__ import annotations

import warnings

import pytest
import torch.utils._pytree as torch_pytree
from helpers.shard_writers import write_llmc
from lightning.pytorch.utilities import _pytree as lightning_pytree

from nvfp4_lab import cli
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
    (["run", "trainer=cpu", "trainer.progress=fast"],        # the key, not its group
     "trainer.progress=fast: Invalid value 'fast', expected one of [auto, rich, plain, none]"),
])
def test_a_mistake_gets_one_line_exit_2_and_nothing_written(argv, says, capsys, tmp_path,
                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert capsys.readouterr().err == f"nvfp4-lab: {says}\n"
    assert not any(tmp_path.iterdir())


def test_shards_that_cannot_be_read_get_one_line_exit_2_and_nothing_written(capsys, tmp_path,
                                                                           monkeypatch):
    shards, out = tmp_path / "shards", tmp_path / "out"
    shards.mkdir()
    write_llmc(shards / "fineweb_train_000000.bin", range(1000))
    write_llmc(shards / "fineweb_val_000000.bin", range(300))
    monkeypatch.chdir(tmp_path)
    run = ["run", "data=shards", f"data.path={shards}", "data.vocab_size=512",
           f"output_root={out}"]
    assert main([*run, "data.val=val_*.bin"]) == 2
    assert capsys.readouterr().err == (
        f"nvfp4-lab: data.val='val_*.bin' matches no file in {shards}; give the pattern of "
        "the val shards' names, e.g. data.val='fineweb_val_*.bin'\n")
    (shards / "fineweb_val_000000.bin").write_bytes(b"\x01" * 2000)       # a foreign file
    assert main(run) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nvfp4-lab: {shards / 'fineweb_val_000000.bin'}: no header this "
                          "code knows") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards"]
    assert main(["prepare-data", "data=shards", f"data.path={shards}"]) == 2
    assert capsys.readouterr().err.startswith(
        f"nvfp4-lab: {shards / 'fineweb_val_000000.bin'}: no header this code knows")


def test_the_cli_silences_lightnings_leafspec_notice_and_nothing_else(capsys):
    """Lightning's pytree helper builds torch's deprecated ``LeafSpec`` on every logged step;
    once the command has started that notice is gone, while the same notice raised by any
    other code still shows."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["--version"]) == 0
        lightning_pytree._tree_flatten(1.0)     # a leaf: Lightning builds a LeafSpec
        torch_pytree.LeafSpec()                 # the same, from here
    notices = [w for w in caught if "LeafSpec" in str(w.message)]
    assert [w.filename for w in notices] == [__file__], [(w.filename, w.lineno) for w in notices]
    assert capsys.readouterr().out.startswith("nvfp4-lab ")


def test_a_launchers_worker_silences_the_notice_too():
    """A joblib or submitit worker runs ``_job`` without ``main``: the filter comes with the
    job."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        with pytest.raises(ValueError):        # no Hydra config here: the job stops at once
            cli._job(None)
        lightning_pytree._tree_flatten(1.0)
    assert not [w for w in caught if "LeafSpec" in str(w.message)]
