"""Dynamic batching: fires on max_batch and on max_wait, answers each slot, routes slots."""

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.pipeline.lanes import LaneGroup, PipelineTimeout
from vlajax.pipeline.scheduler import DynamicBatcher, Request, Router


@pytest.mark.timeout(30)
def test_fires_on_max_batch_without_waiting_for_the_deadline():
    b = DynamicBatcher(max_batch=4, max_wait_s=30.0)
    reqs = []
    threads = [threading.Thread(target=lambda i=i: reqs.append(b.submit(i, i))) for i in range(4)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    batch = b.next_batch(timeout=10.0)
    elapsed = time.monotonic() - t0
    assert sorted(r.payload for r in batch) == [0, 1, 2, 3]
    assert elapsed < 5.0  # far below max_wait_s = 30 s: the size trigger fired
    assert b.triggers == {"full": 1} and list(b.batch_sizes) == [4]


@pytest.mark.timeout(30)
def test_fires_on_max_wait_with_a_partial_batch():
    b = DynamicBatcher(max_batch=8, max_wait_s=0.3)
    first = b.submit(0, "a")
    b.submit(1, "b")
    b.submit(2, "c")
    batch = b.next_batch(timeout=10.0)
    waited = time.monotonic() - first.submitted
    assert [r.payload for r in batch] == ["a", "b", "c"]  # arrival order
    assert waited >= 0.3  # not before the oldest request's deadline
    assert waited < 0.3 + 2.0  # and soon after it (generous on a loaded 2-core machine)
    assert b.triggers == {"wait": 1}


def test_takes_at_most_max_batch_oldest_first():
    b = DynamicBatcher(max_batch=2, max_wait_s=10.0)
    for i in range(5):
        b.submit(i, i)
    assert [r.payload for r in b.next_batch(1.0)] == [0, 1]
    assert [r.payload for r in b.next_batch(1.0)] == [2, 3]
    assert len(b) == 1
    assert b.next_batch(0.05) == []  # one request left, younger than max_wait: nothing fires


def test_request_wait_times_out():
    with pytest.raises(PipelineTimeout, match="slot 3"):
        Request(3, None).wait(0.1)


@pytest.mark.timeout(60)
def test_slots_and_generator_lane_with_jitted_inference():
    """4 slot lanes post as soon as they stepped; one generator lane batches and runs a jitted policy."""
    num_slots, steps, obs_dim = 4, 25, 3
    group = LaneGroup(watchdog_s=30.0)
    b = DynamicBatcher(max_batch=num_slots, max_wait_s=0.002, lifetime=group.lifetime, timeline=group.timeline)
    w = jnp.arange(obs_dim * 2, dtype=jnp.float32).reshape(obs_dim, 2)
    policy = jax.jit(lambda obs: obs @ w)
    results = {s: [] for s in range(num_slots)}
    done = {s: 0 for s in range(num_slots)}

    def infer(payloads):
        out = np.asarray(policy(jnp.stack(payloads)))
        return list(out)

    def slot_body(s):
        def body(lane):
            if done[s] == steps:
                return False
            obs = np.full((obs_dim,), s + done[s], np.float32)
            time.sleep(0.001 * (s + 1))  # slots step at different speeds
            req = b.submit(s, obs)
            with lane.waiting("action"):
                act = req.wait(10.0, group.lifetime)
            results[s].append((obs, act))
            done[s] += 1
            return True
        return body

    def generator(lane):
        if all(d == steps for d in done.values()):
            return False
        b.serve(infer, lane)
        return True

    for s in range(num_slots):
        group.add(f"rollouter/slot{s}", slot_body(s))
    group.add("generator", generator)
    assert group.run(timeout=50) == "done"
    for s in range(num_slots):
        assert len(results[s]) == steps
        for obs, act in results[s]:
            np.testing.assert_allclose(act, obs @ np.asarray(w), rtol=1e-6)  # each slot got its own action
    assert sum(b.batch_sizes) == num_slots * steps
    assert max(b.batch_sizes) <= num_slots
    assert group.timeline.batches and len(group.timeline.batches) == len(b.batch_sizes)


def test_inference_error_reaches_every_slot_of_the_batch():
    b = DynamicBatcher(max_batch=2, max_wait_s=10.0)
    r0, r1 = b.submit(0, 0), b.submit(1, 1)

    def bad(payloads):
        raise FloatingPointError("nan in policy")

    with pytest.raises(FloatingPointError):
        b.serve(bad)
    for r in (r0, r1):
        with pytest.raises(FloatingPointError):
            r.wait(1.0)


def test_router_spreads_slots_over_generators():
    bs = [DynamicBatcher(8, 10.0) for _ in range(2)]
    router = Router(bs)
    for s in range(6):
        router.submit(s, s)
    assert [len(b) for b in bs] == [3, 3]
    assert [r.payload for r in bs[1].next_batch(0.0)] == []  # 3 < 8 and young: not fired
    custom = Router(bs, route=lambda slot: 0)
    custom.submit(9, 9)
    assert len(bs[0]) == 4
