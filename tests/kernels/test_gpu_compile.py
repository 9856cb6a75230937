"""Every kernel compiles for Ampere (sm_80) and Hopper (sm_90) without a GPU, and would launch.

Triton ships ptxas, so ``triton.compile`` can lower a kernel to a GPU binary on any machine.
The CPU interpreter runs the kernels' Python, not their compilation: failures such as a
constexpr branch returning another type, a NaN constant shared by two inlined functions
(NaN != NaN: "conflicting value"), or a NaN global (each launch checks that the globals a
kernel read still equal their values: every launch failed on the first GPU check) only show
here or on a GPU. The PTX is also checked for fused multiply-adds, which the kernels forbid
(``enable_fp_fusion=False``) because an FMA skips the rounding of its product, and assembled
with ``ptxas -v`` for register spills, which a tile too large for the registers (the fused
RHT makes tiles hold whole chunks) would cause.

The kernels are compiled in a subprocess: under TRITON_INTERPRET=1 (set for the CPU tests
before triton's first import) ``triton.jit`` makes interpreter functions, which cannot be
compiled.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton.backends.compiler")

# Run in a fresh interpreter (no TRITON_INTERPRET); prints {case@arch: "" or the error}.
COMPILE = r"""
import json, os, re, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource
from nvfp4_kernels import epilogue, fp4, fp8
from nvfp4_lab.formats import QuantSpec

FP4 = dict(x_ptr="*bf16", local_ptr="*fp32", codes_ptr="*u8", scale_ptr="*u8",
           amax_ptr="*i32", k0="i32", k1="i32", signs_ptr="*fp32", norm="fp32", R="i32",
           C="i32")
FP8 = dict(x_ptr="*bf16", out_ptr="*fp32", scale_ptr="*fp32", amax_ptr="*i32", R="i32",
           C="i32", n_r="i32", n_c="i32", N="i32")
NO_RHT = dict(RHT_LOG=0, RHT_ALONG_R=False, RHT_ROUND=0, signs_ptr=None)


def rht(log_d, along_r, round_mode):
    return dict(RHT_LOG=log_d, RHT_ALONG_R=along_r, RHT_ROUND=round_mode)


def fp4_case(BR, BC, G, NT, nvfp4, sr, local, codes, rht_args=NO_RHT, bf16=False,
             four6=None):  # four6: None, or the 4/6 error metric with the limit 256
    consts = dict(BR=BR, BC=BC, G=G, NT=NT, NVFP4=nvfp4, MX_MODE="ceil", SR=sr,
                  SR_EXACT=False, LOCAL=local, LOCAL_BF16=bf16, CODES=codes,
                  FOUR6=four6 is not None, FOUR6_MSE=four6 == "mse",
                  LIMIT=256 if four6 else 448, **rht_args)
    for name, used in (("local_ptr", local), ("codes_ptr", codes), ("scale_ptr", codes),
                       ("amax_ptr", nvfp4)):
        if not used:
            consts[name] = None
    return fp4._quantize_kernel, dict(FP4, local_ptr="*bf16" if bf16 else "*fp32"), consts


E4M3 = fp8._format_args(QuantSpec("fp8_e4m3"))
CASES = {
    "fp4 rows nvfp4 sr": fp4_case(1, 16, 16, 4, True, True, True, False),
    "fp4 axis0 nvfp4 codes": fp4_case(16, 1, 4, 64, True, False, False, True),
    "fp4 2d nvfp4": fp4_case(16, 16, 1, 4, True, False, True, False),
    "fp4 rows mxfp4 sr codes": fp4_case(1, 32, 32, 2, False, True, False, True),
    "fp4 axis0 rht16 bf16 sr both": fp4_case(16, 1, 4, 64, True, True, True, True,
                                             rht(4, True, 1), bf16=True),
    "fp4 rows rht128 fp16": fp4_case(1, 16, 8, 8, False, False, True, False,
                                     rht(7, False, 2)),
    "fp4 rows nvfp4 4over6 mse": fp4_case(1, 16, 16, 4, True, False, True, True, four6="mse"),
    "fp4 2d nvfp4 4over6 mae": fp4_case(16, 16, 1, 4, True, False, True, False, four6="mae"),
    "fp4 amax": (fp4._amax_kernel, FP4, dict(BR=1, BC=16, G=16, NT=4, **NO_RHT)),
    "fp4 amax rht16": (fp4._amax_kernel, FP4, dict(BR=16, BC=1, G=1, NT=64, **rht(4, True, 1))),
    "fp8 rows": (fp8._blocks_kernel, FP8, dict(BR=8, NB=8, TC=128, ROW_BLOCKS=True,
                                                CODES=False, TRANS=False, scale_ptr=None,
                                                **E4M3)),
    "fp8 tensor amax": (fp8._amax_kernel, dict(FP8, x_ptr="*fp32"), dict(BLOCK=1024)),
    "fp8 tensor codes": (fp8._tensor_kernel, dict(FP8, x_ptr="*fp32", out_ptr="*u8"),
                         dict(BLOCK=1024, CODES=True, **E4M3)),
}
EPILOGUE = dict(y_ptr="*fp32", out_ptr="*bf16", amax_a_ptr="*fp32", amax_b_ptr="*fp32",
                divisor="fp32", N="i32")
CASES["epilogue alpha bf16"] = (epilogue._epilogue_kernel, EPILOGUE, dict(
    BLOCK=epilogue._BLOCK, AMAXES=2, ROUND_BF16=True, OUT_BF16=True))
CASES["epilogue round fp32"] = (
    epilogue._epilogue_kernel, dict(EPILOGUE, out_ptr="*fp32"),
    dict(BLOCK=epilogue._BLOCK, AMAXES=0, ROUND_BF16=True, OUT_BF16=False, amax_a_ptr=None,
         amax_b_ptr=None))
# the launchers' num_warps (fp4._tiles, fp8.py): 8, but 4 for fp4's 2K-element tiles and the
# epilogue (Triton's default)
WARPS = {"fp4 rows mxfp4 sr codes": 4, "epilogue alpha bf16": 4, "epilogue round fp32": 4}


def stale_globals(kernel):  # the check each launch makes: a global read must equal itself
    kernel.cache_key  # collects the globals the kernel (and what it calls) reads
    return [name for (name, _), (val, where) in kernel.used_global_vals.items()
            if where.get(name) != val]


def spills(ptx, arch):  # bytes of spill stores and loads that ptxas -v reports
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        target = f"sm_{arch}a" if arch == 90 else f"sm_{arch}"  # Triton emits sm_90a PTX
        # the ptxas Triton itself assembles this arch with (3.9 uses a newer one from sm_90)
        log = subprocess.run([get_ptxas(arch).path, f"-arch={target}", "-v", f.name, "-o",
                              os.devnull], capture_output=True, text=True, check=True).stderr
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))


out = {}
for case, (kernel, types, consts) in CASES.items():
    signature = {n: "constexpr" if n in consts else types[n] for n in kernel.arg_names}
    for arch in (80, 90):
        try:
            binary = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=consts),
                                    target=GPUTarget("cuda", arch, 32),
                                    options={"num_warps": WARPS.get(case, 8),
                                             "enable_fp_fusion": False})
            ptx = binary.asm["ptx"]
            fmas = [line for line in ptx.splitlines() if "fma." in line]
            spilled = spills(ptx, arch)
            stale = stale_globals(kernel)
            out[f"{case}@{arch}"] = ("; ".join(fmas)[:500] if fmas else "") + (
                f" {spilled} bytes of spills" if spilled else "") + (
                f" globals that fail the launch check: {stale}" if stale else "")
        except Exception as err:
            out[f"{case}@{arch}"] = f"{type(err).__name__}: {err}"[:2000]
print(json.dumps(out))
"""
CASES = ["fp4 rows nvfp4 sr", "fp4 axis0 nvfp4 codes", "fp4 2d nvfp4", "fp4 rows mxfp4 sr codes",
         "fp4 axis0 rht16 bf16 sr both", "fp4 rows rht128 fp16", "fp4 rows nvfp4 4over6 mse",
         "fp4 2d nvfp4 4over6 mae", "fp4 amax", "fp4 amax rht16",
         "fp8 rows", "fp8 tensor amax", "fp8 tensor codes", "epilogue alpha bf16",
         "epilogue round fp32"]


@pytest.fixture(scope="module")
def compiled() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("case", CASES)
def test_kernel_compiles_for_the_gpu_without_fma_or_spills(compiled, case, arch):
    assert compiled[f"{case}@{arch}"] == ""
