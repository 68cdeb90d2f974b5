"""Source windows, per-process sharding, the loader's global arrays and exact resume."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from vlajax.config.schema import MeshConfig
from vlajax.data.lerobot import DatasetError, LeRobotData
from vlajax.data.loader import Loader, make_dataset
from vlajax.data.packing import PrefixSpec
from vlajax.data.source import ActionChunkSource
from vlajax.data.transforms import Compose, RandomDropCamera, Tokenize

from .helpers import fixture_action, write_dataset

SPEC = PrefixSpec(("agentview", "wrist"), 32, 16, 16, True, seq_multiple=8)
TF = Compose((RandomDropCamera("wrist", 0.5, seed=1), Tokenize(16)))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return LeRobotData(write_dataset(str(tmp_path_factory.mktemp("d") / "ds"), lengths=(6, 7, 8, 5, 9, 4)))


def test_action_chunks_and_mask_at_episode_end(data):
    src = ActionChunkSource(data, 4)
    assert len(src) == data.num_frames and (src.action_dim, src.state_dim) == (7, 8)
    r = src[4]  # episode 0 (6 frames), frame 4: frames 4, 5 then past the end
    np.testing.assert_allclose(r["actions"][:2], [fixture_action(0, 4), fixture_action(0, 5)], atol=1e-7)
    np.testing.assert_allclose(r["actions"][2:], [fixture_action(0, 5)] * 2, atol=1e-7)  # last repeated
    np.testing.assert_array_equal(r["action_mask"], [True, True, False, False])
    r = src[6]  # first frame of episode 1: a full window
    np.testing.assert_allclose(r["actions"], [fixture_action(1, t) for t in range(4)], atol=1e-7)
    assert r["action_mask"].all() and r["instruction"] == data.tasks[1] and r["task_index"] == 1
    assert r["images"]["wrist"].shape == (32, 32, 3) and r["images"]["wrist"].dtype == np.uint8
    assert r["state"].shape == (8,) and (r["episode_index"], r["frame_index"]) == (1, 0)
    with pytest.raises(DatasetError, match="cameras \\['top'\\] are not in the dataset"):
        ActionChunkSource(data, 4, cameras=("top",))
    with pytest.raises(DatasetError, match="no feature 'act'"):
        ActionChunkSource(data, 4, action_key="act")


def test_process_shards_are_disjoint_and_cover_the_data(data):
    seen = []
    for pi in range(2):
        src = ActionChunkSource(data, 2)
        ds = make_dataset(src, lambda s: {**TF(s), "task_index": s["index"]}, SPEC, "fixed", 4,
                          process_index=pi, process_count=2, num_epochs=1)
        ids = [int(i) for b in Loader(ds, None, prefetch=0) for i, m in zip(b["task_index"], b["sample_mask"])
               if m]
        assert len(ids) == len(set(ids))
        seen.append(set(ids))
    assert not seen[0] & seen[1]
    assert seen[0] | seen[1] == set(range(data.num_frames))
    assert all(i % 2 == 0 for i in seen[0])  # process 0 reads records [0::2]


def _mesh():
    from vlajax.training.sharding import make_mesh

    return make_mesh(MeshConfig(dp=4), jax.devices()[:4])


@pytest.mark.parametrize("mode", ["fixed", "packed"])
def test_loader_gives_global_arrays(data, mode):
    mesh = _mesh()
    src = ActionChunkSource(data, 4)
    ds = make_dataset(src, TF, SPEC, mode, 8, rows=4, row_len=96, process_index=0, process_count=1)
    b = next(Loader(ds, mesh))
    assert isinstance(b["actions"], jax.Array) and b["actions"].shape == (8, 4, 7)
    assert b["actions"].sharding.spec[0] == "dp"
    assert b["images"]["wrist"].dtype == np.uint8 and b["images"]["wrist"].shape == (8, 32, 32, 3)
    assert b["segment_ids"].shape == ((8, SPEC.length) if mode == "fixed" else (4, 96))


def test_resume_through_checkpointer_continues_at_the_next_batch(data, tmp_path):
    from vlajax.training.checkpoint import Checkpointer

    src = ActionChunkSource(data, 4)
    make = lambda: Loader(make_dataset(src, TF, SPEC, "packed", 6, rows=3, row_len=96, seed=3,
                                       process_index=0, process_count=1), prefetch=3)
    ref = make()
    expected = [next(ref) for _ in range(7)]
    ref.close()
    it = make()
    for _ in range(4):
        next(it)
    state = {"x": jax.numpy.zeros(2)}
    with Checkpointer(str(tmp_path / "ckpt"), async_save=False) as ck:
        ck.save(4, state, data_iter=it)
    it.close()
    fresh = make()
    with Checkpointer(str(tmp_path / "ckpt"), async_save=False) as ck:
        ck.restore(state, data_iter=fresh)
    for want in expected[4:]:
        got = next(fresh)
        for k in ("actions", "tokens", "prefix_index", "segment_ids", "positions", "sample_mask"):
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        np.testing.assert_array_equal(got["images"]["agentview"], want["images"]["agentview"])
    fresh.close()


def test_prefetch_reads_ahead_on_its_own_thread_while_the_consumer_steps(data):
    """With prefetch the loader's thread reads the next batch while the consumer is busy with the one it
    has (the overlap); without it, reading happens only inside the consumer's `next()`, on its own thread.
    Checked by which thread read each sample and how far ahead, not by wall time: the timed version of this
    test (serial > 0.7 s, overlapped < 0.75x serial) failed a clean-clone run on a loaded machine."""
    import threading
    import time

    src = ActionChunkSource(data, 2)
    batch = 4

    def run(prefetch):
        reads = []  # the thread of every sample transformed

        def counted(s):
            reads.append(threading.get_ident())
            return TF(s)

        ds = make_dataset(src, counted, SPEC, "fixed", batch, num_threads=0, process_index=0, process_count=1)
        it = Loader(ds, None, prefetch=prefetch)
        next(it)  # the consumer holds one batch and "steps" now, asking for nothing
        taken = len(reads)
        deadline = time.monotonic() + (30.0 if prefetch else 0.3)
        while len(reads) < 2 * batch and time.monotonic() < deadline:
            time.sleep(0.01)
        read_during_step = len(reads) - taken
        it.close()
        return set(reads), taken, read_during_step, len(reads)

    me = threading.get_ident()
    threads, taken, during, total = run(0)
    assert threads == {me} and taken == batch and during == 0, (threads, taken, during)
    threads, taken, during, total = run(2)
    assert me not in threads, "with prefetch the loader's thread reads, never the consumer's"
    assert total >= 2 * batch, f"the next batch was not read while the consumer stepped ({total} samples read)"
