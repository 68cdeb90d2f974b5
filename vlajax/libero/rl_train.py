"""Asynchronous RL on LIBERO workers: `python -m vlajax.train rl --suite libero_spatial --preset rl-pi05-libero ...`.

    python -m vlajax.train rl --suite libero_spatial --preset rl-pi05-libero-dummy \
        --rl.init-from IMPORTED_OR_SFT_DIR --output-dir runs/libero-rl [--libero.workers 2] [--libero.max-steps 20] \
        [--pipeline.staleness-threshold 1] [--pipeline.partial-rollout] [--rl.num-iterations 3] ...

The LIBERO fields (`--libero.tasks`, `--libero.workers`, `--libero.train-inits`, ...: `TrainConfig.libero`) pick
the episodes and the worker pool; `vlajax.train` routes `rl` here when `env.suite` is a LIBERO suite, after the
same parse and preflight as every suite (`vlajax.libero.checks`). The policy is `rl.init_from` (an SFT run on
LIBERO demos, an imported openpi policy such as pi05_libero, or an RL run on LIBERO's keys); its `Bridge`
reads openpi's LIBERO keys. The rollout source is `vlajax.libero.rl_lane.LiberoRollout` (one GRPO
group of `rl.group_size` episodes per sample call, `rl.chunk_steps` = replan steps; groups start from the
demo initial states 25..49); the pipeline is
`vlajax.pipeline.AsyncRunner` (staleness-paced buffer, trainer lane, ParamServer) with the RL core's
`Trainer` (`vlajax.rl.async_workload`: GRPO advantages per group, PPO-clip / decoupled loss, streaming).
`pipeline.staleness_threshold=0` is the synchronous schedule (rollout waits for each update). The reward is
LIBERO's sparse success (1 on the decision whose chunk reached the goal, else 0).

Evaluation (`rl.eval_every` N > 0: the starting policy, then at the rollout's first call after every N updates; 0
or -1: none -- evaluate the final checkpoint with `eval --suite libero_* --checkpoint`): each task of
`libero.tasks` from the held-out initial states 0..`libero.episodes_per_task`-1 on the same
workers, LIBERO's own success check, the policy of one version throughout (the RL sampler). Its rows go to the
metrics file as `{"eval": {...}}` with per-task success, Wilson 95% intervals and each (task, init)'s outcome.

Checkpoints (Orbax, `checkpoint.every_steps` updates and at the end; `checkpoint.resume`): the train state
and the runner counters; `config.json` + `policy.json` make the checkpoint directory a policy that
`eval --suite libero_* --checkpoint` and `vlajax.serve` load. A resumed run continues the update count and
the group sequence after the groups its updates consumed. Metrics: `<output_dir>/libero_rl.jsonl`
(per update: loss metrics, staleness, versions, success of the consumed groups, rollout seconds; and the
evaluations).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.libero import pool as pool_mod
from vlajax.libero import protocol as P
from vlajax.libero.rl_lane import LiberoRollout, obs_keys
from vlajax.pipeline.runner import AsyncRunner, RunnerCounters
from vlajax.policies import run_files
from vlajax.preflight import preflight
from vlajax.rl import actors, learner
from vlajax.rl import setup as rl_setup
from vlajax.rl.async_workload import Trainer, check_streaming, prepare_segment
from vlajax.shared import compile_cache
from vlajax.training import sharding
from vlajax.training.preemption import UpdateBoundaries, nothing_new, stop_request
from vlajax.training.train_state import TrainState

__all__ = ["build_setup", "command", "train"]

log = logging.getLogger(__name__)
def build_setup(cfg: TrainConfig, mesh=None) -> rl_setup.Setup:
    """The actor of `rl.init_from` (no env: the envs are the LIBERO workers)."""
    from vlajax.models import build_model
    from vlajax.models.observation import fake_observation

    if not cfg.rl.init_from:
        raise ConfigError("RL on LIBERO needs --rl.init-from: a policy directory that reads openpi's LIBERO keys")
    model_cfg, bridge, loaded = rl_setup.load_sft(cfg, mesh)
    obs_keys(bridge)  # its cameras are ones the workers send (ConfigError)
    if bridge.openpi is None and model_cfg.state_dim != P.STATE_DIM:
        raise ConfigError(f"rl.init_from={cfg.rl.init_from}: its policy reads a {model_cfg.state_dim}-dim state; "
                          f"LIBERO's workers send {P.STATE_DIM} (eef pos, axis-angle, gripper): train it on LIBERO "
                          "demos (`demos --suite libero_spatial`, then `sft --preset sft-libero-small`)")
    if model_cfg.action_head == "flow" and model_cfg.flow_sampler == "ode":
        raise ConfigError("RL needs model.flow_sampler='flow_sde' or 'flow_noise' (log-probs)")
    model = build_model(model_cfg)
    k = cfg.rl.chunk_steps or model_cfg.action_horizon
    actor = actors.vla_actor(model, bridge, use_value=False, temperature=cfg.rl.temperature, execute=k,
                             per_factor=cfg.rl.ratio_level == "factor" or cfg.rl.kl_coef > 0)

    def init_params(rng):
        params = model.init(rng, fake_observation(rng, 1, model_cfg, cameras=bridge.cameras))["params"]
        return rl_setup.merge_params(params, loaded)

    def no_env_eval(params, iteration):  # (LIBERO's evaluations run on its workers: LiberoRollout.evaluate)
        raise ConfigError("RL on LIBERO evaluates on its workers (rl.eval_every), not in an env of this process")

    return rl_setup.Setup(actor, None, init_params, no_env_eval, k, 0, bridge)


def _check(cfg: TrainConfig) -> None:
    """ConfigError for what this run cannot do (before anything loads): every `rl`'s refusals on a LIBERO suite."""
    preflight(cfg, "rl")  # (vlajax.train ran it too; `train` is also called directly)
    if cfg.pipeline.streaming:
        check_streaming(cfg, cfg.pipeline.require_batches)


def _tasks(cfg: TrainConfig, python: str) -> tuple[int, ...]:
    """`libero.tasks`, or every task of the suite when empty; ConfigError for an index the suite lacks."""
    described = pool_mod.describe([cfg.env.suite], python)[cfg.env.suite]
    if described is None:
        raise ConfigError(f"LIBERO has no suite {cfg.env.suite}")
    n = described["n_tasks"]
    bad = [t for t in cfg.libero.tasks if t >= n]
    if bad:
        raise ConfigError(f"libero.tasks {bad}: {cfg.env.suite} has tasks 0..{n - 1}")
    return cfg.libero.tasks or tuple(range(n))


def train(cfg: TrainConfig, *, stop_at: int | None = None, python: str | None = None, on_rollout: Any = None,
          reward_fn: Any = None) -> dict[str, Any]:
    """Run to `rl.num_iterations` updates (resuming from the newest checkpoint). -> summary.

    `stop_at`: stop after that many updates (with a checkpoint), as if interrupted. `python`: the LIBERO
    venv's python (default `make libero`'s). `on_rollout(rollout)`: called once the
    `LiberoRollout` is up (tests: fault injection).
    `reward_fn(final, decisions)`: an episode's return instead of LIBERO's success (`LiberoRollout`; tests).

    SIGTERM / Ctrl-C (`vlajax.training.preemption`, docs/reliability.md): set-up (the pool's start, the policy's load,
    the compiles) and an update whose predecessor is saved are abandoned at once; otherwise the run stops at
    the next update boundary with that update's checkpoint (forced). Either way the LIBERO workers are killed
    (`pool.kill_all`), one line goes to stderr and the process exits 0; a second signal exits 130 at once."""
    _check(cfg)
    python = python or pool_mod.libero_python()  # LiberoEnvMissing before anything loads
    p = cfg.pipeline
    with stop_request("rl") as stop:
        newest: dict[str, int | None] = {"step": None}  # the newest checkpoint written or found (the stop lines)
        kept = lambda: nothing_new(newest["step"], "update")  # noqa: E731
        box: dict[str, Any] = {}  # the checkpointer once it exists

        def cleanup() -> None:  # an abandoned region: the checkpoint write in flight, then the workers
            try:
                if "ckpt" in box:
                    box["ckpt"].wait()
            finally:
                pool_mod.kill_all()

        with stop.abandonable("set-up (before the first update)", kept, cleanup):  # nothing new yet
            tasks = _tasks(cfg, python)
            compile_cache.enable(cfg.compilation_cache_dir)
            mesh = sharding.make_mesh(cfg.mesh)
            rules = cfg.mesh.logical_rules
            setup = build_setup(cfg, mesh)
            tx = learner.make_optimizer(cfg.rl)
            state, _ = sharding.init_sharded(lambda rng: TrainState.create(setup.init_params(rng), tx,
                                                                           jax.random.fold_in(rng, 1)),
                                             mesh, rules, jax.random.key(cfg.seed))
            # rl.kl_coef's frozen reference: the starting policy (a copy: the updates donate the state's buffers)
            ref_params = jax.tree.map(jnp.copy, state.params) if cfg.rl.kl_coef > 0 else None
            ckpt_dir, ckpt = run_files.run_checkpointer(cfg)
            box["ckpt"] = ckpt
            run_files.write_policy(ckpt_dir, cfg.replace(model=setup.bridge.model), setup.bridge, "async-rl")
            counters = RunnerCounters()
            if cfg.checkpoint.resume and ckpt.latest_step() is not None:
                from vlajax.training import checkpoint

                restored, extra = ckpt.restore(checkpoint.abstract_state({"train": state}))
                state = restored["train"]
                counters = RunnerCounters(**extra["counters"])
                newest["step"] = counters.updates
                log.info("rl libero: resumed at update %d (version %d, group %d)", counters.updates,
                         counters.version, counters.sample_calls)
            start_updates = counters.updates
            total = cfg.rl.num_iterations
            end = total if stop_at is None else min(stop_at, total)
            trainer = Trainer(cfg, setup.actor, None, p.streaming, p.use_rollout_log_probs,
                              prepare=jax.jit(functools.partial(prepare_segment, cfg)), ref_params=ref_params)
            trainer.updates = counters.updates
            os.makedirs(cfg.output_dir, exist_ok=True)
            json_path = os.path.join(cfg.output_dir, "libero_rl.jsonl")
            rollout = LiberoRollout(cfg, setup, tasks, counters.sample_calls, python=python,
                                    log_dir=os.path.join(cfg.output_dir, "workers"), reward_fn=reward_fn)
            every = cfg.rl.eval_every  # the starting policy of a fresh run, then every N versions
            rollout.next_eval = (None if every <= 0 else
                                 0 if counters.version == 0 else (counters.version // every + 1) * every)
        lock = threading.Lock()  # the trainer lane's rows and the rollout lane's evaluations share the file

        def write_row(row: dict) -> None:
            with lock, open(json_path, "a") as f:
                f.write(json.dumps(row) + "\n")

        def on_eval(ev: dict) -> None:
            write_row({"eval": ev, "time": time.time()})
            log.info("rl libero: evaluation of version %d: success %.2f (%d of %d episodes, held-out inits 0..%d)",
                     ev["version"], ev["success"], ev["successes"], ev["episodes"], cfg.libero.episodes_per_task - 1)

        rollout.on_eval = on_eval

        update_s: list[float] = []  # seconds of each train_step (micro-batch waits excluded only when not streaming)

        def train_step(s, micro_batches):
            with sharding.use_mesh(mesh, rules):
                t = time.perf_counter()
                out = trainer(s, micro_batches if p.streaming else list(micro_batches))
                update_s.append(time.perf_counter() - t)
                return out

        history: list[dict] = []
        ends: list[float] = []  # time.monotonic() at the end of each update of this run
        saved: list[int] = []

        def save(runner: AsyncRunner, force: bool) -> None:
            c = runner.resume_counters()  # groups consumed (not started): a resume re-runs the unconsumed ones
            extra = {"counters": c.to_json(), "seed": cfg.seed, "config": cfg.name, "suite": cfg.env.suite}
            if ckpt.save(c.updates, {"train": runner.state}, force=force, extra=extra):
                saved.append(c.updates)
                newest["step"] = c.updates

        boundaries = UpdateBoundaries(stop, ckpt, start_updates, newest, save, cleanup, "the LIBERO run",
                                      "killed the LIBERO workers (their groups in flight run again on resume)")

        def on_update(runner: AsyncRunner, record: dict) -> None:
            u = record["update"]
            c0 = counters.sample_calls  # update u trained on call c0 + (u - 1 - start_updates): require_batches groups
            call = c0 + u - 1 - start_updates
            m = dict(record["metrics"]) | rollout.consumed_metrics(range(call, call + 1))
            row = {"update": u, "version": record["version"], "staleness": record["staleness"],
                   "staleness_updates": record["staleness_updates"], "span": record["span"],
                   "env_steps": record["env_steps"], "time": time.time(), "update_s": update_s[-1], "train": m}
            ends.append(time.monotonic())
            history.append(row)
            write_row(row)
            log.info("rl libero: update %d/%d staleness %s success %.2f loss %.4g", u, total, record["staleness"],
                     m.get("success", float("nan")), m.get("loss", float("nan")))
            save(runner, force=u >= end)
            if u >= end:
                runner.lifetime.stop()

        t0 = time.perf_counter()
        try:
            with stop.abandonable("set-up (before the first update)", kept, cleanup):
                if on_rollout is not None:
                    on_rollout(rollout)
                runner = AsyncRunner(p, sample_step=rollout.sample_step, train_step=train_step,
                                     get_params=lambda s: s.params, state=state, num_updates=total,
                                     samples_per_step=rollout.G * rollout.groups, mini_batch=rollout.G,
                                     counters=counters, on_update=on_update, update_scope=boundaries.scope)
                rollout.bind(runner)
            status = ("done" if counters.updates >= end else
                      runner.run(on_interrupt=boundaries.interrupt, stop=stop.local))
            ckpt.wait()
            u = runner.counters.updates
            if status == "interrupted":
                stop.report(f"the LIBERO run at update {u}", f"stopped at the boundary after update {u}")
            elif stop.local():  # the signal came during the last update (unsaved predecessor): finished, saved
                stop.report(f"the LIBERO run at update {u}", f"finished the last update and saved checkpoint {u}")
        finally:
            rollout.close()
            ckpt.close()
    steady = runner.summary(ends[0], ends[-1]) if len(ends) > 1 else {}  # after the first update (compiles)
    return {"status": status, "updates": runner.counters.updates, "version": runner.counters.version,
            "seconds": round(time.perf_counter() - t0, 1), "history": history, "checkpoint_dir": ckpt_dir,
            "checkpoints": saved, "summary": runner.summary(), "summary_steady": steady,
            "restarts": rollout.pool.events, "server_batches": list(rollout.server.batches),
            "infer_times": list(rollout.infer_times), "update_times": list(ends),
            "server_errors": list(rollout.server.errors), "evals": list(rollout.evals), "state": runner.state}


def command(cfg: TrainConfig) -> int:
    """The `rl` command for a LIBERO suite (`vlajax.train` routes it here after its parse and preflight): the run,
    then one JSON line (its status, updates, the consumed groups' success per update, the evaluations)."""
    logging.getLogger("absl").setLevel(logging.WARNING)
    out = train(cfg)
    short = {k: v for k, v in out.items() if k not in ("history", "state", "summary", "summary_steady", "infer_times",
                                                        "update_times", "server_batches", "evals")}
    short["staleness_max"] = max((max(h["staleness"]) for h in out["history"]), default=0)
    short["success"] = [h["train"].get("success") for h in out["history"]]
    short["evals"] = [{k: e[k] for k in ("version", "success", "successes", "episodes", "wilson95")}
                      for e in out["evals"]]
    print(json.dumps(short, default=str), flush=True)
    return 0
