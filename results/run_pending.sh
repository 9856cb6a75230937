#!/usr/bin/env bash
# Run every paper ablation not yet published under results/, in the index's order, then the
# comparisons beyond the paper (recipes), at the lab scale (conf/scale/lab.yaml: one thread per
# training, so one core stays free), and publish each as it finishes (nvfp4-lab publish: its
# small files, its report, the index).
#
#   nohup bash results/run_pending.sh > outputs/lab.log 2>&1 &     # all pending, in order
#   bash results/run_pending.sh rht_signs                           # just these
#
# Resumable: the sweeps live in outputs/lab/<ablation>; re-running this script skips the runs
# that finished there and resumes the others from their last checkpoint. A sweep with a failed
# run is not published (publish says why); the next ablation starts anyway.
set -uo pipefail
cd "$(dirname "$0")/.."
ablations=("$@")
if [ ${#ablations[@]} -eq 0 ]; then
  read -r -a ablations <<< "$(python -c 'from nvfp4_lab.analysis.index import ABLATIONS, BEYOND_PAPER; print(*ABLATIONS, *BEYOND_PAPER)')"
fi
for a in "${ablations[@]}"; do
  if [ -e "results/$a" ]; then echo "results/$a: published, skipped"; continue; fi
  echo "== $a: $(date -u +%FT%TZ)"
  nvfp4-lab run +ablation="$a" +scale=lab trainer.progress=plain hydra.sweep.dir="outputs/lab/$a"
  nvfp4-lab publish "outputs/lab/$a" --to results
done
