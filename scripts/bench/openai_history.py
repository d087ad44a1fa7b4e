"""What a chat-completions client's history costs a turn: `POST /openai/v1/chat/completions`
streamed to its end, with 0 to 100 earlier turns in `messages` (as Open WebUI and the other
OpenAI-compatible clients send on every turn), against the offline model served standalone.

Every request is new (its last message carries a counter), as a real conversation's are: a
client's history grows by one turn each time. With `--baseline DIR` the code of another
checkout is served and measured in the same alternated blocks.

    .venv/bin/python scripts/bench/openai_history.py [--database sqlite] [--turns 40]
        [--blocks 4] [--history 0,10,50,100] [--baseline /path/to/before-checkout]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.offline.wire import OFFLINE_MODEL_NAME  # noqa: E402
from scripts.bench._common import summary, write_results  # noqa: E402
from scripts.bench._processes import dev_token  # noqa: E402
from scripts.bench.turn_overhead import LIMITS_CHECKED, serving, tree_options, trees  # noqa: E402

_USER = "Could you tell me more about the weather in spring along the coast, and what to pack?"
_ASSISTANT = (
    "Spring on the coast is mild but changeable: mornings are often foggy, afternoons bright, "
    "and the wind picks up towards evening. Pack layers, a light waterproof jacket, comfortable "
    "shoes for cliff paths, sunscreen and a warm sweater for the evenings by the water. "
)


def history(turns: int) -> list[dict[str, str]]:
    """`turns` earlier exchanges, each a user question and a longer assistant answer."""
    messages = []
    for number in range(turns):
        messages.append({"role": "user", "content": f"{_USER} ({number})"})
        messages.append({"role": "assistant", "content": f"{_ASSISTANT * 2}({number})"})
    return messages


async def turn(client: httpx.AsyncClient, url: str, token: str, body: dict[str, object]) -> float:
    started = time.perf_counter()
    headers = {"Authorization": f"Bearer {token}"}
    async with client.stream(
        "POST", f"{url}/openai/v1/chat/completions", json=body, headers=headers
    ) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{url} answered {response.status_code}")
        data = b"".join([piece async for piece in response.aiter_raw()])
    if not data.rstrip().endswith(b"data: [DONE]"):
        raise RuntimeError("the stream did not end with [DONE]")
    return (time.perf_counter() - started) * 1000


async def measure(
    services: dict[str, str], sizes: list[int], turns: int, blocks: int
) -> dict[str, dict[str, list[float]]]:
    token = dev_token("bench-openai-history")
    counter = itertools.count()
    samples: dict[str, dict[str, list[float]]] = {
        str(size): {name: [] for name in services} for size in sizes
    }
    async with httpx.AsyncClient(timeout=120) as client:
        for size in sizes:
            earlier = history(size)

            def body(earlier: list[dict[str, str]] = earlier) -> dict[str, object]:
                last = {"role": "user", "content": f"And what about autumn? ({next(counter)})"}
                return {"model": OFFLINE_MODEL_NAME, "messages": [*earlier, last], "stream": True}

            for url in services.values():  # warm-up
                for _ in range(3):
                    await turn(client, url, token, body())
            names = list(services)
            for number in range(blocks):
                shift = number % len(names)
                for name in names[shift:] + names[:shift]:
                    for _ in range(max(1, turns // blocks)):
                        latency = await turn(client, services[name], token, body())
                        samples[str(size)][name].append(latency)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tree_options(parser)
    parser.add_argument("--history", default="0,10,50,100", help="earlier turns, comma-separated")
    parser.add_argument("--turns", type=int, default=40, help="requests per path and size")
    parser.add_argument("--blocks", type=int, default=4, help="alternated blocks per size")
    args = parser.parse_args()
    sizes = [int(size) for size in args.history.split(",")]
    with serving(args, **LIMITS_CHECKED) as urls:
        samples = asyncio.run(measure(urls, sizes, args.turns, args.blocks))
    figures: dict[str, object] = {
        "setup": f"POST /openai/v1/chat/completions streamed, {args.database}, offline model "
        "standalone (delay 0); every request's last message is new",
        "trees": {name: str(tree) for name, tree in trees(args).items()},
    }
    for size, paths in samples.items():
        figures[f"history={size}"] = {name: summary(values) for name, values in paths.items()}
        line = ", ".join(
            f"{name} p50 {summary(values)['p50_ms']} ms" for name, values in paths.items()
        )
        print(f"{size} earlier turns: {line}", flush=True)
    name = args.out or f"openai_history_{args.database}"
    print(f"results written to {write_results(name, figures)}")


if __name__ == "__main__":
    main()
