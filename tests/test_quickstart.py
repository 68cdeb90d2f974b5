"""`make quickstart` end to end at the smoke size (`VLAJAX_QUICKSTART_SIZE=smoke`): demos -> SFT
(token head) -> asynchronous GRPO -> the report folder. Slow (several minutes on 2 cores); the
default size is measured, not tested (docs/results.md, "Quickstart")."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_quickstart_smoke_writes_the_report(tmp_path):
    out = str(tmp_path / "qs")
    env = dict(os.environ, VLAJAX_QUICKSTART_SIZE="smoke", VLAJAX_QUICKSTART_DIR=out)
    proc = subprocess.run([sys.executable, "-m", "vlajax.quickstart"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=3000)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = os.path.join(out, "report")
    assert f"report: {os.path.join(report, 'README.md')}" in proc.stdout
    with open(os.path.join(report, "README.md")) as f:
        text = f.read()
    for task in ("goal/put_in_square", "goal/push_to_square", "goal/stack", "goal/press_button"):
        assert re.search(rf"\| {re.escape(task)} \| \d+% \| \d+% \|", text), task
    assert "| **mean** |" in text and "python -m vlajax.train" in text
    assert os.path.getsize(os.path.join(report, "curves.png")) > 1000
    assert len([f for f in os.listdir(report) if f.endswith(".gif")]) == 4
    # the SFT phase trained the token head, the RL phase ran the asynchronous pipeline
    with open(os.path.join(out, "sft", "checkpoints", "policy.json")) as f:
        assert '"action_head": "tokens"' in f.read()
    assert os.path.isfile(os.path.join(out, "rl", "async_metrics.jsonl"))
