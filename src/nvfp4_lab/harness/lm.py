"""A run's checkpoint as an lm-evaluation-harness model, registered as ``nvfp4-lab``:

    simple_evaluate(model="nvfp4-lab", model_args={"run": RUN_DIR, "forward": "quantized"},
                    tasks=["hellaswag"])

Importing this module needs the ``eval`` extra (``pip install 'nvfp4-lab[eval]'``).

Tokens. ``loglikelihood`` is the harness's own (``TemplateLM``): a context's trailing spaces
move to the continuation, then context + continuation is encoded whole and split after the
context's own encoding's length, the split the harness recommends for causal models (with the
byte tokenizer the two encodings agree exactly; with BPE a merge across the seam counts
towards the continuation). An empty context becomes the end-of-text token, which the lab
writes before every document. The window scored is the last ``train.seq_len + 1`` tokens of
context + continuation (truncated on the left: the context the run was trained with), and a
continuation longer than that context is refused.

``loglikelihood_rolling`` scores a text in the harness's disjoint windows
(``get_rolling_token_windows`` with one token of context, ``make_disjoint_window``): the first
window is the end-of-text token and the first ``seq_len - 1`` tokens, each later one the
``seq_len`` tokens before its last, every token predicted once. ``generate_until`` is not
supported: the lab scores, it does not sample.

Requests are scored ``batch_size`` at a time, longest first, padded on the right (causal:
padding changes no earlier position). Under a recipe with a per-tensor scale (NVFP4's FP32
amax) the sequences of one batch share that scale, as a training batch does, so a score
depends on its batch mates at the level of quantization noise; the default batch of 1 scores
each request on its own, independent of order.
"""
from __future__ import annotations

from pathlib import Path

import torch
from lm_eval import utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model

from ..downstream import Forward
from .checkpoint import RunModel

GENERATION = ("nvfp4-lab scores log-likelihoods and does not generate: choose multiple-choice "
              "or perplexity tasks, not generation (generate_until) ones")


@register_model("nvfp4-lab")
class LabLM(TemplateLM):
    """``run``: a run directory; ``forward``: quantized | bf16 (``downstream.Forward``)."""

    def __init__(self, run: str, forward: str = "quantized", batch_size: int | str = 1,
                 device: str | None = None):
        super().__init__()
        self.run = RunModel.load(Path(run), Forward(forward), device)
        self.batch_size = int(batch_size)

    @property
    def eot_token_id(self) -> int:
        return self.run.tokenizer.eot_id

    @property
    def max_length(self) -> int:
        return self.run.context

    def tok_encode(self, string: str, add_special_tokens: bool | None = None,
                   **kwargs) -> list[int]:
        return self.run.tokenizer.encode(string)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs
                              ) -> list[tuple[float, bool]]:
        """((context, continuation), context ids, continuation ids) -> (log p, greedy)."""
        return self._score([self._window(ctx, cont) for _, ctx, cont in requests])

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        out = []
        for (text,) in (r.args for r in requests):
            pairs = map(utils.make_disjoint_window, utils.get_rolling_token_windows(
                self.tok_encode(text), self.prefix_token_id, self.max_length, 1))
            out.append(sum(ll for ll, _ in self._score([self._window(*p) for p in pairs])))
        return out

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        raise NotImplementedError(GENERATION)

    def _window(self, context: list[int], continuation: list[int]) -> tuple[list[int], int]:
        """The tokens one forward pass sees plus the last target, and how many of the last
        targets are scored."""
        if len(continuation) > self.max_length:
            raise ValueError(f"a continuation of {len(continuation)} tokens is longer than "
                             f"the run's context of {self.max_length} (train.seq_len)")
        tokens = (context or [self.prefix_token_id]) + continuation
        return tokens[-(self.max_length + 1):], len(continuation)

    def _score(self, windows: list[tuple[list[int], int]]) -> list[tuple[float, bool]]:
        """Sum of the log-probabilities of each window's last n tokens, and whether each is
        the argmax; ``batch_size`` windows per forward pass, longest first."""
        order = sorted(range(len(windows)), key=lambda i: -len(windows[i][0]))
        out: list[tuple[float, bool]] = [(0.0, True)] * len(windows)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            width = len(windows[chunk[0]][0]) - 1
            x = torch.full((len(chunk), width), self.eot_token_id, dtype=torch.long)
            for row, i in enumerate(chunk):
                x[row, :len(windows[i][0]) - 1] = torch.tensor(windows[i][0][:-1])
            logp = torch.log_softmax(self.run.logits(x), dim=-1).cpu()
            for row, i in enumerate(chunk):
                tokens, n = windows[i]
                end = len(tokens) - 1
                lp, target = logp[row, end - n:end], torch.tensor(tokens[end + 1 - n:])
                out[i] = (float(lp.gather(-1, target[:, None]).sum()),
                          bool((lp.argmax(-1) == target).all()))
        return out
