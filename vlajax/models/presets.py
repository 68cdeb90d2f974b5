"""Named model sizes, and functions that size them under FSDP without allocating anything.

    tiny     ~0.3M params, 32x32 images: tests and smoke runs
    small    ~30M params, 64x64 images: CPU experiments
    base     ~0.3B params, 224x224 images: GPU
    pi0-3b   pi0's shape (PaliGemma-2B prefix + SigLIP-So400m/14 + 300M-class expert), shape-checked only

`param_count` and `fsdp_bytes_per_device` size a preset from `jax.eval_shape` (so `pi0-3b` costs no
memory); `python -m vlajax.bench memory` prints them, and the full SFT memory plan of a training preset.
"""

from __future__ import annotations

import dataclasses
import difflib
import math

import flax.linen as nn
import jax
import numpy as np

from vlajax.config.schema import MESH_AXES, ConfigError, MeshConfig, ModelConfig
from vlajax.models.observation import fake_observation
from vlajax.models.vla import VLA
from vlajax.training.sharding import logical_to_mesh_spec

PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(name="tiny"),
    "small": ModelConfig(
        name="small", image_size=64, patch_size=8, vit_width=256, vit_depth=6, vit_heads=8, vit_mlp_dim=1024,
        width=384, depth=6, num_heads=8, num_kv_heads=4, head_dim=48, mlp_dim=1536, max_text_len=24,
        expert_width=256, expert_mlp_dim=1024, num_denoise_steps=10, action_horizon=8,
    ),
    "base": ModelConfig(
        name="base", image_size=224, patch_size=16, vit_width=768, vit_depth=12, vit_heads=16, vit_mlp_dim=3072,
        width=1024, depth=12, num_heads=16, num_kv_heads=8, head_dim=64, mlp_dim=4096, max_text_len=48,
        expert_width=512, expert_mlp_dim=2048, num_denoise_steps=10, action_horizon=16, dtype="bfloat16",
    ),
    "pi0-3b": ModelConfig(
        name="pi0-3b", image_size=224, patch_size=14, num_cameras=3, vit_width=1152, vit_depth=27, vit_heads=16,
        vit_mlp_dim=4304, width=2048, depth=18, num_heads=8, num_kv_heads=1, head_dim=256, mlp_dim=16384,
        vocab_size=257_152, max_text_len=48, state_dim=32, expert_width=1024, expert_mlp_dim=4096,
        action_dim=32, action_horizon=50, num_denoise_steps=10, dtype="bfloat16",
    ),
}


def get_model_config(name: str, **overrides) -> ModelConfig:
    """The preset `name` with field overrides; an unknown name raises ConfigError naming the closest."""
    if name not in PRESETS:
        close = difflib.get_close_matches(name, PRESETS, n=3, cutoff=0.3)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        raise ConfigError(f"unknown model preset {name!r}; {hint}available: {', '.join(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **overrides)


def abstract_variables(cfg: ModelConfig, batch: int = 1):
    """`jax.eval_shape` of `VLA(cfg).init`: the boxed (logically named) variable tree, no memory."""

    def init(rng):
        return VLA(cfg).init(rng, fake_observation(rng, batch, cfg))

    return jax.eval_shape(init, jax.random.key(0))


def param_count(abstract) -> int:
    return sum(math.prod(x.shape) for x in jax.tree.leaves(nn.unbox(abstract["params"])))


def fsdp_bytes_per_device(abstract, num_devices: int, rules=None) -> dict[str, int]:
    """Largest per-device bytes of params, Adam (mu + nu) and grads on mesh (num_devices, 1, 1)."""
    mesh = jax.sharding.AbstractMesh((num_devices, 1, 1), MESH_AXES)
    rules = MeshConfig().logical_rules if rules is None else rules
    params = 0
    for leaf in jax.tree.leaves(abstract["params"], is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned)):
        names = leaf.names if isinstance(leaf, nn.LogicallyPartitioned) else None
        value = leaf.value if isinstance(leaf, nn.LogicallyPartitioned) else leaf
        spec = logical_to_mesh_spec(names, value.shape, rules, mesh)
        shard = [d // (mesh.shape[a] if a else 1) for d, a in zip(value.shape, tuple(spec) + (None,) * 8)]
        params += math.prod(shard) * np.dtype(value.dtype).itemsize
    # Adam keeps two fp32 moments per parameter; gradients have the parameters' dtype and sharding.
    itemsize_ratio = 4 / max(1, np.dtype(jax.tree.leaves(nn.unbox(abstract["params"]))[0].dtype).itemsize)
    adam = int(2 * params * itemsize_ratio)
    return {"params": params, "adam": adam, "grads": params, "total": 2 * params + adam}
