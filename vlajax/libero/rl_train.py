"""Asynchronous RL on LIBERO workers: `python -m vlajax.train rl --suite libero_spatial --preset rl-pi05-libero ...`.

    python -m vlajax.train rl --suite libero_spatial --preset rl-pi05-libero-dummy \
        --rl.init-from IMPORTED_OR_SFT_DIR --output-dir runs/libero-rl [--libero.workers 2] [--libero.max-steps 20] \
        [--pipeline.staleness-threshold 1] [--pipeline.partial-rollout] [--rl.num-iterations 3] ...

The LIBERO fields (`--libero.tasks`, `--libero.workers`, `--libero.train-inits`, ...: `TrainConfig.libero`) pick
the episodes and the worker pool; `vlajax.train` routes `rl` here when `env.suite` is a LIBERO suite, after the
same parse and preflight as every suite (`vlajax.libero.checks`). The policy is `rl.init_from` (an SFT run on
LIBERO demos, an imported openpi policy such as pi05_libero, or an RL run on LIBERO's keys); its `Bridge`
reads openpi's LIBERO keys. The run is the async runner `vlajax.rl.pipeline_run.train_pipeline` (the run
skeleton: start-up, train state, checkpoints and resume, stop regions; `vlajax.pipeline.AsyncRunner`'s
staleness-paced buffer, trainer lane and ParamServer; the RL core's `Trainer`: GRPO advantages per group,
PPO-clip / decoupled loss, streaming) with LIBERO's workers as its rollout `Source`
(`vlajax.libero.rl_lane.LiberoRollout`: one GRPO group of `rl.group_size` episodes per sample call and
micro-batch, `rl.chunk_steps` = replan steps; groups start from the demo initial states 25..49).
`pipeline.staleness_threshold=0` is the synchronous schedule (rollout waits for each update). The reward is
LIBERO's sparse success (1 on the decision whose chunk reached the goal, else 0).

Evaluation (`rl.eval_every`; each task of `libero.tasks` from the held-out initial states
0..`libero.episodes_per_task`-1 on the same workers, LIBERO's own success check, the policy of one version
throughout, answered by the greedy sampler `eval --suite libero_* --checkpoint` serves): N > 0 the starting
policy, then at the rollout's first call after every N updates, and the final version once the last update is
done; 0 the final version only; -1 none. Its rows go to the metrics file as `{"eval": {...}}` with the version,
the update that made it, per-task success, Wilson 95% intervals and each (task, init)'s outcome. The final
version's evaluation records each task's held-out initial state 0 as a GIF,
`<output_dir>/videos/<suite>_task<k>_init<i>_<success|failure>.gif` (`eval --suite libero_*`'s naming, written
atomically), and its row names them (`"videos"`; `vlajax.libero.rl_eval`); a resumed run's final version is
evaluated (and recorded) by the run that reaches it.

Checkpoints (Orbax, `checkpoint.every_steps` updates and at the end; `checkpoint.resume`): the train state
and the runner counters; `config.json` + `policy.json` make the checkpoint directory a policy that
`eval --suite libero_* --checkpoint` and `vlajax.serve` load. A resumed run continues the update count and
the group sequence after the groups its updates consumed. Metrics: `<output_dir>/libero_rl.jsonl`
(per update: loss metrics, staleness, versions, success of the consumed groups, rollout seconds; and the
evaluations), besides the pipeline's own (`async_metrics.jsonl`).

SIGTERM / Ctrl-C (`vlajax.training.preemption`, docs/reliability.md): set-up (the pool's start, the policy's
load, the compiles), an evaluation after its update's checkpoint and an update whose predecessor is saved are
abandoned at once; otherwise the run stops at the next update boundary with that update's checkpoint (forced).
Either way the LIBERO workers are killed (`pool.kill_all`), this run's scratch is removed (the workers' frames
files, the GIFs of an evaluation whose row was not written: never half a GIF), one line goes to stderr and the
process exits 0; a second signal exits 130 at once.
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

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.libero import pool as pool_mod
from vlajax.libero import protocol as P
from vlajax.libero.rl_lane import LiberoRollout, obs_keys
from vlajax.pipeline.runner import AsyncRunner, RunnerCounters
from vlajax.preflight import preflight
from vlajax.rl import actors
from vlajax.rl import setup as rl_setup
from vlajax.rl.async_workload import prepare_segment
from vlajax.rl.pipeline_run import Places, Source, train_pipeline
from vlajax.training.run import Run

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

    def init_params(rng):  # (the loaded params are merged over these: `Setup.start_params`)
        return model.init(rng, fake_observation(rng, 1, model_cfg, cameras=bridge.cameras))["params"]

    def no_env_eval(params, iteration):  # (LIBERO's evaluations run on its workers: LiberoRollout.evaluate)
        raise ConfigError("RL on LIBERO evaluates on its workers (rl.eval_every), not in an env of this process")

    return rl_setup.Setup(actor, None, init_params, no_env_eval, k, 0, bridge, loaded)


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


class _Rows:
    """`<output_dir>/libero_rl.jsonl`: a row per update (trainer lane) and per evaluation (rollout lane)."""

    def __init__(self, cfg: TrainConfig):
        self.cfg, self.path = cfg, os.path.join(cfg.output_dir, "libero_rl.jsonl")
        self.lock = threading.Lock()
        self.history: list[dict] = []  # this run's update rows

    def write(self, row: dict) -> None:
        with self.lock, open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")

    def update(self, u: int, rec: dict, m: dict) -> None:
        row = {"update": u, "version": rec["version"], "staleness": rec["staleness"],
               "staleness_updates": rec["staleness_updates"], "span": rec["span"], "env_steps": rec["env_steps"],
               "time": time.time(), "update_s": m["update_s"], "train": m}
        self.history.append(row)
        self.write(row)
        log.info("rl libero: update %d/%d staleness %s success %.2f loss %.4g", u, self.cfg.rl.num_iterations,
                 rec["staleness"], m.get("success", float("nan")), m.get("loss", float("nan")))

    def evaluation(self, ev: dict) -> None:
        self.write({"eval": ev, "time": time.time()})
        log.info("rl libero: evaluation of version %d: success %.2f (%d of %d episodes, held-out inits 0..%d)",
                 ev["version"], ev["success"], ev["successes"], ev["episodes"], self.cfg.libero.episodes_per_task - 1)


class _LiberoSource(Source):
    """LIBERO's workers as the rollout: a `LiberoRollout` from the resumed group count; one sample call = one
    update's `pipeline.require_batches` groups (micro-batches of G episodes). Evaluates in its rollout lane
    (`rl.eval_every`) and the final version after the run (`evaluate_final`)."""

    def __init__(self, run: Run, where: Places, setup: rl_setup.Setup, *, python: str, rows: _Rows,
                 reward_fn: Any, on_rollout: Any, started: list):
        self.cfg, self.setup, self.python, self.rows, self.started = run.cfg, setup, python, rows, started
        self.reward_fn, self.on_rollout = reward_fn, on_rollout
        self.tasks = _tasks(self.cfg, python)
        self.rollout: LiberoRollout | None = None
        self.prepare = jax.jit(functools.partial(prepare_segment, self.cfg))

    def start(self, counters: RunnerCounters, learn: rl_setup.Learner) -> None:
        cfg = self.cfg
        self.calls0, self.updates0 = counters.sample_calls, counters.updates
        r = self.rollout = LiberoRollout(cfg, self.setup, self.tasks, counters.sample_calls, python=self.python,
                                         log_dir=os.path.join(cfg.output_dir, "workers"), reward_fn=self.reward_fn)
        self.started.append(r)  # (a stop's cleanup sweeps its scratch: `_cleanup`)
        every = cfg.rl.eval_every  # the starting policy of a fresh run, then every N versions
        r.next_eval = None if every <= 0 else 0 if counters.version == 0 else (counters.version // every + 1) * every
        r.on_eval = self.rows.evaluation
        if self.on_rollout is not None:  # (tests: fault injection, a timed sample_step)
            self.on_rollout(r)
        self.sample_step, self.samples_per_step, self.mini_batch = r.sample_step, r.G * r.groups, r.G

    def consumed(self, update: int) -> dict[str, float]:
        call = self.calls0 + update - 1 - self.updates0  # one call per update
        return self.rollout.consumed_metrics(range(call, call + 1))

    def extra(self) -> dict:
        return {"suite": self.cfg.env.suite}

    def bind(self, runner: AsyncRunner) -> None:
        self.rollout.bind(runner)

    def evaluate_final(self, runner: AsyncRunner) -> dict | None:
        version, params = runner.weights.latest()
        done = self.rollout.evals and self.rollout.evals[-1]["version"] == version
        return None if done else self.rollout.evaluate(version, params, video=True)  # with its GIFs

    def close(self) -> None:
        if self.rollout is not None:
            self.rollout.close()


def _cleanup(started: list[LiberoRollout]) -> None:
    """An abandoned region's (a stop's) last act before the exit: the workers killed (`pool.kill_all`), then the
    scratch of this run's rollout (`EvalVideos.sweep`: its frames files and any GIF of an evaluation whose row
    was not written -- none half-written)."""
    try:
        pool_mod.kill_all()
    finally:
        for r in started:
            r.videos.sweep(exiting=True)


def train(cfg: TrainConfig, *, stop_at: int | None = None, python: str | None = None, on_rollout: Any = None,
          reward_fn: Any = None) -> dict[str, Any]:
    """Run to `rl.num_iterations` updates (resuming from the newest checkpoint). -> summary.

    `stop_at`: stop after that many updates (with a checkpoint), as if interrupted. `python`: the LIBERO
    venv's python (default `make libero`'s). `on_rollout(rollout)`: called once the `LiberoRollout` is up,
    before the runner takes its `sample_step` (tests: fault injection).
    `reward_fn(final, decisions)`: an episode's return instead of LIBERO's success (`LiberoRollout`; tests)."""
    preflight(cfg, "rl")  # (vlajax.train ran it too; `train` is also called directly)
    python = python or pool_mod.libero_python()  # LiberoEnvMissing before anything loads
    rows = _Rows(cfg)
    started: list[LiberoRollout] = []
    source = functools.partial(_LiberoSource, python=python, rows=rows, reward_fn=reward_fn, on_rollout=on_rollout,
                               started=started)
    out = train_pipeline(cfg, source, build=build_setup, stop_at=stop_at, record=rows.update, evaluate=False,
                         name="the LIBERO run", on_cleanup=functools.partial(_cleanup, started), skip_when_done=True,
                         dropped="killed the LIBERO workers (their groups in flight run again on resume)",
                         last_update_line=True)
    runner, r = out.runner, out.source.rollout
    return {"status": out.status, "updates": runner.counters.updates, "version": runner.counters.version,
            "seconds": out.seconds, "history": rows.history, "checkpoint_dir": out.checkpoint_dir,
            "checkpoints": out.checkpoints, "summary": runner.summary(), "summary_steady": out.steady(),
            "restarts": r.pool.events, "server_batches": list(r.server.batches), "infer_times": list(r.infer_times),
            "update_times": out.update_times, "server_errors": list(r.server.errors), "evals": list(r.evals),
            "state": runner.state}


def command(cfg: TrainConfig) -> int:
    """The `rl` command for a LIBERO suite (`vlajax.train` routes it here after its parse and preflight): the run,
    then one JSON line (its status, updates, the consumed groups' success per update, the evaluations)."""
    logging.getLogger("absl").setLevel(logging.WARNING)
    out = train(cfg)
    short = {k: v for k, v in out.items() if k not in ("history", "state", "summary", "summary_steady", "infer_times",
                                                        "update_times", "server_batches", "evals")}
    short["staleness_max"] = max((max(h["staleness"]) for h in out["history"]), default=0)
    short["success"] = [h["train"].get("success") for h in out["history"]]
    short["evals"] = [{k: e[k] for k in ("version", "update", "success", "successes", "episodes", "wilson95",
                                         "videos") if k in e} for e in out["evals"]]
    print(json.dumps(short, default=str), flush=True)
    return 0
