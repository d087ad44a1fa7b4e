"""Threat scanning for memory entries: pure pattern checks run before anything is staged or shown.

Memory is injected into every future prompt, so an entry is rejected when it reads like an
instruction to the model, an exfiltration command, a hard-coded secret, or hides characters
from the reader. Patterns are deliberately narrow: ordinary facts must pass.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

Category = Literal["invisible_unicode", "prompt_injection", "exfiltration", "secret"]

INVISIBLE_CODEPOINTS = frozenset(
    [
        *range(0x200B, 0x200E),
        *range(0x2060, 0x2065),
        0xFEFF,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
    ]
)


@dataclass(frozen=True)
class Threat:
    category: Category
    reason: str


_FLAGS = re.IGNORECASE | re.DOTALL | re.MULTILINE

_INJECTION = [
    (
        r"\b(ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}\b(previous|prior|above|earlier|"
        r"preceding|all|any|your|the)\b[^.\n]{0,40}\b(instructions?|prompts?|rules|directions|"
        r"guidelines|directives)\b",
        "it tells the model to ignore its instructions",
    ),
    (r"\byou\s+are\s+now\s+(a|an)\b", "it tries to give the model a new identity"),
    (r"\bfrom\s+now\s+on,?\s+you\s+(are|will|must)\b", "it tries to give the model a new identity"),
    (
        r"\b(new|override|overriding|updated|replace|replacement|reveal|print|show|leak)\b[^.\n]{0,20}"
        r"\bsystem\s+(prompt|instructions?|message)\b",
        "it tries to override the system prompt",
    ),
    (r"\bsystem\s+(prompt|instructions?)\s*(override|:)", "it tries to override the system prompt"),
    (
        r"\b(do\s+not|don'?t|never)\s+(tell|inform|mention\s+(this\s+)?to|reveal\s+(this\s+)?to|"
        r"let)\s+(the\s+)?user\b",
        "it tells the model to hide things from the user",
    ),
    (r"^\s*(system|assistant|developer)\s*:", "it pretends to be a system or assistant message"),
    (r"<\|?\s*(im_start|im_end|system|endoftext)\s*\|?>", "it pretends to be a chat-format marker"),
    (r"\[\s*/?\s*(inst|system)\s*\]", "it pretends to be a chat-format marker"),
    (
        r"\b(act|behave)\s+as\s+(the\s+|a\s+|an\s+)?(system|developer|administrator|admin|root)\b",
        "it asks the model to pretend to be a privileged role",
    ),
    (r"\bpretend\s+(to\s+be|you\s+are)\b", "it asks the model to pretend to be someone else"),
    (r"<!--", "it contains a hidden HTML comment"),
]

_SECRET_NAME = r"\w*(key|token|secret|passw(or)?d|pwd|credential|auth)\w*"
_EXFILTRATION = [
    (
        r"\b(curl|wget)\b[^\n]*\$\{?" + _SECRET_NAME,
        "it sends a secret-named variable over the network",
    ),
    (
        r"(^|[\s/~'\"])\.(env(?!\.(example|sample|template|dist)\b)|netrc|pgpass|npmrc|pypirc|"
        r"git-credentials)\b",
        "it refers to a credentials file",
    ),
    (
        r"(\.aws/credentials|\.docker/config\.json|\bcredentials\.json\b)",
        "it refers to a credentials file",
    ),
    (r"(\.ssh/|\bid_(rsa|dsa|ecdsa|ed25519)\b|\bauthorized_keys\b)", "it refers to SSH keys"),
    (
        r"\b(send|post|upload|forward|exfiltrate|transmit|leak|email|mail|copy)\b[^\n]{0,80}"
        r"\bto\b\s*<?(https?://|ftp://|[\w.+-]+@[\w-]+\.[\w.]+)",
        "it tells the model to send data to an outside address",
    ),
]

_SECRET_FIELD = (
    r"\b(password|passwd|pwd|passphrase|secret|api[_-]?key|access[_-]?token|auth[_-]?token|"
    r"client[_-]?secret|token)\b"
)
_SECRETS = [
    (r"\bsk-(proj-|live-|test-|ant-)?[A-Za-z0-9_-]{16,}", "an API key"),
    (r"\b(sk|rk|pk)_(live|test)_[A-Za-z0-9]{16,}", "an API key"),
    (r"\bAKIA[0-9A-Z]{16}\b", "a cloud access key"),
    (r"\bAIza[0-9A-Za-z_-]{35}\b", "an API key"),
    (r"\bgh[pousr]_[A-Za-z0-9]{30,}\b", "an access token"),
    (r"\bgithub_pat_[A-Za-z0-9_]{30,}\b", "an access token"),
    (r"\b(glpat-|hf_|npm_)[A-Za-z0-9_-]{20,}", "an access token"),  # GitLab uses a hyphen
    (r"\bxox[abposr]-[A-Za-z0-9-]{10,}", "an access token"),
    (r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", "a signed token"),
    (r"\bbearer\s+[A-Za-z0-9._~+/=-]{20,}", "a bearer token"),
    (r"-----BEGIN\s+([A-Z]+\s+)*PRIVATE\s+KEY( BLOCK)?-----", "a private key"),
    (_SECRET_FIELD + r"\s*=\s*['\"]?[^\s'\"]{4,}", "a password or key assignment"),
    (_SECRET_FIELD + r"\s*:\s*['\"][^\s'\"]{4,}", "a password or key assignment"),
    # "Password: rotated monthly" is prose; an unquoted value after a colon counts as a secret
    # only when it has the digits or symbols that a real credential carries.
    (
        _SECRET_FIELD + r"\s*:\s*(?=[^\s'\"]*[\d_\-!@#$%^&*+/=])[^\s'\"]{4,}",
        "a password or key assignment",
    ),
]


def _compile(table: list[tuple[str, str]]) -> list[tuple[re.Pattern[str], str]]:
    return [(re.compile(pattern, _FLAGS), reason) for pattern, reason in table]


_RULES: list[tuple[Category, list[tuple[re.Pattern[str], str]]]] = [
    ("prompt_injection", _compile(_INJECTION)),
    ("exfiltration", _compile(_EXFILTRATION)),
    ("secret", _compile(_SECRETS)),
]


def find_invisible(text: str) -> str | None:
    """The first invisible or bidirectional control character, as U+XXXX, if any."""
    for char in text:
        if ord(char) in INVISIBLE_CODEPOINTS:
            return f"U+{ord(char):04X}"
    return None


def scan(text: str) -> Threat | None:
    """The first threat found in `text`, or None. Scanning runs on the NFKC form."""
    invisible = find_invisible(text)
    if invisible is not None:
        return Threat("invisible_unicode", f"it contains an invisible character ({invisible})")
    folded = unicodedata.normalize("NFKC", text)
    invisible = find_invisible(folded)
    if invisible is not None:
        return Threat("invisible_unicode", f"it contains an invisible character ({invisible})")
    for category, rules in _RULES:
        for pattern, reason in rules:
            if pattern.search(folded):
                if category == "secret":
                    reason = f"it looks like it contains {reason}"
                return Threat(category, reason)
    return None
