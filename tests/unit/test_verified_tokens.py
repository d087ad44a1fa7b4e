"""VerifiedTokens: a verifier's acceptances remembered, never beyond the token's `exp` (with the
leeway), never longer than its window, never across a change of keys; refusals never."""

from __future__ import annotations

import asyncio

import pytest

from app.identity.tokens import Identity, InvalidToken, VerifiedTokens

EXP = 10_000.0
LEEWAY = 30.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Inner:
    """A verifier that accepts `good-*` tokens (expiring at EXP) and counts its calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.version = 0

    async def verify(self, token: str) -> Identity:
        self.calls.append(token)
        if not token.startswith("good-"):
            raise InvalidToken("The token is not valid.")
        return Identity(token.removeprefix("good-"), expires_at=EXP)

    def keys_version(self) -> int:
        return self.version


def make(inner: Inner, monotonic: Clock, wall: Clock, size: int = 4) -> VerifiedTokens:
    return VerifiedTokens(
        inner, seconds=60, leeway_seconds=LEEWAY, size=size, clock=monotonic, wall_clock=wall
    )


def verify(tokens: VerifiedTokens, token: str) -> Identity:
    return asyncio.run(tokens.verify(token))


def test_an_accepted_token_is_verified_once_per_window() -> None:
    inner, monotonic, wall = Inner(), Clock(0), Clock(EXP - 500)
    tokens = make(inner, monotonic, wall)
    assert [verify(tokens, "good-alice").subject for _ in range(5)] == ["alice"] * 5
    assert inner.calls == ["good-alice"]
    monotonic.now = 59.9
    verify(tokens, "good-alice")
    assert len(inner.calls) == 1
    monotonic.now = 60.0  # the window is over: verified again, then remembered again
    verify(tokens, "good-alice")
    verify(tokens, "good-alice")
    assert len(inner.calls) == 2


@pytest.mark.parametrize("past", [0.0, 0.5, 100.0])
def test_an_expired_token_is_never_served_from_memory(past: float) -> None:
    """At `exp + leeway` and after, the verifier decides again (and would refuse)."""
    inner, monotonic, wall = Inner(), Clock(0), Clock(EXP)
    tokens = make(inner, monotonic, wall)
    verify(tokens, "good-bob")
    wall.now = EXP + LEEWAY - 0.1
    verify(tokens, "good-bob")
    assert len(inner.calls) == 1
    wall.now = EXP + LEEWAY + past
    verify(tokens, "good-bob")
    assert len(inner.calls) == 2


def test_a_refused_token_is_never_remembered() -> None:
    inner, monotonic, wall = Inner(), Clock(0), Clock(0)
    tokens = make(inner, monotonic, wall)
    for _ in range(3):
        with pytest.raises(InvalidToken):
            verify(tokens, "forged")
    assert inner.calls == ["forged"] * 3


def test_new_keys_forget_every_acceptance() -> None:
    """A key set fetched again (OIDC rotation) means every remembered token is checked anew."""
    inner, monotonic, wall = Inner(), Clock(0), Clock(0)
    tokens = make(inner, monotonic, wall)
    verify(tokens, "good-carol")
    verify(tokens, "good-dan")
    inner.version += 1
    verify(tokens, "good-carol")
    verify(tokens, "good-dan")
    assert inner.calls == ["good-carol", "good-dan"] * 2


def test_a_token_without_exp_is_never_remembered() -> None:
    class NoExpiry(Inner):
        async def verify(self, token: str) -> Identity:
            self.calls.append(token)
            return Identity("erin")

    inner = NoExpiry()
    tokens = make(inner, Clock(0), Clock(0))
    verify(tokens, "t")
    verify(tokens, "t")
    assert inner.calls == ["t", "t"]


def test_at_most_size_tokens_are_held_oldest_forgotten_first() -> None:
    inner, monotonic, wall = Inner(), Clock(0), Clock(0)
    tokens = make(inner, monotonic, wall, size=2)
    for name in ("good-a", "good-b", "good-c"):
        verify(tokens, name)
    verify(tokens, "good-c")
    verify(tokens, "good-b")
    assert inner.calls == ["good-a", "good-b", "good-c"]
    verify(tokens, "good-a")  # forgotten first
    assert inner.calls[-1] == "good-a" and len(inner.calls) == 4
