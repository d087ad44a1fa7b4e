"""Vectors as stored and compared: float32, unit length; the checks an endpoint's answer passes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]
STORED_DTYPE = np.dtype("<f4")  # little-endian float32, the bytes stored per message


class InvalidVector(ValueError):
    """An endpoint answered something that is not a usable vector of the configured size."""


def checked(values: Sequence[float], dimensions: int) -> Vector:
    """`values` as a unit float32 vector, or InvalidVector: wrong size, not finite, all zero."""
    try:
        vector = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise InvalidVector("not numbers") from error
    if vector.ndim != 1 or vector.shape[0] != dimensions:
        raise InvalidVector(f"expected {dimensions} dimensions, got {vector.shape}")
    if not np.isfinite(vector).all():
        raise InvalidVector("not finite")
    norm = float(np.linalg.norm(vector))
    if norm == 0.0 or not np.isfinite(norm):
        raise InvalidVector("zero vector")
    return (vector / norm).astype(np.float32)


def to_bytes(vector: Vector) -> bytes:
    return vector.astype(STORED_DTYPE).tobytes()


def from_rows(blobs: Sequence[bytes], dimensions: int) -> npt.NDArray[np.float32]:
    """Stacked stored vectors (one per row), read in one pass; a blob of another size leaves
    its row zero, which ranks last."""
    width = dimensions * STORED_DTYPE.itemsize
    if all(blob is not None and len(blob) == width for blob in blobs):
        joined = np.frombuffer(b"".join(blobs), dtype=STORED_DTYPE)
        return joined.reshape(len(blobs), dimensions).astype(np.float32, copy=False)
    matrix = np.zeros((len(blobs), dimensions), dtype=np.float32)
    for row, blob in enumerate(blobs):
        if blob is not None and len(blob) == width:
            matrix[row] = np.frombuffer(blob, dtype=STORED_DTYPE)
    return matrix


def pgvector_literal(vector: Vector) -> str:
    """pgvector's text form, '[x,y,...]': bound as a string and cast to vector in SQL."""
    return "[" + ",".join(repr(float(value)) for value in vector) + "]"
