"""Reading LeRobot datasets (format v3.0, and v2.1 detected through `codebase_version`).

Layout of a v3.0 dataset (what `lerobot` 0.4+ writes; `vlajax.data.writer` writes the same):

    meta/info.json                          codebase_version, fps, features, totals, path templates
    meta/stats.json                         per feature: min, max, mean, std, count, q01 .. q99
    meta/tasks.parquet                      task_index (int64), task (string; the pandas index)
    meta/episodes/chunk-XXX/file-YYY.parquet  one row per episode: episode_index, tasks, length,
                                            data/chunk_index, data/file_index,
                                            dataset_from_index, dataset_to_index, stats/<f>/<stat>
    data/chunk-XXX/file-YYY.parquet         frames of many episodes; feature columns plus
                                            timestamp, frame_index, episode_index, index, task_index

v2.1 keeps one parquet file per episode (`data/chunk-XXX/episode_XXXXXX.parquet`) and JSON-lines
metadata (`meta/episodes.jsonl`, `meta/tasks.jsonl`, `meta/episodes_stats.jsonl`).

`LeRobotData(root)` validates everything on open and raises one `DatasetError` naming the file
at fault. Numeric columns are held in memory as numpy (`[N, d]`, N = total frames); image
features stay as PNG bytes and are decoded per access (`image(key, i) -> uint8 [h, w, 3]`).
Video features (`dtype: "video"`) are decoded with PyAV at `from_timestamp + timestamp`.
Nothing is unpickled.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from vlajax.data.stats import aggregate
from vlajax.data.video import read_frame

__all__ = [
    "CODEBASE_VERSION", "DEFAULT_FEATURES", "DatasetError", "LAYOUT_KEYS", "LeRobotData", "read_parquet",
    "image_features", "layout_keys",
]

CODEBASE_VERSION = "v3.0"
SUPPORTED_VERSIONS = ("v3.0", "v2.1", "v2.0")
# Columns every frame carries besides the user's features (name -> dtype), in lerobot's order.
DEFAULT_FEATURES: dict[str, str] = {
    "timestamp": "float32", "frame_index": "int64", "episode_index": "int64", "index": "int64",
    "task_index": "int64",
}
IMAGE_DTYPES = ("image", "video")
INFO_KEYS_V3 = ("codebase_version", "fps", "features", "total_episodes", "total_frames", "total_tasks",
                "data_path")


class DatasetError(ValueError):
    """A dataset that cannot be used. The message names the file at fault and what is wrong."""


def _fail(path: str, what: str) -> DatasetError:
    return DatasetError(f"{path}: {what}")


def read_json(path: str) -> Any:
    if not os.path.isfile(path):
        raise _fail(path, "missing file")
    try:
        with open(path) as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _fail(path, f"not valid JSON ({e})") from None


def read_jsonl(path: str) -> list[dict]:
    if not os.path.isfile(path):
        raise _fail(path, "missing file")
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _fail(path, f"not valid JSON lines ({e})") from None


def read_parquet(path: str, columns: Sequence[str] | None = None) -> pa.Table:
    """`pq.read_table` that turns a missing or corrupted file into one `DatasetError`."""
    if not os.path.isfile(path):
        raise _fail(path, "missing file")
    try:
        return pq.read_table(path, columns=None if columns is None else list(columns), memory_map=True)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise _fail(path, f"corrupted or unreadable parquet ({type(e).__name__}: {e})") from None


# (action, state) feature names of the layouts read: LeRobot's convention, and openpi's LIBERO data
# (examples/libero/convert_libero_data_to_lerobot.py: image, wrist_image, state, actions)
LAYOUT_KEYS = (("action", "observation.state"), ("actions", "state"))


def layout_keys(features: dict[str, dict]) -> tuple[str, str]:
    """(action key, state key) of a dataset's features: the first of `LAYOUT_KEYS` it has both of
    (LeRobot's names when it has neither pair, so the error names those)."""
    return next((pair for pair in LAYOUT_KEYS if all(k in features for k in pair)), LAYOUT_KEYS[0])


def image_features(features: dict[str, dict]) -> list[str]:
    """Names of camera features (dtype image or video), in the dataset's order."""
    return [k for k, f in features.items() if f.get("dtype") in IMAGE_DTYPES]


def decode_png(data: bytes, where: str) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            return np.asarray(im.convert("RGB"), dtype=np.uint8)
    except Exception as e:  # PIL raises many types for bad bytes
        raise _fail(where, f"undecodable image ({type(e).__name__}: {e})") from None


class LeRobotData:
    """An opened, validated LeRobot dataset (v3.0 or v2.1) with random access to frames.

    Attributes: `root`, `info` (meta/info.json), `version`, `fps`, `features`, `tasks` (list of
    instruction strings by task_index), `stats` (meta/stats.json, or aggregated per-episode
    stats for v2.1), `episode_from` / `episode_to` int64 [E] (frame ranges, end exclusive),
    `episode_of` int64 [N] (episode number of each frame), `columns` (numeric feature name ->
    numpy [N, d] or [N]), `num_frames`, `num_episodes`.
    """

    def __init__(self, root: str):
        self.root = os.path.abspath(os.path.expanduser(root))
        if not os.path.isdir(self.root):
            raise _fail(self.root, "no such dataset directory")
        info_path = self._p("meta/info.json")
        self.info = read_json(info_path)
        version = self.info.get("codebase_version") if isinstance(self.info, dict) else None
        if version not in SUPPORTED_VERSIONS:
            raise _fail(info_path, f"codebase_version {version!r} is not one of {SUPPORTED_VERSIONS}")
        self.version = version
        missing = [k for k in INFO_KEYS_V3 if k not in self.info]
        if missing:
            raise _fail(info_path, f"missing keys {missing}")
        self.fps = float(self.info["fps"])
        self.features: dict[str, dict] = self.info["features"]
        for name, feat in self.features.items():
            if "dtype" not in feat or "shape" not in feat:
                raise _fail(info_path, f"feature {name!r} needs 'dtype' and 'shape'")
        self.cameras = image_features(self.features)
        if version == "v3.0":
            self._open_v3()
        else:
            self._open_v21()
        self._check_frames()
        self._check_cameras()

    # -- paths ------------------------------------------------------------------------------

    def _p(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    # -- v3.0 -------------------------------------------------------------------------------

    def _open_v3(self) -> None:
        tasks = read_parquet(self._p("meta/tasks.parquet"))
        self.tasks = _tasks_from_table(tasks, self._p("meta/tasks.parquet"))
        ep_dir = self._p("meta/episodes")
        ep_files = sorted(_parquet_files(ep_dir))
        if not ep_files:
            raise _fail(os.path.join(ep_dir, "chunk-000/file-000.parquet"), "missing file (no episode metadata)")
        eps = pa.concat_tables([read_parquet(f) for f in ep_files], promote_options="permissive")
        need = ("episode_index", "length", "dataset_from_index", "dataset_to_index", "data/chunk_index",
                "data/file_index")
        for col in need:
            if col not in eps.column_names:
                raise _fail(ep_files[0], f"episode metadata lacks column {col!r}")
        order = np.argsort(eps.column("episode_index").to_numpy())
        eps = eps.take(pa.array(order))
        self.episodes = eps
        self.episode_from = eps.column("dataset_from_index").to_numpy().astype(np.int64)
        self.episode_to = eps.column("dataset_to_index").to_numpy().astype(np.int64)
        files: list[str] = []
        for c, f in dict.fromkeys(zip(eps.column("data/chunk_index").to_pylist(),
                                      eps.column("data/file_index").to_pylist(), strict=True)):
            files.append(self._p(self.info["data_path"].format(chunk_index=c, file_index=f)))
        self._load_data(files)
        self.stats = read_json(self._p("meta/stats.json")) if os.path.exists(self._p("meta/stats.json")) else None
        for key in self.cameras:
            if self.features[key]["dtype"] == "video":
                cols = [f"videos/{key}/{c}" for c in ("chunk_index", "file_index", "from_timestamp")]
                missing = [c for c in cols if c not in eps.column_names]
                if missing:
                    raise _fail(ep_files[0], f"episode metadata lacks video columns {missing}")
                if not self.info.get("video_path"):
                    raise _fail(self._p("meta/info.json"), f"video feature {key!r} but no 'video_path'")

    # -- v2.1 -------------------------------------------------------------------------------

    def _open_v21(self) -> None:
        path = self._p("meta/tasks.jsonl")
        rows = read_jsonl(path)
        self.tasks = [""] * len(rows)
        try:
            for r in rows:
                self.tasks[int(r["task_index"])] = r["task"]
        except (KeyError, IndexError, ValueError, TypeError) as e:
            raise _fail(path, f"malformed task rows ({type(e).__name__}: {e})") from None
        path = self._p("meta/episodes.jsonl")
        try:
            eps = sorted(read_jsonl(path), key=lambda r: r["episode_index"])
            lengths = np.array([int(r["length"]) for r in eps], np.int64)
        except (KeyError, ValueError, TypeError) as e:
            raise _fail(path, f"malformed episode rows ({type(e).__name__}: {e})") from None
        self.episode_to = np.cumsum(lengths)
        self.episode_from = self.episode_to - lengths
        chunks = int(self.info.get("chunks_size", 1000))
        files = [self._p(self.info["data_path"].format(episode_chunk=r["episode_index"] // chunks,
                                                       episode_index=r["episode_index"])) for r in eps]
        self._v21_episodes = eps
        self._load_data(files)
        if os.path.exists(self._p("meta/stats.json")):
            self.stats = read_json(self._p("meta/stats.json"))
        elif os.path.exists(self._p("meta/episodes_stats.jsonl")):
            per_ep = read_jsonl(self._p("meta/episodes_stats.jsonl"))
            self.stats = aggregate([{k: {s: np.asarray(v) for s, v in st.items()} for k, st in r["stats"].items()}
                                    for r in per_ep])
            self.stats = {k: {s: np.asarray(v).tolist() for s, v in st.items()} for k, st in self.stats.items()}
        else:
            self.stats = None

    # -- frames -----------------------------------------------------------------------------

    def _load_data(self, files: list[str]) -> None:
        """Read every data file, check its columns against `features`, keep numerics as numpy."""
        numeric = {k: f for k, f in self.features.items() if f["dtype"] not in IMAGE_DTYPES}
        image_cols = [k for k in self.cameras if self.features[k]["dtype"] == "image"]
        cols: dict[str, list[np.ndarray]] = {k: [] for k in numeric}
        self._images: dict[str, list[pa.ChunkedArray]] = {k: [] for k in image_cols}
        self._file_of_frame: list[tuple[str, int]] = []
        for path in files:
            table = read_parquet(path)
            for name, feat in numeric.items():
                if name not in table.column_names:
                    raise _fail(path, f"column {name!r} (a feature in meta/info.json) is missing")
                cols[name].append(_column_to_numpy(table.column(name), name, feat, path))
            for name in image_cols:
                if name not in table.column_names:
                    raise _fail(path, f"image column {name!r} (a feature in meta/info.json) is missing")
                self._images[name].append(table.column(name).combine_chunks())
            self._file_of_frame.append((path, table.num_rows))
        self.columns = {k: np.concatenate(v) if v else np.zeros((0,)) for k, v in cols.items()}
        self._image_offsets = np.cumsum([0] + [n for _, n in self._file_of_frame])

    def _check_frames(self) -> None:
        info_path = self._p("meta/info.json")
        n = len(self.columns["index"])
        self.num_frames, self.num_episodes = n, len(self.episode_from)
        if int(self.info["total_frames"]) != n:
            raise _fail(info_path, f"total_frames={self.info['total_frames']} but the data files hold {n} frames")
        if int(self.info["total_episodes"]) != self.num_episodes:
            raise _fail(info_path, f"total_episodes={self.info['total_episodes']} but episode metadata has "
                                   f"{self.num_episodes}")
        index = self.columns["index"]
        # Frames are stored in global-index order; map row -> episode through the episode ranges.
        if not np.array_equal(index, np.arange(n)):
            raise _fail(self._file_of_frame[0][0] if self._file_of_frame else info_path,
                        "the 'index' column is not 0..N-1 in file order")
        if self.num_episodes and (self.episode_from[0] != 0 or self.episode_to[-1] != n
                                  or np.any(self.episode_from[1:] != self.episode_to[:-1])):
            raise _fail(info_path, "episode frame ranges do not tile the data")
        self.episode_of = np.repeat(np.arange(self.num_episodes), self.episode_to - self.episode_from)
        if not np.array_equal(self.columns["episode_index"].reshape(-1)[:n],
                              self._episode_numbers()[self.episode_of]):
            raise _fail(self._file_of_frame[0][0], "episode_index column disagrees with the episode metadata")
        ti = self.columns["task_index"].reshape(-1)
        if n and (ti.min() < 0 or ti.max() >= len(self.tasks)):
            raise _fail(self._file_of_frame[0][0], f"task_index outside [0, {len(self.tasks)})")

    def _check_cameras(self) -> None:
        """Decode the first frame of every camera (per data file) now, so a wrong shape fails at open."""
        if not self.num_frames:
            return
        for key in self.cameras:
            if self.features[key]["dtype"] == "image":
                for start in self._image_offsets[:-1]:
                    if start < self.num_frames:
                        self.image(key, int(start))
            else:
                for e in range(self.num_episodes):
                    self._video_path(key, e)  # every episode's video file exists
                self.image(key, 0)

    def _episode_numbers(self) -> np.ndarray:
        if self.version == "v3.0":
            return self.episodes.column("episode_index").to_numpy().astype(np.int64)
        return np.array([r["episode_index"] for r in self._v21_episodes], np.int64)

    # -- access -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.num_frames

    def task(self, i: int) -> str:
        """Instruction of frame i."""
        return self.tasks[int(self.columns["task_index"][i])]

    def image(self, key: str, i: int) -> np.ndarray:
        """Camera `key` at global frame i -> uint8 [h, w, 3]."""
        feat = self.features[key]
        if feat["dtype"] == "video":
            return self._video_frame(key, i)
        f = int(np.searchsorted(self._image_offsets, i, side="right") - 1)
        cell = self._images[key][f][i - int(self._image_offsets[f])]
        data = cell["bytes"].as_py() if pa.types.is_struct(cell.type) else cell.as_py()
        path = self._file_of_frame[f][0]
        if data is None:
            raise _fail(path, f"frame {i} of {key!r} has no image bytes")
        img = decode_png(data, f"{path} ({key}, frame {i})")
        if list(img.shape) != list(_hwc(feat["shape"], feat.get("names"))):
            raise _fail(path, f"{key!r} frame {i} has shape {img.shape}, meta/info.json says {feat['shape']}")
        return img

    def _video_path(self, key: str, e: int) -> tuple[str, float]:
        """(mp4 path, start time in it) of camera `key` in episode number e; the file must exist."""
        if self.version == "v3.0":
            row = {c: self.episodes.column(f"videos/{key}/{c}")[e].as_py()
                   for c in ("chunk_index", "file_index", "from_timestamp")}
            path = self._p(self.info["video_path"].format(video_key=key, chunk_index=row["chunk_index"],
                                                          file_index=row["file_index"]))
            start = float(row["from_timestamp"])
        else:
            ep = int(self._v21_episodes[e]["episode_index"])
            chunks = int(self.info.get("chunks_size", 1000))
            path = self._p(self.info["video_path"].format(episode_chunk=ep // chunks, video_key=key,
                                                          episode_index=ep))
            start = 0.0
        if not os.path.isfile(path):
            raise _fail(path, "missing file")
        return path, start

    def _video_frame(self, key: str, i: int) -> np.ndarray:
        path, start = self._video_path(key, int(self.episode_of[i]))
        ts = start + float(self.columns["timestamp"].reshape(-1)[i])
        try:
            img = read_frame(path, ts, self.fps)
        except Exception as e:  # PyAV raises its own error types for damaged files
            raise _fail(path, f"cannot decode {key!r} at {ts:.3f} s ({type(e).__name__}: {e})") from None
        want = _hwc(self.features[key]["shape"], self.features[key].get("names"))
        if img.shape != want:
            raise _fail(path, f"{key!r} frame {i} has shape {img.shape}, meta/info.json says {list(want)}")
        return img


def _hwc(shape: Sequence[int], names: Sequence[str] | None) -> tuple[int, int, int]:
    """Image shape as (h, w, c); lerobot stores names ['height','width','channel'] or channel-first."""
    if names and list(names)[0] in ("channel", "channels"):
        c, h, w = shape
        return h, w, c
    h, w, c = shape
    return h, w, c


def _tasks_from_table(table: pa.Table, path: str) -> list[str]:
    if "task_index" not in table.column_names:
        raise _fail(path, "lacks column 'task_index'")
    name = "task" if "task" in table.column_names else "__index_level_0__"
    if name not in table.column_names:
        raise _fail(path, "lacks the task string column 'task'")
    idx = table.column("task_index").to_numpy()
    out = [""] * len(idx)
    for i, t in zip(idx, table.column(name).to_pylist(), strict=True):
        if not 0 <= i < len(idx):
            raise _fail(path, f"task_index {i} outside [0, {len(idx)})")
        out[int(i)] = t
    return out


def _parquet_files(d: str) -> list[str]:
    out = []
    for dirpath, _, names in os.walk(d):
        out += [os.path.join(dirpath, n) for n in names if n.endswith(".parquet")]
    return out


def _column_to_numpy(col: pa.ChunkedArray, name: str, feat: dict, path: str) -> np.ndarray:
    """A feature column -> numpy [n] (scalar features) or [n, d]; checks the width against info.json."""
    shape = [int(s) for s in feat["shape"]]
    dtype = np.dtype(feat["dtype"]) if feat["dtype"] != "bool" else np.dtype(bool)
    t = col.type
    if pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        flat = col.combine_chunks()
        lengths = flat.value_lengths().to_numpy(zero_copy_only=False) if len(flat) else np.zeros(0, int)
        width = int(np.prod(shape))
        if len(lengths) and np.any(lengths != width):
            bad = int(lengths[lengths != width][0])
            raise _fail(path, f"column {name!r} has rows of length {bad}, meta/info.json says shape {shape}")
        values = flat.flatten().to_numpy(zero_copy_only=False)
        return values.astype(dtype, copy=False).reshape(len(flat), *shape)
    if int(np.prod(shape)) != 1:
        raise _fail(path, f"column {name!r} holds scalars, meta/info.json says shape {shape}")
    return col.to_numpy().astype(dtype, copy=False)
