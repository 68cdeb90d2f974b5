"""Commands are quiet by default: vlajax's own lines and every library's warnings, no third-party INFO (JAX's
`Unable to initialize backend 'tpu'`, Orbax's save internals); `--logging.verbose` brings them back.

The in-process test checks the levels `setup_console` sets; the `slow` one runs a 40-step `sft` (tiny preset)
as a user does, JAX free to probe every backend (no JAX_PLATFORMS), and counts what reaches the terminal.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time

import pytest

from tests.sft.conftest import write_dataset
from vlajax.training.logging import setup_console

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    saved = root.level, list(root.handlers), {n: logging.getLogger(n).level for n in
                                              ("vlajax", "vlajax.training.checkpoint", "vlajax.training.preemption",
                                               "absl")}
    yield
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]
    for n, level in saved[2].items():
        logging.getLogger(n).setLevel(level)


def test_setup_console_levels(restore_logging):
    setup_console(verbose=False)
    assert not logging.getLogger("jax._src.xla_bridge").isEnabledFor(logging.INFO)  # the backend probing
    assert not logging.getLogger("absl").isEnabledFor(logging.INFO)  # Orbax's per-file lines
    assert logging.getLogger("absl").isEnabledFor(logging.WARNING)  # a library's warning still shows
    assert logging.getLogger("vlajax.sft.loop").isEnabledFor(logging.INFO)  # our own lines
    assert not logging.getLogger("vlajax.training.checkpoint").isEnabledFor(logging.INFO)  # per-save detail
    setup_console(verbose=True)
    for name in ("jax._src.xla_bridge", "absl", "vlajax.sft.loop", "vlajax.training.checkpoint"):
        assert logging.getLogger(name).isEnabledFor(logging.INFO), name


def _sft(out: str, demos: str, *flags: str) -> tuple[list[str], float]:
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}  # as a user runs it
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "vlajax.train", "sft", "--preset", "sft-tiny", "--data.dataset-dir",
                        demos, "--output-dir", out, *flags], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    return (r.stdout + r.stderr).splitlines(), time.monotonic() - t0


@pytest.mark.slow  # a 40-step SFT in a fresh process (~40 s warm, ~90 s cold on 2 cores)
def test_a_40_step_sft_prints_at_most_20_lines(tmp_path):
    demos = write_dataset(str(tmp_path / "demos"))
    lines, seconds = _sft(str(tmp_path / "run"), demos, "--sft.num-steps", "40")
    beats = [ln for ln in lines if re.match(r"\[sft sft-tiny\] \d+/40 .*: \d+ s", ln) and "(" not in ln]
    print(f"{len(lines)} lines ({len(beats)} heartbeat) in {seconds:.0f} s:", *lines, sep="\n")
    assert not [ln for ln in lines if re.search(r" INFO (?!vlajax)", ln) or "Unable to initialize backend" in ln], lines
    # the lines a run always prints, and the heartbeat's (one per 25 s of silence, so bounded by the run's length)
    assert len(lines) - len(beats) <= 18, lines
    assert len(beats) <= seconds / 25 + 1, lines
    assert len(lines) <= 20 or len(beats) > 4, lines  # <= 20 unless compiling alone took > 2 minutes
    verbose, _ = _sft(str(tmp_path / "verbose"), demos, "--sft.num-steps", "2", "--logging.verbose")
    assert any("INFO absl" in ln for ln in verbose) and any("Unable to initialize backend" in ln for ln in verbose)
