"""QuantLinear's three GEMMs, bit for bit: against nn.Linear and against formats/ by hand.

    Fprop  Y  = X . W^T     Dgrad  dX = dY . W     Wgrad  dW = dY^T . X

A quantized GEMM is emulated as FP32 matmuls of the "local" operands (element value x block
decode scale, exact for FP4), times TE's qgemm alpha fp32(A_x * A_w) / 2688^2 (written out
here, not imported), rounded once to the compute dtype (``quant/gemm.py``). The hand
computations below rebuild every operand from ``formats.quantize`` (the QTensor fields:
codes, block scales, amax) or from ``formats.fake_quantize_parts``, with quantizer specs
written out here from the paper's recipes (not read from ``operand_plan``), the SR stream

    Stream(layer=index, step, gemm=0/1/2 for fprop/dgrad/wgrad, operand=0 for X or dY and
           1 for W or the Wgrad X, call=slot)

and the RHT signs ``sign_vector(size, policy, rht.seed, index, step, gemm + 3 * slot)``.
The layer's results must equal them with torch.equal. Layer index, seed, step and slot are
all non-zero so that a stream or sign id taken from the wrong place changes the bits (the
sensitivity tests check that it does).
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from nvfp4_lab.formats import (
    QTensor,
    QuantSpec,
    RHTSpec,
    Stream,
    fake_quantize_parts,
    quantize,
    sign_vector,
)
from nvfp4_lab.formats.hadamard import rht_dim
from nvfp4_lab.quant import Backend, HighPrecision, QuantLinear, QuantState, Recipe, preset

SEED, INDEX, STEP, SLOT = 11, 3, 7, 2
GEMM_ID = {"fprop": 0, "dgrad": 1, "wgrad": 2}
BF16 = torch.bfloat16

# --- the quantizer of every operand of each preset, written from the paper's recipes ------
# A string value means "reuses that operand's quantization" (2D weight tiles).


def _fp4(fmt: str, b: int, rht: RHTSpec | None, weights: str = "2d", sr: bool = True,
         four6: str | None = None, x_rows: bool = False):
    """four6: the 4/6 error metric of the forward operands (fprop.x and the weights);
    x_rows: fprop.x with one amax per row."""
    def spec(block, axis, rounding="rne", rht=None, four_over_six=None, amax="tensor"):
        return QuantSpec(fmt, block=block, axis=axis, rounding=rounding, rht=rht,
                         four_over_six=four_over_six, amax=amax)
    grad = "sr" if sr else "rne"
    table = {
        "fprop.x": spec((1, b), -1, four_over_six=four6, amax="row" if x_rows else "tensor"),
        "dgrad.dy": spec((1, b), -1, grad),
        "wgrad.dy": spec((1, b), 0, grad, rht),
        "wgrad.x": spec((1, b), 0, "rne", rht),
    }
    if weights == "2d":
        table.update({"fprop.w": spec((b, b), -1, four_over_six=four6), "dgrad.w": "fprop.w"})
    else:
        table.update({"fprop.w": spec((1, b), -1), "dgrad.w": spec((1, b), 0)})
    return table


def _fp8():
    def spec(block, axis):
        return QuantSpec("fp8_e4m3", block=block, axis=axis)
    return {"fprop.x": spec((1, 128), -1), "fprop.w": spec((128, 128), -1),
            "dgrad.dy": spec((1, 128), -1), "dgrad.w": "fprop.w",
            "wgrad.dy": spec((1, 128), 0), "wgrad.x": spec((1, 128), 0)}


PER_CALL = {"gemms": ["wgrad"], "size": 16, "signs": "per_call", "seed": 5}


def _quartet_ii():
    """Quartet II: RNE forward; MS-EDEN on the four backward operands after RHT 128."""
    rht = RHTSpec(128, "per_call")
    def spec(axis, rounding="rne", rht=None):
        return QuantSpec("nvfp4", block=(1, 16), axis=axis, rounding=rounding, rht=rht)
    return {"fprop.x": spec(-1), "fprop.w": spec(-1),
            "dgrad.dy": spec(-1, "ms_eden", rht), "dgrad.w": spec(0, "ms_eden", rht),
            "wgrad.dy": spec(0, "ms_eden", rht), "wgrad.x": spec(0, "ms_eden", rht)}
CASES = {  # name: (recipe, hand-written operand quantizers)
    "nvfp4": (preset("nvfp4", high_precision=HighPrecision()), _fp4("nvfp4", 16, RHTSpec(16))),
    "nvfp4_base": (preset("nvfp4_base"), _fp4("nvfp4", 16, None, weights="1d", sr=False)),
    "mxfp4": (preset("mxfp4", high_precision=HighPrecision()), _fp4("mxfp4", 32, RHTSpec(32))),
    "fp8": (preset("fp8", high_precision=HighPrecision()), _fp8()),
    # 4/6 on the forward operands: their amaxes are scaled with the limit L = 256
    "nvfp4_4over6": (preset("nvfp4_4over6", high_precision=HighPrecision()),
                     _fp4("nvfp4", 16, RHTSpec(16), four6="mae")),
    # MS-EDEN's scales use the headroom limit L = 256 in every backward GEMM's alpha
    "quartet_ii": (preset("quartet_ii"), _quartet_ii()),
    # one amax per token for X: Fprop's output row i is scaled by A_x[i] A_w / 2688^2
    "nvfp4_row_scaled": (preset("nvfp4_row_scaled", high_precision=HighPrecision()),
                         _fp4("nvfp4", 16, RHTSpec(16), x_rows=True)),
    # signs that depend on (layer, step, call): pins down the RHT call id gemm + 3 * slot
    "nvfp4_per_call_signs": (preset("nvfp4", high_precision=HighPrecision(), rht=PER_CALL),
                             _fp4("nvfp4", 16, RHTSpec(16, "per_call", 5))),
}


# --- helpers ----------------------------------------------------------------------------------

def randn(*shape: int, seed: int) -> torch.Tensor:
    """Gaussian data with row magnitudes spread over ~6 binades, so block scales differ."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * torch.exp(torch.randn(*shape[:-1], 1, generator=g))


def make_linear(n: int, k: int, seed: int = 0) -> nn.Linear:
    lin = nn.Linear(k, n, bias=False)
    with torch.no_grad():
        lin.weight.copy_(randn(n, k, seed=seed) * 0.1)
    return lin


def quant_layer(lin: nn.Linear, recipe: Recipe, *, step: int = STEP,
                max_steps: int | None = None) -> QuantLinear:
    """A QuantLinear on a copy of ``lin``'s weight (fresh .grad), reference backend."""
    return QuantLinear.from_linear(
        copy.deepcopy(lin), recipe=recipe, index=INDEX, backend=Backend(),
        state=QuantState(seed=SEED, step=step, slot=SLOT, max_steps=max_steps))


def run(module: nn.Module, x: torch.Tensor, dy: torch.Tensor, amp: bool):
    """One forward and backward: (y, x.grad, weight.grad)."""
    x = x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=BF16, enabled=amp):
        y = module(x)
    y.backward(dy.to(y.dtype))
    return y.detach(), x.grad, module.weight.grad


def stream(op: str) -> Stream:
    gemm, slot = op.split(".")
    return Stream(layer=INDEX, step=STEP, gemm=GEMM_ID[gemm],
                  operand=0 if slot == "dy" or op == "fprop.x" else 1, call=SLOT)


def signs(op: str, spec: QuantSpec) -> torch.Tensor | None:
    if spec.rht is None:
        return None
    r = spec.rht
    call = GEMM_ID[op.split(".")[0]] + 3 * SLOT
    return sign_vector(r.size, r.signs, r.seed, INDEX, STEP, call)


def qtensor_parts(q: QTensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(local, amax) from the storage form: element values (from the codes for FP4) times
    block scales decoded here, and NVFP4's amax."""
    v, s, spec = q.values(), q.scales, q.spec  # canonical: blocked axis last
    if spec.fmt == "nvfp4":
        s = s.float()
    elif spec.fmt == "mxfp4":  # E8M0 byte e -> 2^(e - 127): e is the fp32 biased exponent
        assert 0 < int(s.view(torch.uint8).min()) and int(s.view(torch.uint8).max()) < 255
        s = (s.view(torch.uint8).to(torch.int32) << 23).view(torch.float32)
    r, c = spec.block
    if r == c:  # 2D tiles: scales [R/b, C/b]
        local = v * s.repeat_interleave(r, 0).repeat_interleave(c, 1)
    else:       # 1D: scales [..., L/b], then the blocked axis back in place
        local = (v * s.repeat_interleave(c, -1)).movedim(-1, spec.axis)
    local = local[tuple(slice(0, n) for n in q.shape)].contiguous()
    return local, (q.amax if spec.fmt == "nvfp4" else None)


def hand_operand(t: torch.Tensor, spec: QuantSpec, via: str, *, stream: Stream,
                 signs: torch.Tensor | None):
    """(local, amax, L): L the global E4M3 limit, 256 for a 4/6 operand (TE's default)."""
    limit = 256 if spec.four_over_six or spec.rounding == "ms_eden" else 448
    if via == "parts":
        return (*fake_quantize_parts(t, spec, seed=SEED, stream=stream, signs=signs), limit)
    return (*qtensor_parts(quantize(t, spec, seed=SEED, stream=stream, signs=signs)), limit)


def hand_gemm(a, b, cd: torch.dtype) -> torch.Tensor:
    """a.local @ b.local in fp32, times alpha = fp32(A_a * A_b) / (6 L_a * 6 L_b) (TE's qgemm;
    L = 448 unless given as a third element), to cd."""
    (la, aa, *l_a), (lb, ab, *l_b) = a, b
    y = la.float() @ lb.float()
    assert (aa is None) == (ab is None)
    if aa is not None:
        ranges = 6.0 * (l_a or [448])[0] * 6.0 * (l_b or [448])[0]
        y = y * ((aa * ab) / torch.tensor(ranges))
    return y.to(cd)


def t(parts):
    return parts[0].t(), *parts[1:]


def hand_layer(table: dict, w: torch.Tensor, x2: torch.Tensor, dy2: torch.Tensor,
               cd: torch.dtype, via: str = "qtensor", **override):
    """(Y, dX, dW) of the three GEMMs by hand; ``override`` maps an operand to (stream, signs)
    used instead of the right ones."""
    def op(tensor, name):
        s, g = override.get(name, (stream(name), signs(name, table[name])))
        return hand_operand(tensor, table[name], via, stream=s, signs=g)

    fx, fw = op(x2, "fprop.x"), op(w, "fprop.w")
    y = hand_gemm(fx, t(fw), cd)
    dgrad_w = fw if table["dgrad.w"] == "fprop.w" else op(w, "dgrad.w")
    dx = hand_gemm(op(dy2, "dgrad.dy"), dgrad_w, cd).float()
    dw = hand_gemm(t(op(dy2, "wgrad.dy")), op(x2, "wgrad.x"), cd).float()
    return y, dx, dw


def data(name: str = "nvfp4", batch: tuple[int, ...] = (2, 64)):
    """(nn.Linear, X [*batch, K], dY [*batch, N]); FP8's 1x128 blocks get N = K = 128."""
    n, k = (128, 128) if name in ("fp8", "quartet_ii") else (64, 128)
    return make_linear(n, k), randn(*batch, k, seed=1), randn(*batch, n, seed=2)


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float((a.double() - ref.double()).norm() / ref.double().norm())


# --- 1. an unquantized recipe is nn.Linear --------------------------------------------------

@pytest.mark.parametrize("shape", [(128, 128), (2, 64, 128)], ids=["2d", "3d"])
@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "bf16_autocast"])
def test_bf16_recipe_is_nn_linear_bit_for_bit(amp, shape):
    lin = make_linear(64, 128)
    x, dy = randn(*shape, seed=1), randn(*shape[:-1], 64, seed=2)
    got = run(quant_layer(lin, preset("bf16")), x, dy, amp)
    want = run(copy.deepcopy(lin), x, dy, amp)
    for name, a, b in zip(("y", "x.grad", "weight.grad"), got, want):
        assert a.dtype == b.dtype, name
        assert torch.equal(a, b), name
    assert got[0].dtype == (BF16 if amp else torch.float32)


def test_bias_under_autocast_keeps_nn_linear_output_dtype():
    lin = nn.Linear(128, 64, bias=True)
    x = randn(128, 128, seed=1)
    with torch.autocast("cpu", dtype=BF16):
        want = lin(x)
        got = QuantLinear.from_linear(copy.deepcopy(lin), recipe=preset("bf16"))(x)
    assert want.dtype == BF16
    assert got.dtype == want.dtype


# --- 2. every GEMM of every preset equals the hand computation ------------------------------

@pytest.mark.parametrize("via", ["qtensor", "parts"])
@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "bf16_autocast"])
@pytest.mark.parametrize("name", list(CASES))
def test_each_gemm_equals_hand_computation(name, amp, via):
    recipe, table = CASES[name]
    lin, x, dy = data(name)
    y, gx, gw = run(quant_layer(lin, recipe), x, dy, amp)
    cd = BF16 if amp else torch.float32
    x2, dy2 = x.reshape(-1, x.shape[-1]).to(cd), dy.reshape(-1, dy.shape[-1]).to(cd)
    want_y, want_dx, want_dw = hand_layer(table, lin.weight.detach(), x2, dy2, cd, via)
    assert y.dtype == cd and gx.dtype == gw.dtype == torch.float32
    assert torch.equal(y, want_y.reshape(y.shape)), "Fprop"
    assert torch.equal(gx, want_dx.reshape(x.shape)), "Dgrad"
    assert torch.equal(gw, want_dw), "Wgrad"
    # the quantization is not a no-op: the high-precision layer gives other numbers
    hp = run(copy.deepcopy(lin), x, dy, amp)
    assert not any(torch.equal(a, b) for a, b in zip((y, gx, gw), hp))


def test_qtensor_and_fake_quantize_parts_agree_on_every_operand():
    """The two hand routes are independent decoders of one quantization; they must agree."""
    lin, x, dy = data()
    x2, dy2 = x.reshape(-1, 128), dy.reshape(-1, 64)
    for op, spec in CASES["nvfp4"][1].items():
        if isinstance(spec, str):
            continue
        src = {"x": x2, "w": lin.weight.detach(), "dy": dy2}[op.split(".")[1]]
        a = hand_operand(src, spec, "qtensor", stream=stream(op), signs=signs(op, spec))
        b = hand_operand(src, spec, "parts", stream=stream(op), signs=signs(op, spec))
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), op


# Each wrong id changes the bits of the GEMM that uses it: the equality above has teeth.
WRONG = {
    "dgrad.dy call=0": ("dgrad.dy", Stream(INDEX, STEP, 1, 0, 0), None, 1),
    "dgrad.dy gemm=2": ("dgrad.dy", Stream(INDEX, STEP, 2, 0, SLOT), None, 1),
    "dgrad.dy layer=0": ("dgrad.dy", Stream(0, STEP, 1, 0, SLOT), None, 1),
    "wgrad.dy step+1": ("wgrad.dy", Stream(INDEX, STEP + 1, 2, 0, SLOT), None, 2),
    "wgrad.dy operand=1": ("wgrad.dy", Stream(INDEX, STEP, 2, 1, SLOT), None, 2),
    "wgrad signs call=micro": ("wgrad.x", Stream(INDEX, STEP, 2, 1, SLOT), SLOT, 2),
}


@pytest.mark.parametrize("wrong", list(WRONG))
def test_hand_computation_with_a_wrong_id_differs(wrong):
    op, bad_stream, sign_call, gemm = WRONG[wrong]
    recipe, table = CASES["nvfp4_per_call_signs"]
    lin, x, dy = data()
    got = run(quant_layer(lin, recipe), x, dy, False)
    spec = table[op]
    bad_signs = signs(op, spec) if sign_call is None else sign_vector(
        16, "per_call", 5, INDEX, STEP, sign_call)
    override = {op: (bad_stream, bad_signs)}
    if sign_call is not None:  # both Wgrad operands share the transform
        override["wgrad.dy"] = (stream("wgrad.dy"), bad_signs)
    x2, dy2 = x.reshape(-1, 128), dy.reshape(-1, 64)
    want = hand_layer(table, lin.weight.detach(), x2, dy2, torch.float32, **override)
    right = hand_layer(table, lin.weight.detach(), x2, dy2, torch.float32)
    assert torch.equal(got[gemm], right[gemm].reshape(got[gemm].shape))
    assert not torch.equal(got[gemm], want[gemm].reshape(got[gemm].shape))


# --- 3. 2D weights: Fprop and Dgrad see the same values -------------------------------------

def test_2d_weight_is_shared_by_fprop_and_dgrad():
    recipe, table = CASES["nvfp4"]
    lin, x, dy = data(batch=(128,))
    y, gx, _ = run(quant_layer(lin, recipe), x, dy, False)
    w = lin.weight.detach()
    w_q = fake_quantize_parts(w, table["fprop.w"])                # the Fprop operand
    x_q = fake_quantize_parts(x, table["fprop.x"])
    dy_q = fake_quantize_parts(dy, table["dgrad.dy"], seed=SEED, stream=stream("dgrad.dy"))
    assert torch.equal(y, hand_gemm(x_q, t(w_q), torch.float32))
    assert torch.equal(gx, hand_gemm(dy_q, w_q, torch.float32))   # dX = dY_q . W_q
    # a 16x16 tile is blocked along both axes: quantizing W^T gives W_q^T exactly
    wt_q = fake_quantize_parts(w.t().contiguous(), table["fprop.w"])
    assert torch.equal(wt_q[0], w_q[0].t()) and torch.equal(wt_q[1], w_q[1])


def test_1d_weights_are_quantized_along_each_gemms_own_axis():
    recipe = preset("nvfp4", weight_blocks="1d", high_precision=HighPrecision())
    table = _fp4("nvfp4", 16, RHTSpec(16), weights="1d")
    lin, x, dy = data(batch=(128,))
    _, gx, _ = run(quant_layer(lin, recipe), x, dy, False)
    w = lin.weight.detach()
    w_fprop = fake_quantize_parts(w, table["fprop.w"])             # 1x16 along in-features
    w_dgrad = fake_quantize_parts(w, table["dgrad.w"])             # 1x16 along out-features
    assert not torch.equal(w_fprop[0] * w_fprop[1], w_dgrad[0] * w_dgrad[1])
    dy_q = fake_quantize_parts(dy, table["dgrad.dy"], seed=SEED, stream=stream("dgrad.dy"))
    assert torch.equal(gx, hand_gemm(dy_q, w_dgrad, torch.float32))
    assert not torch.equal(gx, hand_gemm(dy_q, w_fprop, torch.float32))


# --- 4. without quantization the Wgrad RHT cancels ------------------------------------------

def test_wgrad_rht_cancels_without_quantization():
    recipe = Recipe(format="bf16", sr=(), rht={"gemms": ["wgrad"], "size": 16})
    lin, x, dy = make_linear(64, 128), randn(256, 128, seed=1), randn(256, 64, seed=2)
    y, gx, gw = run(quant_layer(lin, recipe), x, dy, False)
    hp = run(copy.deepcopy(lin), x, dy, False)
    assert torch.equal(y, hp[0]) and torch.equal(gx, hp[1])  # Fprop and Dgrad untouched
    s = sign_vector(16, "fixed", 0, INDEX, STEP, 2 + 3 * SLOT)
    # the layer multiplies the rotated operands, (dY R)^T (X R) = dY^T R R^T X ...
    assert torch.equal(gw, rht_dim(dy, s, 0).t() @ rht_dim(x, s, 0))
    assert not torch.equal(gw, hp[2])  # ... so it does transform (its rounding shows) ...
    # ... and the rotation cancels up to fp32 rounding. Bound: a rotated element is 4
    # butterfly stages of fp32 adds (the 1/4 normalisation is exact), each rounding once, so it
    # is off by at most ~4u of its chunk's magnitude (u = 2^-24 = 6e-8), ~2.4e-7, in both
    # operands; the fp32 matmul over 256 tokens adds errors of random sign, ~sqrt(256)u = 1e-6
    # relative. Against a float64 reference the total stays well below 2e-6 (measured 1.7e-7,
    # like the plain fp32 dY^T X):
    # 1e-5 is a 5x margin, while any real mismatch of the two rotations is an O(1) error.
    ref = dy.double().t() @ x.double()
    assert rel_err(gw, ref) < 1e-5
    # control: rotating one operand only is far off (independent data: ~sqrt(2))
    assert rel_err(dy.t() @ rht_dim(x, s, 0), ref) > 0.1


# --- 5. the precision switch ----------------------------------------------------------------

SWITCH_AT = 5


def _switch_results(recipe: Recipe, step: int, amp: bool, max_steps: int | None = None):
    """(switched layer, unswitched quantized layer, nn.Linear) results at ``step``."""
    lin, x, dy = data()
    base = recipe.replace(switch={"at_step": None, "at_fraction": None})
    got = run(quant_layer(lin, recipe, step=step, max_steps=max_steps), x, dy, amp)
    quant = run(quant_layer(lin, base, step=step, max_steps=max_steps), x, dy, amp)
    hp = run(copy.deepcopy(lin), x, dy, amp)
    for q, h in zip(quant, hp):  # the two references differ in every result
        assert not torch.equal(q, h)
    return got, quant, hp


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "bf16_autocast"])
@pytest.mark.parametrize("step", [SWITCH_AT - 1, SWITCH_AT, SWITCH_AT + 3])
@pytest.mark.parametrize("passes", ["fwd", "bwd", "both"])
def test_switch_runs_the_switched_passes_as_nn_linear(passes, step, amp):
    recipe = preset("nvfp4", high_precision=HighPrecision(),
                    switch={"at_step": SWITCH_AT, "passes": passes})
    got, quant, hp = _switch_results(recipe, step, amp)
    switched = {"fwd": (True, False, False), "bwd": (False, True, True),
                "both": (True, True, True)}[passes]
    for name, g, q, h, off in zip(("y", "x.grad", "weight.grad"), got, quant, hp, switched):
        want = h if step >= SWITCH_AT and off else q
        assert torch.equal(g, want), name


@pytest.mark.parametrize("step", [4, 5])
def test_fractional_switch_resolves_against_max_steps(step):
    recipe = preset("nvfp4", high_precision=HighPrecision(),
                    switch={"at_fraction": 0.5, "passes": "both"})
    got, quant, hp = _switch_results(recipe, step, False, max_steps=10)  # switch at step 5
    for g, q, h in zip(got, quant, hp):
        assert torch.equal(g, h if step >= 5 else q)


def test_fractional_switch_without_max_steps_raises():
    recipe = preset("nvfp4", high_precision=HighPrecision(),
                    switch={"at_fraction": 0.5, "passes": "both"})
    lin, x, _ = data()
    layer = quant_layer(lin, recipe, step=0, max_steps=None)
    with pytest.raises(ValueError, match=r"train\.max_steps"):
        layer(x)


# --- 6. a forward-only switch keeps the 2D Dgrad weight -------------------------------------

@pytest.mark.parametrize("weight_rounding", ["rne", "sr"])
def test_forward_switch_keeps_the_quantized_2d_dgrad_weight(weight_rounding):
    """After a fwd switch Fprop no longer quantizes W, so Dgrad quantizes it itself, with the
    2D quantizer and the random stream of fprop.w: with SR weights too, dX is the
    unswitched layer's dX bit for bit."""
    sr = ("gradients",) + (("weights",) if weight_rounding == "sr" else ())
    base = preset("nvfp4", high_precision=HighPrecision(), sr=sr)
    recipe = base.replace(switch={"at_step": SWITCH_AT, "passes": "fwd"})
    lin, x, dy = data()
    for step in (SWITCH_AT - 1, SWITCH_AT):
        layer = quant_layer(lin, recipe, step=step)
        got = run(layer, x, dy, False)
        quant = run(quant_layer(lin, base, step=step), x, dy, False)
        hp = run(copy.deepcopy(lin), x, dy, False)
        assert torch.equal(got[1], quant[1])      # the quantized 2D weight, same bits
        assert not torch.equal(got[1], hp[1])
        assert torch.equal(got[0], hp[0] if step >= SWITCH_AT else quant[0])
    # by hand at the switch step: dX = Q(dY) . Q2D(W), W drawn from fprop.w's stream
    w_spec = QuantSpec("nvfp4", block=(16, 16), rounding=weight_rounding)
    dy2 = dy.reshape(-1, 64)
    dy_q = fake_quantize_parts(dy2, CASES["nvfp4"][1]["dgrad.dy"], seed=SEED,
                               stream=Stream(INDEX, SWITCH_AT, 1, 0, SLOT))
    for name, (gemm, operand) in {"fprop.w": (0, 1), "dgrad.w": (1, 1)}.items():
        w_q = fake_quantize_parts(lin.weight.detach(), w_spec, seed=SEED,
                                  stream=Stream(INDEX, SWITCH_AT, gemm, operand, SLOT))
        same = torch.equal(got[1], hand_gemm(dy_q, w_q, torch.float32).reshape(x.shape))
        # RNE ignores the stream; with SR only fprop.w's stream reproduces the bits
        assert same == (name == "fprop.w" or weight_rounding == "rne"), name
