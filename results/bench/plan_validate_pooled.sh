#!/bin/bash
# The pooled-profile validation protocol of issue 44.5 (docs/planner.md "Issue 44.5, fourth: pooled profiles on
# both sides of a fresh grid"): for grid N, three profiles, the 18-row grid (the prod4 command), three profiles;
# nothing else running. Usage: plan_validate_pooled.sh N [plan profile flags...] ->
# results/bench/plan_profile_prodN/{b1,b2,b3,a1,a2,a3}, results/bench/async_production_planvalN.json,
# results/bench/plan_validate_prodN_uptimes.txt (the flags given go to every profile, e.g. --concurrency-repeats 28).
set -e
N=${1:?usage: plan_validate_pooled.sh N [plan profile flags...]}
shift
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
P=results/bench/plan_profile_prod$N
U=results/bench/plan_validate_prod${N}_uptimes.txt
: > $U
echo "HEAD $(git rev-parse --short HEAD)" >> $U
[ $# -gt 0 ] && echo "profile flags $*" >> $U
for i in b1 b2 b3; do
  echo "profile $i start $(date -u +%T) $(uptime)" >> $U
  $PY -m research.planner profile --from-bench results/bench/async_production.json --out $P/$i "$@"
done
echo "bench start $(date -u +%T) $(uptime)" >> $U
$PY -m vlajax.bench async --preset rl-debug --envs 16 --slots 4 --horizon 8 --width 256 --updates 20 --repeats 3 --farm-scale 20 --json results/bench/async_production_planval$N.json
for i in a1 a2 a3; do
  echo "profile $i start $(date -u +%T) $(uptime)" >> $U
  $PY -m research.planner profile --from-bench results/bench/async_production.json --out $P/$i "$@"
done
echo "end $(date -u +%T) $(uptime)" >> $U
