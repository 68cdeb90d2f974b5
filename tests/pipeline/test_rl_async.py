"""The real RL workload through the pipeline: the async loop reduces to the synchronous loop.

With the real pieces (tabletop MJX envs, MLP actor, PPO learner):
staleness 0, trigger 1, one slot, no streaming -> the same parameters as `vlajax.rl.loop.train`
after several updates, bit for bit; an interrupted async run resumes to the same parameters.
"""

import dataclasses
import os

import jax
import numpy as np
import pytest

import vlajax.config.presets  # noqa: F401  (registers the presets)
from vlajax.config.schema import AsyncConfig, get_config
from vlajax.rl import loop
from vlajax.rl.async_loop import train_async


def _cfg(tmp_path, name, iterations=3, **pipeline):
    cfg = get_config("rl-debug")
    return dataclasses.replace(
        cfg, output_dir=str(tmp_path / name),
        rl=dataclasses.replace(cfg.rl, num_iterations=iterations,  # streaming: no global standardization
                               **({"normalize_advantages": "none"} if pipeline.get("streaming") else {})),
        logging=dataclasses.replace(cfg.logging, tensorboard=False, progress="none"),
        checkpoint=dataclasses.replace(cfg.checkpoint, async_save=False),
        pipeline=AsyncConfig(enabled=True, queue_timeout_s=900.0, watchdog_s=1800.0, **pipeline))


def _assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
def test_async_loop_equals_sync_loop_and_resumes(tmp_path):
    cfg = _cfg(tmp_path, "async")
    ref = loop.train(dataclasses.replace(cfg, output_dir=str(tmp_path / "sync")))
    out = train_async(cfg, timeout=1800)
    assert out["status"] == "done" and out["updates"] == 3 and out["version"] == 3
    assert [h["version"] for h in out["history"]] == [0, 1, 2]
    assert all(s == [0] for s in (h["staleness"] for h in out["history"]))
    _assert_same(ref["state"].params, out["state"].params)
    # Interrupted after 2 updates, resumed from its checkpoint: the same parameters again.
    cut = _cfg(tmp_path, "resumed")
    first = train_async(cut, stop_at=2, timeout=1800)
    assert first["updates"] == 2
    second = train_async(cut, timeout=1800)
    assert second["updates"] == 3
    _assert_same(ref["state"].params, second["state"].params)


@pytest.mark.slow
def test_async_loop_with_slots_streaming_and_partial_rollout(tmp_path):
    """The env-slot path end to end: staleness bounded by 1, one update per global batch, TB/JSON metrics."""
    cfg = _cfg(tmp_path, "slots", num_slots=2, require_batches=2, staleness_threshold=1.0, streaming=True,
               partial_rollout=True)
    cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, update_epochs=1, num_minibatches=1,
                                                          micro_batches=2, normalize_advantages="none"))
    out = train_async(cfg, timeout=1800)
    assert out["status"] == "done" and out["updates"] == 3
    staleness = [s for h in out["history"] for s in h["staleness"]]
    assert max(staleness) <= 1 and out["history"][0]["staleness"] == [0, 0]
    assert all(len(h["staleness"]) == 2 for h in out["history"])
    assert out["summary"]["staleness/max"] <= 1
    lines = (tmp_path / "slots" / "async_metrics.jsonl").read_text().splitlines()
    assert len([ln for ln in lines if '"train"' in ln]) == 3


@pytest.mark.slow
def test_async_loop_equals_sync_loop_with_critic_warmup_and_value_lr(tmp_path):
    """The critic warm-up (advantages zeroed for the first updates) and the critic's own learning
    rate act identically in both loops."""
    cfg = _cfg(tmp_path, "async")
    cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, critic_warmup_iterations=2, value_learning_rate=3e-3))
    ref = loop.train(dataclasses.replace(cfg, output_dir=str(tmp_path / "sync")))
    out = train_async(cfg, timeout=1800)
    assert out["status"] == "done" and out["updates"] == 3
    _assert_same(ref["state"].params, out["state"].params)


@pytest.mark.slow
def test_async_loop_evaluates_the_starting_policy_first(tmp_path):
    cfg = _cfg(tmp_path, "evals", iterations=2)
    cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, eval_every=2))
    out = train_async(cfg, timeout=1800)
    assert [e["update"] for e in out["evals"]] == [0, 2]
    assert all(0.0 <= e["mean_success"] <= 1.0 and e["per_task"] for e in out["evals"])
    assert out["evals"][0]["env_steps"] == 0 and out["evals"][1]["env_steps"] > 0


@pytest.mark.slow
def test_async_grpo_equals_sync_and_runs_ahead_with_checkpoints(tmp_path):
    """GRPO (episodic collect calls, no env state to carry): staleness 0 reduces to the sync loop;
    with staleness 1 rollout runs ahead and every checkpoint save still finds what it needs."""
    def grpo(c):
        return dataclasses.replace(c, rl=dataclasses.replace(c.rl, algo="grpo", group_size=4))

    cfg = grpo(_cfg(tmp_path, "async"))
    ref = loop.train(dataclasses.replace(cfg, output_dir=str(tmp_path / "sync")))
    out = train_async(cfg, timeout=1800)
    assert out["status"] == "done" and out["updates"] == 3
    _assert_same(ref["state"].params, out["state"].params)
    ahead = grpo(_cfg(tmp_path, "ahead", iterations=4, staleness_threshold=1.0))
    out = train_async(ahead, timeout=1800)
    assert out["status"] == "done" and out["updates"] == 4
    assert max(max(h["staleness"]) for h in out["history"]) <= 1
    assert sorted(int(d) for d in os.listdir(tmp_path / "ahead" / "checkpoints") if d.isdigit())[-1] == 4


def test_update_logs_the_rollout_metrics_of_the_calls_it_trained_on():
    """With staleness > 0 rollout runs ahead: update u must report its own calls' metrics (the mean
    over its `require_batches` calls), not the newest call's; reported calls are dropped."""
    import threading

    from vlajax.rl.async_loop import _Collect

    c = _Collect.__new__(_Collect)
    c.lock, c.by_call = threading.Lock(), {k: {"success": float(k), "return": 10.0 * k} for k in range(5)}
    assert c.consumed_metrics(range(0, 1)) == {"success": 0.0, "return": 0.0}
    assert c.consumed_metrics(range(1, 3)) == {"success": 1.5, "return": 15.0}
    assert sorted(c.by_call) == [3, 4] and c.consumed_metrics(range(0, 1)) == {}


def test_collect_keeps_each_unconsumed_calls_start_state_for_resume(tmp_path, caplog):
    """The num_slots == 1 rollouter runs ahead of the trainer; a checkpoint at any update must hold the env state
    the first unconsumed call started from (a resume replays it). `_Collect` keeps those states by reference (its
    collect does not donate them): after three calls, `snapshot(k)` is the state call k started from, value for
    value, and still readable (a donated buffer would raise), also while later calls have run.

    Its program is the synchronous loop's collect (neither donates the env state, both make the key under the
    mesh), so the compile cache serves whichever compiles second (`bench async` and gpu-check's rl rows run sync,
    then train_async, in one process): one persistent-cache key for both (JAX logs it on a hit and on a miss; a
    donated env state or a key made off the mesh gives two). The params are a one-iteration loop's: on its
    shardings."""
    import functools
    import logging

    from vlajax.rl import setup as rl_setup
    from vlajax.rl.async_loop import _Collect
    from vlajax.training import sharding

    cfg = _cfg(tmp_path, "collect", iterations=1, staleness_threshold=3.0)
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, num_envs=4),
                              rl=dataclasses.replace(cfg.rl, rollout_length=2, eval_every=-1))
    caplog.set_level(logging.DEBUG, logger="jax._src.compiler")
    keys = lambda: {r.args[1] for r in caplog.records  # noqa: E731  (the hit and the miss lines: name, key)
                    if "with key" in str(r.msg) and r.args and r.args[0] == "jit_collect"}
    params = loop.train(cfg)["state"].params
    loop_keys = keys()
    caplog.clear()
    mesh = sharding.make_mesh(cfg.mesh)
    setup = rl_setup.build(cfg, mesh)
    with sharding.use_mesh(mesh, cfg.mesh.logical_rules):
        start = rl_setup.place_env_state(jax.jit(functools.partial(rl_setup.initial_env_state, cfg, setup.env))(),
                                         mesh)
    expect = [jax.device_get(rl_setup.env_leaves(start))]  # the state each call starts from, computed apart
    c = _Collect(cfg, setup, mesh, start, 0)
    for call in range(3):
        c(0, params, call)
        expect.append(jax.device_get(rl_setup.env_leaves(c.env_state)))
    assert sorted(c.before) == [0, 1, 2]
    for k in range(4):  # one more update consumed each time: the older start states are dropped
        calls, state = c.snapshot(k)
        assert calls == k
        _assert_same(expect[k], jax.device_get(rl_setup.env_leaves(state)))
        assert sorted(c.before) == list(range(k, 3))
    # the states differ from call to call (the check above is not vacuous)
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(expect[0]), jax.tree.leaves(expect[1])))
    if jax.config.jax_compilation_cache_dir:  # (VLAJAX_COMPILATION_CACHE='' turns the cache, and its keys, off)
        assert len(loop_keys) == 1 and keys() == loop_keys, (loop_keys, keys())
