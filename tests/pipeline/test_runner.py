"""The async runner: exact reduction to the synchronous loop, streaming, partial rollouts,
stale-sample bounds, errors and SIGTERM checkpoint + resume, on a tiny real JAX problem."""

import dataclasses
import os
import signal

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from tests.pipeline import toy
from vlajax.config.schema import AsyncConfig, ConfigError, MeshConfig
from vlajax.pipeline.placement import make_placement
from vlajax.pipeline.runner import AsyncRunner, RunnerCounters, run_sync
from vlajax.training import checkpoint

B = toy.B


def _leaves(state):
    return [np.asarray(x) for x in jax.tree.leaves(state.params)]


def _sync(cfg, num_updates, seed=0):
    return run_sync(cfg, sample_step=toy.ToySampler(seed), train_step=toy.ToyTrainer(),
                    get_params=toy.get_params, state=toy.init_state(seed), num_updates=num_updates,
                    samples_per_step=B, mini_batch=B)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("trigger, require, placement", [(1, 2, "colocated"), (2, 1, "colocated"),
                                                         (1, 2, "disaggregated")])
def test_async_reduces_exactly_to_sync(trigger, require, placement):
    """Acceptance 1: staleness_threshold=0, one slot, no streaming -> the same parameters as sync."""
    cfg = AsyncConfig(enabled=True, staleness_threshold=0.0, trigger_parameter_sync_step=trigger,
                      require_batches=require, num_slots=1, streaming=False, placement=placement,
                      queue_timeout_s=60.0, watchdog_s=60.0)
    num_updates = 6
    sync_state, sync_hist = _sync(cfg, num_updates)
    trainer_device, rollout_shardings = None, None
    if placement == "disaggregated":
        p = make_placement(cfg, MeshConfig())
        trainer_device = p.train_devices[0]
        rollout_shardings = NamedSharding(p.rollout_mesh, PartitionSpec())
    state = jax.device_put(toy.init_state(0), trainer_device) if trainer_device else toy.init_state(0)
    runner = AsyncRunner(cfg, sample_step=toy.ToySampler(0), train_step=toy.ToyTrainer(trainer_device),
                         get_params=toy.get_params, state=state, num_updates=num_updates,
                         samples_per_step=B, mini_batch=B, rollout_shardings=rollout_shardings)
    assert runner.run(timeout=100) == "done"
    for a, b in zip(_leaves(sync_state), _leaves(runner.state), strict=True):
        np.testing.assert_array_equal(a, b)
    assert [h["version"] for h in runner.history] == [h["version"] for h in sync_hist]
    assert all(s == 0 for h in runner.history for s in h["staleness"])
    assert runner.counters.version == num_updates // trigger
    # Staleness in optimizer updates: with trigger K, the k-th update of a window trains on
    # samples k - 1 updates old at version lag 0 (both loops, history and metrics).
    expected = [[(u % trigger)] * require for u in range(num_updates)]
    assert [h["staleness_updates"] for h in runner.history] == expected
    assert [h["staleness_updates"] for h in sync_hist] == expected
    m = runner.summary()
    assert m["staleness/max"] == 0 and m["staleness/updates_max"] == trigger - 1
    # The sampler saw exactly the versions the synchronous loop used, call by call.
    assert not np.array_equal(_leaves(sync_state)[0], _leaves(toy.init_state(0))[0])  # it did learn something
    if placement == "disaggregated":
        assert runner.weights.latest()[1]["w"].sharding.device_set == set(p.rollout_devices)


@pytest.mark.timeout(120)
def test_stale_samples_are_bounded_and_change_the_result():
    """staleness_threshold=1 with a slow trainer: rollout runs one version ahead, never two."""
    cfg = AsyncConfig(enabled=True, staleness_threshold=1.0, require_batches=2, queue_timeout_s=60.0)
    num_updates = 6
    runner = AsyncRunner(cfg, sample_step=toy.ToySampler(0), train_step=toy.ToyTrainer(update_s=0.1),
                         get_params=toy.get_params, state=toy.init_state(0), num_updates=num_updates,
                         samples_per_step=B, mini_batch=B)
    assert runner.run(timeout=100) == "done"
    stale = [s for h in runner.history for s in h["staleness"]]
    assert max(stale) == 1 and min(stale) == 0
    m = runner.summary()
    assert m["staleness/max"] == 1 and m["counters/stale_consumed"] > 0 and m["env/steps_per_s"] > 0
    assert m["trainer/idle_ratio"] < m["rollouter/idle_ratio"]  # the trainer is the bottleneck here
    sync_state, _ = _sync(cfg, num_updates)
    assert not all(np.array_equal(a, b) for a, b in zip(_leaves(sync_state), _leaves(runner.state)))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("streaming", [True, False])
def test_streaming_starts_on_the_first_micro_batch(streaming):
    cfg = AsyncConfig(enabled=True, staleness_threshold=0.0, require_batches=3, streaming=streaming,
                      queue_timeout_s=60.0)
    sampler, trainer = toy.ToySampler(0, call_s=0.25), toy.ToyTrainer()
    produced = []
    sample = lambda v, p, c: [produced.append(it) or it for it in sampler(v, p, c)]
    runner = AsyncRunner(cfg, sample_step=sample, train_step=trainer, get_params=toy.get_params,
                         state=toy.init_state(0), num_updates=2, samples_per_step=B, mini_batch=B)
    assert runner.run(timeout=100) == "done"
    first_arrival = trainer.arrivals[0][0]
    second_done = produced[1].produced_at
    if streaming:
        assert first_arrival < second_done  # backward on micro-batch 1 while 2 was still being sampled
    else:
        assert first_arrival >= produced[2].produced_at  # waited for the whole batch
    # Both modes compute the same update from the same micro-batches.
    sync_state, _ = run_sync(cfg, sample_step=toy.ToySampler(0), train_step=toy.ToyTrainer(),
                             get_params=toy.get_params, state=toy.init_state(0), num_updates=2,
                             samples_per_step=B, mini_batch=B)
    for a, b in zip(_leaves(sync_state), _leaves(runner.state)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.timeout(120)
def test_partial_rollouts_record_mixed_versions():
    cfg = AsyncConfig(enabled=True, staleness_threshold=1.0, partial_rollout=True, queue_timeout_s=60.0)
    holder = {}

    class Late:  # the sampler reads the runner's param server, created below
        def latest(self):
            return holder["runner"].weights.latest()

    sampler = toy.ToySampler(0, partial=Late(), decision_s=0.03)
    runner = AsyncRunner(cfg, sample_step=sampler, train_step=toy.ToyTrainer(), get_params=toy.get_params,
                         state=toy.init_state(0), num_updates=8, samples_per_step=B, mini_batch=B)
    holder["runner"] = runner
    assert runner.run(timeout=100) == "done"
    spans = [s for h in runner.history for s in h["span"]]
    assert max(spans) >= 1  # episodes in flight continued under new weights
    assert runner.summary()["partial/version_span_max"] == max(spans)
    assert max(s for h in runner.history for s in h["staleness"]) <= 1  # ceil(threshold), spans included


@pytest.mark.timeout(60)
def test_a_failing_train_step_stops_the_run_with_its_traceback():
    def bad_train(state, batches):
        next(batches)
        raise FloatingPointError("loss is nan")

    cfg = AsyncConfig(enabled=True, queue_timeout_s=30.0)
    runner = AsyncRunner(cfg, sample_step=toy.ToySampler(0), train_step=bad_train, get_params=toy.get_params,
                         state=toy.init_state(0), num_updates=3, samples_per_step=B, mini_batch=B)
    with pytest.raises(FloatingPointError, match="loss is nan") as info:
        runner.run(timeout=50)
    assert any("'trainer'" in n for n in info.value.__notes__)
    assert runner.group.alive == []


def test_sizes_that_would_deadlock_are_rejected():
    with pytest.raises(ConfigError, match="divide the sync window"):
        AsyncRunner(AsyncConfig(require_batches=1), sample_step=None, train_step=None, get_params=toy.get_params,
                    state=toy.init_state(0), num_updates=1, samples_per_step=2 * B, mini_batch=B)


@pytest.mark.timeout(180)
def test_sigterm_saves_a_checkpoint_and_the_run_resumes(tmp_path):
    cfg = AsyncConfig(enabled=True, staleness_threshold=0.0, require_batches=1, queue_timeout_s=60.0)
    ckpt = checkpoint.Checkpointer(str(tmp_path / "ckpt"), async_save=False)

    def kill_at_2(runner, record):
        if record["update"] == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    def save(runner):
        ckpt.save(runner.counters.updates, runner.state, extra=runner.counters.to_json(), force=True)

    runner = AsyncRunner(cfg, sample_step=toy.ToySampler(0), train_step=toy.ToyTrainer(update_s=0.05),
                         get_params=toy.get_params, state=toy.init_state(0), num_updates=50,
                         samples_per_step=B, mini_batch=B, on_update=kill_at_2)
    assert runner.run(timeout=100, on_interrupt=save) == "interrupted"
    assert 2 <= runner.counters.updates < 50 and runner.group.alive == []
    saved_updates = runner.counters.updates
    saved_leaves = _leaves(runner.state)

    state, extra = ckpt.restore(checkpoint.abstract_state(toy.init_state(0)))
    counters = RunnerCounters(**extra)
    assert counters.updates == saved_updates and counters.version == saved_updates
    for a, b in zip(saved_leaves, _leaves(state)):
        np.testing.assert_array_equal(a, b)
    resumed = AsyncRunner(cfg, sample_step=toy.ToySampler(1), train_step=toy.ToyTrainer(), get_params=toy.get_params,
                          state=state, num_updates=saved_updates + 3, samples_per_step=B, mini_batch=B,
                          counters=counters)
    assert resumed.run(timeout=100) == "done"
    assert resumed.counters.updates == saved_updates + 3
    assert [h["version"] for h in resumed.history] == [saved_updates + i for i in range(3)]
    assert all(s == 0 for h in resumed.history for s in h["staleness"])
    ckpt.close()


@pytest.mark.timeout(60)
def test_train_step_must_take_every_micro_batch_and_the_last_version_reaches_rollout():
    cfg = AsyncConfig(enabled=True, require_batches=2, queue_timeout_s=30.0)

    def greedy_skip(state, batches):
        next(batches)  # takes 1 of 2
        return state, {}

    runner = AsyncRunner(cfg, sample_step=toy.ToySampler(0), train_step=greedy_skip, get_params=toy.get_params,
                         state=toy.init_state(0), num_updates=2, samples_per_step=B, mini_batch=B)
    with pytest.raises(RuntimeError, match="exactly require_batches=2"):
        runner.run(timeout=50)
    streaming = AsyncRunner(dataclasses.replace(cfg, streaming=True), sample_step=toy.ToySampler(0),
                            train_step=greedy_skip, get_params=toy.get_params, state=toy.init_state(0),
                            num_updates=2, samples_per_step=B, mini_batch=B)
    with pytest.raises(RuntimeError, match="it took 1"):
        streaming.run(timeout=50)
    assert streaming.buffer.counters()["consumed"] == B  # nothing pulled beyond what train_step took

    ok = AsyncRunner(cfg, sample_step=toy.ToySampler(0), train_step=toy.ToyTrainer(), get_params=toy.get_params,
                     state=toy.init_state(0), num_updates=3, samples_per_step=B, mini_batch=B)
    assert ok.run(timeout=50) == "done"
    version, params = ok.weights.latest()
    assert version == ok.counters.version == 3
    np.testing.assert_array_equal(np.asarray(params["w"]), np.asarray(ok.state.params["w"]))


@pytest.mark.timeout(60)
def test_sync_loop_reports_alternating_idle_ratios():
    from vlajax.pipeline.metrics import Timeline, summarize

    tl, marks = Timeline(), []
    cfg = AsyncConfig(require_batches=1)
    run_sync(cfg, sample_step=toy.ToySampler(0, call_s=0.1), train_step=toy.ToyTrainer(update_s=0.1),
             get_params=toy.get_params, state=toy.init_state(0), num_updates=5, samples_per_step=B, mini_batch=B,
             timeline=tl, on_update=lambda rec: marks.append(tl.now()))
    m = summarize(tl, marks[0], marks[-1])  # after the first update (compilation excluded)
    # Rollout (0.1 s + compute) and training (0.1 s + compute) alternate: each idles while the other works.
    assert 0.25 < m["trainer/idle_ratio"] < 0.75 and 0.25 < m["rollouter/idle_ratio"] < 0.75
    assert m["trainer/idle_ratio"] + m["rollouter/idle_ratio"] > 0.9
    assert m["staleness/max"] == 0 and m["samples/consumed_per_s"] > 0
