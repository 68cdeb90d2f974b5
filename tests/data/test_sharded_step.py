"""Global batches from `make_loader` feed a jitted, dp-sharded model computation: packed (4 packing
groups, one per device) and fixed padding give the same per-sample flow velocities."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.config.schema import MeshConfig, get_config
from vlajax.data.build import make_loader
from vlajax.data.packing import gather_prefix, rows_to_samples

from .helpers import write_dataset


def _velocities(model, variables, batch, groups):
    from vlajax.models.transformer import KVCache
    from vlajax.models.vla import VLA

    emb, _ = model.apply(variables, _observation(batch), method=VLA.embed_prefix)
    seg, pos = batch["segment_ids"], batch["positions"]
    rows = gather_prefix(emb, batch["prefix_index"], seg, groups)
    _, cache = model.apply(variables, rows, seg, pos, method=VLA.encode_prefix)
    (k, v, p), own = rows_to_samples((cache.k, cache.v, cache.positions), seg, batch["sample_row"],
                                     batch["sample_segment"], groups, sample_start=batch["sample_start"],
                                     length=model.cfg.prefix_len)
    x = batch["actions"]
    return model.apply(variables, KVCache(k, v, own, p), x, jnp.full(x.shape[:1], 0.4), method=VLA.velocity)[0]


def test_packed_global_batch_matches_fixed_per_sample(tmp_path):
    from vlajax.models.vla import VLA
    from vlajax.training.sharding import make_mesh, replicated

    root = write_dataset(str(tmp_path / "ds"), lengths=(9, 10, 11, 12))
    base = get_config("debug")
    mesh = make_mesh(MeshConfig(dp=4), jax.devices()[:4])
    out = {}
    for mode in ("fixed", "packed"):
        # one ViT block (the image tower runs before packing): less to compile, the same packed path
        cfg = base.replace(mesh=MeshConfig(dp=4), model=dataclasses.replace(base.model, vit_depth=1),
                           data=dataclasses.replace(base.data, dataset_dir=root, batch_size=32, batching=mode,
                                                    drop_cameras=(), shuffle_seed=7))
        loader, info = make_loader(cfg, mesh)
        batch = next(loader)
        loader.close()
        model = VLA(cfg.model)
        if mode == "fixed":
            variables = jax.jit(model.init, out_shardings=replicated(mesh))(
                jax.random.key(0), _observation(batch))
        v = jax.jit(_velocities, static_argnums=(0, 3))(model, variables, batch, info.groups)
        assert v.sharding.spec[0] == "dp"
        out[mode] = {int(i): np.asarray(v)[n] for n, i in enumerate(np.asarray(batch["index"])) if i >= 0}
        if mode == "packed":
            assert info.groups == 4 and batch["segment_ids"].shape[0] == info.rows
    common = sorted(set(out["fixed"]) & set(out["packed"]))
    assert len(common) >= 8
    for i in common:
        np.testing.assert_allclose(out["packed"][i], out["fixed"][i], atol=3e-5)


def _observation(batch):
    from vlajax.models.observation import Observation

    return Observation({c: v.astype(jnp.float32) / 255 for c, v in batch["images"].items()}, batch["image_masks"],
                       batch["tokens"], batch["token_mask"], batch["state"])


def test_grouped_gathers_have_no_collectives_when_groups_match_the_shards():
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from vlajax.training.sharding import make_mesh

    mesh = make_mesh(MeshConfig(dp=4), jax.devices()[:4])
    dp = NamedSharding(mesh, P("dp"))
    n, length, w, r, t = 16, 8, 4, 8, 16
    emb = jax.device_put(np.ones((n, length, w), np.float32), dp)
    counts = {}
    for groups in (1, 4):
        ng, rg = n // groups, r // groups
        idx = np.concatenate([np.arange(rg * t).reshape(rg, t) % (ng * length) + g * ng * length
                              for g in range(groups)]).astype(np.int32)
        seg = np.ones((r, t), np.int32)
        rows_of = np.repeat(np.arange(r), n // r).astype(np.int32)  # 2 samples per row, group-local

        def f(e, i, s, sr, g):
            rows = gather_prefix(e, i, s, g)
            whole = rows_to_samples(rows, s, sr, jnp.ones_like(sr), g)
            return whole, rows_to_samples(rows, s, sr, jnp.ones_like(sr), g, sample_start=sr % 2 * 4, length=8)

        hlo = jax.jit(f, static_argnums=4).lower(emb, jax.device_put(idx, dp), jax.device_put(seg, dp),
                                                 jax.device_put(rows_of, dp), groups).compile().as_text()
        counts[groups] = sum(hlo.count(op) for op in ("all-gather", "all-reduce", "all-to-all", "collective-permute"))
    assert counts[4] == 0 and counts[1] > 0, counts  # one group per device: every gather is on-device
