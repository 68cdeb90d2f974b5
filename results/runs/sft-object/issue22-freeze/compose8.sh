#!/usr/bin/env bash
# Issue 22.4, eighth attempt, dev probe after devC (written 2026-11-26 13:09 UTC, before its run).
# devC (VLM frozen at the grounding's) kept the cube choice (70% on seed 7) and the grasp precision (median
# 1.4 cm, devB: 4.8 cm) but its action head failed (2.5% success): the frozen prefix does not carry what the
# expert needs to act. This probe asks what the two parts give together: devB's action head (full SFT)
# conditioned at each chunk on devC's predicted target (a separate, frozen-VLM target predictor).
# Eval seed 7, 10 episodes per task (the dev seed; seed 0 is not touched by this probe).
# What it decides: if this composition reaches >= 55% on seed 7, a two-tower policy (a frozen grounding
# tower for the target, a trained tower for the actions) is worth building into vlajax; otherwise not.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=runs/i22b
date -u +%H:%M:%S; uptime
.venv/bin/python experiments/object_suite_target_probe.py --checkpoint $R/devB/checkpoints --target-from $R/devC/checkpoints \
    --eval-seed 7 --episodes-per-task 10 --json $R/probe-devB-targetC.json > $R/probe-devB-targetC.log 2>&1
date -u +%H:%M:%S; uptime
