"""msgpack-numpy: the wire format of openpi's websocket policy protocol.

A message is one msgpack document. numpy arrays travel as maps
`{b"__ndarray__": True, b"data": <raw bytes, C order>, b"dtype": <numpy dtype str, e.g. "|u1",
"<f4">, b"shape": [d0, d1, ...]}` and numpy scalars as `{b"__npgeneric__": True, b"data": <value>,
b"dtype": <dtype str>}`; everything else is plain msgpack (str, int, float, list, map). This is
what `openpi_client.msgpack_numpy` writes and reads, so its `WebsocketClientPolicy` talks to
`vlajax.serve` unchanged.

Decoding is strict: object, void and complex dtypes are refused (nothing is ever unpickled),
an array whose byte count does not match its dtype and shape raises `CodecError`, and so does
a scalar whose value does not fit its dtype (300 as uint8) or is not a number.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

__all__ = ["CodecError", "pack", "unpack"]

_ND, _NG = b"__ndarray__", b"__npgeneric__"
_REFUSED_KINDS = ("O", "V", "c")  # object (pickle), void/structured, complex


class CodecError(ValueError):
    """A message that is not valid msgpack-numpy (the text names the problem)."""


def _encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray | np.generic) and obj.dtype.kind in _REFUSED_KINDS:
        raise CodecError(f"cannot send dtype {obj.dtype}")
    if isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        return {_ND: True, b"data": arr.tobytes(), b"dtype": arr.dtype.str, b"shape": list(arr.shape)}
    if isinstance(obj, np.generic):
        return {_NG: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    if hasattr(obj, "__array__"):  # jax.Array and friends: as numpy
        return _encode(np.asarray(obj))
    raise TypeError(f"cannot msgpack an object of type {type(obj).__name__}")


def _dtype(spec: Any) -> np.dtype:
    try:
        dt = np.dtype(spec.decode() if isinstance(spec, bytes) else spec)
    except (TypeError, ValueError, UnicodeDecodeError) as e:
        raise CodecError(f"unknown array dtype {spec!r}") from e
    if dt.kind in _REFUSED_KINDS:
        raise CodecError(f"array dtype {dt} is not accepted")
    return dt


def _decode(obj: dict) -> Any:
    if _ND in obj:
        dt = _dtype(obj.get(b"dtype"))
        shape, data = obj.get(b"shape"), obj.get(b"data")
        if not isinstance(shape, list | tuple) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise CodecError(f"bad array shape {shape!r}")
        if not isinstance(data, bytes):
            raise CodecError("array data is not bytes")
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if len(data) != n:
            raise CodecError(f"array of dtype {dt} and shape {tuple(shape)} needs {n} bytes, got {len(data)}")
        return np.frombuffer(data, dtype=dt).reshape(shape)
    if _NG in obj:
        dt, value = _dtype(obj.get(b"dtype")), obj.get(b"data")
        if not isinstance(value, bool | int | float | str | bytes):
            raise CodecError(f"scalar of dtype {dt}: value {value!r} is not a number")
        try:
            return dt.type(value)
        except (OverflowError, ValueError, TypeError) as e:  # e.g. 300 as uint8: numpy raises OverflowError
            raise CodecError(f"scalar {value!r} does not fit dtype {dt} ({type(e).__name__}: {e})") from None
    return obj


def pack(obj: Any) -> bytes:
    """msgpack-numpy bytes of `obj` (dicts, lists, scalars, str, numpy / jax arrays)."""
    return msgpack.packb(obj, default=_encode)


def unpack(data: bytes) -> Any:
    """The object in `data`; raises `CodecError` naming the problem for anything malformed."""
    try:
        return msgpack.unpackb(data, object_hook=_decode, strict_map_key=False)
    except CodecError:
        raise
    except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as e:
        raise CodecError(f"not a msgpack-numpy message ({type(e).__name__}: {e})") from None
