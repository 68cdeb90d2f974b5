"""Remote evaluation: `python -m vlajax.train eval --policy-server ws://HOST:PORT`.

The closed-loop suite evaluation of `vlajax.evaluation.closed_loop` (same fixed episode seeds, same jitted
`lax.scan` over chunks and control steps, same per-task table and files), with the policy's
action chunks coming from a policy server (`vlajax.serve`, or any server of openpi's protocol
whose metadata names its observation keys). Each chunk boundary leaves the jitted loop through
one `jax.pure_callback`: every episode's observation (its cameras, state and instruction text
`tasks.TASKS[task_id].instructions()[instruction_id]`) is one request, sent over
`--sft.eval-connections`-many connections so the server batches them.

With a deterministic server (`vlajax.serve`'s default) and a token-head or `flow_x1='zeros'`
policy the table equals the local `eval --checkpoint` of the served checkpoint; a flow head
that draws x_1 ~ N(0, I) samples its own noise per request (equal in distribution only).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.envs.tabletop import tasks
from vlajax.evaluation import closed_loop as evaluation
from vlajax.serve.client import RemotePolicy, ServerError
from vlajax.shared.robots import INSTRUCTION_ID, PROMPT, STATE, image_key

log = logging.getLogger(__name__)

__all__ = ["RemoteBridge", "run"]

CLOSE_TIMEOUT_S = 5.0  # a stop waits at most this long for the server to acknowledge the close


@dataclasses.dataclass(frozen=True, eq=False)
class RemoteBridge:
    """Stands in for `vlajax.policies.bridge.Bridge` in `vlajax.evaluation.closed_loop`: `act` asks the server."""

    policy: RemotePolicy
    cameras: tuple[str, ...]
    model: Any  # only `.action_horizon` is read
    env_action_dim: int
    image_keys: tuple[tuple[str, str], ...]  # (camera, wire key)
    state_key: str
    prompt_key: str
    stopping: threading.Event = dataclasses.field(default_factory=threading.Event)  # set by `close_on_stop`
    _closing: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    @classmethod
    def connect(cls, url: str, connections: int, env_cfg) -> RemoteBridge:
        policy = RemotePolicy(url, connections)
        try:
            meta = policy.metadata
            obs_spec = meta.get("observation")
            action = meta.get("action", {}).get("shape")
            if not isinstance(obs_spec, dict) or not action:
                raise ConfigError(f"{url}: the server's metadata lacks 'observation' / 'action' (not vlajax.serve?)")
            keys = meta.get("keys") or {"images": {c: image_key(c) for c in env_cfg.cameras}, "state": STATE,
                                        "prompt": PROMPT}
            images = tuple((c, k) for c, k in keys["images"].items())
            missing = [c for c, _ in images if c not in env_cfg.cameras]
            if missing:
                raise ConfigError(f"the served policy reads cameras {missing}; env.cameras={env_cfg.cameras}")
            for _, k in images:
                want = tuple(obs_spec[k]["shape"])
                if want != (env_cfg.image_size, env_cfg.image_size, 3):
                    raise ConfigError(f"the served policy wants {k!r} of shape {want}; env.image_size="
                                      f"{env_cfg.image_size} renders ({env_cfg.image_size}, {env_cfg.image_size}, 3)")
            horizon = types.SimpleNamespace(action_horizon=int(action[0]))
            return cls(policy, tuple(sorted(c for c, _ in images)), horizon,
                       int(action[1]), images, keys["state"], keys["prompt"])
        except BaseException:
            policy.close()
            raise

    def _host_act(self, task_id, instruction_id, state, *images) -> np.ndarray:
        texts = [tasks.TASKS[int(t)].instructions()[int(i)] for t, i in zip(task_id, instruction_id)]
        obs = [{**{k: np.asarray(img[n]) for (_, k), img in zip(self.image_keys, images)},
                self.state_key: np.asarray(state[n], np.float32), self.prompt_key: texts[n]} for n in range(len(texts))]
        if self.stopping.is_set():
            _park()
        try:
            answers = self.policy.infer_many(obs)
        except BaseException:
            if self.stopping.is_set():  # the stop closed the connections under this request
                _park()
            raise
        return np.stack([np.asarray(a["actions"], np.float32) for a in answers])

    def close(self) -> None:
        """Close the connections (a websocket close each); idempotent, from any thread."""
        with self._closing:  # RemotePolicy.close again is a no-op, but not while another thread is in it
            self.policy.close()

    def close_on_stop(self, timeout_s: float = CLOSE_TIMEOUT_S) -> str:
        """The stop's cleanup (from the signal watcher, while the episodes may be mid-request): the pending
        host call parks instead of raising (the process is about to exit), the connections are closed
        (waiting at most `timeout_s`). -> what it did, for the stop line."""
        self.stopping.set()
        closer = threading.Thread(target=self.close, name="vlajax-remote-close", daemon=True)
        closer.start()
        closer.join(timeout_s)
        if closer.is_alive():
            return f"the connections to {self.policy.url} did not close within {timeout_s:.0f} s (dropped)"
        return f"closed the connections to {self.policy.url}"

    def act(self, model, variables, state, rng, *, task_id=None, deterministic: bool = True) -> jax.Array:
        """Env actions float32 [B, H, A] for a batched env `State`, computed by the server."""
        del model, variables, rng, deterministic  # the server samples (its own --deterministic)
        obs = state.obs
        b = obs[STATE].shape[0]
        out = jax.ShapeDtypeStruct((b, self.model.action_horizon, self.env_action_dim), jnp.float32)
        return jax.pure_callback(self._host_act, out, state.info["episode"]["task_id"], obs[INSTRUCTION_ID],
                                 obs[STATE], *(obs[image_key(c)] for c, _ in self.image_keys))


def _park() -> None:
    """Block this thread for good: the stop's watcher is ending the process (`os._exit`); a host callback
    must not raise into XLA meanwhile (JAX would log its traceback over the stop's one line)."""
    threading.Event().wait()


def run(cfg: TrainConfig) -> int:
    """The `eval` command: against `--policy-server URL` when given, else `vlajax.evaluation.closed_loop.run`.

    The stop contract of `eval --checkpoint` (`evaluation.stop_cleanly`): SIGTERM / Ctrl-C while connecting,
    compiling or running the episodes abandons the evaluation at once -- the connections to the server are
    closed (a websocket close, code 1000, so the server frees them at once), one line, exit 0, nothing
    written; during the writing the report is finished first."""
    url = cfg.sft.eval_policy_server
    if not url:
        return evaluation.run(cfg)
    held: list[RemoteBridge] = []  # the connected bridge, for the stop's cleanup

    def episodes():
        try:
            held.append(RemoteBridge.connect(url, cfg.sft.eval_connections, cfg.env))
        except OSError as e:
            raise ConfigError(f"--policy-server {url}: cannot connect ({e})") from None
        bridge = held[0]
        try:
            result, frames = evaluation.run_episodes(cfg, bridge, types.SimpleNamespace(cfg=None), {})
        except ServerError as e:
            raise ConfigError(f"the policy server refused a request: {e}") from None
        finally:
            bridge.close()
        result["policy_server"] = {"url": url, "policy": bridge.policy.metadata.get("policy")}
        where = os.path.join(cfg.logging.eval_out or os.path.join(cfg.output_dir, "eval"), f"{cfg.env.suite}-remote")
        return evaluation.free_dir(where, cfg.logging.overwrite), result, frames  # never over another's result

    def cleanup() -> str:
        if not held:
            return f"dropped the connection attempt to {url}"
        return held[0].close_on_stop()

    out_dir, result, _ = evaluation.stop_cleanly(episodes, lambda got: evaluation.write_outputs(*got),
                                                 report="eval.json", cleanup=cleanup)
    evaluation.print_result(result, out_dir)  # eval.json was written once, whole, with the server in it
    return 0
