"""Kernel tests run the Triton interpreter when there is no GPU.

``triton.jit`` picks the interpreter when a kernel module is imported, so the variable must be
set before ``nvfp4_kernels`` is imported (no conftest above this one imports triton).
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
