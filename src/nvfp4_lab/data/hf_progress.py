"""How far ``prepare-data data=hf`` has come: tokens, tokens per second, time left.

On a terminal a rich bar (the library the training's bar uses), with the time left when
``data.max_tokens`` bounds the run; elsewhere (CI, a log file) one plain line every
``LINE_SECONDS``, where a redrawn bar would be noise. The rate counts this attempt only: a
resume starts from the tokens already written.
"""
from __future__ import annotations

import sys
import time

LINE_SECONDS = 30.0


class Progress:
    """``with Progress(total, start) as p: p.update(tokens)``; total None: unbounded."""

    def __init__(self, total: int | None, start: int):
        self.total, self.start, self.done = total, start, start
        self.t0 = self.last_line = time.monotonic()
        self.bar = None

    def __enter__(self) -> Progress:
        if sys.stderr.isatty():
            from rich import progress as rp

            self.bar = rp.Progress(rp.TextColumn("tokens {task.completed:,.0f}"),
                                   rp.BarColumn(), rp.TextColumn("{task.fields[rate]}"),
                                   rp.TimeElapsedColumn(), rp.TextColumn("left"),
                                   rp.TimeRemainingColumn())
            self.bar.start()
            self.task = self.bar.add_task("prepare", total=self.total, completed=self.start,
                                          rate="")
        return self

    def update(self, tokens: int) -> None:
        self.done = tokens
        if self.bar is not None:
            self.bar.update(self.task, completed=tokens, rate=f"{self.rate():,.0f} tok/s")
        elif time.monotonic() - self.last_line > LINE_SECONDS:
            self.last_line = time.monotonic()
            print(self.line(), file=sys.stderr, flush=True)

    def rate(self) -> float:
        """Tokens per second of this attempt."""
        return (self.done - self.start) / max(time.monotonic() - self.t0, 1e-9)

    def line(self) -> str:
        left = ""
        if self.total and self.rate() > 0:
            left = f", {max(self.total - self.done, 0) / self.rate() / 60:.1f} min left"
        return f"prepare-data: {self.done:,} tokens, {self.rate():,.0f} tokens/s{left}"

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
