"""The LIBERO worker pool on Ray (`--libero.backend ray`; vlajax.libero.ray_pool): a real local Ray cluster of two
nodes with their own CPUs (`ray.cluster_utils.Cluster`: a head without CPUs, two nodes of 1 CPU each -- each
worker actor reserves 1, so two actors land on two nodes), real LIBERO workers.

- `eval --libero.backend ray` runs its episodes on both nodes with the local pool's outcomes and frames;
- (slow) an actor SIGKILLed, a node removed and an actor hung (SIGSTOP), each mid-episode: the episode re-runs
  from its initial state on a new actor and is counted once; the lost LIBERO process is gone;
- (slow) async RL on LIBERO workers through Ray: 3 updates, an actor killed mid-episode.

Needs Ray (`pip install -e '.[ray]'`, which `make test` installs) and the LIBERO venv; skipped without either
unless VLAJAX_LIBERO_REQUIRED (then they fail).
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

from tests.libero.libero_env import ray_or_skip
from vlajax.libero import pool as pool_mod
from vlajax.libero import protocol as P

sys.path.insert(0, os.path.dirname(__file__))
from policy_server import ChunkServer  # noqa: E402

REPO = pool_mod.REPO
MB = 1 << 20


@pytest.fixture(scope="module")
def cluster():
    """Head (no CPUs: the drivers only) + two nodes of 1 CPU; tiny object stores, no dashboard; shut down after."""
    ray_or_skip()
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 80 * MB,
                                                      "include_dashboard": False})
    try:
        for _ in range(2):
            c.add_node(num_cpus=1, object_store_memory=80 * MB)
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def _worker_nodes(c) -> set[str]:
    return {n.node_id for n in c.worker_nodes}


def _gone(pid: int, within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:  # a zombie (killed, not yet reaped by its parent) is gone too
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.2)
    return False


def _eval(out, url, *extra):
    r = subprocess.run([sys.executable, "-m", "vlajax.train", "eval", "--suite", "libero_spatial", "--policy-server",
                        url, "--tasks", "0", "--episodes-per-task", "2", "--max-steps", "10", "--num-steps-wait", "2",
                        "--out", str(out), *extra], env={**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=REPO,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    with open(out / "eval.json") as f:
        return json.load(f)


def test_eval_on_ray_runs_on_both_nodes_with_the_local_pool_s_results(cluster, tmp_path):
    chunk = np.zeros((10, 7), np.float32)
    chunk[:, 0], chunk[:, 2], chunk[:, 6] = 0.3, 0.4, -1.0
    server = ChunkServer(chunk)
    try:
        local = _eval(tmp_path / "local", server.url, "--workers", "1")
        remote = _eval(tmp_path / "ray", server.url, "--workers", "2", "--libero.backend", "ray",
                       "--libero.ray-address", cluster.address)
    finally:
        server.close()
    assert local["nodes"] == [] and remote["settings"]["libero"]["backend"] == "ray"
    assert set(remote["nodes"]) == _worker_nodes(cluster)  # one episode on each node
    assert {e["node"] for e in remote["episodes"]} == _worker_nodes(cluster)
    keys = ("id", "success", "steps", "env_steps", "policy_calls", "renders", "task_description")
    assert [{k: e[k] for k in keys} for e in remote["episodes"]] == [{k: e[k] for k in keys} for e in local["episodes"]]
    assert [e["steps"] for e in local["episodes"]] == [10, 10]
    for a, b in zip(local["episodes"], remote["episodes"], strict=True):  # the frames the policy saw, as GIFs
        assert os.path.basename(a["video"]) == os.path.basename(b["video"])
        with open(a["video"], "rb") as fa, open(b["video"], "rb") as fb:
            assert fa.read() == fb.read()
    assert not os.path.exists(tmp_path / "ray" / "frames")  # shipped frames are consumed like local ones


def _dummy(ep_id: str, steps: int = 60, init: int = 0) -> P.Episode:
    return P.Episode(ep_id, "libero_spatial", 0, init, max_steps=steps, policy="dummy", cameras=False, video=False)


def _pool(tmp_path, workers: int, **kw):
    from vlajax.libero.ray_pool import RayLauncher

    return pool_mod.WorkerPool(workers, None, log_dir=str(tmp_path), launcher=RayLauncher(), **kw)


def _results_of(seen, ep_id):
    return sum(1 for m in seen if m.get("event") == "result" and m.get("id") == ep_id)


@pytest.mark.slow  # (61 s at load 14-18: two actors and two LIBERO workers start, one after the kill)
def test_killed_actor_mid_episode_is_recovered_and_counted_once(cluster, tmp_path):
    """An actor SIGKILLed mid-episode (its process, as the OOM killer or a crash would)."""
    seen, lost = [], []
    with _pool(tmp_path / "kill", 1, hang_timeout_s=120) as p:

        def on_kill(i, msg):
            seen.append(msg)
            if msg.get("event") == "progress" and msg.get("id") == "k0" and not lost:
                lost.append(p.procs[i])
                os.kill(p.procs[i].actor_pid, signal.SIGKILL)

        res = p.run([_dummy("k0"), _dummy("k1", 5, 1)], on_event=on_kill)
        assert p.restarts == 1 and p.events[0]["episodes"] == ["k0"] and "actor lost" in p.events[0]["why"]
    assert "error" not in res["k0"] and res["k0"]["steps"] == 60 and res["k0"]["attempts"] == 2
    assert res["k0"]["pid"] != lost[0].pid and _results_of(seen, "k0") == 1
    assert _gone(lost[0].pid)  # the LIBERO process died with its actor
    assert "error" not in res["k1"] and res["k1"]["steps"] == 5 and res["k1"]["attempts"] == 1


@pytest.mark.slow
def test_removed_node_mid_episode_is_recovered_and_counted_once(cluster, tmp_path):
    """A node removed mid-episode (its raylet and everything on it). A third node joins first, so the replacement
    has a CPU wherever the actor was."""
    import ray

    extra = cluster.add_node(num_cpus=1, object_store_memory=80 * MB)
    cluster.wait_for_nodes()
    seen, removed = [], []
    with _pool(tmp_path / "node", 1, hang_timeout_s=120) as p:

        def on_node(i, msg):
            seen.append(msg)
            if msg.get("event") == "progress" and msg.get("id") == "n0" and not removed:
                proc = p.procs[i]
                node = next(n for n in cluster.worker_nodes if n.node_id == proc.node)
                removed.append((proc, node.node_id))
                cluster.remove_node(node)

        res = p.run([_dummy("n0")], on_event=on_node)
        assert p.restarts == 1 and p.events[0]["episodes"] == ["n0"] and p.events[0]["node"] == removed[0][1]
    assert res["n0"]["steps"] == 60 and res["n0"]["attempts"] == 2 and _results_of(seen, "n0") == 1
    assert res["n0"]["node"] != removed[0][1] and removed[0][1] not in {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert _gone(removed[0][0].pid)
    assert len(cluster.worker_nodes) == 2 and (extra in cluster.worker_nodes or removed[0][1] == extra.node_id)


@pytest.mark.slow
def test_hung_actor_is_killed_and_replaced(cluster, tmp_path):
    stopped = []
    with _pool(tmp_path, 1, hang_timeout_s=20) as p:  # (a loaded machine: 5 s between messages is possible)

        def on_event(i, msg):
            if msg.get("event") == "progress" and not stopped:
                stopped.append(p.procs[i])
                os.kill(p.procs[i].actor_pid, signal.SIGSTOP)  # the actor stops answering; its worker goes on

        res = p.run([_dummy("h0")], on_event=on_event)
        assert p.restarts == 1 and "hang" in p.events[0]["why"]
    assert res["h0"]["attempts"] == 2 and res["h0"]["steps"] == 60
    assert _gone(stopped[0].actor_pid) and _gone(stopped[0].pid)  # killed, and its LIBERO process with it


@pytest.mark.slow
def test_async_rl_through_ray_trains_3_updates_with_an_actor_killed_mid_episode(cluster, tmp_path):
    """`rl --suite libero_spatial --libero.backend ray`'s chain (rl_train.train in this process, joined to the
    cluster): the imported dummy pi05_libero, one worker actor with cameras, 3 async updates of one group of 2
    episodes; the actor is SIGKILLed once an episode of the first group has a decision and no end: one restart,
    that episode re-run and recorded once (every update trains 2 episodes x 2 decisions)."""
    import threading

    from test_libero_rl import FIXTURES, _cfg, _eef_height

    from vlajax.libero import rl_train
    from vlajax.policies import import_openpi

    if not os.path.isdir(FIXTURES):
        pytest.skip("../shared (the openpi reference fixtures) is absent")
    imported = str(tmp_path / "imported")
    assert import_openpi.main(["--checkpoint", os.path.join(FIXTURES, "pi05_libero", "ckpt"), "--config",
                               "pi05_libero", "--size", "dummy", "--tokenizer",
                               os.path.join(FIXTURES, "tokenizer.model"), "--out", imported]) == 0
    killed: list[int] = []

    def on_rollout(rollout):
        def watch():
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline and not killed:
                with rollout.recorder.lock:
                    live = [r for r in rollout.recorder.episodes.values() if r.decisions and r.final is None]
                pid = rollout.pool.procs[0].actor_pid
                if live and pid > 0:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                time.sleep(0.02)

        threading.Thread(target=watch, daemon=True).start()

    out = rl_train.train(_cfg(imported, str(tmp_path / "run"), 3, "--libero.backend", "ray", "--libero.ray-address",
                              cluster.address), reward_fn=_eef_height, on_rollout=on_rollout)
    hist = out["history"]
    assert out["status"] == "done" and out["updates"] == 3 and [h["update"] for h in hist] == [1, 2, 3]
    assert len(killed) == 1 and len(out["restarts"]) == 1 and "actor lost" in out["restarts"][0]["why"]
    assert all(h["train"]["decisions"] == 4 and h["train"]["episodes"] == 2 for h in hist)  # each episode once
    assert hist[0]["train"]["attempts_max"] == 2  # the re-run episode's decisions, from its second attempt only
    assert all(0 <= s <= 1 for h in hist for s in h["staleness"])
