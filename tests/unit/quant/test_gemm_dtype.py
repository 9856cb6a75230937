"""The GEMM's BF16 inputs (``quant/gemm.py``): exact for FP4 operands, refused for others.

On CUDA an FP4 operand's ``local`` is produced in BF16 and multiplied by a BF16 GEMM with FP32
output. That changes no product only if BF16 holds every FP4 local exactly: an E2M1 value
(at most 2 significant bits) times an E4M3 (4 bits, >= 2^-9) or E8M0 (2^-127..2^127) scale.
These tests check that premise on the extremes of every FP4 layout, that every backend's BF16
local is its FP32 local cast (bit for bit), that a BF16 local is refused where it would round
(FP8), and that the backend self-test compares bits. The BF16 GEMM itself needs CUDA.
"""
from __future__ import annotations

import pytest
import torch

from nvfp4_lab.formats import QuantSpec, fake_quantize_parts
from nvfp4_lab.formats.nvfp4 import gemm_alpha
from nvfp4_lab.quant import Backend
from nvfp4_lab.quant.backends import BackendError, CompiledBackend, self_test
from nvfp4_lab.quant.gemm import Parts, gemm, local_dtype

FP4_SPECS = [QuantSpec("nvfp4"), QuantSpec("nvfp4", axis=0, rht=16, rounding="sr"),
             QuantSpec("nvfp4", block=(16, 16)), QuantSpec("mxfp4"),
             QuantSpec("mxfp4", axis=0, mx_scale="floor", rounding="sr", sr_mode="exact"),
             QuantSpec("mxfp4", block=(32, 32), mx_scale="even")]


def extremes(seed: int = 0) -> torch.Tensor:
    """[64, 64]: rows over 2^-140..2^120 (fp32 subnormals, E4M3 subnormal scales, E8M0 at
    both ends), E2M1 ties, +-0.0 and a lone outlier."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 64, generator=g)
    x *= torch.exp2(torch.linspace(-140, 120, 64)).view(64, 1)
    x[3] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -6.0]).repeat(8)
    x[5, :32], x[5, 32:] = 0.0, -0.0
    x[7, 9] = 3e38
    return x


@pytest.mark.parametrize("spec", FP4_SPECS, ids=repr)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp4_locals_are_exact_in_bf16(spec, dtype):
    x = extremes(1).to(dtype)
    local, _ = fake_quantize_parts(x, spec, seed=3)
    if spec == QuantSpec("mxfp4"):  # row blocks keep each row's range: both E8M0 ends
        nonzero = local[local != 0].abs()
        assert nonzero.min() <= 2.0 ** -120 and nonzero.max() >= 2.0 ** 100
    back = local.bfloat16().float()
    assert torch.equal(back.view(torch.int32), local.view(torch.int32))


@pytest.mark.parametrize("backend", [Backend(), CompiledBackend()], ids=["reference",
                                                                          "compiled"])
def test_bf16_local_is_the_fp32_local(backend):
    x = extremes(2).bfloat16()
    for spec in FP4_SPECS[:2] + FP4_SPECS[3:4]:
        local32, scale32 = backend.operand(x, spec, seed=4)
        local16, scale16 = backend.operand(x, spec, seed=4, local_dtype=torch.bfloat16)
        assert local16.dtype == torch.bfloat16 and local32.dtype == torch.float32
        assert torch.equal(local16.float().view(torch.int32), local32.view(torch.int32))
        assert (scale16 is None and scale32 is None) or torch.equal(scale16, scale32)


@pytest.mark.parametrize("spec,dtype", [(QuantSpec("fp8_e4m3"), torch.bfloat16),
                                        (QuantSpec("nvfp4"), torch.float16)])
def test_inexact_local_dtypes_are_refused(spec, dtype):
    with pytest.raises(ValueError, match="not exact for"):
        Backend().operand(torch.ones(4, 32), spec, local_dtype=dtype)


def test_local_dtype_rule():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert local_dtype(QuantSpec("nvfp4"), cuda) == torch.bfloat16
    assert local_dtype(QuantSpec("mxfp4", block=(32, 32)), cuda) == torch.bfloat16
    assert local_dtype(QuantSpec("fp8_e4m3"), cuda) == torch.float32
    assert local_dtype(QuantSpec("nvfp4"), cpu) == torch.float32


class SignedZeros(Backend):
    """A broken kernel: every zero of the local comes back as -0.0 (equal as numbers)."""
    name = "signed-zeros"

    def operand(self, x, spec, **kw):
        local, amax = super().operand(x, spec, **kw)
        return torch.where(local == 0, -torch.zeros_like(local), local), amax


class Fp32Always(Backend):
    """A broken kernel: ignores local_dtype."""
    name = "fp32-always"

    def operand(self, x, spec, **kw):
        return super().operand(x, spec, **{**kw, "local_dtype": torch.float32})


@pytest.mark.parametrize("broken", [SignedZeros, Fp32Always])
def test_self_test_compares_bits_and_dtypes(broken):
    with pytest.raises(BackendError, match="values differ"):
        self_test(broken(), [QuantSpec("nvfp4")])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_bf16_gemm_equals_fp32_gemm_up_to_summation_order():
    """Same products; the sums may be ordered differently: |y16 - y32| <= 2 K u (|a| |b|),
    u = 2^-24, the bound of two FP32 summations of K terms."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(512, 1024, device="cuda", generator=g, dtype=torch.bfloat16)
    w = torch.randn(768, 1024, device="cuda", generator=g)
    backend = Backend()
    parts = []
    for t, spec in ((x, QuantSpec("nvfp4")), (w, QuantSpec("nvfp4", block=(16, 16)))):
        local, amax = backend.operand(t, spec, local_dtype=torch.bfloat16)
        parts.append(Parts(local, amax, True))
    a, b = parts[0], parts[1].T
    y16 = gemm(a, b, torch.float32)
    y32 = gemm(a._replace(local=a.local.float()), b._replace(local=b.local.float()),
               torch.float32)
    bound = 2 * 1024 * 2.0 ** -24 * (a.local.float().abs() @ b.local.float().abs())
    bound = bound * gemm_alpha(a.amax, b.amax)
    assert ((y16 - y32).abs() <= bound).all()
    assert not torch.equal(y16, torch.zeros_like(y16))


# ------------------------------------------------------------------ FP32 means FP32
class MatmulPrecisionSpy(torch.overrides.TorchFunctionMode):
    """Records the oneDNN / cuBLAS FP32 precision flags at every matmul call."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("matmul", "__matmul__", "mm"):
            self.seen.append((torch.backends.mkldnn.matmul.fp32_precision,
                              torch.backends.cuda.matmul.fp32_precision))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("user", ["high", "medium"])
def test_quantized_gemm_runs_full_fp32_whatever_the_global_precision(user):
    """A user's set_float32_matmul_precision("high"/"medium") lets oneDNN (CPU) or cuBLAS
    (CUDA) round FP32 inputs to TF32/BF16. The emulated GEMM's matmul must see "ieee" on its
    device, and the user's setting must be back afterwards; an unquantized GEMM (nn.Linear
    semantics) keeps the user's setting."""
    x, w = torch.randn(32, 64), torch.randn(48, 64)
    a = Parts(*Backend().operand(x, QuantSpec("fp8_e4m3", block=(1, 32))), True)
    b = Parts(w.t(), None, False)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(user)
    try:
        flags = (torch.backends.mkldnn.matmul.fp32_precision,
                 torch.backends.cuda.matmul.fp32_precision)
        assert "ieee" not in flags
        with MatmulPrecisionSpy() as spy:
            gemm(a, b, torch.float32)
            gemm(Parts(x, None, False), b, torch.float32)
        assert spy.seen[0][0] == "ieee"                  # the CPU's flag, for a CPU GEMM
        assert spy.seen[1] == flags
        assert (torch.backends.mkldnn.matmul.fp32_precision,
                torch.backends.cuda.matmul.fp32_precision) == flags
    finally:
        torch.set_float32_matmul_precision(before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_tf32_cannot_change_the_emulated_products_on_cuda():
    """With TF32 on, an FP32 GEMM of FP8 locals (FP32 block scales: up to 24 significant bits
    per product) computes the FP64 products rounded once to FP32 per term, not TF32's."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(64, 256, device="cuda", generator=g)
    w = torch.randn(32, 256, device="cuda", generator=g)
    spec = QuantSpec("fp8_e4m3", block=(1, 128))
    a = Parts(*Backend().operand(x, spec), True)
    b = Parts(*Backend().operand(w, spec), True).T
    torch.set_float32_matmul_precision("high")
    try:
        y = gemm(a, b, torch.float32)
    finally:
        torch.set_float32_matmul_precision("highest")
    exact = (a.local.double() @ b.local.double())
    # FP32 accumulation of K terms: |y - exact| <= K u sum|a||b|; TF32 errs at 2^-11 per term
    bound = 256 * 2.0 ** -24 * (a.local.double().abs() @ b.local.double().abs())
    assert ((y.double() - exact).abs() <= bound).all()
