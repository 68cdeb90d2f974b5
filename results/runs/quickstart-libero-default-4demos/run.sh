#!/bin/bash
# default-size make quickstart-libero on a fresh clone of HEAD, phases + load logged; SEED=N picks the seed (default 0)
set -u
SEED=${SEED:-0}
D=/work/qsl-4demos-s$SEED
rm -rf $D && git clone -q /work/main $D && cd $D
ln -s /work/main/.venv .venv && ln -s /work/main/.venv-libero .venv-libero
touch .venv/.installed .venv-libero/.installed   # the venvs are built (make venv / make libero just before)
R=results-run; mkdir -p $R
git log --oneline -1 > $R/commit.txt
( while true; do echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $R/load.txt; sleep 60; done ) &
LP=$!
echo "start $(date -u +%FT%TZ) $(uptime)" > $R/phases.txt
VLAJAX_QUICKSTART_SEED=$SEED make quickstart-libero > $R/stdout.txt 2>&1
rc=$?
echo "end $(date -u +%FT%TZ) rc=$rc $(uptime)" >> $R/phases.txt
grep "^\[quickstart" $R/stdout.txt >> $R/phases.txt
kill $LP
