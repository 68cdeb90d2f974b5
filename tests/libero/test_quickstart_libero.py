"""`make quickstart-libero` end to end at the smoke size (`VLAJAX_QUICKSTART_SIZE=smoke`): LIBERO demos on real LIBERO
workers -> SFT (`sft-libero-tiny`, token head) -> async GRPO on LIBERO's success (1 update), evaluated in the run at
update 0 and at the end (the final version's episode recorded as a GIF) -> the report folder. A wiring check on short
episodes, not a learning run. Without the LIBERO venv it skips (VLAJAX_LIBERO_REQUIRED=1, as `make test` sets it,
makes that a failure)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.libero.libero_env import venv_or_skip
from vlajax.data.lerobot import LeRobotData

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quickstart_libero_smoke_writes_the_report(tmp_path):
    venv_or_skip()
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
    with open(os.path.join(out, "rl", "libero_rl.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    # 3. the run evaluated the SFT policy (update 0) and the final one (update 1) on LIBERO episode (task 0, held-out
    # init 0), run to the 10-step limit or LIBERO's success
    evals = [r["eval"] for r in records if "eval" in r]
    assert [(e["update"], e["episodes"], list(e["outcomes"])) for e in evals] == [(0, 1, ["0/0"]), (1, 1, ["0/0"])]
    assert all(e["successes"] == 1 or e["steps_mean"] == 10 for e in evals)
    # ... the final one recorded its episode as a GIF, named in its row (the SFT policy's: none); no frames left
    (gif,) = evals[1]["videos"]
    outcome = "success" if evals[1]["successes"] else "failure"
    assert "videos" not in evals[0] and gif == f"videos/libero_spatial_task0_init0_{outcome}.gif", evals[1]
    assert os.listdir(os.path.join(out, "rl", "videos")) == [os.path.basename(gif)]
    assert not os.path.exists(os.path.join(out, "rl", "frames"))
    # 4. the RL phase ran one asynchronous GRPO update on LIBERO episodes and saved the policy it was evaluated at
    rows = [r for r in records if "update" in r]
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
    assert summary["before"]["per_task"]["0"]["episodes"] == 1
    assert os.path.getsize(os.path.join(report, "curves.png")) > 1000
    # ... and the final policy's GIF beside the README (a copy of the run's), linked from it: a frame per decision
    from PIL import Image

    name = os.path.basename(gif)
    assert "- 0: pick up the black bowl" in text, text
    assert f"held-out initial state 0, {outcome}: ![{name}]({name})" in text, text
    with open(os.path.join(report, name), "rb") as f, open(os.path.join(out, "rl", gif), "rb") as g:
        assert f.read() == g.read()
    with Image.open(os.path.join(report, name)) as im:
        assert im.format == "GIF" and im.n_frames >= 1
