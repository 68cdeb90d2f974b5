"""The `sft-libero-small` preset reads openpi's LIBERO layout (`image`, `wrist_image` uint8, `state` [8],
`actions` [7], fps 10; what `demos --suite libero_*` writes): both cameras resized to the 64 x 64 the
policy reads, 7-dim actions in chunks of 10, the 8-dim state; LIBERO's instructions fit its text length.
(Training it is the same jitted step as `sft-small`'s; `docs/libero-training.md` "SFT" has the run.)"""

from __future__ import annotations

import dataclasses

import numpy as np

from vlajax.config.presets.libero import LIBERO_IMAGE_SIZE
from vlajax.config.schema import get_config
from vlajax.data.build import make_loader
from vlajax.data.writer import LeRobotWriter, image_feature
from vlajax.models.tokenizer import encode

# libero_spatial's longest instructions (LIBERO's BDDL language)
INSTRUCTIONS = ("pick up the black bowl in the top drawer of the wooden cabinet and place it on the plate",
                "pick up the black bowl between the plate and the ramekin and place it on the plate")


def _dataset(root: str, size: int = 96) -> str:
    rng = np.random.default_rng(0)
    features = {"image": image_feature(size, size), "wrist_image": image_feature(size, size),
                "state": {"dtype": "float32", "shape": [8], "names": None},
                "actions": {"dtype": "float32", "shape": [7], "names": None}}
    with LeRobotWriter(root, fps=10, features=features, robot_type="panda") as w:
        for e, n in enumerate((12, 15)):
            w.add_episode({"image": rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8),
                           "wrist_image": rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8),
                           "state": rng.standard_normal((n, 8)).astype(np.float32),
                           "actions": rng.uniform(-1, 1, (n, 7)).astype(np.float32)}, task=INSTRUCTIONS[e])
    return root


def test_sft_libero_small_reads_openpis_libero_layout(tmp_path):
    cfg = get_config("sft-libero-small")
    m = cfg.model
    assert (m.family, m.action_dim, m.state_dim, m.image_size, m.num_cameras) == ("vla", 7, 8, LIBERO_IMAGE_SIZE, 2)
    assert cfg.data.demo_image_size == m.image_size  # its demos are rendered at the size it reads
    for text in INSTRUCTIONS:
        _, mask = encode(text, 64)
        assert int(np.sum(mask)) <= m.max_text_len, text
    cfg = cfg.replace(data=dataclasses.replace(cfg.data, dataset_dir=_dataset(str(tmp_path / "ds")), batch_size=4,
                                               num_threads=0, prefetch=0))
    loader, info = make_loader(cfg, None, num_epochs=1)
    assert info.cameras == ("image", "wrist_image")
    batch = next(iter(loader))
    loader.close()
    assert sorted(batch["images"]) == ["image", "wrist_image"]
    for v in batch["images"].values():
        assert np.asarray(v).shape[-3:] == (m.image_size, m.image_size, 3)  # 96 x 96 in the data
    assert np.asarray(batch["actions"]).shape[-2:] == (m.action_horizon, 7)
    assert np.asarray(batch["state"]).shape[-1] == 8
