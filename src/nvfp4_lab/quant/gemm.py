"""``QuantGemm``: the autograd Function that owns the three GEMMs of a linear layer.

    Fprop  Y  = X  . W^T   X: [M, K] tokens x in, W: [N, K] out x in  -> Y:  [M, N]
    Dgrad  dX = dY . W     dY: [M, N]                                -> dX: [M, K]
    Wgrad  dW = dY^T . X                                             -> dW: [N, K]

Each operand goes through its own quantizer (``plan.operand_plan``) and becomes
``Parts``: the element values times their block scales (exact: an E2M1 value times an E4M3
or E8M0 scale fits in BF16), plus NVFP4's tensor amax. The GEMM multiplies the parts with
FP32 accumulation, always at full FP32 precision (``full_fp32``), and applies one alpha from
both amaxes to the output (``formats.nvfp4.gemm_alpha``, as TE's GEMM does), which is what a
block-scaled tensor core computes, up to the order of the FP32 sums (paper Eq. 5;
docs/numerics.md, Emulated GEMM). Its output is rounded to the compute dtype (BF16 under
autocast, as in the paper; else the input dtype) and stored in the dtype the caller keeps:
the ``Epilogue``, which the reference runs as torch ops and the triton backend as one kernel
(same bits).

Which matmul: when both operands are BF16 tensors on a GPU (FP4 parts, produced in BF16 there
by ``local_dtype``, and BF16 activations, gradients or weights) a BF16 GEMM with FP32 output
(``torch.mm(..., out_dtype=torch.float32)``, torch >= 2.8, cuBLAS with FP32 accumulation);
otherwise FP32 operands in an FP32 GEMM. The two compute the same products exactly (two values
of at most 8 significant bits multiply exactly in FP32) and accumulate in FP32; only the order
of the sums differs, which no FP32 GEMM library fixes either. The BF16 GEMM reads half the
bytes and runs on the BF16 tensor cores, at several times the FP32 rate. The CPU keeps the
FP32 matmul: there is no BF16 GEMM with FP32 output for it. Inside ``formats.device.cuda_path()``
CPU tensors take the CUDA branches, so that ``quant/launches.py`` can count on a CPU what a
step launches on a GPU; the BF16 GEMM is then computed by the tracer, the CPU having none.

A GEMM whose operands are both high precision runs exactly as ``nn.Linear`` would (same
dtype, same matmuls), so an unquantized recipe, or a layer after its precision switch, is
``nn.Linear`` bit for bit.

What is saved for backward is what backward multiplies: the Wgrad copy of X, quantized along
tokens in forward (as Transformer Engine makes its columnwise copy), stored in BF16 where that
is exact; and the Fprop weight when Dgrad reuses it (2D tiles or same-dim blocks: transposed,
not re-quantized). A 1D Dgrad weight is quantized from the FP32 master in backward.
"""
from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch

from ..formats import QuantSpec
from ..formats.device import on_cuda
from .backends import Backend, Epilogue


class Parts(NamedTuple):
    """A GEMM operand: local [rows, cols] (element x block scale, or the high-precision
    tensor), amax (NVFP4's fp32 0-d tensor amax, [rows, 1] when row-scaled, else None),
    quantized, and the global E4M3 limit its amax was scaled with (448; 256 under 4/6)."""

    local: torch.Tensor
    amax: torch.Tensor | None
    quantized: bool
    limit: int = 448

    @property
    def T(self) -> Parts:
        if self.amax is not None and self.amax.dim():
            raise AssertionError("a row-scaled operand cannot be transposed: its amax would "
                                 "scale the dot-product dim (Recipe.row_scaled refuses this)")
        return self._replace(local=self.local.t())

    def for_saving(self, op) -> Parts:
        """FP4 parts (of Operand ``op``) are exact in BF16: half the memory of FP32."""
        if op.spec is not None and op.spec.bf16_exact:
            return self._replace(local=self.local.to(torch.bfloat16))
        return self


def local_dtype(spec: QuantSpec, device: torch.device) -> torch.dtype:
    """The dtype a quantized operand's local is produced in on ``device``: BF16 for FP4 on
    CUDA (exact, and the BF16 GEMM's input), else FP32."""
    return torch.bfloat16 if on_cuda(device) and spec.bf16_exact else torch.float32


# the flag that lets an FP32 matmul round its inputs: TF32 on CUDA, TF32 or BF16 in oneDNN
_FP32_PRECISION = {"cuda": torch.backends.cuda.matmul, "cpu": torch.backends.mkldnn.matmul}


@contextlib.contextmanager
def full_fp32(device: torch.device):
    """FP32 matmuls on ``device`` at full precision inside the block, whatever the user's
    ``torch.set_float32_matmul_precision`` says; the setting is restored afterwards.

    TF32 keeps 10 mantissa bits of each input: FP4 locals survive it, but FP8 locals (FP32
    block scales) and high-precision operands do not, so a global "high" would silently
    change the emulated products.
    """
    flag = _FP32_PRECISION.get(device.type)
    if flag is None or flag.fp32_precision == "ieee":
        yield
        return
    previous, flag.fp32_precision = flag.fp32_precision, "ieee"
    try:
        yield
    finally:
        flag.fp32_precision = previous


def gemm(a: Parts, b: Parts, out_dtype: torch.dtype, backend: Backend | None = None,
         dtype: torch.dtype | None = None) -> torch.Tensor:
    """a.local [M, K] @ b.local [K, N] -> [M, N] rounded to out_dtype, NVFP4's alpha on the
    output, stored in ``dtype`` (default out_dtype); ``backend`` runs the ``Epilogue``
    (default: the reference's torch ops)."""
    dtype = dtype or out_dtype
    if not (a.quantized or b.quantized):
        return (a.local @ b.local).to(dtype)
    if a.local.dtype == b.local.dtype == torch.bfloat16 and on_cuda(a.local.device):
        y = torch.mm(a.local, b.local, out_dtype=torch.float32)  # exact products, FP32 sums
    else:
        with full_fp32(a.local.device):
            y = a.local.float() @ b.local.float()
    nvfp4 = [p for p in (a, b) if p.amax is not None]
    epilogue = Epilogue(tuple(p.amax for p in nvfp4), tuple(p.limit for p in nvfp4),
                        out_dtype, dtype)
    return (backend or Backend()).epilogue(y, epilogue)


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype nn.Linear would compute in: the autocast dtype if autocast is on."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


class QuantGemm(torch.autograd.Function):
    """y = QuantGemm.apply(x [..., K], weight [N, K], layer, plan) -> [..., N].

    ``layer`` (a QuantLinear) quantizes operands (``layer.operand``), knows the RHT signs and
    collects statistics; ``plan`` is the recipe's operand plan for this step.
    """

    @staticmethod
    def forward(ctx, x, weight, layer, plan):
        cd = compute_dtype(x)
        with torch.autocast(x.device.type, enabled=False):
            x2 = x.reshape(-1, x.shape[-1]).to(cd)  # [M, K]
            layer.check_tokens(x2.shape[0], plan)
            signs_f, signs_w = layer.signs("fprop", plan), layer.signs("wgrad", plan)
            fx, fw, y = _fprop(x2, weight, layer, plan, cd, signs_f)
            if plan["wgrad.x"].reuse:
                wx = fx
            else:
                wx = layer.operand(x2, "wgrad.x", plan, cd, signs_w)
            saved_w = fw if plan["dgrad.w"].reuse else None
            layer.record_stats({"fprop.x": x2, "fprop.w": weight, "wgrad.x": x2},
                               plan, {"fprop": signs_f, "wgrad": signs_w})
        wx = wx.for_saving(plan[plan["wgrad.x"].reuse or "wgrad.x"])
        saved_w = saved_w.for_saving(plan["fprop.w"]) if saved_w else None
        ctx.save_for_backward(weight, wx.local, wx.amax,
                              saved_w.local if saved_w else None,
                              saved_w.amax if saved_w else None,
                              x2 if layer.state.collect_stats else None)
        ctx.flags = (wx.quantized, saved_w.quantized if saved_w else False)
        ctx.limits = (wx.limit, saved_w.limit if saved_w else 448)
        ctx.layer, ctx.plan, ctx.cd, ctx.x_meta = layer, plan, cd, (x.shape, x.dtype)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, dy):
        weight, wx_local, wx_amax, w_local, w_amax, x_hp = ctx.saved_tensors
        layer, plan, cd = ctx.layer, ctx.plan, ctx.cd
        x_shape, x_dtype = ctx.x_meta
        dx = dw = None
        with torch.autocast(dy.device.type, enabled=False):
            dy2 = dy.reshape(-1, dy.shape[-1]).to(cd)  # [M, N]
            signs_d, signs_w = layer.signs("dgrad", plan), layer.signs("wgrad", plan)
            ddy = None
            if ctx.needs_input_grad[0] or plan["wgrad.dy"].reuse:
                ddy = layer.operand(dy2, "dgrad.dy", plan, cd, signs_d)
            if ctx.needs_input_grad[0]:
                if plan["dgrad.w"].reuse:
                    dw_op = Parts(w_local, w_amax, ctx.flags[1], ctx.limits[1])
                else:
                    dw_op = layer.operand(weight, "dgrad.w", plan, cd, signs_d)
                dx = gemm(ddy, dw_op, cd, layer.backend, x_dtype).reshape(x_shape)  # [M, K]
            if ctx.needs_input_grad[1]:
                wdy = ddy if plan["wgrad.dy"].reuse else layer.operand(
                    dy2, "wgrad.dy", plan, cd, signs_w)
                wx = Parts(wx_local, wx_amax, ctx.flags[0], ctx.limits[0])
                # [N, M] @ [M, K] -> [N, K]
                dw = gemm(wdy.T, wx, cd, layer.backend, weight.dtype)
                if x_hp is not None:
                    layer.record_wgrad_error(dw, dy2, x_hp)
            used = {"dgrad.dy": dy2, "dgrad.w": weight} if ctx.needs_input_grad[0] else {}
            if ctx.needs_input_grad[1]:
                used["wgrad.dy"] = dy2
            layer.record_stats(used, plan, {"dgrad": signs_d, "wgrad": signs_w})
        return dx, dw, None, None



def _fprop(x2, weight, layer, plan, cd, signs) -> tuple[Parts, Parts, torch.Tensor]:
    """Fprop's two operands and Y = X . W^T [M, N] (autocast off, x2: [M, K] in ``cd``)."""
    fx = layer.operand(x2, "fprop.x", plan, cd, signs)
    fw = layer.operand(weight, "fprop.w", plan, cd, signs)
    return fx, fw, gemm(fx, fw.T, cd, layer.backend)


def fprop_only(x: torch.Tensor, weight: torch.Tensor, layer, plan) -> torch.Tensor:
    """``QuantGemm.apply`` where no gradient is taken (inference): Fprop alone, the same
    bits, without the operands the backward keeps, so the Wgrad transform's chunks of tokens
    do not constrain the token count."""
    cd = compute_dtype(x)
    with torch.autocast(x.device.type, enabled=False):
        x2 = x.reshape(-1, x.shape[-1]).to(cd)
        y = _fprop(x2, weight, layer, plan, cd, layer.signs("fprop", plan))[2]
    return y.reshape(*x.shape[:-1], y.shape[-1])
