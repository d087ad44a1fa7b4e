"""Reciprocal rank fusion of ranked lists: pure, no I/O.

Each list votes 1 / (k + rank) for each of its items (rank from 1); items are ordered by their
summed votes, ties by the list that ranked them first and their rank there. k = 60, as in
Cormack, Clarke and Buettcher (SIGIR 2009): a list's top few are worth little more than its next
few, so an item both lists rank fairly high beats one that a single list ranks first.
docs/conversation-search.md has the recall it measured here.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = 60
Key = TypeVar("Key", bound=Hashable)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Key]], *, k: int = K, weights: Sequence[float] | None = None
) -> list[tuple[Key, float]]:
    """Every key of `rankings` with its fused score, best first (`weights`: one per list, 1 by
    default)."""
    scores: dict[Key, float] = {}
    first_seen: dict[Key, tuple[int, int]] = {}
    for number, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[number]
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
            first_seen.setdefault(key, (number, rank))
    order = sorted(scores, key=lambda key: (-scores[key], first_seen[key]))
    return [(key, scores[key]) for key in order]
