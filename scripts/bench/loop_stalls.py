"""How long one request's work holds the event loop: each route is sent the worst input found
by measurement (the cases below) while `/healthz` and another person's `GET /v1/memory` are
polled; the worst wait of each poll while the route runs is the loop's worst stall for it.

    .venv/bin/python scripts/bench/loop_stalls.py [--database sqlite|postgresql]
        [--rounds 3] [--baseline /path/to/before-checkout] [--out NAME]

The cases are also what tests/reliability/test_loop_stalls.py sends (its bound: 1 s).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import string
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench._common import write_results  # noqa: E402
from scripts.bench._processes import dev_token  # noqa: E402

PROBE_INTERVAL_SECONDS = 0.02
REQUEST_TIMEOUT_SECONDS = 120.0  # the old import of 3,333 near-identical lines took longer
IMPORT_CHARS = 20_000
ENTRY_CHARS = 2_200
MESSAGE_CHARS = 32_000

Send = Callable[[httpx.AsyncClient, str, dict[str, str]], Awaitable[httpx.Response]]


def _anagram_lines() -> str:
    """400 lines that are each other's anagrams: difflib's every-pair comparison at its worst
    (its cheap bounds all pass, the full match runs)."""
    shuffler = random.Random(55)
    base = list("the user likes long walks along the river at dawn")
    lines = []
    for _ in range(400):
        shuffler.shuffle(base)
        lines.append("- " + "".join(base))
    return "\n".join(lines)[:IMPORT_CHARS]


def _short_lines() -> str:
    """3,333 distinct short facts: the most lines 20,000 characters hold."""
    words = ("".join(letters) for letters in itertools.product(string.ascii_lowercase, repeat=3))
    return "\n".join(f"- {word}" for word in words)[:IMPORT_CHARS]


def _unbroken_prose() -> str:
    """Lines that end no sentence, one run of 20,000 characters: judged together as wrapped."""
    words = ("".join(letters) for letters in itertools.product(string.ascii_lowercase, repeat=3))
    return "\n".join(f"fact {word} and" for word in words)[:IMPORT_CHARS]


def _dotted(size: int) -> str:
    """ "a.b" repeated: a URL scheme without bound read every word start to the run's end."""
    return ("a.b" * size)[:size]


def _fetch_run(size: int) -> str:
    """ "curl $" repeated: `(curl|wget)[^\\n]*\\$…` went back over the line for each curl."""
    return ("curl $" * size)[:size]


def _operations(content: str) -> dict[str, Any]:
    return {"operations": [{"target": "memory", "action": "add", "content": content}] * 20}


async def _import(client: httpx.AsyncClient, url: str, headers: dict[str, str], text: str) -> Any:
    return await client.post(f"{url}/v1/memory/import", json={"text": text}, headers=headers)


def _importing(text: str) -> Send:
    return lambda client, url, headers: _import(client, url, headers, text)


def _operating(content: str) -> Send:
    return lambda client, url, headers: client.post(
        f"{url}/v1/memory/operations", json=_operations(content), headers=headers
    )


def _chatting(message: str) -> Send:
    return lambda client, url, headers: client.post(
        f"{url}/v1/chat", json={"message": message}, headers=headers
    )


def _searching(query: str) -> Send:
    return lambda client, url, headers: client.get(
        f"{url}/v1/conversations/search", params={"q": query, "limit": 10}, headers=headers
    )


def _completing(messages: int) -> Send:
    history = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n} " * 20}
        for n in range(messages)
    ]
    history.append({"role": "user", "content": "hello"})

    async def send(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> httpx.Response:
        # The model id the service lists (the offline model's, or a configured one).
        listed = (await client.get(f"{url}/openai/v1/models", headers=headers)).json()
        return await client.post(
            f"{url}/openai/v1/chat/completions",
            json={"model": listed["data"][0]["id"], "messages": history},
            headers=headers,
        )

    return send


def _mcp_update(content: str) -> Send:
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "memory_update", "arguments": _operations(content)},
    }
    mcp_headers = {"Accept": "application/json, text/event-stream"}
    return lambda client, url, headers: client.post(
        f"{url}/mcp", json=call, headers={**headers, **mcp_headers}
    )


def _exporting() -> Send:
    return lambda client, url, headers: client.get(f"{url}/v1/memory/export", headers=headers)


@dataclass(frozen=True)
class Case:
    route: str
    what: str
    send: Send


async def _nothing(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> httpx.Response:
    await asyncio.sleep(1.0)
    return httpx.Response(200)


# The polls with no request running: what the machine's own load makes them wait.
IDLE = Case("(none)", "idle for 1 s", _nothing)

CASES: tuple[Case, ...] = (
    Case("POST /v1/memory/import", "400 anagram lines", _importing(_anagram_lines())),
    Case("POST /v1/memory/import", "3,333 short lines", _importing(_short_lines())),
    Case(
        "POST /v1/memory/import",
        "20,000 characters of unbroken prose",
        _importing(_unbroken_prose()),
    ),
    Case("POST /v1/memory/import", "lines of a.b.a.b", _importing("\n".join([_dotted(480)] * 40))),
    Case("POST /v1/memory/operations", "20 entries of a.b.a.b", _operating(_dotted(ENTRY_CHARS))),
    Case("POST /v1/memory/operations", "20 entries of curl $", _operating(_fetch_run(ENTRY_CHARS))),
    Case("POST /mcp memory_update", "20 entries of a.b.a.b", _mcp_update(_dotted(ENTRY_CHARS))),
    Case(
        "POST /v1/chat",
        "a title of 10,000 openers",
        _chatting(("hi " * MESSAGE_CHARS)[:MESSAGE_CHARS]),
    ),
    Case(
        "POST /v1/chat",
        "remember a.b.a.b (the chat tool's policy)",
        _chatting("remember that " + _dotted(ENTRY_CHARS - 20)),
    ),
    Case(
        "GET /v1/conversations/search",
        "12 words over long messages",
        _searching(" ".join("abcdefghijkl")),
    ),
    Case("POST /openai/v1/chat/completions", "400 earlier messages", _completing(400)),
    Case("GET /v1/memory/export", "everything above", _exporting()),
)


async def _prepare(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
    """Long messages for search to snippet (words that start no query word, then one that
    does); one small import, which starts the service's CPU worker process (once per process:
    a start-up cost, not a request's)."""
    await _import(client, url, headers, "- Likes tea.")
    for _ in range(3):
        message = ("é " * (MESSAGE_CHARS // 2))[: MESSAGE_CHARS - 2] + " l"
        (await client.post(f"{url}/v1/chat", json={"message": message}, headers=headers)).read()


async def _poll(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], worst: list[float]
) -> None:
    while True:
        started = time.perf_counter()
        await client.get(url, headers=headers)
        worst[0] = max(worst[0], time.perf_counter() - started)
        await asyncio.sleep(PROBE_INTERVAL_SECONDS)


async def stalls(
    url: str, rounds: int = 1, cases: tuple[Case, ...] = CASES, *, progress: bool = False
) -> list[dict[str, Any]]:
    """For each case: the worst wait of `/healthz` and of another person's `GET /v1/memory`
    while it ran (`rounds` times), and its own longest answer, in ms; first the same for a
    second with no request running (IDLE: the machine's own load)."""
    attacker = {"Authorization": f"Bearer {dev_token('loop-stalls-sender')}"}
    bystander = {"Authorization": f"Bearer {dev_token('loop-stalls-bystander')}"}
    figures = []
    limits = httpx.Limits(max_connections=4)
    async with (
        httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as sender,
        httpx.AsyncClient(timeout=300, limits=limits) as health,
        httpx.AsyncClient(timeout=300, limits=limits) as memory,
    ):
        await _prepare(sender, url, attacker)
        for case in (IDLE, *cases):
            healthz, other, slowest, statuses = [0.0], [0.0], 0.0, set[str]()
            probes = [
                asyncio.create_task(_poll(health, f"{url}/healthz", {}, healthz)),
                asyncio.create_task(_poll(memory, f"{url}/v1/memory", bystander, other)),
            ]
            try:
                await asyncio.sleep(0.2)  # both probes running
                healthz[0] = other[0] = 0.0
                for _ in range(rounds):
                    started = time.perf_counter()
                    try:
                        response = await case.send(sender, url, attacker)
                        statuses.add(str(response.status_code))
                    except httpx.TimeoutException:
                        statuses.add(f"no answer in {REQUEST_TIMEOUT_SECONDS:.0f} s")
                    slowest = max(slowest, time.perf_counter() - started)
                await asyncio.sleep(2 * PROBE_INTERVAL_SECONDS)  # a probe sent during it returns
            finally:
                for probe in probes:
                    probe.cancel()
                await asyncio.gather(*probes, return_exceptions=True)
            row = {
                "route": case.route,
                "input": case.what,
                "statuses": sorted(statuses),
                "request_ms": round(slowest * 1000, 1),
                "healthz_worst_ms": round(healthz[0] * 1000, 1),
                "other_person_worst_ms": round(other[0] * 1000, 1),
            }
            figures.append(row)
            if progress:
                print(_line(row), flush=True)
    return figures


def _line(row: dict[str, Any]) -> str:
    return (
        f"  {row['route']:<34} {row['input']:<42} {','.join(row['statuses'])} request "
        f"{row['request_ms']:>8} ms  /healthz worst {row['healthz_worst_ms']:>8} ms  "
        f"other person worst {row['other_person_worst_ms']:>8} ms"
    )


def main() -> None:
    from scripts.bench.turn_overhead import LIMITS_OFF, serving, tree_options, trees

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tree_options(parser)
    parser.add_argument("--rounds", type=int, default=3, help="requests per case")
    args = parser.parse_args()
    settings = {
        **LIMITS_OFF,
        "USER_IMPORTS_PER_MINUTE": "0",
        "MAX_MESSAGE_CHARS": str(MESSAGE_CHARS),
    }
    results: dict[str, Any] = {}
    with serving(args, **settings) as urls:
        for name, url in urls.items():
            print(f"{name}:", flush=True)
            results[name] = asyncio.run(stalls(url, args.rounds, progress=True))
    result = {
        "setup": f"{args.database}, {args.rounds} request(s) per case, probes every "
        f"{PROBE_INTERVAL_SECONDS * 1000:.0f} ms",
        "trees": {name: str(tree) for name, tree in trees(args).items()},
        "stalls": results,
    }
    print(f"results written to {write_results(args.out or f'loop_stalls_{args.database}', result)}")


if __name__ == "__main__":
    main()
