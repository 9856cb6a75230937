"""What to quantize how: ``QuantSpec`` (static, hashable) and ``Stream`` (runtime ids).

A spec is everything that shapes the computation: format, block layout, rounding, RHT and
scale rules. It is frozen and hashable, so the compiled path caches one graph per spec. What
changes every call (the SR seed, the layer/step/GEMM/operand ids that pick the random bits and
RHT signs) is a ``Stream``, passed as runtime tensors so no step triggers a recompile.

Every bad value fails here, naming the field and the allowed values. The module is plain
Python, as are the closed sets below that the arithmetic modules validate against, so a config
is checked without importing torch (lazy.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

FORMATS = ("nvfp4", "mxfp4", "fp8_e4m3", "fp8_e5m2", "bf16")
FP4_FORMATS = ("nvfp4", "mxfp4")
DEFAULT_BLOCK = {"nvfp4": (1, 16), "mxfp4": (1, 32), "fp8_e4m3": None, "fp8_e5m2": None,
                 "bf16": None}
ROUNDINGS = ("rne", "sr", "ms_eden")
AMAX_SCOPES = ("tensor", "row")
SR_MODES = ("hw8", "exact")
SIGN_POLICIES = ("none", "fixed", "per_layer", "per_step", "per_call")   # hadamard.py
ORDERS = ("te", "te_v2_8", "torchao")          # NVFP4 scale arithmetic, nvfp4.py
E8M0_MODES = ("ceil", "floor", "even")          # MXFP4 scale rounding, scales.py
ERRORS = ("mae", "mse")                         # 4/6 scale selection, four_over_six.py
LIMITS = (448, 256)   # the global E4M3 limit L: TE's 448, or 256 (TE's 4/6 default)


def check_size(d: int) -> None:
    """A Hadamard size: a power of two in 2..256."""
    if d < 2 or d > 256 or d & (d - 1):
        raise ValueError(f"Hadamard size must be a power of two in 2..256, got {d}")


@dataclass(frozen=True)
class Layout:
    """Where the scales go. kind: "1d" | "2d" | "tensor"; axis is used by "1d" only."""

    kind: str
    size: int = 0
    axis: int = -1

    def __post_init__(self):
        if self.kind not in ("1d", "2d", "tensor"):
            raise ValueError(f"block layout kind must be 1d, 2d or tensor, got {self.kind!r}")
        if self.kind != "tensor" and self.size < 1:
            raise ValueError(f"block size must be positive, got {self.size}")

    @staticmethod
    def from_block(block: tuple[int, int] | int | None, axis: int = -1) -> Layout:
        """(1, b) -> 1D along axis; (b, 1) -> 1D along dim -2; (b, b) -> 2D tile; None -> tensor."""
        if block is None:
            return Layout("tensor")
        if isinstance(block, int):
            return Layout("1d", block, axis)
        r, c = block
        if r == 1:
            return Layout("1d", c, axis)
        if c == 1:
            return Layout("1d", r, -2)
        if r == c:
            return Layout("2d", r)
        raise ValueError(f"block must be (1, b), (b, 1) or (b, b), got {block}")

    @property
    def block(self) -> tuple[int, int] | None:
        return {"1d": (1, self.size), "2d": (self.size, self.size), "tensor": None}[self.kind]


def _choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(map(str, allowed))}")


@dataclass(frozen=True)
class RHTSpec:
    """Random Hadamard transform along the block axis before quantizing (hadamard.py)."""

    size: int = 16
    signs: str = "fixed"
    seed: int = 0

    def __post_init__(self):
        check_size(self.size)
        _choice("rht.signs", self.signs, SIGN_POLICIES)


@dataclass(frozen=True)
class Stream:
    """Ids that select random bits and RHT signs. Quantizing the same tensor with the same
    seed and stream gives the same bytes on every backend and machine. call: the
    micro-batch's slot in the step's global batch (under DDP, rank and micro-batch
    together), so that data-parallel ranks draw independent bits."""

    layer: int = 0
    step: int = 0
    gemm: int = 0
    operand: int = 0
    call: int = 0

    def ids(self) -> tuple[int, ...]:
        """The ids mixed into the SR key (``rng.stream_key``)."""
        return (self.layer, self.step, self.gemm, self.operand, self.call)


@dataclass(frozen=True)
class QuantSpec:
    """A quantizer.

    fmt: nvfp4 | mxfp4 | fp8_e4m3 | fp8_e5m2 | bf16 (identity).
    block: (1, b) 1D along ``axis``; (b, 1) 1D along dim -2; (b, b) 2D tile over the last two
        dims; None per tensor (FP8 only). "default": nvfp4 (1, 16), mxfp4 (1, 32), fp8 None.
    rounding: rne | sr (FP4 elements only) | ms_eden (Quartet II's unbiased rounding: RNE
        elements, an EDEN correction per RHT group on stochastically rounded E4M3 scales;
        NVFP4 with an RHT whose size is a multiple of 16, ms_eden.py); sr_mode: hw8 (8
        random bits, Blackwell cvt.rs) | exact (unbiased). order: NVFP4 scale arithmetic te |
        te_v2_8 | torchao.
    mx_scale: MXFP4 E8M0 rounding ceil | floor | even. pow2_scales: FP8 power-of-two scales.
    rht: an RHTSpec (or its size as an int) applied along the block axis first; 1D only.
    four_over_six: NVFP4 4/6 block-scale selection by "mae" or "mse" (four_over_six.py);
        None: the standard scale. e4m3_limit: the global E4M3 limit L, 448 | 256 (None: 256
        with 4/6, as TE, and with ms_eden, its headroom; 448 otherwise).
    amax: NVFP4's FP32 scale per "tensor" (the paper) or per "row" (TE's row-scaled NVFP4:
        one amax per row of 1x16 blocks along the last dim, RNE, no RHT). The amax is then
        stored as [..., 1] (x.shape[:-1] + (1,)) and scales the GEMM output per row.
    """

    fmt: str = "nvfp4"
    block: tuple[int, int] | None | str = "default"
    axis: int = -1
    rounding: str = "rne"
    sr_mode: str = "hw8"
    order: str = "te"
    mx_scale: str = "ceil"
    pow2_scales: bool = False
    rht: RHTSpec | int | None = None
    four_over_six: str | None = None
    e4m3_limit: int | None = None
    amax: str = "tensor"
    layout: Layout = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        _choice("fmt", self.fmt, FORMATS)
        _choice("rounding", self.rounding, ROUNDINGS)
        _choice("sr_mode", self.sr_mode, SR_MODES)
        _choice("order", self.order, ORDERS)
        _choice("mx_scale", self.mx_scale, E8M0_MODES)
        block = DEFAULT_BLOCK[self.fmt] if self.block == "default" else self.block
        if isinstance(block, list):
            block = tuple(block)
        object.__setattr__(self, "block", block)
        layout = Layout.from_block(block, self.axis)
        if layout.kind != "tensor" and layout.size & (layout.size - 1):
            raise ValueError(f"block={block}: block sizes must be powers of two")
        if self.fmt in FP4_FORMATS and layout.kind == "tensor":
            raise ValueError(f"fmt={self.fmt} needs blocks, e.g. block=(1, 16); got block=None")
        if self.rounding == "sr" and self.fmt not in FP4_FORMATS:
            raise ValueError(f"rounding='sr' is implemented for FP4 elements only, not {self.fmt}")
        if isinstance(self.rht, int):
            object.__setattr__(self, "rht", RHTSpec(size=self.rht))
        if self.rht is not None and layout.kind != "1d":
            raise ValueError("rht needs 1D blocks: weights with 2D tiles are never transformed "
                             "(paper Sec. 4.3)")
        object.__setattr__(self, "layout", layout)
        self._check_four_over_six()
        self._check_row_amax()

    def _check_ms_eden(self) -> None:
        """MS-EDEN corrects whole Hadamard groups of 16-element NVFP4 blocks."""
        problem = ("fmt=" + self.fmt if self.fmt != "nvfp4" else
                   f"block={self.block}" if self.layout.kind != "1d" or self.layout.size != 16
                   else "rht=None" if self.rht is None else
                   f"rht={self.rht.size}" if self.rht.size % 16 else
                   f"order={self.order}" if self.order != "te" else
                   f"four_over_six={self.four_over_six}" if self.four_over_six else None)
        if problem:
            raise ValueError(f"rounding='ms_eden' with {problem}: MS-EDEN is for NVFP4 with 1x16 "
                             "blocks after an RHT of 16, 32, ... 256 points (its correction "
                             "groups), order=te, without 4/6")

    def _check_row_amax(self) -> None:
        """A per-row amax where TE allows it: NVFP4, 1D blocks along the last dim, RNE."""
        _choice("amax", self.amax, AMAX_SCOPES)
        if self.amax == "tensor":
            return
        problem = ("fmt=" + self.fmt if self.fmt != "nvfp4" else
                   f"block={self.block}" if self.layout.kind != "1d" else
                   f"axis={self.axis}" if self.axis != -1 else
                   "rounding=sr" if self.rounding == "sr" else
                   f"rht={self.rht.size}" if self.rht is not None else
                   f"order={self.order}" if self.order == "torchao" else None)
        if problem:
            raise ValueError(f"amax='row' with {problem}: a per-row amax is for NVFP4 with 1D "
                             "blocks along the last dim (axis=-1), round-to-nearest, no RHT, "
                             "order te or te_v2_8 (TE's row-scaled NVFP4); drop one of the two")

    def _check_four_over_six(self) -> None:
        """4/6 where TE allows it: NVFP4, 16-element blocks or tiles, RNE, no RHT."""
        limit = self.e4m3_limit
        headroom = bool(self.four_over_six) or self.rounding == "ms_eden"
        if limit is None:
            object.__setattr__(self, "e4m3_limit", 256 if headroom else 448)
        else:
            _choice("e4m3_limit", limit, LIMITS)
        if self.rounding == "ms_eden":
            self._check_ms_eden()
        if self.four_over_six is None:
            if self.e4m3_limit != 448 and not headroom:
                raise ValueError(f"e4m3_limit={limit} is for 4/6 scale selection and ms_eden "
                                 f"only; set four_over_six=mae (or mse), or leave "
                                 f"e4m3_limit=448")
            return
        _choice("four_over_six", self.four_over_six, ERRORS)
        problem = ("fmt=" + self.fmt if self.fmt != "nvfp4" else
                   f"block={self.block}" if self.layout.size != 16 else
                   "rounding=sr" if self.rounding == "sr" else
                   f"rht={self.rht.size}" if self.rht is not None else
                   f"order={self.order}" if self.order != "te" else None)
        if problem:
            raise ValueError(f"four_over_six={self.four_over_six!r} with {problem}: 4/6 is for "
                             "NVFP4 with 1x16 blocks or 16x16 tiles, round-to-nearest, no RHT, "
                             "and its own scale arithmetic (order=te); drop one of the two")

    @property
    def bf16_exact(self) -> bool:
        """Whether BF16 holds this quantizer's ``local`` (element value x block scale) exactly:
        FP4, an E2M1 value (2 significant bits) times an E4M3 (4 bits) or E8M0 scale, within
        fp32's exponent range. FP8 locals carry fp32 scales."""
        return self.fmt in FP4_FORMATS

