#!/bin/bash
# Issue 44.5, fourth try (pre-registered in docs/planner.md "Issue 44.5, fourth: pooled profiles on
# both sides of a fresh grid"): three profiles, the 18-row grid (the prod4 command), three profiles; nothing else
# running. Then the validations: results/bench/plan_44/validate_pooled.sh.
# (the protocol's commands: results/bench/plan_validate_pooled.sh)
exec bash "$(dirname "$0")/plan_validate_pooled.sh" 7
