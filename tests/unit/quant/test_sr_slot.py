"""The micro-batch's slot in the step's global batch (``data.Slots``) in the SR key.

Under DDP every rank quantizes its own activations and gradients: with the same key on every
rank, rank r's gradient element i would get the same random bits as rank 0's, so the
rounding noise of the replicas would be correlated and the all-reduce would not average it
away. The slot (micro-batch * world + rank) is therefore the stream's ``call`` id: ranks draw
independent bits, and exactly the bits one process draws for the same slots when it
accumulates them as micro-batches. With one slot per step (one process, no accumulation) the
key is the one it always was.

The 2-process version of this (real gloo ranks) is tests/integration/test_ddp_sr.py.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from nvfp4_lab.config.schema import TrainConfig
from nvfp4_lab.formats import Stream, quantize
from nvfp4_lab.formats.rng import stream_key
from nvfp4_lab.model import ModelConfig
from nvfp4_lab.quant import OPERANDS, QuantLinear, QuantState, preset
from nvfp4_lab.quant.operands import GEMMS
from nvfp4_lab.train.module import LMTask

SEED, STEP, INDEX = 1, 5, 2


def test_every_slot_its_own_key():
    keys = {stream_key(SEED, *Stream(INDEX, STEP, 2, 1, s).ids()) for s in range(8)}
    assert len(keys) == 8


def layer(slot: int) -> QuantLinear:
    """The same 64 -> 32 layer (same weights), full nvfp4 recipe, at one (seed, step) in
    slot ``slot``."""
    lin = nn.Linear(64, 32, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(32, 64, generator=torch.Generator().manual_seed(7)) / 8)
    state = QuantState(seed=SEED, step=STEP, slot=slot)
    return QuantLinear.from_linear(lin, recipe=preset("nvfp4"), index=INDEX, state=state)


def test_streams_are_keyed_by_the_slot():
    for s in (0, 1, 5):
        q = layer(s)
        for op in OPERANDS:
            gemm, slot = op.split(".")
            operand = 0 if slot == "dy" or op == "fprop.x" else 1
            assert q.stream(op).ids() == (INDEX, STEP, GEMMS.index(gemm), operand, s), op


def operand_q(q: QuantLinear, op: str, t: torch.Tensor):
    """``op`` quantized as the layer's GEMM quantizes it (same spec, seed, stream, signs)."""
    plan = q.current_plan()
    o = plan[op]
    return quantize(t, o.spec, seed=q.state.seed, stream=q.stream(o.stream_as or op),
                    signs=q.signs(op.split(".")[0], plan))


def test_gradient_codes_differ_between_slots_rne_weight_bytes_do_not():
    g = torch.Generator().manual_seed(3)
    dy = torch.randn(64, 32, generator=g)                   # [tokens, out]
    q0, q1 = layer(0), layer(1)
    plan = q0.current_plan()
    assert plan["dgrad.dy"].spec.rounding == "sr" and plan["wgrad.dy"].spec.rounding == "sr"
    assert plan["fprop.w"].spec.block == (16, 16)           # 2D weight tiles
    for op in ("dgrad.dy", "wgrad.dy"):
        a, b = operand_q(q0, op, dy), operand_q(q1, op, dy)
        assert torch.equal(a.scales, b.scales), op          # same tensor: same scales
        assert not torch.equal(a.codes(), b.codes()), op    # other SR bits: other codes
    wa, wb = operand_q(q0, "fprop.w", q0.weight), operand_q(q1, "fprop.w", q1.weight)
    assert torch.equal(wa.data, wb.data) and torch.equal(wa.scales, wb.scales)
    assert torch.equal(wa.amax, wb.amax)


def test_layer_forward_equal_gradients_differ_across_slots():
    """End to end through QuantGemm: the forward (RNE activations and weight, fixed RHT
    signs) is bit-identical in every slot; dX and dW (SR gradients) are not."""
    g = torch.Generator().manual_seed(4)
    x, dy = torch.randn(64, 64, generator=g), torch.randn(64, 32, generator=g)
    out = []
    for r in (0, 1, 0):
        q = layer(r)
        xr = x.clone().requires_grad_()
        y = q(xr)
        y.backward(dy)
        out.append((y.detach(), xr.grad, q.weight.grad))
    (y0, dx0, dw0), (y1, dx1, dw1), again = out
    assert torch.equal(y0, y1)
    assert not torch.equal(dx0, dx1) and not torch.equal(dw0, dw1)
    assert all(torch.equal(a, b) for a, b in zip(out[0], again))   # still deterministic


@pytest.mark.parametrize("rank, world, accumulate, batch_idx, slot",
                         [(0, 1, 1, 0, 0), (1, 2, 1, 0, 1), (1, 2, 2, 3, 3), (0, 1, 4, 6, 2)])
def test_lightning_module_takes_the_slot_from_the_trainer(rank, world, accumulate, batch_idx,
                                                          slot):
    task = LMTask(ModelConfig(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, vocab_size=64),
                  preset("nvfp4", backend="reference"), TrainConfig(accumulate=accumulate),
                  seed=0, max_steps=4,
                  tokens_per_step=64, bytes_per_token=None)
    task._trainer = SimpleNamespace(global_rank=rank, world_size=world,
                                    accumulate_grad_batches=accumulate, precision="32-true",
                                    global_step=0, is_global_zero=rank == 0,
                                    optimizers=[SimpleNamespace(param_groups=[{"lr": 0.0}])],
                                    strategy=SimpleNamespace(root_device=torch.device("cpu")))
    task.configure_model()
    task.log_dict = lambda *a, **k: None
    tokens = torch.zeros(2, 16, dtype=torch.long)
    task.training_step((tokens, tokens), batch_idx)
    assert task.qstate.slot == slot
    assert all(m.state is task.qstate for m in task.modules() if isinstance(m, QuantLinear))
