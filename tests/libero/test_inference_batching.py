"""`BatchingServer`'s firing rule with real websocket clients speaking the workers' protocol (msgpack-numpy over
one connection per env slot): with `adaptive`, a forward fires when every connection with an episode in flight
has posted (or at T_max); a terminal request is answered at once; a finished or closed connection is not
waited for."""

from __future__ import annotations

import threading
import time

import numpy as np
from websockets.sync.client import connect

from vlajax.libero.inference import BatchingServer
from vlajax.libero.protocol import EXTRA_KEYS
from vlajax.serve.codec import pack, unpack

T_MAX_MS = 20_000.0  # far longer than the tests run: a forward that waited for it shows as a 'wait' trigger


def _handle(requests):
    return [{"actions": np.full((2, 7), r.conn, np.float32)} for r in requests]


def _episode(url: str, steps: int, step_s: float, terminal: bool, start: threading.Barrier, errors: list) -> None:
    """One env slot: connect, wait until every slot has connected, then `steps` requests each answered
    before a `step_s` env step, then the terminal request (with `terminal` False the connection closes)."""
    try:
        with connect(url, compression=None, max_size=None) as ws:
            unpack(ws.recv())  # the server's metadata
            start.wait(300)
            for i in range(steps + terminal):
                done = i == steps
                ws.send(pack({"observation/state": np.zeros(8, np.float32), EXTRA_KEYS["episode"]: "e",
                              EXTRA_KEYS["step"]: i, EXTRA_KEYS["done"]: done}))
                reply = unpack(ws.recv())
                assert np.asarray(reply["actions"]).shape == (2, 7)
                if not done:
                    time.sleep(step_s)
    except Exception as e:  # noqa: BLE001 -- reported by the test
        errors.append(repr(e))


def _run(episodes: list[tuple[int, float, bool]], **kw) -> BatchingServer:
    errors: list[str] = []
    start = threading.Barrier(len(episodes))
    with BatchingServer(_handle, {"policy": "test"}, max_batch=8, **kw) as server:
        threads = [threading.Thread(target=_episode, args=(server.url, n, s, t, start, errors))
                   for n, s, t in episodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join(900)
    assert not errors, errors
    return server


def test_slots_in_lockstep_are_one_forward_however_long_their_steps_take():
    """Three slots, steps of 10 / 60 / 150 ms: each of the 4 forwards holds all three ('all'), then each
    terminal request is answered on its own."""
    s = _run([(4, 0.01, True), (4, 0.06, True), (4, 0.15, True)], max_wait_ms=T_MAX_MS)
    forwards = [(b, t) for b, t in zip(s.batches, s.fired_by) if t != "terminal"]
    assert forwards == [(3, "all")] * 4 and s.active[:4] == [3, 3, 3, 3], (s.batches, s.fired_by)
    # terminal requests arriving together (a loaded machine) may share their batch
    assert sum(b for b, t in zip(s.batches, s.fired_by) if t == "terminal") == 3


def test_a_finished_or_closed_slot_is_not_waited_for():
    """Slot A ends after 1 step (terminal request), slot B closes after 2 requests without one, slot C runs 5:
    C's last forwards fire alone at once ('all'), never at T_max."""
    s = _run([(1, 0.05, True), (2, 0.05, False), (5, 0.05, True)], max_wait_ms=T_MAX_MS)
    assert s.triggers["wait"] == 0 and s.triggers["full"] == 0, s.fired_by
    assert sum(s.batches) == (1 + 1) + 2 + (5 + 1) and s.triggers["terminal"] == 2
    assert s.batches[0] == 3 and s.fired_by[-1] == "terminal"
    # C alone in flight: its last forwards fire at once, each with C's request only
    assert s.fired_by[-3:-1] == ["all", "all"] and s.batches[-3:-1] == [1, 1] and s.active[-2] == 1, s.fired_by


def test_the_fixed_rule_fires_at_the_wait_when_a_slot_lags():
    """adaptive=False: a slot whose steps take longer than max_wait_ms misses the other's forwards (each fired
    at the 30 ms wait); the adaptive rule (T_max 20 s) holds both slots in every forward."""
    fixed = _run([(3, 0.01, True), (3, 0.2, True)], max_wait_ms=30, adaptive=False)
    assert fixed.triggers["all"] == 0 and fixed.triggers["wait"] >= 3, fixed.fired_by
    adaptive = _run([(3, 0.01, True), (3, 0.2, True)], max_wait_ms=T_MAX_MS)
    assert [b for b, t in zip(adaptive.batches, adaptive.fired_by) if t != "terminal"] == [2, 2, 2], adaptive.fired_by
