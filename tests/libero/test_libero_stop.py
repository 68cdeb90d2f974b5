"""SIGTERM on the LIBERO routes (`rl --suite libero_*`, `eval --suite libero_*`; docs/reliability.md): the real
command in a subprocess gets SIGTERM in a phase; asserted: exit code 0, the one stop line, seconds to exit
within the documented bound, the checkpoints kept, and that no LIBERO worker process (nor anything in its
process group) outlives the command.

The stop after an update (its checkpoint forced) is folded into the end to end of
`tests/libero/test_libero_rl.py` (`test_async_rl_on_libero_workers_end_to_end`: one LIBERO run pays for both).
Needs the LIBERO venv (`make libero`; skipped without it unless VLAJAX_LIBERO_REQUIRED); the RL test also
the openpi reference fixtures (`../shared`; skipped without them).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.procs import process_stat

sys.path.insert(0, os.path.dirname(__file__))
from test_libero_rl import FIXTURES, imported, venv_or_skip  # noqa: E402, F401  (the imported dummy pi05_libero; 3-9 s)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ABANDON_BOUND_S = 10.0  # docs/reliability.md: a phase abandoned -> the exit (measured < 1 s)
START_TIMEOUT_S = 600.0  # waiting for the phase to begin (a loaded 2-core machine)


def _workers_of(pid: int) -> list[int]:
    """The LIBERO worker processes (children of `pid` running vlajax.libero.worker)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and (st := process_stat(int(d))) is not None and st[0] == pid:
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if b"vlajax.libero.worker" in f.read():
                        out.append(int(d))
            except OSError:
                pass
    return out


def _left_in_sessions(sessions: list[int]) -> list[int]:
    """Live processes in any of those sessions (a worker runs in a session of its own, with what it started)."""
    return [int(d) for d in os.listdir("/proc") if d.isdigit() and (st := process_stat(int(d))) is not None
            and st[1] in sessions]


class _Run:
    """The command in a subprocess, its stdout / stderr lines collected as they come."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None = None):
        self.t0 = time.monotonic()
        self.popen = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})},
                                      text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, into in ((self.popen.stdout, self.out), (self.popen.stderr, self.err)):
            threading.Thread(target=lambda s=stream, i=into: i.extend(s), daemon=True).start()

    def wait_for(self, what: str, ready) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            if self.popen.poll() is not None or time.monotonic() > deadline:
                self.popen.kill()
                pytest.fail(f"never reached {what} (exit {self.popen.poll()}):\n{''.join(self.err)[-4000:]}")
            time.sleep(0.05)

    def sigterm(self) -> tuple[int, float]:
        """SIGTERM -> (exit code, seconds from the signal to the exit)."""
        t = time.monotonic()
        self.popen.send_signal(signal.SIGTERM)
        try:
            rc = self.popen.wait(300)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            pytest.fail(f"no exit 300 s after SIGTERM:\n{''.join(self.err)[-4000:]}")
        dt = time.monotonic() - t
        time.sleep(0.2)  # the reader threads take the last lines
        return rc, dt

    def stop_lines(self, command: str) -> list[str]:
        return [ln.rstrip() for ln in self.err if ln.startswith(f"{command}: SIGTERM during")]


def _assert_no_orphans(workers: list[int]) -> None:
    deadline = time.monotonic() + 5  # (they are killed and reaped before the exit; a margin for /proc)
    while (left := _left_in_sessions(workers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert workers and not left, f"worker processes left behind: {left} (workers were {workers})"


def test_rl_sigterm_during_setup_kills_the_workers(imported, tmp_path):  # noqa: F811
    """`rl --suite libero_spatial`: SIGTERM as the LIBERO worker starts (set-up: the pool's start, the first
    compiles) -> abandoned: exit 0, one line, no checkpoint, the worker killed."""
    venv_or_skip()
    out = tmp_path / "run"
    run = _Run([sys.executable, "-m", "vlajax.train", "rl", "--suite", "libero_spatial", "--preset",
                "rl-pi05-libero-dummy", "--rl.init-from", imported, "--output-dir", str(out),
                "--model.tokenizer-path", os.path.join(FIXTURES, "tokenizer.model"), "--rl.num-iterations", "3",
                "--libero.max-steps", "10", "--libero.num-steps-wait", "2", "--libero.tasks", "0",
                "--libero.workers", "1"])
    workers: list[int] = []
    run.wait_for("the LIBERO worker's start", lambda: workers.extend(_workers_of(run.popen.pid)) or workers)
    rc, dt = run.sigterm()
    lines = run.stop_lines("rl")
    print(f"libero rl: SIGTERM during set-up -> exit {rc} in {dt:.2f} s; {lines}")
    assert rc == 0 and len(lines) == 1, "".join(run.err)[-4000:]
    assert re.fullmatch(r"rl: SIGTERM during (set-up \(before the first update\)|"
                        r"update 1 \(its predecessor is saved\)): "
                        r"abandoned it; nothing new to save; no checkpoint yet; exit 0", lines[0]), lines[0]
    assert dt < ABANDON_BOUND_S
    ckpts = out / "checkpoints"
    assert not [n for n in (os.listdir(ckpts) if ckpts.is_dir() else []) if n.isdigit()]  # nothing half-written
    _assert_no_orphans(workers)


def test_eval_sigterm_mid_evaluation_writes_nothing_kills_the_workers(tmp_path):
    """`eval --suite libero_spatial` (the scripted expert, no renderer): SIGTERM after the first episode's
    result -> abandoned: exit 0, one line with the episodes finished, no eval.json (nor its .tmp, nor this
    run's frames), the worker killed."""
    venv_or_skip()
    out = tmp_path / "eval"
    run = _Run([sys.executable, "-m", "vlajax.train", "eval", "--suite", "libero_spatial", "--expert", "--tasks", "0",
                "--episodes-per-task", "3", "--workers", "1", "--no-video", "--out", str(out)])
    workers: list[int] = []

    def first_result() -> bool:
        workers.extend(w for w in _workers_of(run.popen.pid) if w not in workers)
        return any("[1/3]" in ln for ln in run.out)

    run.wait_for("the first episode's result", first_result)
    rc, dt = run.sigterm()
    lines = run.stop_lines("eval")
    print(f"libero eval: SIGTERM during the episodes -> exit {rc} in {dt:.2f} s; {lines}")
    assert rc == 0 and len(lines) == 1, "".join(run.err)[-4000:]
    m = re.fullmatch(r"eval: SIGTERM during the episodes: abandoned it; ([123]) of 3 episodes finished \(printed "
                     r"above\), no eval\.json written \(.*\); exit 0", lines[0])
    assert m, lines[0]
    assert int(m.group(1)) == sum("] libero_spatial-t0-i" in ln for ln in run.out)  # the count is what finished
    assert dt < ABANDON_BOUND_S
    assert sorted(os.listdir(out)) == ["workers"], os.listdir(out)  # no eval.json / .tmp / frames / table
    _assert_no_orphans(workers)


@pytest.mark.slow
def test_rl_sigterm_as_the_final_evaluation_writes_its_gif_leaves_no_scratch(imported, tmp_path):  # noqa: F811
    """`rl_train.train` in a process of its own (this file's __main__): 1 update, evaluated at the end only
    (`--rl.eval-every 0`, one held-out episode, recorded); SIGTERM as the final evaluation is about to turn its
    frames into a GIF -> the evaluation is abandoned: exit 0, one line, the worker killed, and nothing of it left
    -- no GIF (whole or temporary), no frames file nor frames directory, no eval row (the row and its GIFs go
    together: `rl_eval.EvalVideos`)."""
    venv_or_skip()
    out = tmp_path / "run"
    run = _Run([sys.executable, os.path.abspath(__file__), imported, str(out)], env={"PYTHONPATH": REPO})
    workers: list[int] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    while run.popen.poll() is None and time.monotonic() < deadline:
        workers.extend(w for w in _workers_of(run.popen.pid) if w not in workers)
        time.sleep(0.05)
    rc = run.popen.wait(60)
    time.sleep(0.2)  # the reader threads take the last lines
    lines = run.stop_lines("rl")
    frames = [json.loads(ln)["frames"] for ln in run.out if ln.startswith('{"frames"')]
    print(f"libero rl: SIGTERM as the final evaluation writes its GIF -> exit {rc}; {lines}")
    assert rc == 0 and len(lines) == 1 and frames == [[str(out / "frames" / os.path.basename(frames[0][0]))]], \
        "".join(run.out)[-2000:] + "".join(run.err)[-4000:]
    assert re.fullmatch(r"rl: SIGTERM during the evaluation at update 1: abandoned it; .*; exit 0", lines[0]), lines
    assert not any("not stopped" in ln for ln in run.out)
    assert not os.path.exists(frames[0][0]) and not (out / "frames").exists()
    assert not (out / "videos").is_dir() or not os.listdir(out / "videos"), os.listdir(out / "videos")
    with open(out / "libero_rl.jsonl") as f:
        assert [("eval" in r, r.get("update")) for r in map(json.loads, f)] == [(False, 1)]
    _assert_no_orphans(workers)


@pytest.mark.slow
def test_rl_second_sigterm_exits_130_and_the_run_resumes(imported, tmp_path):  # noqa: F811
    """`rl --suite libero_spatial`, nothing saved after update 1 (checkpoint.every_steps 100): two SIGTERMs 0.1 s
    apart once update 2 is logged -> exit 130 at once, only whole checkpoints on disk, the worker gone (the
    second signal's exit kills it: `preemption.on_hard_exit(pool.kill_all)`); the same command to 3 updates
    then resumes from the newest checkpoint and trains only the updates after it."""
    venv_or_skip()
    out = tmp_path / "run"

    def cmd(n: int) -> list[str]:
        return [sys.executable, "-m", "vlajax.train", "rl", "--suite", "libero_spatial", "--preset",
                "rl-pi05-libero-dummy", "--rl.init-from", imported, "--output-dir", str(out),
                "--model.tokenizer-path", os.path.join(FIXTURES, "tokenizer.model"), "--rl.num-iterations", str(n),
                "--libero.max-steps", "10", "--libero.num-steps-wait", "2", "--libero.tasks", "0",
                "--libero.workers", "1", "--checkpoint.every-steps", "100"]

    run = _Run(cmd(5))
    workers: list[int] = []

    def update_2() -> bool:
        workers.extend(w for w in _workers_of(run.popen.pid) if w not in workers)
        return any("rl libero: update 2/5" in ln for ln in run.err)

    run.wait_for("update 2", update_2)
    run.popen.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    rc, dt = run.sigterm()  # (dt: from the second signal)
    print(f"libero rl: two SIGTERMs after update 2 -> exit {rc} {dt:.2f} s after the second")
    assert dt < 5  # docs/reliability.md: at once
    assert rc == 130 and any("a second interrupt" in ln for ln in run.err), "".join(run.err)[-4000:]
    _assert_no_orphans(workers)  # the second signal's exit kills them first (preemption.on_hard_exit)
    ckpts = sorted(int(n) for n in os.listdir(out / "checkpoints") if n.isdigit())
    assert ckpts and ckpts[0] == 1 and set(ckpts) <= {1, 2}, ckpts
    again = subprocess.run(cmd(3), cwd=REPO, env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True,
                           text=True, timeout=1800)
    assert again.returncode == 0, again.stderr[-4000:]
    assert f"resumed at update {ckpts[-1]}" in again.stderr
    with open(out / "libero_rl.jsonl") as f:
        rows = [json.loads(ln)["update"] for ln in f]
    assert rows[-(3 - ckpts[-1]):] == list(range(ckpts[-1] + 1, 4)), rows  # the resumed run: the updates after it
    assert sorted(int(n) for n in os.listdir(out / "checkpoints") if n.isdigit())[-1] == 3


if __name__ == "__main__":  # the final-evaluation stop's run (a SIGTERM from itself ends it)
    from test_libero_rl import _cfg

    from vlajax.libero import rl_train

    imported_dir, out_dir = sys.argv[1:]

    def on_rollout(rollout):
        write = rollout.videos.write

        def signalled_write(results):  # the final evaluation's episodes are done: their frames on disk
            print(json.dumps({"frames": [r["frames"] for r in results]}), flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(2)  # the stop's cleanup (the worker killed, this run's scratch swept) goes first
            return write(results)

        rollout.videos.write = signalled_write

    rl_train.train(_cfg(imported_dir, out_dir, 1, "--rl.eval-every", "0", "--libero.episodes-per-task", "1"),
                   on_rollout=on_rollout)
    print("not stopped", flush=True)
