"""The data-parallel rank (``replica``) in the stochastic-rounding key.

Under DDP/FSDP every rank quantizes its own activations and gradients: with the same key on
every rank, rank r's gradient element i would get the same random bits as rank 0's, so the
rounding noise of the replicas would be correlated and the all-reduce would not average it
away. The rank is therefore a stream id of the per-replica operands (fprop.x, wgrad.x,
dgrad.dy, wgrad.dy), while the weight operands (fprop.w, dgrad.w: a replicated tensor, and
all-gathered in full under FSDP) keep replica 0 so that every rank quantizes a weight
identically. Replica 0 leaves the key as it was (the id is appended only when nonzero), so a
single-process run and rank 0 draw the bits they always did.

The 2-process version of this (real gloo ranks) is tests/integration/test_ddp_sr.py.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from nvfp4_lab.formats import Stream, quantize
from nvfp4_lab.formats.rng import stream_key
from nvfp4_lab.model import ModelConfig
from nvfp4_lab.quant import OPERANDS, QuantLinear, QuantState, preset
from nvfp4_lab.quant.recipe import GEMMS, gemm_of
from nvfp4_lab.train.module import LMTask
from nvfp4_lab.train.schema import TrainConfig

PER_REPLICA = ("fprop.x", "wgrad.x", "dgrad.dy", "wgrad.dy")
REPLICATED = ("fprop.w", "dgrad.w")
SEED, STEP, INDEX, MICRO = 1, 5, 2, 1


def test_replica_zero_is_todays_key_and_others_are_not():
    ids = (INDEX, STEP, 2, 1, MICRO)
    assert Stream(*ids).ids() == ids                       # no sixth id for replica 0
    assert Stream(*ids, replica=0).ids() == ids
    assert Stream(*ids, replica=3).ids() == (*ids, 3)
    base = stream_key(SEED, *ids)
    keys = {stream_key(SEED, *Stream(*ids, replica=r).ids()) for r in range(1, 8)}
    assert base not in keys and len(keys) == 7             # every rank its own key


def layer(replica: int) -> QuantLinear:
    """The same 64 -> 32 layer (same weights), full nvfp4 recipe, at one (seed, step, micro)
    on data-parallel rank ``replica``."""
    lin = nn.Linear(64, 32, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(32, 64, generator=torch.Generator().manual_seed(7)) / 8)
    state = QuantState(seed=SEED, step=STEP, micro=MICRO, replica=replica)
    return QuantLinear.from_linear(lin, recipe=preset("nvfp4"), index=INDEX, state=state)


def test_streams_carry_the_rank_for_per_replica_operands_only():
    assert set(PER_REPLICA) | set(REPLICATED) == set(OPERANDS)
    for r in (0, 1, 5):
        q = layer(r)
        for op in PER_REPLICA:
            assert q.stream(op).replica == r, op
        for op in REPLICATED:
            assert q.stream(op).replica == 0, op
    # replica 0: exactly the stream (hence the key) of a run that had no replica id
    q = layer(0)
    for op in OPERANDS:
        gemm, slot = op.split(".")
        operand = 0 if slot == "dy" or op == "fprop.x" else 1
        ids = (INDEX, STEP, GEMMS.index(gemm), operand, MICRO)
        assert q.stream(op).ids() == ids, op


def operand_q(q: QuantLinear, op: str, t: torch.Tensor):
    """``op`` quantized as the layer's GEMM quantizes it (same spec, seed, stream, signs)."""
    plan = q.current_plan()
    o = plan[op]
    return quantize(t, o.spec, seed=q.state.seed, stream=q.stream(o.stream_as or op),
                    signs=q.signs(gemm_of(op), plan))


def test_gradient_codes_differ_between_ranks_weight_bytes_do_not():
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


def test_layer_forward_equal_gradients_differ_across_ranks():
    """End to end through QuantGemm: the forward (RNE activations, replica-0 weight) is
    bit-identical on every rank; dX and dW (SR gradients) are not."""
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


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_lightning_module_takes_the_rank_from_the_trainer(rank):
    task = LMTask(ModelConfig(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, vocab_size=64),
                  preset("nvfp4", backend="reference"), TrainConfig(), seed=0, max_steps=4,
                  tokens_per_step=64, bytes_per_token=None)
    task._trainer = SimpleNamespace(global_rank=rank, precision="32-true",
                                    strategy=SimpleNamespace(root_device=torch.device("cpu")))
    task.setup("fit")
    task.configure_model()
    assert task.qstate.replica == rank
    assert all(m.state is task.qstate for m in task.modules() if isinstance(m, QuantLinear))
