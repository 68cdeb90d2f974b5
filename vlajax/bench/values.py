"""`python -m vlajax.bench values --json results/values/all.json [--commands rl sft ...] [--subset K/N]`.

Every value a command offers, run to its first update -- or refused before anything compiles. The values
come from the schema, never from a list here: every `Literal[...]` and `bool` field of the config sections
a command reads (`SECTIONS`: `TrainConfig` for `demos`, `sft`, `rl`, `eval`; `vlajax.serve.app.ServeArgs`
for `serve`), each of its values alone, plus the products of the field groups in `PAIRINGS` (the pairings
that reach different code: pipeline placement x streaming, physics x renderer on this host's device kind,
head x algorithm x sampler). A field added to a section tomorrow is in tomorrow's sweep.

Each case is a real command line at a tiny size (`BASES`: a small preset, 1 step / 1 iteration / 1
episode): it is first validated in this process exactly as `vlajax.train.main` does before it imports
anything (`parse` + `preflight`); a `ConfigError` there is `refused` (its one line kept; nothing was
compiled). An accepted case runs in a subprocess (`python -m vlajax.train COMMAND ...`; `python -m
vlajax.serve` + one websocket request for `serve`) to its first update (first episode for `eval`, first
answered request for `serve`) and ends as `ran` (exit 0), `traceback` (a Python traceback in its output),
`refused-late` (exit 2 with an `error:` line, but after validation accepted it), `failed` (any other exit),
`timeout` or `memory` (killed past `--timeout-s` or past `--max-rss-gb` for its process tree). Cases whose
validated configs are identical run once (`same_run_as`). `eval` and `serve` need a checkpoint and `sft` a
dataset: the sweep makes them first with its own base runs (demos base -> sft base), recorded under
`prerequisites`.

JSON: the host (backend, device kind, loadavg before / after, git HEAD), per case its command line,
outcome, seconds and error line (plus its log's tail when it did not run), and per command the counts of
each outcome and the total seconds. `--subset K/N` keeps the cases whose name hashes (crc32) to K mod N;
`--list` prints the cases without running any.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import typing
import zlib
from typing import Any

from vlajax.bench import write_result

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMANDS = ("demos", "sft", "rl", "eval", "serve")
# the config sections each command reads (serve: the fields of its own ServeArgs)
SECTIONS: dict[str, tuple[str, ...]] = {
    "demos": ("env", "data"),
    "sft": ("model", "data", "sft", "checkpoint", "logging"),
    "rl": ("model", "env", "rl", "pipeline", "checkpoint", "logging"),
    "eval": ("env", "sft"),
    "serve": ("serve",),
}
# field groups whose joint values reach different code: every combination is a case
PAIRINGS: dict[str, tuple[tuple[str, ...], ...]] = {
    "demos": (("env.physics_impl", "env.render_backend"),),
    "rl": (("pipeline.placement", "pipeline.streaming"), ("env.physics_impl", "env.render_backend"),
           ("model.action_head", "rl.algo", "model.flow_sampler")),
    "eval": (("env.physics_impl", "env.render_backend"),),
}
_EPISODE = {"env.task": "goal/press_button", "env.num_envs": 2, "env.episode_length": 20}
# command -> base name -> (preset, overrides); the tiny size that reaches the first update
BASES: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {
    "demos": {"main": ("sft-tiny", {"env.task": "goal/press_button", "env.num_envs": 2,
                                    "data.episodes_per_task": 1})},
    "sft": {"main": ("sft-tiny", {"sft.num_steps": 1, "sft.eval_every": -1, "data.batch_size": 4})},
    "rl": {"main": ("rl-debug", {"rl.num_iterations": 1, "rl.eval_every": -1}),
           # the VLA from pixels (model.* values; the head / algorithm / sampler and physics / renderer pairings)
           # (the smallest VLA that is still one: 4 patch tokens per camera, one block per tower, 2 denoising steps)
           "pixels": ("rl-debug", {"rl.num_iterations": 1, "rl.eval_every": -1, "env.obs_mode": "pixels",
                                   "env.num_envs": 2, "env.image_size": 16, "model.image_size": 16,
                                   "model.depth": 1, "model.vit_depth": 1, "model.num_denoise_steps": 2,
                                   "rl.rollout_length": 2, "rl.num_minibatches": 1, "rl.group_size": 2,
                                   "model.flow_sampler": "flow_sde", "model.value_head": "prefix"}),
           "async": ("rl-async-debug", {"rl.num_iterations": 1, "rl.eval_every": -1})},
    "eval": {"main": ("sft-tiny", {**_EPISODE, "sft.eval_episodes_per_task": 1})},
    "serve": {"main": ("", {"max_batch": 1})},
}
# (command, section or pairing's first field) -> the base its values run on (else 'main')
SECTION_BASE = {("rl", "model"): "pixels", ("rl", "pipeline"): "async", ("rl", "pipeline.placement"): "async",
                ("rl", "env.physics_impl"): "pixels", ("rl", "model.action_head"): "pixels"}
BASE_ORDER = ("main", "async", "pixels")  # cheapest first within a command
OUTCOMES = ("ran", "refused", "traceback", "refused-late", "failed", "timeout", "memory")
FAILURES = ("traceback", "refused-late", "failed", "timeout", "memory")


# ------------------------------------------------------------------------------------------
# The cases, from the schema
# ------------------------------------------------------------------------------------------


def schema_fields(cls: type, prefix: str = "") -> list[tuple[str, tuple]]:
    """(dotted field, its offered values) for every `Literal` and `bool` field of dataclass `cls`, recursively."""
    hints = typing.get_type_hints(cls)
    out: list[tuple[str, tuple]] = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        if dataclasses.is_dataclass(t):
            out += schema_fields(t, prefix + f.name + ".")
        elif typing.get_origin(t) is typing.Literal:
            out.append((prefix + f.name, typing.get_args(t)))
        elif t is bool:
            out.append((prefix + f.name, (True, False)))
    return out


def _serve_args() -> type:
    from vlajax.serve.app import ServeArgs

    return ServeArgs


def command_fields(command: str, schema: type | None = None) -> list[tuple[str, tuple]]:
    """The (field, values) of the sections `command` reads; `schema` replaces `TrainConfig` (tests)."""
    if command == "serve":
        return [(f"serve.{k}", v) for k, v in schema_fields(schema or _serve_args())]
    from vlajax.config.schema import TrainConfig

    return [(k, v) for k, v in schema_fields(schema or TrainConfig) if k.split(".")[0] in SECTIONS[command]]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str  # 'rl.algo=grpo' or 'model.action_head=tokens,rl.algo=grpo,model.flow_sampler=ode'
    command: str
    base: str  # a key of BASES[command]
    values: tuple[tuple[str, Any], ...]  # (dotted field, value) set on top of the base


def _name(values) -> str:
    return ",".join(f"{k}={'true' if v is True else 'false' if v is False else v}" for k, v in values)


def cases(commands=COMMANDS, schema: type | None = None) -> list[Case]:
    """Every value of every field the commands read, alone, then every combination of each pairing."""
    out: list[Case] = []
    for command in commands:
        fields = dict(command_fields(command, schema))
        for field, values in fields.items():
            base = SECTION_BASE.get((command, field.split(".")[0]), "main")
            out += [Case(_name([(field, v)]), command, base, ((field, v),)) for v in values]
        for group in PAIRINGS.get(command, ()):
            if not all(f in fields for f in group):
                continue
            base = SECTION_BASE.get((command, group[0]), "main")
            for combo in itertools.product(*(fields[f] for f in group)):
                values = tuple(zip(group, combo, strict=True))
                out.append(Case(_name(values), command, base, values))
    seen: set[tuple[str, str]] = set()
    unique = []
    for c in out:  # a single value on the pairing's base is also one of its combinations' parts: keep both once
        if (c.command, c.name + "@" + c.base) not in seen:
            seen.add((c.command, c.name + "@" + c.base))
            unique.append(c)
    return unique


def subset(all_cases: list[Case], k: int, n: int) -> list[Case]:
    """The cases whose `command:name` hashes (crc32) to `k` mod `n`: a stable, spread slice."""
    return [c for c in all_cases if zlib.crc32(f"{c.command}:{c.name}".encode()) % n == k]


# ------------------------------------------------------------------------------------------
# Command lines
# ------------------------------------------------------------------------------------------


def _flag(field: str, value: Any) -> list[str]:
    """`--section.field VALUE`, or a boolean's flag `--section.field` / `--section.no-field`."""
    dotted = field.removeprefix("serve.").replace("_", "-")
    if isinstance(value, bool):
        head, _, last = dotted.rpartition(".")
        return ["--" + (head + "." if head else "") + ("" if value else "no-") + last]
    return ["--" + dotted, str(value)]


def argv(case: Case, work: str, prereq: dict[str, str]) -> list[str]:
    """The case's arguments after `python -m vlajax.train COMMAND` (or `python -m vlajax.serve`)."""
    preset, base = BASES[case.command][case.base]
    merged = {**base, **dict(case.values)}
    out_dir = os.path.join(work, "runs", f"{case.command}-{zlib.crc32(case.name.encode()):08x}-{case.base}")
    if case.command == "serve":
        return ["--checkpoint", prereq["checkpoint"], "--port", "0",
                *itertools.chain.from_iterable(_flag(k, v) for k, v in merged.items())]
    args = ["--preset", preset, "--output-dir", out_dir, "--compilation-cache-dir", prereq.get("cache", "")]
    if case.command == "demos":
        merged.setdefault("data.dataset_dir", os.path.join(out_dir, "demos"))
    if case.command == "sft":
        merged.setdefault("data.dataset_dir", prereq["dataset"])
    if case.command == "eval":
        merged.setdefault("checkpoint.dir", prereq["checkpoint"])
    return args + list(itertools.chain.from_iterable(_flag(k, v) for k, v in merged.items()))


def validate(command: str, args: list[str]) -> tuple[str, str, Any]:
    """What `vlajax.train.main` checks before it imports the command: ('ok', '', config) or
    ('refused', its error line, None); any other exception is ('traceback', its line, None)."""
    from vlajax.config.schema import ConfigError
    from vlajax.train import parse, preflight

    if command == "serve":
        import tyro

        from vlajax.serve.app import ServeArgs

        try:
            a = tyro.cli(ServeArgs, args=args)
            a.check()
        except ValueError as e:
            return "refused", f"error: {e}", None
        except SystemExit as e:
            if e.code != 2:
                raise
            return "refused", "error: the command line parser refused it (exit 2)", None
        return "ok", "", a
    try:
        cfg = parse(command, args)
        preflight(cfg, command)
    except ConfigError as e:
        return "refused", f"error: {e}", None
    except SystemExit as e:  # tyro's own refusal of a value (exit 2); any other exit is this sweep's
        if e.code != 2:
            raise
        return "refused", "error: the command line parser refused it (exit 2)", None
    except Exception as e:  # noqa: BLE001 (a crash in validation is what the sweep reports)
        return "traceback", f"{type(e).__name__}: {e}", None
    return "ok", "", cfg


def _config_key(command: str, cfg: Any) -> str:
    """Identical keys = identical runs (the output directory aside)."""
    if command == "serve":
        return repr(dataclasses.replace(cfg, checkpoint=""))
    return repr(dataclasses.replace(cfg, output_dir="", name=""))


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
    args = argv(case, work, prereq)
    module = "vlajax.serve" if case.command == "serve" else "vlajax.train"
    cmd = [sys.executable, "-m", module, *([] if case.command == "serve" else [case.command]), *args]
    row: dict[str, Any] = {"name": case.name, "command": case.command, "base": case.base,
                           "cmd": " ".join(["python", "-m", module, *cmd[3:]])}
    t0 = time.monotonic()
    verdict, line, cfg = validate(case.command, args)
    row["validated_s"] = round(time.monotonic() - t0, 3)
    if verdict != "ok":
        return {**row, "outcome": verdict, "seconds": row["validated_s"], "error": line, "_key": None}
    row["_key"] = _config_key(case.command, cfg)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log_path = os.path.join(work, "logs", f"{case.command}-{zlib.crc32(case.name.encode()):08x}-{case.base}.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    state: dict[str, Any] = {}
    goal = _serve_goal(state) if case.command == "serve" else _failed_goal(case.command, state)
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
        outcome = "refused-late"
    else:
        outcome = "failed"
    row.update(outcome=outcome, seconds=round(seconds, 1), exit=rc,
               error="" if outcome == "ran" else (state.get("error") or _error_line(lines, case.command)))
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
    demos = Case("prerequisite: dataset", "demos", "main", ())
    row = run_case(demos, work, prereq, timeout_s=timeout_s, max_rss=max_rss)
    rows.append(row)
    prereq["dataset"] = os.path.join(work, "runs", f"demos-{zlib.crc32(demos.name.encode()):08x}-main", "demos")
    if set(commands) & {"eval", "serve"}:
        sft = Case("prerequisite: checkpoint", "sft", "main", ())
        rows.append(run_case(sft, work, prereq, timeout_s=timeout_s, max_rss=max_rss))
        prereq["checkpoint"] = os.path.join(work, "runs", f"sft-{zlib.crc32(sft.name.encode()):08x}-main",
                                            "checkpoints")
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
            verdict, _, cfg = validate(case.command, argv(case, work, prereq))
            key = _config_key(case.command, cfg) if verdict == "ok" else None
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


def main(argv_: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m vlajax.bench values", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default="", help="write the result here (e.g. results/values/all.json)")
    p.add_argument("--commands", nargs="+", choices=COMMANDS, default=list(COMMANDS))
    p.add_argument("--subset", default="", help="K/N: only the cases whose name hashes to K mod N")
    p.add_argument("--only", nargs="+", default=[], help="only the cases with these names")
    p.add_argument("--bases", nargs="+", choices=BASE_ORDER, default=list(BASE_ORDER),
                   help="only the cases on these bases (main: the command's tiny preset; async / pixels: rl's)")
    p.add_argument("--list", action="store_true", help="print the cases and exit (nothing runs)")
    p.add_argument("--timeout-s", type=float, default=900.0, help="a run killed past this is 'timeout'")
    p.add_argument("--max-rss-gb", type=float, default=6.0, help="a run whose processes pass this is 'memory'")
    p.add_argument("--work", default="", help="run directories here (default: a temporary one, removed after)")
    p.add_argument("--group-nice", type=int, default=None,
                   help="autogroup niceness of each run's session (-20..19; default: the kernel's, 0)")
    a = p.parse_args(argv_)
    GROUP_NICE["value"] = a.group_nice
    selected = cases(a.commands)
    if a.subset:
        k, _, n = a.subset.partition("/")
        if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
            print(f"error: --subset {a.subset!r} must be K/N with 0 <= K < N", file=sys.stderr)
            return 2
        selected = subset(selected, int(k), int(n))
    if a.only:
        selected = [c for c in selected if c.name in a.only]
    selected = [c for c in selected if c.base in a.bases]
    if a.list:
        for c in selected:
            print(f"{c.command:6s} {c.base:7s} {c.name}")
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
    for command, s in result["summary"].items():
        print(f"{command}: {s['cases']} cases, {s['ran']} ran, {s['refused']} refused, "
              f"{sum(s[o] for o in FAILURES)} failures ({s['traceback']} tracebacks), {s['seconds']} s")
    return 1 if any(s["failures"] for s in result["summary"].values()) else 0
