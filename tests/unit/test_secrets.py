"""Secrets in memory entries: key formats (whole, split by spaces, split by invisible
characters), credentials stated in prose, and a regression list of ordinary facts that must
never be mistaken for secrets."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import detect_secrets.plugins
import pytest
from detect_secrets.plugins.base import RegexBasedDetector

from app.memory import policy, secrets
from app.memory.rules import MemoryValidationError, Operation, Snapshot, apply_operations

# Made-up values in the real formats (none of them is a live credential).
KEYS = [
    pytest.param("AKIAIOSFODNN7EXAMPLE is the deploy key", id="aws-access-key"),
    pytest.param("ghp_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ", id="github-token"),
    pytest.param("glpat-abcdefghijklmnopqrst", id="gitlab-token"),
    pytest.param("xoxb-1234567890-abcdefghij", id="slack-token"),
    pytest.param("sk_live_abcdefghijklmnopqrstuvwx", id="stripe-live-key"),
    pytest.param(
        "SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG", id="sendgrid-key"
    ),
    pytest.param("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTYifQ.abcdefghijklmnop", id="jwt"),
    pytest.param("-----BEGIN OPENSSH PRIVATE KEY-----", id="private-key"),
    pytest.param("The wiki is https://sam:pa55word@wiki.example.com", id="url-credentials"),
    pytest.param("key sk-proj-abcdefghijklmnopqrstuvwxyz123456", id="openai-project-key"),
    pytest.param("AIzaSyA1234567890abcdefghijklmnopqrstuv", id="google-api-key"),
    pytest.param("hf_abcdefghijklmnopqrstuvwxyz123456", id="hugging-face-token"),
]
SPLIT_KEYS = [
    pytest.param("AKIA IOSF ODNN 7EXA MPLE", id="aws-in-groups"),
    pytest.param("my token is ghp_abcdefghij klmnopqrst uvwxyzABCD EFGHIJ", id="github-chunks"),
    pytest.param("sk-proj- abcd efgh ijkl mnop 1234 5678", id="openai-chunks"),
    pytest.param("xoxb- 1234567890- abcdefghij", id="slack-chunks"),
    pytest.param("AIza SyA1 2345 6789 0abc defg hijk lmno pqrs tuv", id="google-chunks"),
]
INVISIBLY_SPLIT_KEYS = [
    pytest.param("AKIA\u200bIOSF\u200bODNN7EXAMPLE", id="zero-width-space"),
    pytest.param("ghp_abcdefghij\u2060klmnopqrstuvwxyzABCDEFGHIJ", id="word-joiner"),
    pytest.param("sk-proj-abcdefghij\u00adklmnopqrstuvwxyz123456", id="soft-hyphen"),
]
PROSE = [
    pytest.param("The user's password is hunter22", id="password-is"),
    pytest.param("the user's password is hunter", id="password-one-word"),
    pytest.param("Their Wi-Fi password is sunshine2024.", id="wifi-password"),
    pytest.param("The password for the router is admin123", id="password-for-x-is"),
    pytest.param("The user's passphrase is 'correct horse battery staple'", id="passphrase-quoted"),
    pytest.param("passphrase: “correct horse battery staple”", id="passphrase-curly-quotes"),
    pytest.param("My PIN is 4821", id="pin-is"),
    pytest.param("the bank card PIN: 0000", id="pin-colon"),
    pytest.param("The door code is 1 9 8 4", id="door-code-spaced"),
    pytest.param("The PIN for the garage is 2580", id="pin-for-x-is"),
    pytest.param("CVV 123 on the card", id="cvv"),
    pytest.param("The user's PIN number is 1234", id="pin-number-is"),
    pytest.param("The user's pw is hunter22", id="pw-abbreviation"),
    pytest.param("The user uses the password hunter22 everywhere", id="password-then-value"),
    pytest.param("Their password? hunter22", id="password-question-mark"),
    pytest.param("Das Passwort ist Sommer2024!", id="german-passwort"),
    pytest.param("The API key is q8Zr2LmX0pV7tN4wK9bY", id="api-key-prose"),
    pytest.param("password = hunter2!", id="assignment"),
    pytest.param("db password: s3cretpass", id="colon-assignment"),
    pytest.param("secret: 'plainword'", id="quoted-secret"),
]
# Ordinary facts that mention passwords, keys, tokens, codes and numbers: never secrets.
NOT_SECRETS = [
    "The user never shares passwords.",
    "The user prefers API keys in environment variables.",
    "Store API keys in environment variables, not code",
    "The user's password manager is Bitwarden.",
    "The password is stored in 1Password.",
    "The password for the VPN is in the team vault.",
    "Password rotation happens every 90 days.",
    "Password: rotated monthly by IT.",
    "The user forgot their password last week.",
    "The password is required for SSH access.",
    "The user's password is strong and unique.",
    "The passphrase is long: at least five words.",
    "Passwords must have 12 characters.",
    "The PIN must have 6 digits.",
    "The PIN was changed in March.",
    "The PIN number was changed in March.",
    "The pw is required for the VPN.",
    "The password manager 1Password keeps the vault.",
    "Password policy v2 applies to every account.",
    "The passcode 2FA prompt appears on login.",
    "GPIO pin 17 drives the fan.",
    "Access token: stored in the OS keychain.",
    "Tokens are rotated every 90 days by the platform team.",
    "The token is valid for one hour.",
    "Token budget: 4000 per reply.",
    "The secret to good bread is time.",
    "Keys in the config file are sorted alphabetically.",
    "The project uses API keys with 32 characters.",
    "The user was born in 1984 and lives at Hauptstraße 12.",
    "Flight LH 454 departs at 10:35 from gate B12.",
    "The user's phone number is +49 30 1234567.",
    "ISBN 978-3-16-148410-0 is the user's favourite book.",
    "Commit 3f2a1b9 fixed the login bug.",
    "The user's employee number is 48213.",
    "Room 4B on floor 12, building C.",
    "The user's GitHub handle is octocat.",
    "The user runs Python 3.11 on Ubuntu 24.04.",
    "The meeting code for standup is on the calendar invite.",
    "sk-learn is their favourite library",
    "The user lives in Asia Pacific and works in 2 time zones.",
    "Die Nutzerin teilt nie Passwörter.",
    "El usuario guarda las contraseñas en un gestor.",
]


@pytest.mark.parametrize("text", KEYS)
def test_keys_in_common_formats_are_caught(text: str) -> None:
    """detect-secrets' formats and the few it lacks are all refused as secrets."""
    assert secrets.find_secret(text) is not None


@pytest.mark.parametrize("text", SPLIT_KEYS)
def test_keys_split_by_spaces_are_caught(text: str) -> None:
    """A key written in groups is re-assembled from its run of key-like chunks."""
    assert secrets.find_secret(text) is not None
    found = policy.check(policy.normalize(text))
    assert found is not None and found.category == "secret"


@pytest.mark.parametrize("text", INVISIBLY_SPLIT_KEYS)
def test_keys_split_by_invisible_characters_are_refused(text: str) -> None:
    """A key split by invisible characters is refused (the characters alone are enough)."""
    found = policy.check(policy.normalize(text))
    assert found is not None and found.code == "unsafe_content"


@pytest.mark.parametrize("text", PROSE)
def test_credentials_stated_in_prose_are_caught(text: str) -> None:
    """Passwords, PINs, passphrases and keys stated in sentences or assignments are refused,
    and the refusal does not repeat the value."""
    found = policy.check(policy.normalize(text))
    assert found is not None and found.category == "secret", found
    with pytest.raises(MemoryValidationError) as caught:
        apply_operations(Snapshot(), [Operation("user", "add", content=text)])
    assert caught.value.code == "unsafe_content"
    for word in ("hunter", "sunshine", "4821", "staple", "Sommer", "q8Zr2"):
        assert word not in caught.value.message


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_ordinary_facts_are_not_secrets(text: str) -> None:
    """The false-positive regression list: facts about passwords and keys, numbers, codes and
    identifiers are stored."""
    assert secrets.find_secret(text) is None
    assert apply_operations(Snapshot(), [Operation("user", "add", content=text)]).user == (text,)


# detect-secrets plugins that the policy leaves out on purpose, with the reason.
EXCLUDED_PLUGINS = {
    "IPPublicDetector": "an IP address is not a credential",
    "CloudantDetector": "keyword heuristic for config files; assignments cover it",
    "IbmCloudIamDetector": "keyword heuristic for config files; assignments cover it",
    "IbmCosHmacDetector": "keyword heuristic for config files; assignments cover it",
    "SoftlayerDetector": "keyword heuristic for config files; assignments cover it",
}


def test_every_shipped_format_detector_is_used_or_excluded_with_a_reason() -> None:
    """When detect-secrets ships a new format plugin, this fails until the policy uses it or
    says why not (the catalogue is only maintained if upgrades reach the policy)."""
    shipped = set()
    for module in pkgutil.iter_modules(detect_secrets.plugins.__path__):
        loaded = importlib.import_module(f"detect_secrets.plugins.{module.name}")
        for _, cls in inspect.getmembers(loaded, inspect.isclass):
            own = cls.__module__ == loaded.__name__
            if own and issubclass(cls, RegexBasedDetector) and not inspect.isabstract(cls):
                shipped.add(cls.__name__)
    used = {type(detector).__name__ for detector in secrets.FORMAT_DETECTORS}
    assert shipped - used - set(EXCLUDED_PLUGINS) == set()
    assert used <= shipped
