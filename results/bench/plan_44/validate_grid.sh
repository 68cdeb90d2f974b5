#!/usr/bin/env bash
# One model variant on a pooled-protocol grid (results/bench/plan_validate_pooled.sh N): the before-pool (b1-b3), the
# after-pool (a1-a3), all six pooled and each single profile. Usage, from anywhere:
#   validate_grid.sh N NAME [plan validate flags...] -> results/bench/plan_44/validate_pN_NAME_{before,after,all6,single_*}.json
set -euo pipefail
N=${1:?usage: validate_grid.sh N NAME [flags...]}; NAME=${2:?usage: validate_grid.sh N NAME [flags...]}; shift 2
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
P=results/bench/plan_profile_prod$N
R=results/bench/async_production_planval$N.json
v() {  # which, then the profiles
  local which=$1; shift
  echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) p$N $NAME $which"
  JAX_PLATFORMS=cpu $PY -m research.planner validate "${FLAGS[@]}" --runs $R --profile-from "$@" \
    --json results/bench/plan_44/validate_p${N}_${NAME}_$which.json | tail -2 | head -1
}
FLAGS=("$@")
v before $P/b1 $P/b2 $P/b3
v after $P/a1 $P/a2 $P/a3
v all6 $P/b1 $P/b2 $P/b3 $P/a1 $P/a2 $P/a3
for i in b1 b2 b3 a1 a2 a3; do v single_$i $P/$i; done
