"""What a person's data download costs: `GET /v1/memory/export` for a user with
`--conversations` conversations (three of them long) and 100 memory changes, read to its end.

Each service gets the same data through its own API (real turns against the offline model
served standalone); the downloads then alternate between the services.

    .venv/bin/python scripts/bench/export.py [--database sqlite] [--conversations 300]
        [--downloads 20] [--baseline /path/to/before-checkout]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench._common import summary, write_results  # noqa: E402
from scripts.bench._processes import dev_token  # noqa: E402
from scripts.bench.turn_overhead import LIMITS_OFF, serving, tree_options, trees  # noqa: E402

_START = re.compile(r"event: start\r?\ndata: (.*)\r?\n")


async def fill(client: httpx.AsyncClient, url: str, token: str, conversations: int) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    for number in range(conversations):
        body = {"message": f"Conversation {number}: soups, leeks and winter gardens."}
        answer = await client.post(f"{url}/v1/chat", json=body, headers=headers)
        found = _START.search(answer.text)
        assert found is not None, answer.text[:300]
        if number < 3:  # three long conversations
            conversation = json.loads(found.group(1))["conversation_id"]
            for turn in range(60):
                more = {"message": f"More on leeks ({turn}).", "conversation_id": conversation}
                await client.post(f"{url}/v1/chat", json=more, headers=headers)
    for number in range(100):
        operation = {"target": "memory", "action": "add", "content": f"Soup fact {number}."}
        await client.post(
            f"{url}/v1/memory/operations", json={"operations": [operation]}, headers=headers
        )


async def measure(services: dict[str, str], conversations: int, downloads: int) -> dict[str, Any]:
    token = dev_token("bench-export")
    headers = {"Authorization": f"Bearer {token}"}
    samples: dict[str, list[float]] = {name: [] for name in services}
    sizes: dict[str, int] = {}
    async with httpx.AsyncClient(timeout=120) as client:
        for url in services.values():
            await fill(client, url, token, conversations)
        names = list(services)
        for number in range(downloads):
            for name in names[number % 2 :] + names[: number % 2]:
                started = time.perf_counter()
                response = await client.get(f"{services[name]}/v1/memory/export", headers=headers)
                samples[name].append((time.perf_counter() - started) * 1000)
                response.raise_for_status()
                sizes[name] = len(response.content)
    return {name: {**summary(values), "bytes": sizes[name]} for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tree_options(parser)
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--downloads", type=int, default=20, help="downloads per service")
    args = parser.parse_args()
    with serving(args, **LIMITS_OFF) as urls:
        figures = asyncio.run(measure(urls, args.conversations, args.downloads))
    for name, values in figures.items():
        print(f"{name}: p50 {values['p50_ms']} ms for {values['bytes']} bytes", flush=True)
    result = {
        "setup": f"GET /v1/memory/export, {args.database}, {args.conversations} conversations "
        "(three of 61 turns), 100 memory changes",
        "trees": {name: str(tree) for name, tree in trees(args).items()},
        "downloads": figures,
    }
    print(f"results written to {write_results(args.out or f'export_{args.database}', result)}")


if __name__ == "__main__":
    main()
