"""Parsing the model's tool arguments: bounded in size and depth before the JSON parser runs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.agent.tools import (
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_DEPTH,
    ArgumentError,
    nesting_depth,
    parse_arguments,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.sampled_from('ab[]{}"\\:,')),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.text(alphabet=st.sampled_from('k[]{}"\\'), max_size=4), children, max_size=3
        )
    ),
    max_leaves=30,
)


def depth_of(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(item) for item in value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_the_linear_depth_scan_agrees_with_the_structure(value: object) -> None:
    """For any JSON value (strings full of brackets, quotes and escapes included), the scan
    reports its true depth, so the bound cannot be dodged by hiding brackets in strings."""
    text = json.dumps(value)
    assert nesting_depth(text, 1_000) == depth_of(value)
    bounded = parse_arguments(text)
    if depth_of(value) > MAX_ARGUMENT_DEPTH:
        assert isinstance(bounded, ArgumentError) and bounded.code == "arguments_too_deep"
    else:
        assert bounded == value


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        pytest.param("[" * 50_000, "arguments_too_deep", id="unclosed-deep"),
        pytest.param('{"a":' * 5_000 + "1" + "}" * 5_000, "arguments_too_deep", id="deep-objects"),
        pytest.param(" " * (MAX_ARGUMENT_CHARS + 1), "arguments_too_large", id="too-large"),
        pytest.param("{'operations': []}", "invalid_arguments", id="single-quotes"),
        pytest.param('{"operations": [] } trailing', "invalid_arguments", id="trailing"),
        pytest.param("", None, id="empty-means-no-arguments"),
    ],
)
def test_bad_arguments_become_errors_not_exceptions(raw: str, code: str | None) -> None:
    """Each bad shape is an ArgumentError with its code (never a RecursionError); an empty
    string is the empty object, which the memory rules then refuse with their own reason."""
    result = parse_arguments(raw)
    if code is None:
        assert result == {}
    else:
        assert isinstance(result, ArgumentError) and result.code == code
        assert raw[:20] not in result.reason or not raw.strip()
