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
#
# Two lanes on the 2-core box (one thread each): give each call its own list, e.g.
#   bash results/run_pending.sh rht_gemms token_efficiency bf16_layers &
#   bash results/run_pending.sh rht_size rht_signs recipes &
set -uo pipefail
cd "$(dirname "$0")/.."
# Arms an ablation runs at the lab scale when not all of its file's arms differ on `nano`
# (the command line warns about such pairs): bf16_layers' last_1 keeps the same single block
# of nano's 5 in BF16 as last_0.2 (the paper's last 4 of 20), so its runs would repeat those,
# bit for bit; no claim of the paper tests last_1, so it is left out rather than run twice.
declare -A arms=(
  [bf16_layers]="arm=bf16,all_nvfp4,last_0.2,first_0.2,first_1_last_1"
)
ablations=("$@")
if [ ${#ablations[@]} -eq 0 ]; then
  read -r -a ablations <<< "$(python -c 'from nvfp4_lab.analysis.reports.index import ABLATIONS, BEYOND_PAPER; print(*ABLATIONS, *BEYOND_PAPER)')"
fi
for a in "${ablations[@]}"; do
  if [ -e "results/$a" ]; then echo "results/$a: published, skipped"; continue; fi
  echo "== $a: $(date -u +%FT%TZ)"
  nvfp4-lab run +ablation="$a" +scale=lab ${arms[$a]:-} trainer.progress=plain \
    hydra.sweep.dir="outputs/lab/$a"
  nvfp4-lab publish "outputs/lab/$a" --to results
done
