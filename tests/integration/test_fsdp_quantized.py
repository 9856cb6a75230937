"""FSDP around quantized layers: torch's ``fully_shard`` (FSDP2, which runs on a CPU with gloo)
on 2 real processes, each block and the model sharded, trains the full NVFP4 recipe (SR
gradients, Wgrad RHT, 16x16 weight tiles, the tensor amax).

FSDP gathers a layer's whole weight before its forward and backward, so the quantizer sees the
full tensor, never a shard: the weight's amax and its 16x16 tiles are those of one process.
Checked by capturing, at every step, the Fprop weight operand (E2M1 local values and the
tensor amax) that rank 0 and rank 1 feed the emulated GEMM and comparing its bytes with one
process's. And, the data and random bits being keyed by slot (``data.Slots``), the two ranks
compute the step of one process accumulating their two micro-batches: the reduce-scatter
averages g0 and g1 as that process's accumulation does (halves are exact, a sum of two terms
has one order), AdamW works elementwise on the shards, and no clipping norm is taken (a norm
over shards sums in another order). So the weights after 3 steps are **equal bytes**.
Also under bf16 autocast (Lightning's bf16-mixed): FSDP keeps FP32 parameters (no
mixed-precision policy), so the quantizer sees the same FP32 weight and bf16 activations as
one process, and the bytes are equal again.

On a CUDA machine (benchmarks/gpu_check.sh) the same runs on the GPUs, up to 2, with NCCL and
the triton backend, in torch's deterministic mode (the embedding's backward otherwise adds
with atomics). Results are gathered to rank 0, which saves them; the assertions run in the
pytest process.
"""
from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

STEPS, BATCH, SEQ, VOCAB = 3, 2, 32, 64
CUDA_WORLD = min(2, torch.cuda.device_count())
# device, process group backend, quantizer backend, world size, autocast dtype (None: fp32)
SETUPS = {"cpu": ("cpu", "gloo", "reference", 2, None),
          "cpu_bf16_autocast": ("cpu", "gloo", "reference", 2, torch.bfloat16),
          "cuda": ("cuda", "nccl", "triton", CUDA_WORLD, None)}


def _model(state, device: str, backend: str):
    from nvfp4_lab.model import ModelConfig, build_model
    from nvfp4_lab.quant import convert, preset
    from nvfp4_lab.quant.recipe import HighPrecision

    torch.manual_seed(0)
    cfg = ModelConfig(d_model=64, n_layers=2, n_heads=2, n_kv_heads=1, vocab_size=VOCAB)
    model = build_model(cfg)
    recipe = preset("nvfp4", backend=backend, high_precision=HighPrecision())  # all blocks
    convert(model.to(device), recipe, state=state)
    return model


def _batch(step: int, slot: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + slot)
    w = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g).to(device)
    return w[:, :-1], w[:, 1:]


def _capture(model) -> list:
    """The Fprop weight operand of every quantized layer, each forward, as the GEMM gets it,
    and the dtype of its activations (``cd``: bf16 under autocast)."""
    from nvfp4_lab.quant.linear import QuantLinear

    seen = []
    for layer in model.modules():
        if isinstance(layer, QuantLinear):
            def operand(x, op, plan, cd, signs, _orig=layer.operand, _name=layer.name):
                parts = _orig(x, op, plan, cd, signs)
                if op == "fprop.w":
                    seen.append((_name, parts.local.detach().cpu(), parts.amax.detach().cpu(),
                                 cd))
                return parts
            layer.operand = operand
    return seen


def _train(model, state, slots_of_step, scale: float, device: str, autocast) -> None:
    from nvfp4_lab.model import lm_loss

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    for step in range(STEPS):
        state.step = step
        for slot in slots_of_step:
            state.slot = slot
            x, y = _batch(step, slot, device)
            # bf16-mixed as Lightning runs it: autocast around the forward, FP32 parameters
            with torch.autocast(device, dtype=autocast or torch.bfloat16,
                                enabled=autocast is not None):
                loss = lm_loss(model(x), y) * scale
            loss.backward()
        opt.step()
        opt.zero_grad()


def _deterministic(device: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    if device == "cuda":
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        torch.use_deterministic_algorithms(True)


def _worker(rank: int, setup: str, store: str, out: str) -> None:
    device, backend, quant_backend, world, autocast = SETUPS[setup]
    _deterministic(device)
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank,
                            world_size=world)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        from nvfp4_lab.quant import QuantState

        state = QuantState(seed=7)
        model = _model(state, device if device == "cpu" else f"cuda:{rank}", quant_backend)
        mesh = init_device_mesh(device, (world,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        seen = _capture(model)
        _train(model, state, [rank], 1.0, device, autocast)
        weights = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
        everyone = [None] * world
        dist.all_gather_object(everyone, seen)
        if rank == 0:
            torch.save({"weights": weights, "seen": everyone}, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    os._exit(0)    # as test_ddp_sr.py: skip gloo's C++ teardown, which can abort at exit


@pytest.mark.parametrize("setup", [
    "cpu", "cpu_bf16_autocast",
    pytest.param("cuda", marks=pytest.mark.skipif(CUDA_WORLD == 0, reason="needs CUDA"))])
def test_fsdp_ranks_quantize_whole_weights_and_equal_one_process(tmp_path, one_thread, setup):
    from nvfp4_lab.quant import QuantState

    device, _, quant_backend, world, autocast = SETUPS[setup]
    out = tmp_path / "fsdp.pt"
    mp.spawn(_worker, args=(setup, str(tmp_path / "store"), str(out)), nprocs=world,
             join=True)
    fsdp = torch.load(out, weights_only=False)

    _deterministic(device)
    state = QuantState(seed=7)
    model = _model(state, device, quant_backend)
    seen = _capture(model)
    _train(model, state, list(range(world)), 1.0 / world, device, autocast)   # one process

    # one process: per step, slot 0 then slot 1; rank r saw slot r of each step
    layers = len(seen) // (STEPS * world)
    assert layers >= 4 and len(seen) == STEPS * world * layers
    for rank, ranks_seen in enumerate(fsdp["seen"]):
        assert len(ranks_seen) == STEPS * layers
        for step in range(STEPS):
            one = seen[(step * world + rank) * layers:(step * world + rank + 1) * layers]
            mine = ranks_seen[step * layers:(step + 1) * layers]
            for (name, local, amax, cd), (name_f, local_f, amax_f, _) in zip(one, mine):
                assert cd == (autocast or torch.float32)
                assert name == name_f and local.shape == local_f.shape, (name, name_f)
                assert torch.equal(local, local_f) and torch.equal(amax, amax_f), (name, step)
    want = {k: v.cpu() for k, v in model.state_dict().items()}
    assert want.keys() == fsdp["weights"].keys()
    assert all(torch.equal(want[k], fsdp["weights"][k]) for k in want), \
        max((want[k] - fsdp["weights"][k]).abs().max().item() for k in want)
