"""Demonstration data: LeRobot v3.0 datasets, a grain input pipeline, batching with packing.

See docs/data.md. Names load lazily on first access.
"""

from __future__ import annotations

import importlib

_API = {
    "DatasetError": "vlajax.data.lerobot",
    "LeRobotData": "vlajax.data.lerobot",
    "LeRobotWriter": "vlajax.data.writer",
    "image_feature": "vlajax.data.writer",
    "video_feature": "vlajax.data.writer",
    "ActionChunkSource": "vlajax.data.source",
    "PrefixSpec": "vlajax.data.packing",
    "PackedBatchDataset": "vlajax.data.packing",
    "gather_prefix": "vlajax.data.packing",
    "scatter_prefix": "vlajax.data.packing",
    "rows_to_samples": "vlajax.data.packing",
    "Loader": "vlajax.data.loader",
    "make_dataset": "vlajax.data.loader",
    "make_loader": "vlajax.data.build",
    "DataInfo": "vlajax.data.build",
    "NormStats": "vlajax.data.normalize",
    "load_norm_stats": "vlajax.data.normalize",
    "normalize": "vlajax.data.normalize",
    "unnormalize": "vlajax.data.normalize",
}

__all__ = sorted(_API)


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'vlajax.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
