#!/usr/bin/env bash
# An interleaved-protocol grid N (results/bench/plan_validate_interleaved.sh N) validated as issue 44.5's eighth try
# fixed (docs/planner.md "Issue 44.5, eighth"): its model (--group-cores --jitter --local-jitter --warmup 2) with
# every profile pK of the grid pooled (criteria 1-3), then beside it: the first profile (before the rows) and the
# last (after them) alone, the first and second half's pools, the others alone, the sixth try's variant (no
# --local-jitter) pooled, each profile's step concurrency.
# Usage: validate_interleaved.sh N [--async-dispatch]
# -> results/bench/plan_44/validate_pN_*.json, pN_concurrency.txt, pN_criteria.txt; with --async-dispatch (the tenth
# try's variant, docs/planner.md "Issue 44.5, tenth") the option joins the variant, the files are named
# validate_pN_ad_*.json / pN_ad_criteria.txt and the comparison beside is the eighth's variant (without it)
set -euo pipefail
N=${1:?usage: validate_interleaved.sh N [--async-dispatch]}
AD=${2:-}
[ -z "$AD" ] || [ "$AD" = --async-dispatch ] || { echo "usage: validate_interleaved.sh N [--async-dispatch]" >&2; exit 2; }
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
P=results/bench/plan_profile_prod$N
R=results/bench/async_production_planval$N.json
run() {  # name, then flags and profiles up to --profile-from's list
  local name=$1; shift
  echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) p$N $name"
  JAX_PLATFORMS=cpu $PY -m research.planner validate --runs $R --json results/bench/plan_44/validate_p${N}_${T}$name.json "$@" \
    | tail -2 | head -1
}
LJ=(--group-cores --jitter --local-jitter --warmup 2)
T=""
if [ -n "$AD" ]; then T=ad_; EIGHTH=("${LJ[@]}"); LJ+=(--async-dispatch); fi
PS=(); for k in $(seq 0 99); do [ -d $P/p$k ] && PS+=($P/p$k); done  # p0 p1 ... in the order taken
n=${#PS[@]}; h=$(( (n + 1) / 2 ))
run lj_all${n} "${LJ[@]}" --profile-from "${PS[@]}"
run lj_before_$(basename ${PS[0]}) "${LJ[@]}" --profile-from ${PS[0]}
run lj_after_$(basename ${PS[n-1]}) "${LJ[@]}" --profile-from ${PS[n-1]}
run lj_first_half "${LJ[@]}" --profile-from "${PS[@]:0:h}"
run lj_second_half "${LJ[@]}" --profile-from "${PS[@]:n-h}"
for i in "${PS[@]:1:n-2}"; do run lj_single_$(basename $i) "${LJ[@]}" --profile-from $i; done
if [ -n "$AD" ]; then
  run eighth_all${n} "${EIGHTH[@]}" --profile-from "${PS[@]}"
else
  run no_lj_all${n} --group-cores --jitter --warmup 2 --profile-from "${PS[@]}"
fi
$PY results/bench/plan_44/step_concurrency.py $P | tee results/bench/plan_44/p${N}_concurrency.txt
$PY results/bench/plan_44/criteria.py results/bench/plan_44/validate_p${N}_${T}lj_all${n}.json | tee results/bench/plan_44/p${N}_${T}criteria.txt
