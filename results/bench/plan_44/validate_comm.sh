#!/usr/bin/env bash
# Issue 44.5 (communication model): `plan validate` on the existing grids with the code of this change.
# Every row is a CPU host of one or two "devices" without a model size: the predictions must be those
# of the stored JSONs (results/bench/plan_validate_{prod4,prod4_after,prod5,prod5_after,vla}.json).
# Usage: validate_comm.sh [TAG [VALIDATE FLAGS...]] -> results/bench/plan_44/validate_TAG_<grid>.json
# (TAG defaults to comm, no flags: the run above; validate_jitter.sh passes `jitter --jitter`).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
out=results/bench/plan_44
tag=${1:-comm}
flags=("${@:2}")
for spec in prod4:plan_profile_prod4:async_production_planval4 prod4_after:plan_profile_prod4_after:async_production_planval4 \
            prod5:plan_profile_prod5:async_production_planval5 prod5_after:plan_profile_prod5_after:async_production_planval5 \
            vla:plan_profile_vla:async_production_vla; do
  IFS=: read -r name prof runs <<<"$spec"
  echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) start $name"
  JAX_PLATFORMS=cpu $PY -m research.planner validate "${flags[@]}" --profile-from results/bench/$prof --runs results/bench/$runs.json \
      --json $out/validate_${tag}_$name.json | tail -1
done
echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) end"
