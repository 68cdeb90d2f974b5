#!/usr/bin/env bash
# An interleaved-protocol grid N (docs/bench/plan_validate_interleaved.sh N) validated as issue 44.5's eighth try
# fixed (docs/planner.md "Issue 44.5, eighth"): the adopted model (plan validate's defaults: --group-cores --jitter
# --local-jitter --warmup 2) with the four profiles pooled (criteria 1-3), then beside it: the profile before the rows
# (p0) and after them (p3) alone, the first and second half's pools, p1 and p2 alone, the sixth try's variant (no
# --local-jitter) pooled, each profile's step concurrency. Usage: validate_interleaved.sh N
# -> docs/bench/plan_44/validate_pN_*.json, pN_concurrency.txt, pN_criteria.txt
set -euo pipefail
N=${1:?usage: validate_interleaved.sh N}
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
P=docs/bench/plan_profile_prod$N
R=docs/bench/async_production_planval$N.json
run() {  # name, then flags and profiles up to --profile-from's list
  local name=$1; shift
  echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) p$N $name"
  JAX_PLATFORMS=cpu $PY -m vlajax.plan validate --runs $R --json docs/bench/plan_44/validate_p${N}_$name.json "$@" \
    | tail -2 | head -1
}
LJ=(--group-cores --jitter --local-jitter --warmup 2)
run lj_all4 "${LJ[@]}" --profile-from $P/p0 $P/p1 $P/p2 $P/p3
run lj_before_p0 "${LJ[@]}" --profile-from $P/p0
run lj_after_p3 "${LJ[@]}" --profile-from $P/p3
run lj_first_half "${LJ[@]}" --profile-from $P/p0 $P/p1
run lj_second_half "${LJ[@]}" --profile-from $P/p2 $P/p3
for i in p1 p2; do run lj_single_$i "${LJ[@]}" --profile-from $P/$i; done
run no_lj_all4 --group-cores --jitter --warmup 2 --profile-from $P/p0 $P/p1 $P/p2 $P/p3
$PY docs/bench/plan_44/step_concurrency.py $P | tee docs/bench/plan_44/p${N}_concurrency.txt
$PY docs/bench/plan_44/criteria.py docs/bench/plan_44/validate_p${N}_lj_all4.json | tee docs/bench/plan_44/p${N}_criteria.txt
