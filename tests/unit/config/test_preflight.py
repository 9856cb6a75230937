"""The command-line check before Hydra starts: one line with the key, the value and the fix."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from helpers.shard_writers import write_llmc
from hydra.core.override_parser.overrides_parser import OverridesParser

from nvfp4_lab.config.preflight import _trials, check
from nvfp4_lab.configs import conf_dir


@pytest.mark.parametrize("argv, expected", [
    (["model.d_modle=64"], "no key model.d_modle (model.d_modle=64); did you mean model.d_model?"),
    (["quant.rht.sise=4"], "did you mean quant.rht.size? quant.rht has: gemms, size, signs, seed"),
    (["nonsense=1"], "no key nonsense (nonsense=1); the top level has: seed, name,"),
    (["train.max_steps=-3"], "train.max_steps=-3 must be >= 1"),
    (["quant.rht.size=3"], "quant.rht.size=3 must be a power of two in 2..256"),
    (["quant.switch.at=0.5"], "quant.switch.at=0.5: quant.switch.at is no longer a recipe key; "
                              "set quant.switch.at_step"),
    # a group that is added, not in the defaults: its + is missing
    (["ablation=rht_size"], "ablation=rht_size: the group ablation is not in the defaults, so "
                            "it is added with a +: write +ablation=rht_size"),
    (["scale=lab"], "write +scale=lab"),
    (["tokens_per_step=t512"], "write +tokens_per_step=t512"),
    # an option that is no file of its group, a number included (Hydra: a traceback)
    (["+tokens_per_step=512"], "no config tokens_per_step/512 (+tokens_per_step=512); the "
                               "options of tokens_per_step: t2048, t512, t8192"),
    (["-m", "quant=bf16,3"], "no config quant/3 (quant=bf16,3); the options of quant: bf16,"),
    (["model=[nano,7]"], "no config model/7 (model=[nano,7])"),
    # a sweep without -m (Hydra: five lines and exit 1); an ablation's sweep needs none
    (["seed=0,1"], "seed=0,1 is a sweep: add -m to run one job per value, or sweep with an "
                   "ablation (+ablation=NAME)"),
    (["quant=nvfp5"], "no config quant/nvfp5 (quant=nvfp5); the options of quant: bf16, fp8,"),
    (["train.schedule=linear"], "train.schedule=linear: Invalid value 'linear', expected one of"),
    (["data=textdir"], "data.source=textdir needs data.path"),
    (["-m", "seed=0,1", "launcher=joblib", "hydra.launcher.n_jobs=0"],
     "hydra.launcher.n_jobs=0 runs no job at once"),
    # a sweep: the bad value is the second of its key, the other key swept too
    (["-m", "quant=bf16,nvfp5", "seed=0,1"], "no config quant/nvfp5"),
    (["-m", "seed=0,1", "train.max_steps=10,0"], "train.max_steps=0 must be >= 1"),
    # every refused value of a sweep, in one line
    (["-m", "train.max_steps=-3,0,5"],
     "train.max_steps=-3 must be >= 1; train.max_steps=0 must be >= 1"),
    # a model the recipe cannot quantize: Quartet II's 128-point RHT on 96-wide layers
    (["quant=quartet_ii", "model.d_model=96", "model.n_heads=3", "model.n_kv_heads=3"],
     "layer blocks.0.attn.qkv: RHT on dgrad needs out_features (288) to be a multiple of "
     "rht.size (128); set quant.rht.size"),
    # ... found in one arm of an ablation, which the line names
    (["+ablation=recipes", "model.d_model=96", "model.n_heads=3", "model.n_kv_heads=3"],
     "arm quartet_ii: layer blocks.0.attn.qkv: RHT on dgrad"),
    (["quant=nvfp4", "model.d_model=72", "model.n_heads=4", "model.n_kv_heads=4"],
     "in_features=72 is not a multiple of the nvfp4 block (16)"),
    # a micro-batch (batch x sequence on each rank) that the Wgrad RHT cannot cut into chunks
    (["quant=nvfp4", "train.batch_size=1", "train.seq_len=6"],
     "train.batch_size=1 x train.seq_len=6 = 6 tokens a micro-batch, not a multiple of "
     "quant.rht.size=16 (the Hadamard transform on Wgrad works on whole chunks of 16 tokens); "
     "use train.batch_size=8, or a train.seq_len or quant.rht.size that makes the product a "
     "multiple"),
    (["-m", "quant.rht.size=16,32", "train.batch_size=3", "train.seq_len=16"],
     "train.batch_size=3 x train.seq_len=16 = 48 tokens a micro-batch, not a multiple of "
     "quant.rht.size=32 (the Hadamard transform on Wgrad works on whole chunks of 32 tokens); "
     "use train.batch_size=4,"),
    (["model=hybrid_nano", "model.n_layers=5"],
     "model.n_layers=5 but model.pattern has 7 blocks; set model.n_layers=7"),
    # a multi-device trainer in a sweep: every DDP worker would re-run the whole sweep
    (["-m", "trainer=ddp", "seed=0,1"], "trainer.devices=auto inside a sweep"),
    (["+ablation=formats", "trainer=ddp"], "trainer.devices=auto inside a sweep"),
    # a branch whose switch step is the run's last: round(0.99 * 50) = 50 of 50
    (["+ablation=precision_switch_v2", "train.max_steps=50"],
     "arm switch_both_0.99: branch_from='nvfp4': the switch step 50 leaves nothing to branch"),
    # Hydra reads 2e9 as a float, which an int key refuses: the fix is its digits
    (["train.max_tokens=2e9"], "train.max_tokens=2e9: Value '2000000000.0' of type 'float' "
                               "could not be converted to Integer: write it as a whole number, "
                               "2000000000"),
])
def test_mistakes_get_one_line_naming_the_fix(argv, expected):
    problem = check(argv)
    assert problem is not None and expected in problem and "\n" not in problem


@pytest.mark.parametrize("argv", [["model.d_modle=64"], ["train.max_steps=-3"],
                                  ["+ablation=formats_v2", "quant.format=nvfp5"],
                                  ["-m", "trainer=ddp", "seed=0,1"]])
def test_a_refused_config_is_reported_before_torch_or_lightning_loads(argv):
    """The mistakes a config can show are found with neither imported (about 2 s and 4 s of
    a cold start on the 2-core box): the answer comes in well under a second."""
    out = _check_alone(argv)
    assert out[0] != "None" and out[-1] == "[]", out


def test_a_micro_batch_the_wgrad_rht_cannot_cut_is_refused_without_lightning():
    """Found on the model built on the meta device (torch), before Lightning loads."""
    out = _check_alone(["quant=nvfp4", "train.batch_size=1", "train.seq_len=6"])
    assert out[0].startswith("train.batch_size=1 x train.seq_len=6") and out[-1] == "['torch']"


def _check_alone(argv: list[str]) -> list[str]:
    """The check's answer in a fresh interpreter, then which of torch and Lightning it
    imported."""
    code = ("import sys\n"
            "from nvfp4_lab.config.preflight import check\n"
            f"print(check({argv!r}))\n"
            "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.splitlines()


@pytest.mark.parametrize("argv", [
    [], ["+ablation=formats", "+scale=lab"], ["-m", "quant=bf16,nvfp4", "seed=0,1,2"],
    ["+ablation=smoke", "seed=3,4"], ["+tokens_per_step=t512"],
    ["+ablation=recipes"], ["quant=quartet_ii", "quant.rht.size=32", "model=micro"],
    ["hydra.sweep.dir=/tmp/x", "model=micro", "train.max_tokens=1000"],
    # a micro-batch no RHT chunk divides, where no Wgrad RHT runs: no layer quantized, or
    # every GEMM in high precision from the first step
    ["quant=nvfp4", "model.n_layers=2", "quant.high_precision.last=2", "train.batch_size=1",
     "train.seq_len=6"],
    ["quant=nvfp4", "quant.switch.at_step=0", "train.batch_size=1", "train.seq_len=6"],
])
def test_valid_command_lines_pass(argv):
    assert check(argv) is None


def test_what_only_the_training_machine_knows_is_asked_when_the_jobs_train_here(tmp_path):
    """A data folder and a CUDA device are checked unless SLURM trains the jobs elsewhere (a
    login node composes a sweep for GPU nodes whose paths it may not see)."""
    import torch

    missing = ["data=bin", f"data.path={tmp_path / 'prepared'}"]
    assert check(missing) == f"data.path='{tmp_path / 'prepared'}' is not a folder"
    assert check(["data=textdir", f"data.path={tmp_path / 'texts'}"]) == \
        f"data.path='{tmp_path / 'texts'}' is not a folder"
    assert check([*missing, "launcher=submitit"]) is None
    (tmp_path / "prepared").mkdir()
    assert check(missing) is None
    if not torch.cuda.is_available():
        assert check(["trainer=gpu"]).startswith(
            "trainer.accelerator=gpu: this machine has no CUDA device (torch ")
        assert check(["trainer=gpu", "launcher=submitit"]) is None


def test_the_compiled_backend_under_an_older_torch_is_refused_before_a_run(monkeypatch):
    import torch

    from nvfp4_lab.quant import packaged

    if packaged.torch_checked():
        assert check(["quant.backend=compiled"]) is None
    monkeypatch.setattr(packaged, "MIN_TORCH", "99.0")
    assert check(["quant.backend=compiled"]) == (
        f"quant.backend=compiled needs torch >= 99.0, here {torch.__version__}, whose inductor "
        f"is not bit-exact on every quantizer (quant/packaged.py); use quant.backend=auto or "
        f"reference")
    assert check(["quant.backend=auto"]) is None
    assert check(["quant.backend=compiled", "launcher=submitit"]) is None  # nodes' torch


# smoke fixes a 2-block depth, a transformer's; steps_vs_size sizes its runs in tokens per
# parameter, which a hybrid's count does not give (it refuses, naming train.max_tokens)
@pytest.mark.parametrize("ablation", sorted(p.stem for p in (conf_dir() / "ablation").glob(
    "*.yaml") if p.stem not in ("smoke", "steps_vs_size")))
def test_every_ablation_arm_fits_the_hybrid(ablation):
    """Each arm of each ablation quantizes hybrid_nano's layers (in_proj padded to 128 rows:
    FP8's 128x128 tiles, RHT 128 on Dgrad): preflight builds and converts it per arm."""
    assert check([f"+ablation={ablation}", "model=hybrid_nano"]) is None


def test_each_swept_value_is_tried_once_with_the_others_at_their_first():
    parsed = OverridesParser.create().parse_overrides(["a=1,2,3", "b=x", "c=range(2)"])
    assert _trials(parsed) == [["a=1", "b=x", "c=0"], ["a=2", "b=x", "c=0"],
                               ["a=3", "b=x", "c=0"], ["a=1", "b=x", "c=1"]]


def test_dry_run_expansion_follows_the_ablation_then_the_command_line(tmp_path, monkeypatch):
    """The ablation's swept keys first, in its order; a key the command line sweeps too takes
    the command line's values in the ablation's place; a new swept key comes last."""
    from hydra import initialize_config_dir

    from nvfp4_lab.config.schema import register
    from nvfp4_lab.configs import conf_dir
    from nvfp4_lab.sweep.preview import job_overrides, preview

    monkeypatch.setenv("NVFP4_LAB_CACHE", str(tmp_path))      # an empty timing ledger
    register()
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        jobs, parallel, _ = job_overrides(["+ablation=smoke", "seed=7,8", "-m",
                                           "model.lr=1e-3,2e-3"])
    assert parallel == 1 and len(jobs) == 8
    assert [j[:2] for j in jobs[:4]] == [["quant=bf16", "seed=7"], ["quant=bf16", "seed=7"],
                                         ["quant=bf16", "seed=8"], ["quant=bf16", "seed=8"]]
    assert [j[-1] for j in jobs[:2]] == ["model.lr=0.001", "model.lr=0.002"]
    text = preview(["+ablation=smoke"]).text
    assert text.startswith("4 jobs, 1 at a time") and "never run here" not in text
    # nothing ran here: each job says it is a first estimate, and from what
    assert text.count("; estimate from the step times shipped for x86_64 ") == 4


def test_dry_run_columns_line_up_under_their_heads_however_long_the_jobs(tmp_path,
                                                                         monkeypatch):
    from nvfp4_lab.sweep.preview import preview

    monkeypatch.setenv("NVFP4_LAB_CACHE", str(tmp_path))
    lines = preview(["+ablation=smoke", "train.tokens_per_param=2,5", "train.lr=1e-3,2e-3",
                     "-m"]).text.splitlines()
    head, jobs = lines[1], lines[2:18]
    assert max(len(line.split("  ")[2]) for line in jobs) > 44      # longer than the old column
    steps, estimate = head.index("steps") + len("steps"), head.index("estimate")
    for line in jobs:
        assert line[steps - 1].isdigit() and line[steps:estimate] == "  ", (head, line)


def test_dry_run_of_a_sweep_marks_the_jobs_its_directory_holds_done(tmp_path, monkeypatch):
    """Job 1 is there and done with this config: skipped, out of the total. Job 2 is there
    done with another config (the task would refuse it) and job 3 unfinished: both still run."""
    from hydra import compose, initialize_config_dir

    from nvfp4_lab import rundir
    from nvfp4_lab.config.schema import apply_arm, register
    from nvfp4_lab.configs import conf_dir
    from nvfp4_lab.sweep.preview import job_overrides, preview

    monkeypatch.setenv("NVFP4_LAB_CACHE", str(tmp_path / "cache"))
    sweep = tmp_path / "sweep"
    argv = ["+ablation=smoke", f"hydra.sweep.dir={sweep}"]
    register()
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        jobs, _, where = job_overrides(argv)
        cfgs = [apply_arm(compose("config", overrides=o)) for o in jobs]
    assert where == sweep and len(jobs) == 4
    for num, status, chash in [(1, "done", rundir.config_hash(cfgs[1], world=1)),
                               (2, "done", "another"), (3, "running", None)]:
        run = sweep / f"{num}_quant=x" / f"seed={cfgs[num].seed}"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({
            "status": status, "quant": "x", "seed": cfgs[num].seed, "model": "nano",
            "max_steps": 4, "tokens_per_step": 256, "config_hash": chash or "h"}))
    lines = preview(argv).text.splitlines()
    assert lines[0].endswith(f"; 1 already done in {sweep}")
    assert [("done: skipped" in line) for line in lines[2:6]] == [False, True, False, False]
    assert lines[6].startswith("total ~") and lines[6].endswith(
        "an estimate: 3 never ran on this machine, counted from the step times shipped with "
        "the package")


@pytest.mark.parametrize("model, repeated", [("nano", True), ("small", False)])
def test_arms_that_train_the_same_thing_are_warned_about(model, repeated, capsys):
    """components' fewer_bf16_blocks keeps the last 10% of blocks in BF16, full the last 20%:
    on nano's 5 blocks both are the last block, on small's 10 they are 1 and 2 blocks."""
    assert check(["+ablation=components", f"model={model}", "seed=0,1"]) is None
    err = capsys.readouterr().err
    warning = "warning: arm fewer_bf16_blocks trains exactly what arm full does"
    assert (warning in err) == repeated, err
    assert err.count("warning:") == int(repeated)     # once, though two seeds were tried


def test_dry_run_of_an_ablation_prints_the_seeds_its_published_claims_need(tmp_path,
                                                                            monkeypatch):
    """formats: one line per published row of its claims not superseded by a larger sweep, on
    the verdicts' metric, with the seeds of the shipped table (the index's results/claims.csv);
    no cost without measured step times."""
    from nvfp4_lab.analysis.findings.context import shipped
    from nvfp4_lab.cli import dry_run_text

    monkeypatch.setenv("NVFP4_LAB_CACHE", str(tmp_path))      # an empty timing ledger
    text = dry_run_text(["+ablation=formats", "seed=0"])
    plan = text.split("fresh seeds for 80% power, from the published results")[1].split(":\n")[1]
    rows = shipped()
    rows = rows[rows["claim"].isin(["bf16 < nvfp4", "nvfp4 < mxfp4", "fp8 < nvfp4",
                                    "bf16 < fp8"]) & rows["superseded_by"].isna()
                & (rows["metric"] == "final_val_loss")]
    assert len(plan.splitlines()) == len(rows) and "h here" not in plan
    for r in rows.itertuples():      # what the claim says on the paper's size, when it does
        size = f"; on the paper's size: {r.size}" if isinstance(r.size, str) else ""
        target = (f"paper's, carried {r.carried_gap:+.2f}" if not math.isnan(r.carried_gap)
                  else "margin +0.5")            # amendment 10: never the measured gap
        assert (f"`{r.claim}` ({r.table} {r.sweep}, {r.n} seeds, {r.verdict}{size}): "
                f"{int(r.seeds_fresh)} fresh, {target}") in plan
    # the two claims whose paper gives a gap say something on its size; fp8 has no number
    assert set(rows.loc[rows["size"].notna(), "claim"]) == {"bf16 < nvfp4", "nvfp4 < mxfp4"}


def test_dry_run_gives_a_null_the_seeds_for_tost(tmp_path, monkeypatch):
    from nvfp4_lab.analysis.findings.context import shipped
    from nvfp4_lab.cli import dry_run_text

    monkeypatch.setenv("NVFP4_LAB_CACHE", str(tmp_path))
    plan = dry_run_text(["+ablation=rht_signs", "seed=0"]).split("the margin):\n")[1]
    rows = shipped()
    r = rows[(rows["sweep"] == "rht_signs") & (rows["claim"] == "none ~ fixed")].iloc[0]
    assert f"`none ~ fixed` (v1 rht_signs, {r.n} seeds, {r.verdict}): {int(r.seeds_fresh)} " \
           "fresh, TOST ±0.5" in plan


def test_the_dry_run_imports_no_lightning(tmp_path):
    """--dry-run composes, expands and estimates; training code stays unloaded."""
    code = ("import sys\n"
            "from nvfp4_lab.sweep.preview import preview\n"
            "print(preview(['+ablation=smoke']).text.splitlines()[0])\n"
            "print(sorted(m for m in ('lightning',) if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=tmp_path).stdout.splitlines()
    assert out[0].startswith("4 jobs") and out[-1] == "[]", out


def test_shards_are_checked_by_header_before_torch_loads(tmp_path):
    """A truncated shard among several is named in one line by the check, which reads
    headers and sizes only and imports neither torch nor Lightning; intact shards pass."""
    for name, n in (("fineweb_train_000001.bin", 3000), ("fineweb_train_000002.bin", 2000),
                    ("fineweb_val_000000.bin", 1000)):
        write_llmc(tmp_path / name, range(n))
    argv = ["data=shards", f"data.path={tmp_path}", "data.vocab_size=512"]
    assert check([*argv, "data.val=fineweb_val_*.bin"]) is None
    bad = tmp_path / "fineweb_train_000002.bin"
    bad.write_bytes(bad.read_bytes()[:-2])
    out = _check_alone(argv)
    assert out[0].startswith(f"{bad}: 5022 bytes, but its header says 2000 tokens of 2 "
                             "bytes (5024 bytes): the file is truncated")
    assert out[1:] == ["[]"]


def test_a_dry_run_notes_what_only_the_training_machine_can_answer(tmp_path, capsys):
    """A dry run trains nothing: a missing data folder, and no CUDA device for a GPU job, are
    notes on stderr, each once over a sweep's values, not refusals; the run itself is refused
    on the first of them."""
    import torch

    folder = tmp_path / "prepared"
    argv = ["data=bin", f"data.path={folder}", "-m", "seed=0,1"]
    assert check(argv, dry_run=True) is None
    note = f"nvfp4-lab: note: data.path='{folder}' is not a folder (a run would stop here; " \
           "the dry run goes on)\n"
    assert capsys.readouterr().err == note
    assert check(argv) == f"data.path='{folder}' is not a folder"
    if not torch.cuda.is_available():
        assert check([*argv, "trainer=gpu"], dry_run=True) is None
        err = capsys.readouterr().err
        assert err.startswith(note) and err.count("\n") == 2
        assert "note: trainer.accelerator=gpu: this machine has no CUDA device" in err
        assert check([*argv, "trainer=gpu"]) == f"data.path='{folder}' is not a folder"
