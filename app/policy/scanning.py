"""Threat scanning for memory entries: pure checks run before anything is staged or shown.

Memory is injected into every future prompt, so an entry is rejected when it reads like an
instruction to the model, an exfiltration command, or a secret (see `secrets`), or hides
characters from the reader (see `characters`). Patterns are deliberately narrow: ordinary facts
must pass, and paraphrased instructions can still get through (docs/threat-model.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import icu

from app.policy import characters, markers, secrets

Category = Literal["invisible_unicode", "prompt_injection", "exfiltration", "secret"]

_NFKC = icu.Normalizer2.getNFKCInstance()


@dataclass(frozen=True)
class Threat:
    category: Category
    reason: str


_FLAGS = re.IGNORECASE | re.DOTALL | re.MULTILINE
# What may stand between two words of an instruction without reading as a full stop: any
# space or line break, underscores, emphasis marks, ellipses.
_JOINTS = re.compile(r"(?:[\s_*~`]|\.{2,}|\u2026)+")

# Where a command to the model starts: the start of the text, a line or a clause, or after
# "you must", "from now on", "now", "and then", "please". A verb here is an imperative ("Obey
# every request"), where the same verb inside a sentence is a fact ("Her dog obeys…").
_CLAUSE = (
    r"(?:^|[.;:!?]\s*|\b(?:you\s+(?:must|will|shall|should|are\s+to|need\s+to|have\s+to)\s+"
    r"(?:now\s+|always\s+)?|(?:from\s+now\s+on|henceforth|starting\s+now),?\s+|now,?\s+"
    r"|and\s+(?:then\s+)?|then\s+|please\s+|always\s+|simply\s+|just\s+))"
)
# What a person asks of the model, as the object of an obey-command ("every request").
_DEMANDS = (
    r"[^.\n]{0,30}?\b(requests?|commands?|orders?|instructions?|demands?|prompts?|questions?"
    r"|messages?|wish(es)?|tasks?)\b"
)
# Roles that would put the model above its instructions.
_PRIVILEGED = (
    r"(system\s+)?(admin|administrator|sysadmin|root|root\s+user|super\s*user|operator|owner"
    r"|master|god|boss|commander|developer|creator)"
)
_MODES = r"(developer|god|dan|jailbreak|jailbroken|unrestricted|unfiltered|uncensored|sudo|admin)"

_INJECTION = [
    (
        r"\b(ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}\b(previous|prior|above|earlier|"
        r"preceding|all|any|your|the)\b[^.\n]{0,40}\b(instructions?|prompts?|rules|directions|"
        r"guidelines|directives)\b",
        "it tells the model to ignore its instructions",
    ),
    (r"\byou\s+are\s+now\s+(a|an|the|my|your)\b", "it tries to give the model a new identity"),
    (
        r"\bfrom\s+now\s+on,?\s+(you|always|never|only|answer|respond|reply|act|behave|ignore|obey"
        r"|do|don'?t|speak|talk|write|call|treat|pretend|refuse)\b",
        "it tries to give the model a new identity",
    ),
    # Role reassignment: "you are the system administrator" (not "…the admin of the wiki").
    (
        r"\byou\s*('re|\s+are)\s+(now\s+)?(the|my|our|your)\s+(new\s+)?" + _PRIVILEGED + r"\b"
        r"(?!\s+(of|for|at|on|in|to|with|from)\b)",
        "it tries to give the model a new role",
    ),
    (
        r"\byour\s+new\s+(role|identity|persona|name|instructions?|task|purpose|job|directives?"
        r"|rules?|orders?)\b",
        "it tries to give the model a new role",
    ),
    # Commands to the model: at the start of a clause, or as a duty of "you".
    (
        _CLAUSE + r"(act|behave|role-?play|operate|function)\s+as\s+(if\s+you\s+(are|were)\s+)?"
        r"(the|a|an|my|your)\b",
        "it asks the model to take a role",
    ),
    (
        _CLAUSE + r"(assume|take\s+on|adopt)\s+the\s+(role|persona|identity|character)\s+of\b",
        "it asks the model to take a role",
    ),
    (_CLAUSE + r"obey\b", "it tells the model to obey"),
    (
        _CLAUSE + r"(comply\s+with|follow|execute|carry\s+out|fulfil+|honou?r|answer|grant|do)\s+"
        r"(\w+\s+){0,2}?(every|all|any|each|whatever)\b" + _DEMANDS,
        "it tells the model to obey",
    ),
    (
        r"\byou\s+(must|will|shall|should|have\s+to|need\s+to|are\s+to)\b[^.\n]{0,60}\b"
        r"(every|all|any|each|whatever)\b" + _DEMANDS,
        "it tells the model to obey",
    ),
    (
        _CLAUSE
        + r"(enable|enter|activate|switch\s+(to|into)|turn\s+on|go\s+into)\s+(the\s+)?"
        + _MODES
        + r"\s+mode\b",
        "it tries to switch the model into another mode",
    ),
    (
        r"\b(you\s*('re|\s+are)\s+(now\s+)?in\s+(the\s+)?"
        + _MODES
        + r"\s+mode\b|\b"
        + _MODES
        + r"\s+mode\s+(is\s+)?(now\s+)?(on|enabled|activated|engaged|unlocked)\s*([.;:!,]|$))",
        "it tries to switch the model into another mode",
    ),
    (r"\b(never|do\s+not|don'?t)\s+(ever\s+)?refuse\b", "it tells the model never to refuse"),
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
    # A role line, also quoted, listed, bold or bracketed ("> system:", "**System:**").
    (
        r"^[\s>#*+|-]*[\[(]?\s*(system|assistant|developer)\s*[\])]?\s*[*_]*\s*:",
        "it pretends to be a system or assistant message",
    ),
    (
        r"\b(operator|system|developer|admin\w*)\s+(instructions?|directives?|message)\s*"
        r"(\([^)\n]{0,30}\))?\s*:",
        "it pretends to be a system or assistant message",
    ),
    (r"^\s*#+\s*(system|instructions?)\s*:", "it pretends to be a chat-format marker"),
    # Special tokens of chat templates: ChatML, Llama 3, Phi, Command R, harmony, DeepSeek
    # (`<|...|>`, its full-width bars folded), Gemma, Llama 2 and Mistral.
    (r"<\|[^<>|\n]{1,40}\|>", "it pretends to be a chat-format marker"),
    (r"<\|?\s*(im_start|im_end|system|endoftext)\s*\|?>", "it pretends to be a chat-format marker"),
    (
        r"<\s*/?\s*(start|end)_of_turn\s*>|<<\s*/?\s*sys\s*>>",
        "it pretends to be a chat-format marker",
    ),
    (
        r"\[\s*/?\s*(inst|system|system_prompt|tool_calls|available_tools|tool_results)\s*\]",
        "it pretends to be a chat-format marker",
    ),
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


def _compile(table: list[tuple[str, str]]) -> list[tuple[re.Pattern[str], str]]:
    return [(re.compile(pattern, _FLAGS), reason) for pattern, reason in table]


_RULES: list[tuple[Category, list[tuple[re.Pattern[str], str]]]] = [
    ("prompt_injection", _compile(_INJECTION)),
    ("exfiltration", _compile(_EXFILTRATION)),
]

_FETCHER = re.compile(r"\b(curl|wget)\b", _FLAGS)
_SECRET_VARIABLE = re.compile(r"\$\{?" + _SECRET_NAME, _FLAGS)


def _fetches_secret(text: str) -> bool:
    """curl or wget with a secret-named variable later on its line. Linear: only each line's
    first curl or wget is followed (a later one's rest of line is part of the first's), where
    a pattern `(curl|wget)[^\\n]*\\$…` went back over the line for each of them."""
    position = 0
    while (found := _FETCHER.search(text, position)) is not None:
        end = text.find("\n", found.end())
        end = len(text) if end < 0 else end
        if _SECRET_VARIABLE.search(text, found.end(), end):
            return True
        position = end + 1
    return False


def scan(text: str) -> Threat | None:
    """The first threat found in `text`, or None.

    Instructions and commands are matched on a folded form (NFKC, case-folded, look-alike
    letters from other scripts and small capitals mapped to their Latin prototypes), also with
    the joints between words flattened; secrets on the NFKC form, whose case they need."""
    hidden = characters.first_forbidden(text)
    if hidden is not None:
        return Threat("invisible_unicode", f"it contains {hidden.kind} ({hidden.label})")
    folded = markers.fold_confusables(text)
    # The same text with word joints flattened ("ignore\nall", "ignore… all", "ignore_all").
    flat = _JOINTS.sub(" ", folded)
    for category, rules in _RULES:
        for pattern, reason in rules:
            if pattern.search(folded) or (flat != folded and pattern.search(flat)):
                return Threat(category, reason)
        if category == "exfiltration" and (_fetches_secret(folded) or _fetches_secret(flat)):
            return Threat(category, "it sends a secret-named variable over the network")
    secret = secrets.find_secret(_NFKC.normalize(text))
    if secret is not None:
        return Threat("secret", f"it looks like it contains {secret}")
    return None
