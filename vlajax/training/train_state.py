"""The one train-state pytree shared by SFT and RL.

Non-array members (`tx`) are static. The RNG is stored as raw key data (uint32 [2]) so
checkpoints hold plain arrays; steps derive per-step keys with `step_rng(state)` (fold in the
step), never by splitting and storing.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax


@flax.struct.dataclass
class TrainState:
    """step: int32 []; params: pytree; opt_state: optax state; rng: uint32 [2]; ema: params or None;
    collections: the model's other Flax variable collections (e.g. FP8 scales and amax
    histories under `_overwrite_with_gradient`) as {name: pytree}, or None."""

    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array
    ema_params: Any = None
    collections: Any = None
    tx: optax.GradientTransformation = flax.struct.field(pytree_node=False, default=None)

    @classmethod
    def create(cls, params: Any, tx: optax.GradientTransformation, rng: jax.Array, ema: bool = False,
               collections: dict | None = None) -> TrainState:
        """`rng` is a typed key (`jax.random.key`) or raw key data; `collections`: the non-param
        collections of `model.init(...)` (None or {} = the model has none)."""
        if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
            rng = jax.random.key_data(rng)
        return cls(
            step=jnp.zeros((), jnp.int32),
            params=params,
            opt_state=tx.init(params),
            rng=rng,
            ema_params=jax.tree.map(jnp.copy, params) if ema else None,
            collections=dict(collections) if collections else None,
            tx=tx,
        )

    @staticmethod
    def split(variables: dict) -> tuple[Any, dict | None]:
        """`model.init(...)` output -> (params, the other collections or None)."""
        rest = {k: v for k, v in variables.items() if k != "params"}
        return variables["params"], rest or None

    def variables(self, params: Any = None) -> dict:
        """{'params': params (default the live ones), **collections}: what `model.apply` takes."""
        return {"params": self.params if params is None else params, **(self.collections or {})}

    def apply_gradients(self, grads: Any, ema_decay: float = 0.0, collections: dict | None = None) -> TrainState:
        """One optimizer update of `params` from `grads`; `collections` (when the state has
        any) replace the old ones: for Flax's FP8 ops they are the gradient w.r.t. the
        collections, which *is* the new scale / amax history (overwrite-with-gradient)."""
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        params = optax.apply_updates(self.params, updates)
        ema = self.ema_params
        if ema is not None:
            ema = optax.incremental_update(params, ema, step_size=1.0 - ema_decay)
        new = self.collections if collections is None else dict(collections)
        return self.replace(step=self.step + 1, params=params, opt_state=opt_state, ema_params=ema, collections=new)


def step_rng(state: TrainState, stream: int = 0) -> jax.Array:
    """A typed key unique to (root seed, step, stream)."""
    key = jax.random.wrap_key_data(state.rng)
    return jax.random.fold_in(jax.random.fold_in(key, state.step), stream)
