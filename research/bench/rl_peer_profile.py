"""Where one PPO iteration's time goes, vlajax vs brax, on the peer bench's setting.

    python -m research.bench rl_peer_profile --json results/bench/rl_peer_profile.json [--rounds 3] [--reps 3] [--debug]

The setting of `research.bench.rl_peer` (`rl-mlp-state`: goal/press_button, 64 envs x 80 steps =
5120 env steps per iteration, 4 epochs x 4 minibatches, 64-64 tanh MLPs). Every piece is built
once and compiled before the clock starts; then, in each round, in this order, back to back:

- `vlajax_iteration`: the body of `vlajax.rl.loop.train`'s iteration, piece by piece with
  `block_until_ready` after each: `keys` (`iteration_keys`, eager), `collect` (the jitted rollout +
  advantages + learner batch, `setup.collect`), `update` (the jitted `learner.update`: epochs x
  minibatches in one program), `get` (`device_get` of the metrics and the float conversion, the
  loop's one host sync). Built exactly as `loop.train` builds them (same jit, shardings, donation).
- `brax_rollout`: brax's own collection (`brax.training.acting.generate_unroll` under the
  `lax.scan` of brax's `training_step`, brax's training wrappers around the same env object,
  brax's PPO policy at its initial parameters).
- `env_only`: the env stepping of each system with fixed random actions and no policy: vlajax's
  stack (`rl.rollout.make_env`: suite -> episode -> 1-step chunk -> vmap, plus `rollout.reset_done`
  for finished envs) and brax's (`brax.envs.wrappers.training.wrap`: vmap -> episode ->
  auto-reset to the cached first state); and vlajax's stack with the cheap brax-style auto-reset
  (`env_only_vlajax_cached_reset`) and without the chunk wrapper (`env_only_vlajax_no_chunk`),
  to attribute the difference.
Each piece is timed `--reps` times per round, in wall seconds and in this process's CPU seconds
(`<piece>_cpu`, all threads: the work done, which on a shared machine depends far less on the load
than the wall time does); the JSON keeps every time and the load average after each round.
brax's full iteration is not split (it is one fused program): with `--peer-iterations N` each round
also runs the bench's two whole trainings (`rl_peer.run_vlajax`, `rl_peer.run_brax`: N iterations,
the first dropped) and records their iteration seconds (`peer_vlajax`, `peer_brax`).
`compiled_programs`: the jits' dispatch-cache entries (`_cache_size`) after the rounds; an entry
is not necessarily an XLA compile (an equivalent sharding object adds one: experiments/brax-peer/README.md).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp

from research.bench import rl_peer
from research.bench.rl_peer import HIDDEN, MINIBATCHES, _config, _device_put_replicated
from vlajax.bench import write_result
from vlajax.envs import registry
from vlajax.envs import wrappers as w
from vlajax.rl import learner, loop
from vlajax.rl import rollout as ro
from vlajax.rl.setup import build, collect, initial_env_state, iteration_keys, place_env_state
from vlajax.shared import cli, compile_cache
from vlajax.training import sharding
from vlajax.training.train_state import TrainState


def _timed(fn, clocks: dict, name: str):
    """Run `fn`, wait for its arrays; record wall seconds in `clocks[name]` and this process's CPU
    seconds (all threads: `time.process_time`) in `clocks[name + '_cpu']`."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    jax.block_until_ready(out)
    clocks[name], clocks[name + "_cpu"] = time.perf_counter() - t, time.process_time() - c
    return out


class _Points:
    """Clock readings (wall, process CPU) at each progress point of a whole training run; the
    differences of consecutive points are its iterations as seen from outside (host work included)."""

    def __init__(self):
        self.points = []

    def __call__(self, *args, **kwargs):
        self.points.append((time.perf_counter(), time.process_time()))

    def iterations(self) -> list[dict[str, float]]:
        p = self.points
        return [{"iteration": b[0] - a[0], "iteration_cpu": b[1] - a[1]} for a, b in zip(p, p[1:])]


def _run_vlajax_with_points(cfg) -> tuple[dict, _Points]:
    """`rl_peer.run_vlajax` with a clock reading at each of the loop's per-iteration
    `MetricsLogger.scalars` calls (disabled TensorBoard: the call is the loop's progress point)."""
    points = _Points()

    class Logger(loop.MetricsLogger):
        def scalars(self, *a, **k):
            out = super().scalars(*a, **k)
            points()
            return out

    saved, loop.MetricsLogger = loop.MetricsLogger, Logger
    try:
        return rl_peer.run_vlajax(cfg), points
    finally:
        loop.MetricsLogger = saved


class VlajaxIteration:
    """`loop.train`'s iteration body, its pieces timed apart."""

    def __init__(self, cfg):
        self.cfg, self.learner = cfg, learner
        self.mesh = mesh = sharding.make_mesh(cfg.mesh)
        rules = cfg.mesh.logical_rules
        self.setup = setup = build(cfg, mesh)
        tx = learner.make_optimizer(cfg.rl)
        init = lambda rng: TrainState.create(setup.init_params(rng), tx, jax.random.fold_in(rng, 1))  # noqa: E731
        self.state, shardings = sharding.init_sharded(init, mesh, rules, jax.random.key(cfg.seed))
        self.update_fn = jax.jit(functools.partial(learner.update, cfg.rl, setup.actor.logp_value),
                                 in_shardings=(None, shardings, None), out_shardings=(shardings, None),
                                 donate_argnums=(1,))
        with sharding.use_mesh(mesh, cfg.mesh.logical_rules):
            self.env_state = place_env_state(jax.jit(functools.partial(initial_env_state, cfg, setup.env))(), mesh)
        self.collect_fn = jax.jit(functools.partial(collect, cfg, setup), donate_argnums=(1,))  # as loop.train
        self.it = 0

    def run(self) -> dict[str, float]:
        cfg, it = self.cfg, self.it
        with sharding.use_mesh(self.mesh, cfg.mesh.logical_rules):
            t0, c0 = time.perf_counter(), time.process_time()
            clk = {}
            k_c, k_u = _timed(lambda: iteration_keys(cfg.seed, it), clk, "keys")
            self.env_state, batch, roll = _timed(
                lambda: self.collect_fn(self.state.params, self.env_state, k_c, jnp.int32(it)), clk, "collect")
            batch = _timed(lambda: self.learner.critic_warmup(cfg.rl, it, batch), clk, "critic_warmup")
            self.state, metrics = _timed(lambda: self.update_fn(k_u, self.state, batch), clk, "update")
            host = _timed(lambda: {k: float(v) for k, v in jax.device_get(metrics | roll).items()}, clk, "get")
            clk["total"], clk["total_cpu"] = time.perf_counter() - t0, time.process_time() - c0
        self.it += 1
        return clk | {"env_steps": host["env_steps"]}


class BraxRollout:
    """brax's collection of one training step (its `training_step`'s scan of `generate_unroll`)."""

    def __init__(self, cfg, envs: int, unroll: int):
        from brax.envs.wrappers import training as brax_wrappers
        from brax.training import acting
        from brax.training.agents.ppo import networks as ppo_networks
        from flax import linen

        env = brax_wrappers.wrap(registry.load(cfg.env.task, obs_mode="state"), episode_length=cfg.env.episode_length,
                                 action_repeat=1)
        nets = ppo_networks.make_ppo_networks(env.observation_size, env.action_size,
                                              policy_hidden_layer_sizes=HIDDEN, value_hidden_layer_sizes=HIDDEN,
                                              activation=linen.tanh, distribution_type="normal", noise_std_type="log")
        key = jax.random.PRNGKey(cfg.seed)  # raw keys, as brax's ppo.train uses
        params = (None, nets.policy_network.init(key), nets.value_network.init(key))
        policy = ppo_networks.make_inference_fn(nets)(params)
        fields = ("truncation", "episode_metrics", "episode_done")

        def rollout(state, key):
            def f(carry, _):
                s, k = carry
                k, nk = jax.random.split(k)
                s, data = acting.generate_unroll(env, s, policy, k, unroll, extra_fields=fields)
                return (s, nk), data

            (state, _), data = jax.lax.scan(f, (state, key), (), length=envs * MINIBATCHES // envs)
            return state, data

        self.fn = jax.jit(rollout)
        self.state = jax.jit(env.reset)(jax.random.split(key, envs))
        self.key = key

    def run(self) -> dict[str, float]:
        self.key, k = jax.random.split(self.key)
        clk = {}
        self.state, _ = _timed(lambda: self.fn(self.state, k), clk, "rollout")
        return clk


class EnvOnly:
    """T steps of B envs with fixed random actions, no policy: one system's env stack."""

    def __init__(self, cfg, envs: int, steps: int, kind: str):
        key = jax.random.key(cfg.seed)
        self.actions = jax.random.uniform(key, (steps, envs, 4), minval=-1.0, maxval=1.0)
        keys = jax.random.key_data(jax.random.split(key, envs))
        if kind == "brax":
            from brax.envs.wrappers import training as brax_wrappers

            env = brax_wrappers.wrap(registry.load(cfg.env.task, obs_mode="state"),
                                     episode_length=cfg.env.episode_length, action_repeat=1)
            step = env.step
            self.state = jax.jit(env.reset)(keys)
        elif kind == "vlajax_no_chunk":  # suite -> episode -> vmap (no chunk wrapper), brax-style auto-reset
            base = ro.make_env(cfg.env, 1).env.env  # EpisodeWrapper(SuiteEnv(...))
            env = w.VmapWrapper(w.AutoResetWrapper(base, full_reset=False), envs)
            step = env.step
            self.state = jax.jit(env.reset)(keys)
        else:
            env = ro.make_env(cfg.env, 1)
            cached = kind == "vlajax_cached_reset"

            def step(s, a):
                nxt = env.step(s, a[:, None])
                done = nxt.done > 0
                if cached:  # brax's auto-reset: the first state of the run, selected with where
                    return ro._select(done, first, nxt)
                return ro.reset_done(env, done, keys, nxt)

            first = jax.jit(lambda k: ro.reset(env, k))(keys)
            self.state = first

        def run(state, actions):
            return jax.lax.scan(lambda s, a: (step(s, a), None), state, actions)[0]

        self.fn = jax.jit(run)

    def run(self) -> dict[str, float]:
        clk = {}
        self.state = _timed(lambda: self.fn(self.state, self.actions), clk, "steps")
        return clk


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    json: str = ""  # write the result here
    rounds: int = 3  # rounds; each times every piece --reps times, back to back
    reps: int = 3  # timed repeats of each piece per round (after one untimed compile call)
    debug: bool = False  # 8 envs, unroll 4: a pulse check, not a measurement
    env_only: tuple[str, ...] = ("vlajax", "brax", "vlajax_cached_reset", "vlajax_no_chunk")  # env stacks to time
    peer_iterations: int = 3  # also run rl_peer's two whole trainings per round (0 = skip; first iteration dropped)


def main(argv: list[str]) -> int:
    args = cli.parse(Args, argv, prog="python -m research.bench rl_peer_profile", description=__doc__.split("\n")[0])
    if args.rounds < 1 or args.reps < 1:
        cli.error("--rounds and --reps must be >= 1")
    kinds = ("vlajax", "brax", "vlajax_cached_reset", "vlajax_no_chunk")
    if any(k not in kinds for k in args.env_only):
        cli.error(f"--env-only takes {' '.join(kinds)}")
    if args.peer_iterations == 1 or args.peer_iterations < 0:
        cli.error("--peer-iterations must be 0 or >= 2 (the first one is compilation)")
    cfg, envs, unroll = _config(2, args.debug)
    steps = unroll * MINIBATCHES
    t0, load_start = time.time(), list(os.getloadavg())
    compile_cache.enable(cfg.compilation_cache_dir)  # as loop.train does
    shim = not hasattr(jax, "device_put_replicated")
    if shim:  # brax 0.14.2 calls it (removed in jax 0.12); jax's documented drop-in, as in rl_peer
        jax.device_put_replicated = _device_put_replicated
    pieces = {"vlajax_iteration": VlajaxIteration(cfg), "brax_rollout": BraxRollout(cfg, envs, unroll)}
    for kind in args.env_only:
        pieces[f"env_only_{kind}"] = EnvOnly(cfg, envs, steps, kind)
    compile_s = {}
    for name, p in pieces.items():  # compile (and one warm call) before any clock
        t = time.perf_counter()
        p.run()
        compile_s[name] = round(time.perf_counter() - t, 1)
        print(f"compiled {name} in {compile_s[name]} s", flush=True)
    peer_cfg = _config(max(args.peer_iterations, 2), args.debug)[0]
    rounds = []
    for r in range(args.rounds):
        rec = {}
        for name, p in pieces.items():
            rec[name] = [p.run() for _ in range(args.reps)]
        if args.peer_iterations:  # the bench's two whole trainings, back to back (their own compiles: cached)
            res, points = _run_vlajax_with_points(peer_cfg)
            own = res["per_iteration"][1:]  # (the loop's final evaluation logs one more point: not an iteration)
            rec["peer_vlajax"] = [p | {"own_clock": envs * steps / x}
                                  for p, x in zip(points.iterations()[:len(own)], own, strict=True)]
            points = _Points()
            res = rl_peer.run_brax(peer_cfg, envs, unroll, args.peer_iterations, on_progress=points)
            own = res["per_iteration"][1:]  # (the first point is after the first, compiling, epoch)
            rec["peer_brax"] = [p | {"own_clock": envs * steps / x}
                                for p, x in zip(points.iterations()[-len(own):], own, strict=True)]
        rec["load_average_after"] = list(os.getloadavg())
        rounds.append(rec)
        if args.json:  # after every round: a run cut short keeps its finished rounds
            write_result(args.json, {"benchmark": "rl_peer_profile", "partial": True, "rounds": rounds,
                                     "compile_seconds": compile_s, "command": "python -m "
                                                                              "research.bench.rl_peer_profile "
                                     + " ".join(argv)})
        print(f"round {r}", {k: {kk: round(statistics.median(x[kk] for x in v), 4) for kk in v[0]}
                             for k, v in rec.items() if k != "load_average_after"}, rec["load_average_after"],
              flush=True)
    med = {name: {k: statistics.median(x[k] for rec in rounds for x in rec[name]) for k in rounds[0][name][0]}
           for name in rounds[0] if name != "load_average_after"}
    v = pieces["vlajax_iteration"]
    result = {
        "benchmark": "rl_peer_profile", "task": cfg.env.task, "num_envs": envs, "env_steps_per_iteration": envs * steps,
        "debug": args.debug, "rounds": rounds, "median_seconds": med, "compile_seconds": compile_s,
        "compiled_programs": {"collect": v.collect_fn._cache_size(), "update": v.update_fn._cache_size()},
        "devices": [str(d) for d in jax.devices()], "load_average_start": load_start,
        "load_average": list(os.getloadavg()),
        "seconds": round(time.time() - t0, 1),
        "command": "python -m research.bench rl_peer_profile " + " ".join(argv),
    }
    if shim:
        del jax.device_put_replicated
    print(json.dumps(med, indent=1))
    write_result(args.json, result)
    return 0
