"""Issue 44.5 fifth try, descriptive and post hoc (no criterion): prod8's before-pool validation (`--group-cores
--jitter --warmup 2`) with one C MuJoCo cost quantity at a time taken from the after-pool -- which quantity moves
the C rows. From the repository root:

    JAX_PLATFORMS=cpu .venv/bin/python results/bench/plan_44/swap_c_costs.py   # -> swap_c_costs_log.txt's lines
"""

import dataclasses

import research.planner.validate as V
from research.planner.profile import load as real_load

P = "results/bench/plan_profile_prod8"
BEFORE = tuple(f"{P}/{s}" for s in ("b1", "b2", "b3"))
AFTER = tuple(f"{P}/{s}" for s in ("a1", "a2", "a3"))
FIELDS = ["concurrency", "env_compute_s", "infer_s", "host_sim_s", "parallelism", "collect_s", "train_update_s",
          "cores", "jitter", "prep_s_per_sample", "stream_item_s", "stream_finish_s", "sync_s"]
ca = real_load(AFTER, "c", "median", "probed")


def run(swap: list[str]) -> None:
    def load(run_dir, physics, statistic, host):  # the C costs of the before-pool, `swap` from the after-pool
        c = real_load(run_dir, physics, statistic, host)
        return dataclasses.replace(c, **{f: getattr(ca, f) for f in swap}) if physics == "c" else c

    V.load = load
    r = V.validate(["results/bench/async_production_planval8.json"], BEFORE, seeds=5, jitter=True, warmup=2,
                   group_cores=True)
    err = {g: [round(x["error"] * 100) for x in r["rows"] if x["regime"] == g] for g in ("cpu-sim", "emulated-farm")}
    print(f"{'+'.join(swap) or 'none':24s} median {r['median_abs_error'] * 100:5.1f}%  cpu-sim {err['cpu-sim']}  "
          f"farm {err['emulated-farm']}", flush=True)


if __name__ == "__main__":
    cb = real_load(BEFORE, "c", "median", "probed")
    for f in FIELDS:
        print(f"{f}: before {str(getattr(cb, f))[:80]} | after {str(getattr(ca, f))[:80]}")
    run([])
    for f in ["concurrency", "env_compute_s", "infer_s", "host_sim_s", "parallelism", "train_update_s", "collect_s",
              "jitter"]:
        run([f])
    run(["concurrency", "env_compute_s"])
    run(FIELDS)
