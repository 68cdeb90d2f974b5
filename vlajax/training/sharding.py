"""The device mesh, logical-axis sharding rules, and building state directly on its shards.

Mesh axes are `dp` (data + FSDP), `tp` (tensor: heads, MLP) and `sp` (sequence). Model code
names logical axes only (`embed`, `mlp`, `act_batch`, ...); `MeshConfig.logical_rules` maps
them to mesh axes. A dimension that does not divide its mesh axis is replicated (and said so
once in the log) instead of failing deep inside XLA.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from vlajax.config.schema import DP, MESH_AXES, SP, TP, ConfigError, MeshConfig

__all__ = [
    "DP",
    "TP",
    "SP",
    "MESH_AXES",
    "Rules",
    "resolve_mesh_shape",
    "make_mesh",
    "use_mesh",
    "logical_to_mesh_spec",
    "tree_shardings",
    "init_sharded",
    "data_sharding",
    "replicated",
    "partition_specs_summary",
]

log = logging.getLogger(__name__)

Rules = Sequence[tuple[str, str | None]]


def resolve_mesh_shape(cfg: MeshConfig, num_devices: int) -> tuple[int, int, int]:
    """`(dp, tp, sp)` for `num_devices`; raises `ConfigError` with a one-line reason."""
    fixed = cfg.tp * cfg.sp
    if cfg.dp == -1:
        if num_devices % fixed:
            raise ConfigError(
                f"mesh tp*sp={cfg.tp}*{cfg.sp}={fixed} does not divide the {num_devices} available devices"
            )
        return num_devices // fixed, cfg.tp, cfg.sp
    total = cfg.dp * fixed
    if total != num_devices:
        raise ConfigError(
            f"mesh dp*tp*sp={cfg.dp}*{cfg.tp}*{cfg.sp}={total} does not match the {num_devices} available devices"
        )
    return cfg.dp, cfg.tp, cfg.sp


def make_mesh(cfg: MeshConfig, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A `(dp, tp, sp)` mesh over `devices` (default: all devices of all processes).

    Axis types are `Auto` (jax 0.12 defaults to Explicit, which breaks MJX's scatters). With
    the default devices, `jax.make_mesh` orders them for the interconnect (hosts outermost).
    """
    if devices is None:
        shape = resolve_mesh_shape(cfg, jax.device_count())
        return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * 3)
    shape = resolve_mesh_shape(cfg, len(devices))
    return Mesh(np.asarray(devices).reshape(shape), MESH_AXES, axis_types=(AxisType.Auto,) * 3)


@contextlib.contextmanager
def use_mesh(mesh: Mesh, rules: Rules):
    """Make `mesh` current and `rules` the logical rules, so `nn.with_logical_constraint` works."""
    with jax.set_mesh(mesh), nn.logical_axis_rules(tuple(rules)):
        yield


_warned: set[tuple] = set()


def logical_to_mesh_spec(
    logical_spec: PartitionSpec | Sequence[str | None] | None,
    shape: Sequence[int],
    rules: Rules,
    mesh: Mesh,
) -> PartitionSpec:
    """Map a logical spec (one name or None per dim) to mesh axes.

    A dim whose size does not divide its mesh axis, or whose mesh axis is already used by an
    earlier dim, is not split over it. For parameters (names not starting with `act_`) a
    displaced `dp` (the FSDP axis) moves to the largest other still-unsplit dim it divides, so
    FSDP keeps sharding a weight whose `embed` width does not divide `dp` (e.g. a 1152-wide ViT
    on 256 devices); `tp`/`sp` never move (that would change the parallel algorithm). Otherwise
    the array is replicated along that axis. Unknown names are replicated.
    """
    if logical_spec is None:
        return PartitionSpec()
    table = dict(rules)
    names = tuple(logical_spec)
    used: set[str] = set()
    out: list[str | None] = [None] * len(names)
    displaced: list[tuple[str, str]] = []
    for i, (dim, name) in enumerate(zip(shape, names)):
        axis = table.get(name) if isinstance(name, str) else None
        if axis is None or mesh.shape[axis] == 1:
            continue
        if axis in used or dim % mesh.shape[axis]:
            displaced.append((name, axis))
            continue
        used.add(axis)
        out[i] = axis
    for name, axis in displaced:
        size = mesh.shape[axis]
        free = [i for i, d in enumerate(shape) if out[i] is None and d % size == 0 and d >= size]
        if axis == DP and axis not in used and not name.startswith("act_") and free:
            i = max(free, key=lambda j: shape[j])
            out[i], decision = axis, f"moved to dim {i} (size {shape[i]})"
            used.add(axis)
        else:
            decision = "replicated"
        key = (name, tuple(shape), axis, decision)
        if key not in _warned:
            _warned.add(key)
            log.info("sharding: %s of shape %s cannot split over %s=%d: %s", name, tuple(shape), axis, size, decision)
    while out and out[-1] is None:
        out.pop()
    return PartitionSpec(*out)


def _is_box(x: Any) -> bool:
    return isinstance(x, nn.spmd.LogicallyPartitioned | nn.Partitioned)


def tree_shardings(abstract_tree: Any, mesh: Mesh, rules: Rules) -> Any:
    """NamedShardings for a (possibly boxed) abstract tree; the result has the unboxed structure.

    Leaves boxed with `nn.with_logical_partitioning` are sharded by their names; plain leaves
    (step counters, RNG keys, unboxed optimizer scalars) are replicated.
    """

    def one(leaf):
        if _is_box(leaf):
            names = leaf.names
            shape = leaf.value.shape
        else:
            names, shape = None, getattr(leaf, "shape", ())
        return NamedSharding(mesh, logical_to_mesh_spec(names, shape, rules, mesh))

    return jax.tree.map(one, abstract_tree, is_leaf=_is_box)


def init_sharded(init_fn: Callable[..., Any], mesh: Mesh, rules: Rules, *args) -> tuple[Any, Any]:
    """Run `init_fn(*args)` with every output created directly on its shards.

    `init_fn` may return flax-boxed leaves (`nn.with_logical_partitioning`), also inside
    optimizer states built from boxed params. Returns `(state, shardings)`, both unboxed.
    Steps: `jax.eval_shape` -> shardings from the logical names -> `jax.jit(out_shardings=)`.
    """
    abstract = jax.eval_shape(init_fn, *args)
    shardings = tree_shardings(abstract, mesh, rules)
    with use_mesh(mesh, rules):
        state = jax.jit(lambda *a: nn.unbox(init_fn(*a)), out_shardings=shardings)(*args)
    return state, shardings


def data_sharding(mesh: Mesh, ndim: int = 1, seq_axis: bool = False) -> NamedSharding:
    """Batch-major data: dim 0 over `dp` (and dim 1 over `sp` when `seq_axis`)."""
    spec = [DP] + ([SP] if seq_axis and ndim > 1 else [])
    return NamedSharding(mesh, PartitionSpec(*spec))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def partition_specs_summary(shardings: Any, abstract_tree: Any) -> dict[str, tuple[tuple, tuple[int, ...]]]:
    """`{param_path: (partition_spec, shape)}` for golden-file tests and logs."""
    flat_s = jax.tree_util.tree_flatten_with_path(shardings)[0]
    flat_a = jax.tree.leaves(nn.unbox(abstract_tree))
    out = {}
    for (path, s), a in zip(flat_s, flat_a, strict=True):
        key = jax.tree_util.keystr(path, simple=True, separator="/")
        out[key] = (tuple(s.spec), tuple(a.shape))
    return out


def per_device_bytes(abstract_tree: Any, shardings: Any) -> int:
    """Bytes of `abstract_tree` held by one device under `shardings` (largest shard)."""
    total = 0
    for a, s in zip(jax.tree.leaves(nn.unbox(abstract_tree)), jax.tree.leaves(shardings), strict=True):
        shard = s.shard_shape(a.shape)
        total += math.prod(shard) * np.dtype(a.dtype).itemsize
    return total
