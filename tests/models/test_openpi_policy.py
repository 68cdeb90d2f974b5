"""An imported openpi checkpoint answers a raw LIBERO observation as openpi's `Policy.infer` does.

Reference data: `../shared/fixtures/openpi/policies/<config>/` (README: `../shared/fixtures/README.md`):
openpi-layout checkpoints of its train configs `pi0_libero` / `pi05_libero` at reduced sizes, the
SentencePiece model, raw observations, the flow's noise and openpi's actions. Every size (cases,
horizon, image sizes, prompt lengths) is read from the files. The import runs as a user runs it
(`python -m vlajax.policies.import_openpi ... --size dummy`, in-process), then the policy answers
through the Python API (`vlajax.policies.policy.Policy`) and through the RL rollout's actor (batched).
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path

import jax
import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "openpi" / "policies"
CONFIGS = ("pi0_libero", "pi05_libero")
TOL = 1e-4

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"openpi policy reference data not present ({FIXTURES})")


@functools.cache
def imported(config: str, *extra: str) -> str:
    """The fixture checkpoint of `config` imported once per process (the CLI, in-process). -> run dir."""
    from vlajax.policies.import_openpi import main

    out = os.path.join(tempfile.mkdtemp(prefix=f"vlajax-{config}-"), "imported")
    args = ["--checkpoint", str(FIXTURES / config / "ckpt"), "--config", config, "--size", "dummy",
            "--tokenizer", str(FIXTURES / "tokenizer.model"), "--out", out, *extra]
    assert main(args) == 0, args
    return out


def cases(config: str) -> list[dict]:
    """[{'obs': raw observation (unbatched, with 'prompt'), 'noise', 'actions', 'actions_bf16', 'inter'}]."""
    meta = json.loads((FIXTURES / config / "meta.json").read_text())
    z = np.load(FIXTURES / config / "cases.npz")
    out = []
    for k in range(meta["cases"]):
        sub = {key[len(f"case{k}/"):]: z[key] for key in z.files if key.startswith(f"case{k}/")}
        obs = {key[len("in/"):]: v for key, v in sub.items() if key.startswith("in/")}
        obs["prompt"] = meta["prompts"][k]
        out.append({"obs": obs, "noise": sub["noise"], "actions": sub["out/actions"],
                    "actions_bf16": sub["out_bf16/actions"],
                    "inter": {key[len("inter/"):]: v for key, v in sub.items() if key.startswith("inter/")}})
    return out


@functools.cache
def policy(config: str):
    from vlajax.policies.policy import Policy

    return Policy.load(imported(config))


def _err(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


@pytest.mark.parametrize("config", CONFIGS)
def test_python_api_matches_openpi_policy(config):
    """Acceptance 1 (Python API): every case within 1e-4 of openpi's float32 actions; the bf16 gap printed."""
    p = policy(config)
    errs, bf16 = [], []
    with jax.default_matmul_precision("highest"):
        for c in cases(config):
            got = p.infer(c["obs"], noise=c["noise"])["actions"]
            assert got.shape == c["actions"].shape and got.dtype == np.float32
            errs.append(_err(got, c["actions"]))
            bf16.append(_err(got, c["actions_bf16"]))
    print(f"{config}: max |ours - openpi fp32| per case {[f'{e:.1e}' for e in errs]}, "
          f"vs openpi bf16 {[f'{e:.1e}' for e in bf16]}")
    assert max(errs) <= TOL, errs
    if jax.default_backend() == "gpu":  # what a user gets without the context (XLA may use TF32): printed only
        default = [_err(p.infer(c["obs"], noise=c["noise"])["actions"], c["actions"]) for c in cases(config)]
        print(f"{config} on the GPU at default matmul precision: max |ours - openpi fp32| per case "
              f"{[f'{e:.1e}' for e in default]}")


@pytest.mark.parametrize("config", CONFIGS)
def test_inputs_match_openpi_intermediates(config):
    """The transformed inputs equal openpi's: prompt tokens exactly, resized images exactly (PIL's
    bilinear in integer arithmetic, inside jit), the normalized padded state to float32 rounding."""
    b = policy(config).bridge
    for c in cases(config):
        env_obs = {k: np.asarray(v)[None] for k, v in c["obs"].items() if k != "prompt"}
        ids, mask = b.encode_instructions([c["obs"]["prompt"]], env_obs)
        np.testing.assert_array_equal(ids[0], c["inter"]["tokenized_prompt"])
        np.testing.assert_array_equal(mask[0], c["inter"]["tokenized_prompt_mask"])
        obs = jax.jit(b.observation)({**env_obs, "tokens": ids, "token_mask": mask})
        for slot, img in obs.images.items():
            np.testing.assert_array_equal(np.round(np.asarray(img[0]) * 255).astype(np.uint8),
                                          c["inter"][f"image/{slot}"], err_msg=slot)
            assert bool(obs.image_masks[slot][0]) == (slot != "right_wrist_0_rgb")
        np.testing.assert_allclose(np.asarray(obs.state[0]), c["inter"]["state"], atol=1e-5)


@pytest.mark.parametrize("config", CONFIGS)
def test_batched_rollout_path_matches_openpi(config):
    """Acceptance 1 (rollout): the RL rollout's actor (`vla_actor(...).sample`, the function
    `rl/rollout.py` scans) on the raw LIBERO keys, batched by image size, deterministic with the
    reference noise in the observation; then without noise it starts from Gaussian noise."""
    from vlajax.rl.actors import vla_actor

    p = policy(config)
    actor = vla_actor(p.model, p.bridge)
    sample = jax.jit(actor.sample, static_argnames="deterministic")
    groups: dict[tuple, list] = {}
    for c in cases(config):
        groups.setdefault(c["obs"]["observation/image"].shape, []).append(c)
    with jax.default_matmul_precision("highest"):
        for group in groups.values():
            obs = {k: np.stack([c["obs"][k] for c in group]) for k in group[0]["obs"] if k != "prompt"}
            ids, mask = p.bridge.encode_instructions([c["obs"]["prompt"] for c in group], obs)
            obs |= {"tokens": ids, "token_mask": mask}
            got, record = sample(p.params, obs | {"noise": np.stack([c["noise"] for c in group])}, None,
                                 jax.random.key(0), deterministic=True)
            err = _err(got, np.stack([c["actions"] for c in group]))
            print(f"{config} rollout actor, batch of {len(group)} at {obs['observation/image'].shape[1:3]}: "
                  f"max |ours - openpi fp32| {err:.1e}")
            assert err <= TOL
            np.testing.assert_array_equal(np.asarray(record["chain"][:, 0]), np.stack([c["noise"] for c in group]))
            # acceptance 2: no noise given -> x_1 ~ N(0, I) from the rng (the ODE itself is deterministic)
            a1, r1 = sample(p.params, obs, None, jax.random.key(1), deterministic=True)
            a2, _ = sample(p.params, obs, None, jax.random.key(2), deterministic=True)
            x1 = np.asarray(r1["chain"][:, 0])
            assert _err(a1, a2) > 1e-3 and 0.8 < x1.std() < 1.2 and abs(x1.mean()) < 0.2


def test_gaussian_start_in_eval_and_python_api():
    """Acceptance 2: the imported config draws x_1 ~ N(0, I) (`model.flow_x1`); `Bridge.act` (what
    eval's closed loop calls) and `Policy.infer` give different answers on repeated calls."""
    p = policy("pi05_libero")
    assert p.bridge.model.flow_x1 == "normal" and not p.metadata["deterministic"]
    c = cases("pi05_libero")[0]
    a, b = p.infer(c["obs"])["actions"], p.infer(c["obs"])["actions"]
    assert _err(a, b) > 1e-3
    env_obs = {k: np.asarray(v)[None] for k, v in c["obs"].items() if k != "prompt"}
    ids, mask = p.bridge.encode_instructions([c["obs"]["prompt"]], env_obs)
    env_obs |= {"tokens": ids, "token_mask": mask}
    act = jax.jit(lambda rng: p.bridge.act(p.model, {"params": p.params}, env_obs, rng))
    assert _err(act(jax.random.key(0)), act(jax.random.key(1))) > 1e-3


def test_import_records_openpi_config():
    """The run directory holds the config's model fields and transforms; `--robot` / field flags name
    a user's own config (here: pi05_libero's params with the state in the prompt)."""
    from vlajax.policies.bridge import Bridge

    for config, horizon, tokens, delta in (("pi0_libero", 50, 48, [True] * 6 + [False]), ("pi05_libero", 10, 200, [])):
        d = json.loads(Path(imported(config), "policy.json").read_text())
        meta = json.loads((FIXTURES / config / "meta.json").read_text())
        assert d["model"]["action_horizon"] == meta["model"]["action_horizon"] == horizon
        assert d["model"]["max_text_len"] == meta["model"]["max_token_len"] == tokens
        assert d["model"]["discrete_state_input"] == meta["model"]["discrete_state_input"]
        assert d["model"]["flow_x1"] == "normal"
        assert d["openpi"] == {"train_config": config, "robot": "libero", "asset_id": meta["asset_id"],
                               "delta_mask": delta, "default_prompt": "", "adapt_to_pi": False}
        norm = "quantile" if meta["transforms"]["quantile_norm"] else "mean_std"
        assert d["action_norm"] == d["state_norm"] == norm
        assert Bridge.load(imported(config)).env_action_dim == 7
    d = json.loads(Path(imported("pi05_libero", "--discrete-state-input", "true"), "policy.json").read_text())
    assert d["model"]["discrete_state_input"] is True


def test_openpi_config_table():
    """Each named config sets openpi's fields (openpi 15a9616 training/config.py)."""
    from vlajax.policies.import_openpi import openpi_train_config

    want = {"pi0_libero": ("pi0", 50, 48, False, "libero", "mean_std"),
            "pi05_libero": ("pi05", 10, 200, False, "libero", "quantile"),
            "pi0_droid": ("pi0", 10, 48, False, "droid", "mean_std"),
            "pi05_droid": ("pi05", 15, 200, True, "droid", "quantile"),
            "pi0_aloha_sim": ("pi0", 50, 48, False, "aloha", "mean_std")}
    for name, (family, h, tokens, dsi, robot, norm) in want.items():
        for size in ("dummy", "full"):
            cfg, t = openpi_train_config(name, size=size)
            m = cfg.model
            assert (m.family, m.action_horizon, m.max_text_len, m.family == "pi05" and m.discrete_state_input,
                    t.robot, cfg.data.action_norm, m.action_dim) == (family, h, tokens, dsi, robot, norm, 32), name
            assert m.paligemma_variant == ("dummy" if size == "dummy" else "gemma_2b")
    assert openpi_train_config("pi0_aloha_sim")[1].default_prompt == "Transfer cube"
    cfg, t = openpi_train_config("pi0_libero", action_horizon=7, delta_dims="none", asset_id="mine")
    assert cfg.model.action_horizon == 7 and t.delta_mask == () and t.asset_id == "mine"


def _run_main(args, capsys) -> str:
    from vlajax.policies.import_openpi import main

    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err  # one line
    return err


def test_importer_bad_inputs_are_one_error_line(tmp_path, capsys):
    """Acceptance 4: missing tokenizer, vocabulary too large, wrong config for the params, missing
    norm stats: each one `error:` line, exit status 2, nothing written."""
    import shutil

    from vlajax.models import sp_tokenizer

    ckpt, tok = str(FIXTURES / "pi05_libero" / "ckpt"), str(FIXTURES / "tokenizer.model")
    base = ["--checkpoint", ckpt, "--config", "pi05_libero", "--size", "dummy", "--out"]
    err = _run_main([*base, str(tmp_path / "a"), "--tokenizer", str(tmp_path / "none.model")], capsys)
    assert "no SentencePiece model file" in err
    rng = np.random.default_rng(0)  # random 6-letter words: enough distinct pieces for 1,500
    words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), 6)) for _ in range(1500)]
    big = sp_tokenizer.train_tiny_model(str(tmp_path / "big.model"), [" ".join(words[i:i + 10])
                                                                       for i in range(0, 1500, 10)], 1500)
    err = _run_main([*base, str(tmp_path / "b"), "--tokenizer", big], capsys)
    assert "> model.vocab_size=1024" in err
    err = _run_main(["--checkpoint", str(FIXTURES / "pi0_libero" / "ckpt"), "--config", "pi05_libero", "--size",
                     "dummy", "--out", str(tmp_path / "c"), "--tokenizer", tok], capsys)
    assert "openpi params do not match" in err or "shape mismatch" in err
    bare = tmp_path / "bare"
    shutil.copytree(ckpt + "/params", bare / "params")
    err = _run_main(["--checkpoint", str(bare), *base[2:], str(tmp_path / "d"), "--tokenizer", tok], capsys)
    assert "no norm stats for asset id 'physical-intelligence/libero'" in err
    assert not any((tmp_path / d).exists() and os.listdir(tmp_path / d) for d in "abcd")


def test_eval_takes_sampling_flags():
    """`eval --model.flow-x1 zeros` (a sampling field the command line sets) replaces the checkpoint's:
    the closed loop's `Bridge.act` then starts from zeros and answers the same twice."""
    from vlajax.evaluation.closed_loop import sampling_overrides
    from vlajax.train import parse

    p = policy("pi05_libero")
    cfg = parse("eval", ["--preset", "pi05-dummy", "--checkpoint", imported("pi05_libero"), "--model.flow-x1", "zeros"])
    bridge, model = sampling_overrides(cfg, p.bridge, p.model)
    assert bridge.model.flow_x1 == "zeros" and model.cfg.flow_x1 == "zeros" and bridge.openpi == p.bridge.openpi
    assert sampling_overrides(parse("eval", ["--preset", "pi05-dummy"]), p.bridge, p.model)[0] is p.bridge
    c = cases("pi05_libero")[0]
    env_obs = {k: np.asarray(v)[None] for k, v in c["obs"].items() if k != "prompt"}
    ids, mask = bridge.encode_instructions([c["obs"]["prompt"]], env_obs)
    env_obs |= {"tokens": ids, "token_mask": mask}
    act = jax.jit(lambda rng: bridge.act(model, {"params": p.params}, env_obs, rng))
    np.testing.assert_array_equal(act(jax.random.key(0)), act(jax.random.key(1)))


def test_rl_on_the_tabletop_refuses_an_imported_robot_policy(tmp_path, capsys):
    """RL in our MJX env straight from an imported LIBERO policy (7-dim robot actions) is one error
    line; its RL runs on LIBERO's workers, or after SFT on the env's data (the e2e test)."""
    from vlajax.train import main

    assert main(["rl", "--preset", "pi05-dummy", "--rl.init-from", imported("pi05_libero"), "--output-dir",
                 str(tmp_path), "--rl.num-iterations", "1", "--env.num-envs", "2", "--rl.group-size", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: rl.init_from=") and "7-dim actions" in err and err.count("\n") == 1
