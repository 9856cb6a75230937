"""The Mamba-2 mixer of the paper's hybrid models, in plain PyTorch.

The paper's 8B and 12B models (paper App. A.1-A.2; docs/experiments.md, Models) are mostly
Mamba-2 and FFN blocks: Mamba-2 with 8 groups, state 128, head dim 64, expansion 2, conv window
4. A Mamba-2 block has two linear layers, which are what the recipe quantizes; everything
between them stays in high precision (paper Sec. 4.1):

    u [B, T, D] -> in_proj -> z [di] | xBC [di + 2 G N] | dt [H] | (padding)
    xBC -> causal depthwise conv1d (window K) -> SiLU -> x [H, P] | B [G, N] | C [G, N]
    y = SSD(x, softplus(dt + dt_bias), -exp(A_log), B, C) + D * x        (ssd.py)
    y = RMSNorm per group (y * SiLU(z)) -> out_proj -> [B, T, D]

with di = expand * D inner channels, H = di / P heads of P channels, G groups of heads sharing
B and C, N the state size. The layout and the initialisation (A in [1, 16], dt log-uniform in
[1e-3, 1e-1] through dt_bias, D = 1, the norm gated before normalising, per group) follow
mamba_ssm's ``Mamba2``, the module the Nemotron-H models are built from.

One thing is done differently, and why: ``in_proj``'s output rows are padded with zero rows up
to a multiple of 128 (``PROJ_ALIGN``), as Megatron pads vocabularies. Its natural height,
2 di + 2 G N + H, is rarely a multiple of the formats' blocks (FP8 128x128, RHT up to 128, MXFP4
32) because of the H dt rows; the padded rows start at zero, so their outputs, their gradients
and their Adam updates are exactly zero forever, they never raise an amax, and a dgrad
operand's padded columns quantize to exact zeros. The cost is a few hundred idle rows
(0.4% of the paper 12B's in_proj: 22,688 -> 22,784).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .ssd import ssd_chunked

PROJ_ALIGN = 128


class GatedRMSNorm(nn.Module):
    """RMSNorm of y * SiLU(z) over groups of channels, times a learned gain.

    y, z: [B, T, di] -> [B, T, di]; each of the G groups of di / G channels is normalised on
    its own (mamba_ssm's ``RMSNormGated`` with group_size = di / G, gate before the norm).
    """

    def __init__(self, dim: int, groups: int, eps: float):
        super().__init__()
        self.groups, self.eps = groups, eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        gated = (y.float() * F.silu(z.float())).unflatten(-1, (self.groups, -1))  # [B,T,G,di/G]
        normed = gated * torch.rsqrt(gated.square().mean(-1, keepdim=True) + self.eps)
        return (normed.flatten(-2) * self.weight).to(y.dtype)


class Mamba2(nn.Module):
    """The Mamba-2 mixer; see the module docstring for the layout. [B, T, D] -> [B, T, D]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.d_inner, self.heads, self.head_dim = (cfg.mamba_inner, cfg.mamba_heads,
                                                   cfg.mamba_head_dim)
        self.groups, self.state, self.chunk = cfg.mamba_groups, cfg.mamba_state, cfg.mamba_chunk
        self.conv_dim = self.d_inner + 2 * self.groups * self.state
        self.proj_dim = self.d_inner + self.conv_dim + self.heads  # z | xBC | dt
        self.in_proj = nn.Linear(cfg.d_model, proj_rows(cfg), bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, cfg.mamba_conv,
                                groups=self.conv_dim, padding=cfg.mamba_conv - 1)
        self.dt_bias = nn.Parameter(torch.empty(self.heads))
        self.A_log = nn.Parameter(torch.empty(self.heads))
        self.D = nn.Parameter(torch.empty(self.heads))
        self.norm = GatedRMSNorm(self.d_inner, self.groups, cfg.norm_eps)
        self.out_proj = nn.Linear(self.d_inner, cfg.d_model, bias=False)
        self.reset_mixer()

    def reset_mixer(self, dt_min: float = 1e-3, dt_max: float = 1e-1) -> None:
        """Initialise what is the mixer's own (the model initialises the linear layers, then
        calls this): A uniform in [1, 16]; dt log-uniform in [dt_min, dt_max], stored as
        softplus^-1; D = 1; the norm's gain 1; in_proj's alignment rows zero (see the module
        docstring: zero they stay)."""
        with torch.no_grad():
            self.A_log.copy_(torch.empty_like(self.A_log).uniform_(1, 16).log())
            dt = torch.empty_like(self.dt_bias).uniform_(math.log(dt_min), math.log(dt_max))
            dt = dt.exp().clamp(min=1e-4)
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
            self.D.fill_(1.0)
            self.norm.weight.fill_(1.0)
            self.in_proj.weight[self.proj_dim:].zero_()

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """u: [B, T, D] -> [B, T, D]."""
        T = u.shape[1]
        z, xBC, dt = self.in_proj(u)[..., :self.proj_dim].split(
            (self.d_inner, self.conv_dim, self.heads), dim=-1)
        # causal depthwise conv: padded K - 1 on both sides, keep the first T outputs
        xBC = F.silu(self.conv1d(xBC.transpose(1, 2))[..., :T].transpose(1, 2))
        x, B, C = xBC.split((self.d_inner, self.groups * self.state,
                             self.groups * self.state), dim=-1)
        x = x.unflatten(-1, (self.heads, self.head_dim))  # [B, T, H, P]
        dt = F.softplus(dt.float() + self.dt_bias)  # [B, T, H]
        A = -self.A_log.float().exp()  # [H], negative: every step decays the state
        y = ssd_chunked(x, dt, A, B.unflatten(-1, (self.groups, self.state)),
                        C.unflatten(-1, (self.groups, self.state)), self.chunk)
        y = y + x * self.D[:, None].to(x.dtype)  # the skip connection, per head
        return self.out_proj(self.norm(y.flatten(-2), z))


def proj_rows(cfg: ModelConfig) -> int:
    """in_proj's output rows: z, xBC and dt, padded up to a multiple of PROJ_ALIGN."""
    rows = 2 * cfg.mamba_inner + 2 * cfg.mamba_groups * cfg.mamba_state + cfg.mamba_heads
    return -(-rows // PROJ_ALIGN) * PROJ_ALIGN
