"""The compiled backend's AOTInductor packages (quant/packaged.py) equal eager bit for bit on
adversarial inputs of whole blocks, serve every such shape from one package, are loaded rather
than rebuilt by a new quantizer, and leave every other input to torch.compile.

Each (spec, dtype, function) is one package to build, ~10-20 s on a cold cache on 2 cores, so
the GEMM-operand form (what training runs) is checked for every spec and dtype and the public
``fake_quantize`` form for one; test_compiled.py covers the torch.compile fallback on padded
shapes with the same adversarial tensors.
"""
from __future__ import annotations

import functools

import pytest
import torch
from helpers.adversarial import SPECS, SR_SPEC, adversarial, assert_bitwise
from helpers.backends import needs_compiled

from nvfp4_lab.formats import QuantSpec, Stream, fake_quantize, fake_quantize_parts
from nvfp4_lab.formats.quantizer import parts_pipeline
from nvfp4_lab.quant import compiled, packaged
from nvfp4_lab.quant.packaged import PackagedQuantizer, code, multiple


def builds(test):
    """Marks a test that builds or runs a package: slow, and refused below MIN_TORCH. The
    checks of the key, the version gate and the block multiple run under every torch."""
    return pytest.mark.slow(needs_compiled(test))


WHOLE = (64, 64)  # whole blocks for every spec here (and RHT 16 along either axis)


def packaged_runners(spec: QuantSpec, parts: bool) -> list:
    """The package runners the compiled quantizer of spec has loaded or built so far."""
    # called as fake_quantize and fake_quantize_parts call it: functools.cache keys on how
    quantizer = (compiled._compiled(spec, parts=True) if parts
                 else compiled._compiled(spec))
    return [r for r in quantizer.runners.values() if r]


def assert_parts_equal(x: torch.Tensor, spec: QuantSpec, **kwargs) -> None:
    got = compiled.fake_quantize_parts(x, spec, **kwargs)
    eager = fake_quantize_parts(x, spec, **kwargs)
    assert_bitwise(got[0], eager[0])
    assert (got[1] is None) == (eager[1] is None)
    if eager[1] is not None:
        assert_bitwise(got[1], eager[1])


@builds
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", SPECS)
def test_packaged_parts_equal_eager(name, dtype):
    spec = SPECS[name]
    for kind in ("ties", "nonfinite", "range"):
        assert_parts_equal(adversarial(kind, dtype, WHOLE), spec, seed=7,
                           stream=Stream(layer=1, step=2))
    assert packaged_runners(spec, parts=True), "the package was not used"


@builds
def test_packaged_fake_quantize_equals_eager():
    spec = SPECS["nvfp4_1d"]
    for kind in ("ties", "nonfinite", "range"):
        x = adversarial(kind, torch.float32, WHOLE)
        assert_bitwise(compiled.fake_quantize(x, spec), fake_quantize(x, spec))
    assert packaged_runners(spec, parts=False)


@builds
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packaged_sr_equals_eager_and_steps_change_the_bits(dtype):
    """The SR key is a runtime input of the library: each step draws its own bits, the eager
    ones, from the same package."""
    outs = []
    for step in (1, 2):
        for kind in ("ties", "range"):
            x = adversarial(kind, dtype, WHOLE)
            assert_parts_equal(x, SR_SPEC, seed=5, stream=Stream(step=step, gemm=2))
        outs.append(compiled.fake_quantize_parts(adversarial("ties", dtype, WHOLE), SR_SPEC,
                                                 seed=5, stream=Stream(step=step, gemm=2)))
    assert not torch.equal(outs[0][0], outs[1][0])
    assert compiled._compiled(SR_SPEC, parts=True).runners[(dtype, 2, False, True)]


@builds
def test_one_package_serves_every_whole_block_shape():
    """Sizes are symbols of the library: square or not, one block or many, the first shape's
    package computes the eager bits for every other shape of its rank and dtype."""
    spec = SPECS["nvfp4_rht16_axis0"]  # the Wgrad operand: blocks along tokens
    quantizer = compiled._compiled(spec, parts=True)
    assert_parts_equal(adversarial("ties", torch.float32, WHOLE), spec, seed=3)
    built = dict(quantizer.runners)
    for shape in [(16, 16), (32, 80), (128, 16), (48, 208)]:
        assert_parts_equal(adversarial("range", torch.float32, shape), spec, seed=3)
    assert quantizer.runners == built


@builds
def test_a_package_built_here_is_loaded_by_a_new_quantizer(monkeypatch, tmp_path):
    """What one process builds, the next loads: the key a quantizer looks its package up by
    is the one it was stored under, also after a build in the same process (inductor adds keys
    to the options dict it is given, which once changed every later key)."""
    monkeypatch.setattr(packaged, "store_dir", lambda: tmp_path)
    spec = SPECS["nvfp4_1d"]
    fn = functools.partial(parts_pipeline, spec=spec)
    x = adversarial("ties", torch.float32, WHOLE)

    def fail(*args):
        raise AssertionError("built again, or fell back, although the package was stored")

    want = PackagedQuantizer(fn, spec, "a test", fallback=fail)(x, None, None)  # builds
    assert len(list(tmp_path.glob("*.pt2"))) == 1
    monkeypatch.setattr(PackagedQuantizer, "_build", fail)
    got = PackagedQuantizer(fn, spec, "a test", fallback=fail)(x, None, None)   # loads
    eager = fake_quantize_parts(x, spec)
    assert_bitwise(got[0], want[0])
    assert_bitwise(got[0], eager[0])
    assert_bitwise(got[1], eager[1])


def test_inductor_is_pointed_at_the_user_cache_headers_included(tmp_path):
    """What a build reads for where to write, once ``use_compile_cache`` has run: inductor's
    cache folder and the precompiled headers' folder (torch 2.13 keeps these in the system's
    temp folder whatever TORCHINDUCTOR_CACHE_DIR says) both under NVFP4_LAB_CACHE. A real
    build into that folder is the compiled tests' own cache."""
    import os
    import subprocess
    import sys

    env = {**{k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"},
           "NVFP4_LAB_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp_path / "tmp")}
    code = ("from nvfp4_lab.quant import packaged; packaged.use_compile_cache(); "
            "from torch._inductor import codecache; "
            "from torch._inductor.runtime.cache_dir_utils import cache_dir; "
            "print(cache_dir()); print(getattr(codecache, '_HEADER_DIR', ''))")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300,
                         capture_output=True, text=True).stdout.split("\n")
    inductor = tmp_path / "cache" / "inductor"
    assert out[0] == str(inductor)
    assert out[1] in ("", str(inductor / "precompiled_headers"))   # "": a torch without it


@needs_compiled
def test_inputs_a_package_cannot_serve_take_the_fallback():
    spec = SPECS["nvfp4_1d"]
    calls = []
    quantizer = PackagedQuantizer(lambda *a: None, spec, "never built",
                                  fallback=lambda *a: calls.append(a[0].shape) or "fallback")
    x = torch.zeros(64, 64)
    for unserved in (torch.zeros(64, 40),             # a partial block
                     torch.zeros(64, 64).t()[:, :32],  # not contiguous
                     torch.zeros(0, 64),               # empty
                     torch.zeros(64, 64, requires_grad=True)):  # a gradient to record
        assert quantizer(unserved, None, None) == "fallback"
    assert len(calls) == 4 and not quantizer.runners
    with torch.no_grad():  # nothing recorded: the package could serve it
        assert quantizer.serves(x.requires_grad_())


@pytest.mark.parametrize(("version", "served"), [("2.11.0+cu130", False),
                                                ("2.12.1+cpu", False), ("2.13.0+cpu", True),
                                                ("2.14.0a0+git1234", True)])
def test_torch_older_than_2_13_takes_the_fallback(monkeypatch, version, served):
    """2.11 failed to build a package here and crashed loading one on a GPU machine."""
    monkeypatch.setattr(torch, "__version__", version)
    quantizer = PackagedQuantizer(lambda *a: None, SPECS["nvfp4_1d"], "never built",
                                  fallback=lambda *a: "fallback")
    assert quantizer.serves(torch.zeros(64, 64)) is served


@pytest.mark.parametrize(("spec", "want"), [
    (QuantSpec("nvfp4"), 16), (QuantSpec("mxfp4"), 32), (QuantSpec("nvfp4", axis=0, rht=64), 64),
    (QuantSpec("nvfp4", block=(16, 16)), 16), (QuantSpec("fp8_e4m3"), 1),
    (QuantSpec("fp8_e4m3", block=(1, 32)), 32)])
def test_multiple_is_the_largest_block_rht_or_pair_size(spec, want):
    assert multiple(spec) == want


def test_the_package_key_hashes_code_not_prose():
    src = '"""Module."""\nX = "a"  # why\n\n\ndef f(x):\n    """Doc."""\n    return x * X\n'
    reworded = ('"""The module, reworded."""\n# a new comment\nX = "a"\n\n\ndef f(x):\n'
                '    """Other words."""\n    return x * X  # and why\n')
    assert code(src) == code(reworded)
    edits = [("x * X", "x + X"), ('X = "a"', 'X = "b"'), ('"""Doc."""', '"""Doc."""\n    x = 2')]
    for edit in edits:
        assert code(src.replace(*edit)) != code(src), edit
