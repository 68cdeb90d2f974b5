"""Adaptive batching: a forward fires once every slot with a segment in flight has posted (or at T_max)."""

import pytest

from tests.pipeline import toy
from tests.pipeline.test_slots import ENVS_PER_SLOT, _slots
from vlajax.config.schema import AsyncConfig
from vlajax.pipeline.runner import AsyncRunner
from vlajax.pipeline.scheduler import DynamicBatcher


def test_fires_when_every_active_slot_has_posted_and_not_before():
    b = DynamicBatcher(max_batch=8, max_wait_s=600.0, adaptive=True)
    for s in range(3):
        b.activate(s)
    b.submit(0, "a")
    b.submit(2, "c")
    assert b.next_batch(0.05) == []  # slot 1 is still stepping: wait for it (T_max is far)
    b.submit(1, "b")
    batch = b.next_batch(0.05)
    assert [r.payload for r in batch] == ["a", "c", "b"] and b.triggers == {"all": 1}
    assert list(b.active_at_fire) == [3]


def test_a_slot_blocked_outside_the_rollout_is_not_waited_for():
    b = DynamicBatcher(max_batch=8, max_wait_s=600.0, adaptive=True)
    for s in range(3):
        b.activate(s)
    b.submit(0, "a")
    b.submit(1, "b")
    b.deactivate(2)  # slot 2 waits for pacing admission
    assert [r.payload for r in b.next_batch(0.05)] == ["a", "b"] and list(b.active_at_fire) == [2]


def test_the_fixed_rule_ignores_the_active_slots():
    b = DynamicBatcher(max_batch=8, max_wait_s=600.0)  # adaptive off: only max_batch or T_max fire
    for s in range(2):
        b.activate(s)
        b.submit(s, s)
    assert b.next_batch(0.05) == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("partial", [False, True])
def test_slots_at_different_speeds_are_one_batch_per_decision(partial):
    """4 slots stepping at 2-8 ms, T_max 10 min: every forward holds every slot in flight, and slots blocked in
    pacing (staleness 0, windows of 2 segments: half the slots wait for the trainer) or at a weight switch never
    hold the others back
    (without `deactivate` the run would wait T_max and time out)."""
    cfg = AsyncConfig(enabled=True, staleness_threshold=0.0, require_batches=2, num_slots=4, partial_rollout=partial,
                      max_wait_ms=600_000.0, queue_timeout_s=60.0)
    slots = _slots(cfg, step_s=lambda s: 0.002 * (s + 1))
    runner = AsyncRunner(cfg, sample_step=None, rollout=slots.lanes, train_step=toy.ToyTrainer(),
                         get_params=toy.get_params, state=toy.init_state(0), num_updates=4,
                         samples_per_step=ENVS_PER_SLOT, mini_batch=ENVS_PER_SLOT)
    assert runner.run(timeout=100) == "done"
    b = slots.batchers[0]
    assert "wait" not in b.triggers and sum(b.triggers.values()) == len(b.batch_sizes)
    assert list(b.batch_sizes) == list(b.active_at_fire)  # each forward: exactly the slots in flight
    assert max(b.batch_sizes) >= 2
    m = runner.summary()
    assert m["inference/batch_over_active"] == pytest.approx(1.0)
    assert m["inference/active_mean"] == pytest.approx(m["inference/batch_mean"])
