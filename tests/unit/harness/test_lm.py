"""The ``nvfp4-lab`` lm-eval model on tiny trained runs, against log-likelihoods worked out
here from the training module's own logits (``LMTask``, its checkpoint loaded; not the
adapter's loading code): a multiple-choice task of our own through ``simple_evaluate``, a
rolling log-likelihood over several windows, and the two forward passes.

Tokens: the byte tokenizer, so a context and its continuation are their UTF-8 bytes and the
continuation is the harness's target delimiter " " and the choice."""
from __future__ import annotations

import pytest
import torch
from helpers.tiny_runs import TASK, train_tiny, write_choice_task
from omegaconf import OmegaConf

from nvfp4_lab.config.job import Job
from nvfp4_lab.quant import preset
from nvfp4_lab.train.module import LMTask

lm_eval = pytest.importorskip("lm_eval")
from lm_eval import simple_evaluate  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from nvfp4_lab.harness.lm import LabLM  # noqa: E402

SEQ = 64      # the runs' train.seq_len (helpers.runs.FAST)
DOCS = [{"q": "Help on module", "choices": ["os", "pydoc", "zzz"], "gold": 1},
        {"q": "def f(x): return", "choices": ["x", "import", "the"], "gold": 0},
        {"q": "The", "choices": ["class", "qqq"], "gold": 0},
        {"q": "Return the", "choices": ["value", "xyz", "!!", "of"], "gold": 3}]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two-step runs of a 2-block w32 model: nvfp4 (block 0 quantized) and bf16."""
    root = tmp_path_factory.mktemp("runs")
    for quant in ("nvfp4", "bf16"):
        train_tiny(root, quant)
    return root


def trained_logits(run, quantized: bool = True):
    """The run's LightningModule with its checkpoint: ids [T] -> log-probs [T, V]."""
    cfg = OmegaConf.load(run / "config.yaml")
    job = Job.of_arm(cfg)
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    task = LMTask(job.sized_model(), job.recipe if quantized else preset("bf16"), job.train,
                  seed=cfg.seed, max_steps=job.max_steps,
        tokens_per_step=job.tokens_per_step, bytes_per_token=None)
    task.configure_model()
    task.load_state_dict(ckpt["state_dict"])
    task.qstate.step = ckpt["global_step"] - 1

    def logp(ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return torch.log_softmax(task(torch.tensor([ids])).float(), -1)[0]
    return logp


def by_hand(logp, context: str, continuation: str) -> float:
    ids, n = list((context + continuation).encode()), len(continuation.encode())
    lp = logp(ids[:-1])
    return sum(float(lp[i - 1, ids[i]]) for i in range(len(ids) - n, len(ids)))


def test_accuracy_through_simple_evaluate_equals_the_hand_calculation(runs, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    manager = TaskManager(include_path=str(write_choice_task(tmp_path, DOCS)),
                          include_defaults=False)
    results = simple_evaluate(model="nvfp4-lab", model_args={"run": str(runs / "nvfp4")},
                              tasks=[TASK], task_manager=manager, log_samples=True)
    logp = trained_logits(runs / "nvfp4")
    hand = [[by_hand(logp, d["q"], " " + c) for c in d["choices"]] for d in DOCS]
    got = [[r[0] for r in s["filtered_resps"]] for s in results["samples"][TASK]]
    assert list(map(len, got)) == list(map(len, hand))
    assert sum(got, []) == pytest.approx(sum(hand, []), rel=1e-5)
    correct = [max(range(len(h)), key=h.__getitem__) == d["gold"] for h, d in zip(hand, DOCS)]
    assert results["results"][TASK]["acc,none"] == sum(correct) / len(DOCS)


def test_rolling_loglikelihood_sums_every_token_once_over_windows(runs):
    """A text of 150 bytes: the windows of seq_len 64 (eot + bytes 0..62 predicting 0..63;
    then the 64 bytes before each later window's last byte), as the harness documents."""
    text = ("Help on module pydoc: generate documentation from Python modules. " * 3)[:150]
    ids = list(text.encode())
    logp = trained_logits(runs / "nvfp4")
    total, end = 0.0, 0
    while end < len(ids):
        start, end = end, min(end + SEQ, len(ids))
        inputs = [0] + ids[:SEQ - 1] if start == 0 else ids[end - SEQ - 1:end - 1]
        lp = logp(inputs)
        total += sum(float(lp[len(inputs) - (end - i), ids[i]]) for i in range(start, end))
    lm = LabLM(str(runs / "nvfp4"))
    got = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    assert got == [pytest.approx(total, rel=1e-5)]


def choice_scores(run, forward: str, batch_size: int = 1) -> list[float]:
    lm = LabLM(str(run), forward=forward, batch_size=batch_size)
    requests = [Instance("loglikelihood", {}, (d["q"], " " + c), 0)
                for d in DOCS for c in d["choices"]]
    return [ll for ll, _ in lm.loglikelihood(requests, disable_tqdm=True)]


def test_bf16_forward_differs_from_quantized_only_where_something_is_quantized(runs):
    fp4, plain = choice_scores(runs / "nvfp4", "quantized"), choice_scores(runs / "nvfp4", "bf16")
    assert all(a != b for a, b in zip(fp4, plain))
    logp = trained_logits(runs / "nvfp4", quantized=False)
    assert plain == pytest.approx([by_hand(logp, d["q"], " " + c) for d in DOCS
                                   for c in d["choices"]], rel=1e-5)
    assert choice_scores(runs / "bf16", "quantized") == choice_scores(runs / "bf16", "bf16")


def test_a_batch_scores_as_single_requests_do(runs):
    """Right padding changes no earlier position (unquantized: no shared tensor scale)."""
    one = choice_scores(runs / "bf16", "bf16")
    assert choice_scores(runs / "bf16", "bf16", batch_size=5) == pytest.approx(one, rel=1e-5)
