"""`python -m research.planner ceiling RUN_DIR [RUN_DIR ...]`: the host-core ceiling of any async speed-up.

From a `plan profile` run (`profile.json`: the workload's pieces timed alone on this host, each
with the cores its call keeps busy, `parallelism`), per simulator:

- `sync_cores` u = (T_collect p_collect + T_update p_update) / (T_collect + T_update): the cores a
  synchronous iteration (collect, then update) keeps busy on average;
- `core_bound` = host cores / u: no mode that does the same work can be faster than that work
  spread over every core all the time (the ceiling of *any* async mode on this host);
- `overlap_bound` = (T_collect + T_update) / max(T_collect, T_update, core-seconds / host cores):
  what overlapping the update with an unchanged collect (`train_async`) can give at best -- the
  longer piece, or the cores, whichever binds.

T_collect is the fused collect of one update's decisions, T_update one update (both medians of
the profile's timed calls), p their measured parallelism. A measured speed-up above the bound
is noise or a changed workload, not an overlap. Everything here is arithmetic on measured
figures; nothing is run.
"""

from __future__ import annotations

import json
import pathlib
import sys

__all__ = ["ceiling", "main"]


def ceiling(profile: dict) -> dict[str, dict[str, float]]:
    """{physics: {collect_s, update_s, collect_cores, update_cores, sync_cores, core_bound, overlap_bound,
    host_cores}} of one `profile.json`."""
    host = float(profile["machine"].get("cores") or profile["machine"]["cpu_count"])
    out = {}
    for physics, c in profile["costs"].items():
        par = dict(c["parallelism"])
        tc, tu = float(c["collect_s"][0][1]), float(c["train_update_s"][0][1])
        pc, pu = float(par["collect"]), float(par["train"])
        core_s = tc * pc + tu * pu
        out[physics] = {"collect_s": tc, "update_s": tu, "collect_cores": pc, "update_cores": pu,
                        "sync_cores": core_s / (tc + tu), "host_cores": host,
                        "core_bound": host * (tc + tu) / core_s,
                        "overlap_bound": (tc + tu) / max(tc, tu, core_s / host)}
    return out


def main(argv: list[str]) -> int:
    if not argv or any(a.startswith("-") for a in argv):
        print("usage: python -m research.planner ceiling RUN_DIR [RUN_DIR ...]  (directories with profile.json)",
              file=sys.stderr)
        return 2
    missing = [d for d in argv if not (pathlib.Path(d) / "profile.json").is_file()]
    if missing:
        print(f"error: no profile.json in {', '.join(missing)} (python -m research.planner profile --out DIR)",
              file=sys.stderr)
        return 2
    for d in argv:
        prof = json.loads((pathlib.Path(d) / "profile.json").read_text())
        for physics, b in ceiling(prof).items():
            print(json.dumps({"profile": d, "physics": physics, "date_utc": prof.get("date_utc"),
                              "loadavg_1m": prof["machine"].get("loadavg_1m"),
                              **{k: round(v, 4) for k, v in b.items()}}), flush=True)
    return 0
