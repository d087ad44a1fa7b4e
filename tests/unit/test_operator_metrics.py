"""The metrics' labels are closed sets: each turn outcome, commit outcome and error code maps to
a fixed label, and any other text (a subject, content) becomes "other". The limits' defaults
are on, and the evaluation key never appears in its caller key."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from app.operators.limits import Caller, RateLimited
from app.settings import Settings
from app.telemetry import metrics


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize(
    ("outcome", "label"),
    [
        ("stop", "complete"),
        ("length", "complete"),
        ("tool_limit", "tool_limit"),
        ("cancelled", "interrupted"),
        ("model_error", "error"),
        ("timeout", "error"),
    ],
    ids=["stop", "length", "tool-limit", "cancelled", "model-error", "timeout"],
)
def test_each_turn_outcome_has_its_label(outcome: str, label: str) -> None:
    """A finish reason, a cancellation or an error code lands on its one outcome label."""
    before = sample("amem_turns_total", agent="chat", outcome=label)
    metrics.turn_finished("chat", outcome, 0.5)
    assert sample("amem_turns_total", agent="chat", outcome=label) == before + 1


@pytest.mark.parametrize(
    ("outcome", "reason", "label"),
    [
        ("committed", None, "committed"),
        ("proposed", None, "proposed"),
        ("none", None, "none"),
        ("failed", "stale_match", "stale_match"),
        ("failed", "memory_unavailable", "failed"),
        ("cancelled", None, "cancelled"),
        ("staged", None, "other"),
    ],
    ids=["committed", "proposed", "none", "stale-match", "failed", "cancelled", "unknown"],
)
def test_each_commit_outcome_has_its_label(outcome: str, reason: str | None, label: str) -> None:
    """Commit outcomes, with `stale_match` split out of `failed`; anything else is `other`."""
    before = sample("amem_memory_commits_total", outcome=label)
    metrics.memory_commit(outcome, reason, 0.01)
    assert sample("amem_memory_commits_total", outcome=label) == before + 1


@given(st.text(max_size=80))
@example("PATCH")
@example("memory_unavailable")
def test_no_free_text_reaches_a_label(text: str) -> None:
    """Whatever text arrives as an error code, an agent, a route or a method, the label is a
    code-shaped value, one of the fixed HTTP methods, or `other`/`unmatched`: never text with
    spaces, slashes or capitals that could be content (route templates come from the router and
    start with `/`)."""
    metrics.turn_finished(text, text, 0.1)
    metrics.http_request(text, None, 200)
    for family in REGISTRY.collect():
        if not family.name.startswith("amem_"):
            continue
        for each in family.samples:
            for name, value in each.labels.items():
                if name == "route" or name == "le":
                    continue
                assert value == "other" or (value.isascii() and " " not in value), value
                if text and value == text:
                    assert metrics._CODE.match(text) or text in metrics._METHODS  # noqa: SLF001


def test_the_limits_are_on_by_default() -> None:
    """Out of the box a user has 4 streams and 30 turns a minute; the budget is opt-in."""
    defaults = Settings.model_fields
    assert defaults["user_max_streams"].default == 4
    assert defaults["user_turns_per_minute"].default == 30
    assert defaults["user_daily_tokens"].default == 0
    assert defaults["eval_max_streams"].default > 0
    assert defaults["eval_turns_per_minute"].default > 0


def test_the_evaluation_caller_is_a_hash_of_its_key_and_retry_after_is_whole_seconds() -> None:
    """The eval key is never stored: its caller key is a hash; Retry-After is at least 1."""
    caller = Caller.evaluator("secret-eval-key")
    assert caller.kind == "eval" and "secret" not in caller.key and len(caller.key) == 64
    assert Caller.evaluator("secret-eval-key") == caller
    assert RateLimited("x", limit="streams", retry_after=0).headers == {"Retry-After": "1"}
