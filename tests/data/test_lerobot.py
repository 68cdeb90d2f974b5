"""LeRobot v3.0 reader and writer: the lerobot-written fixture, layout parity, atomicity, bad data."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow.parquet as pq
import pytest

from vlajax.data.lerobot import DatasetError, LeRobotData

from .helpers import AGENT, FIXTURE, LENGTHS, TASKS, WRIST, episode, fixture_action, load_json, save_json, write_dataset


def test_reads_the_lerobot_fixture_exactly():
    d = LeRobotData(FIXTURE)
    assert (d.version, d.fps, d.num_episodes, d.num_frames) == ("v3.0", 10.0, 3, 21)
    assert d.tasks == list(TASKS)
    np.testing.assert_array_equal(d.episode_from, [0, 6, 13])
    np.testing.assert_array_equal(d.episode_to, [6, 13, 21])
    i = 0
    for e, n in enumerate(LENGTHS):
        for t in range(n):
            np.testing.assert_allclose(d.columns["action"][i], fixture_action(e, t), rtol=0, atol=1e-7)
            assert d.columns["frame_index"][i] == t and d.episode_of[i] == e
            assert d.task(i) == TASKS[e % 2]
            wrist = d.image(WRIST, i)
            assert wrist.shape == (32, 32, 3) and wrist.dtype == np.uint8
            assert np.all(wrist == 10 * t)
            i += 1
    assert d.columns["observation.state"].shape == (21, 8)
    assert d.image(AGENT, 5).std() > 50  # random pixels
    assert set(d.stats["action"]) >= {"mean", "std", "min", "max", "q01", "q99"}


def _schema_summary(path):
    s = pq.read_schema(path)
    meta = {k.decode(): v.decode() for k, v in (s.metadata or {}).items()}
    return [(f.name, str(f.type)) for f in s], meta


def test_writer_layout_matches_the_fixture_field_by_field(tmp_path):
    ours = write_dataset(str(tmp_path / "ds"))
    files = lambda root: sorted(os.path.relpath(os.path.join(d, f), root)
                                for d, _, fs in os.walk(root) for f in fs)
    assert files(ours) == files(FIXTURE)
    ref_info = load_json(f"{FIXTURE}/meta/info.json")
    our_info = load_json(f"{ours}/meta/info.json")
    assert list(our_info) == list(ref_info)  # same keys, same order
    for key in ref_info:
        assert our_info[key] == ref_info[key], key
    # data parquet: column names, arrow types and the `datasets` feature metadata
    ref_cols, ref_meta = _schema_summary(f"{FIXTURE}/data/chunk-000/file-000.parquet")
    our_cols, our_meta = _schema_summary(f"{ours}/data/chunk-000/file-000.parquet")
    assert our_cols == ref_cols
    assert json.loads(our_meta["huggingface"])["info"] == json.loads(ref_meta["huggingface"])["info"]
    assert pq.ParquetFile(f"{ours}/data/chunk-000/file-000.parquet").num_row_groups == 3  # one per episode
    # episode metadata: every column with the same type, and the same non-stat values
    ep = "meta/episodes/chunk-000/file-000.parquet"
    assert _schema_summary(f"{ours}/{ep}")[0] == _schema_summary(f"{FIXTURE}/{ep}")[0]
    ref_eps, our_eps = pq.read_table(f"{FIXTURE}/{ep}"), pq.read_table(f"{ours}/{ep}")
    for col in ref_eps.column_names:
        if not col.startswith("stats/"):
            assert our_eps.column(col).to_pylist() == ref_eps.column(col).to_pylist(), col
    for feat in ("action", "timestamp", "frame_index", "index", "episode_index", "task_index"):
        for s in ("min", "max", "mean", "std", "count"):  # rtol: lerobot computes std in float32
            np.testing.assert_allclose(our_eps.column(f"stats/{feat}/{s}").to_pylist(),
                                       ref_eps.column(f"stats/{feat}/{s}").to_pylist(), rtol=2e-3, atol=1e-6)
    np.testing.assert_allclose(our_eps.column(f"stats/{WRIST}/mean").to_pylist(),
                               ref_eps.column(f"stats/{WRIST}/mean").to_pylist(), atol=1e-6)
    # tasks: same schema, same pandas index metadata, same rows
    t_ref, t_our = pq.read_table(f"{FIXTURE}/meta/tasks.parquet"), pq.read_table(f"{ours}/meta/tasks.parquet")
    assert t_our.schema.equals(t_ref.schema, check_metadata=False)
    pandas = lambda t: json.loads(t.schema.metadata[b"pandas"])
    assert pandas(t_our)["index_columns"] == pandas(t_ref)["index_columns"] == ["task"]
    assert pandas(t_our)["columns"] == pandas(t_ref)["columns"]
    assert t_our.to_pylist() == t_ref.to_pylist()
    # stats.json: same features, same statistics, same shapes; exact ones agree in value
    s_ref, s_our = load_json(f"{FIXTURE}/meta/stats.json"), load_json(f"{ours}/meta/stats.json")
    assert set(s_our) == set(s_ref)
    for feat in s_ref:
        assert list(s_our[feat]) == list(s_ref[feat]), feat
        for s in s_ref[feat]:
            assert np.shape(s_our[feat][s]) == np.shape(s_ref[feat][s]), (feat, s)
    for s in ("min", "max", "mean", "std", "count"):
        np.testing.assert_allclose(s_our["action"][s], s_ref["action"][s], atol=1e-6)


def test_round_trip_is_exact(tmp_path):
    d = LeRobotData(write_dataset(str(tmp_path / "ds")))
    i = 0
    for e, n in enumerate(LENGTHS):
        ep = episode(e, n)
        for t in range(n):
            np.testing.assert_array_equal(d.columns["action"][i], ep["action"][t])
            np.testing.assert_array_equal(d.columns["observation.state"][i], ep["observation.state"][t])
            np.testing.assert_array_equal(d.image(AGENT, i), ep[AGENT][t])
            np.testing.assert_array_equal(d.image(WRIST, i), ep[WRIST][t])
            i += 1
    assert d.tasks == list(TASKS)


def test_writer_refuses_existing_and_aborts_on_error(tmp_path):
    root = write_dataset(str(tmp_path / "ds"))
    with pytest.raises(DatasetError, match="already exists"):
        write_dataset(root)
    target = str(tmp_path / "other")
    from vlajax.data.writer import LeRobotWriter

    from .helpers import features

    with pytest.raises(ValueError, match="expected"), LeRobotWriter(target, fps=10, features=features()) as w:
        w.add_episode(episode(0, 4), task="x")
        bad = episode(1, 4)
        bad["action"] = bad["action"][:, :6]
        w.add_episode(bad, task="x")
    assert os.listdir(tmp_path) == ["ds"]  # no dataset, no partial directory


def test_sigkill_mid_write_leaves_nothing_that_looks_complete(tmp_path):
    root = str(tmp_path / "ds")
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from helpers import episode, features
        from vlajax.data.writer import LeRobotWriter
        with LeRobotWriter({root!r}, fps=10, features=features()) as w:
            for e in range(1000):
                w.add_episode(episode(e, 5), task="t")
                print("episode", e, flush=True)
                time.sleep(0.01)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "episode 3":
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not os.path.exists(root)
    partial = [p for p in os.listdir(tmp_path) if p.startswith("ds.partial-")]
    assert len(partial) == 1 and not os.path.exists(tmp_path / partial[0] / "meta/info.json")
    with pytest.raises(DatasetError, match="no such dataset"):
        LeRobotData(root)


# -- bad data: one clear error naming the file ---------------------------------------------


@pytest.fixture
def dataset(tmp_path):
    return write_dataset(str(tmp_path / "ds"))


def test_missing_data_file_is_named(dataset):
    path = f"{dataset}/data/chunk-000/file-000.parquet"
    os.remove(path)
    with pytest.raises(DatasetError, match=f"{path}: missing file"):
        LeRobotData(dataset)


def test_missing_info_is_named(dataset):
    os.remove(f"{dataset}/meta/info.json")
    with pytest.raises(DatasetError, match="meta/info.json: missing file"):
        LeRobotData(dataset)


def test_corrupted_parquet_is_named(dataset):
    path = f"{dataset}/data/chunk-000/file-000.parquet"
    data = pathlib.Path(path).read_bytes()
    pathlib.Path(path).write_bytes(data[: len(data) // 2])  # truncated: footer gone
    with pytest.raises(DatasetError, match=f"{path}: corrupted or unreadable parquet"):
        LeRobotData(dataset)


def test_mismatched_feature_shape_is_named(dataset):
    info_path = f"{dataset}/meta/info.json"
    info = load_json(info_path)
    info["features"]["action"]["shape"] = [6]
    save_json(info_path, info)
    with pytest.raises(DatasetError, match=r"file-000.parquet: column 'action' has rows of length 7.*\[6\]"):
        LeRobotData(dataset)


def test_wrong_image_shape_is_named(dataset):
    info_path = f"{dataset}/meta/info.json"
    info = load_json(info_path)
    info["features"][WRIST]["shape"] = [64, 64, 3]
    save_json(info_path, info)
    with pytest.raises(DatasetError, match=r"file-000.parquet: .*wrist' frame 0 has shape \(32, 32, 3\)"):
        LeRobotData(dataset)  # at open, not at the first training step


# -- v2.1 ---------------------------------------------------------------------------------


def to_v21(src: str, dst: str) -> None:
    """Rewrite a v3.0 dataset in the v2.1 layout (one parquet per episode, JSON-lines metadata)."""
    d = LeRobotData(src)
    os.makedirs(f"{dst}/meta")
    info = dict(d.info, codebase_version="v2.1",
                data_path="data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet")
    save_json(f"{dst}/meta/info.json", info)
    shutil.copy(f"{src}/meta/stats.json", f"{dst}/meta/stats.json")
    with open(f"{dst}/meta/tasks.jsonl", "w") as f:
        for i, t in enumerate(d.tasks):
            f.write(json.dumps({"task_index": i, "task": t}) + "\n")
    table = pq.read_table(f"{src}/data/chunk-000/file-000.parquet")
    os.makedirs(f"{dst}/data/chunk-000")
    with open(f"{dst}/meta/episodes.jsonl", "w") as f:
        for e in range(d.num_episodes):
            a, b = int(d.episode_from[e]), int(d.episode_to[e])
            pq.write_table(table.slice(a, b - a), f"{dst}/data/chunk-000/episode_{e:06d}.parquet")
            f.write(json.dumps({"episode_index": e, "tasks": [d.task(a)], "length": b - a}) + "\n")


def test_reads_v21_video(tmp_path):
    """v2.1 keeps one mp4 per episode and camera; frames start at 0 s in each."""
    from vlajax.data.video import VideoEncoder

    src = LeRobotData(write_dataset(str(tmp_path / "v3"), video=True))
    dst = str(tmp_path / "v21")
    to_v21(src.root, dst)
    info = load_json(f"{dst}/meta/info.json")
    info["video_path"] = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
    save_json(f"{dst}/meta/info.json", info)
    for e, n in enumerate(LENGTHS):
        for cam in (AGENT, WRIST):
            enc = VideoEncoder(f"{dst}/videos/chunk-000/{cam}/episode_{e:06d}.mp4", 10, 32, 32)
            enc.append(episode(e, n)[cam])
            enc.close()
    d = LeRobotData(dst)
    assert d.version == "v2.1" and d.features[WRIST]["dtype"] == "video"
    i = 0
    for n in LENGTHS:
        for t in range(n):
            assert np.abs(d.image(WRIST, i).astype(int) - 10 * t).max() <= 2
            i += 1


def test_reads_v21_like_v30(tmp_path):
    to_v21(FIXTURE, str(tmp_path / "v21"))
    a, b = LeRobotData(FIXTURE), LeRobotData(str(tmp_path / "v21"))
    assert b.version == "v2.1" and b.tasks == a.tasks
    for k in a.columns:
        np.testing.assert_array_equal(a.columns[k], b.columns[k])
    np.testing.assert_array_equal(a.image(WRIST, 20), b.image(WRIST, 20))
    np.testing.assert_array_equal(a.episode_to, b.episode_to)


# -- video features ----------------------------------------------------------------------------


def test_video_features_round_trip(tmp_path):
    root = write_dataset(str(tmp_path / "ds"), video=True)
    info = load_json(f"{root}/meta/info.json")
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    assert info["features"][WRIST]["dtype"] == "video"
    assert info["features"][WRIST]["info"]["video.codec"] == "av1"
    for cam in (AGENT, WRIST):
        assert os.path.isfile(f"{root}/videos/{cam}/chunk-000/file-000.mp4")
    assert WRIST not in pq.read_schema(f"{root}/data/chunk-000/file-000.parquet").names
    eps = pq.read_table(f"{root}/meta/episodes/chunk-000/file-000.parquet")
    np.testing.assert_allclose(eps.column(f"videos/{WRIST}/from_timestamp").to_pylist(), [0.0, 0.6, 1.3])
    np.testing.assert_allclose(eps.column(f"videos/{WRIST}/to_timestamp").to_pylist(), [0.6, 1.3, 2.1])
    d = LeRobotData(root)
    i = 0
    for e, n in enumerate(LENGTHS):
        ep = episode(e, n)
        for t in range(n):
            wrist = d.image(WRIST, i).astype(int)
            assert wrist.shape == (32, 32, 3) and np.abs(wrist - 10 * t).max() <= 2  # lossy, but the right frame
            agent = d.image(AGENT, i).astype(int)  # random pixels: the nearest original is frame t
            dist = [np.abs(agent - ep[AGENT][k]).mean() for k in range(n)]
            assert int(np.argmin(dist)) == t
            i += 1


def test_missing_video_file_is_named(tmp_path):
    root = write_dataset(str(tmp_path / "ds"), video=True)
    path = f"{root}/videos/{WRIST}/chunk-000/file-000.mp4"
    os.remove(path)
    with pytest.raises(DatasetError, match=f"{path}: missing file"):
        LeRobotData(root)


def test_add_episodes_from_a_batched_rollout(tmp_path):
    from vlajax.data.writer import LeRobotWriter, policy_features

    rng = np.random.default_rng(0)
    b, t = 3, 9
    frames = {"observation.images.agentview": rng.integers(0, 256, (b, t, 16, 16, 3), dtype=np.uint8),
              "observation.state": rng.standard_normal((b, t, 5)).astype(np.float32),
              "action": rng.standard_normal((b, t, 4)).astype(np.float32)}
    with LeRobotWriter(str(tmp_path / "ds"), fps=20, features=policy_features(["agentview"], 16, 5, 4)) as w:
        assert w.add_episodes(frames, lengths=[9, 4, 6], tasks=["a", "b", "a"]) == [0, 1, 2]
    d = LeRobotData(str(tmp_path / "ds"))
    np.testing.assert_array_equal(d.episode_to - d.episode_from, [9, 4, 6])
    np.testing.assert_array_equal(d.columns["action"][9:13], frames["action"][1, :4])
    cam = "observation.images.agentview"
    np.testing.assert_array_equal(d.image(cam, 13), frames[cam][2, 0])
    assert d.tasks == ["a", "b"] and d.task(9) == "b"


def test_corrupted_image_bytes_fail_at_open(dataset):
    import pyarrow as pa

    path = f"{dataset}/data/chunk-000/file-000.parquet"
    t = pq.read_table(path)
    col = t.column(WRIST).to_pylist()
    col[0] = {"bytes": b"not a png", "path": "frame-000000.png"}
    t = t.set_column(t.column_names.index(WRIST), WRIST, pa.array(col, t.schema.field(WRIST).type))
    pq.write_table(t, path)
    with pytest.raises(DatasetError, match=f"{path} .*wrist, frame 0.*undecodable image"):
        LeRobotData(dataset)


@pytest.mark.parametrize("video", [False, True], ids=["png", "video"])
def test_many_files_and_chunks(tmp_path, video):
    """A file per episode (size limit 0) and 2 files per chunk: the reader follows the episode metadata."""
    root = write_dataset(str(tmp_path / "ds"), lengths=(4, 5, 6, 7, 3), video=video, data_files_size_in_mb=0,
                         video_files_size_in_mb=0, chunks_size=2)
    data = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(f"{root}/data") for f in fs)
    assert data == ["data/chunk-000/file-000.parquet", "data/chunk-000/file-001.parquet",
                    "data/chunk-001/file-000.parquet", "data/chunk-001/file-001.parquet",
                    "data/chunk-002/file-000.parquet"]
    if video:
        assert os.path.isfile(f"{root}/videos/{WRIST}/chunk-002/file-000.mp4")
    d = LeRobotData(root)
    i = 0
    for e, n in enumerate((4, 5, 6, 7, 3)):
        for t in range(n):
            np.testing.assert_array_equal(d.columns["action"][i], fixture_action(e, t))
            assert np.abs(d.image(WRIST, i).astype(int) - 10 * t).max() <= (2 if video else 0)
            i += 1


def test_inspect_cli(tmp_path, capsys):
    from vlajax.data.__main__ import main

    assert main([FIXTURE, "--check-all"]) == 0
    out = capsys.readouterr().out
    assert "LeRobot v3.0, 10 fps, 3 episodes, 21 frames, 2 tasks" in out
    assert "decoded 42 camera frames" in out and TASKS[1] in out
    root = write_dataset(str(tmp_path / "ds"))
    path = f"{root}/data/chunk-000/file-000.parquet"
    os.remove(path)
    assert main([root]) == 1
    assert capsys.readouterr().err.strip() == f"error: {path}: missing file"
