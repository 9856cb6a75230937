"""``logger=wandb``: an offline run's W&B record holds the run's resolved config and its
summary; a run that cannot report to W&B is refused in one line before anything is written;
the default logs to CSV and TensorBoard only. The W&B record is read back from the offline
run's ``run-<id>.wandb`` file: LevelDB-log blocks of protobuf ``Record``s."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers.runs import fast
from omegaconf import OmegaConf

from nvfp4_lab.cli import main
from nvfp4_lab.config.schema import LoggerConfig, Refused
from nvfp4_lab.config.wandb_check import INSTALL, refusal
from nvfp4_lab.train.progress import SweepPosition
from nvfp4_lab.train.task import train

BLOCK = 32768        # the log's block size; a record's header is 7 bytes, as is the file's
FULL, LAST = 1, 4    # the chunk types that end a record


def wandb_records(path: Path) -> list:
    """The protobuf records of an offline W&B run file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, chunk, records = 7, b"", []
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:          # a block's tail too short for a header: padding
            pos += BLOCK - pos % BLOCK
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if kind == 0:
            break
        chunk += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (FULL, LAST):
            records.append(pb.Record.FromString(chunk))
            chunk = b""
    return records


def of_kind(records: list, kind: str) -> list:
    return [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]


@pytest.fixture
def wandb_home(tmp_path, monkeypatch):
    """W&B's own settings, cache and credentials under ``tmp_path``, none of this machine's."""
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_DIR",
                "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    for var, sub in (("WANDB_CONFIG_DIR", "config"), ("WANDB_CACHE_DIR", "cache"),
                     ("WANDB_DATA_DIR", "data")):
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.setenv("NETRC", str(home / "netrc"))
    return home


def test_an_offline_run_gives_wandb_its_config_and_summary(composer, tmp_path, wandb_home):
    wandb = pytest.importorskip("wandb")
    sweep = tmp_path / "sweeps" / "tiny" / "2026-12-07_06-00-00-000000"
    out = sweep / "0_quant=bf16" / "seed=0"
    cfg = composer([*fast(tmp_path, steps=2), "quant=bf16", "name=tiny", "logger=wandb",
                    "logger.mode=offline"])
    summary = train(cfg, out, multirun=True, position=SweepPosition(0, None, sweep))
    assert summary.status == "done", summary.error
    wandb.teardown()        # W&B's service process writes the file: let it write the rest
    [path] = (out / "logs" / "wandb").glob("offline-run-*/run-*.wandb")
    records = wandb_records(path)
    [run] = of_kind(records, "run")
    assert (run.project, run.display_name, run.run_group, list(run.tags)) == \
        ("nvfp4-lab", "0_quant=bf16/seed=0", f"tiny/{sweep.name}", ["tiny", "bf16"])
    config = {i.key: json.loads(i.value_json) for i in run.config.update if i.key != "_wandb"}
    assert config == OmegaConf.to_container(OmegaConf.load(out / "config.yaml"))
    assert config["train"]["max_steps"] == 2 and config["logger"]["mode"] == "offline"
    attached = {i.key: json.loads(i.value_json)
                for s in of_kind(records, "summary") for i in s.update if i.key}
    written = json.loads((out / "summary.json").read_text())
    assert {k: attached.get(k) for k in written} == written
    assert attached["final_train_loss"] == written["final_train_loss"] > 0
    assert attached["status"] == "done" and attached["tokens_per_second"] > 0
    assert [e.exit_code for e in of_kind(records, "exit")] == [0]


def test_a_sweep_directory_relative_to_the_working_directory_names_the_job(
        composer, tmp_path, wandb_home, monkeypatch):
    """Hydra gives a job its output directory absolute and the sweep's as configured,
    relative by default (outputs/sweeps/...): the W&B run is still named after the job."""
    wandb = pytest.importorskip("wandb")
    monkeypatch.chdir(tmp_path)
    sweep = Path("sweeps") / "tiny" / "2026-12-07_06-00-00-000000"
    out = tmp_path / sweep / "0_quant=bf16" / "seed=0"
    cfg = composer([*fast(tmp_path, steps=2), "quant=bf16", "name=tiny", "logger=wandb",
                    "logger.mode=offline"])
    summary = train(cfg, out, multirun=True, position=SweepPosition(0, None, sweep))
    assert summary.status == "done", summary.error
    wandb.teardown()
    [path] = (out / "logs" / "wandb").glob("offline-run-*/run-*.wandb")
    [run] = of_kind(wandb_records(path), "run")
    assert (run.display_name, run.run_group) == ("0_quant=bf16/seed=0", f"tiny/{sweep.name}")


def test_the_default_logs_to_csv_and_tensorboard_only(composer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)             # W&B would write ./wandb when given no directory
    out = tmp_path / "run"
    summary = train(composer([*fast(tmp_path, steps=2), "quant=bf16"]), out)
    assert summary.status == "done", summary.error
    assert (out / "logs" / "csv" / "version_0" / "metrics.csv").is_file()
    assert list((out / "logs" / "tb" / "version_0").glob("events.out.tfevents.*"))
    assert sorted(p.name for p in (out / "logs").iterdir()) == ["csv", "tb"]
    assert not [p for p in tmp_path.rglob("*wandb*")]


def test_without_the_extra_logger_wandb_is_refused_before_anything_is_written(
        composer, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)      # as if not installed
    monkeypatch.chdir(tmp_path)
    assert main(["run", *fast(tmp_path), "logger=wandb"]) == 2
    assert capsys.readouterr().err == \
        f"nvfp4-lab: logger=wandb needs the wandb package: {INSTALL}\n"
    assert not any(tmp_path.iterdir())
    # a run started without the command line's check (a launcher's job) is refused too
    with pytest.raises(Refused, match="pip install 'nvfp4-lab\\[wandb\\]'"):
        train(composer([*fast(tmp_path), "logger=wandb"]), tmp_path / "run")
    assert not any(tmp_path.iterdir())


def test_online_without_an_api_key_is_refused_up_front(wandb_home):
    pytest.importorskip("wandb")
    why = refusal(LoggerConfig(wandb=True, mode="online"))
    assert why is not None and why.startswith("logger.mode=online: no W&B API key")
    assert "logger.mode=offline" in why
    assert refusal(LoggerConfig(wandb=True, mode="offline")) is None


@pytest.mark.parametrize("key_in", ["environment", "netrc"])
def test_online_without_the_server_is_refused_up_front(key_in, wandb_home, monkeypatch):
    """W&B itself retries for about 90 seconds, then fails inside the run."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")    # nothing listens there
    if key_in == "environment":
        monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    else:
        wandb_home.mkdir()
        (wandb_home / "netrc").write_text(f"machine 127.0.0.1 login user password {'k' * 40}\n")
    why = refusal(LoggerConfig(wandb=True, mode="online"))
    assert why is not None
    assert why.startswith("logger.mode=online: the W&B server http://127.0.0.1:9 does not "
                          "answer (ConnectionError)")
