"""Every invalid flag combination is refused by the real CLI with one `error:` line and exit
code 2, within seconds and before anything compiles (no traceback, no tyro box)."""

import os
import subprocess
import sys
import time

import pytest

CASES = [  # (command and flags, words the error line must contain)
    (("rl", "--preset", "rl-debug", "--model.attention", "te"), "Transformer Engine"),
    (("sft", "--preset", "sft-tiny", "--model.fp8", "te"), "Transformer Engine"),
    (("rl", "--preset", "rl-debug", "--model.attention", "te", "--model.fp8", "te"), "model.fp8=te"),
    (("rl", "--preset", "rl-debug", "--rl.algo", "ppo", "--rl.advantage", "grpo"), "needs rl.algo='grpo'"),
    (("rl", "--preset", "rl-debug", "--rl.algo", "ppo", "--rl.advantage", "rloo"), "needs rl.algo='grpo'"),
    (("rl", "--preset", "rl-async-debug", "--rl.algo", "ppo", "--rl.critic", "privileged",
      "--pipeline.num-slots", "2"), "privileged observations"),
    (("rl", "--preset", "rl-debug", "--model.fp8", "flax"), "is for sft"),
    (("rl", "--preset", "rl-async-debug", "--pipeline.streaming", "true", "--rl.normalize-advantages", "batch"),
     "rl.normalize_advantages='batch'"),
    (("rl", "--preset", "rl-debug", "--rl.ratio-level", "factor"), "state-observation MLP"),
    (("sft", "--preset", "sft-tiny", "--sft.time-limit-minutes", "-1"), "sft.time_limit_minutes must be >= 0"),
    (("rl", "--preset", "rl-debug", "--rl.temperature", "0"), "rl.temperature must be > 0"),
    (("rl", "--preset", "rl-debug", "--rl.temperature", "0.5"), "state MLP's Gaussian policy"),
    (("smoke", "--mesh.dp", "3"), "is not divisible by mesh.dp=3"),  # a contradiction found by tyro's parse
    # each of these could end in a traceback, be refused only after 8-10 compiles, or be ignored
    (("sft", "--preset", "sft-tiny", "--model.attention", "cudnn"), "needs an NVIDIA GPU"),
    (("rl", "--preset", "rl-debug", "--rl.algo", "grpo", "--rl.advantage", "gae"), "bootstraps from a critic"),
    (("rl", "--preset", "rl-async-debug", "--rl.algo", "grpo"), "GRPO's episodic groups run through collect"),
    (("rl", "--preset", "rl-async-debug", "--rl.update-epochs", "2"), "pipeline.streaming needs rl.update_epochs=1"),
    (("rl", "--preset", "rl-async-debug", "--pipeline.num-slots", "3", "--pipeline.require-batches", "3",
      "--rl.micro-batches", "3"), "does not split into pipeline.num_slots=3"),
    (("rl", "--preset", "rl-debug", "--model.attention", "cudnn"), "state MLP policy"),
]


@pytest.mark.parametrize("args, words", CASES, ids=[" ".join(a[3:] or a) for a, _ in CASES])
def test_invalid_combination_is_one_error_line_before_any_compile(args, words):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_LOG_COMPILES": "1"}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "vlajax.train", *args], capture_output=True, text=True, timeout=120,
                       env=env)
    elapsed = time.monotonic() - t0
    assert p.returncode == 2, p.stderr[-3000:]
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and words in errors[0], p.stderr[-3000:]
    assert "Traceback" not in p.stderr and "╭" not in p.stderr, p.stderr[-3000:]
    assert "Compiling" not in p.stderr and "Finished XLA compilation" not in p.stderr, p.stderr[-3000:]
    assert elapsed < 60, f"took {elapsed:.1f} s"  # seconds on an idle machine (import + parse only)
