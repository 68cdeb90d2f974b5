"""`python -m research.planner`: predicted throughput of the async pipeline per mode / placement / device count.

    python -m research.planner --preset pi05-libero --gpus 8 16 32       # costs from the seed papers
    python -m research.planner --preset pi0-maniskill --gpus 8 16 32     # the same, GPU simulation (ManiSkill)
    python -m research.planner --profile-from RUN_DIR --gpus 1 2         # costs measured here (profile)
    python -m research.planner --costs costs.json --gpus 8               # costs given by hand
    python -m research.planner profile --out RUN_DIR [workload flags]    # measure the costs (research.planner.profile)
    python -m research.planner validate --profile-from RUN_DIR --json OUT --plot PNG   # vs measured bench rows
    python -m research.planner contention --json OUT                     # do the workload's calls overlap here?
    python -m research.planner ceiling RUN_DIR ...                       # host-core ceiling of any async speed-up

For each device count it simulates every mode (sync, train_async, rollout_async, both,
+streaming, +partial_rollout) under each placement (colocated, disaggregated r:t and hybrid r:t
for every `--ratios`), prints env steps/s, trainer / rollouter idle ratios and staleness, and
recommends the configuration with the highest predicted throughput whose staleness is within
`--max-staleness`. A `--costs` JSON is `{"costs": {Costs fields}, "workload": {"envs_per_device",
"horizon", "steps_per_decision", "slots", "max_batch", "updates"}}` (see `research.planner.costs`); a
`"comm": {Comm fields}` entry of the costs (`research.planner.comm`: parameters, bytes, batch sizes, links)
replaces `sync_s` / `allreduce_s` with bytes over bandwidths.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Literal

from research.planner import presets, presets_maniskill
from research.planner.costs import Costs
from research.planner.sim import MODES, PLACEMENTS, simulate_mean
from vlajax.shared import cli


def _preset_from_json(d: dict, name: str) -> presets.Preset:
    wl = d.get("workload", {})
    allowed = {"envs_per_device", "horizon", "steps_per_decision", "slots", "max_batch", "updates", "trigger"}
    if set(wl) - allowed:
        raise ValueError(f"unknown workload fields {sorted(set(wl) - allowed)}")
    return presets.Preset(name, Costs.from_json(d["costs"]), **{"envs_per_device": 16, "horizon": 8} | wl)


def _from_profile(run_dir: str, physics: str) -> presets.Preset:
    d = json.loads((pathlib.Path(run_dir) / "profile.json").read_text())
    wl = d["workload"]
    costs = Costs.from_json(d["costs"][physics])
    return presets.Preset(f"profile:{run_dir}", costs, envs_per_device=wl["envs"], horizon=wl["horizon"],
                          steps_per_decision=wl.get("action_horizon", 1), slots=d.get("slots", 4), updates=8)


def table(p: presets.Preset, gpus: list[int], ratios: list[tuple[int, int]], seeds: int,
          modes: tuple[str, ...] = MODES, placements: tuple[str, ...] = PLACEMENTS) -> list[dict]:
    rows = []
    for g in gpus:
        configs = [("colocated", (1, 1))] if "colocated" in placements else []
        for placement in ("disaggregated", "hybrid"):
            configs += [(placement, r) for r in ratios if placement in placements
                        and g * r[0] % sum(r) == 0 and g * r[0] // sum(r) >= 1
                        and (placement == "hybrid" or g * r[1] // sum(r) >= 1)]
        for placement, ratio in configs:
            for mode in modes:
                try:
                    pipe = p.pipeline(g, mode, placement, ratio)
                except ValueError:  # the envs do not split over these rollout devices / slots
                    continue
                m = simulate_mean(pipe, p.costs, seeds)
                name = placement if placement == "colocated" else f"{placement} {ratio[0]}:{ratio[1]}"
                rows.append({"devices": g, "placement": name, "mode": mode, **m})
    return rows


def render(rows: list[dict], reference: dict | None, max_staleness: float) -> str:
    out = ["| devices | placement | mode | env steps/s | trainer idle | rollouter idle | staleness mean / max |",
           "|" + "---|" * 7]
    for r in rows:
        out.append(f"| {r['devices']} | {r['placement']} | {r['mode']} | {r['env_steps_per_s']:.1f} "
                   f"| {r['trainer_idle_ratio']:.2f} | {r['rollouter_idle_ratio']:.2f} "
                   f"| {r['staleness_mean']:.2f} / {r['staleness_max']:.0f} |")
    out.append("")
    for g in sorted({r["devices"] for r in rows}):
        ok = [r for r in rows if r["devices"] == g and r["staleness_max"] <= max_staleness]
        if ok:
            best = max(ok, key=lambda r: r["env_steps_per_s"])
            sync = max((r for r in rows if r["devices"] == g and r["mode"] == "sync"),
                       key=lambda r: r["env_steps_per_s"])
            gain = best["env_steps_per_s"] / sync["env_steps_per_s"]
            out.append(f"recommended for {g} devices: {best['placement']}, {best['mode']} -- "
                       f"{best['env_steps_per_s']:.1f} env steps/s ({gain:.2f}x "
                       f"the best sync, {sync['placement']}); trainer idle {best['trainer_idle_ratio']:.2f}, "
                       f"rollouter idle {best['rollouter_idle_ratio']:.2f}")
    if reference:
        gs = sorted({g for ref in reference.values() for g in ref})
        out += ["", "seed figures (same units) for comparison:", "| | " + " | ".join(f"{g}" for g in gs) + " |",
                "|" + "---|" * (len(gs) + 1)]
        out += [f"| {k} | " + " | ".join(f"{v.get(g, float('nan')):.1f}" for g in gs) + " |"
                for k, v in reference.items()]
    return "\n".join(out) + "\n"


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment); exactly one cost source."""

    # costs from the seed papers (research.planner.presets): -comm with the communication model (research.planner.comm),
    # -nocomm with the constants (publication 1.0 s, all-reduce 0); pi05-libero = -comm (experiments/planner)
    # pi0-maniskill: GPU simulation on the rollout GPUs (research.planner.presets_maniskill)
    preset: Literal["pi05-libero", "pi05-libero-comm", "pi05-libero-nocomm", "pi0-maniskill"] | None = None
    profile_from: str | None = None  # run directory with profile.json (python -m research.planner profile)
    costs: str | None = None  # JSON with costs and workload (see the module docstring)
    physics: Literal["c", "jax"] = "c"  # --profile-from: which measured simulator
    gpus: tuple[int, ...] = (8,)  # device budgets to plan for
    ratios: tuple[str, ...] = ("1:1", "3:1")  # rollout:train splits tried (disaggregated, hybrid)
    modes: tuple[str, ...] = MODES  # modes simulated (a subset runs faster)
    placements: tuple[str, ...] = PLACEMENTS  # placements simulated: colocated, disaggregated, hybrid
    max_staleness: float = 1.0  # recommend only configurations within this staleness
    seeds: int = 1  # simulated runs averaged per configuration
    json: str = ""  # write the rows here


def main(argv: list[str]) -> int:
    if argv and argv[0] == "profile":
        from research.planner import profile
        return profile.main(argv[1:])
    if argv and argv[0] == "validate":
        from research.planner import validate
        return validate.main(argv[1:])
    if argv and argv[0] == "contention":
        from research.planner import contention
        return contention.main(argv[1:])
    if argv and argv[0] == "ceiling":
        from research.planner import ceiling
        return ceiling.main(argv[1:])
    a = cli.parse(Args, argv, prog="python -m research.planner", description=__doc__.splitlines()[0])
    if sum(x is not None for x in (a.preset, a.profile_from, a.costs)) != 1:
        cli.error("give exactly one of --preset, --profile-from, --costs")
    try:
        ratios = [tuple(int(x) for x in r.split(":")) for r in a.ratios]
        if any(len(r) != 2 or min(r) < 1 for r in ratios):
            raise ValueError
    except ValueError:
        cli.error(f"--ratios must be 'rollout:train' with positive integers, got {' '.join(a.ratios)}")
    if not a.gpus or min(a.gpus) < 1 or a.seeds < 1:
        cli.error("--gpus and --seeds must be >= 1")
    bad = [m for m in a.modes if m not in MODES] + [x for x in a.placements if x not in PLACEMENTS]
    if bad or not a.modes or not a.placements:
        cli.error(f"--modes takes {' '.join(MODES)}; --placements takes {' '.join(PLACEMENTS)}; got {' '.join(bad)}")
    if a.preset:
        lib = presets_maniskill if a.preset in presets_maniskill.PRESETS else presets
        p, reference = lib.get(a.preset), lib.REFERENCE.get(a.preset)
    elif a.profile_from:
        if not (pathlib.Path(a.profile_from) / "profile.json").is_file():
            cli.error(f"{a.profile_from}/profile.json not found (python -m research.planner profile --out "
                      f"{a.profile_from})")
        p, reference = _from_profile(a.profile_from, a.physics), None
    else:
        try:
            p, reference = _preset_from_json(json.loads(pathlib.Path(a.costs).read_text()), a.costs), None
        except (OSError, ValueError, KeyError, TypeError) as e:
            cli.error(f"--costs {a.costs}: {e}")
    rows = table(p, list(a.gpus), ratios, a.seeds, tuple(a.modes), tuple(a.placements))
    print(f"planner: {p.name}; costs from {p.costs.source or 'the given file'}")
    print(render(rows, reference, a.max_staleness), end="")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"preset": p.name, "gpus": a.gpus, "rows": rows,
                                                    "reference": reference}, indent=1) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
