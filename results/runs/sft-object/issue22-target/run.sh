#!/usr/bin/env bash
# Issue 22.4, fourth attempt: the action head conditioned on the predicted target
# (--model.target-conditioning; the aux head's grasp xy / place xy, teacher-forced in SFT).
#
# CRITERION (written 2026-11-26 ~03:30 UTC, before any SFT run of this attempt, not changed after):
#   met  <=>  mean success >= 0.60 over the standard evaluation (`eval`, seed 0, 20 episodes per
#             task = 80 episodes) of the policy from ONE recipe (demos + SFT) whose wall time,
#             summed over its stages, is <= 60 minutes on this shared 2-core machine.
#   Development (which settings go into the recipe) uses only eval seed 7, 10 episodes per task;
#   the standard seed 0 is evaluated once, on the final recipe's checkpoint, and reported as it falls.
#   Secondary, reported whatever happens: the dev success with the predicted target vs the same
#   checkpoint's teacher-forced ceiling is not measurable in closed loop (no demo target at
#   inference), so the probe is the SFT metric target_pred_mse (prediction vs demo target).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=runs/i22t
stamp() { date -u +%H:%M:%S; uptime; }

# Stage 1 (recipe): target-swap demos, 400 scenes x 3 targets = 1200 episodes
stamp; /usr/bin/time -v python -m vlajax.train demos --preset sft-small --suite object --episodes-per-task 300 \
    --data.demo-target-swap --env.num-envs 48 --out $R/demos-swap300; stamp
# measured: 03:15:21-03:43:33 UTC, 28 min 12 s wall (908 s user + 15 s sys), load average 6.0-6.8
# (other engineers' jobs), 1200 of 1200 expert successes

# Development run d1 (eval seed 7, 10 episodes per task; NOT part of the recipe): 1500 steps
#   python -m vlajax.train sft --preset sft-small --env.suite object --data.dataset-dir $R/demos-swap300 \
#       --output-dir $R/d1 --model.aux-target grasp_place --model.target-conditioning --sft.target-noise 0.1 \
#       --sft.num-steps 1500 --sft.eval-every 500 --sft.eval-episodes-per-task 10 --seed 7 --sft.time-limit-minutes 0
# Stage 2 (recipe) and the standard evaluation: appended below once the SFT settings are fixed on
# eval seed 7; the recipe's SFT gets --sft.time-limit-minutes so that stage 1 + stage 2 <= 60 min.
# d1 probe (eval seed 7, 5 episodes per task, step-500 checkpoint; 04:00-04:05 UTC):
#   .venv/bin/python experiments/object_suite_target_probe.py --checkpoint $R/d1/checkpoints --eval-seed 7 \
#       --episodes-per-task 5 --oracle --json $R/probe-d1-oracle-a.json
#   -> conditioned on the TRUE target: 70% (14/20); d1's own eval at step 500 (predicted target): 7.5% (3/40);
#      the first-chunk predicted grasp is nearest the named cube in 60% (median error 10 cm), place 3.2 cm.
#   d1's aux MSE plateaus at ~0.52 (steps 400-950) while the flow MSE keeps falling (0.17 -> 0.12):
#   the action head is learned, the prediction is the bottleneck. Hence the one change for the
#   recipe: --sft.aux-target-weight 5 (d1: 1). d1 was stopped at step 1000 to free the CPU.

# Stage 2 (recipe): SFT, capped so that stage 1 (28 min 12 s) + stage 2 <= 60 min
stamp; /usr/bin/time -v python -m vlajax.train sft --preset sft-small --env.suite object \
    --data.dataset-dir $R/demos-swap300 --output-dir $R/final --model.aux-target grasp_place \
    --model.target-conditioning --sft.target-noise 0.1 --sft.aux-target-weight 5 \
    --sft.num-steps 1800 --sft.eval-every -1 --sft.time-limit-minutes 28; stamp

# The standard evaluation (not part of the recipe's time): seed 0, 20 episodes per task
stamp; python -m vlajax.train eval --preset sft-small --checkpoint $R/final/checkpoints --suite object \
    --output-dir $R/final; stamp

# Measured (2026-11-26):
#   stage 1 demos  03:15:21-03:43:33  28 min 12 s wall (908 s user + 15 s sys), load 0.6 at the start, 6.0-6.8 during
#   stage 2 SFT    04:06:32-04:30:21  23 min 44 s wall (800 s user + 249 s sys), load 4.3-6.9 (polled each minute),
#                  all 1800 steps (time limit not hit); last step: aux MSE 0.29, flow MSE 0.12
#   recipe total   51 min 56 s
#   eval seed 0    04:30:23-04:34:36  3 min 58 s wall, load 5.7-6.4: 3.8% (3 of 80)  -> criterion NOT met
# Why (eval seed 7, 10 episodes per task, the final checkpoint):
#   .venv/bin/python experiments/object_suite_target_probe.py --checkpoint $R/final/checkpoints --eval-seed 7 \
#       --episodes-per-task 10 --json $R/probe-final-pred.json             # predicted target: 15% (6/40)
#   ... the same with --oracle --json $R/probe-final-oracle.json           # true target:      85% (34/40)
#   ... the same with --hold-first --json $R/probe-final-hold.json         # first prediction held: 10% (4/40)
# (probe-final-pred/oracle.json and probe-d1-oracle-a.json also hold last_chunk_grasp_error_m_median, a field
#  since dropped from the probe: the prediction on frames after success, which no demo has, vs the cube's
#  initial xy; not meaningful.)
