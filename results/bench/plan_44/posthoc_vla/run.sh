#!/usr/bin/env bash
# After the tenth (post hoc, descriptive; for the VLA grid's pre-registration): one profile of the VLA-from-pixels
# workload with the dispatch timings (profile/, 11:38-11:45 UTC 2026-11-29), validated against the session-21 VLA
# rows (results/bench/async_production_vla.json, measured 2026-11-2x 04:23-05:05: days before the profile) with the
# default model (as in the first VLA validation), the eighth's variant and the tenth's. Usage: bash .../posthoc_vla/run.sh -> log.txt
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=results/bench/plan_44/posthoc_vla
PY=${PY:-.venv/bin/python}
LJ=(--group-cores --jitter --local-jitter --warmup 2)
: > $D/log.txt
for v in default eighth tenth; do
  flags=(); [ $v = eighth ] && flags=("${LJ[@]}"); [ $v = tenth ] && flags=("${LJ[@]}" --async-dispatch)
  JAX_PLATFORMS=cpu $PY -m research.planner validate --runs results/bench/async_production_vla.json --profile-from $D/profile \
    "${flags[@]}" --json $D/validate_$v.json | tail -2 | head -1 | sed "s/^/$v: /" >> $D/log.txt
  $PY results/bench/plan_44/criteria.py $D/validate_$v.json | sed 's/^/    /' >> $D/log.txt
done
cat $D/log.txt
