"""What a conversation's length costs a turn: `POST /v1/chat` continuing one conversation, turn
after turn (each turn's history is the conversation's last `HISTORY_MESSAGES` messages, 20 by
default), against the offline model served standalone, every message new.

Each path holds its own conversation, and the paths take turns in blocks, so drift reaches
each alike. With `--baseline DIR` the code of another checkout is measured alongside.

    .venv/bin/python scripts/bench/conversation_turns.py [--database sqlite] [--turns 200]
        [--block 25] [--baseline /path/to/before-checkout]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench._common import summary, write_results  # noqa: E402
from scripts.bench._processes import dev_token  # noqa: E402
from scripts.bench.turn_overhead import LIMITS_CHECKED, serving, tree_options, trees  # noqa: E402

_START = re.compile(rb"event: start\r?\ndata: (.*)\r?\n")


async def turn(client: httpx.AsyncClient, url: str, body: dict[str, str], token: str) -> bytes:
    headers = {"Authorization": f"Bearer {token}"}
    async with client.stream("POST", f"{url}/v1/chat", json=body, headers=headers) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{url} answered {response.status_code}")
        data = b"".join([piece async for piece in response.aiter_raw()])
    if b"event: done" not in data:
        raise RuntimeError(f"the turn did not finish: {data[-300:]!r}")
    return data


async def measure(services: dict[str, str], turns: int, block: int) -> dict[str, list[float]]:
    token = dev_token("bench-conversation-turns")
    conversations: dict[str, str | None] = dict.fromkeys(services)
    samples: dict[str, list[float]] = {name: [] for name in services}
    names = list(services)
    async with httpx.AsyncClient(timeout=60) as client:
        for number in range(0, turns, block):
            shift = (number // block) % len(names)
            for name in names[shift:] + names[:shift]:
                for count in range(number, min(turns, number + block)):
                    body = {"message": f"Turn {count}: what should I cook tonight with leeks?"}
                    if conversations[name] is not None:
                        body["conversation_id"] = str(conversations[name])
                    started = time.perf_counter()
                    data = await turn(client, services[name], body, token)
                    samples[name].append((time.perf_counter() - started) * 1000)
                    if conversations[name] is None:
                        found = _START.search(data)
                        assert found is not None
                        conversations[name] = json.loads(found.group(1))["conversation_id"]
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tree_options(parser)
    parser.add_argument("--turns", type=int, default=200, help="turns per conversation")
    parser.add_argument("--block", type=int, default=25, help="turns per path before the next")
    args = parser.parse_args()
    with serving(args, **LIMITS_CHECKED) as urls:
        samples = asyncio.run(measure(urls, args.turns, args.block))
    figures: dict[str, object] = {
        "setup": f"POST /v1/chat continuing one conversation per path, {args.database}, offline "
        "model standalone (delay 0), every message new",
        "trees": {name: str(tree) for name, tree in trees(args).items()},
    }
    # The first turns, before the history window fills, and the turns after it.
    full = 21
    for name, values in samples.items():
        first, later = summary(values[:full]), summary(values[full:])
        figures[name] = {"first_turns": first, "later_turns": later}
        print(
            f"{name}: turns 1-{full} p50 {first['p50_ms']} ms, later p50 {later['p50_ms']} ms",
            flush=True,
        )
    name = args.out or f"conversation_turns_{args.database}"
    print(f"results written to {write_results(name, figures)}")


if __name__ == "__main__":
    main()
