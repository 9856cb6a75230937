"""A trained run as a model that scores text: the weights of ``checkpoints/last.ckpt``, the
model and recipe of its ``config.yaml`` (``config.job.Job``, as the run built them), its
tokenizer, its context length, and the forward pass chosen (``downstream.Forward``).

``quantized`` converts the model as ``LMTask.configure_model`` does, with the quantization
state of the run's last step (its final validation's: a recipe that switches to BF16 late
scores with the switched plan); ``bf16`` keeps the same weights in plain ``nn.Linear``s. Both
run under the autocast of the run's ``trainer.precision`` (none for ``32-true``, the CPU
default). No lm-eval here: ``lm.py`` wraps this for the harness.
"""
from __future__ import annotations

import hashlib
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import OmegaConf

from .. import rundir
from ..config.job import Job
from ..data import ByteTokenizer, Tokenizer, load_prepared, load_tokenizer, prepared_dir
from ..data.config import DataConfig
from ..data.hf_prepare import MANIFEST, Manifest
from ..data.tokenizer import BPETokenizer, tokenizer_file
from ..downstream import Forward
from ..model import LanguageModel, build_model
from ..quant import QuantState, convert

CHECKPOINT = Path("checkpoints") / "last.ckpt"
AUTOCAST = {"bf16": torch.bfloat16, "16": torch.float16}   # trainer.precision's prefix


class EvalRefused(ValueError):
    """A run that cannot be scored, or a bad argument: one line naming it and the fix."""


@dataclass
class RunModel:
    """A run's model in eval mode, its tokenizer and its trained context."""

    model: LanguageModel
    tokenizer: Tokenizer
    context: int            # train.seq_len: the longest context the run trained on
    autocast: torch.dtype | None
    device: torch.device

    @classmethod
    def load(cls, run: Path, forward: Forward, device: str | None = None) -> RunModel:
        run = Path(run)
        if not (run / "config.yaml").exists() or not (run / CHECKPOINT).exists():
            raise EvalRefused(f"{run}: no config.yaml and {CHECKPOINT} to evaluate; give a "
                              "run directory that trained to a checkpoint")
        cfg = OmegaConf.load(run / "config.yaml")
        job = Job.of_arm(cfg)
        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        ckpt = torch.load(run / CHECKPOINT, map_location=dev, weights_only=False)
        model = build_model(job.sized_model()).to(dev)
        model.load_state_dict({k.removeprefix("model."): v
                               for k, v in ckpt["state_dict"].items()})
        step = int(ckpt["global_step"])
        if forward == Forward.quantized:
            convert(model, job.recipe, device=dev, state=QuantState(
                seed=int(cfg.seed), step=max(step - 1, 0), max_steps=job.max_steps))
        return cls(model.eval(), run_tokenizer(run, job.data), job.train.seq_len,
                   AUTOCAST.get(job.trainer.precision.split("-")[0]), dev)

    def logits(self, idx: torch.Tensor) -> torch.Tensor:
        """idx: [B, T] token ids -> next-token logits [B, T, V] in float32."""
        cast = torch.autocast(self.device.type, self.autocast) if self.autocast \
            else nullcontext()
        with torch.no_grad(), cast:
            return self.model(idx.to(self.device)).float()


def run_tokenizer(run: Path, data: DataConfig) -> Tokenizer:
    """The tokenizer the run trained with: bytes, or the BPE of its prepared data on this
    machine, which must be the data the run recorded (``summary.json``'s fingerprint)."""
    if data.tokenizer == "bytes" and data.source != "bin":
        return ByteTokenizer()
    if data.source == "shards":
        return shards_tokenizer(run, data)
    folder = prepared_dir(data)
    if not (folder / "meta.json").exists():
        raise EvalRefused(f"{run}: its tokenizer is in prepared data at {folder}, which is not "
                          "on this machine; prepare it (nvfp4-lab prepare-data with the run's "
                          "data= settings) and evaluate again")
    prepared = load_prepared(folder)
    summary = rundir.Summary.read(run)
    recorded = summary and summary.data_fingerprint
    if recorded and recorded != prepared.fingerprint:
        raise EvalRefused(f"{run}: the prepared data at {folder} is not the data the run "
                          "trained on (data fingerprint differs from summary.json's); "
                          "its tokenizer may differ too")
    return load_tokenizer(folder, prepared.meta)


def shards_tokenizer(run: Path, data: DataConfig) -> Tokenizer:
    """The tokenizer ``prepare-data`` wrote the run's shards with: the one their
    ``manifest.json`` names, if its file is the one recorded there (sha256). Shards written
    elsewhere (llm.c's, nanoGPT's) record none."""
    manifest = Manifest.read(Path(str(data.path)))
    if manifest is None:
        raise EvalRefused(f"{run}: data.source=shards: {data.path} holds no manifest.json of "
                          "nvfp4-lab prepare-data, and shards written elsewhere carry no "
                          "tokenizer the lab can load, so its text cannot be tokenized here")
    recipe = manifest.recipe
    path = tokenizer_file(recipe.tokenizer)     # FileNotFoundError: one line, from eval
    if hashlib.sha256(path.read_bytes()).hexdigest() != recipe.tokenizer_sha256:
        raise EvalRefused(f"{run}: {path} is not the tokenizer its shards were written with "
                          f"(its sha256 differs from {Path(str(data.path)) / MANIFEST}'s)")
    return BPETokenizer.load(path, eot=recipe.eot)
