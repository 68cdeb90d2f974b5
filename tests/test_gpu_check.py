"""The prepared GPU check (`python -m vlajax.bench gpu-check`, docs/gpu.md) run on CPU before device time is spent.

Default suite (`make test`): the parent / worker machinery for real -- the `pytest -m gpu` row (its tests skip
here), GPU-only rows skipped with their reason, a row that overruns its budget killed and recorded while the next
row still runs in a fresh worker, rows past the global deadline skipped, bad command lines refused -- and the whole
dry run, every row at tiny sizes: all but rl:pi0 in one test, rl:pi0 in its own (its own deadline; pi0-dummy at
one Gemma layer, 2 envs, two timed updates; its row's label says so). rl:pi0 compiles one pi0-dummy RL loop:
train_async's collect and update are sync's programs, served by the compile cache. Timings on the busy 2-core CPU
with an empty compile cache: docs/gpu.md ("Which rows ran where")."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from vlajax.bench import gpu_check, gpu_check_rows


def _run(tmp_path, *args: str) -> tuple[int, dict, str]:
    rc = gpu_check.main(["--dry-run", "--out", str(tmp_path), *args])
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    return rc, data, (tmp_path / "gpu_check.log").read_text()


def test_dry_run_runs_pytest_gpu_and_skips_gpu_only_rows_with_reasons(tmp_path):
    rc, data, log = _run(tmp_path, "--rows", "pytest", "attention", "env:mjwarp")
    rows = data["rows"]
    assert rc == 0 and data["dry_run"] and data["device"]["backend"] == "cpu"
    assert list(rows) == ["pytest", "attention", "env:mjwarp"]
    py = rows["pytest"]
    assert py["status"] == "ok" and py["returncode"] == 0, py
    assert "tests/models/test_attention.py" in py["files"] and "tests/sft/test_fp8_sft.py" in py["files"]
    assert "skipped" in py["summary"] and "passed" not in py["summary"], py["summary"]  # no GPU: they skip
    assert rows["attention"]["status"] == "skipped: TE / cuDNN attention need a GPU (backend cpu)"
    assert rows["env:mjwarp"]["status"] == "skipped: MJX-Warp needs a GPU (backend cpu)"
    assert all(r["seconds"] >= 0 and "load_average_1m" in r for r in rows.values())
    assert '"event": "end", "row": "pytest"' in log and "pytest: ok" in log


def test_an_overrunning_row_is_killed_and_recorded_and_the_next_row_runs(tmp_path):
    """sft:pi0 cannot compile in 4 s: the parent kills the worker, records the timeout, and a new worker
    runs the next row (env:mjwarp, which skips at once on CPU: a row that does work, such as attention's CPU
    references, overran 4 s itself on a loaded machine); the exit status says a row failed."""
    rc, data, log = _run(tmp_path, "--rows", "sft:pi0", "env:mjwarp", "--budget-s", "4")
    rows = data["rows"]
    assert rc == 1
    assert rows["sft:pi0"]["status"].startswith("failed: timeout: killed after"), rows["sft:pi0"]
    assert rows["env:mjwarp"]["status"] == "skipped: MJX-Warp needs a GPU (backend cpu)", rows["env:mjwarp"]
    assert log.count('"event": "device"') == 2  # a second worker ran the rest


def test_rows_past_the_global_deadline_are_skipped_with_the_reason(tmp_path):
    rc, data, _ = _run(tmp_path, "--rows", "attention", "async", "--deadline-s", "1")
    assert rc == 0 and data["device"] is None  # nothing started
    for name in ("attention", "async"):
        status = data["rows"][name]["status"]
        assert status.startswith("skipped: ") and "of the 1 s deadline, the row needs" in status, status


def test_without_a_gpu_the_gpu_sizes_are_skipped_not_run(tmp_path):
    rc = gpu_check.main(["--out", str(tmp_path), "--rows", "sft:pi0", "pytest"])  # no --dry-run; JAX sees the CPU
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert rc == 0 and not data["dry_run"] and data["device"]["backend"] == "cpu"
    for name in ("sft:pi0", "pytest"):
        assert data["rows"][name]["status"] == ("skipped: no GPU visible to JAX (backend cpu); --dry-run runs the "
                                                "CPU sizes"), data["rows"][name]


@pytest.mark.parametrize("argv", [["--rows", "sft:nope"], ["--deadline-s", "0"], ["--budget-s", "-1"]])
def test_bad_command_lines_are_refused_with_one_error_line(argv, capsys):
    with pytest.raises(SystemExit) as e:
        gpu_check.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err


OWN_TEST = ("rl:pi0",)  # its dry run compiles a pi0-dummy RL loop: a test of its own (below), its own deadline


@pytest.mark.timeout(1800)
def test_full_dry_run_exercises_every_row(tmp_path):  # the whole dry run but OWN_TEST's rows, in `make test`
    names = [r.name for r in gpu_check.ROWS if r.name not in OWN_TEST]
    # the GPU's 540 s deadline is for 10-minute commands; CI is loaded
    rc, data, _ = _run(tmp_path, "--deadline-s", "1500", "--rows", *names)
    rows = data["rows"]
    assert list(rows) == names
    for name, r in rows.items():
        assert r["status"] == "ok" or r["status"].startswith("skipped: "), (name, r["status"])
    assert rc == 0
    for name in ("sft:sft-small", "sft:pi0"):
        bf16 = rows[name]["bf16"]
        assert bf16["status"] == "ok" and math.isfinite(bf16["loss_after_steps"]) and bf16["tokens_per_s"] > 0
        # the figure is the median of the timed windows, each window's kept beside it
        assert 1 <= bf16["windows"] == len(bf16["tokens_per_s_windows"]) == len(bf16["seconds_windows"])
        assert bf16["tokens_per_s"] == pytest.approx(float(np.median(bf16["tokens_per_s_windows"])), rel=1e-3)
        mem = bf16["memory"]
        assert 0.7 < mem["plan_over_xla"] < 1.3, mem  # the planner against XLA's compiled analysis
        assert rows[name]["te_fp8"]["status"].startswith("skipped: ")
    assert [m["row"] for m in data["memory"]] == ["sft:sft-small", "sft:pi0"]
    assert rows["env:mjx"]["rows"][0]["steps_per_s"] > 0
    parity = rows["parity"]  # openpi's fixtures: ../shared here, absent in a user's clone
    if gpu_check_rows.FIXTURES.is_dir():
        assert parity["status"] == "ok" and any("max |ours - openpi" in ln for ln in parity["errors_printed"]), parity
    else:
        assert parity["status"].startswith("skipped: openpi reference data not present"), parity
    for name in ("sft:sft-small", "sft:pi0"):  # model FLOPs and their rate; no peak for a CPU: no MFU
        bf16 = rows[name]["bf16"]
        assert bf16["model_flops_per_sample"] > 0 and bf16["model_flops_per_s"] > 0, bf16
        assert bf16["peak_flops"] is None and bf16["mfu"] is None
    assert "SigLIP mu/14 at 2 blocks" in rows["sft:pi0"]["label"], rows["sft:pi0"]["label"]  # pi0-dummy's
    assert rows["rollout"]["rows"][0]["decisions_per_s"] > 0 and rows["rollout"]["rows"][0]["model_flops_per_s"] > 0
    assert {r["mode"] for r in rows["async"]["rows"]} == {"sync", "train_async"}
    sim = rows["async:cpu-sim"]  # C MuJoCo on the host: sync, train_async, rollout_async with adaptive batching
    assert {r["mode"] for r in sim["rows"]} == {"sync", "train_async", "rollout_async"}
    assert all(r["regime"] == "cpu-sim" and r["env_steps_per_s"] > 0 for r in sim["rows"])
    ra = next(r for r in sim["rows"] if r["mode"] == "rollout_async")
    assert ra["batching"] == "adaptive" and 0 < ra["inference_batch_mean"] <= ra["inference_active_mean"] <= 2
    serve = rows["serve"]["servers"]
    assert [r["clients"] for r in serve[0]["rows"]] == [1, 2] and serve[0]["rows"][1]["requests_per_s"]["median"] > 0


@pytest.mark.timeout(3000)
def test_rl_pi0_dry_run(tmp_path):  # in `make test`
    """PPO of the pi0-dummy policy (one Gemma layer) from 28-px pixels on MJX, sync and train_async (its
    collect served by the compile cache from sync's: one program, tests/pipeline/test_rl_async.py)."""
    rc, data, _ = _run(tmp_path, "--rows", "rl:pi0", "--deadline-s", "2800")
    assert rc == 0, data["rows"]
    pi = data["rows"]["rl:pi0"]
    assert pi["label"].startswith("dry run at reduced sizes, not pi0's widths: pi0-dummy"), pi["label"]
    runs = pi["runs"]
    assert len(runs) == 1 and runs[0]["gemma_depth"] == 1, runs
    assert runs[0]["workload"]["policy"] == "pi0" and runs[0]["workload"]["model"]["image_size"] == 28
    assert {r["mode"] for r in runs[0]["rows"]} == {"sync", "train_async"}
    assert all(r["decisions_per_s"] > 0 and r["seconds_per_iteration"] > 0 and r["model_flops_per_s"] > 0
               for r in runs[0]["rows"]), runs
