#!/usr/bin/env bash
# Amendment 11's fresh sweeps (results/preregistration.md; machine rule: amendment 12): the
# cheap answers of the index's "What fresh seeds would buy" table, each group one sweep of its
# claims' arms on fresh seeds (200 on), two jobs at a time on one thread each, in its order;
# each published into results/v2/<group> once whole. A group runs whole on one machine type:
# one begun on another type (its finished runs in outputs/fresh/ or results/pending/) is
# skipped here. Run it again after any interruption: published groups are skipped, finished
# runs are never trained again and the others resume from their last checkpoint (resume=auto).
#
#   nohup bash results/run_fresh.sh > outputs/fresh.log 2>&1 &      # every group, in order
#   bash results/run_fresh.sh a11_g3_components                      # just these
#   bash results/run_fresh.sh --save     # finished runs of unpublished groups -> results/pending
set -uo pipefail
cd "$(dirname "$0")/.."
have=$(nvfp4-lab info | sed -n 's/^machine class: \(.*\) with .*/\1/p')
# The machine types of the runs under a folder, one a line (none: the group has not begun).
types() {
  [ -d "$1" ] || return 0
  python -c 'import json, pathlib, sys
print(*sorted({json.loads(p.read_text()).get("machine_class") or "unknown"
               for p in pathlib.Path(sys.argv[1]).rglob("summary.json")}), sep="\n")' "$1"
}
# Copy the finished runs of sweep folder $1 (and its multirun.yaml) into folder $2.
save() {
  mkdir -p "$2" && cp "$1/multirun.yaml" "$2/"
  grep -l '"status": "done"' -r --include=summary.json "$1" | while read -r f; do
    run=$(dirname "${f#"$1"/}")
    mkdir -p "$2/$run"
    for name in config.yaml summary.json metrics.csv; do cp "$1/$run/$name" "$2/$run/"; done
  done
}
seeds() { seq -s, 200 $((199 + $1)); }
v1="+scale=lab launcher=joblib train.log_every=1"
declare -A group=(
  [a11_g1_rht_gemms]="+ablation=rht_gemms $v1 arm=none,wgrad,dgrad seed=$(seeds 7)"
  [a11_g2_components]="+ablation=components_v2 arm=full,without_rht seed=$(seeds 11)"
  [a11_g3_components]="+ablation=components $v1 arm=full,without_sr,without_2d seed=$(seeds 10)"
  [a11_g4_sr_placement]="+ablation=sr_placement $v1 arm=sr_gradients,sr_activations,sr_weights,rne seed=$(seeds 15)"
  [a11_g5_bf16_layers]="+ablation=bf16_layers $v1 arm=bf16,all_nvfp4,last_0.2,first_0.2,first_1_last_1 seed=$(seeds 19)"
  [a11_g6_rht_size]="+ablation=rht_size_v2 quant.rht.size=16,128 seed=$(seeds 14)"
  [a11_g7_consistency]="+ablation=consistency $v1 arm=bf16,weights_1d_dot_dim,weights_1d_same_dim seed=$(seeds 19)"
  [a11_g8_consistency]="+ablation=consistency_v2 seed=$(seeds 18)"
  [a11_g9_cumulative]="+ablation=cumulative $v1 arm=base,1_last_bf16,3_plus_rht,4_plus_sr seed=$(seeds 19)"
  [a11_g10_rht_gemms]="+ablation=rht_gemms_v2 arm=none,fprop seed=$(seeds 19)"
)
order=(a11_g1_rht_gemms a11_g2_components a11_g3_components a11_g4_sr_placement
       a11_g5_bf16_layers a11_g6_rht_size a11_g7_consistency a11_g8_consistency
       a11_g9_cumulative a11_g10_rht_gemms)
todo=("$@")
if [ "${1:-}" = "--save" ]; then
  for g in "${order[@]}"; do
    [ -d "outputs/fresh/$g" ] && [ ! -e "results/v2/$g" ] || continue
    rm -rf "results/pending/$g" && save "outputs/fresh/$g" "results/pending/$g"
    echo "results/pending/$g: $(find "results/pending/$g" -name summary.json | wc -l) finished runs"
  done
  exit 0
fi
[ ${#todo[@]} -eq 0 ] && todo=("${order[@]}")
for g in "${todo[@]}"; do
  if [ -e "results/v2/$g" ]; then echo "results/v2/$g: published, skipped"; continue; fi
  begun=$(types "outputs/fresh/$g"; types "results/pending/$g")
  if [ -n "$begun" ] && [ "$(sort -u <<< "$begun")" != "$have" ]; then
    echo "$g: begun on '$(sort -u <<< "$begun" | paste -sd/)', this machine is '$have': skipped"
    continue
  fi
  [ -d "outputs/fresh/$g" ] || [ ! -d "results/pending/$g" ] ||
    cp -r "results/pending/$g" "outputs/fresh/$g"
  echo "== $g: $(date -u +%FT%TZ) on $have"
  # shellcheck disable=SC2086  # the group's overrides are words
  nvfp4-lab run ${group[$g]:?unknown group $g} trainer.progress=plain \
    hydra.sweep.dir="outputs/fresh/$g" || exit 1
  nvfp4-lab publish "outputs/fresh/$g" --to results --as "v2/$g" || exit 1
  rm -rf "results/pending/$g"
done
