"""Named model sizes, and a command that sizes them under FSDP without allocating anything.

    tiny     ~0.3M params, 32x32 images: tests and smoke runs
    small    ~30M params, 64x64 images: CPU experiments
    base     ~0.3B params, 224x224 images: GPU
    pi0-3b   pi0's shape (PaliGemma-2B prefix + SigLIP-So400m/14 + 300M-class expert), shape-checked only

`python -m vlajax.models.presets [NAME ...] [--devices 8 64 256]` prints, per preset, the
parameter count and the per-device bytes of params + Adam moments + gradients when every
parameter is sharded over `dp` by its logical names (FSDP; mesh (n, 1, 1)). Shapes come from
`jax.eval_shape`, so `pi0-3b` costs no memory.

`python -m vlajax.models.presets --preset pi05 --devices 8 64 256 --batch 256 [--tp 2]` prints the
full SFT memory plan of a training preset (`vlajax.config.presets`, e.g. pi0 / pi05) or of a model size
above: per device params, optimizer, EMA, gradients and activations (with `model.remat`) on the
mesh `mesh.*` gives for each device count (`vlajax.policies.memory`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys

import flax.linen as nn
import jax
import numpy as np
import tyro

from vlajax.config.schema import MESH_AXES, ConfigError, MeshConfig, ModelConfig
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
    from vlajax.models.observation import fake_observation  # noqa: PLC0415
    from vlajax.models.vla import VLA  # noqa: PLC0415

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


def _gib(n: int) -> str:
    return f"{n / 2**30:8.2f} GiB" if n >= 2**30 else f"{n / 2**20:8.1f} MiB"


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    names: tyro.conf.Positional[tuple[str, ...]] = ()  # presets (default: all)
    devices: tuple[int, ...] = (8, 64, 256)  # FSDP sizes
    preset: tuple[str, ...] = ()  # training presets (or sizes above): full SFT memory plan
    batch: int = 0  # with --preset: the global batch (0 = the preset's data.batch_size)
    tp: int = 0  # with --preset: mesh.tp (0 = the preset's)
    sp: int = 0  # with --preset: mesh.sp (0 = the preset's)


def main(argv: list[str] | None = None) -> int:
    from vlajax.shared import cli

    args = cli.parse(Args, argv, prog="python -m vlajax.models.presets", description=__doc__.split("\n\n")[0])
    if args.preset:
        return _plan_main(args)
    if args.batch or args.tp or args.sp:
        print("error: --batch / --tp / --sp need --preset", file=sys.stderr)
        return 2
    try:
        cfgs = [get_model_config(n) for n in args.names or PRESETS]
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for cfg in cfgs:
        abstract = abstract_variables(cfg)
        n = param_count(abstract)
        print(f"{cfg.name}: {n:,} parameters ({n / 1e6:.1f}M), param dtype {cfg.param_dtype}, "
              f"prefix {cfg.prefix_len} tokens, head {cfg.action_head}")
        for d in args.devices:
            b = fsdp_bytes_per_device(abstract, d)
            print(f"  FSDP over {d:4d} devices: params {_gib(b['params'])}  adam {_gib(b['adam'])}  "
                  f"grads {_gib(b['grads'])}  total {_gib(b['total'])} per device")
    return 0


def _train_config(name: str):
    """A training preset by name, or a model size above inside a default TrainConfig."""
    from vlajax.config.schema import TrainConfig, get_config  # noqa: PLC0415

    return TrainConfig(model=get_model_config(name)) if name in PRESETS else get_config(name)


def _plan_main(args: Args) -> int:
    from vlajax.policies import memory  # noqa: PLC0415
    from vlajax.training.sharding import resolve_mesh_shape  # noqa: PLC0415

    try:
        if args.names:
            raise ConfigError("give presets with --preset only (positional names are the FSDP table)")
        if args.batch < 0 or args.tp < 0 or args.sp < 0:
            raise ConfigError("--batch, --tp and --sp must be >= 0")
        cfgs = []
        for name in args.preset:
            cfg = _train_config(name)
            mesh = dataclasses.replace(cfg.mesh, **{k: v for k, v in (("tp", args.tp), ("sp", args.sp)) if v})
            cfg = dataclasses.replace(cfg, mesh=mesh)
            batch = args.batch or cfg.data.batch_size
            for d in args.devices:
                dp = resolve_mesh_shape(cfg.mesh, d)[0]
                if batch % dp:
                    raise ConfigError(f"--batch {batch} is not divisible by dp={dp} on {d} devices")
            cfgs.append((name, cfg, batch))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, cfg, batch in cfgs:
        state = memory.abstract_state(cfg)
        n = param_count({"params": state.params})
        m = cfg.model
        print(f"{name}: {n:,} parameters, params {m.param_dtype}, compute {m.dtype}, remat {m.remat}, "
              f"EMA {cfg.sft.ema_decay > 0}, global batch {batch}")
        print(f"  {'devices':>7}  {'mesh dp,tp,sp':>13}  {'params':>12}  {'optimizer':>12}  {'ema':>12}  "
              f"{'grads':>12}  {'activations':>12}  {'total':>12}")
        for d in args.devices:
            p = memory.plan(cfg, d, batch, state)
            mesh = ",".join(map(str, p["mesh"]))
            print(f"  {d:7d}  {mesh:>13}  " + "  ".join(
                _gib(p[k]) for k in ("params", "optimizer", "ema", "grads", "activations", "total")))
            if p["unsplit_modules"]:
                print(f"  {'':24}{_gib(p['unsplit_params']).strip()} of params not split over dp={p['mesh'][0]} "
                      f"(no dim divides it): {', '.join(p['unsplit_modules'][:3])}, ...; try --tp 2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
