#!/usr/bin/env bash
# The steps-or-size study's lanes (results/preregistration.md, Steps or size): its 96 runs,
# two at a time on one thread each, over one sweep folder, on the one machine type the plan
# names. Run it again after any interruption: finished runs are skipped, unfinished ones
# continue from their last checkpoint (resume=auto).
#
#   nohup bash results/run_steps_vs_size.sh outputs/lab/steps_vs_size > outputs/svs.log 2>&1 &
set -euo pipefail
dir=${1:?usage: run_steps_vs_size.sh SWEEP_DIR}
want="x86_64 AVX512, AMD family 25"
have=$(nvfp4-lab info | sed -n 's/^machine class: \(.*\) with .*/\1/p')
if [ "$have" != "$want" ]; then
  echo "run_steps_vs_size.sh: this machine is '$have'; the study runs only on '$want'" >&2
  exit 2
fi
nvfp4-lab run +ablation=steps_vs_size trainer.progress=plain hydra.sweep.dir="$dir"
