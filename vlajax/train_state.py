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
    """step: int32 []; params: pytree; opt_state: optax state; rng: uint32 [2]; ema: params or None."""

    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array
    ema_params: Any = None
    tx: optax.GradientTransformation = flax.struct.field(pytree_node=False, default=None)

    @classmethod
    def create(cls, params: Any, tx: optax.GradientTransformation, rng: jax.Array, ema: bool = False) -> TrainState:
        """`rng` is a typed key (`jax.random.key`) or raw key data."""
        if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
            rng = jax.random.key_data(rng)
        return cls(
            step=jnp.zeros((), jnp.int32),
            params=params,
            opt_state=tx.init(params),
            rng=rng,
            ema_params=jax.tree.map(jnp.copy, params) if ema else None,
            tx=tx,
        )

    def apply_gradients(self, grads: Any, ema_decay: float = 0.0) -> TrainState:
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        params = optax.apply_updates(self.params, updates)
        ema = self.ema_params
        if ema is not None:
            ema = optax.incremental_update(params, ema, step_size=1.0 - ema_decay)
        return self.replace(step=self.step + 1, params=params, opt_state=opt_state, ema_params=ema)


def step_rng(state: TrainState, stream: int = 0) -> jax.Array:
    """A typed key unique to (root seed, step, stream)."""
    key = jax.random.wrap_key_data(state.rng)
    return jax.random.fold_in(jax.random.fold_in(key, state.step), stream)
