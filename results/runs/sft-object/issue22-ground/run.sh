#!/usr/bin/env bash
# Issue 22.4, fifth attempt: the fourth attempt's target-conditioned action head (85% on eval seed 7
# with the TRUE target, 15% with its own prediction) started from the third attempt's grounding
# stage (nearest_ok 0.81 on held-out scenes), so the prediction of WHICH cube starts bound to the
# colour word instead of being learned from the ~3% of SFT frames where only the word decides.
#
# CRITERION (written 2026-11-26 06:45 UTC, before any SFT run of this attempt; not changed after):
#   met  <=>  mean success >= 0.60 over the standard evaluation (`eval`, seed 0, 20 episodes per
#             task = 80 episodes) of the policy from ONE recipe (demos + grounding + SFT) whose wall
#             time, summed over its stages, is <= 60 minutes on this shared 2-core machine.
#   Development uses eval seed 7 only (experiments/object_suite_target_probe.py, 10 episodes per task);
#   seed 0 is evaluated once, on the final recipe's checkpoint, and reported as it falls.
#   Development rule (fixed now): the dev run reuses the fourth attempt's demos (runs/i22t/demos-swap300,
#   same command as stage 1 below) and its SFT settings; if its probe on seed 7 shows the first
#   predicted grasp nearest the named cube in >= 60% of episodes (fourth attempt: 42.5%), the
#   recipe below runs unchanged from fresh demos; otherwise one change may be made, stated here
#   with the dev numbers that motivated it, before the recipe runs.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=runs/i22g
stamp() { date -u +%H:%M:%S; uptime; }

# Development (not part of the recipe):
#   grounding on first frames (1000 scenes x 3 targets, held-out 100), state token fed 0, the
#   target-conditioned model tree (target_in initialized, not trained):
#   .venv/bin/python experiments/object_suite_binding.py --scenes 1000 --heldout-scenes 100 --steps 2000 \
#       --state-token --target-conditioning --save-init $R/ground --json $R/ground.json
#   SFT from it on the fourth attempt's demos:
#   python -m vlajax.train sft --preset sft-small --env.suite object --data.dataset-dir runs/i22t/demos-swap300 \
#       --output-dir $R/dev --sft.init-from $R/ground --model.aux-target grasp_place --model.target-conditioning \
#       --sft.target-noise 0.1 --sft.aux-target-weight 5 --sft.num-steps 1800 --sft.eval-every -1
#   .venv/bin/python experiments/object_suite_target_probe.py --checkpoint $R/dev/checkpoints --eval-seed 7 \
#       --episodes-per-task 10 --json $R/probe-dev-pred.json

# Dev result (07:00 UTC, eval seed 7, 40 episodes; runs/i22g/probe-dev-pred.json): success 15% (6/40),
#   first predicted grasp nearest the named cube 47.5% (fourth attempt 42.5%), median error 9.7 cm; place 1.2 cm.
#   The grounding itself reached nearest_ok 0.88 / MSE 0.238 on held-out first frames (ground.json), so the SFT
#   loses most of it: its aux loss is a mean over all frames, of which the start frames (gripper at home, the
#   only ones where the word decides) are 3.2% (3600 of 113,326 frames).
# THE ONE CHANGE (07:12 UTC): --sft.aux-start-weight 30 (new flag): start frames weigh W = (1-f)/f = 30 in the
#   aux loss, so they carry half of it. Check before the recipe (dev2, same demos and grounding, eval seed 7):
#   the recipe runs only if dev2's first-grasp-nearest >= 60% or its seed-7 success >= 40%; otherwise the
#   attempt stops here and the dev numbers are published.
#   python -m vlajax.train sft ... (the dev command above) --sft.aux-start-weight 30 --output-dir $R/dev2
#   .venv/bin/python experiments/object_suite_target_probe.py --checkpoint $R/dev2/checkpoints --eval-seed 7 \
#       --episodes-per-task 10 --json $R/probe-dev2-pred.json

# dev2 result (07:14 UTC, eval seed 7, 40 episodes; probe-dev2-*.json): first-grasp nearest 72.5% (go rule met),
#   median error 6.5 cm, place 2.7 cm; but success 7.5% (3/40), 5% with the first prediction held (--hold-first),
#   75% with the true target (--oracle). The aux MSE over all frames rose to 0.51 (dev: 0.25): the later chunks'
#   predictions got worse, and a first prediction 6.5 cm off is too coarse for a head trained on targets 1 cm off
#   (noise 0.1 = 1.2 cm in x, 0.4 cm in y; grasp xy std 12.2 / 4.1 cm).
# AMENDMENT (07:20 UTC, development only; seed 0 untouched; the criterion unchanged): the "one change" rule is
#   replaced by two more dev runs in parallel (same demos and grounding, eval seed 7, 10 episodes per task):
#     dev3: --sft.aux-start-weight 30 --sft.target-noise 0.5  (teacher-forcing noise ~ the first prediction's error,
#           so the head learns to treat the target as a coarse hint and home in with its cameras)
#     dev4: --sft.aux-start-weight 5 --sft.target-noise 0.1   (start frames 14% of the aux loss: the first choice
#           better than dev, the later predictions better than dev2)
#   The recipe then runs with the settings of the best of dev, dev2, dev3, dev4 by seed-7 success with the
#   predicted target, if that is >= 20%; otherwise no recipe run and the dev numbers are published.

# dev3 / dev4 results (07:37 UTC, eval seed 7, 40 episodes each, predicted target; probe-dev{3,4}-pred.json):
#   dev3 (W 30, noise 0.5): success 5% (2/40), first-grasp nearest 77.5%, median error 5.4 cm, place 2.9 cm
#   dev4 (W 5, noise 0.1):  success 20% (8/40), first-grasp nearest 65%, median error 6.5 cm, place 1.7 cm
#   Best by the rule: dev4 (20% >= 20%), so recipe-2 runs with W=5 NOISE=0.1 (decided 07:38, before stage 3).

# The recipe (written 06:55 UTC, before the dev SFT finished; split in two at 07:22 UTC so that stages 1-2,
# which do not depend on the SFT settings, run while dev3/dev4 decide them: `recipe-1` = demos + grounding
# back to back, `recipe-2` = the SFT with W / NOISE from the dev runs. Stage 3's time limit keeps the sum of
# the stages' wall times <= 60 min: 60 min minus stages 1-2's wall, minus 4 min for the SFT's start-up,
# compile and final checkpoint; the wait between recipe-1 and recipe-2 is not part of the recipe).
#   Usage: bash run.sh recipe-1; then W=.. NOISE=.. bash run.sh recipe-2
py=.venv/bin/python
if [ "${1:-}" = recipe-1 ]; then
  T0=$(date +%s)
  stamp; /usr/bin/time -v $py -m vlajax.train demos --preset sft-small --suite object --episodes-per-task 300 \
      --data.demo-target-swap --env.num-envs 48 --out $R/demos-swap300 > $R/recipe-demos.log 2>&1; stamp
  stamp; /usr/bin/time -v $py experiments/object_suite_binding.py --scenes 1000 --heldout-scenes 100 --steps 2000 \
      --state-token --target-conditioning --save-init $R/ground-final --json $R/ground-final.json \
      > $R/recipe-ground.log 2>&1; stamp
  echo $(( $(date +%s) - T0 )) > $R/recipe-1.seconds
  echo "stages 1-2 took $(cat $R/recipe-1.seconds) s"
fi
if [ "${1:-}" = recipe-2 ]; then
  left=$(( (3600 - $(cat $R/recipe-1.seconds)) / 60 - 4 ))
  echo "SFT: W=${W:?} NOISE=${NOISE:?}, time limit $left min"
  T2=$(date +%s)
  stamp; /usr/bin/time -v $py -m vlajax.train sft --preset sft-small --env.suite object \
      --data.dataset-dir $R/demos-swap300 --output-dir $R/final --sft.init-from $R/ground-final \
      --model.aux-target grasp_place --model.target-conditioning --sft.target-noise $NOISE \
      --sft.aux-target-weight 5 --sft.aux-start-weight $W --sft.num-steps 1800 --sft.eval-every -1 \
      --sft.time-limit-minutes $left > $R/recipe-sft.log 2>&1; stamp
  echo "recipe wall (stages 1-2 + 3): $(( $(cat $R/recipe-1.seconds) + $(date +%s) - T2 )) s"
  # the standard evaluation (not part of the recipe's time): seed 0, 20 episodes per task
  stamp; $py -m vlajax.train eval --preset sft-small --checkpoint $R/final/checkpoints --suite object \
      --output-dir $R/final > $R/recipe-eval.log 2>&1; stamp
fi

# Measured (2026-11-26; 2 shared cores, a helper's four low-priority RL runs beside it, load 6-19):
#   stage 1 demos      07:17:12-07:35:25  18 min 13 s wall (from the stamps: /usr/bin/time's report was lost, see below);
#                      1200 episodes, 113,326 frames (the fourth attempt's count: the generator is deterministic)
#   stage 2 grounding  07:35:25-07:46:44  11 min 19 s wall (651 s user + 227 s sys); held-out nearest_ok 0.883,
#                      MSE 0.238 (identical to the dev grounding: deterministic)
#   stage 3 SFT        07:46:48-07:55:21   8 min 33 s wall (549 s user + 210 s sys), all 1800 steps (limit 26 min
#                      not hit); aux MSE 0.360, flow MSE 0.124 at the last step (identical to dev4)
#   recipe total       2285 s = 38 min 05 s
#   eval seed 0        07:55:21-07:56:18: 6.2% (5 of 80)  -> criterion NOT met
#   the same checkpoint on eval seed 7: 20% with its prediction (= dev4), 77.5% with the true target (--oracle)
# Incident: I edited this script (the dev3/dev4 lines above, 07:38) while `recipe-1` was running it. bash reads a
#   script as it goes, so after stage 2 it resumed at a shifted offset and ran a fragment of the stage-1 line
#   ("num-envs: command not found"), which overwrote recipe-demos.log (the demos' /usr/bin/time report). The
#   stages themselves had finished (stamps in recipe-1.out; the dataset's meta/info.json written 07:35:20).
