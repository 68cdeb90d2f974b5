"""Console progress says what is happening: phases, a heartbeat during long ones, rates over a window.

The unit tests drive `Progress` with a fake clock (the sync RL run is in the default suite, the SFT one is
`slow`). The two runs (a first SFT compile, a sync RL run) slow one
phase on purpose -- the traced step sleeps `SLOW_S` while it is compiled -- and assert that, with a 1 s
heartbeat, no two console lines are further apart than `MAX_GAP_S` (< `SLOW_S`: without the heartbeat the
slowed phase alone would leave a longer gap). Nothing asserts how fast the machine is.
"""

from __future__ import annotations

import dataclasses
import time

import jax.numpy as jnp
import pytest

from tests.rl import rollout_toy as toy
from tests.sft.conftest import tiny_config, write_dataset
from vlajax.config.schema import CheckpointConfig, EnvConfig, LoggingConfig, RLConfig, TrainConfig
from vlajax.training import logging as vlogging
from vlajax.training.logging import Progress, format_rate

SLOW_S = 12.0  # the slowed compile phase
MAX_GAP_S = 8.0  # the widest gap allowed between console lines with a 1 s heartbeat


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_format_rate_reads_slow_phases_as_seconds_per_step():
    assert format_rate(10, 2.0) == "5.00 it/s"
    assert format_rate(1, 80.0) == "80.0 s/it"  # not "0.01 it/s"
    assert format_rate(0, 5.0) == "no step yet"


def test_phases_heartbeat_window_and_thinning(capsys):
    clock = Clock()
    p = Progress(40, "sft x", "plain", every=1, heartbeat_s=30.0, max_lines=10, clock=clock)
    assert p.every == 4  # 40 steps, at most 10 step lines
    with p.phase("compiling the train step"):
        clock.t = 29.0
        assert p.heartbeat() is None  # 29 s of silence: not yet
        clock.t = 31.0
        assert p.heartbeat() == "0/40 compiling the train step: 31 s"
        clock.t = 95.0
    for step in range(1, 9):
        clock.t += 0.5
        p.update(step, {"loss": 1.0})
    clock.t += 40.0  # a slow stretch: the rate over the window shows it
    p.update(12, {"loss": 0.5})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[sft x] compiling the train step (0 s since the start)"
    assert out[1] == "[sft x] 0/40 compiling the train step: 31 s"
    assert out[2] == "[sft x] 4/40 (compiling the train step: 95 s) loss=1"  # the phase, not a rate
    assert out[3] == "[sft x] 8/40 (2.00 it/s) loss=1"  # over the window since the phase ended
    assert out[4] == "[sft x] 12/40 (3.7 s/it) loss=0.5"  # 12 steps in the 44 s since the phase ended
    clock.t += 31.0
    assert p.heartbeat() == "12/40 step 13: 31 s since step 12 loss=0.5"
    p.resume(30)
    assert p.every == 1  # 10 steps left
    capsys.readouterr()
    q = Progress(4, "quiet", "none", heartbeat_s=0.01)
    with q, q.phase("compiling"):
        time.sleep(0.05)
    assert q.heartbeat() is None and capsys.readouterr().out == ""


def _record(monkeypatch) -> list[tuple[float, str]]:
    """Every console line of `Progress` with the time it was printed."""
    lines: list[tuple[float, str]] = []
    real = vlogging.print_line
    monkeypatch.setattr(vlogging, "print_line", lambda text: (lines.append((time.monotonic(), text)), real(text)))
    return lines


def _slowed(fn):
    def slow(*args, **kwargs):  # runs while jit traces the step: the compile phase takes SLOW_S longer
        time.sleep(SLOW_S)
        return fn(*args, **kwargs)
    return slow


def _gaps(lines: list[tuple[float, str]]) -> list[float]:
    return [b[0] - a[0] for a, b in zip(lines, lines[1:])]


@pytest.mark.slow  # ~2.5 min cold on 2 cores: SFT's first compile on 8 virtual devices
def test_first_sft_compile_prints_a_line_at_least_every_heartbeat(tmp_path, monkeypatch):
    from vlajax.sft import loop as sft

    cfg = tiny_config(write_dataset(str(tmp_path / "demos")), str(tmp_path / "run"), num_steps=2)
    cfg = cfg.replace(logging=dataclasses.replace(cfg.logging, progress="plain", heartbeat_s=1.0))
    monkeypatch.setattr(sft, "train_step", _slowed(sft.train_step))
    lines = _record(monkeypatch)
    sft.train(cfg)
    texts = [t for _, t in lines]
    beats = [t for t in texts if t.startswith("[sft sft-tiny] 0/2 compiling the train step: ")]
    assert any(t.startswith("[sft sft-tiny] compiling the train step (") for t in texts), texts
    assert len(beats) >= SLOW_S / 2, texts  # the heartbeat during the slowed compile
    assert texts[-1].startswith("[sft sft-tiny] 2/2 ("), texts
    assert max(_gaps(lines)) <= MAX_GAP_S, list(zip(_gaps(lines), texts[1:]))


def _toy_setup(cfg):
    from vlajax.rl import actors, mlp_policy
    from vlajax.rl import rollout as ro
    from vlajax.rl import setup as rl_setup

    h, ep = 2, 12
    model = mlp_policy.MLPActorCritic(action_horizon=h, action_dim=4, hidden=(16, 16), value_hidden=(16, 16))
    actor = actors.mlp_actor(model, use_value=True)
    return rl_setup.Setup(actor, toy.make_env(cfg.env.num_envs, h, ep),
                          lambda k: model.init(k, jnp.zeros((1, toy.OBS_DIM)))["params"],
                          lambda params, it: {"mean_success": 0.0, "per_task": {}}, h, ro.decisions_per_episode(ep, h))


def test_sync_rl_prints_a_line_at_least_every_heartbeat(tmp_path, monkeypatch):
    from vlajax.rl import loop

    cfg = TrainConfig(
        output_dir=str(tmp_path), compilation_cache_dir="",
        env=EnvConfig(num_envs=8, episode_length=12, obs_mode="state"),
        rl=RLConfig(algo="ppo", num_iterations=2, rollout_length=4, num_minibatches=2, update_epochs=1, eval_every=0),
        checkpoint=CheckpointConfig(every_steps=1, async_save=False),
        logging=LoggingConfig(every_steps=1, progress="plain", tensorboard=False, heartbeat_s=1.0))
    monkeypatch.setattr(loop, "collect", _slowed(loop.collect))
    lines = _record(monkeypatch)
    loop.train(cfg, _toy_setup(cfg))
    texts = [t for _, t in lines]
    assert any(t.startswith(f"[rl {cfg.name}] compiling the rollout (8 envs) (") for t in texts), texts
    beats = [t for t in texts if t.startswith(f"[rl {cfg.name}] 0/2 compiling the rollout (8 envs): ")]
    assert len(beats) >= SLOW_S / 2, texts
    assert any(t.startswith(f"[rl {cfg.name}] 2/2 (") for t in texts), texts
    assert max(_gaps(lines)) <= MAX_GAP_S, list(zip(_gaps(lines), texts[1:]))
