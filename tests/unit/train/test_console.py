"""What a run prints: Lightning's lines once each, through the run's handlers, no advert."""
from __future__ import annotations

import subprocess
import sys

# A job's start as the CLI makes it: Hydra's job logging from the packaged config, then the
# task's imports (Lightning's among them), then the task's Trainer, with a rich bar.
JOB = """
import sys
from pathlib import Path
from hydra.core.utils import configure_log
from omegaconf import OmegaConf
from nvfp4_lab.configs import conf_dir

out = Path(sys.argv[1])
cfg = OmegaConf.load(conf_dir() / "config.yaml")
OmegaConf.update(cfg, "hydra.runtime.output_dir", str(out))
OmegaConf.update(cfg, "hydra.job.name", "cli")
configure_log(cfg.hydra.job_logging)

from nvfp4_lab.train.schema import Progress, TrainConfig, TrainerConfig
from nvfp4_lab.train.task import _trainer

_trainer(TrainerConfig(progress=Progress.rich), TrainConfig(), out, 4, 256, False, None, [])
"""


def test_lightnings_lines_show_once_and_its_advert_not_at_all(tmp_path):
    job = subprocess.run([sys.executable, "-c", JOB, str(tmp_path)], capture_output=True,
                         text=True, timeout=300)
    assert job.returncode == 0, job.stderr
    shown = job.stdout + job.stderr
    log = (tmp_path / "cli.log").read_text()
    for line in ("GPU available: False, used: False", "TPU available: False"):
        assert shown.count(line) == 1, shown
        assert log.count(line) == 1, log
    for advert in ("💡", "litlogger", "litmodels"):
        assert advert not in shown + log, shown + log
