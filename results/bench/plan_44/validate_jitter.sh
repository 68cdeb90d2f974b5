#!/usr/bin/env bash
# Issue 44.5, second try (docs/planner.md): `plan validate --jitter` on the existing grids (criterion 2)
# and on the VLA rows with the 20 ms what-if (criterion 1: requests per inference call).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
out=results/bench/plan_44
bash $out/validate_comm.sh jitter --jitter | sed '$d'   # the five grids; its closing line is this script's
echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) start vla+wait20"
JAX_PLATFORMS=cpu $PY -m research.planner validate --jitter --profile-from results/bench/plan_profile_vla \
    --runs results/bench/async_production_vla.json results/bench/maxwait_vla/mjx_wait20.json \
    --json $out/validate_vla_jitter.json | tail -1
echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) end"
