"""Bounded memory: every per-event structure of the pipeline stays bounded over 10,000 updates,
while the whole-run figures stay exact (running totals) and windows stay exact (recent records)."""

import collections

import numpy as np
import pytest

from vlajax.config.schema import AsyncConfig
from vlajax.pipeline import runner as runner_mod
from vlajax.pipeline import scheduler, weights
from vlajax.pipeline.buffer import KEEP_VERSIONS, Trajectory, TrajectoryBuffer
from vlajax.pipeline.metrics import Timeline, summarize
from vlajax.pipeline.runner import AsyncRunner
from vlajax.pipeline.scheduler import DynamicBatcher
from vlajax.pipeline.weights import ParamServer

UPDATES = 10_000
RETAIN = 256


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _sizes(tl, buf, batcher, server):
    out = {f"timeline/{k}": v for k, v in tl.sizes().items()}
    out |= {"buffer/consumed_at": len(buf._consumed_at), "buffer/items": len(buf._items),
            "buffer/outstanding": len(buf._outstanding), "batcher/batch_sizes": len(batcher.batch_sizes),
            "batcher/batch_hist": len(batcher.batch_hist), "weights/transfer_s": len(server.transfer_s)}
    return out


def test_every_structure_stays_bounded_over_10000_simulated_updates(monkeypatch):
    """One update = a slot's segment (reserve -> 4 inference batches -> put), the trainer's get,
    publish + install of a new version, idle periods on three lanes; all with a fake clock."""
    monkeypatch.setattr(scheduler, "RECENT", RETAIN)  # keep fewer recent records: bounded sooner
    monkeypatch.setattr(weights, "RECENT", RETAIN)
    clock = FakeClock()
    tl = Timeline(clock, retain=RETAIN)
    for lane in ("trainer", "rollouter/slot0", "weights"):
        tl.register(lane)
    buf = TrajectoryBuffer(window=2, staleness_threshold=1.0, timeline=tl)
    batcher = DynamicBatcher(max_batch=4, max_wait_s=0.0, timeline=tl)
    server = ParamServer({"w": np.zeros(2, np.float32)}, snapshot=False)
    server.on_install(buf.set_rollout_version)
    sizes_at: dict[int, dict[str, int]] = {}
    for u in range(1, UPDATES + 1):
        ticket = buf.reserve(2, timeout=1.0)
        for i in range(4):
            batcher.submit(0, i)
            assert len(batcher.next_batch(timeout=1.0)) == 1
        tl.begin_idle("rollouter/slot0", "inference")
        clock.t += 0.001
        tl.end_idle("rollouter/slot0")
        buf.put(Trajectory({"x": np.zeros(1)}, np.full(4, server.version), num_samples=2, env_steps=8), ticket)
        tl.record_env_steps(8)
        tl.add_idle("trainer", "samples", clock.t, clock.t + 0.002)
        clock.t += 0.002
        buf.get(timeout=1.0)
        buf.record_publish(u)
        server.publish(u, {"w": np.full(2, u, np.float32)})
        assert server.install_pending()
        tl.add_idle("weights", "publication", clock.t, clock.t + 0.001)
        clock.t += 0.001
        if u in (1_000, UPDATES):
            sizes_at[u] = _sizes(tl, buf, batcher, server)
    assert sizes_at[1_000] == sizes_at[UPDATES], "a structure grew between update 1,000 and 10,000"
    final = sizes_at[UPDATES]
    assert final.pop("timeline/idle") <= RETAIN * len(tl.lanes)  # recent idle periods per lane
    assert max(final.values()) <= RETAIN
    assert len(buf._consumed_at) <= KEEP_VERSIONS + 2

    # Whole-run figures come from the running totals: exact after records were dropped.
    m = summarize(tl)
    assert m["window_complete"] == 1.0
    assert m["samples/consumed_per_s"] * m["window_s"] == pytest.approx(2 * UPDATES)
    assert m["env/steps_per_s"] * m["window_s"] == pytest.approx(8 * UPDATES)
    assert m["inference/batch_hist_1"] == 4 * UPDATES and m["inference/batch_max"] == 1
    assert m["trainer/idle_ratio"] == pytest.approx(0.002 / 0.004)
    assert m["rollouter/wait_inference_ratio"] == pytest.approx(0.001 / 0.004)
    assert server.installed == UPDATES and server.transfer_max_s >= max(server.transfer_s)
    # A recent window is exact from the retained records; one reaching past them says so.
    last = summarize(tl, clock.t - 0.04, clock.t)  # the last 10 updates
    assert last["window_complete"] == 1.0
    assert last["samples/consumed_per_s"] * last["window_s"] == pytest.approx(20)
    assert last["trainer/idle_ratio"] == pytest.approx(0.5)
    assert summarize(tl, 1.0, clock.t)["window_complete"] == 0.0
    # An old version a slot might still hold is forgotten: reserving under it starts again.
    assert buf.reserve_for(2, version=1, timeout=0.1) is None


def test_runner_history_is_windowed_and_on_update_sees_every_update(monkeypatch):
    """A real AsyncRunner (threads, pacing, control plane) with trivial steps: the per-update
    history keeps the newest HISTORY records, the counters all of them."""
    monkeypatch.setattr(runner_mod, "HISTORY", 20)
    B = 2

    def sample_step(version, params, call):
        return [Trajectory({"x": np.zeros(B)}, np.full(1, version), num_samples=B, env_steps=B)]

    def train_step(state, batches):
        n = sum(1 for _ in batches)
        return {"w": state["w"] + n}, {"loss": 0.0}

    seen = collections.Counter()
    n = 300
    r = AsyncRunner(AsyncConfig(require_batches=1, staleness_threshold=1.0), sample_step=sample_step,
                    train_step=train_step, get_params=lambda s: s, state={"w": np.zeros(1, np.float32)},
                    num_updates=n, samples_per_step=B, mini_batch=B, on_update=lambda _, rec: seen.update([1]))
    assert r.run(timeout=120) == "done"
    assert r.counters.updates == n and seen[1] == n
    assert len(r.history) == 20 and [h["update"] for h in r.history] == list(range(n - 19, n + 1))
    assert r.timeline.total_env_steps() >= n * B
    assert r.summary()["samples/consumed_per_s"] > 0


def test_soak_verdict_flags_rss_growth_and_structures_over_their_cap():
    from research.bench.soak import verdict

    def s(minute, rss, n):
        return {"minute": minute, "rss_mb": rss, "updates": 10 * minute, "sizes": {"timeline/produced": n, "hist": 3}}

    cap = {"timeline/produced": 100}
    assert verdict([s(1, 90, 10), s(5, 100, 50), s(30, 104, 100)], 5, cap)["ok"]
    grew = verdict([s(5, 100, 50), s(30, 106, 100)], 5, cap)
    assert not grew["ok"] and grew["rss_growth_pct"] == pytest.approx(6.0)
    over = verdict([s(5, 100, 50), s(30, 100, 101)], 5, cap)
    assert not over["ok"] and set(over["unbounded"]) == {"timeline/produced"}
    uncapped = [s(5, 100, 50), s(30, 100, 60)]
    uncapped[-1]["sizes"]["hist"] = 4  # a structure without a cap grew after the settle minute
    assert set(verdict(uncapped, 5, cap)["unbounded"]) == {"hist"}
    assert not verdict([s(1, 100, 1)], 5, cap)["ok"]  # too short to judge
