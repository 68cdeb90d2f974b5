"""Small building blocks shared by the towers: sharding constraints, dense layers, RMSNorm, RoPE.

Model code names logical axes only. Parameters are boxed with `nn.with_logical_partitioning`;
activations go through `constrain(x, names)`, which maps names with the rules installed by
`vlajax.training.sharding.use_mesh` and replicates a dimension that does not divide its mesh axis.
Outside a mesh context `constrain` is the identity, so the same code runs on one device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vlajax.training.sharding import logical_to_mesh_spec

Names = Sequence[str | None]

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def constrain(x: jax.Array, names: Names) -> jax.Array:
    """`with_sharding_constraint` by logical names under the current mesh and rules (else identity)."""
    mesh = jax.sharding.get_abstract_mesh()
    rules = nn.get_logical_axis_rules()
    if mesh.empty or not rules:
        return x
    spec = logical_to_mesh_spec(tuple(names), x.shape, rules, mesh)
    return jax.lax.with_sharding_constraint(x, spec)


class Linear(nn.Module):
    """Dense layer contracting `axis` of x with a kernel [*x.shape[axis], *features] named `names`.

    Like `nn.DenseGeneral`, but the kernel is initialised at its full shape so its logical
    names are valid under a mesh (DenseGeneral initialises a flattened 2-D kernel).
    `dot_general_cls` is the FP8 seam (None, `nn.Fp8DotGeneralOp`, or TE's dot-general class).
    """

    features: tuple[int, ...]
    names: tuple[str | None, ...]
    axis: tuple[int, ...] = (-1,)
    use_bias: bool = False
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    dot_general_cls: Any = None
    init_scale: float = 1.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        axis = tuple(sorted(a % x.ndim for a in self.axis))
        n_in = len(axis)
        in_shape = tuple(x.shape[a] for a in axis)
        init = nn.initializers.variance_scaling(
            self.init_scale, "fan_in", "truncated_normal", in_axis=tuple(range(n_in)),
            out_axis=tuple(range(n_in, n_in + len(self.features))),
        )
        kernel = self.param("kernel", nn.with_logical_partitioning(init, self.names), in_shape + self.features,
                            self.param_dtype)
        x, kernel = x.astype(self.dtype), kernel.astype(self.dtype)
        dot_general = self.dot_general_cls() if self.dot_general_cls is not None else jax.lax.dot_general
        y = dot_general(x, kernel, ((axis, tuple(range(n_in))), ((), ())))
        if self.use_bias:
            bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros_init(),
                                                                   self.names[n_in:]), self.features, self.param_dtype)
            y = y + bias.astype(self.dtype)
        return y


def dense(
    features: int | Sequence[int],
    names: Names,
    *,
    axis: int | Sequence[int] = -1,
    use_bias: bool = False,
    dtype: Any = jnp.float32,
    param_dtype: Any = jnp.float32,
    dot_general_cls: Any = None,
    name: str | None = None,
    init_scale: float = 1.0,
) -> Linear:
    """A `Linear` layer; `names` label the kernel's dims (contracted dims first, then features)."""
    feats = (features,) if isinstance(features, int) else tuple(features)
    ax = (axis,) if isinstance(axis, int) else tuple(axis)
    return Linear(feats, tuple(names), ax, use_bias, dtype, param_dtype, dot_general_cls, init_scale, name=name)


class RMSNorm(nn.Module):
    """RMSNorm with a zero-initialised `(1 + scale)` gain (Gemma style). x [..., E] -> [..., E]."""

    eps: float = 1e-6
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        scale = self.param(
            "scale", nn.with_logical_partitioning(nn.initializers.zeros_init(), (None,)), (x.shape[-1],),
            self.param_dtype,
        )
        xf = x.astype(jnp.float32)
        y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        return (y * (1.0 + scale.astype(jnp.float32))).astype(x.dtype)


def rope(x: jax.Array, positions: jax.Array, max_wavelength: float = 10_000.0) -> jax.Array:
    """Rotary position embedding (rotate-half). x [B, T, H, D] (D even), positions int [B, T]."""
    half = x.shape[-1] // 2
    freq = max_wavelength ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = positions.astype(jnp.float32)[:, :, None, None] * freq  # [B, T, 1, D/2]
    sin, cos = jnp.sin(angle), jnp.cos(angle)
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


def sincos_embedding(t: jax.Array, dim: int, min_period: float = 4e-3, max_period: float = 4.0) -> jax.Array:
    """Sine-cosine embedding of scalars (flow time). t [...] -> [..., dim] (dim even)."""
    frac = jnp.linspace(0.0, 1.0, dim // 2)
    period = min_period * (max_period / min_period) ** frac
    angle = t.astype(jnp.float32)[..., None] * (2 * jnp.pi / period)
    return jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], axis=-1)


def sincos_2d(h: int, w: int, dim: int, temperature: float = 10_000.0) -> jax.Array:
    """Fixed 2-D sine-cosine position embedding (big_vision's posemb_sincos_2d). -> [h * w, dim]."""
    y, x = jnp.mgrid[:h, :w]
    omega = 1.0 / temperature ** (jnp.arange(dim // 4) / max(dim // 4 - 1, 1))
    y = y.reshape(-1)[:, None] * omega[None]
    x = x.reshape(-1)[:, None] * omega[None]
    pe = jnp.concatenate([jnp.sin(x), jnp.cos(x), jnp.sin(y), jnp.cos(y)], axis=1)
    return jnp.pad(pe, ((0, 0), (0, dim - pe.shape[1])))
