"""Secrets in memory entries: keys and tokens in the common formats, credentials in
assignments, and passwords, PINs and passphrases stated in prose.

Key formats come from detect-secrets' plugins, a maintained catalogue (AWS, GitHub, GitLab,
OpenAI, Slack, Stripe, JWTs, private keys, URLs with a password, ...). Only their pure
`analyze_string` is called: `analyze_line` consults detect-secrets' global settings and can
verify a candidate over the network. The few formats the catalogue lacks, and credentials
written as prose ("the user's password is hunter22"), have short patterns here.

A key split by spaces ("AKIA IOSF ODNN 7EXA MPLE") is caught by also scanning each run of
key-like chunks joined together; invisible characters are refused before this module runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.keyword import KeywordDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

# Left out: IPPublicDetector (an address is not a credential), the entropy detectors (they flag
# every commit hash and identifier), and the IBM/Cloudant/SoftLayer detectors (keyword
# heuristics for configuration files that the assignment patterns below already cover).
FORMAT_DETECTORS = (
    ArtifactoryDetector(),
    AWSKeyDetector(),
    AzureStorageKeyDetector(),
    BasicAuthDetector(),
    DiscordBotTokenDetector(),
    GitHubTokenDetector(),
    GitLabTokenDetector(),
    JwtTokenDetector(),
    MailchimpDetector(),
    NpmDetector(),
    OpenAIDetector(),
    PrivateKeyDetector(),
    PypiTokenDetector(),
    SendGridDetector(),
    SlackDetector(),
    SquareOAuthDetector(),
    StripeDetector(),
    TelegramBotTokenDetector(),
    TwilioKeyDetector(),
)
# Quoted values assigned to a secret-named key (`secret: 'plainword'`).
ASSIGNMENT_DETECTORS = (KeywordDetector(),)

_FLAGS = re.IGNORECASE
# Formats detect-secrets 1.5 does not know, or knows only in one variant.
_GAPS = [
    r"\bsk-(proj-|live-|test-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{16,}",  # OpenAI, Anthropic
    r"\b(sk|rk|pk)_(live|test)_[A-Za-z0-9]{16,}",  # Stripe test and restricted keys
    r"\bAIza[0-9A-Za-z_-]{35}\b",  # Google API key
    r"\bgithub_pat_[A-Za-z0-9_]{30,}",  # GitHub fine-grained token
    r"\b(hf_|npm_)[A-Za-z0-9]{20,}",  # Hugging Face, npm access token
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}",  # Slack tokens without numeric groups
    r"-----BEGIN\s+([A-Z]+\s+)*PRIVATE\s+KEY( BLOCK)?-----",
    r"\bbearer\s+[A-Za-z0-9._~+/=-]{20,}",
]
_GAP_PATTERNS = [re.compile(pattern, _FLAGS) for pattern in _GAPS]

_SECRET_NAME = (
    r"(password|passwd|pwd|passphrase|pass\s*phrase|passcode|secret|api[_\s-]?key|"
    r"access[_\s-]?key|access[_\s-]?token|auth[_\s-]?token|client[_\s-]?secret|token|"
    r"passwort|kennwort|mot\s+de\s+passe|contrase[ñn]a|senha)"
)
_ASSIGNMENTS = [
    # key = value, key: "value"
    _SECRET_NAME + r"\s*=\s*['\"]?[^\s'\"]{4,}",
    _SECRET_NAME + r"\s*:\s*['\"][^\s'\"]{4,}",
    # An unquoted value after a colon counts when it carries the digits or symbols of a
    # credential ("Password: rotated monthly" is prose).
    _SECRET_NAME + r"\s*:\s*(?=[^\s'\"]*[\d_\-!@#$%^&*+/=])[^\s'\"]{4,}",
]
_ASSIGNMENT_PATTERNS = [re.compile(r"\b" + pattern, _FLAGS) for pattern in _ASSIGNMENTS]

# Prose: "<owner's> password is hunter22", "the wifi passphrase was 'correct horse ...'".
# A password noun is judged by its value's shape and wording (see _is_secret_value); a key or
# token noun, or a password noun in another language, only by a value that looks generated.
_PASSWORD_NOUNS = r"(passwords?|passwd|pwd?|pass\s*phrases?|passcodes?)"
_KEY_NOUNS = (
    r"((api|access|secret|private|wi-?fi|wlan|network)[_\s-]?keys?|client[_\s-]?secrets?|"
    r"(access|auth|bearer|api)[_\s-]?tokens?|tokens?)"
)
# Password words in other languages: their description words are not listed, so only a value
# that looks generated counts.
_FOREIGN_PASSWORD_NOUNS = r"(passwort|kennwort|mot\s+de\s+passe|contrase[ñn]as?|senhas?)"
_COPULA = r"(is|was|are|were|=|:|ist|war|est|es|é|reads|is\s+set\s+to|has\s+been\s+set\s+to)"
_OWNER = r"(\s+(for|of|to|on)\s+[^.,;:\n]{1,30}?)?"
_VALUE = r"(?P<value>['\"“‘«][^'\"”’»\n]{2,}['\"”’»]|[^\s,;]+)"
_PROSE_PASSWORD = re.compile(rf"\b{_PASSWORD_NOUNS}\b{_OWNER}\s*{_COPULA}\s+{_VALUE}", _FLAGS)
_PROSE_KEY = re.compile(rf"\b{_KEY_NOUNS}\b{_OWNER}\s*{_COPULA}\s+{_VALUE}", _FLAGS)
# "uses the password hunter22", "password? hunter22": no verb, so only a generated-looking value.
_BARE_PASSWORD = re.compile(rf"\b{_PASSWORD_NOUNS}\s*[?:\-–]?\s+{_VALUE}", _FLAGS)
_PROSE_FOREIGN = re.compile(
    rf"\b{_FOREIGN_PASSWORD_NOUNS}\b{_OWNER}\s*{_COPULA}\s+{_VALUE}", _FLAGS
)
_PIN = re.compile(
    r"\b(pin|pin\s*code|pincode|passcode|door\s+code|alarm\s+code|gate\s+code|lock\s+code|"
    r"unlock\s+code|safe\s+code|security\s+code|access\s+code|cvv|cvc)\b"
    r"(\s+(number|no\.?|#))?"  # "the PIN number is 1234"
    r"(\s+(for|of|to|on)\s+[^.,;:\n]{1,30}?\s+(is|was|:|=)|\s*(is|was|:|=|-)?)\s*"
    r"\d(?:[\s-]?\d){2,7}\b",
    _FLAGS,
)
# A one-word value that describes a password instead of being one.
_DESCRIPTIONS = frozenset(
    [
        "a",
        "an",
        "the",
        "my",
        "his",
        "her",
        "their",
        "our",
        "your",
        "its",
        "this",
        "that",
        "same",
        "different",
        "new",
        "old",
        "strong",
        "weak",
        "long",
        "short",
        "secret",
        "safe",
        "unsafe",
        "simple",
        "complex",
        "empty",
        "blank",
        "unknown",
        "private",
        "personal",
        "temporary",
        "valid",
        "invalid",
        "correct",
        "wrong",
        "good",
        "bad",
        "fine",
        "ok",
        "okay",
        "mandatory",
        "optional",
        "required",
        "needed",
        "there",
        "here",
        "not",
        "never",
        "none",
        "null",
        "missing",
        "in",
        "on",
        "at",
        "with",
        "from",
        "by",
        "for",
        "to",
        "under",
        "of",
        "inside",
        "managed",
        "stored",
        "kept",
        "saved",
        "set",
        "changed",
        "reset",
        "rotated",
        "expired",
        "shared",
        "sent",
        "written",
        "hidden",
        "encrypted",
        "hashed",
        "random",
        "generated",
        "unique",
        "known",
        "easy",
        "hard",
        "case-sensitive",
        "also",
        "still",
        "only",
        "always",
        "usually",
        "often",
        "rarely",
        "sometimes",
    ]
)
_DESCRIPTION_SUFFIXES = ("ed", "ing", "able", "ible", "ly", "ive", "ous", "ful", "less")
_KEY_CHUNK = r"[A-Za-z0-9_+/=.-]"
# Runs start at a chunk's first character and never backtrack into a chunk: linear time.
_CHUNK_RUN = re.compile(rf"(?<![A-Za-z0-9_+/=.-]){_KEY_CHUNK}+(?:[ \t]+{_KEY_CHUNK}+)+")


_TRAILING = ".,;:!?)("


def _looks_generated(value: str) -> bool:
    """Quoted, or at least four characters with a digit or a symbol in them."""
    if value[0] in "'\"“‘«":
        return True
    bare = value.strip(_TRAILING)
    generated = any(char.isdigit() or not char.isalnum() for char in bare)
    return generated and len(bare) >= 4


def _is_secret_value(value: str) -> bool:
    """A stated password: generated-looking, or one word that does not describe a password
    ("strong", "required", "stored", "in")."""
    if _looks_generated(value):
        return True
    word = value.strip(_TRAILING).lower()
    return word.isalpha() and word not in _DESCRIPTIONS and not word.endswith(_DESCRIPTION_SUFFIXES)


def _joined_runs(text: str) -> Iterator[str]:
    """Each run of key-like chunks separated by spaces, joined (the split key re-assembled);
    only runs that carry a digit, as every generated key does."""
    for run in _CHUNK_RUN.finditer(text):
        joined = re.sub(r"[ \t]+", "", run.group())
        if any(char.isdigit() for char in joined):
            yield joined


def _format_hit(text: str) -> str | None:
    for detector in FORMAT_DETECTORS:
        if any(True for _ in detector.analyze_string(text)):
            return "a key or token"
    if any(pattern.search(text) for pattern in _GAP_PATTERNS):
        return "a key or token"
    return None


def find_secret(text: str) -> str | None:
    """What kind of secret `text` seems to hold ("a key or token", "a password"...), or None.
    `text` is NFKC-normalized and free of invisible characters."""
    found = _format_hit(text)
    if found is None:
        found = next((hit for run in _joined_runs(text) if (hit := _format_hit(run))), None)
    if found is not None:
        return found
    if any(True for detector in ASSIGNMENT_DETECTORS for _ in detector.analyze_string(text)):
        return "a password or key assignment"
    if any(pattern.search(text) for pattern in _ASSIGNMENT_PATTERNS):
        return "a password or key assignment"
    if _PIN.search(text):
        return "a PIN or access code"
    if any(_is_secret_value(match.group("value")) for match in _PROSE_PASSWORD.finditer(text)):
        return "a password or passphrase"
    if any(_looks_generated(match.group("value")) for match in _BARE_PASSWORD.finditer(text)):
        return "a password or passphrase"
    if any(_looks_generated(match.group("value")) for match in _PROSE_FOREIGN.finditer(text)):
        return "a password or passphrase"
    if any(_looks_generated(match.group("value")) for match in _PROSE_KEY.finditer(text)):
        return "a key or token"
    return None
