"""Refuse a policy server the LIBERO workers could not use, before any worker starts: connect once, read the
metadata, send one LIBERO request (openpi's keys, a synthetic observation of the declared image size) and check
the answer's action chunk against what the episodes need ([H >= replan_steps, >= 7]).

    meta = probe("ws://HOST:PORT", replan_steps=5, prompt="pick up the black bowl ...")   # or ValueError

The probe request carries none of `protocol.EXTRA_KEYS` (no episode id): an RL endpoint records nothing of it.
Every refusal is one line naming the server and what was wrong (`error: ...` on the command line).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vlajax.libero import protocol as P

__all__ = ["probe"]


def _request(meta: dict[str, Any], prompt: str) -> dict[str, Any]:
    """One observation as a worker sends it: images of the declared size (224 when none), state [8], prompt."""
    obs_meta = meta.get("observation", {}) if isinstance(meta, dict) else {}
    shape = (obs_meta.get(P.IMAGE_KEY) or {}).get("shape") or [224, 224, 3]
    size = int(shape[0])
    img = np.zeros((size, size, 3), np.uint8)
    return {P.IMAGE_KEY: img, P.WRIST_KEY: img.copy(), P.STATE_KEY: np.zeros(8, np.float32), P.PROMPT_KEY: prompt}


def probe(url: str, replan_steps: int, prompt: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The server's metadata after one good answer; ValueError (one line) for a server that refuses the connection,
    does not answer in `timeout_s`, answers an error, or answers actions the workers cannot execute."""
    from websockets.exceptions import InvalidHandshake, InvalidURI, WebSocketException  # noqa: PLC0415
    from websockets.sync.client import connect  # noqa: PLC0415

    from vlajax.serve.codec import pack, unpack  # noqa: PLC0415

    what = f"the policy server {url}"
    try:
        with connect(url, compression=None, max_size=None, open_timeout=timeout_s, close_timeout=2) as ws:
            meta = unpack(ws.recv(timeout=timeout_s))
            ws.send(pack(_request(meta, prompt)))
            reply = ws.recv(timeout=timeout_s)
    except ConnectionRefusedError:
        raise ValueError(f"{what}: connection refused (nothing listens there)") from None
    except TimeoutError:
        raise ValueError(f"{what}: no answer within {timeout_s:.0f} s") from None
    except (OSError, InvalidURI, InvalidHandshake, WebSocketException) as e:
        raise ValueError(f"{what}: {type(e).__name__}: {e}") from None
    except Exception as e:  # noqa: BLE001 -- a reply that is not msgpack: not an openpi-protocol server
        raise ValueError(f"{what}: not an openpi-protocol server ({type(e).__name__}: {e})") from None
    if isinstance(reply, str):
        raise ValueError(f"{what} answered a LIBERO request with an error: {reply.splitlines()[0][:300]}")
    try:
        answer = unpack(reply)
        actions = np.asarray(answer["actions"])
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"{what}: its answer has no 'actions' array ({type(e).__name__}: {e})") from None
    if actions.ndim != 2 or actions.shape[1] < P.ACTION_DIM:
        raise ValueError(f"{what} answers actions of shape {tuple(actions.shape)}; LIBERO's workers execute chunks "
                         f"[H, >= {P.ACTION_DIM}] (OSC_POSE delta 6 + gripper)")
    if actions.shape[0] < replan_steps:
        raise ValueError(f"{what} answers chunks of {actions.shape[0]} actions; --replan-steps {replan_steps} needs "
                         f"at least that many")
    if not np.all(np.isfinite(actions)):
        raise ValueError(f"{what} answers non-finite actions")
    return meta if isinstance(meta, dict) else {}
