"""What a run prints: Lightning's lines once each, through the run's handlers, no advert,
and every line where the terminal's stdout points at the time."""
from __future__ import annotations

import subprocess
import sys

import pytest

# A job's start as the CLI makes it: Hydra's job logging from the packaged config, then the
# task's imports (Lightning's among them), then the task's Trainer, with a rich bar. Then a
# line said while stdout is swapped, as a rich bar swaps it to print lines above itself.
JOB = """
import contextlib, io, sys
from pathlib import Path
from hydra.core.utils import configure_log
from omegaconf import OmegaConf
from nvfp4_lab.configs import conf_dir

out = Path(sys.argv[1])
cfg = OmegaConf.load(conf_dir() / "config.yaml")
OmegaConf.update(cfg, "hydra.runtime.output_dir", str(out))
OmegaConf.update(cfg, "hydra.job.name", "cli")
configure_log(cfg.hydra.job_logging)

from nvfp4_lab.console import say
from nvfp4_lab.config.schema import Progress, TrainConfig, TrainerConfig
from nvfp4_lab.train.task import _trainer

_trainer(TrainerConfig(progress=Progress.rich), TrainConfig(), out, 4, 256, False, None, [], [])
bar = io.StringIO()
with contextlib.redirect_stdout(bar):
    say("a line while the bar shows")
print("the bar's stdout got:", repr(bar.getvalue()))
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("job")
    done = subprocess.run([sys.executable, "-c", JOB, str(out)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done, (out / "cli.log").read_text()


def test_lightnings_lines_show_once_and_its_advert_not_at_all(job):
    done, log = job
    shown = done.stdout + done.stderr
    for line in ("GPU available: False, used: False", "TPU available: False"):
        assert shown.count(line) == 1, shown
        assert log.count(line) == 1, log
    for advert in ("💡", "litlogger", "litmodels"):
        assert advert not in shown + log, shown + log


def test_a_line_goes_to_stdout_as_it_is_when_said(job):
    """Written past a rich bar's stdout, a line is drawn over by the bar's next redraw."""
    done, log = job
    assert "the bar's stdout got: 'a line while the bar shows\\n'" in done.stdout, done.stdout
    assert "a line while the bar shows" in log
