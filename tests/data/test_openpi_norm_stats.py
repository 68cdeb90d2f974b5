"""Fine-tuning an imported openpi policy uses openpi's training transforms: norm stats computed from
the dataset as openpi's `scripts/compute_norm_stats.py` computes them (`RunningStats`: running
mean / std, q01 / q99 from its 5,000-bin histograms, over the data after DeltaActions), z-score for
π0 and quantiles for π0.5, and DeltaActions on the first 6 dims for `pi0_libero`.

openpi's formulas are written out here from its source (Physical-Intelligence/openpi at 15a9616:
`shared/normalize.py` RunningStats, `scripts/compute_norm_stats.py`'s loop, `transforms.py`
DeltaActions / Normalize), independently of `vlajax.data.stats.RunningStats` and
`vlajax.data.openpi.openpi_norm_stats`, and compared with ours on the LeRobot fixture (state [8],
actions [7]) and on a LIBERO-layout dataset (`image`, `wrist_image`, `state`, `actions`) made with
our writer from the policy reference data (`../shared/fixtures/openpi/policies`: openpi's own
states and actions for `pi0_libero` / `pi05_libero`, and openpi's normalized states).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from vlajax.config.openpi import OPENPI_CONFIGS
from vlajax.config.schema import get_config
from vlajax.data import openpi
from vlajax.data.build import make_loader
from vlajax.data.lerobot import LeRobotData
from vlajax.data.normalize import NormStats, normalize
from vlajax.data.source import ActionChunkSource
from vlajax.data.stats import RunningStats
from vlajax.data.transforms import Compose
from vlajax.data.writer import LeRobotWriter, image_feature

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(REPO, "tests", "fixtures", "lerobot-v3.0-images")
POLICIES = os.path.join(os.path.dirname(REPO), "shared", "fixtures", "openpi", "policies")
CONFIGS = ("pi0_libero", "pi05_libero")


# ------------------------------------------------------------------ openpi's formulas, from its source


class OpenpiRunningStats:
    """openpi's `shared/normalize.py` RunningStats: per-dimension lists of histograms and edges."""

    def __init__(self):
        self.n, self.mean, self.msq, self.lo, self.hi, self.hists, self.edges = 0, None, None, None, None, None, None

    def update(self, batch):
        batch = batch.reshape(-1, batch.shape[-1])
        n, d = batch.shape
        if self.n == 0:
            self.mean, self.msq = np.mean(batch, axis=0), np.mean(batch**2, axis=0)
            self.lo, self.hi = np.min(batch, axis=0), np.max(batch, axis=0)
            self.hists = [np.zeros(5000) for _ in range(d)]
            self.edges = [np.linspace(self.lo[i] - 1e-10, self.hi[i] + 1e-10, 5001) for i in range(d)]
        else:
            new_max, new_min = np.max(batch, axis=0), np.min(batch, axis=0)
            changed = np.any(new_max > self.hi) or np.any(new_min < self.lo)
            self.hi, self.lo = np.maximum(self.hi, new_max), np.minimum(self.lo, new_min)
            if changed:
                for i in range(d):
                    edges = np.linspace(self.lo[i], self.hi[i], 5001)
                    self.hists[i], _ = np.histogram(self.edges[i][:-1], bins=edges, weights=self.hists[i])
                    self.edges[i] = edges
        self.n += n
        self.mean += (np.mean(batch, axis=0) - self.mean) * (n / self.n)
        self.msq += (np.mean(batch**2, axis=0) - self.msq) * (n / self.n)
        for i in range(d):
            self.hists[i] += np.histogram(batch[:, i], bins=self.edges[i])[0]

    def get(self):
        std = np.sqrt(np.maximum(0, self.msq - self.mean**2))
        qs = [np.array([e[np.searchsorted(np.cumsum(h), q * self.n)] for h, e in zip(self.hists, self.edges)])
              for q in (0.01, 0.99)]
        return {"mean": self.mean, "std": std, "q01": qs[0], "q99": qs[1]}


def openpi_delta(state, actions, mask):
    """openpi's `DeltaActions.__call__` on one sample (state [S], actions [H, A]), on a copy."""
    actions = np.array(actions)
    if mask is None or not len(mask):
        return actions
    mask = np.asarray(mask)
    dims = mask.shape[-1]
    actions[..., :dims] -= np.expand_dims(np.where(mask, state[..., :dims], 0), axis=-2)
    return actions


def openpi_compute_norm_stats(src: ActionChunkSource, mask, batch_size: int) -> dict:
    """`compute_norm_stats.main`'s loop: unshuffled batches of `batch_size` samples (len // batch_size
    of them), each sample's `state` and `actions` chunk after the data transforms, one RunningStats per key."""
    stats = {"state": OpenpiRunningStats(), "actions": OpenpiRunningStats()}
    for b in range(len(src) // batch_size):
        samples = [src[i] for i in range(b * batch_size, (b + 1) * batch_size)]
        batch = {"state": np.stack([s["state"] for s in samples]),
                 "actions": np.stack([openpi_delta(s["state"], s["actions"], mask) for s in samples])}
        for key in stats:
            stats[key].update(np.asarray(batch[key]))
    return {k: s.get() for k, s in stats.items()}


def openpi_normalize(x, st: dict, quantile: bool):
    """openpi's `Normalize._normalize` / `_normalize_quantile`."""
    if quantile:
        q01, q99 = st["q01"][..., : x.shape[-1]], st["q99"][..., : x.shape[-1]]
        return (x - q01) / (q99 - q01 + 1e-6) * 2.0 - 1.0
    return (x - st["mean"][..., : x.shape[-1]]) / (st["std"][..., : x.shape[-1]] + 1e-6)


def _assert_stats(ours: NormStats, theirs: dict) -> None:
    for name in ("mean", "std", "q01", "q99"):
        np.testing.assert_allclose(getattr(ours, name), theirs[name], rtol=1e-6, atol=1e-7, err_msg=name)


# ------------------------------------------------------------------ data


def _need_policies() -> None:
    if not os.path.isdir(POLICIES):
        pytest.skip(f"{POLICIES} is absent (../shared is not here: a user's clone)")


def _reference_dataset(root: str) -> str:
    """A LeRobot v3.0 dataset in openpi's LIBERO layout (32x32 `image` / `wrist_image`, `state` [8],
    `actions` [7], fps 10) from the reference cases: episode k (of 9 + 4k frames) holds case k's openpi
    state (drifting by 0.01 a frame) and the absolute actions openpi's pi0_libero policy answered."""
    cases = np.load(os.path.join(POLICIES, "pi0_libero", "cases.npz"))
    features = {"image": image_feature(32, 32), "wrist_image": image_feature(32, 32),
                "state": {"dtype": "float32", "shape": [8], "names": None},
                "actions": {"dtype": "float32", "shape": [7], "names": None}}
    with LeRobotWriter(root, fps=10, features=features, robot_type="panda") as w:
        for k in range(3):
            n = 9 + 4 * k
            img, wrist = (cases[f"case{k}/in/observation/{c}"] for c in ("image", "wrist_image"))
            step = img.shape[0] // 32
            chunk = cases[f"case{k}/out/actions"].astype(np.float32)
            w.add_episode({"image": np.repeat(img[::step, ::step][None], n, 0),
                           "wrist_image": np.repeat(wrist[::step, ::step][None], n, 0),
                           "state": (cases[f"case{k}/in/observation/state"] + 0.01 * np.arange(n)[:, None]
                                     ).astype(np.float32),
                           "actions": chunk[np.arange(n) % len(chunk)]}, task=f"task {k}")
    return root


@pytest.fixture(params=["lerobot-fixture", "openpi-reference"])
def dataset(request, tmp_path_factory) -> str:
    if request.param == "lerobot-fixture":
        return FIXTURE
    _need_policies()
    return _reference_dataset(str(tmp_path_factory.mktemp("libero") / "ds"))


# ------------------------------------------------------------------ tests


def test_running_stats_is_openpis_histogram_method():
    """Batches of several sizes whose range grows (the histograms are re-binned) and one that stays
    inside it: mean, std and the histogram quantiles equal openpi's, which are not np.quantile's."""
    rng = np.random.default_rng(0)
    ours, theirs = RunningStats(), OpenpiRunningStats()
    for k, n in enumerate((7, 32, 5, 32, 64)):
        x = (rng.standard_normal((n, 3, 5)) * (1 + k % 3) + np.arange(5) * [1, -2, 0, 3, 0.5][k]).astype(np.float32)
        ours.update(x)
        theirs.update(x)
    mean, std, q01, q99, lo, hi = ours.finish()
    ref = theirs.get()
    for name, v in (("mean", mean), ("std", std), ("q01", q01), ("q99", q99)):
        np.testing.assert_array_equal(v, ref[name], err_msg=name)
    np.testing.assert_array_equal(lo, theirs.lo)
    np.testing.assert_array_equal(hi, theirs.hi)
    with pytest.raises(ValueError, match="fewer than 2"):
        one = RunningStats()
        one.update(np.zeros((1, 3), np.float32))
        one.finish()


@pytest.mark.parametrize("config", CONFIGS)
def test_norm_stats_are_compute_norm_stats(dataset, config):
    """`openpi_norm_stats` on a dataset = openpi's compute_norm_stats loop over it with that config's
    horizon and delta mask (pi0_libero: DeltaActions on 6 dims; pi05_libero: none)."""
    oc = OPENPI_CONFIGS[config]
    src = ActionChunkSource(LeRobotData(dataset), oc.action_horizon)
    mask = oc.transforms.delta_mask
    for batch in (4, 5):
        ours = openpi.openpi_norm_stats(src, mask, batch)
        theirs = openpi_compute_norm_stats(src, mask, batch)
        _assert_stats(ours["state"], theirs["state"])
        _assert_stats(ours["actions"], theirs["actions"])
    if any(mask):  # the statistics are the delta actions': the masked dims differ from the absolute ones'
        absolute = openpi.openpi_norm_stats(src, (), batch)["actions"]
        assert not np.allclose(absolute.mean[:6], ours["actions"].mean[:6])
        np.testing.assert_allclose(absolute.mean[6], ours["actions"].mean[6], rtol=1e-6)


@pytest.mark.parametrize("config", CONFIGS)
def test_presets_normalize_as_openpi_on_its_own_states(config):
    """The reference checkpoint's norm_stats.json, read by our importer, with the mode our preset of that
    family uses (pi0-dummy: z-score, pi05-dummy: quantiles, state and actions): every case's state
    normalized equals openpi's own model input (`inter/state`), and the other mode does not."""
    _need_policies()
    from vlajax.policies.import_openpi import read_norm_stats

    oc = OPENPI_CONFIGS[config]
    preset = get_config("pi05-dummy" if oc.pi05 else "pi0-dummy")
    assert preset.data.state_norm == preset.data.action_norm == oc.norm
    ckpt = os.path.join(POLICIES, config, "ckpt")
    norm, _ = read_norm_stats(ckpt, oc.transforms.asset_id)
    with open(os.path.join(ckpt, "assets", oc.transforms.asset_id, "norm_stats.json")) as f:
        raw = {k: {s: np.asarray(v, np.float64) for s, v in st.items()} for k, st in json.load(f)["norm_stats"].items()}
    cases = np.load(os.path.join(POLICIES, config, "cases.npz"))
    other = "mean_std" if oc.norm == "quantile" else "quantile"
    for k in range(3):
        state = cases[f"case{k}/in/observation/state"].astype(np.float32)
        want = cases[f"case{k}/inter/state"][:8]
        ours = normalize(state, norm["state"], preset.data.state_norm)
        np.testing.assert_allclose(ours, want, atol=1e-5)
        np.testing.assert_allclose(openpi_normalize(state, raw["state"], oc.pi05), want, atol=1e-5)
        assert not np.allclose(normalize(state, norm["state"], other), want, atol=1e-3)


@pytest.mark.parametrize("config", CONFIGS)
def test_sft_targets_are_openpis_on_the_libero_layout(config, tmp_path):
    """The SFT input pipeline (`make_loader(..., openpi_stats=True)` with the preset's modes and the
    config's horizon and mask) on the LIBERO-layout reference dataset: its statistics are
    compute_norm_stats', and every sample's targets are openpi's Normalize(DeltaActions(actions)) and
    its state openpi's Normalize(state), zero-padded to 32 dims; the outputs turn a target back."""
    _need_policies()
    oc = OPENPI_CONFIGS[config]
    root = _reference_dataset(str(tmp_path / "ds"))
    preset = get_config("pi05-dummy" if oc.pi05 else "pi0-dummy")
    model = dataclasses.replace(preset.model, action_horizon=oc.action_horizon, num_cameras=2, image_size=28,
                                tokenizer_path=os.path.join(POLICIES, "tokenizer.model"),
                                max_text_len=oc.max_token_len, discrete_state_input=oc.discrete_state_input)
    data = dataclasses.replace(preset.data, dataset_dir=root, batch_size=4, camera_map=(
        "image=base_0_rgb", "wrist_image=left_wrist_0_rgb"), augment=False)
    cfg = preset.replace(model=model, data=data)
    mask = oc.transforms.delta_mask
    _, info = make_loader(cfg, None, delta_mask=mask, openpi_stats=True)
    src = ActionChunkSource(LeRobotData(root), oc.action_horizon)
    theirs = openpi_compute_norm_stats(src, mask, 4)
    _assert_stats(info.norm["state"], theirs["state"])
    _assert_stats(info.norm["actions"], theirs["actions"])
    inputs = Compose(info.transforms.inputs)
    outputs = Compose(info.transforms.outputs)
    for i in (0, 8, len(src) - 1):
        rec = src[i]
        x = inputs(rec)
        want_a = openpi_normalize(openpi_delta(rec["state"], rec["actions"], mask), theirs["actions"], oc.pi05)
        np.testing.assert_allclose(x["actions"][:, :7], want_a, atol=2e-5)
        np.testing.assert_array_equal(x["actions"][:, 7:], 0.0)
        np.testing.assert_allclose(x["state"][:8], openpi_normalize(rec["state"], theirs["state"], oc.pi05),
                                   atol=2e-5)
        np.testing.assert_array_equal(x["state"][8:], 0.0)
        back = outputs({"actions": x["actions"], "state": x["state"]})  # the state comes back raw first
        np.testing.assert_allclose(back["actions"], rec["actions"], atol=1e-4)


def test_a_policy_fine_tuned_on_the_libero_layout_reads_raw_openpi_requests():
    """A pi0_libero fine-tuned on openpi's LIBERO layout keeps its dataset's camera names (`image`,
    `wrist_image`) with the openpi transforms: a raw request (`observation/image`, ...) gives it the same
    model inputs as the imported policy (cameras `agentview`, `wrist`) gets from that request."""
    _need_policies()
    import jax.numpy as jnp

    from vlajax.policies.bridge import Bridge

    oc = OPENPI_CONFIGS["pi0_libero"]
    preset = get_config("pi0-dummy")
    model = dataclasses.replace(preset.model, tokenizer_path=os.path.join(POLICIES, "tokenizer.model"),
                                action_horizon=oc.action_horizon, max_text_len=oc.max_token_len)
    rng = np.random.default_rng(0)
    stats = NormStats(*(rng.uniform(0.5, 1.5, 8).astype(np.float32) for _ in range(4)))
    norm = {"state": stats, "actions": dataclasses.replace(stats, mean=stats.mean[:7], std=stats.std[:7],
                                                           q01=stats.q01[:7], q99=stats.q99[:7])}
    req = {"observation/image": rng.integers(0, 256, (1, 224, 224, 3), dtype=np.uint8),
           "observation/wrist_image": rng.integers(0, 256, (1, 224, 224, 3), dtype=np.uint8),
           "observation/state": rng.standard_normal((1, 8)).astype(np.float32),
           "tokens": jnp.zeros((1, oc.max_token_len), jnp.int32), "token_mask": jnp.ones((1, oc.max_token_len), bool)}
    obs = {}
    for cams in (("agentview", "wrist"), ("image", "wrist_image")):
        bridge = Bridge(model, cams, norm, "mean_std", "mean_std", 7,
                        ((cams[0], "base_0_rgb"), (cams[1], "left_wrist_0_rgb")), oc.transforms)
        obs[cams] = bridge.observation(req)
    a, b = obs.values()
    for slot in a.images:
        np.testing.assert_array_equal(np.asarray(a.images[slot]), np.asarray(b.images[slot]))
        np.testing.assert_array_equal(np.asarray(a.image_masks[slot]), np.asarray(b.image_masks[slot]))
    np.testing.assert_array_equal(np.asarray(a.state), np.asarray(b.state))
