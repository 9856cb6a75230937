"""A torchrun entry point for test_rank_failure.py: ``nvfp4-lab run`` in which rank 1 fails
at step 2. The first argument picks how: ``raise`` (an error, as an out-of-memory one would
be) or ``nan`` (a NaN weight in the first block, which the module stops on, naming it)."""
import sys

from nvfp4_lab import cli
from nvfp4_lab.train.module import LMTask

FAULT = sys.argv.pop(1)
training_step = LMTask.training_step


def failing_step(self, batch, batch_idx):
    if self.global_rank == 1 and self.global_step == 2:
        if FAULT == "raise":
            raise RuntimeError("simulated out of memory")
        self.model.blocks[0].attn.qkv.weight.data.fill_(float("nan"))
    return training_step(self, batch, batch_idx)


LMTask.training_step = failing_step
sys.exit(cli.main())
