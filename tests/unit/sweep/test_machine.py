"""The machine class that decides bit-equality: read from /proc/cpuinfo, printed by ``info``,
recorded in every summary."""
from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nvfp4_lab.sweep.machine import Machine, MachineClass, cpuinfo

AMD = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
flags\t\t: fpu avx2 avx512f

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model name\t: AMD EPYC
"""
INTEL = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n" \
        "model name\t: Intel(R) Xeon(R) Processor\n"


@pytest.mark.parametrize("text, isa, expected, slug", [
    (AMD, "AVX512", "x86_64 AVX512, AMD family 25", "x86_64-avx512-amd-25"),
    (INTEL, "AVX2", "x86_64 AVX2, Intel family 6", "x86_64-avx2-intel-6"),
    ("", "DEFAULT", "x86_64 DEFAULT, unknown family unknown",
     "x86_64-default-unknown-unknown"),
])
def test_the_class_is_arch_isa_vendor_and_family(tmp_path, text, isa, expected, slug):
    f = tmp_path / "cpuinfo"
    f.write_text(text)
    cls = MachineClass.of(cpuinfo(f), "x86_64", isa)
    assert (str(cls), cls.slug) == (expected, slug)


def test_cpuinfo_reads_the_first_processor_and_tolerates_its_absence(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text(AMD)
    assert cpuinfo(f)["model name"] == "AMD EPYC" and cpuinfo(f)["flags"] == "fpu avx2 avx512f"
    assert cpuinfo(tmp_path / "absent") == {}


def test_here_is_this_process_machine():
    m = Machine.here()
    assert (m.cls.arch, m.cls.isa, m.threads) == (platform.machine(),
                                                   torch.backends.cpu.get_cpu_capability(),
                                                   torch.get_num_threads())
    if Path("/proc/cpuinfo").exists():
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        family = next(ln.split(":")[1].strip() for ln in lines if ln.startswith("cpu family"))
        assert m.cls.family == family and m.describe().startswith(
            f"{platform.machine()} {m.cls.isa}, ")


def test_info_prints_the_machine_class_and_the_versions():
    out = subprocess.run([sys.executable, "-m", "nvfp4_lab.cli", "info", "--no-compile"],
                         capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("machine class: "))
    assert line.startswith(f"machine class: {Machine.here().cls} with python ")
    assert f"torch {torch.__version__}" in line


def test_versions_name_the_code_and_every_package_that_runs_it():
    from importlib.metadata import PackageNotFoundError, version

    import lightning
    import numpy

    import nvfp4_lab
    from nvfp4_lab.sweep.machine import versions

    found = versions()
    assert (found["python"], found["torch"], found["numpy"], found["nvfp4-lab"]) == (
        platform.python_version(), torch.__version__, numpy.__version__, nvfp4_lab.__version__)
    assert found["lightning"] == lightning.__version__
    for dist in ("hydra-core", "tokenizers", "triton"):
        try:
            assert found[dist] == version(dist)
        except PackageNotFoundError:
            assert dist not in found
    assert "hydra-core" in found and "tokenizers" in found
