"""The pure parts of semantic search: reciprocal rank fusion, the checks every endpoint answer
passes (size, finite, non-zero; scaled to unit length), and the offline model's deterministic,
not semantic, vectors."""

from __future__ import annotations

import math
from datetime import datetime

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.conversations.search import SearchHit
from app.embeddings.fusion import K, reciprocal_rank_fusion
from app.embeddings.semantic import fuse
from app.embeddings.vectors import InvalidVector, checked, from_rows, to_bytes
from app.offline.embeddings import DIMENSIONS, embed_text, embeddings_body


def test_an_item_both_lists_rank_fairly_high_beats_one_list_s_first() -> None:
    """RRF with k=60: 'b' (2nd and 2nd) outranks 'a' (1st of one list only)."""
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["x", "b", "y"]])
    assert [key for key, _score in fused][:2] == ["b", "a"]
    assert dict(fused)["b"] == pytest.approx(2 / (K + 2))


@given(st.lists(st.lists(st.integers(0, 30), unique=True, max_size=15), max_size=3))
def test_fusion_keeps_every_item_once_best_first(rankings: list[list[int]]) -> None:
    fused = reciprocal_rank_fusion(rankings)
    keys = [key for key, _score in fused]
    assert sorted(keys) == sorted({key for ranking in rankings for key in ranking})
    scores = [score for _key, score in fused]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    "values",
    [[1.0, 2.0], [1.0, 2.0, 3.0, 4.0], [math.nan, 1.0, 1.0], [math.inf, 0, 0], [0.0, 0.0, 0.0]],
    ids=["short", "long", "nan", "inf", "zero"],
)
def test_an_unusable_answer_is_refused(values: list[float]) -> None:
    with pytest.raises(InvalidVector):
        checked(values, 3)


def test_a_vector_is_stored_at_unit_length_and_read_back() -> None:
    vector = checked([3.0, 4.0, 0.0], 3)
    assert np.allclose(vector, [0.6, 0.8, 0.0])
    matrix = from_rows([to_bytes(vector), b"short"], 3)
    assert np.allclose(matrix[0], vector) and not matrix[1].any()


def test_offline_vectors_are_deterministic_and_find_shared_words_only() -> None:
    a, b = embed_text("Lisbon flights in May"), embed_text("may FLIGHTS to lisbon!")
    assert a == embed_text("Lisbon flights in May") and len(a) == DIMENSIONS
    assert np.dot(a, b) > 0.7
    assert abs(np.dot(embed_text("holiday in Portugal"), a)) < 0.3  # not semantic
    status, body = embeddings_body({"input": ["x"], "encoding_format": "base64"})
    assert status == 200 and isinstance(body["data"][0]["embedding"], str)  # type: ignore[index]
    assert embeddings_body({"input": 3})[0] == 400


def _hit(message_id: int) -> SearchHit:
    return SearchHit(message_id, "c", "t", "user", f"m{message_id}", datetime(2026, 1, 1), 1.0)


def test_fusion_weighs_the_nearest_list_by_its_setting() -> None:
    """Weight 0 keeps the words' ranking; a low weight raises what both lists found and puts
    what only the nearest list found below the words' hits; weight 1 weighs both alike."""
    lexical = [_hit(index) for index in (1, 2, 3, 4)]
    dense = [9, 4, 8]
    fetched: list[list[int]] = []

    def fetch(ids: list[int]) -> list[SearchHit]:
        fetched.append(ids)
        return [_hit(message_id) for message_id in ids]

    def order(weight: float) -> list[int]:
        return [hit.message_id for hit in fuse(lexical, dense, 5, fetch, dense_weight=weight)]

    assert order(0.0)[:4] == [1, 2, 3, 4]
    assert order(0.2)[0] == 1  # the words' first place holds
    assert order(0.2).index(4) < order(0.0).index(4)  # found by both: raised
    assert order(0.2)[-1] == 9  # the nearest list's alone: below every word hit
    assert order(1.0)[0] == 4  # weighed alike, the message both lists found is first
    assert all(9 in ids for ids in fetched)  # what only the nearest list found is read
