"""LIBERO workers as the environment lane of the async pipeline: the rollout source of `vlajax.libero.rl_train`.

    rollout = LiberoRollout(cfg, setup, args, start_call)      # a pool of workers + an in-process endpoint
    items = rollout.sample_step(version, params, call)         # pipeline.require_batches GRPO groups -> Trajectories
    rollout.close()

The shape (what runs where):

    LIBERO worker processes (CPU, .venv-libero)       this process
    K env slots each, openpi-protocol clients   --->  BatchingServer (`vlajax.libero.inference`): requests of all
      request = openpi's LIBERO keys + extras          connections batched (max_batch = workers x envs; adaptive:
                                                         once every slot in flight has asked, or at T_max)
      (episode id, step, reward, done, success)   <---   -> `actor.act` (the one sampling path, `Bridge.sample`):
                                                             chunk [k, 7] answered; recorded per (episode, step):
                                                             the request's images/state/tokens, the flow chain,
                                                             per-entry log-densities, the policy version used
    `sample_step(version, params, call)` (the AsyncRunner's rollouter lane) deals `pipeline.require_batches` groups
    at once (all the episodes of one update in flight together), each G = `rl.group_size` episodes of one (task,
    init state), runs them on the pool, and turns each group's recorded decisions into one `Trajectory` of the
    buffer's format: records `[T, G, ...]` (T = ceil(max_steps / k) decisions, rows
    past an episode's end `valid` False), `versions` [T, G], `num_samples` G (an episode is a sample),
    `env_steps` the LIBERO steps taken. The trainer's `prepare_segment` turns it into a flat GRPO batch.

Batching (`pipeline.adaptive_batching`, `pipeline.max_wait_ms`): a batch fires at `workers x envs_per_worker`
requests, or (adaptive) once every worker slot with an episode in flight has asked, or when the oldest request
has waited `max_wait_ms` (T_max: with adaptive, the longest a slow slot holds the others back; a slot between
episodes is not waited for).

Evaluation (`evaluate`): the policy of one version on the held-out initial states, answered by the greedy
sampler `eval --suite libero_* --checkpoint` serves (`deterministic=True`: the ODE sampler / argmax tokens),
not by the RL sampler; nothing of it is recorded for training. The final version's evaluation (`version >=
rl.num_iterations // pipeline.trigger_parameter_sync_step`) also records each task's held-out initial state 0: the
agentview images its requests carried -> `<output_dir>/videos/<suite>_task<k>_init<i>_<success|failure>.gif`, named
in its row (`vlajax.libero.rl_eval.EvalVideos`; the workers' frames files, `<output_dir>/frames/`, removed).

Weights: with `pipeline.partial_rollout` every inference batch takes the newest installed weights
(`bind(runner.weights)`), so an episode in flight continues under new weights and its decisions carry
several versions; without, the group runs under the version `sample_step` was called with.

Reward (LIBERO's sparse success): 1 on the decision whose chunk reached LIBERO's goal check (`done`), 0
elsewhere; an episode that hits the step limit ends with 0 (`truncated`). `action_mask` [k] per decision:
the chunk steps the worker executed (fewer than k on the last decision when the episode ended inside it).

Faults: a worker that dies or hangs is replaced by the pool and its episodes re-run from their initial state
(`vlajax.libero.pool`). Here a re-run is recognised by its first request (step 0): it starts the episode's
record afresh over its new connection, and requests still arriving over the old connection are answered but
not recorded -- an episode's decisions come from one attempt only, never twice.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.libero import protocol as P
from vlajax.libero.backend import advertised_url, make_pool
from vlajax.libero.checks import pool_backend
from vlajax.libero.inference import BatchingServer, Request
from vlajax.libero.rl_eval import EvalVideos, eval_summary
from vlajax.pipeline.buffer import Trajectory
from vlajax.pipeline.lanes import PipelineStopped
from vlajax.serve.spec import KeyMap

__all__ = ["LiberoRollout", "Recorder", "assemble_group", "eval_summary", "obs_keys"]

EP, STEP, DONE, SUCCESS = (P.EXTRA_KEYS[k] for k in ("episode", "step", "done", "success"))


def obs_keys(bridge) -> list[tuple[str, str]]:
    """(the key a LIBERO worker's request carries, the key the policy's actor reads) for every input: the same keys
    for an imported openpi policy (its transforms read openpi's LIBERO keys); for our own (e.g. an SFT run on LIBERO
    demos) the request's cameras by `vlajax.serve`'s 'libero' key map into `pixels/<camera>`, its state into
    `state`. ConfigError for a camera the workers do not send."""
    if bridge.openpi is not None:
        return [(P.IMAGE_KEY, P.IMAGE_KEY), (P.WRIST_KEY, P.WRIST_KEY), (P.STATE_KEY, P.STATE_KEY)]
    wire, ours = KeyMap.make("libero", bridge.cameras), KeyMap.make("suite", bridge.cameras)
    sent = (P.IMAGE_KEY, P.WRIST_KEY)
    missing = [f"{c} ({k})" for c, k in wire.images if k not in sent]
    if missing:
        raise ConfigError(f"the policy reads cameras {', '.join(missing)} that LIBERO's workers do not send "
                          f"(they send {', '.join(sent)})")
    return [(w, o) for (_, w), (_, o) in zip(wire.images, ours.images, strict=True)] + [(P.STATE_KEY, ours.state)]


class _Episode:
    """The recorded decisions of one episode's current attempt."""

    def __init__(self, ep: P.Episode):
        self.ep = ep
        self.conn: int | None = None
        self.decisions: list[dict[str, Any]] = []
        self.final: dict[str, Any] | None = None  # the terminal request's extras
        self.attempts = 0
        self.ignored = 0  # requests of an older attempt (answered, not recorded)


class Recorder:
    """Which requests are recorded, and where: the episodes dealt, each with its current attempt.

    `admit(conn, obs)` -> (the episode record to add this request's decision to, or None; whether it is
    the terminal request). An attempt starts at its first request (step 0, not done): the record is
    emptied and bound to that connection; requests of the episode over any other connection (an attempt
    lost to a dead or hung worker) are answered but not recorded. Thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.episodes: dict[str, _Episode] = {}

    def deal(self, eps: list[P.Episode]) -> None:
        with self.lock:
            for e in eps:
                self.episodes[e.id] = _Episode(e)

    def take(self, eps: list[P.Episode]) -> list[_Episode]:
        with self.lock:
            return [self.episodes.pop(e.id) for e in eps]

    def admit(self, conn: int, obs: dict[str, Any]) -> tuple[_Episode | None, bool]:
        step, done = int(obs.get(STEP, 0)), bool(obs.get(DONE, False))
        with self.lock:
            rec = self.episodes.get(str(obs.get(EP, "")))
            if rec is None:
                return None, done
            if step == 0 and not done:  # an attempt's first request: (re)start the record
                rec.conn, rec.decisions, rec.final = conn, [], None
                rec.attempts += 1
            if rec.conn != conn:  # an older attempt's connection
                rec.ignored += 1
                return None, done
            if done:
                rec.final = {"success": bool(obs.get(SUCCESS, False)), "steps": step}
            return rec, done

    def add(self, rec: _Episode, conn: int, decision: dict[str, Any]) -> bool:
        """Append a decision unless the attempt changed meanwhile. -> whether it was recorded."""
        with self.lock:
            if rec.conn != conn:
                return False
            rec.decisions.append(decision)
            return True


def assemble_group(decisions: list[list[dict[str, Any]]], finals: list[dict[str, Any]], k: int, t_max: int
                   ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """G episodes' decisions -> (records `[T, G, ...]` without log-probs, versions int [T, G]).

    decisions[g]: the episode's decisions in order, each `{'step', 'version', 'obs': {...}, 'record': {the actor's
    record: a flow head's 'chain', 'sde_step'; ...}, 'logp_terms'}` (the record's keys become the trajectory's);
    finals[g]: `{'success': bool, 'steps': int}` (env steps after the wait when it ended) and
    optionally `'reward'` (the episode's return; default its success, LIBERO's sparse reward).
    Raises ValueError when an episode's steps are not strictly increasing (a decision counted twice)."""
    g_n = len(decisions)
    rows: list[list[dict]] = []
    for g, ds in enumerate(decisions):
        steps = [d["step"] for d in ds]
        if not ds or any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(f"episode {g}: decision steps {steps} are not strictly increasing")
        if len(ds) > t_max:
            raise ValueError(f"episode {g}: {len(ds)} decisions > {t_max}")
        rows.append(ds + [ds[-1]] * (t_max - len(ds)))  # padding rows repeat the last decision (valid False)
    stack = lambda f: np.stack([np.stack([f(rows[g][t]) for g in range(g_n)]) for t in range(t_max)])  # noqa: E731
    obs_keys = rows[0][0]["obs"].keys()
    data: dict[str, Any] = {"obs": {key: stack(lambda d, key=key: d["obs"][key]) for key in obs_keys},
                            **{key: stack(lambda d, key=key: d["record"][key]) for key in rows[0][0]["record"]},
                            "logp_terms": stack(lambda d: d["logp_terms"])}
    valid = np.zeros((t_max, g_n), bool)
    mask = np.zeros((t_max, g_n, k), bool)
    rewards = np.zeros((t_max, g_n), np.float32)
    done = np.zeros((t_max, g_n), bool)
    success = np.zeros((t_max, g_n), np.float32)
    length = np.zeros((t_max, g_n), np.float32)
    versions = np.zeros((t_max, g_n), np.int64)
    for g, ds in enumerate(decisions):
        n = len(ds)
        end = int(finals[g]["steps"])
        ok = bool(finals[g]["success"])
        for t in range(t_max):
            versions[t, g] = ds[min(t, n - 1)]["version"]
        for t, d in enumerate(ds):
            nxt = ds[t + 1]["step"] if t + 1 < n else end
            mask[t, g, : max(0, min(k, nxt - d["step"]))] = True
        valid[:n, g] = True
        done[n - 1, g] = True
        rewards[n - 1, g] = float(finals[g].get("reward", ok))
        success[n - 1, g] = float(ok)
        length[n - 1, g] = float(end)
    data |= {"task_id": np.zeros((t_max, g_n), np.int32), "action_mask": mask, "rewards": rewards, "done": done,
             "terminated": done & (success > 0), "truncated": done & (success <= 0), "valid": valid,
             "success": success, "episode_return": rewards.copy(), "episode_length": length}
    return data, versions


class LiberoRollout:
    """A pool of LIBERO workers and the endpoint they ask; `sample_step` runs one GRPO group (module docstring),
    `evaluate` the held-out initial states under one version."""

    def __init__(self, cfg: TrainConfig, setup, tasks: tuple[int, ...], start_call: int = 0, *,
                 log_dir: str | None = None, python: str | None = None, reward_fn=None):
        if cfg.rl.algo != "grpo":
            raise ConfigError(f"rl.algo={cfg.rl.algo!r}: RL on LIBERO workers runs GRPO (episodes of a group share "
                              "an initial state; LIBERO's reward is its sparse success)")
        self.cfg, self.setup, self.lib, self.suite, self.tasks = cfg, setup, cfg.libero, cfg.env.suite, tasks
        # reward_fn(final, decisions) -> an episode's return (tests: a dense stand-in where random weights never
        # succeed); None: LIBERO's sparse success
        self.reward_fn = reward_fn
        self.actor, self.bridge = setup.actor, setup.bridge
        m = self.bridge.model
        self.k = cfg.rl.chunk_steps or m.action_horizon  # replan: chunk steps executed per request
        self.G = cfg.rl.group_size
        self.groups = cfg.pipeline.require_batches  # groups per sample call (= per update): episodes in flight
        self.limit = self.lib.max_steps or P.max_steps_for(self.suite)
        self.t_max = math.ceil(self.limit / self.k)
        self.camera_size = self.lib.camera_size or P.camera_size_for(m.image_size)  # the policy's pixels
        self.slots = self.lib.workers * self.lib.envs_per_worker
        self.call0 = start_call
        self.tag = f"r{os.getpid()}-{int(time.time()) % 100000}"  # episode ids unique across resumed runs
        self.weights = None  # the runner's ParamServer (bind): partial rollout reads the newest weights
        self.lifetime = None  # the runner's Lifetime (bind)
        self._round: tuple[int, Any] = (0, None)
        self._fixed: tuple[int, Any] | None = None  # an evaluation's (version, params): every request takes them
        self.eval_every = cfg.rl.eval_every
        # the version the run ends at: its evaluations record GIFs (`rl_eval.EvalVideos`; frames via the pool)
        self.final_version = cfg.rl.num_iterations // cfg.pipeline.trigger_parameter_sync_step
        self.videos = EvalVideos(cfg.output_dir, self.tag, fps=max(1, round(20 / self.k)))
        self.next_eval: int | None = None  # the version at or after which the lane evaluates next (None: never)
        self.on_eval = None  # on_eval(summary): the trainer's log of an evaluation
        self.evals: list[dict[str, Any]] = []
        self.recorder = Recorder()
        self._batches = itertools.count()
        self._key = jax.random.key(cfg.seed + 17)
        self.by_call: dict[int, dict[str, float]] = {}
        self.infer_times: list[tuple[int, float]] = []  # (requests, seconds) of every inference batch (the bench)
        actor, rows = self.actor, self.slots

        def act(params, obs, key):  # [rows, ...] -> env actions [rows, k, 7], record, per-entry log-densities
            return actor.act(params, obs, jnp.zeros((rows,), jnp.int32), key)

        self._act = jax.jit(act)

        def greedy(params, obs, key):  # an evaluation's answers: what `eval` serves (vlajax.serve, deterministic)
            return actor.sample(params, obs, jnp.zeros((rows,), jnp.int32), key, deterministic=True)[0]

        self._greedy = jax.jit(greedy)
        self._evals = itertools.count()  # evaluation ids: an aborted evaluation's episodes never pass for a later one's

        def score(logp_terms, action_mask):  # [N, H, A], [N, k] -> old_logp [N] (or [N, F]), logp_mask
            logp, _ = actor.score({"logp_terms": logp_terms}, action_mask)
            lm = actor.logp_mask(action_mask, logp_terms.shape[0]) if actor.logp_mask is not None else None
            return logp, lm

        self._score = jax.jit(score)
        self.keys = obs_keys(self.bridge)  # (wire key, the actor's key)
        size = m.image_size
        meta = {"observation": {P.IMAGE_KEY: {"shape": [size, size, 3], "dtype": "uint8"},
                                P.WRIST_KEY: {"shape": [size, size, 3], "dtype": "uint8"},
                                P.STATE_KEY: {"shape": [8], "dtype": "float32"}},
                "action": {"shape": [self.k, P.ACTION_DIM], "dtype": "float32"}, "policy": {"rl": True}}
        backend = pool_backend(cfg)
        p = cfg.pipeline
        self.server = BatchingServer(self._handle, meta, max_batch=rows, max_wait_ms=p.max_wait_ms,
                                     adaptive=p.adaptive_batching, host=backend.bind)
        try:
            self.pool = make_pool(backend, self.lib.workers, advertised_url(backend, self.server.port),
                                  envs_per_worker=self.lib.envs_per_worker, log_dir=log_dir, gl=self.lib.gl,
                                  frames_dir=self.videos.frames_dir,
                                  hang_timeout_s=self.lib.hang_timeout_s, python=python)
        except BaseException:
            self.server.close()
            raise

    def bind(self, runner) -> None:
        """The runner's ParamServer (partial rollout: every inference batch takes `weights.latest()`) and its
        lifetime (a stop ends a group in flight: `PipelineStopped`, the lane's normal exit)."""
        self.weights, self.lifetime = runner.weights, runner.lifetime

    # ------------------------------------------------------------ the endpoint

    def _params(self) -> tuple[int, Any]:
        if self._fixed is not None:
            return self._fixed
        if self.weights is not None and self.cfg.pipeline.partial_rollout:
            return self.weights.latest()
        return self._round

    def _handle(self, requests: list[Request]) -> list[dict[str, Any]]:
        chunk0 = {"actions": np.zeros((self.k, P.ACTION_DIM), np.float32)}
        replies: list[dict[str, Any] | None] = [None] * len(requests)
        todo: list[tuple[int, Request, _Episode | None]] = []
        for i, r in enumerate(requests):
            rec, done = self.recorder.admit(r.conn, r.obs)
            if done:  # the terminal request: its answer is not executed
                replies[i] = chunk0
            else:
                todo.append((i, r, rec))
        if todo:
            t0 = time.perf_counter()
            evaluating = self._fixed is not None  # (an evaluation deals nothing to the recorder)
            version, params = self._params()
            obs = self._batch([r.obs for _, r, _ in todo])
            key = jax.random.fold_in(jax.random.fold_in(self._key, self.call0), next(self._batches))
            if evaluating:
                env_actions = jax.device_get(self._greedy(params, obs, key))
            else:
                env_actions, record, scores = jax.device_get(self._act(params, obs, key))
            for row, (i, r, rec) in enumerate(todo):
                replies[i] = {"actions": np.asarray(env_actions[row], np.float32)}
                if rec is not None and not evaluating:
                    self.recorder.add(rec, r.conn, {
                        "step": int(r.obs[STEP]), "version": int(version), "obs": {k: v[row] for k, v in obs.items()},
                        "record": {k: v[row] for k, v in record.items()},  # the actor's (flow: chain, sde_step)
                        "logp_terms": scores["logp_terms"][row]})
            self.infer_times.append((len(todo), time.perf_counter() - t0))
        return replies

    def _batch(self, reqs: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        """Requests -> the actor's observation dict `[slots, ...]` (padded by repeating the last row): openpi's
        LIBERO keys for an imported openpi policy, our env's keys (`pixels/<camera>`, `state`) for our own."""
        reqs = reqs + [reqs[-1]] * (self.slots - len(reqs))
        env = {ours: np.stack([np.asarray(r[wire], np.float32 if wire == P.STATE_KEY else np.uint8) for r in reqs])
               for wire, ours in self.keys}
        tokens, mask = self.bridge.encode_instructions([str(r.get(P.PROMPT_KEY, "")) for r in reqs], env)
        return env | {"tokens": np.asarray(tokens, np.int32), "token_mask": np.asarray(mask, bool)}

    # ------------------------------------------------------------ the rollout lane

    def episodes_of(self, group: int) -> list[P.Episode]:
        """Group `group`: G episodes of one (task, initial state), cycling tasks, then the initial states
        `DEMO_INITS.start .. + libero.train_inits - 1` (evaluation's 0..24 stay held out)."""
        task = self.tasks[group % len(self.tasks)]
        init = P.DEMO_INITS.start + (group // len(self.tasks)) % self.lib.train_inits
        return [P.Episode(f"{self.tag}-g{group}-e{j}", self.suite, task, init, max_steps=self.limit,
                          num_steps_wait=self.lib.num_steps_wait, replan_steps=self.k, seed=self.lib.env_seed,
                          camera_size=self.camera_size, video=False, report_terminal=True) for j in range(self.G)]

    def eval_episodes(self, version: int, n: int = 0, video: bool = False) -> list[P.Episode]:
        """One episode per (task, held-out initial state 0..libero.episodes_per_task - 1) (`n`: the evaluation's
        number, in the ids); `video`: each task's initial state 0 keeps its frames (`Episode.video`)."""
        return [P.Episode(f"{self.tag}-v{version}-n{n}-t{t}-i{i}", self.suite, t, i, max_steps=self.limit,
                          num_steps_wait=self.lib.num_steps_wait, replan_steps=self.k, seed=self.lib.env_seed,
                          camera_size=self.camera_size, video=video and i == 0)
                for t in self.tasks for i in range(self.lib.episodes_per_task)]

    def evaluate(self, version: int, params: Any, abort=None, video: bool | None = None) -> dict[str, Any]:
        """The policy of `version` (its `params`, every request: no newer weights mid-evaluation; the greedy
        sampler) on the held-out initial states, LIBERO's own success check -> `eval_summary` plus 'version',
        'update' (the updates that made it), 'seconds', 'steps_mean', and 'videos' (the GIFs, relative to the
        output directory: `rl_eval.EvalVideos`) when it records them -- `video` (None: the final version's
        evaluation does). Nothing is recorded for training (the episodes are not dealt to the recorder).
        `abort()` True ends it (`PipelineStopped`)."""
        video = version >= self.final_version if video is None else video
        eps = self.eval_episodes(version, next(self._evals), video)
        t0 = time.perf_counter()
        self._fixed = (version, params)
        try:
            results = self.pool.run(eps, abort=abort)
        finally:
            self._fixed = None
        if len(results) < len(eps):
            raise PipelineStopped(f"stopped while evaluating version {version} on the LIBERO workers")
        bad = [f"{e.id}: {results[e.id]['error']}" for e in eps if "error" in results[e.id]]
        if bad:
            raise RuntimeError(f"LIBERO evaluation episodes failed: {'; '.join(bad)}")
        out = eval_summary([(e.task, e.init, bool(results[e.id]["success"])) for e in eps])
        out.update({"version": int(version), "update": int(version) * self.cfg.pipeline.trigger_parameter_sync_step,
                    "seconds": round(time.perf_counter() - t0, 1),
                    "steps_mean": float(np.mean([results[e.id]["steps"] for e in eps]))})
        if video:
            out["videos"] = self.videos.write([results[e.id] for e in eps if e.video])

        def row() -> None:  # the trainer's log of it (libero_rl.jsonl), naming its GIFs
            if self.on_eval is not None:
                self.on_eval(out)

        self.videos.commit(row)  # the row, then its GIFs kept (a stop's sweep comes before or after both)
        self.evals.append(out)
        return out

    def _finals(self, recs: list[_Episode], results: dict[str, dict]) -> list[dict[str, Any]]:
        finals = []
        for rec in recs:
            res = results[rec.ep.id]
            if rec.final is not None and rec.final["steps"] != res["steps"]:
                raise RuntimeError(f"{rec.ep.id}: the terminal request says step {rec.final['steps']}, the worker's "
                                   f"result {res['steps']}")
            final = {"success": bool(res["success"]), "steps": int(res["steps"])}
            if self.reward_fn is not None:
                final["reward"] = float(self.reward_fn(final, rec.decisions))
            finals.append(final)
        return finals

    def _trajectory(self, recs: list[_Episode], finals: list[dict[str, Any]], env_steps: int) -> Trajectory:
        data, versions = assemble_group([r.decisions for r in recs], finals, self.k, self.t_max)
        flat = lambda x: x.reshape(-1, *x.shape[2:])  # noqa: E731
        logp, lm = jax.device_get(self._score(flat(data.pop("logp_terms")), flat(data["action_mask"])))
        data["old_logp"] = np.asarray(logp).reshape(self.t_max, self.G, *np.shape(logp)[1:])
        if lm is not None:
            data["logp_mask"] = np.asarray(lm).reshape(self.t_max, self.G, *np.shape(lm)[1:])
        return Trajectory(data, versions, num_samples=self.G, env_steps=env_steps)

    def sample_step(self, version: int, params: Any, call: int) -> list[Trajectory]:
        """`groups` GRPO groups (groups call*groups ...) on the workers at once, under `version` (newer ones too
        with partial rollout) -> one Trajectory per group. An evaluation due at `version` (`rl.eval_every`) runs
        first, on the same workers."""
        stopped = (lambda: self.lifetime.stopped) if self.lifetime is not None else None
        if self.next_eval is not None and self.eval_every > 0 and version >= self.next_eval:
            self.evaluate(version, params, abort=stopped)
            self.next_eval = (version // self.eval_every + 1) * self.eval_every
        self._round = (version, params)
        groups = [self.episodes_of(call * self.groups + j) for j in range(self.groups)]
        eps = [e for g in groups for e in g]
        self.recorder.deal(eps)
        t0 = time.perf_counter()
        results = self.pool.run(eps, abort=stopped)
        recs = self.recorder.take(eps)
        if len(results) < len(eps):
            raise PipelineStopped(f"stopped while call {call} ran on the LIBERO workers")
        bad = [f"{e.id}: {results[e.id]['error']}" for e in eps if "error" in results[e.id]]
        if bad:
            raise RuntimeError(f"LIBERO episodes failed: {'; '.join(bad)}")
        finals = self._finals(recs, results)
        items = [self._trajectory(recs[j * self.G:(j + 1) * self.G], finals[j * self.G:(j + 1) * self.G],
                                  int(sum(results[e.id]["env_steps"] for e in g))) for j, g in enumerate(groups)]
        res = [results[e.id] for e in eps]
        self.by_call[call] = {"success": float(np.mean([f["success"] for f in finals])),
                              "return": float(np.mean([f.get("reward", f["success"]) for f in finals])),
                              "episode_length": float(np.mean([f["steps"] for f in finals])),
                              "decisions": float(sum(len(r.decisions) for r in recs)), "episodes": float(len(eps)),
                              "env_steps": float(sum(it.env_steps for it in items)),
                              "rollout_s": time.perf_counter() - t0,
                              "attempts_max": float(max(r.attempts for r in recs)),
                              # LIBERO's step-time distribution as the workers measured it (the planner's profile)
                              "step_s_p50": float(np.mean([r["step_s_p50"] for r in res])),
                              "step_s_mean": float(np.mean([r["step_s_mean"] for r in res])),
                              "reset_s": float(np.mean([r["reset_s"] for r in res])),
                              "version_span": float(max(it.span for it in items))}
        return items

    def consumed_metrics(self, calls: range) -> dict[str, float]:
        rows = [self.by_call.pop(c) for c in calls if c in self.by_call]
        return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]} if rows else {}

    def close(self) -> None:
        """The workers, the endpoint, then this run's scratch (`EvalVideos.sweep`: frames files, uncommitted GIFs)."""
        try:
            self.pool.close()
        finally:
            try:
                self.server.close()
            finally:
                self.videos.sweep()

