"""The transformer: layer names, causality, GQA and RoPE against explicit references,
init, training-step sanity, determinism, and conversion by ``quant.convert``."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nvfp4_lab import quant
from nvfp4_lab.model import Transformer, lm_loss, model_preset
from nvfp4_lab.model.transformer import apply_rope, rope_tables

LINEARS = ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")


def tiny(seed: int = 0, **changes) -> Transformer:
    """nano's block at d 64, 2 layers: 4 query heads of 16 sharing 2 key/value heads."""
    torch.manual_seed(seed)
    cfg = model_preset("nano", **{"d_model": 64, "n_layers": 2, "vocab_size": 97,
                                  "max_seq_len": 64, **changes})
    return Transformer(cfg)


def test_layer_names_and_shapes():
    model = tiny()
    linears = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert list(linears) == [f"blocks.{i}.{k}" for i in range(2) for k in LINEARS] + ["lm_head"]
    assert all(m.bias is None for m in linears.values())
    assert linears["blocks.0.attn.qkv"].weight.shape == ((4 + 2 * 2) * 16, 64)
    assert linears["blocks.0.mlp.fc1"].weight.shape == (192, 64)
    assert model.lm_head.weight is not model.tok_emb.weight  # untied
    assert set(model.state_dict()) == {n for n, _ in model.named_parameters()}  # no rope tables


def test_forward_shape_dtype_and_length_check():
    model = tiny()
    idx = torch.randint(0, 97, (3, 20))
    assert model(idx).shape == (3, 20, 97) and model(idx).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(idx)
    assert logits.dtype == torch.bfloat16
    assert lm_loss(logits, idx).dtype == torch.float32
    with pytest.raises(ValueError, match="sequence length 65 exceeds model.max_seq_len=64"):
        model(torch.zeros(1, 65, dtype=torch.long))


def test_causal():
    """Changing token t changes no logit at positions before t, and does change t's."""
    model = tiny().eval()
    idx = torch.randint(0, 97, (2, 32))
    t = 17
    changed = idx.clone()
    changed[:, t] = (idx[:, t] + 1) % 97
    with torch.no_grad():
        a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :t], b[:, :t], rtol=0, atol=0)
    assert (a[:, t] - b[:, t]).abs().max() > 1e-4


def test_gqa_equals_repeated_heads_reference():
    """SDPA with enable_gqa == plain causal softmax attention with each key/value head
    repeated for its query heads (query head h reads key/value head h // 2)."""
    model = tiny(n_heads=4, n_kv_heads=2)
    attn, T = model.blocks[0].attn, 24
    x = torch.randn(2, T, 64)
    cos, sin = model.rope_cos[:T], model.rope_sin[:T]
    q, k, v = attn.heads(x, cos, sin)
    assert (q.shape, k.shape, v.shape) == ((2, 4, T, 16), (2, 2, T, 16), (2, 2, T, 16))
    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)  # [2, 4, T, 16]
    scores = q @ k.transpose(-1, -2) / math.sqrt(16)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, T, 64)
    torch.testing.assert_close(attn(x, cos, sin), attn.proj(y), rtol=1e-5, atol=1e-6)


def test_rope_depends_only_on_the_offset():
    """<R(m) q, R(n) k> is a function of n - m: shifting both positions keeps it."""
    torch.manual_seed(0)
    hd = 32
    cos, sin = rope_tables(hd, 512, 10000.0)
    q, k = torch.randn(hd, dtype=torch.float64), torch.randn(hd, dtype=torch.float64)

    def dot(m: int, n: int) -> torch.Tensor:
        rq = apply_rope(q.view(1, 1, 1, hd), cos[m:m + 1].double(), sin[m:m + 1].double())
        rk = apply_rope(k.view(1, 1, 1, hd), cos[n:n + 1].double(), sin[n:n + 1].double())
        return (rq * rk).sum()

    for m, n, shift in ((0, 5, 100), (7, 3, 300), (10, 10, 400)):
        torch.testing.assert_close(dot(m, n), dot(m + shift, n + shift), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(dot(0, 5), dot(0, 6))  # and it does depend on the offset
    # a rotation: norms are kept
    x = torch.randn(2, 3, 8, hd)
    torch.testing.assert_close(apply_rope(x, cos[:8], sin[:8]).norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(apply_rope(x, cos[:1].expand(8, -1), sin[:1].expand(8, -1)), x)


def test_init_scales():
    torch.manual_seed(0)
    model = Transformer(model_preset("micro", vocab_size=512))  # 8 layers: residual std / 4
    std = model.cfg.init_std
    stds = {n: p.std().item() for n, p in model.named_parameters()}
    for name in ("tok_emb.weight", "lm_head.weight", "blocks.3.attn.qkv.weight",
                 "blocks.3.mlp.fc1.weight"):
        assert stds[name] == pytest.approx(std, rel=0.05), name
    for name in ("blocks.3.attn.proj.weight", "blocks.3.mlp.fc2.weight"):
        assert stds[name] == pytest.approx(std / 4, rel=0.05), name
    assert all((p == 1).all() for n, p in model.named_parameters() if "norm" in n)


def test_forward_backward_nano_finite_grads():
    torch.manual_seed(0)
    model = Transformer(model_preset("nano", vocab_size=256))
    idx = torch.randint(0, 256, (2, 65))
    loss = lm_loss(model(idx[:, :-1]), idx[:, 1:])
    assert abs(loss.item() - math.log(256)) < 0.1  # small init: near-uniform predictions
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_deterministic():
    idx = torch.randint(0, 97, (2, 16))
    a, b = tiny(seed=3), tiny(seed=3)
    with torch.no_grad():
        torch.testing.assert_close(a(idx), b(idx), rtol=0, atol=0)
        assert not torch.equal(a(idx), tiny(seed=4)(idx))


def test_num_params_and_flops():
    model = tiny()
    linear = sum(p.numel() for n, p in model.named_parameters() if n.startswith("blocks")
                 and "norm" not in n)
    norms = 2 * 2 * 64 + 64
    assert model.num_params() == linear + norms
    assert model.num_params(non_embedding=False) == linear + norms + 2 * 97 * 64
    n = model.num_params() + 97 * 64
    assert model.flops_per_token(32) == 6 * n + 12 * 2 * 64 * 32
    assert model.flops_per_token() == 6 * n + 12 * 2 * 64 * 64  # default: max_seq_len


def test_converts_with_the_quant_converter():
    """convert finds `blocks`, swaps exactly the 4 linears of each block, and reports the
    LM head as outside the blocks; the converted model still trains. The eager reference
    backend: resolving `auto` would self-test torch.compile (a minute on 2 cores)."""
    torch.manual_seed(0)
    model = Transformer(model_preset("nano", vocab_size=256, n_layers=2))
    report = quant.convert(model, quant.preset("nvfp4_base"), backend=quant.Backend())
    assert quant.find_blocks(model)[0] == "blocks"
    assert report.quantized == [f"blocks.{i}.{k}" for i in range(2) for k in LINEARS]
    head = next(r for r in report.layers if r.name == "lm_head")
    assert not head.quantized and "outside the transformer blocks" in head.reason
    assert all(isinstance(model.get_submodule(n), quant.QuantLinear) for n in report.quantized)
    assert type(model.lm_head) is nn.Linear
    idx = torch.randint(0, 256, (2, 33))
    loss = lm_loss(model(idx[:, :-1]), idx[:, 1:])
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_lm_loss_is_mean_cross_entropy_in_nats():
    logits = torch.randn(2, 5, 11)
    targets = torch.randint(0, 11, (2, 5))
    manual = -logits.log_softmax(-1).gather(-1, targets[..., None]).mean()
    torch.testing.assert_close(lm_loss(logits.bfloat16(), targets),
                               F.cross_entropy(logits.bfloat16().float().view(10, 11),
                                               targets.view(10)))
    torch.testing.assert_close(lm_loss(logits, targets), manual)
