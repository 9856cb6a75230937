"""A raw sweep directory made from the committed results fixture, for the publishing tests."""
from __future__ import annotations

import shutil
from pathlib import Path

import yaml

FIXTURE = Path(__file__).parents[1] / "assets" / "results"


def make_sweep(tmp_path: Path, name: str = "formats",
               params: dict[str, str] | None = None) -> Path:
    """The fixture's formats runs as a raw sweep: plus checkpoints and event files, and the
    sweeper's ``params`` if given."""
    sweep = tmp_path / "sweep"
    shutil.copytree(FIXTURE / "formats", sweep)
    raw = yaml.safe_load((sweep / "multirun.yaml").read_text())
    if params:
        raw["hydra"]["sweeper"] = {"params": params}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({**raw, "name": name}))
    for run in sweep.glob("*/seed=*"):
        (run / "checkpoints").mkdir()
        (run / "checkpoints" / "last.ckpt").write_bytes(b"x" * 100)
        (run / "logs" / "tb").mkdir(parents=True)
        (run / "logs" / "tb" / "events.out").write_bytes(b"x")
    return sweep
