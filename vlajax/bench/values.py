"""`python -m vlajax.bench values --commands all --json results/values/all.json [--subset K/N]`.

Every value a command offers, run to its first update -- or refused before anything compiles. The values
come from the schema, never from a list here (`vlajax.bench.values_cases`): every `Literal[...]`,
`tuple[Literal[...], ...]` and `bool` field a command reads (the `TrainConfig` fields that
`vlajax.preflight.READS` gives `demos`, `sft`, `rl`, `eval`; `vlajax.serve.app.ServeArgs` for `serve`; each
benchmark's `Args` for `bench.NAME`), each of its values alone, plus the products of the field groups in
`PAIRINGS` (the pairings that reach different code: pipeline placement x streaming, physics x renderer on
this host's device kind, head x algorithm x sampler, a benchmark's simulator x head / regime x mode). A field
added to a section tomorrow is in tomorrow's sweep.

Each case is a real command line at a tiny size (`BASES`: a small preset, 1 step / 1 iteration / 1
episode; a benchmark's fewest envs, steps and repeats): it is first validated in this process exactly as the
command does before it imports anything (`parse` + `preflight`; a tool's `Args` and its `_check`); a refusal
there is `refused` (its one line kept; nothing was compiled). An accepted case runs in a subprocess
(`python -m vlajax.train COMMAND ...`; `python -m vlajax.serve` + one websocket request for `serve`;
`python -m vlajax.bench NAME ...`) to its first update (first episode for `eval`, first answered request for
`serve`, its JSON for a benchmark) and ends as `ran` (exit 0), `traceback` (a Python traceback in its output),
`refused-late` (exit 2 with an `error:` line, but after validation accepted it; for a benchmark, whose own
checks run first thing in its `main`, that is `refused`), `failed` (any other exit), `timeout` or `memory`
(killed past `--timeout-s` or past `--max-rss-gb` for its process tree). Cases whose validated configs are
identical run once (`same_run_as`). `eval` and `serve` need a checkpoint and `sft` a dataset: the sweep makes
them first with its own base runs (demos base -> sft base), recorded under `prerequisites`.

JSON: the host (backend, device kind, loadavg before / after, git HEAD), per case its command line,
outcome, seconds and error line (plus its log's tail when it did not run), and per command the counts of
each outcome and the total seconds. `--subset K/N` keeps the cases whose name hashes (crc32) to K mod N;
`--list` prints the cases without running any.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Any, Literal

from vlajax.bench import write_result
from vlajax.bench.values_cases import (
    BASE_ORDER,
    BASES,
    BENCH_COMMANDS,
    COMMANDS,
    PAIRINGS,
    TRAIN_COMMANDS,
    Case,
    argv,
    cases,
    command_fields,
    config_key,
    expand,
    module_argv,
    out_dir,
    schema_fields,
    subset,
    validate,
)
from vlajax.shared import cli

__all__ = ["BASES", "BENCH_COMMANDS", "COMMANDS", "PAIRINGS", "TRAIN_COMMANDS", "argv", "cases",
           "command_fields", "expand", "main", "merge", "out_dir", "schema_fields", "subset", "sweep", "validate"]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUTCOMES = ("ran", "refused", "traceback", "refused-late", "failed", "timeout", "memory")
FAILURES = ("traceback", "refused-late", "failed", "timeout", "memory")


# ------------------------------------------------------------------------------------------
# Running one case
# ------------------------------------------------------------------------------------------


def _tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and its descendants (from /proc)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:")), 0)
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


GROUP_NICE = {"value": None}  # --group-nice: the runs' autogroup niceness (None = the kernel's default)


def _share_nice(pid: int) -> None:
    """Set the run's own session's scheduler autogroup niceness (`--group-nice`): between sessions the kernel
    ranks autogroups, not processes, so a run's `nice` alone does not lower it against other sessions."""
    if GROUP_NICE["value"] is None:
        return
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(GROUP_NICE["value"]))
    except OSError:  # no autogroups here, or not permitted: the runs keep the default share
        pass


def _stop(proc: subprocess.Popen) -> None:
    with_group = True
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        with_group = False
    if not with_group:
        proc.kill()
    proc.wait()


def _run_process(cmd: list[str], log_path: str, timeout_s: float, max_rss: int, env: dict,
                 until=None) -> tuple[str, int | None, float]:
    """Run `cmd` (its own process group, output to `log_path`) -> (how it ended, exit code, seconds).
    `until(proc, log_path)` (serve) returns True once the case's goal is reached; then the process is stopped."""
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True)
        _share_nice(proc.pid)
        end = "exit"
        try:
            while proc.poll() is None:
                if time.monotonic() - t0 > timeout_s:
                    end = "timeout"
                elif max_rss and _tree_rss(proc.pid) > max_rss:
                    end = "memory"
                elif until is not None and until(proc, log_path):
                    end = "goal"
                if end != "exit":
                    break
                time.sleep(0.5)
        finally:  # the goal reached, a limit passed, or this sweep interrupted: the case's processes go too
            if proc.poll() is None:
                _stop(proc)
    return end, proc.returncode, time.monotonic() - t0


def _tail(path: str, n: int = 40) -> list[str]:
    with open(path, errors="replace") as f:
        lines = [line.rstrip("\n") for line in f if "INFO absl" not in line]
    return lines[-n:]


def _error_line(lines: list[str], command: str = "") -> str:
    """The command's own `error: COMMAND: ...` line, else the last `error:` line, else the last line."""
    own = [line for line in lines if line.startswith(f"error: {command}: ")]
    errors = own or [line for line in lines if line.startswith("error:")]
    return errors[-1] if errors else next((line for line in reversed(lines) if line.strip()), "")


def _serve_goal(state: dict):
    """`until` for a server: once it prints its address, send one example request and check the answer."""

    def until(proc, log_path) -> bool:
        with open(log_path, errors="replace") as f:
            url = next((line.split()[1] for line in f if line.startswith("serving ws://")), None)
        if url is None:
            return False
        from vlajax.bench.serve import _example
        from vlajax.serve.client import RemotePolicy

        client = RemotePolicy(url, open_timeout=60, timeout=300)
        try:
            reply = client.infer(_example(client.metadata, 0))
            state["answered"] = "actions" in reply
        except Exception as e:  # noqa: BLE001 (the case's outcome)
            state["answered"], state["error"] = False, f"{type(e).__name__}: {e}"
        finally:
            client.close()
        return True

    return until


def _failed_goal(command: str, state: dict, grace_s: float = 30.0):
    """`until` for a training command: True once its final `error: COMMAND: ...` line (what `vlajax.train.main`
    prints after a traceback) is `grace_s` old and the process still has not exited (a thread keeps it alive)."""

    def until(proc, log_path) -> bool:
        if "error_seen" not in state:
            with open(log_path, errors="replace") as f:
                if any(line.startswith(f"error: {command}: ") for line in f):
                    state["error_seen"] = time.monotonic()
            return False
        state["hung"] = time.monotonic() - state["error_seen"] > grace_s
        return state["hung"]

    return until


def run_case(case: Case, work: str, prereq: dict[str, str], *, timeout_s: float, max_rss: int) -> dict[str, Any]:
    """Validate the case in-process, and run it when accepted. -> its JSON row."""
    os.makedirs(out_dir(case, work), exist_ok=True)  # (a benchmark checks its --json folder exists)
    args = argv(case, work, prereq)
    cmd = [sys.executable, *module_argv(case), *args]
    row: dict[str, Any] = {"name": case.name, "command": case.command, "base": case.base,
                           "cmd": " ".join(["python", *cmd[1:]])}
    t0 = time.monotonic()
    verdict, line, cfg = validate(case.command, args)
    row["validated_s"] = round(time.monotonic() - t0, 3)
    if verdict != "ok":
        return {**row, "outcome": verdict, "seconds": row["validated_s"], "error": line, "_key": None}
    row["_key"] = config_key(case.command, cfg)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log_path = os.path.join(work, "logs", f"{case.command}-{zlib.crc32(case.name.encode()):08x}-{case.base}.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    state: dict[str, Any] = {}
    bench = case.command.startswith("bench.")
    goal = (_serve_goal(state) if case.command == "serve" else None if bench
            else _failed_goal(case.command, state))
    end, rc, seconds = _run_process(cmd, log_path, timeout_s, max_rss, env, goal)
    lines = _tail(log_path)
    with open(log_path, errors="replace") as f:
        text = f.read()
    if end in ("timeout", "memory"):
        outcome = end
    elif case.command == "serve":
        outcome = "ran" if state.get("answered") else ("traceback" if "Traceback (most recent" in text else "failed")
    elif "Traceback (most recent call last)" in text:
        outcome = "traceback"
    elif rc == 0:
        outcome = "ran"
    elif rc == 2 and any(ln.startswith("error:") for ln in lines):
        outcome = "refused" if bench else "refused-late"  # a benchmark checks its values first thing in `main`
    else:
        outcome = "failed"
    row.update(outcome=outcome, seconds=round(seconds, 1), exit=rc,
               error="" if outcome == "ran" else (state.get("error") or _error_line(lines, case.command)))
    if bench and outcome == "refused":
        row["refused_in"] = "main"
    if state.get("hung"):
        row["hung_after_error_s"] = 30.0  # stopped: its error line was printed but the process did not exit
    if outcome != "ran":
        row["log_tail"] = lines
    return row


# ------------------------------------------------------------------------------------------
# The sweep
# ------------------------------------------------------------------------------------------


def _prerequisites(work: str, commands, timeout_s: float, max_rss: int) -> tuple[dict[str, str], list[dict]]:
    """A dataset (demos base) for sft, a checkpoint (sft base on it) for eval and serve."""
    prereq: dict[str, str] = {"cache": os.path.join(work, "jax-cache") if os.environ.get("VLAJAX_VALUES_COLD")
                              else os.path.expanduser("~/.cache/vlajax/jax")}
    rows: list[dict] = []
    if not set(commands) & {"sft", "eval", "serve"}:
        return prereq, rows
    def made(case: Case, path: str) -> dict:
        """The case's row: run it, or, when `--work` already holds its output from a run that exited 0 (its
        `.ok` marker), reuse that."""
        marker = os.path.join(out_dir(case, work), ".ok")
        if os.path.isfile(marker) and os.path.isdir(path) and os.listdir(path):
            return {"name": case.name, "command": case.command, "base": case.base, "outcome": "ran",
                    "seconds": 0.0, "error": "", "reused": path}
        row = run_case(case, work, prereq, timeout_s=timeout_s, max_rss=max_rss)
        if row["outcome"] == "ran":
            open(marker, "w").close()
        return row

    demos = Case("prerequisite: dataset", "demos", "main", ())
    prereq["dataset"] = os.path.join(out_dir(demos, work), "demos")
    rows.append(made(demos, prereq["dataset"]))
    if set(commands) & {"eval", "serve"}:
        sft = Case("prerequisite: checkpoint", "sft", "main", ())
        prereq["checkpoint"] = os.path.join(out_dir(sft, work), "checkpoints")
        rows.append(made(sft, prereq["checkpoint"]))
    return prereq, rows


def _host() -> dict[str, Any]:
    import jax

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    d = jax.devices()[0]
    return {"backend": jax.default_backend(), "device_kind": d.device_kind, "devices": jax.device_count(),
            "cpus": os.cpu_count(), "git_head": head}


def summarize(rows: list[dict]) -> dict[str, dict[str, Any]]:
    """Per command: the count of each outcome, total seconds, and the failing cases' names."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        s = out.setdefault(r["command"], {**{o: 0 for o in OUTCOMES}, "cases": 0, "runs": 0, "seconds": 0.0,
                                          "failures": []})
        s["cases"] += 1
        s[r["outcome"]] += 1
        if "same_run_as" not in r:
            s["seconds"] = round(s["seconds"] + r["seconds"], 1)
            s["runs"] += r["outcome"] not in ("refused",)
        if r["outcome"] in FAILURES:
            s["failures"].append(r["name"])
    return out


def sweep(selected: list[Case], work: str, *, timeout_s: float, max_rss: int, progress=print,
          partial_json: str = "") -> dict[str, Any]:
    """Run every case (commands in order), sharing a run among identical configs. -> the JSON result."""
    commands = sorted({c.command for c in selected}, key=COMMANDS.index)
    result: dict[str, Any] = {"host": _host(), "loadavg_before": list(os.getloadavg()), "started": time.time(),
                              "timeout_s": timeout_s, "max_rss_gb": max_rss / 2**30, "cases": []}
    t0 = time.monotonic()
    prereq, result["prerequisites"] = _prerequisites(work, commands, timeout_s, max_rss)
    for r in result["prerequisites"]:
        r.pop("_key", None)
        progress(f"{r['outcome']:13s} {r['seconds']:7.1f}s {r['command']} {r['name']} {r.get('error', '')}")
    done: dict[str, dict] = {}
    # cheap bases first; within a base the pairings before the single values (they reach the most code)
    order = lambda c: (COMMANDS.index(c.command), BASE_ORDER.index(c.base), len(c.values) == 1)  # noqa: E731
    for case in sorted(selected, key=order):
        needs = {"sft": "dataset", "eval": "checkpoint", "serve": "checkpoint"}.get(case.command)
        if needs and not os.path.exists(prereq.get(needs, "")):
            row = {"name": case.name, "command": case.command, "base": case.base, "outcome": "failed",
                   "seconds": 0.0, "error": f"its prerequisite ({needs}) was not made"}
        else:
            os.makedirs(out_dir(case, work), exist_ok=True)
            verdict, _, cfg = validate(case.command, argv(case, work, prereq))
            key = config_key(case.command, cfg) if verdict == "ok" else None
            if key is not None and key in done:
                first = done[key]
                row = {"name": case.name, "command": case.command, "base": case.base, "outcome": first["outcome"],
                       "seconds": 0.0, "error": first.get("error", ""), "same_run_as": first["name"]}
            else:
                row = run_case(case, work, prereq, timeout_s=timeout_s, max_rss=max_rss)
                if row.pop("_key", None) is not None:
                    done[key] = row
        result["cases"].append(row)
        progress(f"{row['outcome']:13s} {row['seconds']:7.1f}s {case.command} {case.name} @{case.base} "
                 f"{row.get('error', '') if row['outcome'] != 'ran' else ''}")
        if partial_json:
            write_result(partial_json, {**result, "summary": summarize(result["cases"]), "partial": True})
    result["seconds"] = round(time.monotonic() - t0, 1)
    result["loadavg_after"] = list(os.getloadavg())
    result["summary"] = summarize(result["cases"])
    return result


def merge(paths: list[str]) -> dict[str, Any]:
    """One result from several sweeps' JSON files (each a sweep's, or an earlier merge): a later file's row of a
    case (command, name, base) replaces an earlier one (and the cases that shared its run take its outcome);
    each file's command line, host and load kept in `runs`."""
    runs: list[dict] = []
    rows: dict[tuple[str, str, str], dict] = {}
    for path in paths:
        with open(path) as f:
            r = json.load(f)
        for sub in r.get("runs", []):  # an earlier merge: its own sources
            runs.append(sub)
        if "runs" not in r:
            runs.append({"file": os.path.basename(path), "argv": r.get("argv"), "host": r.get("host"),
                         "loadavg_before": r.get("loadavg_before"), "loadavg_after": r.get("loadavg_after"),
                         "partial": r.get("partial", False), "cases": len(r["cases"])})
        for row in r["cases"]:
            rows[(row["command"], row["name"], row["base"])] = {**row, "source": row.get("source",
                                                                                    os.path.basename(path))}
    by_name = {(r["command"], r["name"]): r for r in rows.values() if "same_run_as" not in r}
    for r in rows.values():  # a case that shared a run takes that run's final outcome
        first = by_name.get((r["command"], r.get("same_run_as")))
        if first is not None:
            r.update(outcome=first["outcome"], error=first.get("error", ""))
    # rows of cases today's schema no longer makes (e.g. a flag the command was later found not to read) are kept
    # apart, out of the counts
    current = {(c.command, c.name, c.base) for c in cases(COMMANDS)}
    stale = [r for k, r in rows.items() if k not in current]
    cases_ = sorted((r for k, r in rows.items() if k in current), key=lambda row: COMMANDS.index(row["command"]))
    return {"runs": runs, "cases": cases_, "summary": summarize(cases_), "not_cases_now": stale}


def _print_summary(result: dict) -> None:
    for command, s in result["summary"].items():
        print(f"{command}: {s['cases']} cases, {s['ran']} ran, {s['refused']} refused, "
              f"{sum(s[o] for o in FAILURES)} failures ({s['traceback']} tracebacks), {s['seconds']} s")


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    json: str = ""  # write the result here (e.g. results/values/all.json); rewritten after every case
    # the commands to sweep: all, bench (every benchmark), or any of demos sft rl eval serve bench.NAME
    commands: tuple[str, ...] = ("all",)
    subset: str = ""  # K/N: only the cases whose command:name hashes (crc32) to K mod N
    only: tuple[str, ...] = ()  # only the cases with these names
    # only the cases on these bases (main: the command's tiny preset; async / pixels: rl's)
    bases: tuple[Literal["main", "async", "pixels"], ...] = BASE_ORDER
    list: bool = False  # print the cases and exit (nothing runs)
    timeout_s: float = 900.0  # a run killed past this is 'timeout'
    max_rss_gb: float = 6.0  # a run whose processes pass this is 'memory'
    work: str = ""  # run directories here (default: a temporary one, removed after)
    group_nice: int | None = None  # autogroup niceness of each run's session (-20..19; default: the kernel's, 0)
    # write one result from these sweeps' JSON files to --json (later rows of a case replace earlier ones); no run
    merge: tuple[str, ...] = ()


def main(argv_: list[str]) -> int:
    a = cli.parse(Args, argv_, prog="python -m vlajax.bench values", description=__doc__.split("\n\n")[0])
    try:
        commands = expand(a.commands)
    except ValueError as e:
        cli.error(f"--commands: {e}")
    if a.subset:
        k, _, n = a.subset.partition("/")
        if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
            cli.error(f"--subset {a.subset!r} must be K/N with 0 <= K < N")
    if a.group_nice is not None and not -20 <= a.group_nice <= 19:
        cli.error(f"--group-nice {a.group_nice} must be in -20..19")
    if a.json and not os.path.isdir(os.path.dirname(os.path.abspath(a.json))):
        cli.error(f"--json {a.json}: its directory does not exist")
    if a.merge:
        if not a.json:
            cli.error("--merge writes its result to --json; give --json PATH")
        missing = [p for p in a.merge if not os.path.isfile(p)]
        if missing:
            cli.error(f"--merge: no such file {missing[0]}")
        result = merge(list(a.merge))
        write_result(a.json, result)
        _print_summary(result)
        return 0
    GROUP_NICE["value"] = a.group_nice
    selected = cases(commands)
    if a.subset:
        selected = subset(selected, int(k), int(n))
    if a.only:
        selected = [c for c in selected if c.name in a.only]
    selected = [c for c in selected if c.base in a.bases]
    if a.list:
        for c in selected:
            print(f"{c.command:15s} {c.base:7s} {c.name}")
        print(f"{len(selected)} cases")
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (a run in flight is stopped on the way out)
    work = a.work or tempfile.mkdtemp(prefix="vlajax-values-")
    try:
        result = sweep(selected, work, timeout_s=a.timeout_s, max_rss=int(a.max_rss_gb * 2**30),
                       progress=lambda s: print(s, flush=True), partial_json=a.json)
        result["argv"] = ["python", "-m", "vlajax.bench", "values", *argv_]
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    write_result(a.json, result)
    _print_summary(result)
    return 1 if any(s["failures"] for s in result["summary"].values()) else 0
