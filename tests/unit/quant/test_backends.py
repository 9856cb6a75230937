"""Backends: selection, the self-test that guards a fast backend, compiled == reference."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from unittest.mock import Mock

import pytest
import torch
from helpers.backends import needs_compiled
from torch import nn

from nvfp4_lab.formats import fake_quantize_parts
from nvfp4_lab.quant import (
    PRESETS,
    Backend,
    BackendError,
    QuantLinear,
    QuantState,
    make_backend,
    operand_plan,
    packaged,
    resolve,
    self_test,
)
from nvfp4_lab.quant.backends import _check_unbiased

NVFP4_SPECS = [o.spec for o in operand_plan(PRESETS["nvfp4"]).values() if o.spec]
SR_SPECS = [s for s in NVFP4_SPECS if s.rounding == "sr"]


class ZeroSR(Backend):
    """A broken kernel: stochastic rounding that writes zeros."""
    name = "zero-sr"

    def operand(self, x, spec, **kw):
        local, amax = super().operand(x, spec, **kw)
        return (torch.zeros_like(local) if spec.rounding == "sr" else local), amax


class NearestSR(Backend):
    """A broken kernel: 'stochastic' rounding that rounds to nearest."""
    name = "nearest-sr"

    def operand(self, x, spec, **kw):
        return super().operand(x, dataclasses.replace(spec, rounding="rne"), **kw)


class OffByOneAmax(Backend):
    """A broken kernel: the NVFP4 tensor amax one ulp off."""
    name = "off-by-one"

    def operand(self, x, spec, **kw):
        local, amax = super().operand(x, spec, **kw)
        return local, None if amax is None else torch.nextafter(amax, amax + 1)


@pytest.mark.parametrize("broken", [ZeroSR, NearestSR, OffByOneAmax])
def test_self_test_rejects_broken_backends(broken):
    specs = SR_SPECS if broken is not OffByOneAmax else NVFP4_SPECS[:1]
    with pytest.raises(BackendError, match=broken.name):
        self_test(broken(), specs)


def test_self_test_accepts_a_correct_backend_once_it_has_tried_every_quantizer():
    """A backend with the reference's bits passes, after it was asked for each quantizer of
    the recipe on each input and local dtype, and for several SR draws of the unbiasedness
    probe of each stochastic one: a self-test that skipped any would pass a broken backend."""
    asked = []   # (spec, input dtype, local dtype, seed)

    class Spy(Backend):
        name = "spy"

        def operand(self, x, spec, *, seed=0, local_dtype=torch.float32, **kw):
            asked.append((spec, x.dtype, local_dtype, seed))
            return super().operand(x, spec, seed=seed, local_dtype=local_dtype, **kw)

    self_test(Spy(), NVFP4_SPECS)
    locals_of = {True: (torch.float32, torch.bfloat16), False: (torch.float32,)}
    assert {(s, d, loc) for s, d, loc, _ in asked} >= {
        (s, d, loc) for s in NVFP4_SPECS for d in (torch.float32, torch.bfloat16)
        for loc in locals_of[s.bf16_exact]}
    for spec in SR_SPECS:
        probe = dataclasses.replace(spec, rht=None)
        assert len({seed for s, _, _, seed in asked if s == probe}) > 1, spec


@pytest.mark.parametrize("broken", [ZeroSR, NearestSR])
def test_unbiasedness_check_alone_catches_biased_sr(broken):
    """Even without the byte comparison, an all-zero or nearest 'SR' is rejected: on the
    probe tensor RNE gives 1.0 and zero gives 0.0 where 1.2 (exact) / 1.19922 (hw8) is due."""
    for spec in SR_SPECS:
        _check_unbiased(Backend(), spec, "cpu")  # the reference passes
        with pytest.raises(BackendError, match="biased"):
            _check_unbiased(broken(), spec, "cpu")


def test_unbiasedness_check_exact_mode():
    spec = dataclasses.replace(SR_SPECS[0], sr_mode="exact", rht=None)
    _check_unbiased(Backend(), spec, "cpu")
    with pytest.raises(BackendError):
        _check_unbiased(NearestSR(), spec, "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only message")
def test_triton_unavailable_on_cpu_is_a_clear_error(monkeypatch):
    # tests/kernels sets TRITON_INTERPRET=1 (kernels on the CPU) for the whole session
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(BackendError, match="CUDA"):
        resolve("triton", NVFP4_SPECS)


def test_unknown_backend_names_the_choices():
    with pytest.raises(ValueError, match="auto, reference, compiled, triton"):
        make_backend("fast")


def test_auto_falls_back_with_a_warning(monkeypatch):
    import nvfp4_lab.quant.backends as backends

    monkeypatch.setattr(backends, "make_backend",
                        lambda name: Backend() if name == "reference" else ZeroSR())
    with pytest.warns(UserWarning, match="skipping compiled"):
        chosen = resolve("auto", SR_SPECS)
    assert type(chosen) is Backend


def test_explicit_backend_that_fails_raises(monkeypatch):
    import nvfp4_lab.quant.backends as backends

    monkeypatch.setattr(backends, "make_backend", lambda name: NearestSR())
    with pytest.raises(BackendError):
        resolve("compiled", SR_SPECS)


def test_compiled_is_refused_on_cuda_and_auto_there_skips_it(monkeypatch):
    """Inductor's GPU quantizers were not bit-exact on an H200: never chosen for CUDA."""
    import nvfp4_lab.quant.backends as backends

    with pytest.raises(BackendError, match="backend=triton"):
        resolve("compiled", NVFP4_SPECS, "cuda")
    tried = []
    monkeypatch.setattr(backends, "make_backend", lambda name: tried.append(name) or ZeroSR())
    monkeypatch.setattr(backends, "self_test", Mock(side_effect=BackendError("broken")))
    with pytest.warns(UserWarning, match="skipping triton: broken"):
        chosen = resolve("auto", SR_SPECS, "cuda")
    assert type(chosen) is Backend and tried == ["triton"]


def test_compiled_is_refused_under_an_older_torch_and_auto_skips_it(monkeypatch):
    """torch 2.11's inductor rounded NVFP4 RHT-16 scales of bf16 inputs otherwise than eager:
    below packaged.MIN_TORCH the backend is refused before anything is compiled."""
    import nvfp4_lab.quant.backends as backends

    monkeypatch.setattr(packaged, "MIN_TORCH", "99.0")
    monkeypatch.setattr(backends, "make_backend", Mock(side_effect=AssertionError("built")))
    here = re.escape(torch.__version__)
    with pytest.raises(BackendError, match=f"needs torch >= 99.0, here {here}, "):
        resolve("compiled", SR_SPECS)
    with pytest.warns(UserWarning, match="skipping compiled: backend=compiled needs torch"):
        chosen = resolve("auto", SR_SPECS)
    assert type(chosen) is Backend


@pytest.mark.slow
@needs_compiled
def test_auto_on_cpu_is_compiled_and_self_tested():
    assert resolve("auto", NVFP4_SPECS).name == "compiled"


@pytest.mark.slow
@needs_compiled
@pytest.mark.parametrize("name", ["nvfp4", "mxfp4"])
def test_compiled_layer_equals_reference_layer(name):
    """Forward and backward of a QuantLinear, byte for byte, on both backends."""
    recipe = PRESETS[name]
    torch.manual_seed(0)
    base = nn.Linear(128, 64, bias=False)
    x = torch.randn(2, 64, 128) * torch.exp(torch.randn(2, 64, 1))
    grad = torch.randn(2, 64, 64)
    results = []
    for backend in (Backend(), make_backend("compiled")):
        lin = nn.Linear(128, 64, bias=False)
        lin.weight = nn.Parameter(base.weight.detach().clone())
        layer = QuantLinear.from_linear(lin, recipe=recipe, backend=backend, index=2,
                                        state=QuantState(seed=5, step=3))
        xi = x.clone().requires_grad_()
        y = layer(xi)
        y.backward(grad)
        results.append((y, xi.grad, layer.weight.grad))
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_backend_operand_matches_formats():
    x = torch.randn(32, 64)
    spec = NVFP4_SPECS[0]
    got = Backend().operand(x, spec, seed=1)
    want = fake_quantize_parts(x, spec, seed=1)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_compiled_graphs_are_cached_where_the_project_says(monkeypatch, tmp_path):
    """Inductor's default cache lives under /tmp; a compiled quantizer points it at a
    directory that survives (NVFP4_LAB_CACHE, else ~/.cache/nvfp4-lab), unless the user chose
    one with TORCHINDUCTOR_CACHE_DIR: its caches and its precompiled headers, which torch
    otherwise keeps under its own default whatever that variable says."""
    from nvfp4_lab.quant.packaged import compile_cache_dir

    def cache_of_a_quantizer(**env: str) -> list[str]:
        base = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
        code = ("import os; from nvfp4_lab.quant import compiled; "
                "from nvfp4_lab.formats.quantizer import make_spec; "
                "compiled._compiled(make_spec('nvfp4')); "
                "from torch._inductor import codecache; "
                "print(os.environ['TORCHINDUCTOR_CACHE_DIR']); print(codecache._HEADER_DIR)")
        return subprocess.run([sys.executable, "-c", code], env={**base, **env},
                              capture_output=True, text=True, check=True).stdout.split()

    assert cache_of_a_quantizer(NVFP4_LAB_CACHE=str(tmp_path)) == [
        str(tmp_path / "inductor"), str(tmp_path / "inductor" / "precompiled_headers")]
    assert cache_of_a_quantizer(TORCHINDUCTOR_CACHE_DIR="/mine") == [
        "/mine", "/mine/precompiled_headers"]
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("NVFP4_LAB_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache_dir() == tmp_path / "xdg" / "nvfp4-lab" / "inductor"


def test_self_test_quantizes_only_the_input_dtypes_a_run_uses():
    """Each input dtype is another graph for the compiled backend to compile: a run without
    autocast asks for fp32 inputs only, and only those are tried."""
    seen = []

    class Spy(Backend):
        name = "spy"

        def operand(self, x, spec, **kw):
            seen.append(x.dtype)
            return super().operand(x, spec, **kw)

    self_test(Spy(), NVFP4_SPECS[:1], input_dtypes=(torch.float32,))
    assert set(seen) == {torch.float32}
    seen.clear()
    self_test(Spy(), NVFP4_SPECS[:1])
    assert set(seen) == {torch.float32, torch.bfloat16}
