"""Stop anywhere: SIGTERM into every phase of `rl` (sync and async), `sft` and `eval` -- set-up, the first
compile, the update-0 evaluation, an update (its predecessor saved, or not), a periodic evaluation,
the async trainer waiting for a batch while rollout is busy. Each cell of docs/reliability.md's table
is one test here: the command (a subprocess: `tests/reliability/stop_driver.py`, which makes the phase
slow -- 60-120 s sleeps in evaluations and set-up, 12 s updates -- and marks where it is) gets SIGTERM
inside the phase and must exit 0 within the phase's documented bound, print one line saying what it
did, keep the expected checkpoints (no partial ones), and the same command run again (in this
process) must end on exactly the uninterrupted run's train state.

The bounds (docs/reliability.md): a phase with nothing unsaved is abandoned at once -- exit within
`ABANDON_S` (the write in flight, interpreter exit); an update with unsaved predecessors is finished
and saved: its remaining time plus `FINISH_S`. The run reaches each phase in ~10-20 s here (process
start-up dominates), so the whole file takes ~4-6 min on a loaded 2-core machine; it holds every cell.
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

import jax
import numpy as np
import pytest

from tests.reliability import stop_driver

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ABANDON_S = 10.0  # nothing unsaved: signal -> exit 0 (measured 0.1-0.2 s; slack for a loaded machine)
FINISH_S = 20.0  # a finished step: its save (Orbax, the grain iterator) and the exit, on a loaded machine
UPDATE_S = 12.0  # the slow updates / steps
LONG_S = 120.0  # the slow set-up, compile, evaluation and rollout: far longer than any bound here
N = 4  # rl iterations / updates
SFT_STEPS = 4


def _row(text: str) -> None:
    """One measured cell: printed, and appended to $STOP_ANYWHERE_TABLE if set (docs/reliability.md's table)."""
    print(text, flush=True)
    if path := os.environ.get("STOP_ANYWHERE_TABLE"):
        with open(path, "a") as f:
            f.write(text + "\n")


def _cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.getbasetemp() / "stop-anywhere-cache")


class _Proc:
    """The driver in a subprocess; merged output read line by line."""

    def __init__(self, slow: str, seconds: float, args: list[str], devices: int = 1):
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1", "STOP_DRIVER_DEVICES": str(devices),
               "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
        env.pop("XLA_FLAGS", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.reliability.stop_driver", slow, str(seconds), *args],
                                     cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for ln in self.proc.stdout:
            with self.cond:
                self.lines.append(ln.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_line(self, text: str, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while text not in self.lines:
                assert self.proc.poll() is None or text in self.lines, "\n".join(self.lines[-40:])
                assert time.monotonic() < deadline, f"no {text!r} in {timeout} s:\n" + "\n".join(self.lines[-40:])
                self.cond.wait(0.5)


def _interrupt(slow: str, seconds: float, marker: str, args: list[str], devices: int) -> tuple[int, float, str]:
    """Run, wait for `marker`, SIGTERM 0.5 s into the phase -> (exit code, seconds signal -> exit, output)."""
    p = _Proc(slow, seconds, args, devices)
    p.wait_line(marker)
    time.sleep(0.5)
    t0 = time.monotonic()
    p.proc.send_signal(signal.SIGTERM)
    rc = p.proc.wait(timeout=300)
    seconds_to_exit = time.monotonic() - t0
    time.sleep(0.2)
    return rc, seconds_to_exit, "\n".join(p.lines)


def _steps(ckpt: str) -> list[int]:
    if not os.path.isdir(ckpt):
        return []
    names = os.listdir(ckpt)
    assert not [d for d in names if "tmp" in d], names  # no partial checkpoint
    return sorted(int(d) for d in names if d.isdigit())


def _final_train_state(ckpt: str, step: int) -> list[np.ndarray]:
    """The train state's leaves as numpy (whatever device count wrote them)."""
    import orbax.checkpoint as ocp

    path, c = os.path.join(ckpt, str(step), "state"), ocp.PyTreeCheckpointer()
    meta = c.metadata(path).item_metadata
    tree = c.restore(path, restore_args=jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), meta))
    return [np.asarray(x) for x in jax.tree.leaves(tree.get("train", tree))]


def _run_subprocess(args: list[str]) -> None:
    """The same command once more, in a process of one device (no slow phase)."""
    p = _Proc("none", 0.0, args)
    rc = p.proc.wait(timeout=600)
    time.sleep(0.2)
    assert rc == 0, "\n".join(p.lines[-40:])


def _run_in_process(command: str, args: list[str], monkeypatch) -> None:
    """The same command once more, here (no slow phase): it resumes from what the stop kept."""
    from vlajax import train

    with monkeypatch.context() as m:
        stop_driver.patch(command, m.setattr)
        assert train.main(args) == 0


def _assert_same(ckpt: str, ref: str, step: int) -> None:
    got, want = _final_train_state(ckpt, step), _final_train_state(ref, step)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


# ---- rl -------------------------------------------------------------------------------------------


def _rl_args(out: str, cache: str, *extra: str) -> list[str]:
    return ["rl", "--preset", "rl-debug", "--output-dir", out, "--rl.num-iterations", str(N), "--logging.progress",
            "plain", "--compilation-cache-dir", cache, *extra]


ASYNC = ("--pipeline.enabled", "--pipeline.staleness-threshold", "0")

# (id, async, slow phase, seconds, marker, extra flags, kept steps, line pattern, bound s)
RL_CELLS = [
    ("set-up", "setup", LONG_S, "PHASE setup 1", ("--rl.eval-every", "-1"), [],
     r"during set-up \(before the first (iteration|update)\): abandoned it; nothing new to save; no checkpoint yet",
     ABANDON_S),
    ("first-compile", "compile", LONG_S, "PHASE compile 1", ("--rl.eval-every", "-1"), [],
     r"during (iteration|update) 1 \(its predecessor is saved\): abandoned it; nothing new to save; no checkpoint "
     r"yet",
     ABANDON_S),
    ("eval-at-0", "eval", LONG_S, "PHASE eval 1", ("--rl.eval-every", "2"), [],
     r"during the evaluation at (iteration|update) 0: abandoned it; nothing new to save; no checkpoint yet",
     ABANDON_S),
    ("update-predecessor-saved", "update@3", UPDATE_S, "PHASE update 3", ("--rl.eval-every", "-1"), [1, 2],
     r"during (iteration|update) 3 \(its predecessor is saved\): abandoned it; nothing new to save; newest "
     r"checkpoint: (iteration|update) 2", ABANDON_S),
    ("update-unsaved-predecessor", "update@3", UPDATE_S, "PHASE update 3",
     ("--rl.eval-every", "-1", "--checkpoint.every-steps", "1000"), [1, 3],
     r"(during iteration 3: finished it and saved checkpoint 3|during the async run at update 3: stopped at the "
     r"boundary after update 3, saved checkpoint 3, dropped the rollout in flight)", UPDATE_S + FINISH_S),
    ("periodic-eval", "eval@2", LONG_S, "PHASE eval 2", ("--rl.eval-every", "2", "--checkpoint.every-steps", "1000"),
     [1, 2], r"during the evaluation at (iteration|update) 2: abandoned it; nothing new to save; newest checkpoint: "
     r"(iteration|update) 2", ABANDON_S),
]
ASYNC_ONLY = [  # the trainer waits for its first micro-batch while rollout is busy (a 121.7 s stop once seen)
    ("trainer-waits-for-rollout", "rollout", LONG_S, "PHASE rollout 3",
     ("--rl.eval-every", "-1", "--checkpoint.every-steps", "1000"), [1, 2],
     r"during the async run at update 2: stopped at the boundary after update 2, saved checkpoint 2, dropped the "
     r"rollout in flight",
     ABANDON_S),
]
_CASES = [(False, *c) for c in RL_CELLS] + [(True, *c) for c in RL_CELLS + ASYNC_ONLY]


@pytest.fixture(scope="module")
def rl_reference(tmp_path_factory) -> dict[bool, str]:
    """The uninterrupted runs: sync here (8 devices), async in a process of one device."""
    refs = {}
    for is_async in (False, True):
        out = str(tmp_path_factory.mktemp("rl-reference"))
        args = _rl_args(out, _cache(tmp_path_factory), "--rl.eval-every", "-1", *(ASYNC if is_async else ()))
        if is_async:
            _run_subprocess(args)
        else:
            mp = pytest.MonkeyPatch()
            try:
                _run_in_process("rl", args, mp)
            finally:
                mp.undo()
        refs[is_async] = os.path.join(out, "checkpoints")
    return refs


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("is_async", "cell", "slow", "seconds", "marker", "extra", "kept", "line", "bound"),
                         _CASES, ids=[f"{'async' if c[0] else 'sync'}-{c[1]}" for c in _CASES])
def test_rl_sigterm_in_each_phase(tmp_path, tmp_path_factory, monkeypatch, rl_reference, is_async, cell, slow,
                                  seconds, marker, extra, kept, line, bound):
    out = str(tmp_path / "run")
    args = _rl_args(out, _cache(tmp_path_factory), *extra, *(ASYNC if is_async else ()))
    rc, exit_s, text = _interrupt(slow, seconds, marker, args, devices=1 if is_async else 8)
    ckpt = os.path.join(out, "checkpoints")
    _row(f"rl {'async' if is_async else 'sync'} | {cell} | {rc} | {exit_s:.1f} (bound {bound:.0f}) | {_steps(ckpt)}")
    assert rc == 0, text[-4000:]
    assert re.search(r"^rl: SIGTERM " + line + r"; exit 0$", text, re.M), text[-3000:]
    assert exit_s <= bound, (exit_s, bound)
    assert _steps(ckpt) == kept
    if is_async:  # resumes from what was kept (or starts again)
        _run_subprocess(args)
    else:
        _run_in_process("rl", args, monkeypatch)
    assert _steps(ckpt)[-1] == N
    _assert_same(ckpt, rl_reference[is_async], N)
    _row(f"rl {'async' if is_async else 'sync'} | {cell} | resumed run == uninterrupted: yes")


# ---- sft ------------------------------------------------------------------------------------------


def _sft_args(dataset: str, out: str, cache: str, *extra: str) -> list[str]:
    return ["sft", "--preset", "sft-tiny", "--data.dataset-dir", dataset, "--output-dir", out, "--sft.num-steps",
            str(SFT_STEPS), "--logging.progress", "plain", "--compilation-cache-dir", cache, *extra]


# (id, slow phase, seconds, marker, extra flags, kept steps, line pattern, bound s)
SFT_CELLS = [
    ("set-up", "setup", LONG_S, "PHASE setup 1", ("--sft.eval-every", "-1"), [],
     r"during set-up \(before the first step\): abandoned it; nothing new to save; no checkpoint yet", ABANDON_S),
    ("first-compile", "compile", LONG_S, "PHASE compile 1", ("--sft.eval-every", "-1"), [],
     r"during step 1 \(its predecessor is saved\): abandoned it; nothing new to save; no checkpoint yet", ABANDON_S),
    ("step-predecessor-saved", "step@3", UPDATE_S, "PHASE step 3",
     ("--sft.eval-every", "-1", "--checkpoint.every-steps", "1"), [1, 2],
     r"during step 3 \(its predecessor is saved\): abandoned it; nothing new to save; newest checkpoint: step 2",
     ABANDON_S),
    ("step-unsaved-predecessor", "step@3", UPDATE_S, "PHASE step 3",
     ("--sft.eval-every", "-1", "--checkpoint.every-steps", "1000"), [1, 3],
     r"during step 3: finished it and saved checkpoint 3", UPDATE_S + FINISH_S),
    ("periodic-eval", "eval", LONG_S, "PHASE eval 1", ("--sft.eval-every", "2", "--checkpoint.every-steps", "1000"),
     [1, 2], r"during the evaluation at step 2: abandoned it; nothing new to save; newest checkpoint: step 2",
     ABANDON_S),
]


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory) -> str:
    from tests.sft.conftest import write_dataset

    return write_dataset(str(tmp_path_factory.mktemp("stop-sft-data") / "demos"))


@pytest.fixture(scope="module")
def sft_reference(tmp_path_factory, sft_data) -> str:
    out = str(tmp_path_factory.mktemp("sft-reference"))
    mp = pytest.MonkeyPatch()
    try:
        _run_in_process("sft", _sft_args(sft_data, out, _cache(tmp_path_factory), "--sft.eval-every", "-1"), mp)
    finally:
        mp.undo()
    return os.path.join(out, "checkpoints")


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("cell", "slow", "seconds", "marker", "extra", "kept", "line", "bound"), SFT_CELLS,
                         ids=[c[0] for c in SFT_CELLS])
def test_sft_sigterm_in_each_phase(tmp_path, tmp_path_factory, monkeypatch, sft_data, sft_reference, cell, slow,
                                   seconds, marker, extra, kept, line, bound):
    out = str(tmp_path / "run")
    args = _sft_args(sft_data, out, _cache(tmp_path_factory), *extra)
    rc, exit_s, text = _interrupt(slow, seconds, marker, args, devices=8)
    ckpt = os.path.join(out, "checkpoints")
    _row(f"sft | {cell} | {rc} | {exit_s:.1f} (bound {bound:.0f}) | {_steps(ckpt)}")
    assert rc == 0, text[-4000:]
    assert re.search(r"^sft: SIGTERM " + line + r"; exit 0$", text, re.M), text[-3000:]
    assert exit_s <= bound, (exit_s, bound)
    assert _steps(ckpt) == kept
    _run_in_process("sft", args, monkeypatch)  # resumes from what was kept (or starts again)
    assert _steps(ckpt)[-1] == SFT_STEPS
    _assert_same(ckpt, sft_reference, SFT_STEPS)
    _row(f"sft | {cell} | resumed run == uninterrupted: yes")


# ---- eval of a checkpoint ---------------------------------------------------------------------------

# (id, slow phase, marker, line pattern, report written, bound s)
EVAL_CELLS = [
    ("episodes", "eval", "PHASE eval 1",
     r"during the evaluation \(loading, compiles, episodes\): abandoned it; nothing written \(an eval.json is "
     r"always a whole evaluation; a rerun runs every episode\)", False, ABANDON_S),
    ("writing", "write", "PHASE write 1", r"during writing the report: finished it in \S+", True, UPDATE_S + FINISH_S),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("cell", "slow", "marker", "line", "written", "bound"), EVAL_CELLS,
                         ids=[c[0] for c in EVAL_CELLS])
def test_eval_sigterm_in_each_phase(tmp_path, tmp_path_factory, sft_reference, cell, slow, marker, line, written,
                                    bound):
    """`eval --checkpoint`: a signal in the episodes writes nothing; one while the report is written lets
    it finish (eval.json whole). Exit 0 and one line either way."""
    out = str(tmp_path / "eval-run")
    args = ["eval", "--preset", "sft-tiny", "--checkpoint", sft_reference, "--output-dir", out,
            "--compilation-cache-dir", _cache(tmp_path_factory)]
    rc, exit_s, text = _interrupt(slow, UPDATE_S if slow == "write" else LONG_S, marker, args, devices=1)
    reports = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs if f.startswith("eval.")]
    _row(f"eval | {cell} | {rc} | {exit_s:.1f} (bound {bound:.0f}) | {len(reports)} report files")
    assert rc == 0, text[-4000:]
    assert re.search(r"^eval: SIGTERM " + line + r"; exit 0$", text, re.M), text[-3000:]
    assert exit_s <= bound, (exit_s, bound)
    if written:
        assert sorted(os.path.basename(r) for r in reports) == ["eval.json", "eval.md"], reports
        with open(next(r for r in reports if r.endswith(".json"))) as f:
            assert json.load(f)["checkpoint"]["step"] == SFT_STEPS
    else:
        assert reports == [], reports


# ---- a second signal ------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_a_second_signal_exits_at_once_with_130_keeping_the_last_complete_checkpoint(tmp_path, tmp_path_factory):
    """The first SIGTERM lands in an update with an unsaved predecessor (so the run means to finish it, 12 s);
    the second exits at once (130) without saving: the newest complete checkpoint is the one before."""
    out = str(tmp_path / "run")
    args = _rl_args(out, _cache(tmp_path_factory), "--rl.eval-every", "-1", "--checkpoint.every-steps", "1000")
    p = _Proc("update@3", UPDATE_S, args, devices=8)
    p.wait_line("PHASE update 3")
    time.sleep(0.5)
    p.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 60
    while not any("SIGTERM received" in ln for ln in p.lines):
        assert time.monotonic() < deadline and p.proc.poll() is None, "\n".join(p.lines[-30:])
        time.sleep(0.1)
    t0 = time.monotonic()
    p.proc.send_signal(signal.SIGTERM)
    rc = p.proc.wait(timeout=60)
    seconds = time.monotonic() - t0
    time.sleep(0.2)
    text = "\n".join(p.lines)
    _row(f"rl sync | second signal during update 3 | {rc} | {seconds:.1f} | {_steps(os.path.join(out, 'checkpoints'))}")
    assert rc == 130 and seconds < 5, (rc, seconds, text[-2000:])
    assert "error: rl: a second interrupt (SIGTERM): exiting at once without saving" in text
    assert _steps(os.path.join(out, "checkpoints")) == [1]  # iteration 2 was never saved (every_steps=1000)


# ---- eval --robustness and eval --policy-server: the same contract -----------------------------------

_NOTHING = r"nothing written \(an? {} is always a whole evaluation; a rerun runs every episode\)"
_EPISODES = r"during the evaluation \(loading, compiles, episodes\): abandoned it; "


def _files(out: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs)


def _one_stop_line(text: str, line: str) -> None:
    """Exactly one stop line, the expected one, and no traceback (the stop is the whole story)."""
    stops = [ln for ln in text.splitlines() if ln.startswith("eval: SIGTERM")]
    assert len(stops) == 1 and re.fullmatch(r"eval: SIGTERM " + line + r"; exit 0", stops[0]), text[-3000:]
    assert "Traceback" not in text, text[-3000:]


ROBUSTNESS_CELLS = [
    ("episodes", "eval", "PHASE eval 1", _EPISODES + _NOTHING.format(r"robustness\.json"), False, ABANDON_S),
    ("writing", "write", "PHASE write 1", r"during writing the report: finished it in \S+", True, UPDATE_S + FINISH_S),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("cell", "slow", "marker", "line", "written", "bound"), ROBUSTNESS_CELLS,
                         ids=[c[0] for c in ROBUSTNESS_CELLS])
def test_eval_robustness_sigterm_in_each_phase(tmp_path, tmp_path_factory, sft_reference, cell, slow, marker, line,
                                               written, bound):
    """`eval --robustness`: a signal while any level's episodes run writes nothing at all; one while the files
    are written lets them finish (robustness.json written once, last, whole, naming the GIF). Exit 0, one line."""
    out = str(tmp_path / "eval-run")
    args = ["eval", "--preset", "sft-tiny", "--checkpoint", sft_reference, "--robustness", "camera=1",
            "--output-dir", out, "--compilation-cache-dir", _cache(tmp_path_factory)]
    rc, exit_s, text = _interrupt(slow, UPDATE_S if slow == "write" else LONG_S, marker, args, devices=1)
    files = _files(out)
    _row(f"eval --robustness | {cell} | {rc} | {exit_s:.1f} (bound {bound:.0f}) | {len(files)} files")
    assert rc == 0, text[-4000:]
    _one_stop_line(text, line)
    assert exit_s <= bound, (exit_s, bound)
    if not written:
        assert files == [], files
        return
    [d] = {os.path.dirname(f) for f in files}
    assert [os.path.basename(f) for f in files] == ["failure__camera.gif", "robustness.json", "robustness.md",
                                                   "robustness.png"], files  # no temporary file left
    with open(os.path.join(out, d, "robustness.json")) as f:
        saved = json.load(f)
    assert saved["checkpoint"]["step"] == SFT_STEPS and saved["failure_gifs"]["camera"]["file"] == "failure__camera.gif"


class _Server:
    """`vlajax.serve` on the reference checkpoint in a thread of this process (as tests/serve run it), recording
    how each connection ended: 1000 = the client closed it (a websocket close), 1006 = it just vanished."""

    def __init__(self, checkpoint: str):
        from tests.serve.conftest import ServerThread
        from vlajax.serve.app import ServeArgs

        closes = self.closes = []

        class Recording(ServerThread):
            def _run(self):
                handle = self.server._handle

                async def recorded(ws):
                    try:
                        await handle(ws)
                    finally:
                        closes.append(ws.close_code)

                self.server._handle = recorded
                super()._run()

        self.thread = Recording(ServeArgs(checkpoint=checkpoint, port=0, max_batch=4, replicas=1))
        self.url, self.server = self.thread.url, self.thread.server

    def settled(self, timeout: float = 30.0) -> list[int]:
        """The close codes of every connection, once none is open."""
        deadline = time.monotonic() + timeout
        while self.server.connections and time.monotonic() < deadline:
            time.sleep(0.1)
        return list(self.closes)


@pytest.fixture(scope="module")
def policy_server(sft_reference):
    s = _Server(sft_reference)
    yield s
    s.thread.stop()


REMOTE_CELLS = [
    ("episodes", "eval", "PHASE eval 1",
     _EPISODES + r"closed the connections to ws://\S+; " + _NOTHING.format(r"eval\.json"), False, ABANDON_S),
    ("writing", "write", "PHASE write 1", r"during writing the report: finished it in \S+", True, UPDATE_S + FINISH_S),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("cell", "slow", "marker", "line", "written", "bound"), REMOTE_CELLS,
                         ids=[c[0] for c in REMOTE_CELLS])
def test_eval_policy_server_sigterm_in_each_phase(tmp_path, tmp_path_factory, policy_server, cell, slow, marker, line,
                                                  written, bound):
    """`eval --policy-server`: a signal while requests are in flight to a real `vlajax.serve` closes the client's
    connections (the server sees a websocket close, code 1000, not a vanished peer) and writes nothing; one
    while the report is written lets it finish. Exit 0, one line; the server serves on."""
    out = str(tmp_path / "eval-run")
    before, served = len(policy_server.closes), policy_server.server.served
    args = ["eval", "--preset", "sft-tiny", "--policy-server", policy_server.url, "--sft.eval-connections", "2",
            "--output-dir", out, "--compilation-cache-dir", _cache(tmp_path_factory)]
    rc, exit_s, text = _interrupt(slow, UPDATE_S if slow == "write" else LONG_S, marker, args, devices=1)
    closes, files = policy_server.settled()[before:], _files(out)
    _row(f"eval --policy-server | {cell} | {rc} | {exit_s:.1f} (bound {bound:.0f}) | {len(files)} files | "
         f"server saw closes {closes} after {policy_server.server.served - served} requests")
    assert rc == 0, text[-4000:]
    _one_stop_line(text, line)
    assert exit_s <= bound, (exit_s, bound)
    assert policy_server.server.served > served  # the requests were real
    assert closes == [1000, 1000], closes  # both connections closed by the client, none just dropped
    if written:
        assert [os.path.basename(f) for f in files] == ["eval.json", "eval.md", "t0.gif", "t1.gif"], files
        with open(os.path.join(out, files[0])) as f:
            assert json.load(f)["policy_server"]["url"] == policy_server.url
    else:
        assert files == [], files
