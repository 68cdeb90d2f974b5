"""experiments/async_sample_efficiency.py: configs, the band comparison (MLP), the paired protocol and its
statistics (experiments/async_protocol.py, async_stats.py), and a real debug-size run."""

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


def _protocol():
    _module()
    return importlib.import_module("experiments.async_protocol"), importlib.import_module("experiments.async_stats")


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("name", ["grpo-tokens", "ppo-flow", "eq45-grpo-tokens-factor", "eq45-ppo-flow"])
def test_protocol_arms_differ_only_in_the_pipeline(name, debug, tmp_path):
    """Every arm trains the preset from one checkpoint on the same eval episodes; a seed is a pair."""
    proto, _ = _protocol()
    p = proto.get_protocol(name, debug, "some/sft-dir")
    assert p.arms[0] == "sync" and "async-s1" in p.arms and p.iterations % p.eval_every == 0
    assert len(p.seeds) >= (2 if debug else p.min_pairs) and p.min_pairs >= (2 if debug else 3)
    cfgs = {a: proto.train_config(p, a, 1, str(tmp_path / a)) for a in p.arms}
    sync = cfgs["sync"]
    assert not sync.pipeline.enabled and sync.rl.init_from == "some/sft-dir" and sync.seed == 1
    # the sync loop reads no pipeline field; a preset's pipeline defaults must not move its fingerprint
    assert sync.pipeline == type(sync.pipeline)()
    assert sync.rl.eval_seed == p.eval_seed >= 0 and sync.env.suite == "goal" and sync.env.task == ""
    for arm, cfg in cfgs.items():
        assert cfg.rl == sync.rl and cfg.env == sync.env and cfg.model == sync.model and cfg.seed == sync.seed
        if arm != "sync":
            q = cfg.pipeline
            assert q.enabled and q.staleness_threshold == proto.ARMS[arm] and q.num_slots == q.require_batches == 1
            assert not q.streaming and not q.partial_rollout and not q.use_rollout_log_probs
    # the config fingerprint ignores the seed and the paths, and tells the arms apart
    fp = {a: proto.config_fingerprint(c)[0] for a, c in cfgs.items()}
    assert len(set(fp.values())) == len(p.arms)
    assert proto.config_fingerprint(proto.train_config(p, "sync", 3, "elsewhere"))[0] == fp["sync"]
    # interleaved: sync and async-s1 seed by seed first, so a partial set is still paired
    plan = p.plan()
    if p.delta:  # equivalence protocols: every arm seed by seed (the pilot's seeds complete first)
        assert plan[:len(p.arms)] == [(a, p.seeds[0]) for a in p.arms]
    else:
        assert plan[:4] == [("sync", p.seeds[0]), ("async-s1", p.seeds[0]), ("sync", p.seeds[1]),
                            ("async-s1", p.seeds[1])]
    assert sorted(plan) == sorted((a, s) for a in p.arms for s in p.seeds)
    if not debug and name == "grpo-tokens":  # the workload as first defined: 15 updates, eval every 5
        assert (p.num_envs, p.episode_length, p.iterations, p.eval_every, p.eval_episodes) == (32, 200, 15, 5, 20)
        assert p.arms == ("sync", "async-s1", "async-s2") and len(p.seeds) == p.min_pairs == 5
        assert sync.rl.algo == "grpo" and sync.model.action_head == "tokens" and p.steps_per_update == 6400
    if not debug and name == "ppo-flow":
        assert sync.rl.algo == "ppo" and sync.rl.critic == "privileged" and len(p.seeds) == p.min_pairs == 3
    if not debug and name.startswith("eq45"):  # as pre-registered (results/async/preregistration_45.md)
        assert (p.delta, p.pilot_pairs, p.max_pairs, p.seeds) == (0.1, 6, 16, tuple(range(100, 116)))
        assert p.eval_episodes == 20 and p.eval_seed == 0 and p.iterations // p.eval_every == 3
        if name == "eq45-grpo-tokens-factor":
            assert p.arms == ("sync", "async-s1", "async-s2") and sync.rl.ratio_level == "factor"
            assert (p.iterations, p.eval_every, sync.rl.temperature, sync.rl.kl_coef) == (15, 5, 1.0, 0.0)
        else:
            assert p.arms == ("sync", "async-s1") and (p.iterations, p.eval_every) == (60, 20)
            assert sync.rl.algo == "ppo" and sync.rl.ratio_level == "decision"
    with pytest.raises(ValueError, match="arm"):
        proto.train_config(p, "async", 0, str(tmp_path))
    assert proto.parse_runs("sync:0,async-s1:2", p) == [("sync", 0), ("async-s1", 2)]
    with pytest.raises(ValueError, match="arm:seed"):
        proto.parse_runs("async:0", p)


def test_bootstrap_interval_and_criterion_can_fail():
    """The criterion passes when the paired interval reaches 0 from the midpoint on, fails when it is below."""
    _, st = _protocol()
    assert st.bootstrap_mean([0.4]) == (0.4, 0.4, 0.4)
    mean, lo, hi = st.bootstrap_mean([0.1, 0.2, 0.3, 0.4, 0.5])
    assert mean == pytest.approx(0.3) and 0.1 < lo < 0.3 < hi < 0.5
    assert st.bootstrap_mean([0.1, 0.2, 0.3, 0.4, 0.5]) == (mean, lo, hi)  # a fixed generator
    # all 5 differences negative: every resampled mean is negative, the interval is below 0
    assert st.bootstrap_mean([-0.05, -0.01, -0.1, -0.0125, -0.2])[2] < 0

    def curves(diffs_at_15, n=5):  # async = sync + diff; the differences at update 10 are of mixed sign
        mk = lambda u, v: {"update": u, "env_steps": 100.0 * u, "success": v, "wall_s": 10.0 * u}  # noqa: E731
        sync = {s: [mk(0, 0.3), mk(5, 0.4), mk(10, 0.5), mk(15, 0.5)] for s in range(n)}
        mixed = [0.1, -0.1, 0.05, -0.05, 0.0]
        asyn = {s: [mk(0, 0.3), mk(5, 0.1), mk(10, 0.5 + mixed[s]), mk(15, 0.5 + diffs_at_15[s])] for s in range(n)}
        return {"sync": sync, "async-s1": asyn}

    rows = st.point_table(curves([0.1, -0.1, 0.0, 0.05, -0.0125]))
    assert [r["update"] for r in rows] == [0, 5, 10, 15]
    assert rows[0]["diff"]["async-s1"] == {"pairs": 5, "seeds": [0, 1, 2, 3, 4], "values": [0.0] * 5, "mean": 0.0,
                                           "low": 0.0, "high": 0.0}
    assert rows[1]["diff"]["async-s1"]["high"] < 0  # below 0 at update 5: before the midpoint, does not count
    assert rows[3]["arms"]["sync"]["wall_s"] == 150.0 and rows[3]["arms"]["async-s1"]["n"] == 5
    v = st.criterion(rows, "async-s1", iterations=15, min_pairs=5)
    assert v["verdict"] == "PASS" and [q["update"] for q in v["points"]] == [10, 15]
    rows = st.point_table(curves([-0.05, -0.0125, -0.1, 0.0, -0.2]))  # one zero, four below: interval below 0
    v = st.criterion(rows, "async-s1", iterations=15, min_pairs=5)
    assert v["verdict"] == "FAIL" and "[15]" in v["reason"]
    small = {a: {s: c for s, c in by.items() if s < 4} for a, by in curves([-0.05] * 5).items()}
    v = st.criterion(st.point_table(small), "async-s1", iterations=15, min_pairs=5)
    assert v["verdict"] == "NOT EVALUATED" and v["pairs"] == 4
    bad = curves([0.0] * 5)
    bad["sync"][0] = bad["sync"][0][:3]
    with pytest.raises(ValueError, match="eval points"):
        st.point_table(bad)


def test_protocol_reuses_only_runs_with_matching_fingerprints(tmp_path, monkeypatch, capsys):
    """Saved run JSONs are taken when config and checkpoint fingerprints match; the report writes its
    tables, JSON and plot and prints the verdict."""
    proto, _ = _protocol()
    init = {"init_params_sha256": "a" * 64, "init_bridge_sha256": "b" * 64}
    monkeypatch.setattr(proto, "init_fingerprint", lambda cfg: dict(init))
    p = proto.get_protocol("grpo-tokens", True, "x")
    runs_dir = tmp_path / "runs"
    values = {("sync", 0): [0.3, 0.5, 0.6], ("async-s1", 0): [0.3, 0.45, 0.65], ("sync", 1): [0.3, 0.4, 0.5],
              ("async-s1", 1): [0.3, 0.4, 0.4], ("async-s2", 0): [0.3, 0.2, 0.1]}
    for (arm, seed), v in values.items():
        rec = {"arm": arm, "seed": seed, "fingerprints": proto.fingerprints(p, arm, seed),
               "curve": [{"update": u, "env_steps": float(u * p.steps_per_update), "success": s, "wall_s": 5.0 * u}
                         for u, s in enumerate(v)],
               "final_success": v[-1], "seconds": 9.0, "loadavg": {"start": "1.0 1 1", "end": "2.0 2 2"},
               "wall_clock_utc": ["2026-11-24T17:00:00Z", "2026-11-24T17:10:00Z"]}
        if arm != "sync":
            rec |= {"staleness_max": 1, "staleness_mean": 0.5}
        if arm == "async-s1":  # the learner's per-update metrics (seed 1's runs predate `updates`)
            rec["per_update"] = [{"update": u, "behaviour_kl": 0.001 * (u + seed), **({"updates": 4 - u} if seed == 0
                                                                                        else {})} for u in (1, 2)]
        if arm == "async-s2":
            rec["fingerprints"]["init_params_sha256"] = "c" * 64  # another starting checkpoint: not reused
        path = pathlib.Path(proto.run_path(str(runs_dir), p, arm, seed))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec))
    found, skipped = proto.load_runs(p, str(runs_dir), init)
    assert {a: sorted(b) for a, b in found.items()} == {"sync": [0, 1], "async-s1": [0, 1], "async-s2": []}
    assert len(skipped) == 1 and "init_params_sha256" in skipped[0]
    out = proto.main(p, str(runs_dir), str(tmp_path / "work"), str(tmp_path / "p.png"), report_only=True)
    assert [v["verdict"] for v in out["verdicts"]] == ["PASS"]  # debug: min_pairs 2; differences +0.05 / -0.1
    assert out["rows"][2]["diff"]["async-s1"]["values"] == pytest.approx([0.05, -0.1])
    text = capsys.readouterr().out
    assert "criterion grpo-tokens async-s1: PASS" in text and "not reused (fingerprints)" in text
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    assert (runs_dir / p.name / "report.md").read_text().count("| async-s1 |") >= 3
    # descriptive learner diagnostics: median [min, max] (count) over every update of every seed, '-' when absent
    assert "| async-s1 | 0.002 [0.001, 0.003] (4) | - | - | - | - | - | 2.5 [2, 3] (2) |" in text
    with pytest.raises(SystemExit, match="--reuse"):  # a saved run is never overwritten silently
        proto.main(p, str(runs_dir), str(tmp_path / "work"), str(tmp_path / "p.png"), only="sync:0")


def test_a_saved_run_survives_config_fields_added_later_but_not_changed_ones(tmp_path, monkeypatch):
    """A field added to the config after a run was saved (defaulting to the old behaviour) keeps the run;
    a changed value or a removed field does not."""
    proto, _ = _protocol()
    init = {"init_params_sha256": "a" * 64, "init_bridge_sha256": "b" * 64}
    monkeypatch.setattr(proto, "init_fingerprint", lambda cfg: dict(init))
    p = proto.get_protocol("grpo-tokens", True, "x")
    runs_dir = tmp_path / "runs"

    def save(arm, seed, edit):
        d = proto.config_fingerprint(proto.train_config(p, arm, seed, "x"))[1]
        edit(d)
        fp = {"config_sha256": proto.hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest(), **init}
        rec = {"arm": arm, "seed": seed, "fingerprints": fp, "config": d}
        path = pathlib.Path(proto.run_path(str(runs_dir), p, arm, seed))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec))

    save("sync", 0, lambda d: d["rl"].pop("target_kl"))  # saved before rl.target_kl existed
    save("sync", 1, lambda d: d["rl"].update(learning_rate=1.0))  # another learning rate
    save("async-s1", 0, lambda d: d["rl"].update(gone_field=1))  # a field the config no longer has
    found, skipped = proto.load_runs(p, str(runs_dir), init)
    assert sorted(found["sync"]) == [0] and found["sync"][0]["config_fields_added_since"] == ["rl.target_kl"]
    assert not found["async-s1"] and len(skipped) == 2
    assert proto.config_changes({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3, "d": 0}}) == (["a.c"], ["a.d"])


def test_a_saved_run_survives_a_model_field_added_later_in_the_checkpoint_bridge(tmp_path, monkeypatch):
    """A ModelConfig field added after a run was saved changes both the config and the starting
    checkpoint's bridge (its `model`); the run is kept when dropping that field gives the saved
    bridge hash, not when anything else in the bridge differs."""
    proto, _ = _protocol()
    bridge_now = {"model": {"value_head": "none", "width": 8}, "norm": {"state": [0.0, 1.0]}}
    init = {"init_params_sha256": "a" * 64, "init_bridge_sha256": proto.bridge_sha256(bridge_now)}
    monkeypatch.setattr(proto, "init_fingerprint", lambda cfg: dict(init))
    monkeypatch.setitem(proto._BRIDGES, init["init_bridge_sha256"], bridge_now)
    p = proto.get_protocol("grpo-tokens", True, "x")
    runs_dir = tmp_path / "runs"

    def save(arm, seed, bridge_hash):
        d = proto.config_fingerprint(proto.train_config(p, arm, seed, "x"))[1]
        d["model"].pop("value_head")  # saved before model.value_head existed
        fp = {"config_sha256": proto.hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest(),
              "init_params_sha256": "a" * 64, "init_bridge_sha256": bridge_hash}
        path = pathlib.Path(proto.run_path(str(runs_dir), p, arm, seed))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"arm": arm, "seed": seed, "fingerprints": fp, "config": d}))

    save("sync", 0, proto.bridge_sha256({"model": {"width": 8}, "norm": {"state": [0.0, 1.0]}}))
    save("sync", 1, proto.bridge_sha256({"model": {"width": 9}, "norm": {"state": [0.0, 1.0]}}))  # another model
    found, skipped = proto.load_runs(p, str(runs_dir), init)
    assert sorted(found["sync"]) == [0] and found["sync"][0]["config_fields_added_since"] == ["model.value_head"]
    assert len(skipped) == 1 and "sync-seed1" in skipped[0] and "init_bridge_sha256" in skipped[0]


def test_slot_rollout_pays_the_same_reward_as_the_sync_loop():
    """The experiment trains on `rl.reward='success'`: the async slot path (`RLWorkload`) must build its envs
    with it, as the sync loop's `collect` does (it used to build them with the shaped reward)."""
    from vlajax.config.schema import get_config
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


# ---------------------------------------------------------------------------------------------
# The equivalence test, recomputed from per-seed JSONs (synthetic runs)
# ---------------------------------------------------------------------------------------------


def _eq_runs(tmp_path, sync_final, diffs, seeds=range(100, 106), arms=("async-s1",), init="a" * 64, name="eq"):
    """Per-seed JSONs as `async_protocol.run_one` writes them: updates 0 / 5 / 10 / 15, sync at 0.4 then rising
    linearly to `sync_final[i]`; each async arm = sync + `diffs[arm][i]` at updates 10 and 15."""
    proto = {"name": name, "iterations": 15, "seeds": list(range(100, 116)), "delta": 0.1, "pilot_pairs": 6,
             "max_pairs": 16}
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    for i, seed in enumerate(seeds):
        sync = [0.4, 0.4 + (sync_final[i] - 0.4) / 3, 0.4 + 2 * (sync_final[i] - 0.4) / 3, sync_final[i]]
        runs = {"sync": sync} | {a: sync[:2] + [v + diffs[a][i] for v in sync[2:]] for a in arms}
        for arm, vals in runs.items():
            rec = {"arm": arm, "seed": seed, "protocol": proto,
                   "fingerprints": {"config_sha256": arm, "init_params_sha256": init},
                   "curve": [{"update": u, "env_steps": 6400.0 * u, "success": v}
                             for u, v in zip((0, 5, 10, 15), vals, strict=True)]}
            (d / f"{arm}-seed{seed}.json").write_text(json.dumps(rec))
    return str(d)


def test_equivalence_verdicts_from_per_seed_json(tmp_path, capsys):
    """EQUIVALENT, NOT EQUIVALENT (an arm that does not learn while sync does), VOID (sync does not learn),
    NOT EVALUATED (the pilot's spread asks for more pairs than exist), each recomputed by the module's CLI."""
    _, st = _protocol()
    lifts = [0.75, 0.7625, 0.7375, 0.775, 0.725, 0.75]  # sync: +0.35 on average
    small = [0.0125, -0.025, 0.0, 0.025, -0.0125, 0.0]
    d = _eq_runs(tmp_path, lifts, {"async-s1": small, "async-s2": [x - 0.35 for x in small]},
                 arms=("async-s1", "async-s2"))
    out = st.main([d, "--json", str(tmp_path / "v.json")])
    v = {x["arm"]: x for x in out["verdicts"]}
    assert out["plan"]["pairs"] == 6 and out["plan"]["seeds"] == list(range(100, 106))
    assert v["async-s1"]["verdict"] == "EQUIVALENT" and [q["update"] for q in v["async-s1"]["points"]] == [10, 15]
    assert v["async-s1"]["sync_lift"]["mean"] == pytest.approx(0.35) and v["async-s1"]["sync_lift"]["low"] > 0.3
    assert v["async-s2"]["verdict"] == "NOT EQUIVALENT" and "entirely below 0" in v["async-s2"]["reason"]
    assert v["async-s2"]["arm_lift"]["mean"] == pytest.approx(0.0, abs=1e-9)  # it never learned: it fails
    for q in v["async-s1"]["points"]:  # the decision takes the wider of bootstrap and t
        assert q["low"] == min(q["boot_low"], q["t_low"]) and q["high"] == max(q["boot_high"], q["t_high"])
    assert json.loads((tmp_path / "v.json").read_text())["verdicts"][0]["verdict"] == "EQUIVALENT"
    text = capsys.readouterr().out
    assert "**async-s1: EQUIVALENT**" in text and "**async-s2: NOT EQUIVALENT**" in text

    flat = [0.4, 0.4125, 0.3875, 0.4, 0.4125, 0.3875]  # sync does not learn: no power, whatever async does
    out = st.main([_eq_runs(tmp_path, flat, {"async-s1": small}, name="void")])
    assert out["verdicts"][0]["verdict"] == "VOID" and "no power" in out["verdicts"][0]["reason"]

    wide = [0.15, -0.15, 0.1, -0.1, 0.125, -0.125]  # sd 0.13: the rule asks for more pairs than the 6 saved
    proto, curves = st.load_dir(_eq_runs(tmp_path, lifts, {"async-s1": wide}, name="wide"))
    out = st.equivalence(curves, proto["seeds"], 15, power_kw={"sims": 200, "resamples": 200})  # a cheaper power
    assert out["plan"]["pairs"] > 6 and out["verdicts"][0]["verdict"] == "NOT EVALUATED"
    assert f"6 of the {out['plan']['pairs']} pairs" in out["verdicts"][0]["reason"]

    out = st.main([_eq_runs(tmp_path, lifts[:5], {"async-s1": small}, seeds=range(100, 105), name="pilot")])
    assert out["plan"]["pairs"] is None and out["verdicts"][0]["verdict"] == "NOT EVALUATED"


def test_equivalence_refuses_mixed_runs_and_its_power_can_fail(tmp_path):
    """Runs from another starting checkpoint are refused; the simulated power is high for a tight
    spread, and a true difference at the margin passes rarely (the test's size, <= 5%)."""
    _, st = _protocol()
    d = _eq_runs(tmp_path, [0.75] * 6, {"async-s1": [0.0] * 6})
    rec = json.loads((tmp_path / "eq" / "async-s1-seed103.json").read_text())
    rec["fingerprints"]["init_params_sha256"] = "c" * 64
    (tmp_path / "eq" / "async-s1-seed103.json").write_text(json.dumps(rec))
    with pytest.raises(ValueError, match="another starting checkpoint"):
        st.load_dir(d)
    # a protocol field added after the first runs were saved: read at its earlier value, any other value refused
    d = _eq_runs(tmp_path, [0.75] * 6, {"async-s1": [0.0] * 6}, name="added")
    for seed, value in ((104, "jax"), (105, "jax")):
        f = tmp_path / "added" / f"sync-seed{seed}.json"
        rec = json.loads(f.read_text())
        rec["protocol"] = rec["protocol"] | {"physics_impl": value}
        f.write_text(json.dumps(rec))
    proto, _ = st.load_dir(d)
    assert proto["physics_impl"] == "jax" and proto["starting_checkpoints"] == {"a" * 64: list(range(100, 106))}
    rec["protocol"]["physics_impl"] = "c"
    f.write_text(json.dumps(rec))
    with pytest.raises(ValueError, match="another protocol"):
        st.load_dir(d)
    kw = dict(sims=300, resamples=300)
    assert st.tost_power(0.03, 6, **kw) > 0.9
    assert st.tost_power(0.11, 6, **kw) < st.tost_power(0.11, 16, **kw)
    assert st.tost_power(0.11, 16, shift=-0.1, **kw) <= 0.05
    assert st.pairs_needed(0.03, **kw)[0] == 6 and st.pairs_needed(0.3, **kw)[0] == 16
    assert st.t_interval([0.1], 0.9) == (0.1, -math.inf, math.inf)


def test_protocol_report_of_an_issue45_workload_gives_the_equivalence_verdicts(tmp_path, monkeypatch):
    """`--report-only` on an eq45 workload: the pilot fixes the pairs and the report carries the verdicts."""
    proto, _ = _protocol()
    init = {"init_params_sha256": "a" * 64, "init_bridge_sha256": "b" * 64}
    monkeypatch.setattr(proto, "init_fingerprint", lambda cfg: dict(init))
    p = proto.get_protocol("eq45-grpo-tokens-factor", True, "x")
    assert (p.pilot_pairs, p.max_pairs, p.delta) == (2, 2, 0.1)
    runs_dir = tmp_path / "runs"
    values = {"sync": [0.3, 0.6, 0.7], "async-s1": [0.3, 0.6, 0.7], "async-s2": [0.3, 0.3, 0.3]}
    for (arm, v), seed in ((x, s) for x in values.items() for s in p.seeds):
        v = [v[0], v[1] + 0.0125 * seed, v[2] + 0.0125 * seed]
        rec = {"arm": arm, "seed": seed, "fingerprints": proto.fingerprints(p, arm, seed),
               "curve": [{"update": u, "env_steps": float(u * p.steps_per_update), "success": s, "wall_s": 5.0 * u}
                         for u, s in enumerate(v)], "final_success": v[-1], "seconds": 9.0,
               "loadavg": {"start": "1.0 1 1", "end": "2.0 2 2"}, "wall_clock_utc": ["2026-11-27T10:00:00Z"] * 2}
        if arm != "sync":
            rec |= {"staleness_max": 1, "staleness_mean": 0.5}
        path = pathlib.Path(proto.run_path(str(runs_dir), p, arm, seed))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec))
    out = proto.main(p, str(runs_dir), str(tmp_path / "work"), str(tmp_path / "p.png"), report_only=True)
    assert out["plan"]["pairs"] == 2
    # identical pairs: a zero-width interval inside the margin; async-s2 never learns: 0.3-0.4 below sync
    assert [(v["arm"], v["verdict"]) for v in out["verdicts"]] == [("async-s1", "EQUIVALENT"),
                                                                   ("async-s2", "NOT EQUIVALENT")]
    text = (runs_dir / p.name / "report.md").read_text()
    assert "Issue 45: equivalence" in text and "**async-s2: NOT EQUIVALENT**" in text


def test_eq45b_arms_differ_only_in_the_pipeline_and_their_declared_rl_fields(tmp_path):
    """eq45b (results/async/preregistration_45b.md): async-s2-kl is async-s2 plus rl.target_kl and
    nothing else; sync is the first workload's sync; fresh seeds, disjoint from eq45's."""
    import dataclasses

    proto, _ = _protocol()
    p, first = proto.get_protocol("eq45b-grpo-s2-kl"), proto.get_protocol("eq45-grpo-tokens-factor")
    assert p.arms == ("sync", "async-s2-kl", "async-s2") and not set(p.seeds) & set(first.seeds)
    assert len(p.seeds) == 16 and p.delta == first.delta and p.pilot_pairs == first.pilot_pairs
    cfgs = {a: proto.train_config(p, a, 116, str(tmp_path / a)) for a in p.arms}
    assert cfgs["async-s2-kl"].rl == dataclasses.replace(cfgs["sync"].rl, target_kl=0.0034)
    assert cfgs["async-s2"].rl == cfgs["sync"].rl and cfgs["async-s2"].rl.target_kl == 0.0
    assert cfgs["async-s2-kl"].pipeline == cfgs["async-s2"].pipeline
    assert cfgs["async-s2"].pipeline.staleness_threshold == 2.0
    # the same sync config (fingerprint) as the first workload's sync arm, and the same async-s2
    same = {a: proto.train_config(first, a, 116, str(tmp_path / "f" / a)) for a in ("sync", "async-s2")}
    for a, c in same.items():
        assert proto.config_fingerprint(c)[0] == proto.config_fingerprint(cfgs[a])[0]
    assert len({proto.config_fingerprint(c)[0] for c in cfgs.values()}) == 3


def test_eq45d_arms_differ_only_in_the_pipeline_and_the_learning_rate(tmp_path):
    """The workload after eq45b (results/async/preregistration_45d.md): async-s2-lr is async-s2 with the
    preset's learning rate divided by the staleness (2) and nothing else; sync and async-s2 are eq45b's configs;
    fresh seeds, disjoint from eq45's and eq45b's."""
    import dataclasses

    proto, _ = _protocol()
    p, kl, first = (proto.get_protocol(n) for n in ("eq45d-grpo-s2-lr", "eq45b-grpo-s2-kl", "eq45-grpo-tokens-factor"))
    assert p.arms == ("sync", "async-s2-lr", "async-s2") and p.physics_impl == "jax"
    assert not set(p.seeds) & (set(kl.seeds) | set(first.seeds)) and p.seeds == tuple(range(132, 148))
    assert (p.delta, p.pilot_pairs, p.max_pairs) == (first.delta, first.pilot_pairs, first.max_pairs)
    cfgs = {a: proto.train_config(p, a, 132, str(tmp_path / a)) for a in p.arms}
    assert cfgs["sync"].rl.learning_rate == 5e-5  # rl-grpo-tokens' own
    assert cfgs["async-s2-lr"].rl == dataclasses.replace(cfgs["async-s2"].rl, learning_rate=2.5e-5)
    assert cfgs["async-s2-lr"].pipeline == cfgs["async-s2"].pipeline and cfgs["async-s2"].rl == cfgs["sync"].rl
    assert cfgs["async-s2"].pipeline.staleness_threshold == 2.0
    same = {a: proto.train_config(kl, a, 132, str(tmp_path / "kl" / a)) for a in ("sync", "async-s2")}
    for a, c in same.items():  # the same configs (fingerprints) as eq45b's sync and async-s2
        assert proto.config_fingerprint(c)[0] == proto.config_fingerprint(cfgs[a])[0]
    assert len({proto.config_fingerprint(c)[0] for c in cfgs.values()}) == 3


def test_every_protocol_is_a_workload_the_command_line_accepts():
    """`--workload` offers exactly 'mlp' and the protocols (eq45b-grpo-s2-kl was once defined but refused
    by the command line), and the command parses the newest one."""
    import typing

    mod = _module()
    proto, _ = _protocol()
    choices = set(typing.get_args(typing.get_type_hints(mod.Args)["workload"]))
    assert choices == {"mlp", *proto.PROTOCOLS}
    from vlajax.shared import cli

    a = cli.parse(mod.Args, ["--workload", "eq45b-grpo-s2-kl", "--runs", "async-s2-kl:116", "--reuse"])
    assert a.workload == "eq45b-grpo-s2-kl" and proto.parse_runs(a.runs, proto.get_protocol(a.workload)) == \
        [("async-s2-kl", 116)]


def test_every_saved_protocol_run_matches_its_config_today():
    """Each committed run (results/async/runs/<workload>/<arm>-seed<k>.json, one per workload and arm) has the
    config fingerprint its protocol gives now: no later default (e.g. env.physics_impl, 'auto' since issue
    44.3) changes a pre-registered workload's config. Every protocol names its simulator (never 'auto', which
    resolves per host): MJX, except eq45c-ppo-flow-c, registered on C MuJoCo."""
    proto, _ = _protocol()
    runs = ROOT / "results" / "async" / "runs"
    checked = 0
    for name, p in proto.PROTOCOLS.items():
        for arm in p.arms:
            assert proto.train_config(p, arm, p.seeds[0], "x").env.physics_impl == \
                ("c" if name == "eq45c-ppo-flow-c" else "jax")
            for path in sorted((runs / name).glob(f"{arm}-seed*.json")):
                rec = json.loads(path.read_text())
                now = proto.config_fingerprint(proto.train_config(p, arm, rec["seed"], "x"))
                changed, added = proto.config_changes(rec["config"], now[1]) if "config" in rec else ([], [])
                assert now[0] == rec["fingerprints"]["config_sha256"] or (not changed and added), \
                    (path.name, changed)
                checked += 1
    assert checked >= 75  # grpo-tokens 15, ppo-flow 6, grpo-tokens-factor 4, eq45-grpo-tokens-factor 48, eq45b ...


def test_pinned_seeds_keep_their_own_starting_checkpoint(tmp_path, monkeypatch):
    """A seed pinned to a checkpoint that can no longer be rebuilt (`PINNED_INITS`) pairs only runs from it; the
    other seeds share one checkpoint; eq45d's seeds 132-139 are pinned to their first checkpoint."""
    ap, st = _protocol()
    monkeypatch.setitem(st.PINNED_INITS, "eq", dict.fromkeys((100, 101), {"init_params_sha256": "b" * 64}))
    d = _eq_runs(tmp_path, [0.75] * 6, {"async-s1": [0.0] * 6}, seeds=range(102, 106))
    _eq_runs(tmp_path, [0.75] * 2, {"async-s1": [0.0] * 2}, seeds=range(100, 102), init="b" * 64)
    proto, curves = st.load_dir(d)
    assert proto["starting_checkpoints"] == {"b" * 64: [100, 101], "a" * 64: [102, 103, 104, 105]}
    assert sorted(curves["sync"]) == list(range(100, 106))
    f = tmp_path / "eq" / "async-s1-seed101.json"  # one arm of a pinned seed from the other checkpoint: refused
    rec = json.loads(f.read_text())
    f.write_text(json.dumps(rec | {"fingerprints": rec["fingerprints"] | {"init_params_sha256": "a" * 64}}))
    with pytest.raises(ValueError, match="seed 101 started from b+ in its other arms"):
        st.load_dir(d)
    f.write_text(json.dumps(rec))
    f = tmp_path / "eq" / "sync-seed104.json"  # an unpinned seed from the pinned checkpoint: refused
    rec = json.loads(f.read_text())
    f.write_text(json.dumps(rec | {"fingerprints": rec["fingerprints"] | {"init_params_sha256": "b" * 64}}))
    with pytest.raises(ValueError, match="another starting checkpoint"):
        st.load_dir(d)
    p = ap.get_protocol("eq45d-grpo-s2-lr")
    assert ap.pinned_init(p, 139)["init_params_sha256"].startswith("f68db0dd")
    assert ap.pinned_init(p, 140)["init_params_sha256"].startswith("5830f5d0") and ap.pinned_init(p, 148) is None
