"""brax's own PPO, through brax's own training wrappers, runs on a state-observation task."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.envs import registry

ppo = pytest.importorskip("brax.training.agents.ppo.train")
brax_wrappers = pytest.importorskip("brax.envs.wrappers.training")


def _device_put_replicated(x, devices):
    """The drop-in replacement from JAX's pmap migration guide for the removed `jax.device_put_replicated`."""
    sharding = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(devices), ("d",)), jax.sharding.PartitionSpec("d"))
    return jax.tree.map(lambda a: jax.device_put(jnp.stack([a] * len(devices)), sharding), x)


@pytest.mark.slow  # ~1 min of compiles on an idle 2-core CPU (PPO's training step + brax's wrappers)
def test_brax_ppo_runs_a_few_iterations(monkeypatch):
    # brax 0.14.2 still calls `jax.device_put_replicated`, which jax 0.12 removed; supply the documented
    # replacement. brax's PPO and its wrappers are otherwise used unchanged.
    monkeypatch.setattr(jax, "device_put_replicated", _device_put_replicated, raising=False)
    env = registry.load("goal/press_button", obs_mode="state")
    progress = []
    _, params, metrics = ppo.train(
        environment=env,
        wrap_env_fn=brax_wrappers.wrap,  # brax's EpisodeWrapper + VmapWrapper + AutoResetWrapper
        num_timesteps=2 * 8 * 10,
        episode_length=20,
        num_envs=8,
        batch_size=8,
        num_minibatches=1,
        unroll_length=10,
        num_updates_per_batch=1,
        num_evals=2,
        num_eval_envs=8,
        max_devices_per_host=1,
        normalize_observations=True,
        seed=0,
        progress_fn=lambda step, m: progress.append((step, m)),
    )
    assert len(progress) >= 2 and progress[-1][0] > 0  # trained and evaluated more than once
    reward = progress[-1][1]["eval/episode_reward"]
    assert np.isfinite(reward)
    assert "eval/episode_reward/press" in progress[-1][1]  # our metrics went through brax's EvalWrapper
    assert params is not None
