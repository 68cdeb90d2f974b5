#!/usr/bin/env bash
# Issue 44.5, sixth try (docs/planner.md "Issue 44.5, sixth: the slot steps' concurrency from 28 rounds"): the
# variant under test `--group-cores --jitter --warmup 2` on prod9 with its pooled profiles (criteria 1-3); reported
# beside: each single profile, all six pooled, without --group-cores, without --jitter; and each profile's step
# concurrency (C and MJX, from its 28 rounds). -> results/bench/plan_44/validate_p9_<name>.json, p9_concurrency.txt
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
out=results/bench/plan_44
P=results/bench/plan_profile_prod9
R=results/bench/async_production_planval9.json
v() {  # name, then validate flags
  local name=$1; shift
  echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) $name"
  JAX_PLATFORMS=cpu $PY -m research.planner validate "$@" --runs $R --json $out/validate_p9_$name.json | tail -2 | head -1
}
v before --group-cores --jitter --warmup 2 --profile-from $P/b1 $P/b2 $P/b3
v after --group-cores --jitter --warmup 2 --profile-from $P/a1 $P/a2 $P/a3
v all6 --group-cores --jitter --warmup 2 --profile-from $P/b1 $P/b2 $P/b3 $P/a1 $P/a2 $P/a3
for i in b1 b2 b3 a1 a2 a3; do v single_$i --group-cores --jitter --warmup 2 --profile-from $P/$i; done
v before_no_gc --jitter --warmup 2 --profile-from $P/b1 $P/b2 $P/b3
v after_no_gc --jitter --warmup 2 --profile-from $P/a1 $P/a2 $P/a3
v before_lockstep --group-cores --warmup 2 --profile-from $P/b1 $P/b2 $P/b3
v after_lockstep --group-cores --warmup 2 --profile-from $P/a1 $P/a2 $P/a3
$PY results/bench/plan_44/step_concurrency.py $P | tee $out/p9_concurrency.txt
echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) end"
