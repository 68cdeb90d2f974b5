#!/usr/bin/env bash
# Issue 22.4, eighth attempt, dev probes after compose8.sh (written 2026-11-26 13:20 UTC, before their runs).
# devB's action head with devC's targets gave devC's own 2.5% (the same per-task figures) although the
# first-chunk target was right 70% of the time with 1.4 cm median error: the frozen-VLM predictor is trained
# on first frames (grounding) and its prediction at LATER chunks (gripper moving) is the suspect. These two
# probes hold the first chunk's prediction for the whole episode (--hold-first):
#   C-hold:  devC alone (its own action head and targets)
#   BC-hold: devB's action head, devC's first-chunk target
# Eval seed 7, 10 episodes per task. What it decides: if either reaches >= 55%, the recipe to build is a
# target predicted once from the first frame by a frozen grounding tower; otherwise the eighth attempt ends
# with the dev numbers published.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=runs/i22b
P="experiments/object_suite_target_probe.py --eval-seed 7 --episodes-per-task 10 --hold-first"
date -u +%H:%M:%S; uptime
.venv/bin/python $P --checkpoint $R/devC/checkpoints --json $R/probe-devC-hold.json > $R/probe-devC-hold.log 2>&1
date -u +%H:%M:%S; uptime
.venv/bin/python $P --checkpoint $R/devB/checkpoints --target-from $R/devC/checkpoints \
    --json $R/probe-devB-targetC-hold.json > $R/probe-devB-targetC-hold.log 2>&1
date -u +%H:%M:%S; uptime
