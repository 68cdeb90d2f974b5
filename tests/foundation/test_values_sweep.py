"""The run-to-first-update sweep (`python -m vlajax.bench values`, vlajax/bench/values.py): its cases come from
the schema (a new `Literal` value is a new case without any list changing), a rotating slice of every command's
cases is validated in the default suite, and a slice run for real plus the whole sweep run in `make test-all`
(slow)."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import json
import os
import subprocess
import sys
import zlib
from typing import Literal

import pytest

from vlajax.bench import rollout, values
from vlajax.config.schema import RLConfig, TrainConfig


@dataclasses.dataclass(frozen=True)
class _RLWithNewField(RLConfig):
    baseline_kind: Literal["mean", "median", "brand_new"] = "mean"


@dataclasses.dataclass(frozen=True)
class _ConfigWithNewField(TrainConfig):
    rl: _RLWithNewField = _RLWithNewField()


def test_a_new_literal_value_is_a_new_case():
    before = {c.name for c in values.cases(["rl"])}
    after = {c.name for c in values.cases(["rl"], schema=_ConfigWithNewField)}
    assert after - before == {"rl.baseline_kind=mean", "rl.baseline_kind=median", "rl.baseline_kind=brand_new"}
    case = next(c for c in values.cases(["rl"], schema=_ConfigWithNewField) if c.name == "rl.baseline_kind=brand_new")
    assert case.base == "main" and "--rl.baseline-kind" in values.argv(case, "/tmp/w", {})
    assert {c.name for c in values.cases(["sft"], schema=_ConfigWithNewField)} == {
        c.name for c in values.cases(["sft"])}  # sft does not read the rl section


def test_the_cases_cover_every_value_and_the_pairings():
    all_cases = values.cases()
    by_command = {cmd: {c.name for c in all_cases if c.command == cmd} for cmd in values.COMMANDS}
    assert {"rl.algo=grpo", "model.flow_sampler=flow_noise", "pipeline.placement=hybrid", "checkpoint.resume=false",
            "model.action_head=tokens,rl.algo=grpo,model.flow_sampler=ode",
            "env.physics_impl=c,env.render_backend=jax", "pipeline.placement=disaggregated,pipeline.streaming=false",
            } <= by_command["rl"]
    assert "serve.deterministic=false" in by_command["serve"] and "data.video=true" in by_command["demos"]
    assert all(by_command[cmd] for cmd in values.TRAIN_COMMANDS)
    # a benchmark's own options: its Literal, tuple-of-Literal (each value alone) and bool fields, and its pairings
    assert {"heads=tokens", "model=default", "stagger=false", "heads=tokens,physics=c"} <= by_command["bench.rollout"]
    assert {"regimes=emulated-farm,modes=+streaming", "batching=fixed"} <= by_command["bench.async"]
    assert {"physics_impl=c,render=false"} <= by_command["bench.env"]
    assert "dry_run=false" in by_command["bench.gpu-check"] and "worker=true" not in by_command["bench.gpu-check"]
    case = next(c for c in all_cases if c.command == "bench.rollout" and c.name == "heads=tokens,physics=c")
    args = values.argv(case, "/tmp/w", {})
    assert args[args.index("--heads") + 1] == "tokens" and args[args.index("--physics") + 1] == "c"
    # every case's value lands in its command line
    case = next(c for c in all_cases if c.name == "pipeline.streaming=false")
    assert "--pipeline.no-streaming" in values.argv(case, "/tmp/w", {})


@dataclasses.dataclass(frozen=True)
class _BenchArgsWithNewField(rollout.Args):
    samplers: tuple[Literal["euler", "brand_new"], ...] = ("euler",)


def test_a_new_benchmark_option_is_a_new_case():
    names = {c.name for c in values.cases(["bench.rollout"], schema=_BenchArgsWithNewField)}
    assert names - {c.name for c in values.cases(["bench.rollout"])} == {"samplers=euler", "samplers=brand_new"}


def test_commands_expand():
    assert values.expand(["all"]) == list(values.COMMANDS)
    assert values.expand(["bench", "rl"]) == ["rl", *values.BENCH_COMMANDS]
    with pytest.raises(ValueError, match="unknown command"):
        values.expand(["train"])


def test_subsets_partition_the_cases():
    all_cases = values.cases(["rl"])
    parts = [values.subset(all_cases, k, 5) for k in range(5)]
    assert sorted(c.name for p in parts for c in p) == sorted(c.name for c in all_cases)


def test_a_hashed_slice_of_every_command_validates_in_one_line(tmp_path):
    """Today's eighth of every command's cases (crc32 of command:name, rotating by date), validated as the command
    does before it imports anything (no run): each is accepted or refused in one `error:` line; none raises.
    sft / eval / serve get an empty dataset / checkpoint folder (their refusals may name it)."""
    day = datetime.date.today().toordinal()
    prereq = {"dataset": str(tmp_path / "dataset"), "checkpoint": str(tmp_path / "checkpoint"), "cache": ""}
    for d in ("dataset", "checkpoint"):
        os.makedirs(prereq[d])
    today = values.subset(values.cases(), day % 8, 8)
    assert {c.command for c in today} & set(values.TRAIN_COMMANDS)
    for case in today:
        os.makedirs(values.out_dir(case, str(tmp_path)), exist_ok=True)
        verdict, line, _ = values.validate(case.command, values.argv(case, str(tmp_path), prereq))
        assert verdict in ("ok", "refused"), (case, line)
        assert verdict == "ok" or (line.startswith("error: ") and "\n" not in line), (case, line)


# the commands of the default suite's run: no prerequisite run first, a first update in well under a minute here
_RUN_TODAY = ("rl", "demos")


@pytest.mark.slow
def test_a_rotating_slice_runs_to_its_first_update_or_is_refused(tmp_path):
    """Today's command (rotating through `_RUN_TODAY`) and slice of its main-base cases: up to four refused ones
    and one accepted one through the real sweep (a subprocess, e.g. `python -m vlajax.train rl`, to its first
    update); none may end in a traceback or any other failure. Slow: the one run to its first update compiles
    (7 min at load 40 on 2 cores, about a minute at load 10)."""
    day = datetime.date.today().toordinal()
    command = _RUN_TODAY[day % len(_RUN_TODAY)]
    main_cases = [c for c in values.cases([command]) if c.base == "main"]
    order = sorted(main_cases, key=lambda c: zlib.crc32(f"{day}:{c.name}".encode()))
    checked = []
    for c in order[:8]:
        os.makedirs(values.out_dir(c, str(tmp_path)), exist_ok=True)
        checked.append((c, values.validate(c.command, values.argv(c, str(tmp_path), {}))[0]))
    refused = [c for c, v in checked if v != "ok"]
    accepted = next((c for c, v in checked if v == "ok"), order[0])
    result = values.sweep([*refused[:4], accepted], str(tmp_path), timeout_s=600, max_rss=4 << 30,
                          progress=print)
    rows = result["cases"]
    print(json.dumps(result["summary"]))
    assert [r["outcome"] for r in rows if r["outcome"] in values.FAILURES] == [], rows
    assert all(r["error"].startswith("error: ") and "\n" not in r["error"] for r in rows if r["outcome"] == "refused")
    assert any(r["outcome"] == "ran" for r in rows)


@pytest.mark.slow
def test_the_whole_sweep_has_no_failures(tmp_path):
    """Every command's every value (`make test-all`; an hour or more on 2 cores)."""
    out = tmp_path / "values.json"
    proc = subprocess.run([sys.executable, "-m", "vlajax.bench", "values", "--commands", "all", "--json", str(out)],
                          cwd=values.REPO, env=dict(os.environ), capture_output=True, text=True)
    result = json.loads(out.read_text())
    failures = {cmd: s["failures"] for cmd, s in result["summary"].items() if s["failures"]}
    assert proc.returncode == 0 and not failures, (failures, proc.stdout[-3000:])


def test_merge_keeps_each_case_once_the_later_row_winning(tmp_path):
    row = lambda name, outcome: {"name": name, "command": "rl", "base": "main", "outcome": outcome,  # noqa: E731
                                 "seconds": 1.0, "error": ""}
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"argv": ["a"], "cases": [row("rl.algo=grpo", "traceback"),
                                                          row("rl.algo=ppo", "ran")]}))
    second.write_text(json.dumps({"argv": ["b"], "cases": [row("rl.algo=grpo", "ran"), row("rl.algo=gone", "ran")]}))
    shared = {**row("rl.critic=head", "traceback"), "same_run_as": "rl.algo=grpo"}
    third = tmp_path / "c.json"
    third.write_text(json.dumps({"argv": ["c"], "cases": [shared]}))
    merged = values.merge([str(third), str(first), str(second)])
    assert [r["argv"] for r in merged["runs"]] == [["c"], ["a"], ["b"]]
    assert {r["name"]: (r["outcome"], r["source"]) for r in merged["cases"]} == {
        "rl.critic=head": ("ran", "c.json"), "rl.algo=grpo": ("ran", "b.json"), "rl.algo=ppo": ("ran", "a.json")}
    assert [r["name"] for r in merged["not_cases_now"]] == ["rl.algo=gone"]
    assert merged["summary"]["rl"]["ran"] == 3 and merged["summary"]["rl"]["failures"] == []


def test_tabletop_demos_refusals_come_before_any_import(tmp_path):
    """The two `demos` refusals the sweep found after the command's imports are preflight's now, and agree with
    what `vlajax.data.demos` refuses (its LIBERO-only table; target swap only on the registry's object tasks)."""
    from vlajax.config.schema import ConfigError, DataConfig
    from vlajax.envs import registry
    from vlajax.libero import demos as libero_demos
    from vlajax.preflight import DEMOS_LIBERO_ONLY, preflight
    from vlajax.train import parse

    base = ["--preset", "sft-tiny", "--output-dir", str(tmp_path / "run")]
    with pytest.raises(ConfigError, match="demo_keep_failures is for demos on a LIBERO suite"):
        preflight(parse("demos", [*base, "--data.demo-keep-failures"]), "demos")
    fields = {f.name: f.default for f in dataclasses.fields(DataConfig)}
    for name in DEMOS_LIBERO_ONLY:  # each one the LIBERO recorder reads, refused off LIBERO away from its default
        assert name in fields and f"cfg.data.{name}" in inspect.getsource(libero_demos), name
        cfg = parse("demos", base)
        other = (not fields[name]) if isinstance(fields[name], bool) else fields[name] + 1
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **{name: other}))
        with pytest.raises(ConfigError, match=f"data.{name} is for demos on a LIBERO suite"):
            preflight(cfg, "demos")
    picks = [("--env.task", t) for t in registry.ALL_ENVS] + [("--env.suite", s) for s in registry.SUITES]
    for flag, name in picks:
        cfg = parse("demos", [*base, flag, name, "--data.demo-target-swap"])
        if flag == "--env.suite":
            cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, task=""))
        swaps = all(n.startswith("object/") for n in registry.tasks_for(cfg.env))  # generate's own rule
        try:
            preflight(cfg, "demos")
            accepted = True
        except ConfigError as e:
            accepted = False
            assert "demo_target_swap is for the object suite" in str(e), (name, e)
        assert accepted == swaps, (flag, name)
