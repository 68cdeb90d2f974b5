"""The paired protocol: asynchronous RL against synchronous RL, paired by seed, on the pixel
workloads of `experiments/async_sample_efficiency.py` (`--workload grpo-tokens` / `ppo-flow`).

Arms (`ARMS`): `sync` (`vlajax.rl.loop.train`), `async-s1` and `async-s2`
(`vlajax.rl.async_loop.train_async`, `pipeline.staleness_threshold` 1 / 2, one env slot, no
partial rollout, no streaming, decoupled PPO: `use_rollout_log_probs=False`); `async-s2-kl` and `async-s2-lr` =
async-s2 with the arm's own rl fields (`ARM_RL`: `rl.target_kl`, `rl.learning_rate`). Every run of a
workload starts from the same SFT checkpoint (`init_from`; its parameter hash is in every run's
JSON) and is scored on the same evaluation episodes (`rl.eval_seed`); a seed k sets the
collect / update key streams (`cfg.seed`), the same in every arm, so arm runs with the same seed
form a pair. Everything else is the preset as committed (`Protocol.preset`), with the horizon,
eval schedule and env sizes below.

Each run writes `<runs_dir>/<workload>/<arm>-seed<k>.json`: the eval curve (update, env-step
budget, env steps consumed, success per task, training wall time without evaluation, machine
load), the fingerprints (`config_sha256` of the resolved `TrainConfig` without paths, seed,
logging and timeouts; `init_params_sha256` / `init_bridge_sha256` of the starting checkpoint),
how to regenerate the checkpoint (`Protocol.init_recipe`), the git commit and the machine.
`load_runs` takes a saved run only when both fingerprints equal the ones computed now (or, for a seed in
`async_stats.PINNED_INITS`, the checkpoint it is pinned to).

The statistics and the criterion are `experiments/async_stats.py`; `experiments/async_protocol_report.py`'s
`report` writes the tables (markdown), the plot and a JSON summary, and prints the verdict per async arm.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import shutil
import time

import numpy as np

from experiments import async_stats
from experiments.outputs import git_state, loadavg

ARMS = {"sync": None, "async-s1": 1.0, "async-s2": 2.0,  # arm -> pipeline.staleness_threshold (None: sync loop)
        "async-s2-kl": 2.0, "async-s2-lr": 2.0}
# an arm's own rl fields over the protocol's: staleness 2 with a per-update KL bound at the 90th
# percentile of the staleness-1 arm's per-update approx KL (eq45 runs; results/async/preregistration_45b.md); staleness
# 2 with the learning rate divided by the staleness (Zhang et al. 2016: rl-grpo-tokens' 5e-5 / 2;
# results/async/preregistration_45d.md)
ARM_RL: dict[str, tuple[tuple[str, object], ...]] = {"async-s2-kl": (("target_kl", 0.0034),),
                                                     "async-s2-lr": (("learning_rate", 2.5e-5),)}

QUICKSTART_RECIPE = (  # `make quickstart`'s demos + SFT phases (vlajax/quickstart/run.py, default size, seed 0)
    "python -m vlajax.train demos --preset sft-small --suite goal --episodes-per-task 5 --out runs/quickstart/demos",
    "python -m vlajax.train sft --preset sft-small --data.dataset-dir runs/quickstart/demos "
    "--output-dir runs/quickstart/sft --model.action-head tokens --model.num-bins 64 --sft.num-steps 500 "
    "--sft.eval-every -1 --logging.progress plain",
)
FLOW_RECIPE = (  # the quickstart's demos, a flow-head SFT (the sft-small default head)
    QUICKSTART_RECIPE[0],
    "python -m vlajax.train sft --preset sft-small --data.dataset-dir runs/quickstart/demos "
    "--output-dir runs/issue21/sft-flow --sft.num-steps 300 --sft.eval-every -1 --logging.progress plain",
)


@dataclasses.dataclass(frozen=True)
class Protocol:
    """One workload of the protocol: what every run of every arm shares."""

    name: str = "grpo-tokens"
    preset: str = "rl-grpo-tokens"
    init_from: str = "runs/quickstart/sft/checkpoints"  # the SFT checkpoint directory (newest step)
    init_recipe: tuple[str, ...] = QUICKSTART_RECIPE  # commands that regenerate it (config seed 0)
    suite: str = "goal"
    num_envs: int = 32
    group_size: int = 4  # GRPO groups (ignored by PPO)
    episode_length: int = 200
    rollout_length: int = 0  # PPO decisions per env per update (0 = the preset's)
    iterations: int = 15
    eval_every: int = 5
    eval_episodes: int = 20  # per task (x 4 goal tasks = 80 episodes)
    eval_seed: int = 0  # the eval episodes' seed, the same in every run
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    arms: tuple[str, ...] = ("sync", "async-s1", "async-s2")
    min_pairs: int = 5  # the criterion is evaluated once this many seed pairs exist
    rl_overrides: tuple[tuple[str, object], ...] = ()  # (field, value) pairs over the preset's rl section
    # > 0 = the equivalence test with this margin (`async_stats.equivalence`) instead of the paired
    # criterion; its pilot and its cap on the number of seed pairs (the rule fixes the number in between)
    delta: float = 0.0
    pilot_pairs: int = 0
    max_pairs: int = 0
    # the simulator of every run (rollout and evaluation): MJX ('jax') for every workload whose runs or
    # pre-registration predate the 'auto' default; 'c' = C MuJoCo on the host
    physics_impl: str = "jax"

    @property
    def steps_per_update(self) -> int:
        """The update's env-step budget (GRPO: one episode per env, fewer steps when one succeeds early)."""
        if self.preset.startswith("rl-grpo"):
            return self.num_envs * self.episode_length
        from vlajax.config.schema import get_config as preset

        cfg = preset(self.preset)
        return self.num_envs * (self.rollout_length or cfg.rl.rollout_length) * cfg.rl.chunk_steps

    def plan(self) -> list[tuple[str, int]]:
        """The run order: sync and async-s1 interleaved seed by seed (a partial set stays paired), then the rest;
        with a margin every arm seed by seed, so the pilot's seeds are complete first."""
        if self.delta:
            return [(a, s) for s in self.seeds for a in self.arms]
        first = [a for a in self.arms if a in ("sync", "async-s1")]
        rest = [a for a in self.arms if a not in first]
        return [(a, s) for s in self.seeds for a in first] + [(a, s) for a in rest for s in self.seeds]


PROTOCOLS = {
    "grpo-tokens": Protocol(),
    # PPO, flow head, privileged critic: a shorter horizon (5 critic-only warm-up iterations + 15), 3 seeds
    "ppo-flow": Protocol(name="ppo-flow", preset="rl-ppo-flow", init_from="runs/issue21/sft-flow/checkpoints",
                         init_recipe=FLOW_RECIPE, iterations=20, seeds=(0, 1, 2), arms=("sync", "async-s1"),
                         min_pairs=3),
    # the GRPO workload with per-token importance ratios (rl.ratio_level='factor'): the candidate fix
    # for the cost of staleness (a per-chunk ratio multiplies 16 token ratios)
    "grpo-tokens-factor": Protocol(name="grpo-tokens-factor", rl_overrides=(("ratio_level", "factor"),)),
}
# Pre-registered in results/async/preregistration_45.md before any of their runs: the equivalence test
# (margin 10 points) on workloads where sync learns; fresh seeds 100-115, the first `pilot_pairs` a pilot
# that fixes how many are used (`async_stats.equivalence`).
_EQ45 = dict(delta=async_stats.DELTA, pilot_pairs=async_stats.PILOT_PAIRS, max_pairs=async_stats.MAX_PAIRS,
             seeds=tuple(range(100, 100 + async_stats.MAX_PAIRS)), min_pairs=async_stats.MAX_PAIRS)
PROTOCOLS |= {
    # per-token ratios, where sync gained +36 points by update 15 (2 seeds); GRPO at staleness 1 and 2
    "eq45-grpo-tokens-factor": Protocol(name="eq45-grpo-tokens-factor", rl_overrides=(("ratio_level", "factor"),),
                                        **_EQ45),
    # PPO flow at staleness 1 over 60 iterations (the 20 of `ppo-flow` lifted sync +2.4 points; from another start
    # the preset lifted +22.5 by iteration 60, experiments/rl-from-pixels/README.md), evaluated at 0 / 20 / 40 / 60
    "eq45-ppo-flow": Protocol(name="eq45-ppo-flow", preset="rl-ppo-flow", init_from="runs/issue21/sft-flow/checkpoints",
                              init_recipe=FLOW_RECIPE, iterations=60, eval_every=20, arms=("sync", "async-s1"),
                              **_EQ45),
    # the same on C MuJoCo (results/async/preregistration_45c.md, committed before any of its runs): eq45-ppo-flow
    # was never run; C trains this workload ~1.5x faster on the 2-core host, nothing else changes
    "eq45c-ppo-flow-c": Protocol(name="eq45c-ppo-flow-c", preset="rl-ppo-flow",
                                 init_from="runs/issue21/sft-flow/checkpoints", init_recipe=FLOW_RECIPE, iterations=60,
                                 eval_every=20, arms=("sync", "async-s1"), physics_impl="c", **_EQ45),
    # the second workload (results/async/preregistration_45b.md, committed before any of its runs): staleness 2 cost 8
    # points; the fix tried is a per-update KL bound (async-s2-kl, decides), async-s2 beside it as a replication
    # (reported, decides nothing); fresh seeds 116-131, the same rule
    "eq45b-grpo-s2-kl": Protocol(name="eq45b-grpo-s2-kl", rl_overrides=(("ratio_level", "factor"),),
                                 arms=("sync", "async-s2-kl", "async-s2"),
                                 **(_EQ45 | dict(seeds=tuple(range(116, 116 + async_stats.MAX_PAIRS))))),
    # the third workload (results/async/preregistration_45d.md, committed before any of its runs):
    # learning-rate / staleness coupling, lr / 2 at staleness 2 (async-s2-lr, decides), async-s2 beside it as a
    # second replication (decides nothing); fresh seeds 132-147, the same rule, MJX as eq45 and eq45b
    "eq45d-grpo-s2-lr": Protocol(name="eq45d-grpo-s2-lr", rl_overrides=(("ratio_level", "factor"),),
                                 arms=("sync", "async-s2-lr", "async-s2"),
                                 **(_EQ45 | dict(seeds=tuple(range(132, 132 + async_stats.MAX_PAIRS))))),
}


def get_protocol(name: str, debug: bool = False, init_from: str | None = None) -> Protocol:
    if name not in PROTOCOLS:
        raise ValueError(f"unknown workload {name!r}; one of {sorted(PROTOCOLS)}")
    p = PROTOCOLS[name]
    if init_from is not None:
        p = dataclasses.replace(p, init_from=init_from)
    if debug:
        p = dataclasses.replace(p, num_envs=8, episode_length=8, rollout_length=2 if "ppo-flow" in name else 0,
                                iterations=2, eval_every=1, eval_episodes=1, seeds=(0, 1), min_pairs=2,
                                pilot_pairs=2 if p.delta else 0, max_pairs=2 if p.delta else 0)
    return p


def train_config(p: Protocol, arm: str, seed: int, output_dir: str):
    """The `TrainConfig` of one run: the preset, the protocol's sizes, the arm's pipeline."""
    from vlajax.config.schema import AsyncConfig, CheckpointConfig, LoggingConfig
    from vlajax.config.schema import get_config as preset

    if arm not in ARMS:
        raise ValueError(f"arm must be one of {list(ARMS)}, got {arm!r}")
    cfg = preset(p.preset)
    rl = dict(init_from=p.init_from, num_iterations=p.iterations, eval_every=p.eval_every,
              eval_episodes_per_task=p.eval_episodes, eval_seed=p.eval_seed,
              **dict(p.rl_overrides), **dict(ARM_RL.get(arm, ())))
    if cfg.rl.algo == "grpo":
        rl["group_size"] = p.group_size
    elif p.rollout_length:
        rl["rollout_length"] = p.rollout_length
    cfg = dataclasses.replace(
        cfg, seed=seed, output_dir=output_dir,
        # the protocol's simulator, explicit (never 'auto', which would resolve per host): MJX for the workloads made
        # when it was the default (it became 'auto' later), so their configs and fingerprints stay
        env=dataclasses.replace(cfg.env, suite=p.suite, task="", num_envs=p.num_envs, episode_length=p.episode_length,
                                physics_impl=p.physics_impl),
        rl=dataclasses.replace(cfg.rl, **rl),
        checkpoint=CheckpointConfig(every_steps=p.iterations, max_to_keep=1, resume=False),
        logging=LoggingConfig(every_steps=1, progress="plain"))
    if ARMS[arm] is None:
        # the sync loop reads no pipeline field: fixed to the defaults, so that a preset's pipeline
        # defaults (for `--pipeline.enabled`) do not change the sync arm's fingerprint
        cfg = dataclasses.replace(cfg, pipeline=AsyncConfig())
    else:
        cfg = dataclasses.replace(cfg, pipeline=AsyncConfig(
            enabled=True, num_slots=1, require_batches=1, staleness_threshold=ARMS[arm], partial_rollout=False,
            streaming=False, use_rollout_log_probs=False, queue_timeout_s=1800.0, watchdog_s=3600.0))
    return cfg


# ----------------------------------------------------------------------------------------
# Fingerprints
# ----------------------------------------------------------------------------------------

_NOT_FINGERPRINTED = ("output_dir", "seed", "compilation_cache_dir", "logging", "checkpoint", "distributed")


def config_fingerprint(cfg) -> tuple[str, dict]:
    """(sha256, the hashed dict): the resolved config without what does not change the learning
    (paths, the seed, which is the pair's key, logging, checkpointing, pipeline timeouts)."""
    d = json.loads(json.dumps(dataclasses.asdict(cfg)))
    for k in _NOT_FINGERPRINTED:
        d.pop(k, None)
    d["rl"].pop("init_from", None)  # the checkpoint is fingerprinted by its contents
    for k in ("queue_timeout_s", "watchdog_s"):
        d["pipeline"].pop(k, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest(), d


def config_changes(saved: dict, now: dict, prefix: str = "") -> tuple[list[str], list[str]]:
    """(changed, added): the dotted names of config fields whose value differs from a saved run's
    (or that the saved run had and the config no longer has), and of fields added since it was saved.

    A saved run stays valid when only fields were added: a new config field must default to the
    behaviour from before it existed (the rule for every field added to `vlajax.config.schema`), so the
    run's config is the one it would have now."""
    changed, added = [], []
    for k in sorted(set(saved) | set(now)):
        name = prefix + k
        if k not in now:
            changed.append(name)
        elif k not in saved:
            added.append(name)
        elif isinstance(saved[k], dict) and isinstance(now[k], dict):
            c, a = config_changes(saved[k], now[k], name + ".")
            changed, added = changed + c, added + a
        elif saved[k] != now[k]:
            changed.append(name)
    return changed, added


def tree_sha256(tree) -> str:
    """sha256 over a pytree's leaves in path order: path, dtype, shape and bytes of each."""
    import jax

    h = hashlib.sha256()
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    for path, leaf in sorted(leaves, key=lambda kv: jax.tree_util.keystr(kv[0])):
        a = np.ascontiguousarray(np.asarray(jax.device_get(leaf)))
        h.update(f"{jax.tree_util.keystr(path)}|{a.dtype}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


_BRIDGES: dict[str, dict] = {}  # init_bridge_sha256 -> that bridge's JSON (filled by `init_fingerprint`)


def bridge_sha256(bridge_json: dict, drop_model_fields: tuple[str, ...] | list[str] = ()) -> str:
    """sha256 of a bridge's JSON, optionally without some of its `model` fields (ones added to
    `ModelConfig` after a run was saved: the bridge of the same checkpoint then has them too)."""
    d = json.loads(json.dumps(bridge_json))
    for k in drop_model_fields:
        d.get("model", {}).pop(k, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def init_fingerprint(cfg) -> dict:
    """The starting checkpoint's fingerprint: sha256 of its (eval) params and of its bridge (norm stats, model)."""
    from vlajax.rl.setup import load_sft
    from vlajax.training import sharding

    _, bridge, params = load_sft(cfg, sharding.make_mesh(cfg.mesh))
    bridge_json = bridge.to_json()
    h = bridge_sha256(bridge_json)
    _BRIDGES[h] = bridge_json
    return {"init_params_sha256": tree_sha256(params), "init_bridge_sha256": h}


def fingerprints(p: Protocol, arm: str, seed: int, init: dict | None = None) -> dict:
    """Everything a saved run must match to be reused (`init`: a precomputed `init_fingerprint`)."""
    cfg = train_config(p, arm, seed, "unused")
    return {"config_sha256": config_fingerprint(cfg)[0], **(init or init_fingerprint(cfg))}


# ----------------------------------------------------------------------------------------
# One run
# ----------------------------------------------------------------------------------------


def run_path(runs_dir: str, p: Protocol, arm: str, seed: int) -> str:
    return os.path.join(runs_dir, p.name, f"{arm}-seed{seed}.json")


# the async learner's per-update metrics kept in the run's JSON (`kl_stopped`: rl.target_kl skipped a minibatch step;
# `updates`: the minibatch steps applied; recorded from eq45b async-s2 seed 118 and async-s2-kl seed 119 on)
_DIAGNOSTICS = ("success", "approx_kl", "clip_frac", "behaviour_kl", "behaviour_capped_frac", "behaviour_weight_max",
                "kl_stopped", "updates")


def run_one(p: Protocol, arm: str, seed: int, work_dir: str, runs_dir: str) -> dict:
    """Train one (arm, seed) run and write its JSON (`run_path`); -> the record."""
    import jax

    from vlajax.rl import async_loop, loop
    from vlajax.rl.setup import build
    from vlajax.training import sharding

    out = os.path.join(work_dir, p.name, f"{arm}-seed{seed}")
    if os.path.isdir(out):  # an earlier run's (cut off, or --replace): its checkpoints would collide with these saves
        print(f"== {arm} seed {seed}: removing the earlier run's {out}", flush=True)
        shutil.rmtree(out)
    cfg = train_config(p, arm, seed, out)
    config_sha, config_dict = config_fingerprint(cfg)
    init = init_fingerprint(cfg)
    pinned = pinned_init(p, seed)
    if pinned is not None and pinned != init:  # its other arms started elsewhere: this run would not pair with them
        raise RuntimeError(f"{p.name} seed {seed} is pinned to the starting checkpoint {pinned} (async_stats."
                           f"PINNED_INITS), which {p.init_from} is not: {init}")
    wall_start, load_start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), loadavg()
    git = git_state("vlajax", "experiments")  # the checkout this run imported (HEAD may move while it trains)
    setup = build(cfg, sharding.make_mesh(cfg.mesh))
    evals_at: dict[int, dict] = {}
    t0 = time.perf_counter()

    def timed_evaluate(params, iteration):  # the eval's start, its length, the machine's load then
        start = time.perf_counter()
        res = setup_evaluate(params, iteration)
        evals_at[int(iteration)] = {"start": start - t0, "eval_s": time.perf_counter() - start, "loadavg": loadavg()}
        return res

    setup_evaluate = setup.evaluate
    setup = dataclasses.replace(setup, evaluate=timed_evaluate)
    extra: dict = {}
    if ARMS[arm] is None:
        s = loop.train(cfg, setup)
        if s["status"] != "done":  # e.g. stopped by SIGTERM: never saved as a finished run
            raise RuntimeError(f"sync run ended with status {s['status']!r}")
        evals = [(e["iteration"], float(e["env_steps"]), e) for e in s["evals"]]
        extra["train_env_steps"] = s["env_steps"]
    else:
        s = async_loop.train_async(cfg, setup)
        if s["status"] != "done":
            raise RuntimeError(f"async run ended with status {s['status']!r}")
        cum = np.cumsum([0.0] + [float(h["env_steps"]) for h in s["history"]])  # consumed after update u
        evals = [(e["update"], float(cum[e["update"]]), e) for e in s["evals"]]
        stale = [int(v) for h in s["history"] for v in np.ravel(h["staleness"])]
        summ = s["summary"]
        extra |= {"staleness_max": max(stale), "staleness_mean": float(np.mean(stale)),
                  "staleness_hist": {str(k): stale.count(k) for k in sorted(set(stale))},
                  "env_steps_produced": s["env_steps"], "env_steps_consumed": s["consumed_env_steps"],
                  "per_update": [{"update": h.get("update"), "staleness_max": int(np.max(h["staleness"])),
                                  **{k: float(v) for k, v in h.get("metrics", {}).items() if k in _DIAGNOSTICS}}
                                 for h in s["history"]],
                  "trainer_idle_ratio": summ.get("trainer/idle_ratio"),
                  "rollouter_idle_ratio": summ.get("rollouter/idle_ratio")}
    seconds = time.perf_counter() - t0
    curve, eval_total = [], 0.0
    for u, consumed, e in evals:
        t = evals_at[int(u)]
        curve.append({"update": int(u), "env_steps": float(u * p.steps_per_update), "env_steps_consumed": consumed,
                      "success": e["mean_success"], "per_task": e.get("per_task", {}),
                      "wall_s": round(t["start"] - eval_total, 2),  # training time so far, evaluations excluded
                      "wall_s_with_eval": round(t["start"], 2), "eval_s": round(t["eval_s"], 2),
                      "loadavg": t["loadavg"]})
        eval_total += t["eval_s"]
    record = {
        "workload": p.name, "arm": arm, "seed": seed, "staleness_threshold": ARMS[arm],
        "fingerprints": {"config_sha256": config_sha, **init},
        "init": {"path": p.init_from, "recipe": list(p.init_recipe), "config_seed": 0},
        "protocol": dataclasses.asdict(p), "config": config_dict, "curve": curve,
        "final_success": curve[-1]["success"], "seconds": round(seconds, 1),
        "wall_clock_utc": [wall_start, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())],
        "loadavg": {"start": load_start, "end": loadavg()},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": platform.processor(),
                    "jax": jax.__version__, "devices": [str(d) for d in jax.devices()]},
        "git": git, **extra}
    path = run_path(runs_dir, p, arm, seed)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=1)
    os.replace(path + ".tmp", path)
    return record


# ----------------------------------------------------------------------------------------
# Saved runs
# ----------------------------------------------------------------------------------------


def pinned_init(p: Protocol, seed: int) -> dict | None:
    """The starting checkpoint's fingerprints that `seed`'s runs must have when it is pinned to one that can no
    longer be rebuilt here (`async_stats.PINNED_INITS`), else None (the checkpoint at `p.init_from`)."""
    return async_stats.PINNED_INITS.get(p.name, {}).get(seed)


def load_runs(p: Protocol, runs_dir: str, init: dict | None = None) -> tuple[dict, list[str]]:
    """({arm: {seed: record}} of the saved runs whose fingerprints match now, [mismatch messages])."""
    found, skipped = {a: {} for a in p.arms}, []
    for arm in p.arms:
        for seed in p.seeds:
            path = run_path(runs_dir, p, arm, seed)
            if not os.path.exists(path):
                continue
            with open(path) as f:
                rec = json.load(f)
            want = fingerprints(p, arm, seed, pinned_init(p, seed) or init)
            got = rec.get("fingerprints", {})
            bad = sorted(k for k in want if got.get(k) != want[k])
            if "config_sha256" in bad and "config" in rec:  # fields added since the run was saved?
                changed, added = config_changes(rec["config"], config_fingerprint(train_config(p, arm, seed, "x"))[1])
                if not changed:
                    rec["config_fields_added_since"] = added
                    bad.remove("config_sha256")
                    # a ModelConfig field added since is also in the checkpoint's bridge (its `model`)
                    model_added = [a.split(".", 1)[1] for a in added if a.startswith("model.")]
                    bridge = _BRIDGES.get(want["init_bridge_sha256"])
                    if ("init_bridge_sha256" in bad and model_added and bridge is not None
                            and bridge_sha256(bridge, model_added) == got.get("init_bridge_sha256")):
                        bad.remove("init_bridge_sha256")
            if bad:
                skipped.append(f"{path}: {', '.join(bad)} differ (saved {[got.get(k) for k in bad]}, "
                               f"now {[want[k] for k in bad]})")
            else:
                found[arm][seed] = rec
    return found, skipped


def parse_runs(text: str, p: Protocol) -> list[tuple[str, int]]:
    """'sync:0,async-s1:0' -> [('sync', 0), ('async-s1', 0)] (arms of the workload only)."""
    out = []
    for item in text.split(","):
        arm, _, seed = item.partition(":")
        if arm not in p.arms or not seed.isdigit():
            raise ValueError(f"--runs wants arm:seed items (arm one of {list(p.arms)}), got {item!r}")
        out.append((arm, int(seed)))
    return out


def main(p: Protocol, runs_dir: str, work_dir: str, plot_path: str, only: str | None = None,
         reuse: bool = False, replace: bool = False, report_only: bool = False) -> dict | None:
    """Run the plan (or `only`), reusing saved runs whose fingerprints match when `reuse`; then report
    (unless `only` is given: those runs only, no report)."""
    cfg0 = train_config(p, "sync", p.seeds[0], "unused")
    init = init_fingerprint(cfg0)
    print(f"== {p.name}: initial checkpoint {p.init_from}: {init}", flush=True)
    if not report_only:
        for arm, seed in (parse_runs(only, p) if only else p.plan()):
            path = run_path(runs_dir, p, arm, seed)
            if os.path.exists(path):
                with open(path) as f:
                    got = json.load(f).get("fingerprints", {})
                want = fingerprints(p, arm, seed, init)
                if got == want and reuse:
                    print(f"== {arm} seed {seed}: reused {path}", flush=True)
                    continue
                if got != want and not replace:
                    raise SystemExit(f"{path} exists with other fingerprints ({got} vs {want}); "
                                     "pass --replace to run it again over it")
                if got == want and not replace:
                    raise SystemExit(f"{path} exists (same fingerprints): pass --reuse to keep it, --replace to rerun")
            print(f"== {arm} seed {seed} (load {loadavg()}, {time.strftime('%H:%M:%S')})", flush=True)
            rec = run_one(p, arm, seed, work_dir, runs_dir)
            print(f"== {arm} seed {seed}: " + " / ".join(f"{c['success']:.3f}" for c in rec["curve"])
                  + f" in {rec['seconds']:.0f} s -> {path}", flush=True)
    if only and not report_only:
        return None
    runs, skipped = load_runs(p, runs_dir, init)
    for msg in skipped:
        print(f"not reused (fingerprints): {msg}", flush=True)
    from experiments.async_protocol_report import report

    return report(p, runs, os.path.join(runs_dir, p.name), plot_path)
