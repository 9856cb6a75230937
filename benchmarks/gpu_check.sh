#!/usr/bin/env bash
# The GPU check: kernel tests, a data-parallel check, kernel bandwidth and training-step timings, in under 7 minutes.
#
#     bash benchmarks/gpu_check.sh          # on a CUDA machine, from anywhere in the repository
#
# Needs python3 with torch and triton (lightning, hydra and omegaconf are not used); nothing is
# installed: src/ and kernels/ go on PYTHONPATH. Stages, each with a time limit so that the
# whole check ends within 7 minutes on an H100/H200 even on a fresh machine (the first call of
# every Triton kernel compiles; each limit is about twice the stage's time on an H200,
# benchmarks/RESULTS.md, GPU check):
#
#     kernel tests       every file of tests/kernels and the BF16-GEMM test, one pytest each,
#                        side by side (Triton compiles the ~150 kernel variants the tests make
#                        one at a time per process): on CUDA the kernels run compiled, against
#                        the eager reference on the same GPU, plus the realistic-shape tests
#                        that skip on a CPU
#     data parallel      tests/integration/test_fsdp_quantized.py on CUDA: FSDP2 around the
#                        quantized layers on up to 2 GPUs (NCCL; one GPU: a smoke of the
#                        sharding), the triton backend, against one process accumulating
#                        the same micro-batches, bit for bit (docs/scaling_out.md, FSDP)
#     kernel bandwidth   benchmarks/bench_kernels.py: bf16 8192 x 8192, one quantizer of each
#                        kind (bench_kernels.py alone times all, and the compiled backend), as
#                        a percentage of a device-to-device copy measured in the same run
#     training step      benchmarks/bench_step.py: small and base, bf16 / fp8 / mxfp4 / nvfp4,
#                        the triton backend, as a ratio to the BF16 step; rows that do not
#                        start within its budget print "skipped"
#
# The test stages set NVFP4_KERNELS_AUTOTUNE=0 (one tile per kernel variant: results do not
# depend on the tile, and autotuning compiles every candidate); the benchmarks autotune.
#
# A failing stage is reported and the next one still runs; the exit status is non-zero if any
# failed. The output also goes to $OUT/gpu_check.txt when OUT is set, and the kernel tests' full
# pytest logs to $OUT/kernel_tests.tgz.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="src:kernels${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
LOG=/dev/null
if [[ -n "${OUT:-}" ]]; then LOG="$OUT/gpu_check.txt"; fi

failed=()

# stage NAME LIMIT_S COMMAND...: run COMMAND with a time limit; on failure note it and go on
stage() {
  local name=$1 limit=$2 t0=$SECONDS rc=0
  shift 2
  echo
  echo "=== $name: start $(date -u +%H:%M:%S), limit ${limit} s"
  timeout "$limit" "$@" || rc=$?
  if ((rc == 0)); then
    echo "=== $name: ok, $((SECONDS - t0)) s"
    return
  fi
  local why="exit $rc"
  if ((rc == 124)); then why="killed at the time limit"; fi
  echo "=== $name: FAILED ($why), $((SECONDS - t0)) s"
  failed+=("$name")
}

# pytest_files FILE...: one pytest process per file, in parallel; the tail of each log; fails
# if any file fails
pytest_files() {
  local dir f rc=0 pids=()
  dir=$(mktemp -d)
  for f in "$@"; do
    COLUMNS=300 "$PY" -m pytest -q -p no:cacheprovider --durations=3 "$f" \
      >"$dir/${f//\//_}.log" 2>&1 &
    pids+=($!)
  done
  for f in "${pids[@]}"; do wait "$f" || rc=1; done
  for f in "$@"; do
    echo "--- $f"
    tail -n 20 "$dir/${f//\//_}.log"
  done
  if [[ -n "${OUT:-}" ]]; then tar czf "$OUT/kernel_tests.tgz" -C "$dir" .; fi
  return $rc
}
export -f pytest_files

main() {
  echo "# gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi || echo "(nvidia-smi failed)"
  "$PY" -c 'import platform, torch, triton; print(f"python {platform.python_version()}, torch '\
'{torch.__version__} (CUDA {torch.version.cuda}), triton {triton.__version__}, device "'\
'f"{torch.cuda.get_device_name() if torch.cuda.is_available() else None}")'
  stage "kernel tests" 130 env NVFP4_KERNELS_AUTOTUNE=0 PY="$PY" bash -c 'pytest_files "$@"' _ \
    tests/kernels/test_*.py tests/unit/quant/test_gemm_dtype.py
  stage "data parallel" 60 env NVFP4_KERNELS_AUTOTUNE=0 "$PY" -m pytest -q -p no:cacheprovider \
    -k cuda tests/integration/test_fsdp_quantized.py
  stage "kernel bandwidth" 100 "$PY" benchmarks/bench_kernels.py --compiled none --cases \
    "nvfp4 1x16,nvfp4 1x16 axis 0 rht16 sr (Wgrad dY),nvfp4 16x16,mxfp4 1x32,fp8_e4m3 1x128"
  stage "training step" 110 "$PY" benchmarks/bench_step.py --models small,base --warmup 2 \
    --reps 5 --budget-s 75
  echo
  if ((${#failed[@]})); then
    echo "# gpu_check FAILED: ${failed[*]} ($SECONDS s)"
    return 1
  fi
  echo "# gpu_check passed ($SECONDS s)"
}

main 2>&1 | tee "$LOG"
