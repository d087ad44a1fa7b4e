"""Fusion variants over the lists `recall.py --rankings` wrote: each question's evidence, the
service's lexical ranking (50) and the owner's nearest messages (50), fused by
`app.embeddings.fusion.reciprocal_rank_fusion` with other k, weights and depths, and recall@1/5/10
of each, computed here without a database or an endpoint (the lists are the service's own).

    .venv/bin/python scripts/bench/fusion.py \
        scripts/bench/results/recall_locomo_e5_sqlite_rankings.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.embeddings.fusion import reciprocal_rank_fusion  # noqa: E402

KS = (1, 5, 10)


def recall(questions: list[dict[str, Any]], rank: Any) -> dict[str, float]:
    hits = dict.fromkeys(KS, 0)
    for question in questions:
        found = rank(question)
        evidence = set(question["evidence"])
        for k in KS:
            hits[k] += bool(evidence & set(found[:k]))
    return {f"recall@{k}": round(hits[k] / len(questions), 4) for k in KS}


def fused(k: int, dense_weight: float, lexical_depth: int, dense_depth: int) -> Any:
    def rank(question: dict[str, Any]) -> list[str]:
        order = reciprocal_rank_fusion(
            [question["lexical"][:lexical_depth], question["dense"][:dense_depth]],
            k=k,
            weights=[1.0, dense_weight],
        )
        return [key for key, _score in order[: max(KS)]]

    return rank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rankings", type=Path)
    args = parser.parse_args()
    questions = json.loads(args.rankings.read_text())["figures"]["questions"]
    rows = {
        "lexical": recall(questions, lambda question: question["lexical"]),
        "dense": recall(questions, lambda question: question["dense"]),
    }
    for k in (60, 30, 10):
        for weight in (0.5, 0.75, 1.0, 1.25, 1.5, 2.0):
            for depth in (10, 20, 50):
                rows[f"rrf k{k} dense x{weight} depth {depth}"] = recall(
                    questions, fused(k, weight, depth, depth)
                )
    best = sorted(rows.items(), key=lambda item: -item[1]["recall@5"])
    print(f"{len(questions)} questions")
    for name, figures in [*list(rows.items())[:2], *best[:15]]:
        print(f"  {name:34} " + "  ".join(f"{key} {value:.3f}" for key, value in figures.items()))


if __name__ == "__main__":
    main()
