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


def test_quickstart_settings_parse_and_refuse():
    """`VLAJAX_QUICKSTART_SEED` / `_SIZE`: defaults, a valid seed, and one `error:` line for an
    invalid one (raised before any phase runs: `main` calls this first)."""
    from vlajax.quickstart import _settings

    assert _settings({}) == ("default", 0)
    assert _settings({"VLAJAX_QUICKSTART_SEED": "2", "VLAJAX_QUICKSTART_SIZE": "smoke"}) == ("smoke", 2)
    for bad in ("-1", "x", "1.5", "", str(2**31)):
        with pytest.raises(SystemExit, match=r"^error: VLAJAX_QUICKSTART_SEED must be an integer"):
            _settings({"VLAJAX_QUICKSTART_SEED": bad})
    with pytest.raises(SystemExit, match=r"^error: VLAJAX_QUICKSTART_SIZE must be one of default, smoke"):
        _settings({"VLAJAX_QUICKSTART_SIZE": "big"})


def test_quickstart_refuses_a_bad_seed_before_running(tmp_path):
    """The process exits 1 with one `error:` line and creates no output folder."""
    out = tmp_path / "qs"
    env = dict(os.environ, VLAJAX_QUICKSTART_SEED="-3", VLAJAX_QUICKSTART_DIR=str(out))
    proc = subprocess.run([sys.executable, "-m", "vlajax.quickstart"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == ["error: VLAJAX_QUICKSTART_SEED must be an integer in [0, 2**31), "
                                                "got '-3'"]
    assert proc.stdout == "" and not out.exists()


def test_quickstart_rl_recipe_parses():
    """The RL phase's flags give train-async GRPO at staleness 1 with decoupled PPO, the preset's progress
    reward, the zero-variance filter and clip-higher, rollouts at temperature 0.5 and a KL penalty to the SFT policy."""
    from vlajax.quickstart import RL_RECIPE
    from vlajax.train import parse

    cfg = parse("rl", ["--preset", "rl-grpo-tokens", *RL_RECIPE])
    assert cfg.pipeline.enabled and cfg.pipeline.staleness_threshold == 1 and not cfg.pipeline.use_rollout_log_probs
    assert cfg.rl.algo == "grpo" and cfg.rl.reward == "progress" and cfg.rl.filter_zero_advantage
    assert cfg.rl.clip_high > cfg.rl.clip_low
    assert cfg.rl.temperature == 0.5 and cfg.rl.kl_coef == 0.04
