"""`python -m vlajax.train`: help lists fields, bad presets and meshes fail before compiling."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from vlajax import train


def _run(*args, timeout=240):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_LOG_COMPILES": "1"}
    return subprocess.run(
        [sys.executable, "-m", "vlajax.train", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_top_level_help_lists_commands_presets_and_fields():
    p = _run("--help")
    assert p.returncode == 0, p.stderr
    for word in ("sft", "rl", "eval", "cpu-small", "--mesh.dp", "--rl.clip-high", "--pipeline.staleness-threshold"):
        assert word in p.stdout, word
    # Field comments become help text.
    assert "tensor parallel size" in p.stdout


def test_sft_help_lists_the_fields():
    p = _run("sft", "--help")
    assert p.returncode == 0, p.stderr
    for word in ("--sft.learning-rate", "--data.batching", "--checkpoint.every-steps", "peak learning rate"):
        assert word in p.stdout, word


def test_wrong_preset_suggests_closest_names():
    p = _run("sft", "--preset", "cpu-smal")
    assert p.returncode == 2
    assert "did you mean 'cpu-small'" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_unknown_command_is_an_error():
    p = _run("tran")
    assert p.returncode == 2 and "unknown command" in p.stderr


@pytest.mark.parametrize(
    "args, reason",
    [
        (("--mesh.dp", "3"), "does not match the 1 available devices"),
        (("--mesh.tp", "2", "--mesh.dp", "1"), "does not match the 1 available devices"),
    ],
)
def test_invalid_mesh_exits_before_any_compile(args, reason):
    p = _run("smoke", "--data.batch-size", "6", "--model.num-heads", "8", "--model.num-kv-heads", "2", *args)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and reason in lines[0], p.stderr
    assert "Finished XLA compilation" not in p.stderr and "Compiling" not in p.stderr


def test_config_contradiction_is_reported_in_one_line():
    p = _run("smoke", "--mesh.dp", "3")  # debug preset: batch 8 does not divide dp=3
    assert p.returncode == 2
    assert "data.batch_size=8 is not divisible by mesh.dp=3" in p.stderr


def test_parse_applies_overrides_on_the_preset():
    cfg = train.parse("rl", ["--preset", "cpu-small", "--rl.algo", "grpo", "--seed", "7"])
    assert cfg.name == "cpu-small" and cfg.rl.algo == "grpo" and cfg.seed == 7
    assert cfg.env.num_envs == 32  # from the preset


@pytest.mark.entry
def test_smoke_trains_checkpoints_and_resumes(tmp_path):
    out = str(tmp_path / "run")
    common = (
        "--output-dir",
        out,
        "--sft.learning-rate",
        "3e-3",
        "--checkpoint.every-steps",
        "10",
        "--logging.progress",
        "none",
    )
    p = _run("smoke", "--sft.num-steps", "20", *common)
    assert p.returncode == 0, p.stderr[-3000:]
    first = json.loads(p.stdout.strip().splitlines()[-1])
    assert first["start_step"] == 0 and first["final_loss"] < first["first_logged_loss"]
    p = _run("smoke", "--sft.num-steps", "30", *common)
    assert p.returncode == 0, p.stderr[-3000:]
    second = json.loads(p.stdout.strip().splitlines()[-1])
    assert second["start_step"] == 20
    assert sorted(os.listdir(os.path.join(out, "checkpoints")))[-1] == "30"
    # a fresh run over those steps would fail at its first save that meets one: refused before anything compiles
    p = _run("smoke", "--sft.num-steps", "30", *common, "--checkpoint.no-resume")
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert p.returncode == 2 and len(errors) == 1, p.stderr
    assert "already holds checkpoints (steps 10, 20, 30)" in errors[0], p.stderr
    assert "Compiling" not in p.stderr and sorted(os.listdir(os.path.join(out, "checkpoints")))[-1] == "30"
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(os.path.join(out, "tb")))


def test_a_library_fresh_run_over_saved_steps_is_refused_at_its_checkpointer(tmp_path):
    """Callers that skip the CLI's preflight (a notebook calling `vlajax.rl.loop.train`) meet the same refusal where
    every training loop opens its checkpoints, before it trains; with resume (the default) the same directory opens."""
    from vlajax.config.schema import CheckpointConfig, ConfigError
    from vlajax.policies import run_files

    (tmp_path / "checkpoints" / "7").mkdir(parents=True)
    cfg = train.parse("rl", ["--preset", "rl-debug"]).replace(output_dir=str(tmp_path))
    with pytest.raises(ConfigError, match=r"already holds checkpoints \(steps 7\)"):
        run_files.run_checkpointer(cfg.replace(checkpoint=CheckpointConfig(resume=False)))
    directory, ckpt = run_files.run_checkpointer(cfg)
    try:
        assert directory == str(tmp_path / "checkpoints")
    finally:
        ckpt.close()


@pytest.mark.multiprocess
@pytest.mark.entry
def test_two_process_cli_run_with_env_var_launch(tmp_path):
    """The documented plain launch: same command per process, JAX_* variables tell who is who."""
    import portpicker

    port = portpicker.pick_unused_port()
    out = str(tmp_path / "run")
    procs = []
    for pid in range(2):
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
               "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(pid)}
        cmd = [sys.executable, "-m", "vlajax.train", "smoke", "--output-dir", out, "--sft.num-steps", "6",
               "--checkpoint.every-steps", "3", "--logging.progress", "none", "--mesh.tp", "2",
               "--distributed.local-device-count", "2"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=240)
            assert p.returncode == 0, e[-3000:]
            outs.append(o)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    summaries = [[ln for ln in o.splitlines() if ln.startswith("{")] for o in outs]
    assert len(summaries[0]) == 1 and not summaries[1]  # only process 0 prints the summary
    summary = json.loads(summaries[0][0])
    assert summary["devices"] == 4 and summary["processes"] == 2
    # Orbax also keeps the first step (a guard against early crashes), then every 3rd.
    assert sorted(os.listdir(os.path.join(out, "checkpoints")), key=int) == ["1", "3", "6"]


def test_booleans_are_flags_and_the_value_spelling_is_deprecated(capsys):
    cfg = train.parse("rl", ["--preset", "rl-debug", "--pipeline.enabled", "--checkpoint.no-resume"])
    assert cfg.pipeline.enabled is True and cfg.checkpoint.resume is False
    assert capsys.readouterr().err == ""
    old = train.parse("rl", ["--preset", "rl-debug", "--pipeline.enabled", "true", "--checkpoint.resume=false",
                             "--logging.tensorboard", "False", "--seed", "3"])
    assert old == dataclasses.replace(cfg, seed=3, logging=dataclasses.replace(cfg.logging, tensorboard=False))
    err = capsys.readouterr().err
    assert "deprecated" in err and "--checkpoint.resume=false -> --checkpoint.no-resume" in err
