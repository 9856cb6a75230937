"""The installed console script: real subprocesses, as a user runs it."""
import shutil
import subprocess


def run(*args):
    exe = shutil.which("nvfp4-lab")
    assert exe, "the nvfp4-lab console script is not installed (pip install -e .)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=600)


def test_info_reports_formats_and_compiled_equals_eager():
    out = run("info")
    assert out.returncode == 0, out.stderr
    assert "formats: nvfp4, mxfp4, fp8_e4m3, fp8_e5m2, bf16" in out.stdout
    assert "compiled nvfp4 == eager: True" in out.stdout
    assert "compiled mxfp4 == eager: True" in out.stdout


def test_unknown_subcommand_fails_and_lists_the_available_ones():
    out = run("trian")
    assert out.returncode == 2
    assert "unknown subcommand 'trian'" in out.stderr and "available: info" in out.stderr
