"""IDX files (MNIST / Fashion-MNIST), plain or gzipped, as numpy arrays."""

from __future__ import annotations

import gzip
import os
import struct

import numpy as np

__all__ = ["read_idx"]

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX array; errors name the file (truncated data, bad magic number)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as err:
        raise ValueError(f"{path}: cannot read IDX file ({err})") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _DTYPES:
        raise ValueError(f"{path}: not an IDX file (magic bytes {data[:4]!r})")
    ndim = data[3]
    dims = struct.unpack(f">{ndim}I", data[4: 4 + 4 * ndim])
    dtype = np.dtype(_DTYPES[data[2]])
    expected = int(np.prod(dims)) * dtype.itemsize
    body = data[4 + 4 * ndim:]
    if len(body) != expected:
        raise ValueError(f"{path}: truncated IDX data ({len(body)} bytes, expected {expected} for shape {dims})")
    return np.frombuffer(body, dtype=dtype).reshape(dims)
