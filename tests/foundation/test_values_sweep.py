"""The run-to-first-update sweep (`python -m vlajax.bench values`, vlajax/bench/values.py): its cases come from
the schema (a new `Literal` value is a new case without any list changing), a rotating slice of the cheap
`rl` cases runs for real in the default suite, and the whole sweep runs in `make test-all` (slow)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import subprocess
import sys
import zlib
from typing import Literal

import pytest

from vlajax.bench import values
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
    assert all(by_command.values())
    # every case's value lands in its command line
    case = next(c for c in all_cases if c.name == "pipeline.streaming=false")
    assert "--pipeline.no-streaming" in values.argv(case, "/tmp/w", {})


def test_subsets_partition_the_cases():
    all_cases = values.cases(["rl"])
    parts = [values.subset(all_cases, k, 5) for k in range(5)]
    assert sorted(c.name for p in parts for c in p) == sorted(c.name for c in all_cases)


def test_a_rotating_slice_runs_to_its_first_update_or_is_refused(tmp_path):
    """Today's slice of the state-MLP `rl` cases: every refused one and one accepted one run through the real
    sweep (a subprocess `python -m vlajax.train rl` to its first update); none may end in a traceback."""
    main_cases = [c for c in values.cases(["rl"]) if c.base == "main" and c.command == "rl"]
    day = datetime.date.today().toordinal()
    order = sorted(main_cases, key=lambda c: zlib.crc32(f"{day}:{c.name}".encode()))
    checked = [(c, values.validate(c.command, values.argv(c, str(tmp_path), {}))[0]) for c in order[:8]]
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
    proc = subprocess.run([sys.executable, "-m", "vlajax.bench", "values", "--json", str(out)],
                          cwd=values.REPO, env=dict(os.environ), capture_output=True, text=True)
    result = json.loads(out.read_text())
    failures = {cmd: s["failures"] for cmd, s in result["summary"].items() if s["failures"]}
    assert proc.returncode == 0 and not failures, (failures, proc.stdout[-3000:])
