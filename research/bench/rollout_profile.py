"""`python -m research.bench rollout_profile --json PATH`: where one decision of the bench's pixel rollout goes.

The workload of `python -m vlajax.bench rollout` (16 tabletop envs from pixels, goal suite, both
cameras at 32x32, the `sft-small` model, chunks of 8 with 4 executed; `--head flow`: the presets'
`flow_sde` 'last' sampler + expert value head; `tokens`: token head, no critic), cut into pieces
that are jitted and timed on their own, interleaved, `--repeats` times each (min and median, ms):

- `model.act`: the rollout's one forward (sample + its own log-densities + value, one prefix pass);
- `model.sample_then_score`: the previous rollout's model work, `sample` then `logp_value` on its
  record (+ the value through the stop-gradient params), in one jit as the old `actor_step` had it;
- `model.sample`: sampling alone; `model.value_b16` / `model.value_b4`: the value pass at 16 / 4 rows
  (V(final observation) on truncated decisions: all rows before, the truncated rows now);
- `physics.chunk`: the env's chunk step without rendering (4 control steps x 5 MJX steps, 16 envs,
  with the wrappers' bookkeeping); `physics.mjx_steps`: the same 20 bare `mjx.step`s;
- `render`: both cameras of 16 envs (`observe`);
- `reset.one_env`: `reset_done` with one finished env (reset + render of that env);
  `reset.all_envs`: the previous auto-reset (all 16 reset and rendered, selected);
- `actor_step`: one whole decision as the rollout runs it; `rollout_per_decision`: a jitted
  `rollout` of `--decisions` decisions divided by that number (episodes staggered as in the bench).

`--trace DIR` also records a `jax.profiler` trace of `--trace-calls` rollout calls and attributes
every executed XLA thunk to the source scope in its HLO metadata (model / MJX solver / MJX other /
reset / render / other), giving each part's share of the executed time (the trace inflates
absolute times; the shares are what it is for). With `--trace` the persistent compile cache is
off: a cached executable carries the op metadata of whichever run compiled it.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import glob
import gzip
import json
import os
import pathlib
import re
import sys
import time
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from mujoco import mjx

from vlajax.bench import rollout as bench
from vlajax.bench import write_result
from vlajax.rl import rollout as ro
from vlajax.shared import cli, compile_cache

# thunk attribution: the first rule whose key occurs in the op's HLO metadata op_name wins
_SCOPES = (
    ("physics.solver", ("forward/solve",)),
    ("physics.other", ("/step/", "forward/", "implicit")),
    ("reset", ("tabletop_reset",)),  # (named scopes of TabletopEnv; a reset's render counts as reset)
    ("render", ("tabletop_render",)),
    ("model", ("VLA.", "flow", "token", "sample", "value", "bridge", "heads")),
)


def _pieces(env, actor, params, state, h: int, decisions: int) -> dict:
    """name -> (jitted fn, args, divisor): each piece of one decision (see the module docstring)."""
    b = state.done.shape[0]
    tid = state.info["episode"]["task_id"]
    key = jax.random.key(3)
    act_fn = actor.act or (lambda p, o, t, k: (*actor.sample(p, o, t, k), {}))
    actions = jax.jit(act_fn)(params, state.obs, tid, key)[0]
    m = env.unwrapped.mjx_model
    done1 = jnp.zeros((b,), bool).at[b // 2].set(True)
    keys = ro.group_keys(jax.random.key(5), b)

    def sample_then_score(p, o, t, k):  # the previous actor_step's model work
        acts, record = actor.sample(p, o, t, k)
        mask = jnp.ones((b, h), bool)
        return acts, actor.logp_value(p, {"obs": o, "task_id": t, **record, "action_mask": mask}, k)

    def reset_all(s):  # the previous auto-reset: every env reset and rendered, then selected
        fresh = ro.reset(env, keys)
        return ro._select(done1, fresh, s)

    def run(p, s, k):
        s, traj = ro.rollout(actor, env, p, s, k, decisions, 0, True)
        return s, jnp.sum(traj["done"])

    out = {
        "model.act": (jax.jit(act_fn), (params, state.obs, tid, key), 1),
        "model.sample_then_score": (jax.jit(sample_then_score), (params, state.obs, tid, key), 1),
        "model.sample": (jax.jit(actor.sample), (params, state.obs, tid, key), 1),
    }
    if actor.has_value:
        few = jax.tree.map(lambda x: x[: max(1, b // 4)], (state.obs, tid))
        out["model.value_b16"] = (jax.jit(actor.value), (params, state.obs, tid), 1)
        out["model.value_b4"] = (jax.jit(actor.value), (params, *few), 1)
    out |= {
        "physics.chunk": (jax.jit(lambda s, a: env.step(s, a, observe=False)), (state, actions), 1),
        "physics.mjx_steps": (jax.jit(jax.vmap(lambda d: jax.lax.fori_loop(
            0, h * env.unwrapped.config.n_substeps, lambda _, x: mjx.step(m, x), d))), (state.data,), 1),
        "render": (jax.jit(env.observe), (state,), 1),
        "reset.one_env": (jax.jit(lambda s: ro.reset_done(env, done1, keys, s)), (state,), 1),
        "reset.all_envs": (jax.jit(reset_all), (state,), 1),
        "actor_step": (jax.jit(lambda p, s, k: ro.actor_step(actor, env, p, s, k, 0, True)), (params, state, key), 1),
        "rollout_per_decision": (jax.jit(run), (params, state, key), decisions),
    }
    return out


def time_pieces(pieces: dict, repeats: int) -> dict:
    """Compile each piece, then time them interleaved: {name: {min_ms, median_ms}}."""
    for fn, args, _ in pieces.values():
        jax.block_until_ready(fn(*args))
    times = collections.defaultdict(list)
    for _ in range(repeats):
        for name, (fn, args, div) in pieces.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times[name].append((time.perf_counter() - t0) / div)
    return {k: {"min_ms": round(1e3 * min(v), 2), "median_ms": round(1e3 * float(np.median(v)), 2)}
            for k, v in times.items()}


def trace_shares(fn, args, calls: int, out_dir: pathlib.Path) -> dict:
    """Share of executed XLA thunk time per source scope over `calls` calls of jitted `fn`."""
    compiled = fn.lower(*args).compile()
    scope, calls_of, comp, first_in = {}, {}, None, {}
    for line in compiled.as_text().splitlines():
        head = re.match(r"\s*(?:ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if head and "=" not in line.split("{")[0]:
            comp = head.group(1)  # a computation starts
        m = re.match(r'\s*(?:ROOT )?%?([\w.\-]+) = .*?metadata=\{[^}]*op_name="([^"]*)"', line)
        if m:
            scope[m.group(1)] = m.group(2)
            first_in.setdefault(comp, m.group(2))
        c = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = .*?calls=%?([\w.\-]+)", line)
        if c:
            calls_of[c.group(1)] = c.group(2)
    for name, called in calls_of.items():  # fusions without their own metadata: their body's first op
        if name not in scope and called in first_in:
            scope[name] = first_in[called]
    jax.block_until_ready(compiled(*args))
    with jax.profiler.trace(str(out_dir)):
        for _ in range(calls):
            jax.block_until_ready(compiled(*args))
    with gzip.open(sorted(glob.glob(f"{out_dir}/plugins/profile/*/*.trace.json.gz"))[-1]) as f:
        trace = json.load(f)
    total = collections.Counter()
    for e in trace["traceEvents"]:  # thunks are named like HLO instructions; skip host-side and container events
        name = e.get("name", "")
        if e.get("ph") != "X" or not re.fullmatch(r"[\w\-]+(\.\d+)?", name) or name.startswith(
                ("while", "conditional", "call")):
            continue
        op = scope.get(name)
        part = "unattributed" if op is None else next((p for p, keys in _SCOPES if any(k in op for k in keys)), "other")
        total[part] += e["dur"]
    s = sum(total.values())
    return {k: round(v / s, 3) for k, v in total.most_common()}


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    json: pathlib.Path | None = None  # write the results here
    head: Literal["flow", "tokens"] = "flow"
    num_envs: int = 16
    repeats: int = 9  # timed calls of every piece (interleaved)
    decisions: int = 8  # decisions per timed rollout call
    trace: pathlib.Path | None = None  # also write a profiler trace here and report each part's share
    trace_calls: int = 2


def main(argv: list[str]) -> int:
    args = cli.parse(Args, argv, prog="python -m research.bench rollout_profile", description=__doc__.splitlines()[0])
    if min(args.num_envs, args.repeats, args.decisions, args.trace_calls) < 1:
        print("error: --num-envs, --repeats, --decisions and --trace-calls must be >= 1", file=sys.stderr)
        return 2
    if args.trace is None:  # a cached executable keeps the HLO metadata of the run that compiled it
        compile_cache.enable()
    load_start = os.getloadavg()
    env, actor, params, state, h = bench.setup(args.head, args.num_envs, episode_length=200, stagger=True)
    pieces = _pieces(env, actor, params, state, h, args.decisions)
    rows = time_pieces(pieces, args.repeats)
    for name, r in rows.items():
        print(f"{name:26s} min {r['min_ms']:8.2f} ms  median {r['median_ms']:8.2f} ms", flush=True)
    result = {
        "benchmark": "rollout_profile",
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": bench._git_commit(),
        "load_average_1m_start_end": [round(load_start[0], 2), round(os.getloadavg()[0], 2)],
        "head": args.head, "num_envs": args.num_envs, "execute": h, "repeats": args.repeats,
        "jax": jax.__version__, "pieces_ms": rows,
    }
    if args.trace:
        fn, fargs, _ = pieces["rollout_per_decision"]
        result["trace_shares"] = trace_shares(fn, fargs, args.trace_calls, args.trace)
        print("executed-time shares (trace):", result["trace_shares"])
    write_result(args.json, result)
    return 0
