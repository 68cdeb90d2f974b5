#!/bin/bash
# Interleaved A/B of 2026-11-25 (issue 20 acceptance 1, second attempt):
#   prev = cc75907 with vlajax/rl/rollout.py of c31e687^ (the rollout before issue 20's change)
#   cur  = 34d3b72 (one forward per decision + palm-button exclude + V(final obs) of truncated envs only)
# git worktree add /tmp/s11/prev cc75907 && git -C /tmp/s11/prev checkout c31e687^ -- vlajax/rl/rollout.py
# git worktree add /tmp/s11/cur 34d3b72
# Criterion (fixed before the runs): flow-head pairwise ratio cur/prev of decisions/s, median over >= 5 pairs, >= 1.6.
for i in 1 2 3 4 5 6; do
  for t in prev cur; do
    uptime >> /tmp/s11/robench/load.log
    (cd /tmp/s11/$t && /work/main/.venv/bin/python -m vlajax.bench rollout --decisions 8 --repeats 7 \
        --json /tmp/s11/robench/${t}_$i.json) > /tmp/s11/robench/${t}_$i.log 2>&1
  done
done
