"""`Observation`: the model's only input type, and a deterministic fake one for tests.

    images       dict camera -> float32 [B, H, W, 3] in [0, 1]
    image_masks  dict camera -> bool [B]       False = camera dropped: its tokens are masked out
    tokens       int32 [B, L]                  instruction token ids (`vlajax.models.tokenizer`)
    token_mask   bool [B, L]                   False = padding
    state        float32 [B, S]                proprioceptive state (normalized)

Cameras are read in sorted name order. A camera may also be absent from the dicts entirely
(packing, camera pruning); a masked camera and an absent one give the same outputs. Actions
are float32 [B, H, action_dim] normalized to [-1, 1].
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from vlajax.config.schema import ModelConfig
from vlajax.models.tokenizer import VOCAB_SIZE


@flax.struct.dataclass
class Observation:
    """One batch of policy inputs (shapes in the module docstring)."""

    images: dict[str, Float[Array, "b h w 3"]]  # noqa: F722
    image_masks: dict[str, Bool[Array, " b"]]  # noqa: F722
    tokens: Int[Array, "b l"]  # noqa: F722
    token_mask: Bool[Array, "b l"]  # noqa: F722
    state: Float[Array, "b s"]  # noqa: F722

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    def __post_init__(self):
        if set(self.images) != set(self.image_masks):
            raise ValueError(f"images {sorted(self.images)} and image_masks {sorted(self.image_masks)} differ")


def fake_observation(rng: jax.Array, batch: int, cfg: ModelConfig, cameras: tuple[str, ...] | None = None
                     ) -> Observation:
    """Random but valid inputs for `cfg`: uniform images, random-length token masks, N(0, 1) state.

    Cameras default to `cam0 .. cam{num_cameras-1}`.
    """
    cameras = tuple(f"cam{i}" for i in range(cfg.num_cameras)) if cameras is None else cameras
    ks = jax.random.split(rng, len(cameras) + 3)
    n, L = cfg.image_size, cfg.max_text_len
    images = {c: jax.random.uniform(k, (batch, n, n, 3)) for c, k in zip(cameras, ks)}
    masks = {c: jnp.ones((batch,), bool) for c in cameras}
    tokens = jax.random.randint(ks[-3], (batch, L), 3, min(cfg.vocab_size, VOCAB_SIZE), dtype=jnp.int32)
    lengths = jax.random.randint(ks[-2], (batch, 1), 1, L + 1)
    token_mask = jnp.arange(L)[None] < lengths
    state = jax.random.normal(ks[-1], (batch, cfg.state_dim))
    return Observation(images, masks, jnp.where(token_mask, tokens, 0), token_mask, state)
