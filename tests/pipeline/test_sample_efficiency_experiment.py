"""experiments/async_sample_efficiency.py: configs, the band comparison, and a real debug-size run."""

import dataclasses
import importlib
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _module():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("experiments.async_sample_efficiency")


@pytest.mark.parametrize("debug", [False, True])
def test_sync_and_async_runs_share_the_workload_and_eval_schedule(debug, tmp_path):
    mod = _module()
    exp = mod.get_config(debug)
    assert len(exp.sync_seeds) == 3 and len(set(exp.sync_seeds)) == 3
    assert exp.staleness_threshold <= 1 and exp.iterations % exp.eval_every == 0
    sync = mod.train_config(exp, "sync", exp.async_seed, str(tmp_path / "s"))
    asyn = mod.train_config(exp, "async", exp.async_seed, str(tmp_path / "a"))
    assert not sync.pipeline.enabled and asyn.pipeline.enabled
    # the only difference is the pipeline: same PPO, env, model, eval schedule and seed
    assert sync.rl == asyn.rl and sync.env == asyn.env and sync.model == asyn.model and sync.seed == asyn.seed
    assert asyn.pipeline.staleness_threshold == exp.staleness_threshold and asyn.pipeline.partial_rollout
    assert not asyn.pipeline.streaming and asyn.pipeline.require_batches == asyn.pipeline.num_slots == exp.slots
    assert sync.env.num_envs % exp.slots == 0
    assert exp.steps_per_update % (sync.rl.num_minibatches * sync.rl.micro_batches) == 0
    with pytest.raises(ValueError, match="mode"):
        mod.train_config(exp, "other", 0, str(tmp_path))


@pytest.mark.parametrize("debug", [False, True])
def test_pixel_workload_sync_and_async_differ_only_in_the_pipeline(debug, tmp_path):
    """`--workload grpo-tokens`: rl-grpo-tokens from one SFT checkpoint; seeds change only the key streams."""
    mod = _module()
    exp = mod.get_pixel_config(debug, "some/sft-dir")
    assert len(exp.sync_seeds) == 3 and len(set(exp.sync_seeds)) == 3 and exp.async_seed in exp.sync_seeds
    assert exp.staleness_threshold <= 1 and exp.iterations % exp.eval_every == 0 and exp.slots == 1
    sync = mod.train_config(exp, "sync", exp.async_seed, str(tmp_path / "s"))
    asyn = mod.train_config(exp, "async", exp.async_seed, str(tmp_path / "a"))
    other = mod.train_config(exp, "sync", exp.sync_seeds[1], str(tmp_path / "o"))
    assert not sync.pipeline.enabled and asyn.pipeline.enabled
    assert sync.rl == asyn.rl == other.rl and sync.env == asyn.env == other.env and sync.model == asyn.model
    assert sync.seed == asyn.seed != other.seed
    assert sync.rl.algo == "grpo" and sync.rl.group_size == exp.group_size and sync.rl.init_from == "some/sft-dir"
    assert sync.model.action_head == "tokens" and sync.env.obs_mode == "pixels"
    assert sync.env.suite == exp.suite and sync.env.task == ""
    assert sync.rl.eval_every == exp.eval_every and sync.rl.eval_episodes_per_task == exp.eval_episodes
    p = asyn.pipeline
    assert p.staleness_threshold == exp.staleness_threshold and p.num_slots == p.require_batches == 1
    assert not p.streaming and not p.use_rollout_log_probs
    assert exp.num_envs % exp.group_size == 0
    decisions = exp.num_envs * math.ceil(exp.episode_length / sync.rl.chunk_steps)  # GRPO: one episode per env
    assert decisions % (sync.rl.num_minibatches * sync.rl.micro_batches) == 0
    assert exp.steps_per_update == exp.num_envs * exp.episode_length
    if not debug:  # the lead's synchronous recipe: 32 envs, 200-step episodes, 80 eval episodes on goal
        assert (exp.num_envs, exp.episode_length, exp.iterations, exp.eval_every) == (32, 200, 15, 5)
        assert exp.eval_episodes * 4 == 80 and mod.get_pixel_config().init_from == "runs/s3/start-tokmm5-500"
    with pytest.raises(ValueError, match="mode"):
        mod.train_config(exp, "other", 0, str(tmp_path))


def test_saved_runs_are_reused_and_compared(tmp_path, capsys):
    """`--runs` writes one JSON per run into the work dir; `--reuse` assembles them (checking the config)."""
    mod = _module()
    exp = mod.get_pixel_config(True, "x")
    work = tmp_path / "work"
    work.mkdir()
    values = {("sync", 0): [0.3, 0.5, 0.6], ("sync", 1): [0.3, 0.4, 0.9], ("sync", 2): [0.3, 0.6, 0.7],
              ("async", 0): [0.3, 0.45, 0.95]}
    for (mode, seed), v in values.items():
        r = _run(mode, seed, v, step=exp.steps_per_update)
        (work / f"{mode}-seed{seed}.json").write_text(json.dumps({"experiment": dataclasses.asdict(exp), "run": r}))
    out = mod.run(exp, str(tmp_path / "r.json"), str(tmp_path / "r.png"), str(work), str(tmp_path / "r.md"),
                  reuse=True)
    assert [r["inside"] for r in out["rows"]] == [True, True, False] and out["points_outside"] == 1
    assert "warm_start" not in out and json.loads((tmp_path / "r.json").read_text())["rows"] == out["rows"]
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG" and "at 2/3 eval points" in capsys.readouterr().out
    with pytest.raises(ValueError, match="another experiment"):
        mod.run(dataclasses.replace(exp, iterations=4), str(tmp_path / "q.json"), str(tmp_path / "q.png"),
                str(work), str(tmp_path / "q.md"), reuse=True)
    assert mod._parse_runs("sync:0,async:1") == [("sync", 0), ("async", 1)]
    with pytest.raises(ValueError, match="mode:seed"):
        mod._parse_runs("sync0")


def test_slot_rollout_pays_the_same_reward_as_the_sync_loop():
    """The experiment trains on `rl.reward='success'`: the async slot path (`RLWorkload`) must build its envs
    with it, as the sync loop's `collect` does (it used to build them with the shaped reward)."""
    from vlajax.config import get_config
    from vlajax.rl.async_workload import RLWorkload
    from vlajax.rl.setup import build

    cfg = get_config("rl-debug")
    cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, reward="success"))
    setup = build(cfg)
    slot_env = RLWorkload(cfg, setup)._env_fns(cfg.env.num_envs // 2)[0]
    scales = dict(slot_env.unwrapped.config.reward_scales)
    assert scales == dict(setup.env.unwrapped.config.reward_scales)
    assert scales["success"] > 0 and all(v == 0.0 for k, v in scales.items() if k != "success")


def _run(mode, seed, values, step=100):
    return {"mode": mode, "seed": seed,
            "curve": [{"update": i, "env_steps": float(i * step), "success": v} for i, v in enumerate(values)]}


def test_compare_reports_the_band_and_the_gap_outside_it(tmp_path):
    mod = _module()
    runs = [_run("sync", 0, [0.1, 0.5, 0.6]), _run("sync", 1, [0.2, 0.3, 0.9]), _run("sync", 2, [0.1, 0.4, 0.7]),
            _run("async", 0, [0.1, 0.25, 0.95])]
    rows = mod.compare(runs)
    assert [r["env_steps"] for r in rows] == [0.0, 100.0, 200.0]
    assert [(r["sync_min"], r["sync_max"]) for r in rows] == [(0.1, 0.2), (0.3, 0.5), (0.6, 0.9)]
    assert [r["inside"] for r in rows] == [True, False, False]
    assert rows[1]["gap"] == pytest.approx(-0.05) and rows[2]["gap"] == pytest.approx(0.05)
    assert rows[0]["sync_mean"] == pytest.approx(0.4 / 3)
    md = mod.markdown(rows, (0, 1, 2))
    assert md.count("\n") == 5 and "no (-0.050)" in md and "| yes |" in md
    png = tmp_path / "p.png"
    mod.plot(rows, runs, mod.get_config(True), str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="eval points"):
        mod.compare(runs[:3] + [_run("async", 0, [0.1, 0.2, 0.3], step=50)])
    with pytest.raises(ValueError, match="exactly one async"):
        mod.compare(runs[:3])


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_debug_run_measures_both_modes_on_the_same_env_step_grid(tmp_path):
    """The `--debug` command line in a subprocess (one CPU device: under this suite's 8 virtual
    devices the async run's compiles took over 25 minutes on the loaded 2-core machine)."""
    mod = _module()
    exp = mod.get_config(True)
    out = tmp_path / "se.json"
    cmd = [sys.executable, str(ROOT / "experiments" / "async_sample_efficiency.py"), "--debug", "--json", str(out),
           "--plot", str(tmp_path / "se.png"), "--md", str(tmp_path / "se.md"), "--work-dir", str(tmp_path / "work")]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1700)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads(out.read_text())
    assert "async inside the sync band at" in proc.stdout
    runs = data["runs"]
    assert [(r["mode"], r["seed"]) for r in runs] == [("sync", s) for s in exp.sync_seeds] + [("async", exp.async_seed)]
    grid = [float(u * exp.steps_per_update) for u in range(0, exp.iterations + 1, exp.eval_every)]
    for r in runs:
        steps = [p["env_steps"] for p in r["curve"]]
        assert steps == grid and all(b > a for a, b in zip(steps, steps[1:]))
        assert all(0.0 <= p["success"] <= 1.0 for p in r["curve"])
    for r in runs[:-1]:  # the sync loop counts its env steps itself: the grid is what it really stepped
        assert r["train_env_steps"] == exp.iterations * exp.steps_per_update
    a = runs[-1]
    assert a["staleness_max"] <= math.ceil(exp.staleness_threshold)
    assert a["samples_consumed"] == exp.iterations * exp.steps_per_update
    # same initial weights and eval episodes: the async run's update-0 eval equals sync seed 0's
    assert a["curve"][0]["success"] == runs[0]["curve"][0]["success"]
    assert data["warm_start"]["samples"] > 0 and 0.0 <= data["warm_start"]["expert_success"] <= 1.0
    assert data["rows"] == mod.compare(runs) and data["experiment"] == json.loads(json.dumps(dataclasses.asdict(exp)))
    assert data["all_inside"] == all(r["inside"] for r in data["rows"])
    assert (tmp_path / "se.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "se.md").read_text().count("\n") == len(grid) + 2
