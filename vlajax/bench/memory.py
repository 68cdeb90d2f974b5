"""`python -m vlajax.bench memory`: parameter counts and per-device memory of the presets, nothing allocated.

    python -m vlajax.bench memory [NAME ...] [--devices 8 64 256]
    python -m vlajax.bench memory --preset pi05 --devices 8 64 256 --batch 256 [--tp 2]

The first form prints, per model size (`vlajax.models.presets`), the parameter count and the per-device
bytes of params + Adam moments + gradients when every parameter is sharded over `dp` by its logical names
(FSDP; mesh (n, 1, 1)). The second prints the full SFT memory plan of a training preset
(`vlajax.config.presets`, e.g. pi0 / pi05) or of a model size: per device params, optimizer, EMA,
gradients and activations (with `model.remat`) on the mesh `mesh.*` gives for each device count
(`vlajax.policies.memory`). Shapes come from `jax.eval_shape`.
"""

from __future__ import annotations

import dataclasses
import sys

import tyro

from vlajax.config.schema import ConfigError, TrainConfig, get_config
from vlajax.models.presets import PRESETS, abstract_variables, fsdp_bytes_per_device, get_model_config, param_count
from vlajax.policies import memory
from vlajax.shared import cli
from vlajax.training.sharding import resolve_mesh_shape


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
    args = cli.parse(Args, argv, prog="python -m vlajax.bench memory", description=__doc__.splitlines()[0])
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
    return TrainConfig(model=get_model_config(name)) if name in PRESETS else get_config(name)


def _plan_main(args: Args) -> int:
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
