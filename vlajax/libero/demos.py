"""`python -m vlajax.train demos --suite libero_spatial --episodes-per-task N --out DIR`: scripted-expert
episodes recorded on LIBERO's worker processes, written as a LeRobot v3.0 dataset in openpi's LIBERO layout.

`vlajax.train` routes `demos` with a `libero_*` suite here (the same command, config parsing and preflight as the
tabletop's demos). For every task of the suite (or `--env.task 0,3`: task indices), episodes start from
LIBERO's fixed initial states `protocol.DEMO_INITS` (25..49; evaluation defaults to the others, 0..24) in
order, on `data.demo_workers` workers (`vlajax.libero.pool`, the LIBERO venv) running the scripted expert
(`vlajax.libero.expert`, the worker's `expert` policy) with `Episode(record=True)`: every step after the
10-step wait is kept by the worker and sent back as a `.rec.npz` file. Rounds repeat on the next initial
states until `data.episodes_per_task` episodes per task are written or the 25 demo states run out
(the summary says how many each task got). Only successful episodes are written unless
`data.demo_keep_failures` (then every recorded episode is, its outcome in the summary's `episodes`,
and the first N initial states give the N episodes).

Dataset (openpi's `examples/libero/convert_libero_data_to_lerobot.py` features, robot_type 'panda', fps 10):

    image, wrist_image   uint8 [S, S, 3] PNG   agentview / robot0_eye_in_hand rendered at S = data.demo_image_size
                                               (256 as openpi's data), rotated 180 degrees (openpi's convention)
    state                float32 [8]           eef pos, axis-angle, gripper qpos (`protocol.state_vector`)
    actions              float32 [7]           the OSC_POSE delta + gripper command the expert sent at that step
    task                                       LIBERO's instruction (`task.language`)

Writing is atomic (`vlajax.data.writer`): a killed run leaves only `<DIR>.partial-*`. `<DIR>/demos.json`
holds the summary (per task: episodes tried / kept, expert success with its Wilson 95% interval, lengths).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time

import numpy as np

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.data.build import dataset_dir
from vlajax.libero import pool as pool_mod
from vlajax.libero import protocol as P
from vlajax.shared.stats import wilson

log = logging.getLogger(__name__)

__all__ = ["FEATURES_OF", "check", "generate", "features", "wilson"]

FPS = 10  # openpi's LIBERO data declares 10 (LIBERO's control rate is 20 Hz; openpi keeps the declared value)
ROBOT_TYPE = "panda"
FEATURES_OF = ("image", "wrist_image", "state", "actions")
# DataConfig / EnvConfig fields the tabletop demos read and this recorder does not (refused when set)
TABLETOP_ONLY = {"data.demo_perturb_prob": 0.0, "data.demo_target_swap": False, "data.video": False,
                 "env.randomize": ""}


def features(size: int) -> dict[str, dict]:
    """openpi's LIBERO features at image side `size`."""
    img = {"dtype": "image", "shape": [size, size, 3], "names": ["height", "width", "channel"]}
    return {"image": dict(img), "wrist_image": dict(img),
            "state": {"dtype": "float32", "shape": [8], "names": ["state"]},
            "actions": {"dtype": "float32", "shape": [7], "names": ["actions"]}}


def parse_tasks(spec: str) -> tuple[int, ...]:
    """`env.task` for a LIBERO suite: '' (every task) or task indices '0,3,5'."""
    if not spec.strip():
        return ()
    try:
        return tuple(int(t) for t in spec.split(",") if t.strip())
    except ValueError:
        raise ConfigError(f"env.task {spec!r}: a LIBERO suite's tasks are indices, e.g. --env.task 0,3") from None


def check(cfg: TrainConfig) -> None:
    """ConfigError for a flag this recorder does not read or cannot honour (before anything starts)."""
    suite = cfg.env.suite
    if not suite.startswith("libero_spatial"):
        raise ConfigError(f"demos --suite {suite}: the scripted LIBERO expert knows libero_spatial's tasks only")
    for field, default in TABLETOP_ONLY.items():
        section, name = field.split(".")
        if getattr(getattr(cfg, section), name) != default:
            raise ConfigError(f"{field} is for the tabletop suites' demos, not LIBERO's")
    d = cfg.data
    if d.episodes_per_task < 1 or d.episodes_per_task > len(P.DEMO_INITS):
        raise ConfigError(f"--episodes-per-task {d.episodes_per_task}: LIBERO demos come from the "
                          f"{len(P.DEMO_INITS)} demo initial states per task ({P.DEMO_INITS.start}.."
                          f"{P.DEMO_INITS.stop - 1}), so 1..{len(P.DEMO_INITS)}")
    if d.demo_workers < 1:
        raise ConfigError(f"data.demo_workers must be >= 1, got {d.demo_workers}")
    if d.demo_image_size < 16:
        raise ConfigError(f"data.demo_image_size must be >= 16, got {d.demo_image_size}")
    if d.demo_max_steps < 0:
        raise ConfigError(f"data.demo_max_steps must be >= 0 (0 = the suite's limit), got {d.demo_max_steps}")
    parse_tasks(cfg.env.task)


def _episode(suite: str, task: int, init: int, cfg: TrainConfig) -> P.Episode:
    return P.Episode(f"{suite}-t{task}-i{init}", suite, task, init, max_steps=cfg.data.demo_max_steps,
                     camera_size=cfg.data.demo_image_size, policy="expert", render="all", video=False,
                     record=True)


def _load(path: str) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        rec = {k: np.asarray(z[k]) for k in FEATURES_OF}
    n = {len(v) for v in rec.values()}
    if len(n) != 1 or 0 in n:
        raise RuntimeError(f"{path}: a recorded episode needs the same, non-zero number of frames per feature, "
                           f"got { {k: len(v) for k, v in rec.items()} }")
    return rec


def generate(cfg: TrainConfig, out: str, *, python: str | None = None, keep_records: str | None = None) -> dict:
    """Record and write the dataset at `out`; -> the summary (also `<out>/demos.json`). `keep_records`: a
    directory the workers' `.rec.npz` files are moved to instead of deleted (to compare the dataset with
    what the workers recorded)."""
    from vlajax.data.writer import LeRobotWriter

    check(cfg)
    if os.path.exists(out):
        raise ConfigError(f"--out {out} already exists; remove it or choose another directory")
    py = python or pool_mod.libero_python()
    suite = cfg.env.suite
    described = pool_mod.describe([suite], py)[suite]
    if described is None:
        raise ConfigError(f"LIBERO has no suite {suite}")
    tasks = parse_tasks(cfg.env.task) or tuple(range(described["n_tasks"]))
    bad = [k for k in tasks if not 0 <= k < described["n_tasks"]]
    if bad:
        raise ConfigError(f"env.task {bad}: {suite} has tasks 0..{described['n_tasks'] - 1}")
    want, keep_fail = cfg.data.episodes_per_task, cfg.data.demo_keep_failures
    summary: dict = {"suite": suite, "inits": [P.DEMO_INITS.start, P.DEMO_INITS.stop - 1], "tasks": {},
                     "episodes": [], "kept": 0, "frames": 0, "image_size": cfg.data.demo_image_size,
                     "keep_failures": keep_fail, "workers": cfg.data.demo_workers}
    scratch = tempfile.mkdtemp(prefix="libero-demos-", dir=os.path.dirname(out) or ".")
    t0 = time.perf_counter()
    try:
        with (LeRobotWriter(out, fps=FPS, features=features(cfg.data.demo_image_size), robot_type=ROBOT_TYPE) as w,
              pool_mod.WorkerPool(cfg.data.demo_workers, None, frames_dir=scratch,
                                  log_dir=os.path.join(scratch, "workers"), python=py) as pool):
            for task in tasks:
                instruction = described["tasks"][task]
                inits = iter(P.DEMO_INITS)
                rows: list[dict] = []
                while sum(r["written"] for r in rows) < want:  # (kept failures count: episodes written)
                    need = want - sum(r["written"] for r in rows)
                    batch = [i for _, i in zip(range(need), inits)]
                    if not batch:
                        break  # every demo initial state of the task was tried
                    eps = [_episode(suite, task, i, cfg) for i in batch]
                    results = pool.run(eps, on_result=lambda r: log.info(
                        "demos: %s: %s (%s steps)", r["id"], "error: " + r["error"] if "error" in r
                        else ("success" if r["success"] else "failure"), r.get("steps")))
                    for ep in eps:  # in initial-state order: the dataset does not depend on which worker ran what
                        r = results[ep.id]
                        if "error" in r:
                            raise RuntimeError(f"LIBERO demos: episode {ep.id} failed: {r['error']}")
                        row = {"id": ep.id, "task": task, "init": ep.init, "success": bool(r["success"]),
                               "steps": int(r["steps"]), "written": False}
                        if r.get("record") and (row["success"] or keep_fail):
                            rec = _load(r["record"])
                            w.add_episode(rec, instruction)
                            row["written"], row["frames"] = True, len(rec["actions"])
                            summary["frames"] += len(rec["actions"])
                        if r.get("record") and keep_records:
                            os.makedirs(keep_records, exist_ok=True)
                            shutil.move(r["record"], os.path.join(keep_records, os.path.basename(r["record"])))
                        elif r.get("record"):
                            os.remove(r["record"])
                        rows.append(row)
                ok = sum(r["success"] for r in rows)
                lo, hi = wilson(ok, len(rows))
                lengths = [r["frames"] for r in rows if r["written"]]
                summary["tasks"][str(task)] = {
                    "instruction": instruction, "tried": len(rows), "successes": ok,
                    "written": sum(r["written"] for r in rows), "expert_success": ok / max(1, len(rows)),
                    "wilson95": [round(lo, 3), round(hi, 3)],
                    "mean_length": float(np.mean(lengths)) if lengths else 0.0}
                summary["episodes"] += rows
                summary["kept"] += summary["tasks"][str(task)]["written"]
                log.info("demos: task %d: %d of %d expert episodes succeeded; %d written", task, ok, len(rows),
                         summary["tasks"][str(task)]["written"])
            if summary["kept"] == 0:
                raise RuntimeError("LIBERO demos: no episode to write (the expert succeeded in none); "
                                   "--data.demo-keep-failures writes failed ones too")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ok = sum(r["success"] for r in summary["episodes"])
    n = len(summary["episodes"])
    summary.update({"expert_success": ok / max(1, n), "wilson95": [round(x, 3) for x in wilson(ok, n)],
                    "seconds": round(time.perf_counter() - t0, 1), "out": out, "load": os.getloadavg()})
    tmp = os.path.join(out, "demos.json.tmp")
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1)
    os.replace(tmp, os.path.join(out, "demos.json"))
    return summary


def command(cfg: TrainConfig) -> int:
    """The `demos` command for a LIBERO suite (`vlajax.train` routes it here by `env.suite`)."""
    return run(cfg, os.path.abspath(os.path.expanduser(dataset_dir(cfg))))


def run(cfg: TrainConfig, out: str) -> int:
    """Record the suite's expert demonstrations into the dataset `out`; prints the summary JSON line."""
    check(cfg)
    try:
        pool_mod.libero_python()
    except pool_mod.LiberoEnvMissing as e:
        raise ConfigError(str(e)) from None
    summary = generate(cfg, out)
    print(json.dumps({k: v for k, v in summary.items() if k != "episodes"}), flush=True)
    return 0
