"""`make quickstart-libero` end to end at the smoke size (`VLAJAX_QUICKSTART_SIZE=smoke`): LIBERO demos on real
LIBERO workers -> SFT (`sft-libero-tiny`, token head) -> evaluation at update 0 -> async GRPO on LIBERO's success
(1 update) -> evaluation -> the report folder. A wiring check on short episodes, not a learning run; the default
size is not yet measured. Without the LIBERO venv it skips
(VLAJAX_LIBERO_REQUIRED=1, as `make test` sets it, makes that a failure)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from vlajax.data.lerobot import LeRobotData
from vlajax.libero import pool as pool_mod

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _venv_or_skip() -> None:
    try:
        pool_mod.libero_python()
    except pool_mod.LiberoEnvMissing as e:
        if os.environ.get("VLAJAX_LIBERO_REQUIRED"):
            raise
        pytest.skip(f"{e}")


@pytest.mark.slow  # ~10+ min at this machine's load (6 LIBERO pool starts, 3 compiles): over the default suite's budget
def test_quickstart_libero_smoke_writes_the_report(tmp_path):
    _venv_or_skip()
    out = str(tmp_path / "qsl")
    env = dict(os.environ, VLAJAX_QUICKSTART_SIZE="smoke", VLAJAX_QUICKSTART_DIR=out, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-m", "vlajax.quickstart.libero"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = os.path.join(out, "report")
    assert f"report: {os.path.join(report, 'README.md')}" in proc.stdout
    # 1. the demos: one recorded LIBERO episode of task 0 from demo initial state 25, openpi's layout at 32 px
    with open(os.path.join(out, "demos", "demos.json")) as f:
        demos = json.load(f)
    assert [(e["task"], e["init"], e["written"]) for e in demos["episodes"]] == [(0, 25, True)]
    data = LeRobotData(os.path.join(out, "demos"))
    assert data.num_episodes == 1
    # 2. SFT trained the token head on both cameras with LIBERO's 7-dim actions
    with open(os.path.join(out, "sft", "checkpoints", "policy.json")) as f:
        policy = f.read()
    assert '"action_head": "tokens"' in policy and '"action_dim": 7' in policy
    # 3. every evaluation ran LIBERO episode (task 0, held-out init 0) to the 10-step limit or LIBERO's success
    for u in (0, 1):
        with open(os.path.join(out, "eval", f"update-{u}", "eval.json")) as f:
            ev = json.load(f)
        assert [(e["task"], e["init"]) for e in ev["episodes"]] == [(0, 0)]
        assert ev["episodes"][0]["success"] or ev["episodes"][0]["steps"] == 10
        assert not ev["partial"]
    # 4. the RL phase ran one asynchronous GRPO update on LIBERO episodes and saved the policy it was evaluated at
    with open(os.path.join(out, "rl", "libero_rl.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip() and "update" in json.loads(line)]
    assert [r["update"] for r in rows] == [1] and rows[0]["env_steps"] > 0
    assert os.path.isfile(os.path.join(out, "rl", "checkpoints", "policy.json"))
    # 5. the report: a per-task row with intervals, the mean, the curve, the figure, a GIF, the commands
    with open(os.path.join(report, "README.md")) as f:
        text = f.read()
    assert re.search(r"\| 0: pick up the black bowl [^|]+ \| \d+% \[\d+, \d+\] \| \d+% \[\d+, \d+\] \| [+-]\d+ \|",
                     text), text
    assert "| **mean** |" in text and "Evaluation during RL:" in text and "python -m vlajax.train eval" in text
    with open(os.path.join(report, "summary.json")) as f:
        summary = json.load(f)
    assert [e["update"] for e in summary["evals"]] == [0, 1] and summary["meta"]["size"] == "smoke"
    assert os.path.getsize(os.path.join(report, "curves.png")) > 1000
    assert len([f for f in os.listdir(report) if f.endswith(".gif")]) == 1
