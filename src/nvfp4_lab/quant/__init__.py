"""Quantized training: the paper's recipe as a linear layer with per-GEMM control.

A linear layer Y = X W^T runs three GEMMs per step, and the paper's findings are about which
operand of which GEMM gets which treatment (paper Fig. 5; docs/experiments.md, The recipe):

    Fprop  Y  = X . W^T    X 1x16 RNE along in-features;  W 16x16 tiles, RNE
    Dgrad  dX = dY . W     dY 1x16 along out-features, stochastic rounding;  W: Fprop's tiles,
                           transposed, not re-quantized
    Wgrad  dW = dY^T . X   both 1x16 along tokens after a 16-point random Hadamard transform;
                           dY with SR, X with RNE

Everything else stays high precision (docs/experiments.md, High precision): embeddings, the LM
head, norms, the attention BMMs and softmax; master weights, weight gradients and optimizer
state are FP32; a few blocks at the end (about 15-20% of the linear layers) are not quantized
at all.

The recipe (``recipe.py``) is the set of axes the paper ablates, each a field:

    format          bf16 | fp8 | mxfp4 | nvfp4                      E03, App. A.1
    weight_blocks   1d | 1d_same_dim | 2d; act_blocks, grad_blocks  E05, E11
    rht             {gemms, size, signs, seed}                      E05, E08, E09, E10
    sr, sr_mode     which operands round stochastically             E02, E05, E07
    four_over_six   {operands, error, e4m3_limit}: 4/6 block scales  beyond the paper (TE)
    row_scaled      operands with one amax per row                  beyond the paper (TE)
    ms_eden         operands rounded by MS-EDEN                      beyond (Quartet II)
    quantize        which operands are quantized at all             E04, E11
    high_precision  {first, last, names}: blocks/layers kept BF16   E02, E05, E06
    switch          {at_step | at_fraction, passes}: BF16 late on   E04

``presets.py`` names the paper's recipes (nvfp4, nvfp4_base, mxfp4, fp8, bf16) and
the later ones (nvfp4_4over6, nvfp4_row_scaled, quartet_ii).
``operands.py`` names the six GEMM operands and their groups, once.
``operand_plan(recipe)`` (``plan.py``) turns a recipe into six operand quantizers; ``QuantLinear``
(``linear.py``) executes them through the autograd Function of ``gemm.py``, which multiplies
exactly representable operands in FP32 and applies the tensor scales to the output, as a
block-scaled tensor core does. ``convert(model, recipe)`` swaps the chosen layers and reports
what each got. ``backends.py`` says who quantizes (reference, compiled, triton) and checks a
fast backend against the reference before it is trusted. ``stats.py`` measures what the
quantizers did to each operand, for logging.

What is done differently from the paper and Transformer Engine, and why:
* The GEMM is emulated: matmuls of exactly representable operands with FP32 accumulation
  (BF16 inputs on CUDA, where FP4 operands are exact in BF16; FP32 elsewhere). This is the
  hardware's arithmetic up to the order of FP32 sums; it runs on any CPU or GPU.
* Per-operand control goes beyond TE's three switches (RHT, SR, 2D on or off): any operand
  may round stochastically or stay unquantized, and the same-dim 1D option of E11, which
  tensor cores cannot run, is available for simulation.
* The random bits of SR and the RHT signs are keyed by (seed, layer, step, micro-batch,
  GEMM, operand) instead of a global generator, so runs are reproducible and resumable.
"""
from ..lazy import by_module, exports

_NAMES = by_module({
    "backends": "Backend BackendError make_backend resolve self_test",
    "converter": "Report convert find_blocks layer_stats quant_layers quant_state",
    "linear": "QuantLinear QuantState",
    "plan": "Operand operand_plan switched_plan token_chunk",
    "presets": "PRESETS preset",
    "operands": "GROUPS OPERANDS OPS Gemm GemmOperand",
    "recipe": "FourOverSix HighPrecision Recipe RHTConfig Switch from_dict to_dict",
})
__getattr__, __dir__ = exports(__name__, _NAMES)
__all__ = sorted(_NAMES)
