"""The π0 / π0.5 side of `vlajax.policy.Bridge`: env observations in openpi's input layout, jittable.

Training (`vlajax.data.openpi`) and the bridge build the same inputs:

  images    env `pixels/<camera>` uint8 [B, h, w, 3] -> float32 [0, 1], resized with pad to
            `model.image_size` (aspect kept, black borders), renamed to openpi's slot by the
            camera map; a slot no camera maps to is black with mask False.
  text      π0: the SentencePiece prompt of the task's instruction (a table lookup); π0.5: the
            prompt with the normalized state discretized into it, composed per step by
            `vlajax.models.sp_tokenizer.StatePromptTable` (jit-able; equal to the host tokenizer,
            see its docstring for where the two could differ).
  state     normalized (first dims: the dataset's), zero-padded to `model.state_dim`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.data.openpi import load_tokenizer, model_slots, state_in_prompt

__all__ = ["PiInputs", "resize_with_pad"]


def resize_with_pad(img: jax.Array, size: int) -> jax.Array:
    """float [B, h, w, 3] -> [B, size, size, 3]: bilinear resize keeping the aspect ratio,
    centred, zero (black) borders (openpi's `image_tools.resize_with_pad`)."""
    b, h, w, c = img.shape
    if (h, w) == (size, size):
        return img
    ratio = max(w / size, h / size)
    rh, rw = int(h / ratio), int(w / ratio)
    small = jax.image.resize(img, (b, rh, rw, c), "bilinear")
    top, left = (size - rh) // 2, (size - rw) // 2
    return jnp.pad(small, ((0, 0), (top, size - rh - top), (left, size - rw - left), (0, 0)))


class PiInputs:
    """Constants and jittable functions of one π policy's inputs (built once by the Bridge).

    model: `ModelConfig` (family 'pi0' | 'pi05'); cameras: the env cameras (sorted);
    camera_map ((camera, slot), ...); instructions: per task, its instruction strings.
    """

    def __init__(self, model, cameras: tuple[str, ...], camera_map: tuple[tuple[str, str], ...],
                 instructions: list[list[str]], state_dims: int):
        from vlajax.models.sp_tokenizer import StatePromptTable

        self.model = model
        self.slot = dict(camera_map)
        missing = [c for c in cameras if c not in self.slot]
        if missing:
            raise ValueError(f"cameras {missing} have no openpi slot in the camera map {dict(camera_map)}")
        tok = load_tokenizer(model.tokenizer_path, model.max_text_len)
        n = max(len(t) for t in instructions)
        flat = [p for t in instructions for p in t]
        index = np.zeros((len(instructions), n), np.int32)  # (task, instruction) -> row of `flat`
        k = 0
        for i, t in enumerate(instructions):
            index[i, : len(t)] = np.arange(k, k + len(t))
            k += len(t)
        self.index = index
        self.table = None
        if state_in_prompt(model):
            self.table = StatePromptTable.build(tok, flat, state_dim=state_dims)
        else:
            self.ids, self.mask = tok.batch_pi0(flat)

    def images(self, env_obs: dict, cameras: tuple[str, ...], b: int) -> tuple[dict, dict]:
        """Images and masks per slot (all of `model_slots`), float32 [B, S, S, 3] in [0, 1] / bool [B]."""
        n = self.model.image_size
        images, masks = {}, {}
        for c in cameras:
            key = f"pixels/{c}"
            if key not in env_obs:
                raise KeyError(f"the policy reads camera {c!r} but the env observation has {sorted(env_obs)}")
            img = jnp.asarray(env_obs[key]).astype(jnp.float32) / 255.0
            images[self.slot[c]], masks[self.slot[c]] = resize_with_pad(img, n), jnp.ones((b,), bool)
        for s in model_slots(self.model):
            if s not in images:
                images[s], masks[s] = jnp.zeros((b, n, n, 3), jnp.float32), jnp.zeros((b,), bool)
        return images, masks

    def tokens(self, task_id, instruction_id, state) -> tuple[jax.Array, jax.Array]:
        """Prompt ids int32 [B, L] and mask bool [B, L]; state: normalized, unpadded [B, S] (π0.5)."""
        row = jnp.asarray(self.index)[jnp.asarray(task_id, jnp.int32), jnp.asarray(instruction_id, jnp.int32)]
        if self.table is not None:
            return self.table.tokens(row, state)
        return jnp.asarray(self.ids)[row], jnp.asarray(self.mask)[row]
