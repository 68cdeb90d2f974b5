"""`python -m vlajax.bench async`: rows per regime through the production loops (`rl.loop.train`,
`rl.async_loop.train_async`), the emulated farm calibrated on measured C MuJoCo step times."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from vlajax.bench import async_loops

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--repeats", "1", "--updates", "2", "--envs", "4", "--slots", "2", "--horizon", "2", "--width", "16"]


def _bench(args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("XLA_FLAGS", None)  # one CPU device, like a user's run
    return subprocess.run([sys.executable, "-m", "vlajax.bench", "async", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_calibrate_recovers_a_latency_model():
    rng = np.random.default_rng(0)
    steps = 1e-4 * np.exp(0.2 * rng.standard_normal(20_000)) * np.where(rng.random(20_000) < 0.05, 8.0, 1.0)
    m = async_loops.calibrate(list(steps), scale=10.0)
    assert m.median_s == pytest.approx(1e-3, rel=0.05)
    assert m.sigma == pytest.approx(0.2, rel=0.1)
    assert m.tail_prob == pytest.approx(0.05, abs=0.01) and m.tail_scale == pytest.approx(8.0, rel=0.15)


def test_union_of_sleep_intervals_is_clipped_to_the_window():
    union, summed = async_loops._union([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (9.0, 12.0)], 1.0, 10.0)
    assert union == pytest.approx(1.0 + 1.0 + 1.0 + 1.0) and summed == pytest.approx(1.0 + 2.0 + 1.0 + 1.0)


def test_mode_configs():
    sync = async_loops.pipeline_config("sync", 4, 2.0, 60.0)
    assert not sync.enabled
    ta = async_loops.pipeline_config("train_async", 4, 2.0, 60.0)
    assert ta.enabled and ta.num_slots == 1 and ta.staleness_threshold == 1.0 and not ta.streaming
    ra = async_loops.pipeline_config("rollout_async", 4, 2.0, 60.0)
    assert ra.num_slots == ra.require_batches == 4 and ra.staleness_threshold == 0.0
    part = async_loops.pipeline_config("+partial_rollout", 4, 2.0, 60.0)
    assert part.streaming and part.partial_rollout and part.staleness_threshold == 1.0


def test_workload_policy_of_state_and_pixel_presets():
    """State presets time their MLP at --width; pixel PPO presets the sft-small VLA with their own head,
    the privileged critic replaced by the VLA's value head in every mode (the slots have no privileged obs)."""
    import vlajax.config.presets  # noqa: F401
    from vlajax.config.presets.sft import SMALL_CPU_MODEL
    from vlajax.config.schema import get_config

    state = get_config("rl-debug")
    assert async_loops.workload_model(state, None).width == 256 and async_loops.workload_model(state, 16).width == 16
    assert async_loops.workload_critic(state) == state.rl.critic
    pixels = get_config("rl-ppo-flow")
    assert pixels.rl.critic == "privileged"
    m = async_loops.workload_model(pixels, None)
    assert (m.name, m.width, m.depth, m.image_size) == ("sft-small", SMALL_CPU_MODEL.width, SMALL_CPU_MODEL.depth, 32)
    assert (m.action_head, m.flow_sampler, m.flow_sde_steps, m.value_head) == ("flow", "flow_sde", "last", "expert")
    for mode in async_loops.MODES:
        cfg = async_loops.run_config(pixels, "mjx", mode, envs=4, slots=2, horizon=2, width=None, updates=2,
                                     max_wait_ms=2.0, out_dir="/tmp/x")
        assert cfg.rl.critic == "head" and cfg.model == m and cfg.env.obs_mode == "pixels"


@pytest.mark.parametrize("args", [["--updates", "1"], ["--envs", "6", "--slots", "4"], ["--farm-scale", "0"],
                                  ["--preset", "rl-grpo-tokens"], ["--preset", "rl-ppo-flow", "--width", "64"],
                                  ["--modes", "nope"],
                                  ["--render", "/nonexistent.json"], ["--json", "/nonexistent/dir/out.json"]])
def test_bad_flags_are_refused_with_one_error_line(args):
    with pytest.raises(SystemExit) as e:
        async_loops.main(args)
    assert e.value.code == 2


@pytest.mark.entry
@pytest.mark.timeout(600)
def test_cpu_regimes_through_the_production_loops(tmp_path):
    """cpu-sim and emulated-farm, sync and the fully async mode: each row ran the loop it names and
    carries that loop's own report; the farm is calibrated on the per-env C steps of a cpu-sim sync run
    of its own (the rows step their envs in one native batch per call, untimed per env)."""
    out = tmp_path / "async.json"
    marks = tmp_path / "between.txt"  # --between-repeats: before the repeat and after the last
    done = _bench(["--json", str(out), "--regimes", "cpu-sim", "emulated-farm", "--modes", "sync", "+partial_rollout",
                   "--between-repeats", f"echo $VLAJAX_BENCH_REPEAT >> {marks}", *TINY])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert [(r["regime"], r["mode"]) for r in rows] == [
        (g, m) for g in ("cpu-sim", "emulated-farm") for m in ("sync", "+partial_rollout")]
    for r in rows:
        run = r["runs"][0]
        assert r["env_steps_per_s"] > 0 and r["updates_per_s"] > 0 and r["physics_impl"] == "c"
        assert run["c_calls"] > 0 and run["c_real_s"] > 0 and "c_env_step" not in run
        assert run["loadavg_1m_before"] >= 0 and run["loadavg_1m_after"] >= 0
        if r["mode"] == "sync":
            assert r["entry"] == "vlajax.rl.loop.train" and r["speedup_vs_sync"] == 1.0
            assert len(run["loop"]["iteration_times"]) == 3  # 1 warm-up + 2 timed iterations of the loop
        else:
            assert r["entry"] == "vlajax.rl.async_loop.train_async"
            steady = run["loop"]["summary_steady"]  # the pipeline's own summary of the timed window
            assert "trainer/idle_ratio" in steady and r["trainer_idle_ratio"] == steady["trainer/idle_ratio"]
            assert len(run["loop"]["update_times"]) == 3 and r["staleness_max"] <= 1
    farm = [r for r in rows if r["regime"] == "emulated-farm"]
    assert all(0 < r["emulated_wall_fraction"] <= 1 for r in farm)
    meta = data["meta"]
    assert meta["farm"]["scale"] == 20.0 and meta["farm"]["calibrated_on"].startswith("a cpu-sim sync run before")
    assert meta["farm"]["c_env_step"]["n"] > 0
    assert meta["farm"]["latency_model"]["median_s"] == pytest.approx(20.0 * meta["farm"]["c_env_step"]["median_ms"]
                                                                      / 1e3)
    assert "load average" in meta["uptime_before"] and set(meta["reality"]) == {"cpu-sim", "emulated-farm"}
    assert marks.read_text().split() == ["0", "1"]
    assert [r["repeat"] for r in meta["between_repeats"]["runs"]] == [0, 1]
    assert all(r["rc"] == 0 and r["seconds"] >= 0 for r in meta["between_repeats"]["runs"])
    shown = _bench(["--render", str(out)], timeout=120)
    assert shown.returncode == 0 and "**emulated-farm**" in shown.stdout


def test_a_failing_between_repeats_command_ends_the_bench_with_one_error_line(tmp_path):
    out = tmp_path / "async.json"
    done = _bench(["--json", str(out), "--regimes", "cpu-sim", "--modes", "sync", "--between-repeats", "exit 3", *TINY])
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("error: --between-repeats exited 3")
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.entry
@pytest.mark.timeout(1500)
def test_all_three_regimes(tmp_path):
    out = tmp_path / "async.json"
    done = _bench(["--json", str(out), "--modes", "sync", "train_async", "+partial_rollout", *TINY], timeout=1400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["regime"], r["mode"]) for r in rows] == [
        (g, m) for g in ("mjx", "cpu-sim", "emulated-farm") for m in ("sync", "train_async", "+partial_rollout")]
    assert all(r["env_steps_per_s"] > 0 for r in rows)
    assert rows[0]["physics_impl"] == "jax" and "c_calls" not in rows[0]["runs"][0]


@pytest.mark.slow
@pytest.mark.entry
@pytest.mark.timeout(1200)
def test_pixel_vla_rows(tmp_path):
    """--preset rl-ppo-flow: the sft-small VLA from pixels through the sync loop and the fully async
    pipeline (env slots), the workload declared in the JSON."""
    out = tmp_path / "vla.json"
    done = _bench(["--json", str(out), "--preset", "rl-ppo-flow", "--regimes", "mjx", "--modes", "sync",
                   "train_async+rollout_async", "--repeats", "1", "--updates", "2", "--envs", "4", "--slots", "2",
                   "--horizon", "2"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    w = data["meta"]["workload"]
    assert (w["policy"], w["obs_mode"], w["critic"], w["model"]["name"]) == ("vla", "pixels", "head", "sft-small")
    assert w["env_steps_per_update"] == 4 * 2 * 4  # envs x horizon x rl.chunk_steps
    assert (w["action_horizon"], w["model_action_horizon"]) == (4, 8)  # env steps per decision: what plan reads
    rows = data["rows"]
    assert [r["mode"] for r in rows] == ["sync", "train_async+rollout_async"]
    assert all(r["env_steps_per_s"] > 0 for r in rows) and rows[1]["staleness_max"] <= 1
