"""Composing ``conf/`` in-process (the fast offline settings: ``helpers.runs.fast``)."""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from nvfp4_lab.config.schema import register
from nvfp4_lab.configs import conf_dir


@pytest.fixture
def composer():
    register()

    def _compose(overrides: list[str]):
        with initialize_config_dir(str(conf_dir()), version_base="1.3"):
            return compose("config", overrides=overrides)
    return _compose
