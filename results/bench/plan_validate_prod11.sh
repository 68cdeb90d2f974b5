#!/bin/bash
# Issue 44.5, eighth try (pre-registered in docs/planner.md "Issue 44.5, eighth: profiles interleaved
# with the grid's repeats"): the interleaved protocol on grid 11 (run at 54b9bc4 with this body inline; the same
# commands since moved to plan_validate_interleaved.sh). Then: results/bench/plan_44/validate_prod11.sh
exec bash "$(dirname "$0")/plan_validate_interleaved.sh" 11
