"""Asynchronous RL on LIBERO workers (vlajax.libero.rl_lane / rl_train): the recording rules without LIBERO,
and one real end to end in a process of its own -- the imported dummy-size pi05_libero on a real LIBERO worker,
3 async updates (staleness threshold 1, partial rollout: the preset's), a worker killed mid-episode and its
episode counted once, then SIGTERM: the
boundary stop with its checkpoint forced (docs/reliability.md) -- plus a resume (slow).

The end to end needs the LIBERO venv (`make libero`; skipped without it unless VLAJAX_LIBERO_REQUIRED) and
the openpi reference fixtures (`../shared`; skipped without them).
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.libero.libero_env import venv_or_skip
from tests.procs import process_stat
from vlajax.libero import protocol as P
from vlajax.libero.rl_lane import Recorder, assemble_group, eval_summary

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "..", "shared", "fixtures", "openpi", "policies")
EP, STEP, DONE, SUCCESS = (P.EXTRA_KEYS[k] for k in ("episode", "step", "done", "success"))


def _decision(step, version=0, value=0.0):
    return {"step": step, "version": version, "obs": {"observation/state": np.full(8, value, np.float32)},
            "record": {"chain": np.full((3, 10, 32), value, np.float32), "sde_step": np.int32(2)},
            "logp_terms": np.full((10, 32), value, np.float32)}


def test_assemble_group_layout():
    k, t_max = 5, 4  # a 20-step limit, replan 5
    a = [_decision(0, 0, 1.0), _decision(5, 1, 2.0), _decision(10, 1, 3.0), _decision(15, 2, 4.0)]  # ran out
    b = [_decision(0, 0, 5.0), _decision(5, 0, 6.0)]  # succeeded 3 steps into its second chunk
    data, versions = assemble_group([a, b], [{"success": False, "steps": 20}, {"success": True, "steps": 8}], k, t_max)
    assert data["obs"]["observation/state"].shape == (4, 2, 8) and data["chain"].shape == (4, 2, 3, 10, 32)
    np.testing.assert_array_equal(data["valid"], [[1, 1], [1, 1], [1, 0], [1, 0]])
    np.testing.assert_array_equal(data["done"], [[0, 0], [0, 1], [0, 0], [1, 0]])
    np.testing.assert_array_equal(data["rewards"][:, 1], [0, 1, 0, 0])
    assert data["rewards"][:, 0].sum() == 0 and data["truncated"][3, 0] and data["terminated"][1, 1]
    np.testing.assert_array_equal(data["action_mask"][:, 1].sum(-1), [5, 3, 0, 0])  # executed chunk steps
    np.testing.assert_array_equal(data["action_mask"][:, 0].sum(-1), [5, 5, 5, 5])
    np.testing.assert_array_equal(versions, [[0, 0], [1, 0], [1, 0], [2, 0]])  # padding keeps the last version
    assert data["episode_length"][1, 1] == 8 and data["success"][1, 1] == 1
    data, _ = assemble_group([a[:1], b[:1]], [{"success": False, "steps": 5, "reward": 0.25},
                                              {"success": False, "steps": 5, "reward": 0.75}], k, 1)
    np.testing.assert_array_equal(data["rewards"], [[0.25, 0.75]])  # a given return replaces the success
    with pytest.raises(ValueError, match="strictly increasing"):  # a decision recorded twice
        assemble_group([[_decision(0), _decision(5), _decision(5)]], [{"success": False, "steps": 15}], k, 3)


def test_recorder_keeps_one_attempt_per_episode():
    rec = Recorder()
    ep = P.Episode("e0", "libero_spatial", 0, 0, max_steps=15, replan_steps=5)
    rec.deal([ep])
    req = lambda step, done=False: {EP: "e0", STEP: step, DONE: done, SUCCESS: False}  # noqa: E731
    r, _ = rec.admit(1, req(0))
    assert rec.add(r, 1, _decision(0)) and rec.add(*rec.admit(1, req(5))[:1], 1, _decision(5))
    r_old, _ = rec.admit(2, req(0))  # the worker died: the episode re-runs over connection 2
    assert r_old is not None and r_old.decisions == [] and r_old.attempts == 2
    assert not rec.add(r, 1, _decision(10))  # a late decision of the dead attempt is not recorded
    assert rec.admit(1, req(10)) == (None, False)  # ... nor a late request of it
    for s in (0, 5, 10):
        if s:
            r2, _ = rec.admit(2, req(s))
        else:
            r2 = r_old
        assert rec.add(r2, 2, _decision(s))
    r3, done = rec.admit(2, req(15, True))
    assert done and r3.final == {"success": False, "steps": 15}
    (got,) = rec.take([ep])
    assert [d["step"] for d in got.decisions] == [0, 5, 10] and got.ignored == 1 and got.attempts == 2
    assert rec.admit(3, {EP: "unknown", STEP: 0}) == (None, False)  # not dealt (e.g. an eval): answered only


def test_refusals_before_anything_starts(tmp_path, capsys, monkeypatch):
    """`rl --suite libero_*` in this process (`vlajax.train.main`, what the command line runs): the shared parse and
    preflight, one line each, exit 2, nothing written."""
    from vlajax import train

    monkeypatch.setenv("VLAJAX_LIBERO_VENV", str(tmp_path / "nope"))
    (tmp_path / "out" / "checkpoints" / "3").mkdir(parents=True)  # a saved step: a fresh run is refused over it
    for extra, needle in ((["--rl.algo", "ppo", "--libero.workers", "0"], "libero.workers"), ([], "make libero"),
                          (["--output-dir", str(tmp_path / "out"), "--checkpoint.no-resume"], "(steps 3)"),
                          (["--data.grounding-fraction", "0.5"], "data.grounding_fraction"),  # vlajax.preflight
                          (["--rl.algo", "ppo"], "runs GRPO"), (["--rl.init-from", ""], "needs --rl.init-from"),
                          (["--libero.suite", "libero_goal", "--libero.replan-steps", "4"], "--rl.chunk-steps")):
        code = train.main(["rl", "--suite", "libero_spatial", "--preset", "rl-pi05-libero-dummy", "--rl.init-from",
                           str(tmp_path), "--output-dir", str(tmp_path / "o"), *extra])
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], (extra, err)
        assert not (tmp_path / "o").exists()


def test_groups_start_from_the_demo_states_and_evaluation_from_the_held_out_ones():
    """RL's groups cycle tasks, then initial states 25.. (`libero.train_inits` of them); its evaluations take
    0..libero.episodes_per_task-1 of every task: the two never share an initial state."""
    from types import SimpleNamespace

    from vlajax.config.schema import LiberoConfig
    from vlajax.libero.rl_lane import LiberoRollout

    lane = SimpleNamespace(tasks=(0, 3), lib=LiberoConfig(train_inits=2, episodes_per_task=3), G=2, tag="t",
                           suite="libero_spatial", limit=220, k=5, camera_size=64)
    groups = [LiberoRollout.episodes_of(lane, g) for g in range(5)]
    assert [(g[0].task, g[0].init) for g in groups] == [(0, 25), (3, 25), (0, 26), (3, 26), (0, 25)]
    assert all(len(g) == 2 and len({e.id for e in g}) == 2 and g[0].camera_size == 64 for g in groups)
    evals = LiberoRollout.eval_episodes(lane, 4)
    assert [(e.task, e.init) for e in evals] == [(0, 0), (0, 1), (0, 2), (3, 0), (3, 1), (3, 2)]
    assert not {e.init for e in evals} & {e.init for g in groups for e in g}
    assert not any(e.video for e in evals) and not any(e.video for g in groups for e in g)
    recorded = LiberoRollout.eval_episodes(lane, 4, video=True)  # the final version's: init 0 of each task
    assert [(e.task, e.init) for e in recorded if e.video] == [(0, 0), (3, 0)]
    assert P.camera_size_for(64) == 64 and P.camera_size_for(224) == 256 and P.camera_size_for(128) == 128


def test_eval_summary_pairs_outcomes_by_initial_state():
    out = eval_summary([(0, 0, True), (0, 1, False), (3, 0, True), (3, 1, True)])
    assert out["success"] == 0.75 and out["successes"] == 3 and out["episodes"] == 4
    assert out["tasks"]["0"]["success"] == 0.5 and out["tasks"]["3"]["successes"] == 2
    assert out["outcomes"] == {"0/0": 1, "0/1": 0, "3/0": 1, "3/1": 1}
    lo, hi = out["tasks"]["3"]["wilson95"]
    assert 0.3 < lo < 0.4 and hi == 1.0  # Wilson's interval of 2 of 2


def test_eval_gifs_are_whole_named_by_the_row_and_a_sweep_leaves_no_scratch(tmp_path):
    """`EvalVideos`: frames files -> `videos/<suite>_task<k>_init<i>_<outcome>.gif` (a real GIF of every frame), the
    frames removed; `commit` writes the row, then keeps the GIFs and drops an older final's other-outcome twin; a
    sweep (a stop, or the run's close) removes this run's frames files, the GIFs of an uncommitted row and this
    process's temporary GIFs -- not another run's frames, not committed GIFs -- and refuses to write after (a stop's
    sweep: the writer blocks until the exit)."""
    from PIL import Image

    from vlajax.libero.rl_eval import EvalVideos
    from vlajax.pipeline.lanes import PipelineStopped

    v = EvalVideos(str(tmp_path), "r1-2", fps=4)
    os.makedirs(v.frames_dir)  # (the workers make it; videos/ is the lane's to make)

    def frames(ep_id, n):
        path = os.path.join(v.frames_dir, f"{ep_id}.npy")
        np.save(path, np.stack([np.full((8, 8, 3), 30 * t, np.uint8) for t in range(n)]))
        return path

    results = [{"suite": "libero_spatial", "task": 0, "init": 0, "success": False, "frames": frames("r1-2-v1-t0", 3)},
               {"suite": "libero_spatial", "task": 3, "init": 0, "success": True, "frames": frames("r1-2-v1-t3", 2)},
               {"suite": "libero_spatial", "task": 4, "init": 0, "success": True, "frames": None}]
    names = v.write(results)
    assert names == ["videos/libero_spatial_task0_init0_failure.gif", "videos/libero_spatial_task3_init0_success.gif"]
    with Image.open(tmp_path / names[0]) as gif:
        assert gif.n_frames == 3 and gif.size == (8, 8)
    assert not os.listdir(v.frames_dir)  # each frames file went once its GIF was whole
    twin = os.path.join(v.videos_dir, "libero_spatial_task0_init0_success.gif")  # an earlier final version's
    open(twin, "wb").close()
    rows = []
    v.commit(lambda: rows.append(names))
    assert rows == [names] and not os.path.exists(twin)  # the row, then only the newest final's GIF of (0, 0)
    # an evaluation abandoned after its GIFs, before its row: the sweep removes them and this run's scratch
    frames("r1-2-v2-t0", 1)
    other = frames("r9-9-v1-t0", 1)  # another run's
    later = v.write([{"suite": "libero_spatial", "task": 5, "init": 0, "success": True,
                      "frames": frames("r1-2-v2-t5", 1)}])
    tmp_gif = os.path.join(v.videos_dir, f"libero_spatial_task6_init0_failure.gif.tmp-{os.getpid()}")
    open(tmp_gif, "wb").close()
    v.sweep()
    assert sorted(os.listdir(v.videos_dir)) == [os.path.basename(n) for n in names]  # committed GIFs stay
    assert not os.path.exists(tmp_path / later[0]) and os.listdir(v.frames_dir) == [os.path.basename(other)]
    with pytest.raises(PipelineStopped):
        v.write([{"suite": "libero_spatial", "task": 0, "init": 0, "success": True, "frames": other}])
    with pytest.raises(PipelineStopped):
        v.commit(lambda: rows.append("late"))
    assert rows == [names] and os.path.exists(other)
    os.remove(other)
    v.sweep()  # idempotent; the emptied frames directory goes
    assert not os.path.exists(v.frames_dir)
    # a stop's sweep (`exiting`): a writer after it blocks (the stop's thread exits the process) and writes nothing
    stopping = EvalVideos(str(tmp_path / "stopping"), "r3-4", fps=4)
    stopping.sweep(exiting=True)
    writer = threading.Thread(target=stopping.commit, args=(lambda: rows.append("after the stop"),), daemon=True)
    writer.start()
    writer.join(0.3)
    assert writer.is_alive() and rows == [names]


def test_a_run_after_an_aborted_one_gets_only_its_own_results(tmp_path):
    """The pool after `run(..., abort=)` (the rollout lane stopped mid-group at the run's end): the aborted episode
    keeps its worker slot until it ends; the next run (the final evaluation) waits for its own episodes, drops the
    aborted one's result and never re-runs it."""
    venv_or_skip()
    from vlajax.libero.pool import WorkerPool

    def dummy(ep_id, steps):
        return P.Episode(ep_id, "libero_spatial", 0, 0, max_steps=steps, policy="dummy", cameras=False, video=False)

    started = threading.Event()
    with WorkerPool(1, None, log_dir=str(tmp_path), hang_timeout_s=120) as pool:
        first = pool.run([dummy("aborted", 60)], on_event=lambda i, m: m.get("event") == "progress" and started.set(),
                         abort=started.is_set)
        assert first == {}
        seen: list[str] = []
        second = pool.run([dummy("own", 5)], on_event=lambda i, m: m.get("event") == "result" and seen.append(m["id"]))
    assert set(second) == {"own"} and second["own"]["steps"] == 5, second
    assert seen == ["aborted", "own"]  # the aborted episode ended first, in the second run, and was dropped


# ---------------------------------------------------------------- the real chain


@pytest.fixture(scope="session")  # (test_libero_stop.py uses it too)
def imported(tmp_path_factory):
    venv_or_skip()
    if not os.path.isdir(FIXTURES):
        pytest.skip("../shared (the openpi reference fixtures) is absent")
    from vlajax.policies import import_openpi

    out = str(tmp_path_factory.mktemp("libero-rl") / "imported")
    assert import_openpi.main(["--checkpoint", os.path.join(FIXTURES, "pi05_libero", "ckpt"), "--config",
                               "pi05_libero", "--size", "dummy", "--tokenizer",
                               os.path.join(FIXTURES, "tokenizer.model"), "--out", out]) == 0
    return out


# task 0 on one worker, 2 decisions an episode (10 steps after a 2-step wait, replan 5)
LIBERO = ["--suite", "libero_spatial", "--libero.tasks", "0", "--libero.workers", "1", "--libero.max-steps", "10",
          "--libero.num-steps-wait", "2"]


def _cfg(imported, out, iterations, *extra):
    from vlajax.train import parse

    return parse("rl", ["--preset", "rl-pi05-libero-dummy", *LIBERO, "--rl.init-from", imported, "--output-dir", out,
                        "--model.tokenizer-path", os.path.join(FIXTURES, "tokenizer.model"),
                        "--rl.num-iterations", str(iterations), *extra])


def _describing(pid: int) -> bool:
    """Whether `pid` is the set-up's `pool.describe` (the suite's task count; a LIBERO process of its own, not a
    worker)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"--describe" in f.read()
    except OSError:
        return False


def _eef_height(final, decisions):
    """A dense stand-in for the success reward (random weights never succeed in 10 steps, and a group of
    equal returns has no gradient): the eef height the last request saw, real LIBERO state."""
    return float(decisions[-1]["obs"][P.STATE_KEY][2])


def _killer(killed: list[int]):
    """on_rollout hook: SIGKILL the first worker as soon as some episode has a decision but no end."""
    def start(rollout):
        def watch():
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and not killed:
                with rollout.recorder.lock:
                    live = [r for r in rollout.recorder.episodes.values() if r.decisions and r.final is None]
                if live:
                    pid = rollout.pool.procs[0].popen.pid
                    os.killpg(pid, signal.SIGKILL)
                    killed.append(pid)
                time.sleep(0.02)
        threading.Thread(target=watch, daemon=True).start()
    return start




def test_async_rl_on_libero_workers_end_to_end(imported, tmp_path):
    """The chain in its own process (this file's __main__: `rl_train.train` with the test's reward and fault
    hooks): async updates -- each next group's rollout starts before the update in flight ends, staleness at most
    the threshold 1 (whether a group's first decision comes before the update publishes, i.e. staleness 1 rather
    than 0 under partial rollout, is a race, so only the bound is asserted); the worker is killed mid-episode in the
    first group: the episode
    re-runs, is recorded once, and its group trains update 1. Then SIGTERM once update 3 is logged, only update 1
    saved (checkpoint.every_steps 100): the run stops at the next update boundary -- after update 3, or after 4 when
    its batch was ready -- with that update's checkpoint forced, one line, exit 0, no worker left
    (docs/reliability.md)."""
    run = str(tmp_path / "run")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), imported, run, "5", "--checkpoint.every-steps",
                             "100"], cwd=REPO, env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO},
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: list[str] = []
    err: list[str] = []
    for stream, into in ((proc.stdout, out), (proc.stderr, err)):
        threading.Thread(target=lambda s=stream, i=into: i.extend(s), daemon=True).start()
    sessions: set[int] = set()  # every worker's session (its own; a killed worker's replacement too)
    describing: set[int] = set()
    deadline = time.monotonic() + 900
    while not any("rl libero: update 3/5" in ln for ln in err):
        assert proc.poll() is None and time.monotonic() < deadline, "".join(err)[-4000:]
        for d in os.listdir("/proc"):
            if d.isdigit() and (st := process_stat(int(d))) is not None and st[0] == proc.pid and st[1] == int(d):
                sessions.add(st[1])  # a child leading its own session: a LIBERO worker ...
                if _describing(int(d)):
                    describing.add(st[1])  # ... or the set-up's `pool.describe`
        time.sleep(0.05)
    t_sig = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(600)
    stop_s = time.monotonic() - t_sig
    time.sleep(0.2)
    with open(os.path.join(run, "libero_rl.jsonl")) as f:
        hist = [json.loads(ln) for ln in f]
    lines = [ln.rstrip() for ln in err if ln.startswith("rl: SIGTERM during")]
    print(f"libero rl end to end: {time.perf_counter() - t0:.1f} s; SIGTERM after update 3 -> exit {rc} in "
          f"{stop_s:.1f} s; {lines}; update_s {[round(h['update_s'], 1) for h in hist]}; "
          f"staleness {[h['staleness'] for h in hist]}")
    assert rc == 0 and len(lines) == 1, "".join(err)[-4000:]
    m = re.fullmatch(r"rl: SIGTERM during the LIBERO run at update (\d): stopped at the boundary after update \1, "
                     r"saved checkpoint \1, killed the LIBERO workers \(their groups in flight run again on "
                     r"resume\); exit 0", lines[0])
    assert m and int(m.group(1)) in (3, 4), lines[0]
    n = int(m.group(1))
    assert stop_s < 2 * max(h["update_s"] for h in hist) + 30  # docs/reliability.md: the update in flight + a save
    ckpt_dir = os.path.join(run, "checkpoints")
    # Orbax saves the first update whatever the interval; then the one the stop forced, whole
    assert sorted(int(d) for d in os.listdir(ckpt_dir) if d.isdigit()) == [1, n]
    with open(os.path.join(ckpt_dir, "policy.json")) as f:
        assert json.load(f)["source"] == "async-rl"  # a servable policy
    left = [int(d) for d in os.listdir("/proc") if d.isdigit() and (st := process_stat(int(d))) and st[1] in sessions]
    workers = sessions - describing
    assert len(workers) == 2 and not left, (sessions, describing, left)  # the killed worker's replacement is gone too
    assert [h["update"] for h in hist] == list(range(1, n + 1))
    # rollout ran ahead: call u (update u + 1's group) started before update u ended, for every update whose next
    # group has started (calls 1 .. n - 1 at least); and the pacing bound held
    starts = {d["call"]: d["start"] for d in (json.loads(ln) for ln in out if ln.startswith('{"call"'))}
    ahead = [starts[h["update"]] < h["time"] for h in hist if h["update"] in starts]
    assert len(ahead) >= n - 1 and all(ahead), (starts, [h["time"] for h in hist])
    assert hist[0]["staleness"] == [0] and all(0 <= s <= 1 for h in hist for s in h["staleness"]), hist
    assert abs(hist[0]["train"]["ratio_mean"] - 1.0) < 1e-3  # recorded log-probs = the learner's, on fresh data
    assert all(h["train"]["decisions"] == 4 and h["train"]["episodes"] == 2 for h in hist)  # 2 x 2, each once
    assert any(h["train"]["grad_norm"] > 0 for h in hist)
    killed = [json.loads(ln)["killed"] for ln in out if ln.startswith('{"killed"')]
    assert len(killed) == 1, out
    restarts = [ln for ln in err if "libero: worker 0 (pid" in ln and "re-running" in ln]  # (the stop's kill: later)
    assert f"(pid {killed[0]})" in restarts[0] and sum(f"(pid {killed[0]})" in ln for ln in restarts) == 1, restarts
    assert hist[0]["train"]["attempts_max"] == 2  # update 1's group had the re-run episode, its decisions once


@pytest.mark.slow
def test_async_rl_on_libero_workers_resumes(imported, tmp_path):
    """2 updates, then the same run to 3: it restores update 2's state and counters and trains update 3 only.
    With rl.eval_every 2 (one held-out episode): the first run evaluates the starting policy and, once its last
    update is done, the final version 2 (`evaluate_final`); the resumed run its final version 3 only."""
    from vlajax.libero import rl_train

    run = str(tmp_path / "run")
    ev = ["--rl.eval-every", "2", "--libero.episodes-per-task", "1"]
    first = rl_train.train(_cfg(imported, run, 2, *ev), reward_fn=_eef_height)
    assert first["updates"] == 2 and first["checkpoints"] == [1, 2]
    assert [(e["version"], e["update"], e["episodes"]) for e in first["evals"]] == [(0, 0, 1), (2, 2, 1)]
    gif = "videos/libero_spatial_task0_init0_{}.gif"
    assert "videos" not in first["evals"][0]  # the starting policy's evaluation records nothing
    assert first["evals"][1]["videos"] in ([gif.format("success")], [gif.format("failure")])
    second = rl_train.train(_cfg(imported, run, 3, *ev), reward_fn=_eef_height)
    assert second["status"] == "done" and [h["update"] for h in second["history"]] == [3]
    assert second["checkpoints"] == [3] and second["history"][0]["train"]["decisions"] == 4
    assert [e["version"] for e in second["evals"]] == [3]
    with open(os.path.join(run, "libero_rl.jsonl")) as f:
        rows = [json.loads(ln) for ln in f]
    assert [r["eval"]["version"] if "eval" in r else r["update"] for r in rows] == [0, 1, 2, 2, 3, 3]
    # the resumed run's final version recorded its GIF (named in its row; one GIF for the episode), no frames left
    (named,) = rows[-1]["eval"]["videos"]
    assert os.listdir(os.path.join(run, "videos")) == [os.path.basename(named)]
    assert os.path.getsize(os.path.join(run, named)) > 100 and not os.path.exists(os.path.join(run, "frames"))


def test_bench_libero_prediction_from_a_sync_row():
    """The planner's prediction of the libero rows from a sync row's measurements (no LIBERO needed):
    overlapping a group's rollout with the previous update cannot be slower than running them in turn."""
    from research.bench.async_libero import Args, predict

    a = Args(updates=3, group=2, max_steps=20, replan=5)
    sync_row = {"infer_times": [(2, 0.5)] * 20, "update_s": [30.0, 8.0, 8.0, 8.0], "step_s_p50": 0.05,
                "step_s_mean": 0.2, "reset_s": 0.5}
    out = predict(a, sync_row, ["sync", "train_async", "+partial_rollout"])
    rows = out["rows"]
    assert out["costs"]["sim"]["median_s"] == 0.05 and out["costs"]["sim"]["sigma"] > 0
    assert out["costs"]["train_update_s"] == [[8, 8.0]]  # 2 episodes x 4 decisions, the compile excluded
    assert rows["sync"]["updates_per_s"] > 0
    assert rows["train_async"]["updates_per_s"] >= rows["sync"]["updates_per_s"] * 0.99
    assert rows["train_async"]["staleness_max"] >= 1 and rows["sync"]["staleness_max"] == 0


if __name__ == "__main__":  # the end to end's run, in a process of its own (a SIGTERM ends it)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    logging.getLogger("absl").setLevel(logging.WARNING)
    from vlajax.libero import rl_train

    imported_dir, out_dir, iterations, *extra = sys.argv[1:]
    killed_pids: list[int] = []
    kill_hook = _killer(killed_pids)

    def emit(obj):  # one write per line: the two threads' lines stay whole
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def on_rollout(rollout):
        kill_hook(rollout)
        sample = rollout.sample_step

        def timed_sample_step(version, params, call):  # (the runner is built with this after the hook)
            emit({"call": call, "start": time.time()})
            return sample(version, params, call)

        rollout.sample_step = timed_sample_step

        def report():
            while not killed_pids:
                time.sleep(0.02)
            emit({"killed": killed_pids[0]})

        threading.Thread(target=report, daemon=True).start()

    summary = rl_train.train(_cfg(imported_dir, out_dir, int(iterations), *extra), reward_fn=_eef_height,
                             on_rollout=on_rollout)
    print(json.dumps({"status": summary["status"], "updates": summary["updates"]}), flush=True)
