"""`make quickstart` end to end at the smoke size (`VLAJAX_QUICKSTART_SIZE=smoke`): demos -> SFT
(token head) -> asynchronous GRPO -> the report folder. Slow (several minutes on 2 cores); the
default size is measured, not tested (docs/results.md, "Quickstart")."""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_quickstart_smoke_writes_the_report(tmp_path):
    out = str(tmp_path / "qs")
    env = dict(os.environ, VLAJAX_QUICKSTART_SIZE="smoke", VLAJAX_QUICKSTART_DIR=out)
    proc = subprocess.run([sys.executable, "-m", "vlajax.quickstart.run"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=3000)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = os.path.join(out, "report")
    assert f"report: {os.path.join(report, 'README.md')}" in proc.stdout
    with open(os.path.join(report, "README.md")) as f:
        text = f.read()
    for task in ("goal/put_in_square", "goal/push_to_square", "goal/stack", "goal/press_button"):
        assert re.search(rf"\| {re.escape(task)} \| \d+% \[\d+, \d+\] \| \d+% \[\d+, \d+\] \| [+-]\d+ \|", text), task
    assert "| **mean** |" in text and "python -m vlajax.train" in text
    assert os.path.getsize(os.path.join(report, "curves.png")) > 1000
    with open(os.path.join(report, "summary.json")) as f:
        summary = json.load(f)
    assert [e["update"] for e in summary["evals"]] == [0, 1, 2]  # smoke: 2 updates, evaluated after each
    assert summary["meta"]["seed"] == 0 and summary["staleness_max"] is not None
    assert len([f for f in os.listdir(report) if f.endswith(".gif")]) == 4
    # the SFT phase trained the token head, the RL phase ran the asynchronous pipeline
    with open(os.path.join(out, "sft", "checkpoints", "policy.json")) as f:
        assert '"action_head": "tokens"' in f.read()
    assert os.path.isfile(os.path.join(out, "rl", "async_metrics.jsonl"))


def test_quickstart_settings_parse_and_refuse():
    """`VLAJAX_QUICKSTART_SEED` / `_SIZE`: defaults, a valid seed, and one `error:` line for an
    invalid one (raised before any phase runs: `main` calls this first)."""
    from vlajax.quickstart.run import _settings

    assert _settings({}) == ("default", 0)
    assert _settings({"VLAJAX_QUICKSTART_SEED": "2", "VLAJAX_QUICKSTART_SIZE": "smoke"}) == ("smoke", 2)
    for bad in ("-1", "x", "1.5", "", str(2**31)):
        with pytest.raises(SystemExit, match=r"^error: VLAJAX_QUICKSTART_SEED must be an integer"):
            _settings({"VLAJAX_QUICKSTART_SEED": bad})
    with pytest.raises(SystemExit, match=r"^error: VLAJAX_QUICKSTART_SIZE must be one of default, smoke"):
        _settings({"VLAJAX_QUICKSTART_SIZE": "big"})


def test_quickstart_refuses_a_bad_seed_before_running(tmp_path):
    """The process exits 1 with one `error:` line and creates no output folder."""
    out = tmp_path / "qs"
    env = dict(os.environ, VLAJAX_QUICKSTART_SEED="-3", VLAJAX_QUICKSTART_DIR=str(out))
    proc = subprocess.run([sys.executable, "-m", "vlajax.quickstart.run"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == ["error: VLAJAX_QUICKSTART_SEED must be an integer in [0, 2**31), "
                                                "got '-3'"]
    assert proc.stdout == "" and not out.exists()


def test_quickstart_rl_recipe_parses():
    """The RL phase's flags give train-async GRPO at staleness 1 with decoupled PPO, the preset's progress
    reward, the zero-variance filter and clip-higher, rollouts at temperature 0.5 and a KL penalty to the SFT policy."""
    from vlajax.quickstart.run import RL_RECIPE
    from vlajax.train import parse

    cfg = parse("rl", ["--preset", "rl-grpo-tokens", *RL_RECIPE])
    assert cfg.pipeline.enabled and cfg.pipeline.staleness_threshold == 1 and not cfg.pipeline.use_rollout_log_probs
    assert cfg.rl.algo == "grpo" and cfg.rl.reward == "progress" and cfg.rl.filter_zero_advantage
    assert cfg.rl.clip_high > cfg.rl.clip_low
    assert cfg.rl.temperature == 0.5 and cfg.rl.kl_coef == 0.04


def _fake_run(root, evals, n=20, metrics=True):
    """A quickstart output folder with RL evaluations {update: {task: success}} and per-update metrics."""
    for u, per_task in evals.items():
        d = root / "rl" / "eval" / f"iteration-{u}"
        d.mkdir(parents=True)
        mean = sum(per_task.values()) / len(per_task)
        (d / "eval.json").write_text(json.dumps({"per_task": per_task, "mean_success": mean, "episodes_per_task": n}))
    if metrics:
        lines = []
        for u in range(1, max(evals) + 1):
            lines.append({"update": u, "env/steps_per_s": 100.0 + u, "trainer/idle_ratio": 0.2,
                          "rollouter/idle_ratio": 0.1, "staleness/mean": 0.0 if u == 1 else 1.0,
                          "staleness/max": 0.0 if u == 1 else 1.0})
            lines.append({"update": u, "train": {"success": 0.5 + 0.01 * u, "loss": 0.1, "policy_loss": 0.05,
                                                 "kl_ref": 0.5, "approx_kl": 0.02}})
        (root / "rl" / "async_metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def test_quickstart_report_reads_the_run_and_writes_intervals(tmp_path):
    """The report from a run folder: the before/after table with per-task Wilson intervals, the evaluation curve,
    summary.json and an 8-panel figure; it refuses a run without two evaluations."""
    from vlajax.quickstart import report as qr

    assert qr.wilson(0, 20)[0] == 0.0 and qr.wilson(0, 20)[1] == pytest.approx(0.1611, abs=1e-4)
    assert qr.wilson(20, 20)[1] == 1.0 and qr.wilson(10, 20) == pytest.approx((0.2993, 0.7007), abs=1e-4)
    tasks = ["goal/put_in_square", "goal/push_to_square", "goal/stack", "goal/press_button"]
    _fake_run(tmp_path, {0: dict(zip(tasks, (0.0, 0.4, 0.25, 1.0))), 5: dict(zip(tasks, (0.3, 0.4, 0.5, 1.0))),
                         10: dict(zip(tasks, (0.6, 0.25, 0.9, 1.0)))})
    meta = {"seed": 7, "episodes": 5, "sft_steps": 500, "rl_iterations": 10, "eval_episodes": 20, "minutes": 12.5}
    s = qr.write(str(tmp_path), meta)
    assert [e["update"] for e in s["evals"]] == [0, 5, 10] and s["lift"] == pytest.approx(0.6875 - 0.4125)
    assert s["after"]["per_task"]["goal/stack"]["low"] == pytest.approx(qr.wilson(18, 20)[0])
    assert s["after"]["low"] == pytest.approx(qr.wilson(55, 80)[0]) and s["staleness_max"] == 1.0
    text = (tmp_path / "report" / "README.md").read_text()
    assert "| goal/put_in_square | 0% [0, 16] | 60% [39, 78] | +60 |" in text
    assert "| **mean** | **41.2% [31, 52]** | **68.8% [58, 78]** | **+27.5** |" in text
    assert "41.2% (update 0) -> 55.0% (update 5) -> 68.8% (update 10)" in text
    assert (tmp_path / "report" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "report" / "summary.json").read_text())["meta"]["seed"] == 7
    assert qr.write(str(tmp_path))["meta"] == meta  # rewritten from the saved meta.json
    with pytest.raises(ValueError, match="before and after"):
        _fake_run(tmp_path / "one", {0: dict(zip(tasks, (0.0, 0.4, 0.25, 1.0)))}, metrics=False)
        qr.write(str(tmp_path / "one"), meta)


def test_quickstart_seeds_sync_pair_differs_only_in_the_pipeline(tmp_path):
    """experiments/quickstart_seeds.py: the sync arm is the quickstart's RL phase without the pipeline flags
    (same preset, seed, iterations, evaluations, temperature and KL), from the same SFT checkpoint."""
    import sys

    sys.path.insert(0, ROOT)
    from experiments import quickstart_seeds as qs
    from vlajax.train import parse

    a = qs.Args(mode="run", seeds=(201,), out=str(tmp_path / "o"), work=str(tmp_path / "w"))
    cmds = qs.commands(a, 201)
    env, argv = cmds["async"]
    assert env["VLAJAX_QUICKSTART_SEED"] == "201" and argv[1:] == ["-m", "vlajax.quickstart.run"]
    from vlajax.quickstart.run import rl_command

    ckpt = os.path.join(env["VLAJAX_QUICKSTART_DIR"], "sft", "checkpoints")
    asyn = parse("rl", rl_command(ckpt, "x", "default", 201)[1:])  # what the quickstart runs for seed 201
    sync = parse("rl", cmds["sync"][1][4:])  # [python, -m, vlajax.train, rl, ...]
    assert asyn.pipeline.enabled and not sync.pipeline.enabled
    assert sync.rl == asyn.rl and sync.env == asyn.env and sync.model == asyn.model and sync.seed == asyn.seed == 201
    assert sync.rl.init_from == ckpt and (sync.rl.num_iterations, sync.rl.eval_every) == (20, 5)
    assert sync.rl.temperature == 0.5 and sync.rl.kl_coef == 0.04 and sync.rl.eval_seed == -1


def test_quickstart_seeds_summary_from_per_seed_json(tmp_path, capsys):
    """The lift per arm with its interval and the paired difference, from per-seed JSONs; a pair whose update-0
    evaluations differ is refused; smoke results are refused inside docs/."""
    import sys

    sys.path.insert(0, ROOT)
    from experiments import quickstart_seeds as qs

    def save(arm, seed, before, after):
        rec = {"arm": arm, "seed": seed, "before": {"mean": before}, "after": {"mean": after}, "lift": after - before,
               "minutes": 30.0}
        (tmp_path / f"{arm}-seed{seed}.json").write_text(json.dumps(rec))

    for seed, b, a_, s_ in ((200, 0.4, 0.6, 0.5), (201, 0.35, 0.5, 0.55), (202, 0.45, 0.7, 0.6)):
        save("async", seed, b, a_)
        save("sync", seed, b, s_)
    r = qs.summarize(str(tmp_path))
    assert r["arms"]["async"]["lifts"] == pytest.approx([0.2, 0.15, 0.25])
    lift = r["arms"]["async"]["lift"]
    assert lift["mean"] == pytest.approx(0.2) and lift["low"] == min(lift["t_low"], lift["boot_low"]) < 0.2
    assert r["paired"]["values"] == pytest.approx([0.1, -0.05, 0.1]) and r["paired"]["seeds"] == [200, 201, 202]
    qs.main(["report", "--out", str(tmp_path)])
    assert "| async | 200, 201, 202 |" in (tmp_path / "summary.md").read_text()
    save("sync", 202, 0.5, 0.6)  # another start: not a pair
    with pytest.raises(ValueError, match="202"):
        qs.summarize(str(tmp_path))
    with pytest.raises(SystemExit) as e:
        qs.main(["run", "--size", "smoke", "--out", "results/runs/x", "--dry-run"])
    assert e.value.code == 2 and "error: --size smoke" in capsys.readouterr().err
