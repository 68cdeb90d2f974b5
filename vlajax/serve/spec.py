"""What a served policy reads: wire keys, shapes and dtypes, and the checks on every request.

A request is one unbatched observation (a msgpack-numpy map). `ObsSpec.parse` turns it into the
policy's inputs or raises `ObsError` naming the first problem:

    <image key> per camera   uint8 [h, w, 3]       (h, w = the training env's image size)
    <state key>              float32/64 [S]        finite (S = the state the norm stats cover)
    <prompt key>             str                   free text, tokenized by vlajax.models.tokenizer
      or 'tokenized_prompt'  int [n <= max_text_len] token ids in [0, vocab_size)

Keys not in the spec are ignored (clients often send extras). Which wire key feeds which input
is a `KeyMap`: `suite` (our env's keys: `pixels/<camera>`, `state`, `prompt`, what a
`vlajax.envs` observation already holds) or `libero` (openpi's LIBERO example keys:
`observation/image`, `observation/wrist_image`, `observation/state`, `prompt`), each entry
overridable (`camera=key`, `state=key`, `prompt=key`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from vlajax.models import tokenizer
from vlajax.shared.robots import PROMPT, STATE, camera_keys, image_key, state_key

__all__ = ["KEY_MAPS", "KeyMap", "ObsError", "ObsSpec", "Parsed"]

TOKENS_KEY = "tokenized_prompt"
# openpi's LIBERO and DROID examples send the robots' keys (`vlajax.shared.robots`; DROID's state is
# joint_position [7] + gripper_position [1], '+' joins keys)
KEY_MAPS = ("suite", "libero", "droid")


class ObsError(ValueError):
    """A request the policy cannot read (missing key, wrong shape / dtype, non-finite, ...)."""


@dataclasses.dataclass(frozen=True)
class KeyMap:
    """Wire keys of one policy's inputs."""

    images: tuple[tuple[str, str], ...]  # (camera, wire key), in the policy's camera order
    state: str = "state"
    prompt: str = "prompt"

    @classmethod
    def make(cls, name: str, cameras: Sequence[str], overrides: Sequence[str] = ()) -> KeyMap:
        """Preset `name` ('suite' / 'libero') for `cameras`, then `overrides` ['camera=key', 'state=key', ...]."""
        if name == "suite":
            images, state, prompt = {c: image_key(c) for c in cameras}, STATE, PROMPT
        elif name in ("libero", "droid"):
            robot = camera_keys(name)
            images = {c: robot.get(c, f"observation/{c}") for c in cameras}
            state, prompt = state_key(name), PROMPT
        else:
            raise ValueError(f"unknown key map {name!r} (choose from {', '.join(KEY_MAPS)})")
        for item in overrides:
            field, sep, key = item.partition("=")
            if not sep or not key:
                raise ValueError(f"key override {item!r} is not NAME=KEY")
            if field == "state":
                state = key
            elif field == "prompt":
                prompt = key
            elif field in images:
                images[field] = key
            else:
                raise ValueError(f"key override {item!r}: {field!r} is not a camera of the policy "
                                 f"({', '.join(cameras)}), 'state' or 'prompt'")
        keys = [*images.values(), state, prompt]
        if len(set(keys)) != len(keys):
            raise ValueError(f"two inputs share a wire key: {keys}")
        return cls(tuple((c, images[c]) for c in cameras), state, prompt)

    def to_json(self) -> dict[str, Any]:
        return {"images": dict(self.images), "state": self.state, "prompt": self.prompt}


@dataclasses.dataclass(frozen=True)
class Parsed:
    """One request's policy inputs: images {camera: uint8 [h, w, 3]}, state float32 [S],
    tokens int32 [L], token_mask bool [L]."""

    images: dict[str, np.ndarray]
    state: np.ndarray
    tokens: np.ndarray
    token_mask: np.ndarray
    warnings: tuple[str, ...] = ()  # what the server changed in the request (sent back in the answer)
    noise: np.ndarray | None = None  # test-only: the flow's starting noise float32 [H, A] (ObsSpec.noise_key)


@dataclasses.dataclass(frozen=True)
class ObsSpec:
    """The shapes a policy expects and the map from wire keys to its inputs."""

    keys: KeyMap
    image_shape: tuple[int, int, int]  # (h, w, 3)
    state_dim: int
    max_text_len: int
    vocab_size: int
    # (text, state float32 [S]) -> (ids int32 [max_text_len], mask bool [max_text_len]); None = the packaged
    # tokenizer. π policies: openpi's prompt format (π0.5 with the state in the prompt reads the state)
    encode: Callable[[str, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
    # uint8 [h, w, 3] of any size -> uint8 `image_shape` (π policies: openpi's resize with pad); None =
    # images must have `image_shape`
    resize: Callable[[np.ndarray], np.ndarray] | None = None
    noise_key: str = ""  # test-only: a request may carry the flow's starting noise under this key
    noise_shape: tuple[int, ...] = ()  # (H, model.action_dim): the noise's shape

    def metadata(self) -> dict[str, Any]:
        """The `observation` entry of the metadata sent on connect: key -> {shape, dtype, ...}."""
        out: dict[str, Any] = {}
        for cam, key in self.keys.images:
            out[key] = {"shape": list(self.image_shape), "dtype": "uint8", "camera": cam}
            if self.resize is not None:
                out[key]["resized"] = f"any [h, w, 3] is resized with pad to {list(self.image_shape)}"
        for part, n in self.state_parts():
            out[part] = {"shape": [n], "dtype": "float32"}
            if part != self.keys.state:
                out[part]["joined"] = (f"the state is {self.keys.state.replace('+', ' + ')} concatenated: any "
                                       f"split of its {self.state_dim} values")
        out[self.keys.prompt] = {"shape": [], "dtype": "str",
                                 "alternative": f"{TOKENS_KEY}: int32 [<= {self.max_text_len}] "
                                                f"ids < {self.vocab_size}"}
        return out

    def example(self, prompt: str = "press the button", seed: int = 0) -> dict[str, Any]:
        """A valid request (random images, zero state) -- for clients' smoke tests and the bench."""
        rng = np.random.default_rng(seed)
        obs: dict[str, Any] = {k: rng.integers(0, 256, self.image_shape, dtype=np.uint8) for _, k in self.keys.images}
        for part, n in self.state_parts():
            obs[part] = np.zeros((n,), np.float32)
        obs[self.keys.prompt] = prompt
        return obs

    def state_parts(self) -> list[tuple[str, int]]:
        """(wire key, size) of the state's keys: one key of `state_dim`, or a joined key's parts ('a+b': the state is
        their values concatenated, any split accepted), the first with `state_dim` less one per later part (DROID:
        7 joint positions + 1 gripper position)."""
        parts = self.keys.state.split("+")
        return [(parts[0], self.state_dim - len(parts) + 1)] + [(p, 1) for p in parts[1:]]

    def parse(self, obs: Any) -> Parsed:
        """Validated inputs of one request; raises `ObsError` naming the problem."""
        if not isinstance(obs, Mapping):
            raise ObsError(f"observation must be a map of key -> value, got {type(obs).__name__}")
        images = {cam: self._image(obs, key) for cam, key in self.keys.images}
        state = self._state(obs)
        ids, mask = self._prompt(obs, state)
        return Parsed(images, state, ids, mask, self._cut(obs, ids), self._noise(obs))

    def _noise(self, obs: Mapping) -> np.ndarray | None:
        if not self.noise_key or self.noise_key not in obs:
            return None
        x = obs[self.noise_key]
        if not isinstance(x, np.ndarray) or x.dtype.kind != "f" or x.shape != tuple(self.noise_shape):
            raise ObsError(f"{self.noise_key!r} must be a float array of shape {tuple(self.noise_shape)}")
        if not np.all(np.isfinite(x)):
            raise ObsError(f"{self.noise_key!r} has non-finite values")
        return x.astype(np.float32)

    def _cut(self, obs: Mapping, ids: np.ndarray) -> tuple[str, ...]:
        """A warning when a text prompt needed more tokens than the model reads (the tokenizer cuts it).
        Counted with the packaged tokenizer, and only where it is the one in use (same ids)."""
        text = obs.get(self.keys.prompt) if TOKENS_KEY not in obs else None
        if not isinstance(text, str):
            return ()
        needed = len(tokenizer._tokens(text)) + 2  # bos + words + eos
        if needed <= self.max_text_len or not np.array_equal(ids, tokenizer.encode(text, self.max_text_len)[0]):
            return ()
        return (f"prompt truncated: it is {needed} tokens (with bos/eos), the policy reads the first "
                f"{self.max_text_len}",)

    def _get(self, obs: Mapping, key: str) -> Any:
        if key not in obs:
            have = ", ".join(sorted(str(k) for k in obs)) or "nothing"
            raise ObsError(f"missing key {key!r} (the observation has: {have})")
        return obs[key]

    def _image(self, obs: Mapping, key: str) -> np.ndarray:
        img = self._get(obs, key)
        if not isinstance(img, np.ndarray):
            raise ObsError(f"{key!r} must be a uint8 array of shape {self.image_shape}, got {type(img).__name__}")
        if img.dtype != np.uint8:
            raise ObsError(f"{key!r} has dtype {img.dtype}; expected uint8 of shape {self.image_shape}")
        if self.resize is not None and img.ndim == 3 and img.shape[-1] == 3 and min(img.shape[:2]) > 0:
            return self.resize(img)
        if img.shape != self.image_shape:
            raise ObsError(f"{key!r} has shape {img.shape}; expected {self.image_shape} (uint8, h x w x 3)")
        return img

    def _state(self, obs: Mapping) -> np.ndarray:
        key = self.keys.state
        if "+" in key:  # the state is these keys' values concatenated (DROID: joints + gripper)
            parts = [self._get(obs, k) for k in key.split("+")]
            if not all(isinstance(p, np.ndarray | float) for p in parts):
                raise ObsError(f"{key!r}: each part must be a float array")
            s = np.concatenate([np.atleast_1d(np.asarray(p)) for p in parts])
        else:
            s = self._get(obs, key)
        if not isinstance(s, np.ndarray) or s.dtype.kind != "f":
            got = s.dtype if isinstance(s, np.ndarray) else type(s).__name__
            raise ObsError(f"{key!r} must be a float array of shape ({self.state_dim},), got {got}")
        if s.shape != (self.state_dim,):
            raise ObsError(f"{key!r} has shape {s.shape}; expected ({self.state_dim},)")
        bad = np.flatnonzero(~np.isfinite(s))
        if bad.size:
            raise ObsError(f"{key!r} has non-finite values at indices {bad.tolist()} ({s[bad].tolist()})")
        return s.astype(np.float32)

    def _prompt(self, obs: Mapping, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if TOKENS_KEY in obs:
            ids = obs[TOKENS_KEY]
            if not isinstance(ids, np.ndarray) or ids.dtype.kind not in "iu" or ids.ndim != 1:
                raise ObsError(f"{TOKENS_KEY!r} must be a 1-d integer array")
            if ids.size > self.max_text_len:
                raise ObsError(f"{TOKENS_KEY!r} has {ids.size} tokens; at most {self.max_text_len}")
            self._check_ids(ids, TOKENS_KEY)
            out = np.zeros((self.max_text_len,), np.int32)
            out[: ids.size] = ids
            mask = np.zeros((self.max_text_len,), bool)
            mask[: ids.size] = True
            return out, mask
        # a policy with its own encoder may have a default prompt (openpi's InjectDefaultPrompt): '' asks for it
        text = obs.get(self.keys.prompt, "") if self.encode is not None else self._get(obs, self.keys.prompt)
        if not isinstance(text, str):
            raise ObsError(f"{self.keys.prompt!r} must be a string, got {type(text).__name__}")
        try:
            ids, mask = (self.encode(text, state) if self.encode is not None
                         else tokenizer.encode(text, self.max_text_len))
        except ValueError as e:  # e.g. no prompt and no default prompt
            raise ObsError(f"{self.keys.prompt!r}: {e}") from None
        self._check_ids(ids[mask], self.keys.prompt)
        return ids, mask

    def _check_ids(self, ids: np.ndarray, key: str) -> None:
        bad = ids[(ids < 0) | (ids >= self.vocab_size)]
        if bad.size:
            raise ObsError(f"{key!r}: unknown prompt token id(s) {sorted(set(bad.tolist()))[:8]} "
                           f"(the policy's vocabulary has {self.vocab_size} ids)")
