"""The statistics of the async-vs-sync protocol: per evaluation point, each arm's mean
success over seeds with a 95% bootstrap interval, the paired difference async - sync (paired by
seed) with its 95% bootstrap interval, and the criterion fixed before any run:

    at every evaluation point from the midpoint of the run on (update >= iterations / 2), the
    95% interval of the paired difference (async - sync) contains 0 or lies above it,
    i.e. its upper end is >= 0.

Bootstrap: percentile interval of the mean over seeds, 10,000 resamples of the seeds with
replacement, from a fixed numpy generator (the same inputs give the same interval). With n
seeds whose differences are all negative, every resampled mean is negative and the criterion
fails; with differences of mixed sign the interval straddles 0 and it passes.

The equivalence test (below `equivalence`): an equivalence test with a margin, a void rule when sync does not
learn, and a sample size fixed by an internal pilot; pre-registered in
`results/async/preregistration_45.md`. Recomputed from a workload's per-seed JSONs by

    .venv/bin/python -m experiments.async_stats results/async/runs/eq45-grpo-tokens-factor [--json OUT]
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tyro

from vlajax.shared.stats import percentile_bootstrap

BOOT_SEED = 2126  # the bootstrap generator's seed (fixed)


def bootstrap_mean(values) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `values` [n] and its 95% percentile-bootstrap interval
    (`vlajax.shared.stats.percentile_bootstrap`: its 10,000 resamples, this protocol's generator seed)."""
    return percentile_bootstrap(values, np.mean, seed=BOOT_SEED)


def paired(sync: dict[int, float], other: dict[int, float]) -> tuple[list[int], np.ndarray]:
    """(seeds present in both, other - sync per such seed) from {seed: success} maps."""
    seeds = sorted(set(sync) & set(other))
    return seeds, np.asarray([other[s] - sync[s] for s in seeds], np.float64)


def point_table(curves: dict[str, dict[int, list[dict]]], baseline: str = "sync") -> list[dict]:
    """Per evaluation point: every arm's mean and interval, and every non-baseline arm's paired
    difference to `baseline` with its interval.

    curves: {arm: {seed: [{'update', 'env_steps', 'success', 'wall_s', ...} per eval point]}};
    every run of every arm must have the same updates at its eval points."""
    updates = None
    for arm, runs in curves.items():
        for seed, curve in runs.items():
            u = [p["update"] for p in curve]
            if updates is None:
                updates = u
            elif u != updates:
                raise ValueError(f"{arm} seed {seed}: eval points at updates {u}, others at {updates}")
    rows = []
    for i, update in enumerate(updates or []):
        row = {"update": update, "arms": {}, "diff": {}}
        at = {arm: {s: c[i] for s, c in runs.items()} for arm, runs in curves.items()}
        for arm, pts in at.items():
            if not pts:
                continue
            mean, lo, hi = bootstrap_mean([p["success"] for p in pts.values()])
            row["arms"][arm] = {
                "n": len(pts), "mean": mean, "low": lo, "high": hi,
                "env_steps": float(np.mean([p["env_steps"] for p in pts.values()])),
                "env_steps_consumed": float(np.mean([p.get("env_steps_consumed", p["env_steps"])
                                                     for p in pts.values()])),
                "wall_s": float(np.mean([p["wall_s"] for p in pts.values()])) if all(
                    "wall_s" in p for p in pts.values()) else None}
        base = {s: p["success"] for s, p in at.get(baseline, {}).items()}
        for arm, pts in at.items():
            if arm == baseline:
                continue
            seeds, d = paired(base, {s: p["success"] for s, p in pts.items()})
            if seeds:
                mean, lo, hi = bootstrap_mean(d)
                row["diff"][arm] = {"pairs": len(seeds), "seeds": seeds, "values": d.tolist(), "mean": mean,
                                    "low": lo, "high": hi}
        rows.append(row)
    return rows


def criterion(rows: list[dict], arm: str, iterations: int, min_pairs: int) -> dict:
    """The verdict for `arm` against the baseline: 'PASS' when the paired difference's upper
    interval end is >= 0 at every eval point with update >= iterations / 2, 'FAIL' when it is < 0
    at one of them, 'NOT EVALUATED' while fewer than `min_pairs` seed pairs exist at any such point."""
    late = [r for r in rows if r["update"] >= iterations / 2]
    if not late:
        raise ValueError(f"no eval point at or after the midpoint (update {iterations / 2:g})")
    pairs = min((r["diff"].get(arm, {}).get("pairs", 0) for r in late), default=0)
    points = [{"update": r["update"], "low": r["diff"][arm]["low"], "high": r["diff"][arm]["high"],
               "ok": r["diff"][arm]["high"] >= 0.0} for r in late if arm in r["diff"]]
    if pairs < min_pairs:
        return {"arm": arm, "verdict": "NOT EVALUATED", "pairs": pairs, "min_pairs": min_pairs, "points": points,
                "reason": f"{pairs} seed pairs, the criterion needs >= {min_pairs}"}
    bad = [p["update"] for p in points if not p["ok"]]
    return {"arm": arm, "verdict": "FAIL" if bad else "PASS", "pairs": pairs, "min_pairs": min_pairs,
            "points": points, "reason": (f"interval below 0 at update(s) {bad}" if bad
                                         else "every interval from the midpoint on reaches 0 or above")}


# ----------------------------------------------------------------------------------------
# An equivalence test with a margin (pre-registered in results/async/preregistration_45.md)
# ----------------------------------------------------------------------------------------
#
# Per async arm, on the seeds the sample-size rule below fixes:
#   VOID           sync's own lift (success at the last evaluation - at update 0, per seed) has a 95%
#                  interval that does not lie above 0: the workload cannot tell learning from none;
#   EQUIVALENT     else, when at every evaluation point from the midpoint on (update >= iterations / 2)
#                  the 90% interval of the paired difference async - sync lies inside (-delta, +delta)
#                  (two one-sided tests at 5% each; all points must pass: an intersection-union test);
#   NOT EQUIVALENT otherwise;
#   NOT EVALUATED  while the pilot or the fixed number of pairs is incomplete.
# Every interval is the wider of the percentile bootstrap (`percentile_bootstrap`, 10,000 resamples,
# BOOT_SEED) and Student's t interval of the mean: with few pairs the percentile bootstrap is too
# narrow (z instead of t, and the plug-in sd), so t usually decides.
#
# Sample size (internal pilot, Wittes & Brittain 1990): after the first PILOT_PAIRS seeds of the
# protocol's seed list, sigma = the largest sd of the paired differences over the async arms and the
# late evaluation points (their spread only: their means decide nothing); the number of pairs is the
# smallest n in [PILOT_PAIRS, MAX_PAIRS] whose simulated power (`tost_power`, true difference 0) is
# >= TARGET_POWER, else MAX_PAIRS. The verdict uses the first n seeds of the list; later ones are ignored.

DELTA = 0.10  # the margin: 10 points of success
EQ_CONFIDENCE = 0.90  # two one-sided tests at 5%
LIFT_CONFIDENCE = 0.95  # sync's own lift
PILOT_PAIRS = 6
MAX_PAIRS = 16
TARGET_POWER = 0.80
RHO = 0.41  # correlation of a pair's differences at the two late points (pooled over the paired protocol's GRPO pairs)


def t_interval(values, confidence: float) -> tuple[float, float, float]:
    """(mean, low, high): Student's t interval of the mean of `values` [n]; n = 1 gives (v, -inf, inf)."""
    from scipy import stats

    x = np.asarray(values, np.float64)
    m = float(x.mean())
    if x.size < 2:
        return m, -np.inf, np.inf
    half = float(stats.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
    return m, m - half, m + half


def interval(values, confidence: float) -> dict:
    """The mean of `values` [n] with its percentile-bootstrap and t intervals; low / high = the wider of the two."""
    m, blo, bhi = percentile_bootstrap(values, np.mean, confidence=confidence, seed=BOOT_SEED)
    _, tlo, thi = t_interval(values, confidence)
    return {"n": len(values), "mean": m, "boot_low": blo, "boot_high": bhi, "t_low": tlo, "t_high": thi,
            "low": min(blo, tlo), "high": max(bhi, thi)}


def tost_power(sigma: float, n: int, delta: float = DELTA, shift: float = 0.0, rho: float = RHO, points: int = 2,
               grid: float = 1 / 80, sims: int = 1000, resamples: int = 1000, seed: int = BOOT_SEED) -> float:
    """P(EQUIVALENT) for n pairs whose differences at `points` late evaluations are normal with mean `shift`,
    sd `sigma`, correlation `rho`, rounded to the evaluation's `grid` (1 / episodes); the rule above (both
    intervals inside at every point), the bootstrap with `resamples` resamples. Seeded: deterministic."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    cov = sigma**2 * (np.full((points, points), rho) + (1 - rho) * np.eye(points))
    tq = stats.t.ppf(0.5 + EQ_CONFIDENCE / 2, n - 1) if n > 1 else np.inf
    inside = 0
    for start in range(0, sims, 100):
        k = min(100, sims - start)
        d = np.round(rng.multivariate_normal(np.full(points, shift), cov, size=(k, n)) / grid) * grid  # [k, n, p]
        m = d.mean(1)
        half = tq * d.std(1, ddof=1) / np.sqrt(n) if n > 1 else np.full_like(m, np.inf)
        idx = rng.integers(0, n, size=(k, resamples, n))
        boot = np.take_along_axis(d[:, None], idx[..., None], axis=2).mean(2)  # [k, resamples, p]
        a = (1 - EQ_CONFIDENCE) / 2
        lo, hi = np.quantile(boot, a, axis=1), np.quantile(boot, 1 - a, axis=1)
        ok = (np.minimum(lo, m - half) > -delta) & (np.maximum(hi, m + half) < delta)
        inside += int(ok.all(axis=1).sum())
    return inside / sims


def pairs_needed(sigma: float, delta: float = DELTA, points: int = 2, lo: int = PILOT_PAIRS,
                 hi: int = MAX_PAIRS, power: float = TARGET_POWER, **kw) -> tuple[int, float]:
    """(n, its power): the smallest n in [lo, hi] with `tost_power(sigma, n)` >= `power`, else (hi, its power)."""
    for n in range(lo, hi + 1):
        p = tost_power(sigma, n, delta, points=points, **kw)
        if p >= power:
            return n, p
    return hi, p


def _success(curve: list[dict], update: int) -> float:
    for q in curve:
        if q["update"] == update:
            return q["success"]
    raise ValueError(f"no evaluation at update {update}: {[q['update'] for q in curve]}")


def equivalence(curves: dict[str, dict[int, list[dict]]], seeds: list[int] | tuple[int, ...], iterations: int,
                delta: float = DELTA, pilot: int = PILOT_PAIRS, max_pairs: int = MAX_PAIRS,
                baseline: str = "sync", power_kw: dict | None = None) -> dict:
    """The equivalence verdict of every async arm (the rule above).

    curves: {arm: {seed: [{'update', 'success', ...} per eval point]}}; seeds: the protocol's seed list, in
    order (the pilot is its first `pilot`, the verdict uses its first n). -> {'plan': {...}, 'verdicts': [...]}"""
    arms = [a for a in curves if a != baseline]
    some = next((c for by in curves.values() for c in by.values()), None)
    updates = [q["update"] for q in some] if some else []
    late = [u for u in updates if u >= iterations / 2]
    last = max(updates) if updates else None

    def diffs(arm, use):
        return {u: [_success(curves[arm][s], u) - _success(curves[baseline][s], u) for s in use] for u in late}

    have = lambda arm, use: all(s in curves.get(arm, {}) and s in curves.get(baseline, {}) for s in use)  # noqa: E731
    plan: dict = {"pilot_seeds": list(seeds[:pilot]), "delta": delta, "late_updates": late}
    if len(seeds) < pilot or not late or not all(have(a, seeds[:pilot]) for a in arms):
        plan["pairs"] = None
        why = f"the pilot (the first {pilot} seeds of every arm) is incomplete"
        return {"plan": plan, "verdicts": [{"arm": a, "verdict": "NOT EVALUATED", "reason": why} for a in arms]}
    sds = {a: {u: float(np.std(v, ddof=1)) for u, v in diffs(a, seeds[:pilot]).items()} for a in arms}
    sigma = max(v for by in sds.values() for v in by.values())
    n, pw = pairs_needed(max(sigma, 1e-6), delta, points=len(late), lo=pilot, hi=max_pairs, **(power_kw or {}))
    use = list(seeds[:n])
    plan |= {"pilot_sd": sds, "sigma": sigma, "pairs": n, "power_at_0": pw, "seeds": use}
    verdicts = []
    for arm in arms:
        v: dict = {"arm": arm, "pairs": n, "seeds": use}
        if not have(arm, use):
            present = sum(s in curves.get(arm, {}) and s in curves.get(baseline, {}) for s in use)
            verdicts.append(v | {"verdict": "NOT EVALUATED", "reason": f"{present} of the {n} pairs the plan fixed"})
            continue
        lift = lambda a: [_success(curves[a][s], last) - _success(curves[a][s], 0) for s in use]  # noqa: E731
        v["sync_lift"] = interval(lift(baseline), LIFT_CONFIDENCE) | {"values": lift(baseline)}
        v["arm_lift"] = interval(lift(arm), LIFT_CONFIDENCE) | {"values": lift(arm)}
        v["points"] = []
        for u, d in diffs(arm, use).items():
            iv = interval(d, EQ_CONFIDENCE)
            v["points"].append({"update": u, "values": d, **iv, "inside": -delta < iv["low"] and iv["high"] < delta})
        if not v["sync_lift"]["low"] > 0:
            sl = v["sync_lift"]
            v |= {"verdict": "VOID", "reason": f"sync's lift {sl['mean']:+.3f} [{sl['low']:+.3f}, {sl['high']:+.3f}] "
                                               "does not lie above 0: the workload has no power"}
        elif all(q["inside"] for q in v["points"]):
            v |= {"verdict": "EQUIVALENT", "reason": f"every 90% interval from update {late[0]} on inside "
                                                      f"(-{delta:g}, +{delta:g})"}
        else:
            out = [q["update"] for q in v["points"] if not q["inside"]]
            below = [q["update"] for q in v["points"] if q["high"] < 0]
            v |= {"verdict": "NOT EQUIVALENT", "reason": f"interval not inside (-{delta:g}, +{delta:g}) at update(s) "
                  f"{out}" + (f"; entirely below 0 at {below}" if below else "")}
        verdicts.append(v)
    return {"plan": plan, "verdicts": verdicts}


# `async_protocol.Protocol` fields added after runs were saved, with the value every earlier run had: a record without
# one reads as that value (physics_impl: 2026-11-28; every protocol before it pinned MJX in its config)
PROTOCOL_FIELDS_ADDED = {"physics_impl": "jax"}


# Seeds whose runs started from a checkpoint that can no longer be rebuilt: the recipe's output depends on the
# machine it runs on (results/async/preregistration_45d_amendment.md).
# workload -> {seed: that checkpoint's fingerprints};
# every arm of such a seed must have started from it, every other seed from one common checkpoint.
_EQ45D_FIRST_INIT = {"init_params_sha256": "f68db0dd2f9ba84763258ae77afcf99d405bb4ba55eebf8cca0984021936d4d4",
                     "init_bridge_sha256": "38485244b00c0c09d70ecd373c409c6e737164ad6cf200da295c4ed99057cc8d"}
_EQ45D_REBUILT_INIT = {"init_params_sha256": "5830f5d090b462f52d29da1e57d04daf325906006a4aad62331281b44e26fa8c",
                       "init_bridge_sha256": "496136a97d1f8cab9b9c3a59c627eed05c9f2ae1ff362609cea0ea30fa4320f9"}
# (the rebuilt one is kept in git history: results/async/init/README.md says how to restore it)
PINNED_INITS: dict[str, dict[int, dict]] = {"eq45d-grpo-s2-lr": dict.fromkeys(range(132, 140), _EQ45D_FIRST_INIT)
                                            | dict.fromkeys(range(140, 148), _EQ45D_REBUILT_INIT)}


def load_dir(path: str) -> tuple[dict, dict[str, dict[int, list[dict]]]]:
    """(protocol, curves) of the per-seed run JSONs `<arm>-seed<k>.json` in `path` (`async_protocol.run_one`'s
    records). Refuses runs of another protocol, another starting checkpoint (`PINNED_INITS` excepted), or an arm
    whose seeds differ in config. A protocol field added since a run was saved (`PROTOCOL_FIELDS_ADDED`) reads as
    its earlier value. The protocol gets `starting_checkpoints`: {init_params_sha256: [seeds]}."""
    import glob
    import json
    import os

    files = sorted(glob.glob(os.path.join(path, "*-seed*.json")))
    if not files:
        raise ValueError(f"no <arm>-seed<k>.json in {path}")
    proto, init, config, curves, inits = None, None, {}, {}, {}
    for f in files:
        with open(f) as fh:
            rec = json.load(fh)
        fp = rec.get("fingerprints", {})
        rec["protocol"] = PROTOCOL_FIELDS_ADDED | rec["protocol"]
        proto = proto or rec["protocol"]
        if rec["protocol"] != proto:
            raise ValueError(f"{f}: another protocol than {files[0]}")
        seed, got = int(rec["seed"]), fp.get("init_params_sha256")
        pinned = PINNED_INITS.get(proto["name"], {}).get(seed)
        if pinned is not None:
            if got != pinned["init_params_sha256"]:
                raise ValueError(f"{f}: seed {seed} started from {pinned['init_params_sha256']} in its other arms "
                                 f"(PINNED_INITS), this run from {got}")
        else:
            init = init or got
            if got != init:
                raise ValueError(f"{f}: another starting checkpoint ({got} vs {init})")
        inits.setdefault(got, set()).add(seed)
        if config.setdefault(rec["arm"], fp.get("config_sha256")) != fp.get("config_sha256"):
            raise ValueError(f"{f}: another config than the arm's other seeds")
        curves.setdefault(rec["arm"], {})[seed] = rec["curve"]
    return proto | {"starting_checkpoints": {h: sorted(s) for h, s in inits.items()}}, curves


def report_equivalence(result: dict) -> str:
    """The verdicts as text (markdown)."""
    plan = result["plan"]
    lines = []
    if plan.get("pairs") is None:
        lines.append(f"Sample size: not fixed yet (pilot seeds {plan['pilot_seeds']}).")
    else:
        lines.append(f"Sample size: pilot sd of the paired differences {plan['sigma']:.3f} (largest over arms and "
                     f"updates {plan['late_updates']}) -> {plan['pairs']} pairs (simulated power "
                     f"{plan['power_at_0']:.2f} at a true difference of 0), seeds {plan['seeds']}.")
    f = lambda d: f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"  # noqa: E731
    for v in result["verdicts"]:
        lines += ["", f"**{v['arm']}: {v['verdict']}** ({v['reason']})"]
        if "points" in v:
            lines += ["", "| update | per-seed differences async - sync | mean [90% interval] | bootstrap | t "
                      "| inside |", "|---|---|---|---|---|---|"]
            lines += [f"| {q['update']} | " + ", ".join(f"{x:+.3f}" for x in q["values"]) + f" | {f(q)} | "
                      f"[{q['boot_low']:+.3f}, {q['boot_high']:+.3f}] | [{q['t_low']:+.3f}, {q['t_high']:+.3f}] | "
                      + ("yes" if q["inside"] else "no") + " |" for q in v["points"]]
            lines += ["", f"sync lift (last eval - update 0), 95%: {f(v['sync_lift'])}; {v['arm']} lift: "
                      f"{f(v['arm_lift'])}"]
    return "\n".join(lines) + "\n"


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line of the verdict's recomputation."""

    runs_dir: tyro.conf.Positional[str]  # a workload's per-seed JSONs, e.g. results/async/runs/eq45-grpo-tokens-factor
    json: str = ""  # also write the plan and the verdicts as JSON here


def main(argv=None) -> dict:
    """`python -m experiments.async_stats DIR [--json OUT]`: the equivalence verdicts from DIR's per-seed JSONs."""
    import json

    from vlajax.shared import cli

    a = cli.parse(Args, argv, description="the equivalence verdicts from per-seed run JSONs")
    try:
        proto, curves = load_dir(a.runs_dir)
    except (ValueError, KeyError, OSError) as e:
        cli.error(f"{a.runs_dir}: {e}")
    if not proto.get("delta"):
        cli.error(f"{a.runs_dir}: protocol {proto.get('name')!r} has no equivalence margin (delta); "
                  "its criterion is the paired one (`async_sample_efficiency.py --report-only`)")
    result = equivalence(curves, proto["seeds"], proto["iterations"], proto["delta"], proto["pilot_pairs"],
                         proto["max_pairs"])
    result["protocol"] = proto["name"]
    print(f"{proto['name']}: runs " + ", ".join(f"{arm} {sorted(by)}" for arm, by in curves.items()))
    if len(proto["starting_checkpoints"]) > 1:  # every arm of a seed shares one (load_dir checks)
        print("starting checkpoints (init_params_sha256): " + "; ".join(
            f"{h[:8]}... seeds {s}" for h, s in proto["starting_checkpoints"].items()))
    print(report_equivalence(result), end="")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
