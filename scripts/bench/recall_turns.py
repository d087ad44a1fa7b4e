"""What recall of earlier chats adds to a turn: `POST /v1/chat` starting a new conversation, for
one person with recall off and one with it on (`recall_chats`), each with the same earlier
conversations (`--history` of them, every one matching the measured message's words), against
the offline model served standalone. The two people take turns in blocks, so drift reaches
each alike. Reports the time to the first answer text (recall runs before the model's first
round) and to `done`, and the difference.

    .venv/bin/python scripts/bench/recall_turns.py [--database sqlite] [--turns 200]
        [--block 25] [--history 100]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench._common import summary, write_results  # noqa: E402
from scripts.bench._processes import dev_token  # noqa: E402
from scripts.bench.turn_overhead import LIMITS_OFF, serving, tree_options  # noqa: E402

PEOPLE = {"recall_off": False, "recall_on": True}
DISHES = ("leek soup", "leek tart", "braised leeks", "leek risotto", "leek and potato pie")


async def turn(
    client: httpx.AsyncClient, url: str, message: str, token: str
) -> tuple[float, float, bool]:
    """Milliseconds to the first answer text and to the end of the stream; whether the turn
    recalled anything (its sources say so)."""
    headers = {"Authorization": f"Bearer {token}"}
    started = time.perf_counter()
    first = None
    data = b""
    async with client.stream(
        "POST", f"{url}/v1/chat", json={"message": message}, headers=headers
    ) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{url} answered {response.status_code}")
        async for piece in response.aiter_raw():
            data += piece
            if first is None and b"event: delta" in data:
                first = time.perf_counter()
    ended = time.perf_counter()
    if b"event: done" not in data:
        raise RuntimeError(f"the turn did not finish: {data[-300:]!r}")
    recalled = b'"via": "recall"' in data or b'"via":"recall"' in data
    return ((first or ended) - started) * 1000, (ended - started) * 1000, recalled


async def prepare(client: httpx.AsyncClient, url: str, history: int) -> dict[str, str]:
    """Each person's token, their setting and `history` earlier conversations."""
    tokens = {}
    for name, recall in PEOPLE.items():
        token = dev_token(f"bench-{name}")
        tokens[name] = token
        answer = await client.put(
            f"{url}/v1/memory/settings",
            json={"recall_chats": recall},
            headers={"Authorization": f"Bearer {token}"},
        )
        answer.raise_for_status()
    for number in range(history):
        for token in tokens.values():
            dish = DISHES[number % len(DISHES)]
            await turn(client, url, f"Earlier {number}: I cooked {dish} with cream", token)
    return tokens


async def measure(url: str, turns: int, block: int, history: int) -> dict[str, dict[str, list]]:
    samples: dict[str, dict[str, list]] = {name: {"first": [], "done": []} for name in PEOPLE}
    async with httpx.AsyncClient(timeout=60) as client:
        tokens = await prepare(client, url, history)
        names = list(PEOPLE)
        for number in range(0, turns, block):
            shift = (number // block) % len(names)
            for name in names[shift:] + names[:shift]:
                for count in range(number, min(turns, number + block)):
                    message = f"Turn {count}: what should I cook tonight with leeks and cream?"
                    first, done, recalled = await turn(client, url, message, tokens[name])
                    if recalled is not PEOPLE[name]:
                        raise RuntimeError(f"{name}: the turn's recall does not follow the setting")
                    samples[name]["first"].append(first)
                    samples[name]["done"].append(done)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tree_options(parser)
    parser.add_argument("--turns", type=int, default=200, help="measured turns per person")
    parser.add_argument("--block", type=int, default=25, help="turns per person before the next")
    parser.add_argument("--history", type=int, default=100, help="earlier conversations each")
    args = parser.parse_args()
    args.baseline = None  # one tree: the two people are the comparison
    with serving(args, **LIMITS_OFF) as urls:
        samples = asyncio.run(measure(urls["service"], args.turns, args.block, args.history))
    figures: dict[str, object] = {
        "setup": f"POST /v1/chat, a new conversation per turn, {args.database}, offline model "
        f"standalone (delay 0), {args.history} earlier matching conversations per person, "
        "recall off vs on (RECALL_MAX_SNIPPETS 3)",
    }
    for name, measured in samples.items():
        figures[name] = {kind: summary(values) for kind, values in measured.items()}
    on, off = figures["recall_on"], figures["recall_off"]
    assert isinstance(on, dict) and isinstance(off, dict)
    for kind in ("first", "done"):
        added = round(on[kind]["p50_ms"] - off[kind]["p50_ms"], 2)
        figures[f"added_p50_ms_{kind}"] = added
        print(
            f"to {'first text' if kind == 'first' else 'done'}: off p50 {off[kind]['p50_ms']} ms, "
            f"on p50 {on[kind]['p50_ms']} ms (p99 {off[kind]['p99_ms']} / "
            f"{on[kind]['p99_ms']} ms): recall adds {added} ms",
            flush=True,
        )
    written = write_results(args.out or f"recall_turns_{args.database}", figures)
    print(f"results written to {written}")


if __name__ == "__main__":
    main()
