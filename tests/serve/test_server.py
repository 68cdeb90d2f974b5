"""The server under load and abuse: metadata, health check, cross-client batching without
recompiles, and the bad-input table while a well-behaved client is served throughout."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import urllib.request

import msgpack
import numpy as np
import pytest
from websockets.sync.client import connect

from tests.serve.conftest import ServerThread
from vlajax.serve.app import ServeArgs
from vlajax.serve.codec import pack, unpack

LIMIT_MB = 0.25


@pytest.fixture(scope="module")
def served(policy_checkpoint):
    s = ServerThread(ServeArgs(checkpoint=policy_checkpoint, port=0, max_batch=4, max_wait_ms=20, replicas=2,
                               max_message_mb=LIMIT_MB))
    yield s
    s.stop()


@contextlib.contextmanager
def _open(url):
    """(connection, metadata) of a new raw websocket client."""
    with connect(url, compression=None, max_size=None, open_timeout=30) as ws:
        yield ws, unpack(ws.recv(timeout=30))


def _good(meta, seed=0):
    rng = np.random.default_rng(seed)
    obs = {}
    for key, e in meta["observation"].items():
        if e["dtype"] == "str":
            obs[key] = "press the button"
        elif e["dtype"] == "uint8":
            obs[key] = rng.integers(0, 256, tuple(e["shape"]), dtype=np.uint8)
        else:
            obs[key] = rng.standard_normal(tuple(e["shape"])).astype(np.float32)
    return obs


def test_metadata_names_every_key_and_the_action_shape(served):
    with _open(served.url) as (ws, meta):
        assert meta["observation"]["pixels/agentview"] == {"shape": [32, 32, 3], "dtype": "uint8",
                                                           "camera": "agentview"}
        assert meta["observation"]["state"] == {"shape": [8], "dtype": "float32"}
        assert meta["observation"]["prompt"]["dtype"] == "str"
        assert meta["action"]["shape"] == [4, 4] and meta["batching"]["buckets"] == [1, 2, 4]
        ws.send(pack(_good(meta)))
        out = unpack(ws.recv(timeout=60))
        assert out["actions"].shape == (4, 4) and out["actions"].dtype == np.float32
        assert np.all(np.abs(out["actions"]) <= 1) and out["server_timing"]["batch_size"] >= 1


def test_health_check(served):
    port = served.server.port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
        assert r.status == 200 and r.read() == b"OK\n"


def test_concurrent_clients_are_batched_without_recompiles(served):
    traces = served.server.policy.traces
    assert traces == 3  # buckets 1, 2, 4 compiled at start-up
    before = sum(served.server.worker.batcher.batch_hist.values())
    results, errors = [], []

    def client(i):
        try:
            with _open(served.url) as (ws, meta):
                for k in range(6):
                    ws.send(pack(_good(meta, seed=10 * i + k)))
                    out = unpack(ws.recv(timeout=60))
                    results.append((out["server_timing"]["batch_size"], out["server_timing"]["replica"]))
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(results) == 48
    assert max(b for b, _ in results) > 1  # requests of different connections shared a batch
    assert {r for _, r in results} == {0, 1}  # both replicas served
    assert sum(served.server.worker.batcher.batch_hist.values()) > before
    assert served.server.policy.traces == traces  # no recompiles under load


def _side_server(base, **kwargs):
    """(server, thread, url): a second server on `base`'s compiled policy, running in a thread."""
    from vlajax.serve.server import PolicyServer

    meta = {k: v for k, v in base.metadata.items() if k not in ("batching", "max_message_bytes")}
    server = PolicyServer(base.policy, base.spec, meta, port=0, **kwargs)
    ready = threading.Event()
    thread = threading.Thread(target=lambda: asyncio.run(server.run(lambda port: ready.set(), signals=False)),
                              daemon=True)
    thread.start()
    assert ready.wait(60)
    return server, thread, f"ws://127.0.0.1:{server.port}"


def test_adaptive_wait_skips_t_max_only_when_no_other_client_can_send(served):
    eager, thread, url = _side_server(served.server, max_wait_s=0.5)  # T_max 0.5 s, the default (adaptive) rule
    try:
        with _open(url) as (ws, meta):
            assert meta["batching"]["fire_when_all_waiting"] is True
            for k in range(3):  # the only client: nobody else can join its batch, so it fires at once
                ws.send(pack(_good(meta, seed=k)))
                assert unpack(ws.recv(timeout=60))["server_timing"]["queue_ms"] < 250
            with _open(url):  # a second, idle client could still send: the request waits T_max
                ws.send(pack(_good(meta)))
                assert unpack(ws.recv(timeout=60))["server_timing"]["queue_ms"] >= 450
    finally:
        eager.request_stop()
        thread.join(60)
    fixed, thread, url = _side_server(served.server, max_wait_s=0.02, fire_when_all_waiting=False)
    try:
        with _open(url) as (ws, meta):  # the fixed rule (--no-fire-when-all-waiting): a lone request waits T_max
            assert meta["batching"]["fire_when_all_waiting"] is False
            ws.send(pack(_good(meta)))
            assert unpack(ws.recv(timeout=60))["server_timing"]["queue_ms"] >= 19
    finally:
        fixed.request_stop()
        thread.join(60)


def test_health_check_answers_503_while_draining(served):
    import urllib.error

    slow, thread, url = _side_server(served.server, max_wait_s=3.0, fire_when_all_waiting=False)
    port = slow.port
    with _open(url) as (ws, meta):
        ws.send(pack(_good(meta)))  # a lone request under the fixed rule: it waits T_max (3 s) in the server
        deadline = time.monotonic() + 30
        while slow.in_flight == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        slow.request_stop()
        while not slow.draining and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10)
        assert e.value.code == 503 and e.value.read() == b"draining\n"
        assert slow.in_flight == 1  # the health check ran while the request was still in the server
        out = unpack(ws.recv(timeout=60))  # ... and the request is still answered
        assert out["actions"].shape == (4, 4)
    thread.join(60)
    assert not thread.is_alive()


def test_a_prompt_longer_than_the_budget_is_answered_with_a_warning(served):
    with _open(served.url) as (ws, meta):
        ws.send(pack(_good(meta)))
        assert "warnings" not in unpack(ws.recv(timeout=60))
        long = " ".join(["press the red button and then the blue one"] * 3)  # > 16 tokens
        ws.send(pack({**_good(meta), "prompt": long}))
        out = unpack(ws.recv(timeout=60))
        assert out["actions"].shape == (4, 4)
        assert len(out["warnings"]) == 1 and "prompt truncated" in out["warnings"][0]
        assert "the policy reads the first 16" in out["warnings"][0]


def test_a_batch_is_split_over_idle_replicas_only_where_that_is_faster(served):
    policy = served.server.policy
    assert policy.replicas == 2 and set(policy.bucket_ms) == {1, 2, 4}  # measured at warm-up
    saved = dict(policy.bucket_ms)
    try:
        policy.bucket_ms.update({1: 1.0, 2: 2.0, 4: 4.0})  # cost grows with the batch (a busy CPU)
        assert policy.split(4, idle=2) == [2, 2] and policy.split(3, idle=2) == [2, 1]
        assert policy.split(4, idle=1) == [4] and policy.split(1, idle=2) == [1]
        policy.bucket_ms.update({1: 1.0, 2: 1.0, 4: 1.02})  # about flat (an accelerator): one batch
        assert policy.split(4, idle=2) == [4]
    finally:
        policy.bucket_ms.clear()
        policy.bucket_ms.update(saved)


def _ndarray_map(dtype, shape, data):
    return {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": shape}


BAD = [  # name, message builder(meta) -> bytes | str, expected fragment of the error text
    ("missing key", lambda m: pack({k: v for k, v in _good(m).items() if k != "pixels/wrist"}),
     "missing key 'pixels/wrist'"),
    ("wrong image shape", lambda m: pack({**_good(m), "pixels/agentview": np.zeros((16, 16, 3), np.uint8)}),
     "'pixels/agentview' has shape (16, 16, 3); expected (32, 32, 3)"),
    ("wrong image dtype", lambda m: pack({**_good(m), "pixels/agentview": np.zeros((32, 32, 3), np.float32)}),
     "'pixels/agentview' has dtype float32"),
    ("non-finite state", lambda m: pack({**_good(m), "state": np.array([0, 1, np.nan, 0, np.inf, 0, 0, 0],
                                                                        np.float32)}),
     "non-finite values at indices [2, 4]"),
    ("unknown prompt token", lambda m: pack({**_good(m), "tokenized_prompt": np.array([1, 9999], np.int32)}),
     "unknown prompt token id(s) [9999]"),
    ("prompt not text", lambda m: pack({**_good(m), "prompt": 5}), "'prompt' must be a string"),
    ("not msgpack", lambda m: b"\xc1\xc1\xc1", "not a msgpack-numpy message"),
    ("text frame", lambda m: "hello", "expected a binary msgpack-numpy observation"),
    ("object array", lambda m: msgpack.packb({**{k: v for k, v in _good(m).items() if k != "state"},
                                              "state": _ndarray_map("|O", [1], b"\0" * 8)}, default=_np_default),
     "array dtype object is not accepted"),
    ("truncated array", lambda m: msgpack.packb({"state": _ndarray_map("<f4", [8], b"\0" * 5)}),
     "needs 32 bytes, got 5"),
    ("giant message", lambda m: pack({**_good(m), "junk": np.zeros(int(LIMIT_MB * 2**20) + 1, np.uint8)}),
     "exceeds the server's limit"),
    ("not a map", lambda m: pack([1, 2, 3]), "observation must be a map"),
    ("scalar overflows its dtype", lambda m: msgpack.packb({**{k: v for k, v in _good(m).items() if k != "state"},
                                                            "x": {b"__npgeneric__": True, b"data": 300,
                                                                  b"dtype": "|u1"}}, default=_np_default),
     "scalar 300 does not fit dtype uint8"),
]



def _np_default(obj):
    return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": list(obj.shape)}


def test_bad_input_table_while_a_good_client_is_served(served):
    stop = threading.Event()
    good = {"ok": 0, "errors": []}

    def well_behaved():
        with _open(served.url) as (ws, meta):
            for i in range(10_000):  # bounded; ends when the table is done
                if stop.is_set():
                    break
                ws.send(pack(_good(meta, seed=i)))
                out = ws.recv(timeout=60)
                if isinstance(out, str):
                    good["errors"].append(out)
                else:
                    good["ok"] += 1

    t = threading.Thread(target=well_behaved)
    t.start()
    try:
        rows = []
        for name, build, _ in BAD:
            with _open(served.url) as (ws, meta):
                ws.send(build(meta))
                reply = ws.recv(timeout=60)
                ok_after = False
                if isinstance(reply, str):  # the same connection keeps being served
                    ws.send(pack(_good(meta)))
                    ok_after = not isinstance(ws.recv(timeout=60), str)
            rows.append((name, reply if isinstance(reply, str) else "<binary>", ok_after))
        # a client that disconnects while its request is being served
        for _ in range(3):
            with _open(served.url) as (ws, meta):
                ws.send(pack(_good(meta)))  # and gone before the answer
        n_before = good["ok"]
        deadline = time.monotonic() + 60
        while good["ok"] < n_before + 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        t.join(120)
    for (name, reply, ok_after), (_, _, fragment) in zip(rows, BAD):
        assert reply.startswith("error: ") and fragment in reply, (name, reply)
        assert ok_after, name
    assert good["errors"] == [] and good["ok"] >= n_before + 3
    assert served.server.policy.traces == 3


def test_remote_policy_keeps_requests_in_flight_and_in_order(served):
    from vlajax.serve.client import RemotePolicy, ServerError

    with RemotePolicy(served.url, connections=3) as policy:
        obs = [_good(policy.metadata, seed=i) for i in range(7)]
        many = policy.infer_many(obs)
        assert len(many) == 7 and all(m["actions"].shape == (4, 4) for m in many)
        # deterministic sampling: each answer is the one its own observation gets alone
        for i in (0, 6):
            np.testing.assert_allclose(policy.infer(obs[i])["actions"], many[i]["actions"], atol=1e-5)
        with pytest.raises(ServerError, match="missing key 'state'"):
            policy.infer({k: v for k, v in obs[0].items() if k != "state"})
