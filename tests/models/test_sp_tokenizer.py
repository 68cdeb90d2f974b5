"""SentencePiece prompts (openpi's π0 / π0.5 formats) and the jit-able π0.5 state prompt."""

from __future__ import annotations

import numpy as np
import pytest

from vlajax.models import sp_tokenizer as spt

PROMPTS = ["pick up the red cube", "put_the blue cube\nin the bowl", "  press the button  ", "stack the green cube"]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    return spt.train_tiny_model(str(tmp_path_factory.mktemp("sp") / "tiny.model"), PROMPTS, vocab_size=600)


def test_missing_model_file_is_one_line_error(tmp_path):
    path = str(tmp_path / "nope.model")
    with pytest.raises(FileNotFoundError) as e:
        spt.PromptTokenizer.load(path, 48)
    assert path in str(e.value) and "\n" not in str(e.value)


def test_tiny_model_fits_the_dummy_vocabulary(model_path):
    assert spt.PromptTokenizer.load(model_path, 48).vocab_size <= 1024


def test_pi0_format(model_path):
    tok = spt.PromptTokenizer.load(model_path, 48)
    ids, mask = tok.pi0(PROMPTS[1])
    want = [tok.sp.bos_id()] + tok.sp.encode("put the blue cube in the bowl") + tok.sp.encode("\n")
    assert ids.dtype == np.int32 and mask.dtype == bool and ids.shape == mask.shape == (48,)
    assert ids[: len(want)].tolist() == want and mask.sum() == len(want) and not ids[len(want):].any()
    short = spt.PromptTokenizer.load(model_path, 5)
    ids, mask = short.pi0(PROMPTS[1])
    assert ids.tolist() == want[:5] and mask.all()


def test_discretize_state_matches_openpi_convention():
    x = np.asarray([-1.5, -1.0, -1.0 + 1 / 128 - 1e-6, 0.0, 0.999, 1.0, 3.0], np.float32)
    assert spt.discretize_state(x).tolist() == [-1, 0, 0, 128, 255, 255, 255]


def test_pi05_format(model_path):
    tok = spt.PromptTokenizer.load(model_path, 200)
    state = np.asarray([-2.0, 0.0, 0.5, 0.999], np.float32)
    ids, mask = tok.pi05(PROMPTS[2], state)
    text = tok.sp.decode(ids[mask].tolist())
    assert text == "Task: press the button, State: -1 128 192 255;\nAction: "
    assert ids[0] == tok.sp.bos_id()


@pytest.mark.parametrize("max_len", [200, 40, 12])
def test_state_prompt_table_equals_host_tokenizer(model_path, max_len):
    tok = spt.PromptTokenizer.load(model_path, max_len)
    table = spt.StatePromptTable.build(tok, PROMPTS, state_dim=6)  # checks every bin value itself
    rng = np.random.default_rng(1)
    idx = rng.integers(0, len(PROMPTS), 32)
    states = rng.uniform(-1.2, 1.2, (32, 6)).astype(np.float32)
    states[0] = [-1.0, 1.0, 0.0, -1.0001, 0.9999, 1 / 128]  # bin edges and the ends
    import jax

    ids, mask = jax.device_get(jax.jit(table.tokens)(idx, states))
    for i in range(32):
        want_ids, want_mask = tok.pi05(PROMPTS[idx[i]], states[i])
        np.testing.assert_array_equal(ids[i], want_ids)
        np.testing.assert_array_equal(mask[i], want_mask)


def test_state_prompt_table_refuses_a_tokenizer_it_cannot_reproduce(model_path):
    class Merging(spt.PromptTokenizer):  # as if the model merged a piece across the last space
        def pi05_ids(self, prompt, state):
            ids = super().pi05_ids(prompt, state)
            return ids[:-2] + [ids[-1]]

    with open(model_path, "rb") as f:
        tok = Merging(f.read(), 200, "merging.model")
    with pytest.raises(ValueError, match="merging.model: the jit-able"):
        spt.StatePromptTable.build(tok, PROMPTS)


def test_cli_trains_a_tokenizer_for_the_dummy_presets(tmp_path, capsys):
    from scripts import train_tokenizer  # the developer tool (scripts/ is on pytest's path: pythonpath ".")

    out = str(tmp_path / "t.model")
    assert train_tokenizer.main([out, "--vocab-size", "700"]) == 0
    tok = spt.PromptTokenizer.load(out, 200)
    assert tok.vocab_size <= 700 and "wrote" in capsys.readouterr().out
    from vlajax.envs.tabletop import tasks

    spt.StatePromptTable.build(tok, tasks.TASKS[0].instructions())  # the jit-able prompt reproduces it
