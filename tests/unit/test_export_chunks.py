"""The export's body goes out in chunks: its pieces joined, in order, each chunk but the last at
least EXPORT_CHUNK_BYTES, and a failure midway still ends the body short."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.memory.history import EXPORT_CHUNK_BYTES, _chunks


async def _pieces(sizes: list[int], fail_after: int | None = None) -> AsyncGenerator[bytes, None]:
    for number, size in enumerate(sizes):
        if number == fail_after:
            raise RuntimeError("the database went away")
        yield bytes([number % 251]) * size


async def _read(pieces: AsyncGenerator[bytes, None]) -> list[bytes]:
    return [chunk async for chunk in _chunks(pieces)]


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(min_value=0, max_value=EXPORT_CHUNK_BYTES // 3), max_size=40))
async def test_chunks_hold_every_piece_in_order_and_are_large(sizes: list[int]) -> None:
    """Whatever the pieces, the chunks joined are the pieces joined, and every chunk but the
    last holds at least EXPORT_CHUNK_BYTES (one send per chunk, not per row)."""
    chunks = await _read(_pieces(sizes))
    expected = b"".join([bytes([number % 251]) * size for number, size in enumerate(sizes)])
    assert b"".join(chunks) == expected
    assert all(len(chunk) >= EXPORT_CHUNK_BYTES for chunk in chunks[:-1])
    assert all(chunks)


async def test_a_failure_midway_ends_the_body_short() -> None:
    """The pieces read before a failure but not yet sent are dropped, and the failure goes on
    to the response, which ends the body short: what was sent is never a whole document."""
    sizes = [EXPORT_CHUNK_BYTES // 2] * 5
    sent: list[bytes] = []
    with pytest.raises(RuntimeError):
        async for chunk in _chunks(_pieces(sizes, fail_after=3)):
            sent.append(chunk)
    assert b"".join(sent) == b"".join(bytes([number]) * sizes[0] for number in range(2))


async def test_a_client_that_leaves_closes_the_export() -> None:
    """When the response stops reading (the client left), the export's own generator is closed
    at once, so its database reads stop with it."""
    closed = False

    async def pieces() -> AsyncGenerator[bytes, None]:
        nonlocal closed
        try:
            while True:
                yield b"x" * EXPORT_CHUNK_BYTES
        finally:
            closed = True

    chunks = _chunks(pieces())
    assert await anext(chunks)
    await chunks.aclose()
    assert closed
