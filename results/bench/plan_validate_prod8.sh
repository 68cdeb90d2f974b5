#!/bin/bash
# Issue 44.5, fifth try (pre-registered in docs/planner.md "Issue 44.5, fifth: concurrent slot steps' cores from their measured concurrency"; the protocol of prod7 ("fourth: pooled profiles on
# both sides of a fresh grid"): three profiles, the 18-row grid (the prod4 command), three profiles; nothing else
# running. Then the validations: results/bench/plan_44/validate_group_cores.sh.
# (the protocol's commands: results/bench/plan_validate_pooled.sh)
exec bash "$(dirname "$0")/plan_validate_pooled.sh" 8
