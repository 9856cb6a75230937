"""Number formats: the executable specification of nvfp4-lab's numerics.

What the paper prescribes ("Pretraining Large Language Models with NVFP4", arXiv 2509.25149):
every GEMM of a quantized linear layer Y = X W^T takes FP4 operands. The three GEMMs
(paper Fig. 5; docs/experiments.md, The recipe) are

    Fprop  Y  = X  . W^T    X: 1x16 blocks along in-features, RNE; W: 16x16 tiles, RNE
    Dgrad  dX = dY . W      dY: 1x16 along out-features, stochastic rounding; W as in Fprop
    Wgrad  dW = dY^T . X    both 1x16 along tokens after a 16-point random Hadamard
                            transform; dY with SR, X with RNE

This package computes each of those operands exactly as FP4 hardware (and Transformer
Engine's reference quantizer) would: the same E2M1 codes, the same E4M3/E8M0 scale bytes, the
same amax. It is pure PyTorch (no nn.Module, no training code), runs on CPU and CUDA, and is
what the QuantLinear layer, the Triton kernels and the tests compare against.

Modules, one concept each:
    e2m1      FP4 elements: RNE and stochastic rounding, codes, nibble packing
    scales    E4M3 and E8M0 scale encodings (bit-exact, no log2)
    blocks    1D blocks along any axis, 2D tiles, per-tensor; padding
    nvfp4     two-level NVFP4 scaling (TE >= 2.14 ordering; older orderings as options)
    four_over_six  NVFP4 with a per-block choice of the amax mapped to 6 or to 4 (TE's 4/6)
    ms_eden   Quartet II's unbiased rounding: RNE, EDEN correction, SR of the E4M3 scales
    mxfp4     MXFP4 with ceil / floor / even E8M0 scales
    fp8       FP8 E4M3/E5M2, per tensor or per block (the paper's FP8 baseline)
    hadamard  random Hadamard transforms with seeded sign policies
    rng       counter-based random bits shared with the Triton kernels
    spec      QuantSpec / RHTSpec / Stream / Layout: what to quantize how, validated;
              the closed sets, torch-free
    qtensor   the storage form and its decoder
    quantizer quantize() and fake_quantize(): the pipeline (compiled copies: quant/compiled.py)

What is done differently from the references, and why:
* Non-finite input is defined: a block holding NaN or Inf gets a NaN scale and decodes to NaN
  (TE would saturate an Inf to 6). The tensor amax is taken over the finite blocks.
* Any shape quantizes: partial blocks are zero-padded and the padding stripped again
  (TE and torchao require multiples of 16 or 128).
* The RHT size (2..256) and its sign policy are configurable and seeded; the paper's setting
  (16, one fixed vector, TE's) is the default.
* Stochastic rounding draws counter-based random bits from (seed, stream ids, element index),
  so it is reproducible across backends, machines and resumes; both the 8-bit hardware
  semantics and an unbiased mode are offered.
"""
from ..lazy import by_module, exports

_NAMES = by_module({
    "e2m1": "FP4_MAX GRID",
    "hadamard": "hadamard_matrix rht sign_vector",
    "qtensor": "QTensor",
    "quantizer": "fake_quantize fake_quantize_parts make_spec quantize",
    "spec": "FORMATS SIGN_POLICIES Layout QuantSpec RHTSpec Stream",
})
__getattr__, __dir__ = exports(__name__, _NAMES)
__all__ = sorted(_NAMES)
