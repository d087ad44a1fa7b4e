"""Reading a request off the socket is bounded before the application sees it, through real
uvicorn with `BoundedHttpProtocol`: a head of HTTP_MAX_HEADER_BYTES is served and one byte more
is `431`; a head that does not arrive within HTTP_HEADER_TIMEOUT_SECONDS is `408`; a body that
does not arrive within HTTP_BODY_TIMEOUT_SECONDS closes the connection, which the application
sees as the client leaving: logged without a traceback, nothing stored."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine

from app.http_protocol import BoundedHttpProtocol, HttpLimits
from app.main import create_app
from tests.support.apps import api_settings
from tests.support.server import live_server
from tests.support.tokens import dev_token
from tests.support.waiting import wait_for

HEAD_BOUND = 4096
WAIT_SECONDS = 20.0  # the test's own patience; the server's bounds are far shorter


def bounded(limits: HttpLimits) -> type[BoundedHttpProtocol]:
    return type("TestBoundedHttpProtocol", (BoundedHttpProtocol,), {"limits": limits})


@contextmanager
def served(db_url: str, **limits: float) -> Iterator[tuple[str, int]]:
    chosen = HttpLimits(
        max_header_bytes=int(limits.get("max_header_bytes", HEAD_BOUND)),
        header_timeout_seconds=limits.get("header_timeout_seconds", 10.0),
        body_timeout_seconds=limits.get("body_timeout_seconds", 10.0),
    )
    app = create_app(api_settings(db_url))
    with live_server(app, http=bounded(chosen)) as url:
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)


def head_of(size: int, path: str = "/healthz") -> bytes:
    """A GET head of exactly `size` bytes, its final blank line included."""
    start = f"GET {path} HTTP/1.1\r\nhost: test\r\nx-pad: ".encode()
    end = b"\r\n\r\n"
    return start + b"p" * (size - len(start) - len(end)) + end


def exchange(address: tuple[str, int], *pieces: bytes) -> bytes:
    """Send `pieces`, then read until the server closes the connection (or answers a
    keep-alive request whole: the first response is all a test needs)."""
    with socket.create_connection(address, timeout=WAIT_SECONDS) as connection:
        for piece in pieces:
            connection.sendall(piece)
        received = b""
        while chunk := connection.recv(65_536):
            received += chunk
            if b"\r\n\r\n" in received and b"content-length: " in received.lower():
                head, _, body = received.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                if len(body) >= length:
                    break
        return received


@pytest.mark.parametrize("pieces", [1, 3], ids=["one-write", "three-writes"])
def test_a_head_at_the_bound_is_served_and_one_byte_more_is_431(
    sqlite_url: str, pieces: int
) -> None:
    """However the head is cut on the wire, HTTP_MAX_HEADER_BYTES bytes are served and one byte
    more is refused before the application runs."""
    with served(sqlite_url) as address:
        for size, status in ((HEAD_BOUND, b" 200 "), (HEAD_BOUND + 1, b" 431 ")):
            head = head_of(size)
            step = len(head) // pieces + 1
            answer = exchange(address, *(head[i : i + step] for i in range(0, len(head), step)))
            assert status in answer.split(b"\r\n")[0] + b" ", (size, answer[:80])


def test_a_huge_header_is_refused_without_being_read_whole(sqlite_url: str) -> None:
    """A 16 MiB header: 431 once the bound is passed; the server closes the connection rather
    than read the rest (sending it fails or is left unread)."""
    with (
        served(sqlite_url) as address,
        socket.create_connection(address, timeout=WAIT_SECONDS) as connection,
    ):
        connection.sendall(b"GET /healthz HTTP/1.1\r\nhost: t\r\nx-big: ")
        sent = 0
        try:
            while sent < 16 * 1_048_576:
                connection.sendall(b"b" * 65_536)
                sent += 65_536
        except OSError:
            pass  # the server closed the connection: the rest was never read
        answer = connection.recv(65_536)
    assert answer.startswith(b"HTTP/1.1 431 ")


def test_a_head_that_never_ends_is_408(sqlite_url: str) -> None:
    """A head still open at HTTP_HEADER_TIMEOUT_SECONDS is answered 408 and the connection is
    closed (slow headers hold nothing for ever); a connection that sends nothing too."""
    with served(sqlite_url, header_timeout_seconds=0.3) as address:
        assert exchange(address, b"GET /healthz HTTP/1.1\r\nhost: t\r\n").startswith(
            b"HTTP/1.1 408 "
        )
        assert exchange(address).startswith(b"HTTP/1.1 408 ")
        assert exchange(address, head_of(200)).startswith(b"HTTP/1.1 200 ")


def test_a_body_that_stops_arriving_closes_the_connection_and_stores_nothing(
    engine: Engine, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A chat request whose body stops halfway: at HTTP_BODY_TIMEOUT_SECONDS the connection is
    closed; the turn never starts (no conversation), and the client leaving mid-body is not
    logged as an error with a traceback."""
    body = b'{"message": "hello there, this is a body that never ends"}'
    head = (
        f"POST /v1/chat HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {dev_token('alice')}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    with caplog.at_level(logging.INFO), served(db_url, body_timeout_seconds=0.3) as address:
        answer = exchange(address, head + body[:10])
    assert b" 200 " not in answer.split(b"\r\n")[0]
    with engine.connect() as connection:
        count = connection.exec_driver_sql("SELECT COUNT(*) FROM amem_conversations").scalar()
    assert count == 0
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert not errors, [record.getMessage() for record in errors]
    assert not any(
        record.exc_info for record in caplog.records if record.levelno >= logging.WARNING
    )


def request_logged(caplog: pytest.LogCaptureFixture, path: str) -> bool:
    """Whether the server has logged the end of a request to `path` (its `http.request` line)."""
    return any(
        isinstance(record.msg, dict)
        and record.msg.get("event") == "http.request"
        and record.msg.get("route") == path
        for record in caplog.records
    )


@pytest.mark.parametrize(
    "path", ["/v1/chat", "/openai/v1/chat/completions", "/v1/memory/operations"]
)
def test_a_client_that_leaves_mid_body_is_no_error(
    sqlite_url: str, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    """A client that closes its connection halfway through the body: the request ends without
    an ERROR line and without a traceback (it is the client's doing, not a failure)."""
    body = b'{"message": "a body the client never finishes sending"}'
    head = (
        f"POST {path} HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {dev_token('alice')}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    with caplog.at_level(logging.INFO), served(sqlite_url) as address:
        with socket.create_connection(address, timeout=WAIT_SECONDS) as connection:
            connection.sendall(head + body[:10])
        wait_for(lambda: request_logged(caplog, path), f"the end of the request to {path}")
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert not errors, [record.getMessage()[:200] for record in errors]
    assert not any(
        record.exc_info for record in caplog.records if record.levelno >= logging.WARNING
    )
