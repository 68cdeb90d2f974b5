"""`data.grounding_fraction`: rendered first frames mixed into the SFT records as
aux-only samples -- their share of an epoch, their records, their targets in the demos'
normalization, no effect on the action loss, the refusals; and (slow) the rendered frames'
targets are exactly where the scripted expert grasps and places."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.sft.test_aux_target import _aux_config, _write
from vlajax import train as train_cli
from vlajax.data.aux_frames import AuxFrameSource, MixedSource
from vlajax.data.build import make_loader, make_source
from vlajax.data.lerobot import DatasetError
from vlajax.models.vla import VLA
from vlajax.policies.run_files import init_fn
from vlajax.sft.loop import loss_fn

GRASPS = [3, 5, 2, 7, 4, 6, 1, 8]  # 8 episodes x 12 frames = 96 records
M = 6  # synthetic grounding frames


@pytest.fixture(scope="module")
def grasp_dataset(tmp_path_factory):
    return _write(str(tmp_path_factory.mktemp("ground") / "demos"), GRASPS)


def _frames(m: int = M, seed: int = 0) -> dict:
    """What `vlajax.data.demos.grounding_frames` returns, with made-up content."""
    rng = np.random.default_rng(seed)
    return {"images": {c: rng.integers(0, 256, (m, 32, 32, 3), dtype=np.uint8) for c in ("agentview", "wrist")},
            "state": rng.standard_normal((m, 8)).astype(np.float32),
            "instructions": [f"pick up the red cube number {i}" for i in range(m)],
            "cubes": rng.uniform(-0.2, 0.2, (m, 3, 2)).astype(np.float32),
            "zone": rng.uniform(-0.2, 0.2, (m, 2)).astype(np.float32),
            "scene": np.arange(m) // 3}


def _mixed_config(root, out, fraction=0.25, **sft):
    cfg = _aux_config(root, out, aux_start_weight=5.0, **sft)
    return cfg.replace(data=dataclasses.replace(cfg.data, grounding_fraction=fraction, batching="fixed",
                                                batch_size=8))


def test_an_epoch_holds_the_fraction_and_the_frames_train_only_the_aux_head(grasp_dataset, tmp_path):
    root, grasp, end = grasp_dataset
    frames = _frames()
    cfg = _mixed_config(root, str(tmp_path))
    loader, info = make_loader(cfg, None, num_epochs=1, aux_frames=lambda: frames)
    batches = list(loader)
    loader.close()
    index = np.concatenate([b["index"][b["sample_mask"]] for b in batches])
    n_extra = round(0.25 / 0.75 * 96)  # 32: a quarter of the 128 records
    assert len(index) == 96 + n_extra and len(set(index.tolist())) == len(index)  # every record once
    raw = np.concatenate([np.repeat(np.concatenate([g, e])[None], 12, 0) for g, e in zip(grasp, end)])
    want = (np.concatenate([frames["cubes"][:, 0], frames["zone"]], 1) - raw.mean(0)) / raw.std(0)
    seen = 0
    for b in batches:
        for k in np.flatnonzero(b["sample_mask"]):
            i = int(b["index"][k])
            if i < 96:  # a demo frame: its actions count, weight 5 only on start frames
                assert b["action_mask"][k].any()
                continue
            seen += 1
            assert not b["action_mask"][k].any()  # no action loss
            assert b["aux_frame_weight"][k] == 5.0  # sft.aux_start_weight
            np.testing.assert_allclose(b["aux_target"][k], want[(i - 96) % M], rtol=1e-5, atol=1e-5)
    assert seen == n_extra
    # the dataset's own records are unchanged by the mix
    src = make_source(cfg)
    np.testing.assert_array_equal(src.aux, make_source(cfg.replace(data=dataclasses.replace(
        cfg.data, grounding_fraction=0.0))).aux)


def test_the_action_loss_ignores_the_frames_and_the_aux_loss_reads_them(grasp_dataset, tmp_path):
    cfg = _mixed_config(grasp_dataset[0], str(tmp_path), fraction=0.5)
    loader, info = make_loader(cfg, None, num_epochs=1, aux_frames=_frames)
    batch = next(b for b in loader if (b["sample_mask"] & ~b["action_mask"].any(1)).sum() >= 2)
    loader.close()
    extra = batch["sample_mask"] & ~batch["action_mask"].any(1)
    assert 0 < extra.sum() < batch["sample_mask"].sum()
    params = jax.jit(init_fn(cfg, info.cameras))(jax.random.key(0)).params
    params = jax.tree.map(lambda x: getattr(x, "value", x), params, is_leaf=lambda x: hasattr(x, "value"))
    model = VLA(cfg.model)
    f = jax.jit(lambda p, b: loss_fn(p, model, b, jax.random.key(3)))
    _, ref = f(params, batch)
    noise = np.random.default_rng(1).uniform(-1, 1, batch["actions"].shape).astype(np.float32)
    other = {**batch, "actions": np.where(extra[:, None, None], noise, batch["actions"])}
    _, got = f(params, other)
    assert float(got["flow_mse"]) == float(ref["flow_mse"])  # their actions are never read
    moved = {**batch, "aux_target": np.where(extra[:, None], batch["aux_target"] + 1.0, batch["aux_target"])}
    _, got = f(params, moved)
    assert float(got["aux_target_mse"]) != float(ref["aux_target_mse"])  # their targets are


def test_the_dataset_is_checked_before_frames_are_rendered(tmp_path):
    """`make_loader` calls an `aux_frames` function only after the dataset's checks: bad data fails first."""
    root, _, _ = _write(str(tmp_path / "demos"), [3, None, 2])  # episode 1 never grasps
    calls = []
    with pytest.raises(DatasetError, match="never closes the gripper"):
        make_loader(_mixed_config(root, str(tmp_path)), None, aux_frames=lambda: calls.append(1) or _frames())
    assert calls == []
    loader, _ = make_loader(_mixed_config(_write(str(tmp_path / "ok"), GRASPS)[0], str(tmp_path)), None,
                            num_epochs=1, aux_frames=lambda: calls.append(1) or _frames())
    loader.close()
    assert calls == [1]


def test_mixed_source_checks_the_frames(grasp_dataset, tmp_path):
    src = make_source(_aux_config(grasp_dataset[0], str(tmp_path)))
    fr = _frames()
    target = np.zeros((M, 4), np.float32)
    ok = AuxFrameSource(fr["images"], fr["state"], fr["instructions"], target, 5.0, horizon=src.horizon,
                        action_dim=4)
    mixed = MixedSource(src, ok, 0.1)
    assert len(mixed) == 96 + 11 and mixed[100]["index"] == 100 and mixed[100]["instruction"] == fr["instructions"][4]
    assert set(mixed[100]) == set(src[0])  # the same record keys as a demo frame
    one_cam = AuxFrameSource({"agentview": fr["images"]["agentview"]}, fr["state"], fr["instructions"], target,
                             1.0, horizon=src.horizon, action_dim=4)
    with pytest.raises(DatasetError, match=r"lack the dataset's cameras \['wrist'\]"):
        MixedSource(src, one_cam, 0.1)
    short = AuxFrameSource(fr["images"], fr["state"][:, :6], fr["instructions"], target, 1.0, horizon=src.horizon,
                           action_dim=4)
    with pytest.raises(DatasetError, match="state has 6 dims"):
        MixedSource(src, short, 0.1)
    with pytest.raises(ValueError, match="5 instructions"):
        AuxFrameSource(fr["images"], fr["state"], fr["instructions"][:5], target, 1.0, horizon=2, action_dim=4)


@pytest.mark.parametrize("args, message", [
    (["--data.grounding-fraction", "0.25"], "error: data.grounding_fraction=0.25 needs model.aux_target"),
    (["--data.grounding-fraction", "0.25", "--model.aux-target", "grasp_place"],
     "error: data.grounding_fraction=0.25 renders object-suite scenes"),
    (["--data.grounding-scenes", "50"], "error: data.grounding_scenes=50 needs data.grounding_fraction > 0"),
    (["--data.grounding-fraction", "1.0"], "error: data.grounding_fraction must be in [0, 1)"),
])
def test_refusals_are_one_error_line(grasp_dataset, tmp_path, capsys, args, message):
    code = train_cli.main(["sft", "--preset", "sft-tiny", "--data.dataset-dir", grasp_dataset[0], "--output-dir",
                           str(tmp_path / "a"), "--logging.progress", "none", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(message), err


@pytest.mark.parametrize("command, preset", [("rl", "rl-grpo-tokens"), ("demos", "sft-small"), ("eval", "sft-small")])
def test_other_commands_refuse_the_fraction(tmp_path, capsys, command, preset):
    code = train_cli.main([command, "--preset", preset, "--output-dir", str(tmp_path / "a"),
                           "--data.grounding-fraction", "0.5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"error: data.grounding_fraction=0.5 is for sft (it mixes rendered frames into the "
                                 f"SFT batches); the {command} command does not read it"], err


@pytest.mark.slow  # MJX resets, renders and 200 expert steps to compile and run (~1.5-4 min on 2 shared cores)
def test_rendered_targets_are_where_the_expert_grasps_and_places():
    """`first_frames`' target (cube 0's xy) and square xy are, to 1 mm, the fingertip xy at the scripted
    expert's first gripper-closing frame and at its success frame, run from the very states rendered:
    what `grasp_place_raw` reads from real demos, so the frames' targets share the demos' units."""
    from vlajax.data.demos import first_frames, swap_target
    from vlajax.envs import experts, registry

    env = registry.load("object/pick_red", {"image_size": 16, "cameras": ("agentview",)})
    root, scenes = jax.random.key(11), 2
    fr = first_frames(env, scenes, root, batch=3 * scenes)
    n = 3 * scenes
    assert fr["images"]["agentview"].shape == (n, 16, 16, 3) and fr["state"].shape == (n, 8)
    assert len(set(fr["instructions"][:3])) == 3  # one scene, three colour words
    # first_frames' states again: scene s = reset(fold_in(root, s), task SUITES['object'][s % 4]), cube i % 3 in
    tids = jnp.asarray([registry.ALL_ENVS.index(t) for t in registry.SUITES["object"]], jnp.int32)
    i = np.arange(n)
    keys = jnp.stack([jax.random.fold_in(root, int(s)) for s in i // 3])
    st = jax.vmap(env.reset_task)(keys, tids[i // 3 % 4])
    st = jax.vmap(lambda x, k: swap_target(env, x, k))(st, jnp.asarray(i % 3, jnp.int32))
    np.testing.assert_array_equal(np.asarray(st.obs["pixels/agentview"]), fr["images"]["agentview"])
    act, step = jax.vmap(experts.make_expert(env)), jax.vmap(env.step)

    def body(carry, _):
        x, es = carry
        a, es = act(x, es)
        nxt = step(x, a)
        return (nxt, es), (x.obs["state"][:, :2], a[:, 3] > 0, nxt.metrics["success"] > 0)

    es = jax.vmap(lambda _: experts.init_state())(jnp.arange(n))
    _, (xy, closing, success) = jax.device_get(jax.jit(lambda c: jax.lax.scan(body, c, None, length=200))((st, es)))
    assert success.any(0).all() and closing.any(0).all()  # the expert solves every scene
    e = np.arange(n)
    grasp = xy[np.argmax(closing, 0), e]
    place = xy[np.argmax(success, 0), e]
    np.testing.assert_allclose(grasp, fr["cubes"][:, 0], atol=1e-3)
    np.testing.assert_allclose(place, fr["zone"], atol=1e-3)
    assert np.abs(fr["cubes"][:, 0] - fr["cubes"][:, 1]).max() > 0.02  # not trivially equal cubes


@pytest.mark.slow  # renders grounding frames and compiles an SFT step (~2-4 min on 2 shared cores)
def test_sft_renders_and_mixes_the_frames(grasp_dataset, tmp_path, capsys):
    """The command end to end: `train sft` on the object suite with `--data.grounding-fraction` renders
    the frames (a stream of its own: no demo or eval layout) and trains on the mix."""
    from vlajax.data.demos import grounding_frames

    root = grasp_dataset[0]
    args = ["sft", "--preset", "sft-tiny", "--data.dataset-dir", root, "--output-dir", str(tmp_path / "run"),
            "--logging.progress", "none", "--env.suite", "object", "--model.aux-target", "grasp_place",
            "--data.grounding-fraction", "0.5", "--data.grounding-scenes", "4", "--sft.num-steps", "2"]
    assert train_cli.main(args) == 0
    cfg = _mixed_config(root, str(tmp_path)).replace(seed=0)
    cfg = cfg.replace(env=dataclasses.replace(cfg.env, suite="object"),
                      data=dataclasses.replace(cfg.data, grounding_scenes=2))
    fr = grounding_frames(cfg)
    assert len(fr["instructions"]) == 6 and fr["images"]["agentview"].shape[1:] == (32, 32, 3)
    again = grounding_frames(cfg.replace(seed=1))
    assert not np.array_equal(again["cubes"], fr["cubes"])  # the seed picks the scenes
