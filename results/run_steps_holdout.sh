#!/usr/bin/env bash
# The held-out cells of the law refitted with steps (results/preregistration.md, amendment 11):
# each cell (size, tokens a parameter, tokens a step) as a sweep of its own, 6 paired seeds of
# BF16 and NVFP4, one thread a run, on the one machine type the plan names, run one cell after
# another. Run it again after any interruption: finished runs are skipped, unfinished ones
# continue from their last checkpoint (resume=auto).
#
#   nohup bash results/run_steps_holdout.sh outputs/lab/steps_holdout w96:5:t8192 ... > log &
set -euo pipefail
root=${1:?usage: run_steps_holdout.sh ROOT SIZE:TPP:TOKENS_PER_STEP ...}
shift
want="x86_64 AVX512, AMD family 25"
have=$(nvfp4-lab info | sed -n 's/^machine class: \(.*\) with .*/\1/p')
if [ "$have" != "$want" ]; then
  echo "run_steps_holdout.sh: this machine is '$have'; the cells run only on '$want'" >&2
  exit 2
fi
for cell in "$@"; do
  IFS=: read -r size tpp per_step <<< "$cell"
  nvfp4-lab run +ablation=steps_vs_size trainer.progress=plain seed=0,1,2,3,4,5 \
    model="$size" train.tokens_per_param="$tpp" +tokens_per_step="$per_step" \
    hydra.sweep.dir="$root/${size}_dn${tpp}_${per_step}"
done
