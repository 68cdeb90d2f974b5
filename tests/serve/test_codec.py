"""msgpack-numpy: round trips, and malformed messages refused with a named problem."""

import msgpack
import numpy as np
import pytest

from vlajax.serve.codec import CodecError, pack, unpack
from vlajax.serve.spec import KeyMap, ObsError, ObsSpec


def test_round_trip_arrays_scalars_and_nesting():
    obj = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.uint8(7), "c": [np.zeros((0, 2), np.int64)],
           "s": "text", "n": {"x": 1.5}}
    back = unpack(pack(obj))
    np.testing.assert_array_equal(back["a"], obj["a"])
    assert back["a"].dtype == np.float32 and back["b"] == 7 and back["b"].dtype == np.uint8
    assert back["c"][0].shape == (0, 2) and back["s"] == "text" and back["n"] == {"x": 1.5}


@pytest.mark.parametrize("message, problem", [
    ({b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "|O", b"shape": [1]}, "not accepted"),
    ({b"__ndarray__": True, b"data": b"\0" * 7, b"dtype": "<f4", b"shape": [2]}, "needs 8 bytes, got 7"),
    ({b"__ndarray__": True, b"data": b"", b"dtype": "nonsense", b"shape": [0]}, "unknown array dtype"),
    ({b"__ndarray__": True, b"data": b"", b"dtype": "<f4", b"shape": [-1]}, "bad array shape"),
])
def test_malformed_arrays_are_refused(message, problem):
    with pytest.raises(CodecError, match=problem):
        unpack(msgpack.packb(message))


def test_garbage_is_a_codec_error():
    with pytest.raises(CodecError, match="not a msgpack-numpy message"):
        unpack(b"\xc1\xc1garbage")
    with pytest.raises(CodecError, match="cannot send dtype"):
        pack({"x": np.array([object()])})


def test_key_maps_and_overrides():
    suite = KeyMap.make("suite", ("agentview", "wrist"))
    assert dict(suite.images) == {"agentview": "pixels/agentview", "wrist": "pixels/wrist"}
    libero = KeyMap.make("libero", ("agentview", "wrist"), ["prompt=task"])
    assert dict(libero.images)["wrist"] == "observation/wrist_image" and libero.state == "observation/state"
    assert libero.prompt == "task"
    with pytest.raises(ValueError, match="not a camera"):
        KeyMap.make("suite", ("agentview",), ["front=img"])
    with pytest.raises(ValueError, match="share a wire key"):
        KeyMap.make("suite", ("agentview", "wrist"), ["wrist=pixels/agentview"])


def test_spec_parses_an_example_and_names_problems():
    spec = ObsSpec(KeyMap.make("suite", ("agentview",)), (8, 8, 3), 4, max_text_len=6, vocab_size=300)
    ok = spec.parse(spec.example("xyz"))  # byte tokens only: bos x y z eos
    assert ok.tokens.shape == (6,) and ok.tokens.dtype == np.int32 and ok.token_mask.sum() == 5
    bad = spec.example()
    bad["state"] = bad["state"].astype(np.int32)
    with pytest.raises(ObsError, match="must be a float array"):
        spec.parse(bad)
    # vocabulary 300 < the tokenizer's word ids: a known word becomes an unknown token for this policy
    with pytest.raises(ObsError, match="unknown prompt token"):
        spec.parse({**spec.example(), "prompt": "press the red button"})


def test_a_joined_state_key_is_advertised_and_sent_as_its_parts():
    """The droid key map joins the state from two wire keys: the metadata and the example name those two keys
    (what a client that builds its request from the metadata sends), and the server parses that request."""
    spec = ObsSpec(KeyMap.make("droid", ("agentview",)), (8, 8, 3), 8, max_text_len=6, vocab_size=300)
    meta = spec.metadata()
    assert meta["observation/joint_position"]["shape"] == [7] and meta["observation/gripper_position"]["shape"] == [1]
    assert spec.keys.state not in meta
    request = {k: np.ones(e["shape"], np.float32) if e["dtype"] == "float32" else
               np.zeros(e["shape"], np.uint8) if e["dtype"] == "uint8" else "xyz" for k, e in meta.items()}
    assert spec.parse(request).state.shape == (8,)
    assert spec.parse(spec.example("xyz")).state.shape == (8,)
