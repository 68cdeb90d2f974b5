"""`python -m vlajax.bench gpu-check --out DIR [--dry-run]`: the one prepared GPU check (docs/gpu.md).

Rows, in order, each with its own time budget and a status `ok`, `skipped: reason` or `failed: error`: pytest,
parity, sft:sft-small, sft:pi0, attention, env:mjx, env:mjwarp, rollout, serve, async, rl:pi0, async:cpu-sim (what
each measures, its sizes and its code: `vlajax.bench.gpu_check_rows`). Every sft row carries the step's memory; the
top-level `memory` list gathers them. Every SFT and RL row carries its model FLOP/s and MFU (`mfu`: over the
device's dense bf16 peak, `vlajax.models.flops`).

One worker process runs the rows (`--worker`); the parent restarts it after a row that overruns its
budget (killed: `failed: timeout`) or crashes, and writes `DIR/gpu_check.json` after every row, so one
failing row never loses the others. A global deadline (`--deadline-s`, default 540 s) skips rows that
no longer fit (their minimum time). `--dry-run`: CPU, tiny sizes, every row exercised; GPU-only parts
are skipped with a reason. Nothing here measures anything itself: it calls the benches and the SFT step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback

from vlajax.bench.gpu_check_rows import DRY, DRY_BUDGET_S, GPU, REPO, ROWS, failed, run_row, skipped
from vlajax.shared import cli

__all__ = ["ROWS", "Args", "main", "worker"]


# ------------------------------------------------------------------------------------------
# The worker: runs the rows in order, one JSON line per start / end
# ------------------------------------------------------------------------------------------


def worker(args: Args) -> int:
    """Run `args.rows` in order, one JSON line per start / end on stdout (the parent reads them)."""
    import jax

    from vlajax.shared import compile_cache

    compile_cache.enable()
    sz = DRY if args.dry_run else GPU
    budgets = _budgets(args)
    out_dir = pathlib.Path(args.out)
    # the children (pytest: its conftest defaults JAX_PLATFORMS to cpu) run on the backend this worker found
    platforms = "cuda,cpu" if jax.default_backend() == "gpu" else "cpu"
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS") or platforms}
    print(json.dumps({"event": "device", "backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
                      "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__,
                      "jaxlib": importlib.metadata.version("jaxlib")}), flush=True)
    no_gpu = not args.dry_run and jax.default_backend() != "gpu"
    for name in args.rows:
        print(json.dumps({"event": "start", "row": name}), flush=True)
        t0 = time.monotonic()
        try:
            result = (skipped(f"no GPU visible to JAX (backend {jax.default_backend()}); --dry-run runs the CPU sizes")
                      if no_gpu else run_row(name, sz, budgets[name], env, out_dir))
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            result = failed(e)
        result = {"status": "ok", **result} if "status" not in result else result
        result["seconds"] = round(time.monotonic() - t0, 1)
        result["load_average_1m"] = round(os.getloadavg()[0], 2)
        print(json.dumps({"event": "end", "row": name, "result": result}, default=str), flush=True)
        jax.clear_caches()
    return 0


# ------------------------------------------------------------------------------------------
# The parent: budgets, deadline, restarts, the JSON
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    out: str = "gpu_check_out"  # folder for gpu_check.json and gpu_check.log (made if missing)
    dry_run: bool = False  # CPU, tiny sizes, every row exercised (GPU-only parts skipped with a reason)
    deadline_s: float = 540.0  # global deadline; rows that no longer fit their minimum time are skipped
    rows: tuple[str, ...] = tuple(r.name for r in ROWS)  # rows to run, in this order
    budget_s: float = 0.0  # > 0: every row's budget (tests); 0: the rows' own
    worker: bool = False  # internal: run the rows in this process


def _budgets(args: Args) -> dict[str, float]:
    """Each row's budget: --budget-s, else its dry-run budget (--dry-run) or its GPU budget."""
    dry = lambda r: r.dry_budget_s or DRY_BUDGET_S
    return {r.name: (args.budget_s or (dry(r) if args.dry_run else r.budget_s)) for r in ROWS}


def _versions() -> dict:
    out = {}
    for pkg in ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda13-plugin", "flax", "optax", "mujoco", "mujoco-mjx",
                "warp-lang", "transformer-engine", "transformer_engine_jax"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[pkg] = importlib.metadata.version(pkg)
    return out


def _sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _pump(stream, lines: queue.Queue) -> None:
    """The worker's output, line by line, then None at its end."""
    for ln in stream:
        lines.put(ln)
    lines.put(None)


def _summary(rows: dict) -> list[dict]:
    """Planner vs XLA vs peak of every SFT step that ran."""
    out = []
    for name, r in rows.items():
        for prec in ("bf16", "te_fp8"):
            m = (r.get(prec) or {}).get("memory")
            if m:
                out.append({"row": name, "precision": prec, **m})
    return out


def main(argv: list[str]) -> int:
    args = cli.parse(Args, argv, prog="python -m vlajax.bench gpu-check", description=__doc__.split("\n\n")[0])
    known = {r.name for r in ROWS}
    bad = [r for r in args.rows if r not in known]
    if bad:
        cli.error(f"--rows: unknown {bad}; available: {', '.join(sorted(known))}")
    if args.deadline_s <= 0 or args.budget_s < 0:
        cli.error("--deadline-s must be > 0 and --budget-s >= 0")
    if args.worker:
        return worker(args)
    out = pathlib.Path(args.out).resolve()  # the worker runs in the repo root
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    deadline = t_start + args.deadline_s
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    if args.dry_run:
        env["JAX_PLATFORMS"] = "cpu"
    head = _sh(["git", "-C", str(REPO), "rev-parse", "HEAD"])
    result = {"benchmark": "gpu_check", "dry_run": args.dry_run,
              "command": "python -m vlajax.bench gpu-check " + " ".join(argv),
              "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "commit": head, "modified": _sh(["git", "-C", str(REPO), "diff", "--name-only", "HEAD"]).split(),
              "gpu": _sh(["nvidia-smi", "-L"]), "cpu_count": os.cpu_count(), "versions": _versions(),
              "te_importable": importlib.util.find_spec("transformer_engine") is not None,
              "warp_importable": importlib.util.find_spec("warp") is not None,
              "load_average_1m_start": round(os.getloadavg()[0], 2), "deadline_s": args.deadline_s,
              "sizes": dataclasses.asdict(DRY if args.dry_run else GPU), "device": None, "rows": {}}
    budgets = _budgets(args)
    mins = {r.name: min(r.min_s, budgets[r.name]) for r in ROWS}
    todo = list(args.rows)
    log = open(out / "gpu_check.log", "a", buffering=1)  # noqa: SIM115 (closed below)

    def save():
        result["memory"] = _summary(result["rows"])
        result["seconds"] = round(time.monotonic() - t_start, 1)
        tmp = out / "gpu_check.json.tmp"
        tmp.write_text(json.dumps(result, indent=1, default=str))
        os.replace(tmp, out / "gpu_check.json")

    def note(msg: str):
        print(f"[gpu-check] {msg}", flush=True)
        log.write(f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}\n")

    note(f"rows {todo}; deadline {args.deadline_s:.0f} s; {'dry run (CPU)' if args.dry_run else 'GPU sizes'}")
    while todo:
        # skip what no longer fits, then run the rest in one worker until it ends or a row overruns
        while todo and deadline - time.monotonic() < mins[todo[0]]:
            name = todo.pop(0)
            result["rows"][name] = skipped(f"{deadline - time.monotonic():.0f} s left of the {args.deadline_s:.0f} s "
                                           f"deadline, the row needs {mins[name]:.0f} s")
            note(f"{name}: {result['rows'][name]['status']}")
        if not todo:
            break
        cmd = [sys.executable, "-m", "vlajax.bench", "gpu-check", "--worker", "--out", str(out),
               "--budget-s", str(args.budget_s), "--rows", *todo] + (["--dry-run"] if args.dry_run else [])
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        running, t_row, stopped = None, time.monotonic(), False
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        while True:
            try:
                ln = lines.get(timeout=0.2)
            except queue.Empty:
                ln = ""
            if ln is None:
                break
            if ln:
                log.write(ln)
                ev = json.loads(ln) if ln.startswith('{"event"') else None
                if ev and ev["event"] == "device":
                    result["device"] = {k: v for k, v in ev.items() if k != "event"}
                elif ev and ev["event"] == "start":
                    running, t_row = ev["row"], time.monotonic()
                    note(f"{running}: started (budget {budgets[running]:.0f} s)")
                elif ev and ev["event"] == "end":
                    result["rows"][ev["row"]] = ev["result"]
                    todo.remove(ev["row"])
                    note(f"{ev['row']}: {ev['result']['status']} in {ev['result']['seconds']} s")
                    running = None
                    save()
                    if todo and deadline - time.monotonic() < mins[todo[0]]:
                        os.killpg(proc.pid, signal.SIGTERM)  # the rest is skipped by the loop above
                        stopped = True
            limit = min(t_row + budgets[running], deadline) if running else deadline
            if time.monotonic() > limit:
                os.killpg(proc.pid, signal.SIGKILL)  # our own worker's group (start_new_session)
                proc.wait()
                if running:
                    result["rows"][running] = {"status": f"failed: timeout: killed after "
                                               f"{time.monotonic() - t_row:.0f} s (budget {budgets[running]:.0f} s)"}
                    todo.remove(running)
                    note(f"{running}: {result['rows'][running]['status']}")
                break
        if proc.poll() is None:
            proc.wait()
        if running and running in todo and not stopped:  # the worker died inside a row (a crash, not an exception)
            result["rows"][running] = {"status": f"failed: worker exited {proc.returncode} inside the row "
                                                 "(see gpu_check.log)"}
            todo.remove(running)
            note(f"{running}: {result['rows'][running]['status']}")
        elif proc.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL) and todo and running is None:
            for name in todo:  # it failed before its first row (an import): every remaining row says so
                result["rows"][name] = {"status": f"failed: worker exited {proc.returncode} before the row "
                                                  "(see gpu_check.log)"}
            todo = []
        save()
    save()
    log.close()
    statuses = {k: v["status"] for k, v in result["rows"].items()}
    print(json.dumps({"gpu_check": str(out / "gpu_check.json"), "rows": statuses}, indent=1))
    return 1 if any(s.startswith("failed") for s in statuses.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
