"""Scrubbing a request's registered values out of telemetry text: exactly what one alternation of
every value (longest first) replaces, built from the values the text holds."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from app.telemetry.sensitive import MIN_SENSITIVE_LENGTH, REDACTED, TelemetryScope

# A small alphabet, so that values overlap, nest and repeat inside the texts.
_PIECES = st.text(alphabet="abc \n\"'\\é", min_size=1, max_size=12)


def _every_value_at_once(scope: TelemetryScope, text: str) -> str:
    """The definition: one alternation of every registered value, longest first."""
    ordered = sorted(scope.values, key=len, reverse=True)
    if not ordered:
        return text
    return re.sub("|".join(map(re.escape, ordered)), REDACTED, text)


@settings(max_examples=500, deadline=None)
@given(
    values=st.lists(_PIECES, max_size=12),
    parts=st.lists(st.one_of(_PIECES, st.sampled_from(["x", "yz", REDACTED])), max_size=10),
    picks=st.lists(st.integers(min_value=0, max_value=11), max_size=6),
)
def test_scrubbing_replaces_what_the_alternation_of_every_value_would(
    values: list[str], parts: list[str], picks: list[int]
) -> None:
    """For any registered values and any text (built partly from those values, so that they
    overlap and nest in it), the scrubbed text is the one the alternation of every value gives."""
    scope = TelemetryScope()
    scope.register(values)
    text = "".join(parts) + "".join(values[pick] for pick in picks if pick < len(values))
    assert scope.scrub(text) == _every_value_at_once(scope, text)


def test_a_lines_pattern_holds_only_the_values_it_contains() -> None:
    """A request that registered hundreds of long values (a chat-completions history) builds,
    for a log line, the alternation of the values that line holds: none for a line that holds
    none, two for a line that quotes two; never all of them."""
    scope = TelemetryScope()
    history = [f"message {number}: " + " ".join(["words of a turn"] * 20) for number in range(400)]
    scope.register(history)
    assert len(scope.values) >= 400
    assert scope.pattern("route=/openai/v1/chat/completions status=200") is None
    quoted = f"failed on {history[7]} after {history[300]}"
    pattern = scope.pattern(quoted)
    assert pattern is not None
    assert sorted(pattern.pattern.split("|")) == sorted(map(re.escape, (history[7], history[300])))
    assert scope.scrub(quoted) == f"failed on {REDACTED} after {REDACTED}"


def test_a_value_registered_after_a_scrub_is_scrubbed_next() -> None:
    """Values registered after a line was scrubbed count for the next line (the longest-first
    order is rebuilt when a value is added)."""
    scope = TelemetryScope()
    scope.register(["first secret value"])
    assert scope.scrub("a first secret value here") == f"a {REDACTED} here"
    scope.register(["second secret value", "first secret value, longer"])
    assert scope.scrub("second secret value") == REDACTED
    assert scope.scrub("x first secret value, longer") == f"x {REDACTED}"
    assert len("first secret value") >= MIN_SENSITIVE_LENGTH
