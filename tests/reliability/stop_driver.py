"""`python -m tests.reliability.stop_driver SLOW[@N] SECONDS CMD [train args...]`: the real `vlajax.train`
command with one phase made slow, and a marker line (`PHASE <name> [n]`) printed as each phase starts,
so a test can send a signal into the phase it means (tests/reliability/test_stop_anywhere.py).

What is replaced, and why: `rl` runs on the toy point env of `tests/rl/rollout_toy.py` (the MJX
tabletop takes ~100 s to compile cold here; the loops, checkpointer, logger, lanes and CLI are the
real ones), and the `sft` evaluation is a sleep (the closed-loop eval renders MJX scenes: minutes).
The slow phase sleeps `SECONDS` (from its N-th start on with `SLOW@N`):

- `setup`: inside the policy / data set-up, before anything of the run compiles;
- `compile`: while the first jitted step is traced (its compile follows);
- `update` / `step`: inside every optimizer update from the 2nd on (a host callback inside the
  jitted rl update: an XLA call Python cannot interrupt; sft: before the step's call);
- `eval`: inside every evaluation;
- `rollout`: inside every rl rollout call from the 3rd on (a host callback inside the jitted collect);
- `write` (`eval`): before the report is written (eval's `eval` phase: the episodes; `eval --robustness`:
  every level's episodes; `eval --policy-server`: requests to the real server for the phase's seconds).

`STOP_DRIVER_DEVICES=8`: 8 virtual CPU devices, like the test process (tests/conftest.py), which can
then resume a run in-process on the same mesh (the sync cells do; the async ones stay on one device --
concurrent lanes on 8 virtual CPU devices can deadlock in XLA's CPU collectives -- and resume in a
subprocess).
"""

from __future__ import annotations

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.training.logging import print_line

_slow = {"phase": "none", "seconds": 0.0, "from": 1}
_counts: dict[str, int] = {}


def mark(name: str, slow_from: int = 1) -> int:
    """Print `PHASE name n` (n counts this phase's starts) and sleep when it is the slow phase."""
    n = _counts[name] = _counts.get(name, 0) + 1
    print_line(f"PHASE {name} {n}")
    if name == _slow["phase"] and n >= max(slow_from, _slow["from"]):
        time.sleep(_slow["seconds"])
    return n


def patch(command: str, set_attr=setattr) -> None:
    """Install the toy / marker replacements for `command` ('rl' or 'sft'); `set_attr`: e.g. pytest's
    `monkeypatch.setattr` to undo them after an in-process run. Counters start again."""
    _counts.clear()
    {"rl": _patch_rl, "sft": _patch_sft, "eval": _patch_eval}[command](set_attr)


def _host_mark(name: str, slow_from: int):
    def cb():
        mark(name, slow_from)
        return np.int32(0)

    return jax.experimental.io_callback(cb, jax.ShapeDtypeStruct((), jnp.int32))


def _patch_rl(set_attr) -> None:
    from tests.rl import rollout_toy as toy
    from vlajax.rl import actors, learner, loop, mlp_policy
    from vlajax.rl import rollout as ro
    from vlajax.rl import setup as rl_setup

    def build(cfg, mesh=None):
        mark("setup")
        h, ep = cfg.model.action_horizon, cfg.env.episode_length
        env = toy.make_env(cfg.env.num_envs, h, ep)
        model = mlp_policy.MLPActorCritic(action_horizon=h, action_dim=4, hidden=(16, 16), value_hidden=(16, 16))
        actor = actors.mlp_actor(model, use_value=cfg.rl.algo == "ppo")
        sample = actor.sample

        def traced_sample(*a, **k):  # runs when the rollout is traced: the first compile
            if "compile" not in _counts:
                mark("compile")
            return sample(*a, **k)

        actor = _replace(actor, sample=traced_sample)
        eval_env = toy.make_env(8, h, ep)
        run_eval = jax.jit(lambda p, k: ro.evaluate(actor, eval_env, p, k, jnp.repeat(jnp.arange(2), 4), ep // h))

        def evaluate(params, iteration):
            mark("eval")
            s = np.asarray(run_eval(params, jax.random.key(7))["success"])
            return {"mean_success": float(s.mean()), "per_task": {"t0": float(s[:4].mean()), "t1": float(s[4:].mean())}}

        return rl_setup.Setup(actor, env, lambda k: model.init(k, jnp.zeros((1, toy.OBS_DIM)))["params"], evaluate,
                              h, ro.decisions_per_episode(ep, h))

    update, collect = learner.update, rl_setup.collect

    def slow_update(config, logp_value, rng, state, batch):
        z = _host_mark("update", 2).astype(jnp.float32)
        return update(config, logp_value, rng, state, batch | {"advantages": batch["advantages"] + 0.0 * z})

    def slow_collect(cfg, setup, params, env_state, rng, version):
        z = _host_mark("rollout", 3)
        return collect(cfg, setup, params, env_state, rng, version + 0 * z)

    set_attr(learner, "update", slow_update)
    set_attr(rl_setup, "collect", slow_collect)
    set_attr(loop, "collect", slow_collect)
    set_attr(rl_setup, "build", build)
    set_attr(loop, "build", build)


def _replace(actor, **k):
    import dataclasses

    return dataclasses.replace(actor, **k)


def _mark_first(set_attr, module, name: str, phase: str) -> None:
    """Replace `module.name` by the real function preceded by `mark(phase)` (the phase starts, and is
    slowed when it is the slow one, before the real work runs)."""
    real = getattr(module, name)

    def marked(*a, **k):
        mark(phase)
        return real(*a, **k)

    set_attr(module, name, marked)


def _patch_sft(set_attr) -> None:
    from vlajax.data import build as data_build
    from vlajax.sft import loop as sft

    _mark_first(set_attr, data_build, "make_loader", "setup")
    make_step = sft.make_train_step

    def slow_make_step(*a, **k):
        step_fn = make_step(*a, **k)

        def step(state, batch):
            if "compile" not in _counts:  # the first call compiles
                mark("compile")
            mark("step", 2)
            return step_fn(state, batch)

        return step

    set_attr(sft, "make_train_step", slow_make_step)

    def evaluate(cfg, bridge, model, params, step, logger):
        mark("eval")
        return {"step": step, "mean_success": 0.0, "per_task": {}}

    set_attr(sft, "_evaluate", evaluate)


def _patch_eval(set_attr) -> None:
    """`eval` of a checkpoint: the policy loads for real; the episodes are a marker and a small stand-in
    result (the MJX tabletop's closed loop compiles for minutes cold); the report is written for real."""
    from vlajax.evaluation import closed_loop as evaluation

    def episodes(cfg, bridge, model, params, episodes_per_task=None):
        if hasattr(bridge, "policy"):  # eval --policy-server: the real server answers requests all phase long
            _remote_requests(bridge)
        else:
            mark("eval")
        result = {"suite": cfg.env.suite, "per_task": {"t0": 1.0, "t1": 0.0}, "mean_success": 0.5, "episodes": 2,
                  "episodes_per_task": 1, "failures": {"t0": 0, "t1": 1}, "instructions": {"t0": "a", "t1": "b"},
                  "gif_episodes": 1}
        return result, np.zeros((3, 2, 8, 8, 3), np.uint8)

    set_attr(evaluation, "run_episodes", episodes)
    _mark_first(set_attr, evaluation, "write_outputs", "write")
    _patch_robustness(set_attr)


def _remote_requests(bridge) -> None:
    """`eval --policy-server`'s episodes: batches of 4 requests through the bridge's host call (what the
    jitted loop calls at each chunk), one before the marker, then more for the slow phase's seconds."""
    meta = bridge.policy.metadata["observation"]
    ids = np.zeros((4,), np.int32)
    args = (ids, ids, np.zeros((4, *meta[bridge.state_key]["shape"]), np.float32),
            *(np.zeros((4, *meta[k]["shape"]), np.uint8) for _, k in bridge.image_keys))
    bridge._host_act(*args)
    n = _counts["eval"] = _counts.get("eval", 0) + 1
    print_line(f"PHASE eval {n}")
    deadline = time.monotonic() + (_slow["seconds"] if _slow["phase"] == "eval" else 0.0)
    while time.monotonic() < deadline:
        bridge._host_act(*args)


def _patch_robustness(set_attr) -> None:
    """`eval --robustness`: the policy loads for real; the levels' episodes are a marker and a stand-in
    table of two tasks and one camera level; the files are written for real (`write` phase)."""
    from vlajax.evaluation import robustness

    def levels(cfg, bridge, model, params, spec=None, episodes_per_task=None, gifs=True):
        mark("eval")
        success = {"none": {0: {"t0": 1.0, "t1": 0.0}}, "camera": {1: {"t0": 0.0, "t1": 0.0}}}
        result = {"suite": cfg.env.suite, "spec": cfg.env.robustness, "tasks": ["t0", "t1"], "baseline": 0.5,
                  "success": success, "mean": {"none": {0: 0.5}, "camera": {1: 0.0}},
                  "summary": {"camera": {"max_level": 1, "success_at_max": 0.0, "drop_at_max": 0.5, "mean_drop": 0.5}},
                  "episodes_per_task": 1, "episodes": 4}
        return result, {"camera": (1, "t0", np.zeros((3, 8, 8, 3), np.uint8))}

    set_attr(robustness, "run_levels", levels)
    _mark_first(set_attr, robustness, "write_outputs", "write")


if __name__ == "__main__":
    if (devices := int(os.environ.get("STOP_DRIVER_DEVICES", "1"))) > 1:  # as the test process: it resumes runs
        jax.config.update("jax_num_cpu_devices", devices)
    phase, _, first = sys.argv[1].partition("@")  # e.g. "eval@2": from the phase's 2nd start on
    _slow.update(phase=phase, seconds=float(sys.argv[2]), **({"from": int(first)} if first else {}))
    patch(sys.argv[3])
    from vlajax import train

    sys.exit(train.main(sys.argv[3:]))
