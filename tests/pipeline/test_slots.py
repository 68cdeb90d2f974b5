"""Env slots + dynamic batching generators inside the async runner (rollout async)."""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.pipeline import toy
from vlajax.config.schema import AsyncConfig
from vlajax.pipeline.runner import AsyncRunner, run_sync
from vlajax.pipeline.slots import SlotRollout

ENVS_PER_SLOT, HORIZON = 4, 3


@jax.jit
def _policy(params, x, keys):
    """x: [S, E, OBS], keys: [S] -> actions [S, E, ACT] (Gaussian around a linear mean)."""
    mean = x @ params["w"] + params["b"]
    noise = jax.vmap(lambda k: jax.random.normal(k, mean.shape[1:]))(keys)
    return mean + toy.STD * noise


@jax.jit
def _advance(x, a, key):
    x_next = 0.9 * x + 0.3 * jnp.pad(a, ((0, 0), (0, toy.OBS - toy.ACT))) + 0.05 * jax.random.normal(key, x.shape)
    return x_next, -jnp.sum(x_next**2, -1)


def make_env(step_s=lambda slot: 0.0):
    root = jax.random.key(7)

    def reset(slot):
        x = 2.0 * jax.random.normal(jax.random.fold_in(root, slot), (ENVS_PER_SLOT, toy.OBS))
        return (x, 0), {"x": x, "key": jax.random.fold_in(jax.random.fold_in(root, 1000 + slot), 0)}

    def step(slot, state, action):
        x, t = state
        x_next, rew = _advance(x, action, jax.random.fold_in(jax.random.fold_in(root, 2000 + slot), t))
        time.sleep(step_s(slot))
        rec = {"obs": np.asarray(x), "act": np.asarray(action), "rew": np.asarray(rew)}
        obs = {"x": x_next, "key": jax.random.fold_in(jax.random.fold_in(root, 1000 + slot), t + 1)}
        return (x_next, t + 1), obs, rec

    def infer(params, payloads):
        acts = _policy(params, jnp.stack([p["x"] for p in payloads]), jnp.stack([p["key"] for p in payloads]))
        return list(acts)

    return reset, step, infer


def _slots(cfg, **kw):
    reset, step, infer = make_env(**kw)
    return SlotRollout(cfg, reset=reset, step=step, infer=infer, horizon=HORIZON, samples_per_slot=ENVS_PER_SLOT)


def _leaves(state):
    return [np.asarray(x) for x in jax.tree.leaves(state.params)]


@pytest.mark.timeout(120)
def test_one_slot_reduces_exactly_to_sync():
    cfg = AsyncConfig(enabled=True, staleness_threshold=0.0, require_batches=2, num_slots=1, max_wait_ms=1.0,
                      queue_timeout_s=60.0)
    n = 5
    sync_state, _ = run_sync(cfg, sample_step=_slots(cfg).sample_step, train_step=toy.ToyTrainer(),
                             get_params=toy.get_params, state=toy.init_state(3), num_updates=n,
                             samples_per_step=ENVS_PER_SLOT, mini_batch=ENVS_PER_SLOT)
    slots = _slots(cfg)
    runner = AsyncRunner(cfg, sample_step=None, rollout=slots.lanes, train_step=toy.ToyTrainer(),
                         get_params=toy.get_params, state=toy.init_state(3), num_updates=n,
                         samples_per_step=ENVS_PER_SLOT, mini_batch=ENVS_PER_SLOT)
    assert runner.run(timeout=100) == "done"
    for a, b in zip(_leaves(sync_state), _leaves(runner.state), strict=True):
        np.testing.assert_array_equal(a, b)
    assert all(s == 0 for h in runner.history for s in h["staleness"])
    assert set(slots.batchers[0].batch_sizes) == {1}


@pytest.mark.timeout(120)
def test_slots_without_partial_rollout_keep_one_version_per_segment():
    cfg = AsyncConfig(enabled=True, staleness_threshold=1.0, require_batches=2, num_slots=4, num_generators=2,
                      max_batch=2, max_wait_ms=2.0, queue_timeout_s=60.0)
    slots = _slots(cfg, step_s=lambda s: 0.002 * (1 + 3 * (s == 3)))  # slot 3 is a straggler
    runner = AsyncRunner(cfg, sample_step=None, rollout=slots.lanes, train_step=toy.ToyTrainer(update_s=0.02),
                         get_params=toy.get_params, state=toy.init_state(0), num_updates=8,
                         samples_per_step=ENVS_PER_SLOT, mini_batch=ENVS_PER_SLOT)
    assert runner.run(timeout=100) == "done"
    assert all(sp == 0 for h in runner.history for sp in h["span"])  # the gate switched between segments only
    assert max(s for h in runner.history for s in h["staleness"]) <= 1
    m = runner.summary()
    assert 1 <= m["inference/batch_mean"] <= 2 and m["inference/batch_max"] <= 2
    assert m["env/steps_per_s"] > 0 and m["counters/consumed"] == 8 * 2 * ENVS_PER_SLOT
    # Every decision of every finished segment went through a batcher (segments cut by the stop add more).
    assert sum(sum(b.batch_sizes) for b in slots.batchers) >= slots.segments * HORIZON
    assert all(b.batch_sizes for b in slots.batchers)  # both generators served their slots


@pytest.mark.timeout(120)
def test_slots_with_partial_rollout_mix_versions():
    cfg = AsyncConfig(enabled=True, staleness_threshold=1.0, partial_rollout=True, require_batches=1, num_slots=2,
                      max_wait_ms=1.0, queue_timeout_s=60.0)
    slots = _slots(cfg, step_s=lambda s: 0.01 if s == 0 else 0.04)  # out of phase: updates land mid-segment
    # 24 updates: how many of them land mid-segment depends on thread timing (2 of 8 typically, none in ~1 of
    # 4 fresh processes with 8 updates, where the first segments also wait for the jit compiles)
    runner = AsyncRunner(cfg, sample_step=None, rollout=slots.lanes, train_step=toy.ToyTrainer(),
                         get_params=toy.get_params, state=toy.init_state(0), num_updates=24,
                         samples_per_step=ENVS_PER_SLOT, mini_batch=ENVS_PER_SLOT)
    assert runner.run(timeout=100) == "done"
    spans = [sp for h in runner.history for sp in h["span"]]
    assert max(spans) >= 1
    assert max(s for h in runner.history for s in h["staleness"]) <= 1  # the bound holds for partial rollouts too


@pytest.mark.timeout(30)
def test_version_gate_switches_only_between_segments():
    import threading

    from vlajax.pipeline.lanes import Lifetime, PipelineTimeout
    from vlajax.pipeline.slots import VersionGate
    from vlajax.pipeline.weights import ParamServer

    weights = ParamServer({"w": jnp.zeros(2)})
    gate = VersionGate(weights, Lifetime(), timeout_s=0.3)
    assert gate.begin() == 0  # a segment in flight under version 0
    weights.publish(1, {"w": jnp.ones(2)})
    weights.install_pending()
    got = []
    t = threading.Thread(target=lambda: got.append(gate.begin()))
    t.start()
    t.join(0.15)
    assert t.is_alive() and gate.current[0] == 0  # the new segment waits for the old one to drain
    gate.end()
    t.join(5.0)
    assert got == [1] and gate.current[0] == 1 and float(gate.current[1]["w"][0]) == 1.0
    weights.publish(2, {"w": jnp.full(2, 2.0)})
    weights.install_pending()
    with pytest.raises(PipelineTimeout, match="segments in flight"):
        gate.begin()  # the segment started above never ends: the wait is bounded


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "slots, gens, threshold, trigger, require, partial, streaming",
    [(3, 1, 0.0, 1, 2, False, False), (3, 2, 0.5, 2, 1, False, True), (2, 1, 1.0, 1, 3, True, True),
     (4, 2, 2.0, 1, 2, True, False), (3, 3, 0.5, 2, 2, False, False), (1, 1, 1.0, 3, 1, True, True)],
)
def test_knob_combinations_finish_within_the_bound(slots, gens, threshold, trigger, require, partial, streaming):
    """No combination of the knobs deadlocks; counts add up; staleness <= ceil(threshold)."""
    import math

    cfg = AsyncConfig(enabled=True, staleness_threshold=threshold, trigger_parameter_sync_step=trigger,
                      require_batches=require, partial_rollout=partial, streaming=streaming, num_slots=slots,
                      num_generators=gens, max_wait_ms=1.0, queue_timeout_s=60.0, watchdog_s=60.0)
    rng = np.random.default_rng(slots * 100 + require)
    rollout = _slots(cfg, step_s=lambda s: float(rng.choice([0.0, 0.002, 0.02], p=[0.5, 0.4, 0.1])))
    updates = 2 * trigger * 2
    runner = AsyncRunner(cfg, sample_step=None, rollout=rollout.lanes, train_step=toy.ToyTrainer(),
                         get_params=toy.get_params, state=toy.init_state(0), num_updates=updates,
                         samples_per_step=ENVS_PER_SLOT, mini_batch=ENVS_PER_SLOT)
    assert runner.run(timeout=200) == "done"
    c = runner.buffer.counters()
    assert runner.counters.updates == updates and runner.counters.version == updates // trigger
    assert c["consumed"] == updates * require * ENVS_PER_SLOT
    assert c["produced"] == c["consumed"] + c["depth"] and c["reserved"] >= c["produced"]
    assert max(s for h in runner.history for s in h["staleness"]) <= math.ceil(threshold)
    if not partial:
        assert all(sp == 0 for h in runner.history for sp in h["span"])
