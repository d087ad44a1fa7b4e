"""The telemetry middleware's view of a chat-completions body: every text a client can send (the
user's message, its own system prompt, earlier answers, text parts, even refused tool
definitions) is registered as sensitive before any handler runs; the model id and the roles,
checked against fixed values, are not, so the model name stays readable in the route's
telemetry."""

from __future__ import annotations

import json

from app.telemetry.middleware import register_body
from app.telemetry.sensitive import REDACTED, telemetry_scope

TEXTS = [
    "client system prompt SNTL-OB1",
    "an earlier assistant answer SNTL-OB2",
    "the user's message in a text part SNTL-OB3",
    "a second text part of the same message SNTL-OB4",
    "a refused tool's description SNTL-OB5",
    "a stop sequence SNTL-OB6",
]
BODY = {
    "model": "offline-memory-1",
    "messages": [
        {"role": "system", "content": TEXTS[0]},
        {"role": "assistant", "content": TEXTS[1]},
        {
            "role": "user",
            "content": [{"type": "text", "text": TEXTS[2]}, {"type": "text", "text": TEXTS[3]}],
        },
    ],
    "tools": [{"type": "function", "function": {"name": "lookup", "description": TEXTS[4]}}],
    "stop": [TEXTS[5]],
    "stream": True,
}


def test_every_text_of_a_completions_body_is_registered_but_model_and_roles_are_not() -> None:
    with telemetry_scope() as scope:
        register_body(json.dumps(BODY).encode())
        line = " | ".join([*TEXTS, "model=offline-memory-1", "role=assistant"])
        scrubbed = scope.scrub(line)
    assert scrubbed.split(" | ")[: len(TEXTS)] == [REDACTED] * len(TEXTS)
    assert scrubbed.endswith("model=offline-memory-1 | role=assistant")


def test_a_malformed_completions_body_still_has_its_texts_registered() -> None:
    """A body cut short (not JSON) keeps its string literals registered."""
    raw = json.dumps(BODY).encode()[:-40]
    with telemetry_scope() as scope:
        register_body(raw)
        assert scope.scrub(TEXTS[2]) == REDACTED
