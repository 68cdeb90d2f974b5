"""Imported openpi policies served: the answers are openpi's `Policy.infer` answers.

The reference data's `pi0_libero` / `pi05_libero` checkpoints (`../shared/fixtures/openpi/policies`,
read through tests/models/test_openpi_policy.py's helpers: every size from the files) are imported
and served in a thread (`vlajax.serve.app.build`) with the LIBERO keys openpi's example client
sends, over the websocket protocol (msgpack-numpy, openpi's wire format). `--noise-key noise`
(testing only) lets a request carry the flow's starting noise.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from websockets.sync.client import connect

from tests.models.test_openpi_policy import CONFIGS, FIXTURES, TOL, cases, imported
from tests.serve.conftest import ServerThread
from vlajax.serve.app import ServeArgs
from vlajax.serve.codec import pack, unpack

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"openpi policy reference data not present ({FIXTURES})")


@contextlib.contextmanager
def served(checkpoint: str, **kw):
    s = ServerThread(ServeArgs(checkpoint=checkpoint, port=0, max_batch=2, max_wait_ms=20, replicas=1,
                               noise_key="noise", **kw))
    try:
        with connect(s.url, compression=None, max_size=None, open_timeout=30) as ws:
            yield s, ws, unpack(ws.recv(timeout=30))
    finally:
        s.stop()


def ask(ws, obs: dict) -> np.ndarray:
    ws.send(pack(obs))
    out = unpack(ws.recv(timeout=120))
    assert isinstance(out, dict), out  # an error comes back as a string
    return np.asarray(out["actions"])


@pytest.mark.parametrize("config", CONFIGS)
def test_served_answers_match_openpi(config):
    """Acceptance 1 (server): each case, sent with openpi's LIBERO keys (224 and 256 pixel images)
    and the reference noise, within 1e-4 of openpi's actions; acceptance 2: without noise the
    server draws the flow's start (two identical requests differ) and says it is not deterministic."""
    with served(imported(config)) as (_, ws, meta):
        assert meta["policy"]["deterministic"] is False
        assert meta["policy"]["openpi"]["train_config"] == config
        assert set(meta["observation"]) >= {"observation/image", "observation/wrist_image", "observation/state",
                                            "prompt"}
        errs = []
        for c in cases(config):
            got = ask(ws, {**c["obs"], "noise": c["noise"]})
            assert got.shape == c["actions"].shape
            errs.append(float(np.abs(got - c["actions"]).max()))
        print(f"{config} served: max |ours - openpi fp32| per case {[f'{e:.1e}' for e in errs]}")
        assert max(errs) <= TOL, errs
        obs = cases(config)[0]["obs"]
        assert np.abs(ask(ws, obs) - ask(ws, obs)).max() > 1e-3


def test_pi05_prompt_and_state_change_the_answer():
    """Acceptance 3: a π0.5 policy with the state in its prompt (pi05_libero's params imported with
    `--discrete-state-input true`): the prompt and the state each change the served answer (same
    noise), and the tokens the server builds equal the tokenizer's for the normalized state."""
    from vlajax.data.normalize import normalize
    from vlajax.models.sp_tokenizer import PromptTokenizer
    from vlajax.policies.bridge import Bridge

    ckpt = imported("pi05_libero", "--discrete-state-input", "true")
    bridge = Bridge.load(ckpt)
    c = cases("pi05_libero")[0]
    with served(ckpt) as (s, ws, _):
        base = ask(ws, {**c["obs"], "noise": c["noise"]})
        other_prompt = ask(ws, {**c["obs"], "prompt": c["obs"]["prompt"] + " now", "noise": c["noise"]})
        state = c["obs"]["observation/state"] + np.float32(0.5)
        other_state = ask(ws, {**c["obs"], "observation/state": state, "noise": c["noise"]})
        assert np.abs(other_prompt - base).max() > 1e-3 and np.abs(other_state - base).max() > 1e-3
        parsed = s.server.spec.parse({**c["obs"], "observation/state": state})
    tok = PromptTokenizer.load(str(FIXTURES / "tokenizer.model"), bridge.model.max_text_len)
    want = tok.pi05(c["obs"]["prompt"], normalize(state, bridge.norm["state"], bridge.state_norm))
    np.testing.assert_array_equal(parsed.tokens, want[0])
    np.testing.assert_array_equal(parsed.token_mask, want[1])
    # pi05_libero itself (discrete_state_input=False): the state is not in the prompt
    with served(imported("pi05_libero")) as (s, _, _):
        parsed = s.server.spec.parse(c["obs"])
    np.testing.assert_array_equal(parsed.tokens, cases("pi05_libero")[0]["inter"]["tokenized_prompt"])
