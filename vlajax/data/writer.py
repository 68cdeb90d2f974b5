"""Writing LeRobot v3.0 datasets, atomically.

    with LeRobotWriter(root, fps=10, features={
            "observation.state": {"dtype": "float32", "shape": [8], "names": None},
            "action": {"dtype": "float32", "shape": [7], "names": None},
            "observation.images.agentview": {"dtype": "image", "shape": [32, 32, 3],
                                             "names": ["height", "width", "channel"]}}) as w:
        w.add_episode({"observation.state": s [T, 8], "action": a [T, 7],
                       "observation.images.agentview": uint8 [T, 32, 32, 3]}, task="put the cube in the bowl")
    # leaving the block calls finalize(); an exception inside it removes the partial output

A camera declared with `video_feature(h, w)` instead is encoded into
`videos/<key>/chunk-XXX/file-YYY.mp4` (AV1, many episodes per file; see `vlajax.data.video`).

The layout, column types, parquet schema metadata and statistics follow what lerobot 0.6
writes with `use_videos=False` (compare `shared/fixtures/lerobot-v3.0-images`): camera frames
are PNG image features inside the data parquet (one row group per episode), episode metadata
carries per-episode statistics, `meta/stats.json` the aggregate. Everything goes into a
sibling directory `<root>.partial-<id>`; `finalize()` writes `meta/info.json` last and renames
the directory to `root`, so a killed writer never leaves a complete-looking dataset at `root`.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from vlajax.data.lerobot import CODEBASE_VERSION, DEFAULT_FEATURES, DatasetError
from vlajax.data.stats import STAT_NAMES, aggregate, episode_stats
from vlajax.data.video import VideoEncoder

__all__ = ["LeRobotWriter", "image_feature", "video_feature", "policy_features"]

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
_IMAGE_NAMES = ["height", "width", "channel"]
# The pandas index metadata lerobot's tasks.parquet carries (it reads the file with pandas and
# expects `task` as the index). Written by hand: pandas is not a dependency.
_TASKS_PANDAS_META = {
    "index_columns": ["task"],
    "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                        "metadata": {"encoding": "UTF-8"}}],
    "columns": [
        {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
         "metadata": None},
        {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
    ],
    "attributes": {},
    "creator": {"library": "pyarrow", "version": pa.__version__},
    "pandas_version": "2.3.3",
}


def image_feature(height: int, width: int) -> dict[str, Any]:
    """The info.json entry of an RGB camera stored as PNG image feature."""
    return {"dtype": "image", "shape": [height, width, 3], "names": list(_IMAGE_NAMES)}


def video_feature(height: int, width: int) -> dict[str, Any]:
    """The info.json entry of an RGB camera stored as video (the writer fills in `info`)."""
    return {"dtype": "video", "shape": [height, width, 3], "names": ["height", "width", "channels"]}


def policy_features(cameras: Sequence[str], image_size: int, state_dim: int, action_dim: int,
                    video: bool = False) -> dict[str, dict[str, Any]]:
    """The usual features of a demonstration dataset: `observation.images.<camera>` (PNG or video),
    `observation.state` float32 [state_dim], `action` float32 [action_dim]."""
    camera = video_feature if video else image_feature
    return {
        **{f"observation.images.{c}": camera(image_size, image_size) for c in cameras},
        "observation.state": {"dtype": "float32", "shape": [state_dim], "names": None},
        "action": {"dtype": "float32", "shape": [action_dim], "names": None},
    }


def _value_type(dtype: str) -> pa.DataType:
    return {"float32": pa.float32(), "float64": pa.float64(), "int64": pa.int64(), "int32": pa.int32(),
            "bool": pa.bool_()}[dtype]


def _hf_feature(feat: dict) -> dict:
    """The `datasets` feature description lerobot stores in the parquet schema metadata."""
    if feat["dtype"] == "image":
        return {"_type": "Image"}
    if list(feat["shape"]) == [1]:
        return {"dtype": feat["dtype"], "_type": "Value"}
    return {"feature": {"dtype": feat["dtype"], "_type": "Value"}, "length": int(feat["shape"][0]), "_type": "List"}


class LeRobotWriter:
    """Streams episodes into a LeRobot v3.0 dataset at `root` (see the module docstring)."""

    def __init__(
        self,
        root: str,
        *,
        fps: int,
        features: dict[str, dict],
        robot_type: str | None = None,
        overwrite: bool = False,
        video_codec: str = "av1",
        chunks_size: int = 1000,
        data_files_size_in_mb: int = 100,
        video_files_size_in_mb: int = 200,
    ):
        self.root = os.path.abspath(os.path.expanduser(root))
        if os.path.exists(self.root) and not overwrite:
            raise DatasetError(f"{self.root}: already exists (pass overwrite=True to replace it)")
        for name, feat in features.items():
            if name in DEFAULT_FEATURES:
                raise ValueError(f"feature {name!r} is reserved (lerobot adds it to every frame)")
            if feat.get("dtype") in ("image", "video"):
                if len(feat["shape"]) != 3 or feat["shape"][2] != 3:
                    raise ValueError(f"image feature {name!r} needs shape [h, w, 3], got {feat['shape']}")
            elif len(feat.get("shape", ())) != 1:
                raise ValueError(f"feature {name!r}: only vectors [d] and images are supported, got {feat}")
            elif feat["dtype"] not in ("float32", "float64", "int64", "int32", "bool"):
                raise ValueError(f"feature {name!r}: unsupported dtype {feat['dtype']!r}")
        self.fps = int(fps)
        self.features: dict[str, dict] = {
            **{k: {"dtype": f["dtype"], "shape": list(f["shape"]), "names": f.get("names")} for k, f in
               features.items()},
            **{k: {"dtype": d, "shape": [1], "names": None} for k, d in DEFAULT_FEATURES.items()},
        }
        self.robot_type = robot_type
        self.overwrite = overwrite
        self.chunks_size = chunks_size
        self.data_files_size_in_mb = data_files_size_in_mb
        self.video_files_size_in_mb = video_files_size_in_mb
        self.tmp = f"{self.root}.partial-{uuid.uuid4().hex[:8]}"
        os.makedirs(self.tmp)
        self._schema = self._data_schema()
        self._tasks: dict[str, int] = {}
        self._episodes: list[dict[str, Any]] = []
        self._stats: list[dict[str, dict[str, np.ndarray]]] = []
        self._frames = 0
        self._chunk = self._file = 0
        self._writer: pq.ParquetWriter | None = None
        self._file_bytes = 0
        self._done = False
        self.video_codec = video_codec
        self._videos: dict[str, Any] = {k: None for k, f in self.features.items() if f["dtype"] == "video"}
        self._video_files: dict[str, tuple[int, int]] = {k: (0, 0) for k in self._videos}

    # -- schema -----------------------------------------------------------------------------

    def _data_schema(self) -> pa.Schema:
        fields = []
        for name, feat in self.features.items():
            if feat["dtype"] == "video":
                continue  # frames live in the mp4 files
            if feat["dtype"] == "image":
                t = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
            elif feat["shape"] == [1] and name in DEFAULT_FEATURES:
                t = _value_type(feat["dtype"])
            else:
                t = pa.list_(_value_type(feat["dtype"]), int(feat["shape"][0]))
            fields.append(pa.field(name, t))
        hf = {"info": {"features": {k: _hf_feature(f) for k, f in self.features.items() if f["dtype"] != "video"}}}
        return pa.schema(fields, metadata={"huggingface": json.dumps(hf)})

    # -- episodes ---------------------------------------------------------------------------

    def add_episode(self, frames: dict[str, np.ndarray], task: str | Sequence[str]) -> int:
        """Append one episode: `frames[name]` is [T, *shape] for every feature. Returns its index."""
        if self._done:
            raise RuntimeError("add_episode after finalize")
        user = [k for k in self.features if k not in DEFAULT_FEATURES]
        if set(frames) != set(user):
            raise ValueError(f"episode features {sorted(frames)} != dataset features {sorted(user)}")
        lengths = {k: len(v) for k, v in frames.items()}
        t = next(iter(lengths.values()))
        if t == 0 or any(n != t for n in lengths.values()):
            raise ValueError(f"every feature needs the same, non-zero number of frames, got {lengths}")
        tasks = [task] * t if isinstance(task, str) else list(task)
        if len(tasks) != t:
            raise ValueError(f"{len(tasks)} tasks for {t} frames")
        ep = len(self._episodes)
        cols: dict[str, Any] = {}
        values: dict[str, np.ndarray] = {}
        for name in user:
            feat = self.features[name]
            v = np.asarray(frames[name])
            want = (t, *feat["shape"])
            if v.shape != want:
                raise ValueError(f"feature {name!r}: got shape {v.shape}, expected {want}")
            if feat["dtype"] in ("image", "video") and v.dtype != np.uint8:
                raise ValueError(f"camera feature {name!r} must be uint8, got {v.dtype}")
            if feat["dtype"] == "video":
                pass  # encoded below, once the whole episode has been checked
            elif feat["dtype"] == "image":
                cols[name] = [{"bytes": _png(img), "path": f"frame-{i:06d}.png"} for i, img in enumerate(v)]
            else:
                v = v.astype(feat["dtype"])
                if v.dtype.kind == "f" and not np.all(np.isfinite(v)):
                    raise ValueError(f"feature {name!r} of episode {ep} has non-finite values")
                cols[name] = pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), int(feat["shape"][0]))
            values[name] = v
        task_ids = np.array([self._tasks.setdefault(s, len(self._tasks)) for s in tasks], np.int64)
        defaults = {
            "timestamp": (np.arange(t) / self.fps).astype(np.float32),
            "frame_index": np.arange(t, dtype=np.int64),
            "episode_index": np.full(t, ep, np.int64),
            "index": np.arange(self._frames, self._frames + t, dtype=np.int64),
            "task_index": task_ids,
        }
        cols.update({k: pa.array(v) for k, v in defaults.items()})
        values.update(defaults)
        table = pa.Table.from_pydict({k: cols[k] for k in self.features if k in cols}, schema=self._schema)
        video_meta = {}
        for name in self._videos:
            chunk, file, start = self._encode(name, values[name])
            video_meta.update({f"videos/{name}/chunk_index": chunk, f"videos/{name}/file_index": file,
                               f"videos/{name}/from_timestamp": start,
                               f"videos/{name}/to_timestamp": start + t / self.fps})
        self._write_rows(table)
        self._stats.append({k: episode_stats(values[k], self.features[k]["dtype"] in ("image", "video"))
                            for k in self.features})
        self._episodes.append({
            "episode_index": ep, "tasks": list(dict.fromkeys(tasks)), "length": t,
            "data/chunk_index": self._chunk, "data/file_index": self._file,
            "dataset_from_index": self._frames, "dataset_to_index": self._frames + t, **video_meta,
        })
        self._frames += t
        return ep

    def add_episodes(self, frames: dict[str, np.ndarray], lengths: Sequence[int], tasks: Sequence[str]) -> list[int]:
        """Append a batch of episodes: `frames[name]` is [B, T, *shape] (e.g. a vmapped rollout,
        transposed to batch-major), episode b keeps its first `lengths[b]` frames and has task
        `tasks[b]`. Returns the new episode indices."""
        b = len(lengths)
        if len(tasks) != b or any(np.shape(v)[0] != b for v in frames.values()):
            dims = [np.shape(v)[0] for v in frames.values()]
            raise ValueError(f"{b} lengths, {len(tasks)} tasks and leading dims {dims} must agree")
        return [self.add_episode({k: np.asarray(v[i, : int(lengths[i])]) for k, v in frames.items()}, tasks[i])
                for i in range(b)]

    def _encode(self, name: str, frames: np.ndarray) -> tuple[int, int, float]:
        """Append an episode's frames to camera `name`'s current mp4 -> (chunk, file, from_timestamp)."""
        enc = self._videos[name]
        chunk, file = self._video_files[name]
        if enc is not None and enc.size() >= self.video_files_size_in_mb * 1024 * 1024:
            enc.close()
            enc = None
            file += 1
            if file >= self.chunks_size:
                chunk, file = chunk + 1, 0
        if enc is None:
            path = os.path.join(self.tmp, VIDEO_PATH.format(video_key=name, chunk_index=chunk, file_index=file))
            h, w = frames.shape[1:3]
            enc = VideoEncoder(path, self.fps, h, w, codec=self.video_codec)
        self._videos[name], self._video_files[name] = enc, (chunk, file)
        return chunk, file, enc.append(frames)

    def _close_videos(self) -> None:
        for name, enc in self._videos.items():
            if enc is not None:
                enc.close()
                self._videos[name] = None

    def _write_rows(self, table: pa.Table) -> None:
        if self._writer is not None and self._file_bytes >= self.data_files_size_in_mb * 1024 * 1024:
            self._writer.close()
            self._writer = None
            self._file += 1
            if self._file >= self.chunks_size:
                self._chunk, self._file = self._chunk + 1, 0
        if self._writer is None:
            path = os.path.join(self.tmp, DATA_PATH.format(chunk_index=self._chunk, file_index=self._file))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self._writer = pq.ParquetWriter(path, self._schema, compression="snappy")
            self._file_bytes = 0
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))
        self._file_bytes += table.nbytes

    # -- finish -----------------------------------------------------------------------------

    def finalize(self) -> str:
        """Write the metadata (info.json last) and move the dataset into place. Returns `root`."""
        if self._done:
            return self.root
        if not self._episodes:
            raise DatasetError(f"{self.root}: no episodes were added")
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._close_videos()
        self._write_tasks()
        self._write_episodes()
        stats = aggregate(self._stats)
        _write_json(os.path.join(self.tmp, "meta/stats.json"),
                    {k: {s: np.asarray(v).tolist() for s, v in st.items()} for k, st in stats.items()})
        _write_json(os.path.join(self.tmp, "meta/info.json"), self.info())
        old = None
        if os.path.exists(self.root):
            old = f"{self.root}.old-{uuid.uuid4().hex[:8]}"
            os.rename(self.root, old)
        os.rename(self.tmp, self.root)
        if old:
            shutil.rmtree(old, ignore_errors=True)
        self._done = True
        return self.root

    def info(self) -> dict[str, Any]:
        """meta/info.json, with lerobot's key order."""
        n = len(self._episodes)
        features = {k: dict(f) for k, f in self.features.items()}
        for k in self._videos:
            h, w, c = features[k]["shape"]
            features[k]["info"] = {
                "video.height": h, "video.width": w, "video.codec": self.video_codec, "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False, "video.fps": self.fps, "video.channels": c, "has_audio": False,
            }
        return {
            "codebase_version": CODEBASE_VERSION,
            "fps": self.fps,
            "features": features,
            "total_episodes": n,
            "total_frames": self._frames,
            "total_tasks": len(self._tasks),
            "chunks_size": self.chunks_size,
            "data_files_size_in_mb": self.data_files_size_in_mb,
            "video_files_size_in_mb": self.video_files_size_in_mb,
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if self._videos else None,
            "robot_type": self.robot_type,
            "splits": {"train": f"0:{n}"},
        }

    def _write_tasks(self) -> None:
        names = sorted(self._tasks, key=self._tasks.get)
        schema = pa.schema([("task_index", pa.int64()), ("task", pa.string())],
                           metadata={"pandas": json.dumps(_TASKS_PANDAS_META)})
        table = pa.Table.from_pydict({"task_index": [self._tasks[s] for s in names], "task": names}, schema=schema)
        os.makedirs(os.path.join(self.tmp, "meta"), exist_ok=True)
        pq.write_table(table, os.path.join(self.tmp, "meta/tasks.parquet"))

    def _write_episodes(self) -> None:
        rows = [dict(e) for e in self._episodes]
        columns: dict[str, pa.Array] = {
            "episode_index": pa.array([r["episode_index"] for r in rows], pa.int64()),
            "tasks": pa.array([r["tasks"] for r in rows], pa.list_(pa.string())),
        }
        for k in ("length", "data/chunk_index", "data/file_index", "dataset_from_index", "dataset_to_index"):
            columns[k] = pa.array([r[k] for r in rows], pa.int64())
        for name in self._videos:
            for k, t in (("chunk_index", pa.int64()), ("file_index", pa.int64()), ("from_timestamp", pa.float64()),
                         ("to_timestamp", pa.float64())):
                columns[f"videos/{name}/{k}"] = pa.array([r[f"videos/{name}/{k}"] for r in rows], t)
        for name in self.features:
            for s in STAT_NAMES:
                vals = [np.asarray(st[name][s]) for st in self._stats]
                if s == "count":
                    columns[f"stats/{name}/{s}"] = pa.array([v.astype(np.int64).tolist() for v in vals],
                                                            pa.list_(pa.int64()))
                else:
                    t = pa.float64()
                    for _ in range(vals[0].ndim):
                        t = pa.list_(t)
                    columns[f"stats/{name}/{s}"] = pa.array([v.astype(np.float64).tolist() for v in vals], t)
        columns["meta/episodes/chunk_index"] = pa.array([0] * len(rows), pa.int64())
        columns["meta/episodes/file_index"] = pa.array([0] * len(rows), pa.int64())
        path = os.path.join(self.tmp, EPISODES_PATH.format(chunk_index=0, file_index=0))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(pa.table(columns), path)

    def abort(self) -> None:
        """Drop everything written so far (the partial directory)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        try:
            self._close_videos()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
        self._done = True

    def __enter__(self) -> LeRobotWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
            return
        try:
            self.finalize()
        except BaseException:
            self.abort()
            raise


def _png(img: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(img), mode="RGB").save(buf, format="PNG")
    return buf.getvalue()


def _write_json(path: str, obj: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=4)
        f.flush()
        os.fsync(f.fileno())
