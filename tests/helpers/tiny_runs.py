"""For the lm-eval tests: tiny trained runs with a checkpoint (a 2-block ``w32`` on bytes, two
steps, in-process) and a multiple-choice task of our own on a local JSON file."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers.runs import fast


def train_tiny(root: Path, quant: str) -> Path:
    """A finished run of recipe ``quant`` (reference backend) at ``root / quant``."""
    from hydra import compose, initialize_config_dir

    from nvfp4_lab.config.schema import register
    from nvfp4_lab.configs import conf_dir
    from nvfp4_lab.train.task import train

    register()
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=[*fast(root, steps=2), f"quant={quant}", "model=w32",
                                           "model.n_layers=2", "quant.backend=reference"])
    assert train(cfg, root / quant).status == "done"
    return root / quant


TASK = "toy_choice"


def write_choice_task(folder: Path, docs: list[dict[str, Any]]) -> Path:
    """``TASK``: ``docs`` ({q, choices, gold}) as a local JSON dataset and its task YAML in
    ``folder`` (for ``TaskManager(include_path=folder)``)."""
    (folder / "docs.jsonl").write_text("\n".join(map(json.dumps, docs)) + "\n")
    (folder / "toy.yaml").write_text(
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {folder / 'docs.jsonl'}\ntest_split: test\n"
        "output_type: multiple_choice\ndoc_to_text: '{{q}}'\ndoc_to_target: gold\n"
        "doc_to_choice: '{{choices}}'\nmetric_list:\n  - metric: acc\n")
    return folder
