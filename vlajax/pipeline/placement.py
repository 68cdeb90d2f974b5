"""Placement: which devices the rollout roles (simulator + generator) and the trainer use.

- `colocated`: rollout and training share every device (time-shared).
- `disaggregated`: on every host the local devices are split `rollout:train` by
  `AsyncConfig.placement_ratio` (e.g. '1:1', '3:1' = 6 rollout + 2 train of 8); disjoint.
- `hybrid`: simulation + inference on the rollout share of each host's devices, training on
  all devices.

Rollout is host-local (DESIGN.md "Multi-host shape"): the rollout mesh holds only this
process's devices, so the sampling hot loop has no cross-host collectives. The train mesh is
global: it takes the train share of every host's devices. Both are `(dp, tp, sp)` meshes with
the run's tp and sp (dp absorbs the rest), built by `vlajax.training.sharding.make_mesh`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
from jax.sharding import Mesh

from vlajax.config.schema import AsyncConfig, ConfigError, MeshConfig
from vlajax.training.sharding import make_mesh

__all__ = ["Placement", "parse_ratio", "rollout_share", "make_placement"]


@dataclasses.dataclass(frozen=True)
class Placement:
    """The two sub-meshes of a run. rollout_mesh: this host's rollout devices; train_mesh: global."""

    kind: str
    rollout_mesh: Mesh
    train_mesh: Mesh

    @property
    def rollout_devices(self) -> list[jax.Device]:
        return list(self.rollout_mesh.devices.flat)

    @property
    def train_devices(self) -> list[jax.Device]:
        return list(self.train_mesh.devices.flat)

    @property
    def shared(self) -> list[jax.Device]:
        """Devices both roles use (all for colocated, the rollout share for hybrid, none otherwise)."""
        train = {d.id for d in self.train_devices}
        return [d for d in self.rollout_devices if d.id in train]

    def describe(self) -> str:
        return (f"{self.kind}: rollout {dict(self.rollout_mesh.shape)} on devices "
                f"{[d.id for d in self.rollout_devices]}, train {dict(self.train_mesh.shape)} on devices "
                f"{[d.id for d in self.train_devices]}")


def parse_ratio(ratio: str) -> tuple[int, int]:
    """'3:1' -> (3, 1)."""
    a, _, b = ratio.partition(":")
    if not (a.isdigit() and b.isdigit() and int(a) >= 1 and int(b) >= 1):
        raise ConfigError(f"placement ratio {ratio!r} must be 'rollout:train' with positive integers")
    return int(a), int(b)


def rollout_share(num_local: int, ratio: str) -> int:
    """Rollout devices out of `num_local` for a 'rollout:train' ratio (must split exactly)."""
    r, t = parse_ratio(ratio)
    if (num_local * r) % (r + t):
        raise ConfigError(f"placement ratio {ratio} does not split {num_local} devices per host exactly; "
                          f"choose a ratio whose parts sum to a divisor of {num_local}")
    return num_local * r // (r + t)


def _sub_mesh(mesh_cfg: MeshConfig, devices: Sequence[jax.Device], role: str) -> Mesh:
    fixed = mesh_cfg.tp * mesh_cfg.sp
    if len(devices) % fixed:
        raise ConfigError(f"the {role} sub-mesh has {len(devices)} devices, not divisible by "
                          f"mesh tp*sp={fixed}; change pipeline.placement_ratio or mesh.tp/sp")
    return make_mesh(dataclasses.replace(mesh_cfg, dp=-1), devices)


def make_placement(cfg: AsyncConfig, mesh_cfg: MeshConfig, devices: Sequence[jax.Device] | None = None,
                   process_index: int | None = None) -> Placement:
    """Rollout and train meshes for `cfg.placement` over `devices` (default: all devices).

    Devices are grouped by `process_index`; each host splits its own devices.
    """
    devices = list(jax.devices() if devices is None else devices)
    me = jax.process_index() if process_index is None else process_index
    by_host: dict[int, list[jax.Device]] = {}
    for d in sorted(devices, key=lambda d: (d.process_index, d.id)):
        by_host.setdefault(d.process_index, []).append(d)
    if me not in by_host:
        raise ConfigError(f"process {me} owns none of the {len(devices)} devices given to the placement")
    local = by_host[me]
    if cfg.placement == "colocated":
        rollout, train = local, [d for host in by_host.values() for d in host]
    else:
        counts = {len(ds) for ds in by_host.values()}
        if len(counts) != 1:
            raise ConfigError(f"hosts have different device counts {sorted(counts)}; placement needs equal hosts")
        n_roll = rollout_share(len(local), cfg.placement_ratio)
        rollout = local[:n_roll]
        if cfg.placement == "disaggregated":
            if n_roll == len(local):
                raise ConfigError("disaggregated placement left no device for training")
            train = [d for host in by_host.values() for d in host[n_roll:]]
        elif cfg.placement == "hybrid":
            train = [d for host in by_host.values() for d in host]
        else:
            raise ConfigError(f"unknown placement {cfg.placement!r}")
    return Placement(cfg.placement, _sub_mesh(mesh_cfg, rollout, "rollout"), _sub_mesh(mesh_cfg, train, "train"))
