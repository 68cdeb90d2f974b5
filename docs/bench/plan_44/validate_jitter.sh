#!/usr/bin/env bash
# Issue 44.5, second try (docs/planner.md): `plan validate --jitter` on the existing grids (criterion 2)
# and on the VLA rows with the 20 ms what-if (criterion 1: requests per inference call).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
out=docs/bench/plan_44
for spec in prod4:plan_profile_prod4:async_production_planval4 prod4_after:plan_profile_prod4_after:async_production_planval4 \
            prod5:plan_profile_prod5:async_production_planval5 prod5_after:plan_profile_prod5_after:async_production_planval5 \
            vla:plan_profile_vla:async_production_vla; do
  IFS=: read -r name prof runs <<<"$spec"
  echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) start $name"
  JAX_PLATFORMS=cpu $PY -m vlajax.plan validate --jitter --profile-from docs/bench/$prof --runs docs/bench/$runs.json \
      --json $out/validate_jitter_$name.json | tail -1
done
echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) start vla+wait20"
JAX_PLATFORMS=cpu $PY -m vlajax.plan validate --jitter --profile-from docs/bench/plan_profile_vla \
    --runs docs/bench/async_production_vla.json docs/bench/maxwait_vla/mjx_wait20.json \
    --json $out/validate_vla_jitter.json | tail -1
echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) end"
