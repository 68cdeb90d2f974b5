#!/usr/bin/env bash
# After the ninth (post hoc, descriptive): one profile with the slot steps' dispatch timed (profile/, taken
# 10:04-10:07 UTC 2026-11-29), validated against prod11-prod13's rows with the eighth's variant, with and without
# --async-dispatch. Usage: bash results/bench/plan_44/posthoc_dispatch/run.sh -> log.txt, validate_pN_*.json
set -euo pipefail
cd "$(dirname "$0")/../../../.."
D=results/bench/plan_44/posthoc_dispatch
PY=${PY:-.venv/bin/python}
LJ=(--group-cores --jitter --local-jitter --warmup 2)
: > $D/log.txt
for N in 11 12 13; do
  for v in lj lj_dispatch; do
    extra=(); [ $v = lj_dispatch ] && extra=(--async-dispatch)
    JAX_PLATFORMS=cpu $PY -m research.planner validate --runs results/bench/async_production_planval$N.json \
      --profile-from $D/profile "${LJ[@]}" "${extra[@]}" --json $D/validate_p${N}_$v.json | tail -2 | head -1 \
      | sed "s/^/p$N $v: /" >> $D/log.txt
    $PY results/bench/plan_44/criteria.py $D/validate_p${N}_$v.json | sed 's/^/    /' >> $D/log.txt
  done
done
cat $D/log.txt
