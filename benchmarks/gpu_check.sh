#!/usr/bin/env bash
# The GPU check: kernel tests, a data-parallel check, kernel bandwidth, training-step timings and
# a profile of the step, in under 6 minutes, so that a short loan of a GPU machine runs it twice.
#
#     bash benchmarks/gpu_check.sh          # on a CUDA machine, from anywhere in the repository
#
# Needs python3 with torch and triton (lightning, hydra and omegaconf are not used); nothing is
# installed: src/ and kernels/ go on PYTHONPATH. Stages, each with a time limit:
#
#     machine            nvidia-smi; Python, torch, Triton and the device
#     kernel tests       the files of tests/kernels and the BF16-GEMM test, one pytest each,
#                        side by side (Triton compiles the ~150 kernel variants the tests make
#                        one at a time per process): on CUDA the kernels run compiled, against
#                        the eager reference on the same GPU, plus the realistic-shape tests
#                        that skip on a CPU. Not here: test_gpu_compile.py (it compiles for
#                        sm_80/sm_90 without a GPU: the CPU runs it alike) and
#                        test_launch_trace.py (it traces CPU tensors through the interpreter)
#     data parallel      tests/integration/test_fsdp_quantized.py on CUDA: FSDP2 around the
#                        quantized layers on up to 2 GPUs (NCCL; one GPU: a smoke of the
#                        sharding), the triton backend, against one process accumulating
#                        the same micro-batches, bit for bit (docs/scaling_out.md, FSDP)
#     kernel bandwidth   benchmarks/bench_kernels.py: bf16 8192 x 8192, NVFP4's activation and
#                        Wgrad dY quantizers, MXFP4's and FP8's (bench_kernels.py alone times
#                        all, and the compiled backend), as a percentage of a device-to-device
#                        copy measured in the same run
#     training step      benchmarks/bench_step.py: base, bf16 / fp32 / fp8 / mxfp4, the triton
#                        backend, as a ratio to the BF16 step (the profile times nvfp4); rows
#                        that do not start within its budget print "skipped"
#     profile            benchmarks/profile_step.py: base and small, bf16 and nvfp4: top
#                        kernels, launches per step, GEMM TFLOP/s, host against device time,
#                        and the nvfp4 step as a ratio to the BF16 step; traces to $OUT/profile
#
# The budget: 350 s of limits, so that the check ends within 6 minutes even when every stage
# runs into its limit. Each limit against what the first GPU check measured
# (benchmarks/RESULTS.md, GPU check: an H200, a fresh machine, where each Triton kernel
# compiles on its first call):
#
#     machine            20 s   a few seconds
#     kernel tests       80 s   the slowest file 57 s (test_fp8_kernels; seven files side by side)
#     data parallel      45 s   30 s
#     kernel bandwidth   60 s   about 11 s a case (7 NVFP4 rows in 80 s): 4 cases
#     training step      50 s   warm-ups of 2 to 7 s a row at base (mxfp4 the longest), 7 steps
#     profile            95 s   NVFP4's warm-ups 21 s at base and 24 s at small (autotuning),
#                               then 8 steps and a trace a row; --budget-s 60 skips the rest
#
# The last three stages have not run in this form: their limits are estimates from those times.
#
# The test stages set NVFP4_KERNELS_AUTOTUNE=0 (one tile per kernel variant: results do not
# depend on the tile, and autotuning compiles every candidate); the benchmarks autotune.
#
# A failing stage is reported and the next one still runs; the exit status is non-zero if any
# failed. With OUT set, each stage's output goes to $OUT/<stage>.txt as the stage runs (so a
# stage cut short leaves what it printed), the whole output to $OUT/gpu_check.txt, the kernel
# tests' full pytest logs to $OUT/kernel_tests.tgz and the profile's traces and reports to
# $OUT/profile/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="src:kernels${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
LOG=/dev/null
if [[ -n "${OUT:-}" ]]; then LOG="$OUT/gpu_check.txt"; fi

failed=()

# stage NAME LIMIT_S COMMAND...: run COMMAND with a time limit, its output also to
# $OUT/<name with _ for spaces>.txt as it runs; on failure note it and go on
stage() {
  local name=$1 limit=$2 t0=$SECONDS rc=0 file=/dev/null
  shift 2
  if [[ -n "${OUT:-}" ]]; then file="$OUT/${name// /_}.txt"; fi
  echo
  echo "=== $name: start $(date -u +%H:%M:%S), limit ${limit} s"
  timeout "$limit" "$@" 2>&1 | tee "$file" || rc=$?
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

# machine: the GPUs and the versions
machine() {
  nvidia-smi || echo "(nvidia-smi failed)"
  "$PY" -c 'import platform, torch, triton; print(f"python {platform.python_version()}, torch '\
'{torch.__version__} (CUDA {torch.version.cuda}), triton {triton.__version__}, device "'\
'f"{torch.cuda.get_device_name() if torch.cuda.is_available() else None}")'
}
export -f machine

# the kernel test files that need a GPU (the header says which stay out)
kernel_tests() {
  local f
  for f in tests/kernels/test_*.py; do
    case $f in
      */test_gpu_compile.py | */test_launch_trace.py) ;;
      *) echo "$f" ;;
    esac
  done
}

main() {
  echo "# gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  local tests
  mapfile -t tests < <(kernel_tests)
  stage "machine" 20 env PY="$PY" bash -c machine
  stage "kernel tests" 80 env NVFP4_KERNELS_AUTOTUNE=0 PY="$PY" bash -c 'pytest_files "$@"' _ \
    "${tests[@]}" tests/unit/quant/test_gemm_dtype.py
  stage "data parallel" 45 env NVFP4_KERNELS_AUTOTUNE=0 "$PY" -m pytest -q -p no:cacheprovider \
    -k cuda tests/integration/test_fsdp_quantized.py
  stage "kernel bandwidth" 60 "$PY" benchmarks/bench_kernels.py --compiled none --cases \
    "nvfp4 1x16,nvfp4 1x16 axis 0 rht16 sr (Wgrad dY),mxfp4 1x32,fp8_e4m3 1x128"
  stage "training step" 50 "$PY" benchmarks/bench_step.py --models base --presets fp8,mxfp4 \
    --warmup 2 --reps 5 --budget-s 30
  stage "profile" 95 "$PY" benchmarks/profile_step.py --models base,small --warmup 2 \
    --steps 3 --budget-s 60 ${OUT:+--out "$OUT/profile"}
  echo
  if ((${#failed[@]})); then
    echo "# gpu_check FAILED: ${failed[*]} ($SECONDS s)"
    return 1
  fi
  echo "# gpu_check passed ($SECONDS s)"
}

main 2>&1 | tee "$LOG"
