#!/usr/bin/env bash
# Amendment 11's fresh sweeps (results/preregistration.md): the cheap answers of the index's
# "What fresh seeds would buy" table, each group one sweep of its claims' arms on fresh seeds
# (200 on), two jobs at a time on one thread each, on the one machine type the amendment names,
# in its order; each published into results/v2/<group> once whole. Run it again after any
# interruption: published groups are skipped, finished runs are never trained again and the
# others resume from their last checkpoint (resume=auto).
#
#   nohup bash results/run_fresh.sh > outputs/fresh.log 2>&1 &      # every group, in order
#   bash results/run_fresh.sh a11_g3_components                      # just these
set -uo pipefail
cd "$(dirname "$0")/.."
want="x86_64 AVX512, AMD family 25"
have=$(nvfp4-lab info | sed -n 's/^machine class: \(.*\) with .*/\1/p')
if [ "$have" != "$want" ]; then
  echo "run_fresh.sh: this machine is '$have'; amendment 11 runs only on '$want'" >&2
  exit 2
fi
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
[ ${#todo[@]} -eq 0 ] && todo=("${order[@]}")
for g in "${todo[@]}"; do
  if [ -e "results/v2/$g" ]; then echo "results/v2/$g: published, skipped"; continue; fi
  echo "== $g: $(date -u +%FT%TZ)"
  # shellcheck disable=SC2086  # the group's overrides are words
  nvfp4-lab run ${group[$g]:?unknown group $g} trainer.progress=plain \
    hydra.sweep.dir="outputs/fresh/$g" || exit 1
  nvfp4-lab publish "outputs/fresh/$g" --to results --as "v2/$g" || exit 1
done
