"""Secrets in memory entries: keys and tokens in the common formats, credentials in
assignments, URLs and prose, passwords, PINs and passphrases, payment card numbers and IBANs.

Key formats come from detect-secrets' plugins, a maintained catalogue (AWS, GitHub, GitLab,
OpenAI, Slack, Stripe, JWTs, private keys, URLs with a password, ...). Only their pure
`analyze_string` is called: `analyze_line` consults detect-secrets' global settings and can
verify a candidate over the network. Its keyword plugin also reads assignments, with the rules
it applies to configuration files (`DB_PASSWORD=…`). The formats the catalogue lacks (the
providers in `PROVIDER_KEYS`), names it does not list (`GITHUB_TOKEN=…`), and credentials
written as prose ("the user's password is hunter22") have short patterns here. Card numbers
(Luhn) and IBANs (mod 97-10 and country formats) are checked by python-stdnum.

A key split by spaces ("AKIA IOSF ODNN 7EXA MPLE") is caught by also scanning each run of
key-like chunks joined together; invisible characters are refused before this module runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlsplit

from detect_secrets.plugins import keyword
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
from stdnum import iban, luhn

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
# The same keyword catalogue with the rules detect-secrets applies to configuration files
# (`.env`, YAML, INI: `DB_PASSWORD=…`, `MYSQL_ROOT_PASSWORD: …`, `PGPASSWORD=…`), where values
# are not quoted; a value is judged by its shape (`_is_secret_value`), as prose is.
CONFIG_KEYWORDS = KeywordDetector()
CONFIG_RULES = keyword.CONFIG_DENYLIST_REGEX_TO_GROUP

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
# Providers detect-secrets 1.5 has no plugin for, by their documented key prefixes. Case
# matters here: the prefixes are exact. Each format comes with a literal that every key of it
# holds, so that a pattern runs only on text that has it (a substring test costs far less).
PROVIDER_KEYS: dict[str, tuple[str, str]] = {
    "Groq": ("gsk_", r"\bgsk_[A-Za-z0-9]{40,}"),
    "xAI": ("xai-", r"\bxai-[A-Za-z0-9]{40,}"),
    "Replicate": ("r8_", r"\br8_[A-Za-z0-9]{30,}"),
    "Perplexity": ("pplx-", r"\bpplx-[A-Za-z0-9]{40,}"),
    "NVIDIA": ("nvapi-", r"\bnvapi-[A-Za-z0-9_-]{40,}"),
    "Tavily": ("tvly-", r"\btvly-(?:dev-|prod-)?[A-Za-z0-9]{24,}"),
    "LangSmith": ("lsv2_", r"\blsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}"),
    "Pinecone": ("pcsk_", r"\bpcsk_[A-Za-z0-9_]{40,}"),
    "Cerebras": ("csk-", r"\bcsk-[a-z0-9]{40,}"),
    "Fireworks": ("fw_", r"\bfw_[A-Za-z0-9]{24,}"),
    "ElevenLabs": ("sk_", r"\bsk_[a-f0-9]{48}\b"),
    "Firecrawl": ("fc-", r"\bfc-[a-f0-9]{32}\b"),
    "E2B": ("e2b_", r"\be2b_[a-f0-9]{40}\b"),
    "Shopify": ("shp", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b"),
    "Atlassian": ("ATATT3", r"\bATATT3[A-Za-z0-9_=-]{50,}"),
    "DigitalOcean": ("_v1_", r"\bdo[por]_v1_[a-f0-9]{64}\b"),
    "Doppler": ("dp.", r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.(?:[a-z0-9_-]+\.)?[A-Za-z0-9]{40,}"),
    "Linear": ("lin_", r"\blin_(?:api|oauth)_[A-Za-z0-9]{40}\b"),
    "Notion": ("ntn_", r"\bntn_[A-Za-z0-9]{40,}"),
    "Notion (legacy)": ("secret_", r"\bsecret_[A-Za-z0-9]{43}\b"),
    "Postman": ("PMAK-", r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b"),
    "Databricks": ("dapi", r"\bdapi[a-f0-9]{32}(?:-\d)?\b"),
    "Sentry": ("sntry", r"\bsntry[su]_[A-Za-z0-9+/=_]{40,}"),
    "Grafana service account": ("glsa_", r"\bglsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}\b"),
    "Grafana Cloud": ("glc_", r"\bglc_[A-Za-z0-9+/=]{32,}"),
    "New Relic": ("NRAK-", r"\bNRAK-[A-Z0-9]{27}\b"),
    "HashiCorp Vault": ("hv", r"\bhv[sb]\.[A-Za-z0-9_-]{24,}"),
    "Terraform Cloud": (".atlasv1.", r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_-]{60,}"),
    "Docker Hub": ("dckr_pat_", r"\bdckr_pat_[A-Za-z0-9_-]{27,}"),
    "Supabase": ("sbp_", r"\bsbp_[a-f0-9]{40}\b"),
    "PlanetScale": ("pscale_", r"\bpscale_(?:pw|tkn|oauth)_[A-Za-z0-9_.-]{32,}"),
    "1Password": ("ops_eyJ", r"\bops_eyJ[A-Za-z0-9+/=_-]{40,}"),
    "age": ("AGE-SECRET-KEY-1", r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b"),
    "Tailscale": (
        "tskey-",
        r"\btskey-(?:api|auth|client|scim|webhook)-[A-Za-z0-9]{8,}-[A-Za-z0-9]{16,}",
    ),
    "Figma": ("figd_", r"\bfigd_[A-Za-z0-9_-]{40,}"),
    "Stripe webhook": ("whsec_", r"\bwhsec_[A-Za-z0-9]{32,}"),
    "Mailgun": ("key-", r"\bkey-[a-f0-9]{32}\b"),
    "Netlify": ("nfp_", r"\bnfp_[A-Za-z0-9]{36,}"),
    "Fly.io": ("fo1_", r"\bfo1_[A-Za-z0-9_-]{40,}"),
    "Buildkite": ("bkua_", r"\bbkua_[a-f0-9]{40}\b"),
    "CircleCI": ("CCIPAT_", r"\bCCIPAT_[A-Za-z0-9]{22}_[a-f0-9]{40}\b"),
    "Heroku": ("HRKU-", r"\bHRKU-[A-Za-z0-9_-]{60}"),
    "Google OAuth client secret": ("GOCSPX-", r"\bGOCSPX-[A-Za-z0-9_-]{28}"),
    "Google OAuth access token": ("ya29.", r"\bya29\.[A-Za-z0-9_-]{20,}"),
    "Azure AD": ("Q~", r"\b[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}"),
}
_PROVIDER_PATTERNS = [(needle, re.compile(pattern)) for needle, pattern in PROVIDER_KEYS.values()]

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
# The name may be the end of a longer one (`GITHUB_TOKEN`, `db.password`), also exported.
_ASSIGNMENT_PATTERNS = [
    re.compile(r"\b(?:\w+?[_.-])?" + pattern, _FLAGS) for pattern in _ASSIGNMENTS
]

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
_COPULA = (
    r"((is|was|are|were|has\s+been|have\s+been|got)\s+(changed|set|reset|updated)\s+to|"
    r"is|was|are|were|=|:|ist|war|est|es|é|reads)"
)
_OWNER = r"(\s+(for|of|to|on)\s+[^.,;:\n]{1,30}?)?"
_VALUE = r"(?P<value>['\"“‘«][^'\"”’»\n]{2,}['\"”’»]|[^\s,;]+)"
# A noun may end a longer name: "db_password", "wifi_password".
_NAME_PREFIX = r"(?:\w+?_)?"
_PROSE_PASSWORD = re.compile(
    rf"\b{_NAME_PREFIX}{_PASSWORD_NOUNS}\b{_OWNER}\s*{_COPULA}\s+{_VALUE}", _FLAGS
)
# "changed the password to X", "set my wifi password to X".
_CHANGED_TO = re.compile(
    r"\b(changed?|changing|set|setting|reset|updated?|switched?)\s+"
    r"(?:(?:the|my|his|her|their|its|our|your|a|an)\s+)?(?:[\w'-]+\s+){0,2}?"
    rf"{_NAME_PREFIX}{_PASSWORD_NOUNS}\b{_OWNER}\s+(?:to|into)\s+{_VALUE}(?P<rest>\s*\S?)",
    _FLAGS,
)
_PROSE_KEY = re.compile(rf"\b{_NAME_PREFIX}{_KEY_NOUNS}\b{_OWNER}\s*{_COPULA}\s+{_VALUE}", _FLAGS)
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
        "something",
        "anything",
        "one",
        "expire",
        "match",
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
    if any(needle in text and pattern.search(text) for needle, pattern in _PROVIDER_PATTERNS):
        return "a key or token"
    return None


# A scheme of at most 32 characters: unbounded, every word start of a long dotted run
# ("a.b.a.b…") read to the run's end before failing, quadratic in the run.
_URL = re.compile(r"\b[a-z][a-z0-9+.-]{0,31}://[^\s<>\"']+", re.IGNORECASE)
# user:password@ in the authority, also when the password holds a "/" that ends it for
# urlsplit.
_USERINFO = re.compile(r"^[a-z][a-z0-9+.-]*://[^\s/:@]+:[^\s@]+@[^\s@]", re.IGNORECASE)
# Documentation placeholders, not passwords: `${DB_PASSWORD}`, `<password>`, `****`.
_PLACEHOLDER = re.compile(r"^(\$\{?\w+\}?|<[^>]*>|\{\{?[^}]*\}?\}|[*x.]+|password)$", re.I)


def _url_password(text: str) -> bool:
    """A URL whose authority carries a password (`postgres://admin:pa!ss@db/app`), whatever
    characters the password holds."""
    for match in _URL.finditer(text):
        url = match.group()
        try:
            password = urlsplit(url).password
        except ValueError:
            password = None
        if password is None and _USERINFO.match(url):
            password = url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
        if password and not _PLACEHOLDER.match(password):
            return True
    return False


# Payment card numbers: Luhn-valid runs of 12-19 digits (spaces or hyphens between groups)
# whose issuer prefix and length are a card network's, so order numbers, phone numbers, ISBNs
# and IMEIs (which also pass Luhn) are not taken for cards.
_DIGIT_RUN = re.compile(r"(?<![\w.,/-])\d(?:[ -]?\d){11,18}(?![\w.,/-]?\d)")
_CARD_NETWORKS = (
    (re.compile(r"^4"), frozenset({13, 16, 19})),  # Visa
    (re.compile(r"^(5[1-5]|2(2[2-9]|[3-6]\d|7[01]|720))"), frozenset({16})),  # Mastercard
    (re.compile(r"^3[47]"), frozenset({15})),  # American Express
    (re.compile(r"^(6011|64[4-9]|65|62)"), frozenset(range(16, 20))),  # Discover, UnionPay
    (re.compile(r"^35(2[89]|[3-8]\d)"), frozenset(range(16, 20))),  # JCB
    (re.compile(r"^3(0[0-5]|[689])"), frozenset(range(14, 20))),  # Diners Club
)
# IBANs: country, check digits, then 11-30 letters or digits, in groups or not.
_IBAN_CANDIDATE = re.compile(r"\b[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]){11,30}\b", re.IGNORECASE)


def _card_number(text: str) -> bool:
    for match in _DIGIT_RUN.finditer(text):
        digits = re.sub(r"[ -]", "", match.group())
        if any(
            prefix.match(digits) and len(digits) in lengths for prefix, lengths in _CARD_NETWORKS
        ) and luhn.is_valid(digits):
            return True
    return False


def _iban(text: str) -> bool:
    """An IBAN by its ISO 7064 mod 97-10 checksum and its country's length and format
    (python-stdnum's registry), also with trailing words after it."""
    for match in _IBAN_CANDIDATE.finditer(text):
        groups = match.group().split(" ")
        for end in range(len(groups), 0, -1):
            if iban.is_valid("".join(groups[:end]), check_country=False):
                return True
    return False


def _config_assignment(text: str) -> bool:
    """`NAME=value` or `NAME: value` with a secret-sounding name, as detect-secrets' keyword
    plugin reads configuration files; the value's first word must look like a credential."""
    if "=" not in text and ":" not in text:  # the plugin's rules all need one: skip its scan
        return False
    for value in CONFIG_KEYWORDS.analyze_string(text, denylist_regex_to_group=CONFIG_RULES):
        words = value.split()
        if words and _is_secret_value(words[0]):
            return True
    return False


def _changed_to(text: str) -> bool:
    """ "changed the password to X": X is a password if it looks generated, or is one word
    that does not describe one and either ends the sentence or is capitalised."""
    for match in _CHANGED_TO.finditer(text):
        value = match.group("value")
        if _looks_generated(value):
            return True
        ends = match.group("rest").strip() in ("", ".", "!", ";", ",")
        if _is_secret_value(value) and (ends or value[:1].isupper()):
            return True
    return False


def find_secret(text: str) -> str | None:
    """What kind of secret `text` seems to hold ("a key or token", "a password"...), or None.
    `text` is NFKC-normalized and free of invisible characters."""
    found = _format_hit(text)
    if found is None:
        found = next((hit for run in _joined_runs(text) if (hit := _format_hit(run))), None)
    if found is not None:
        return found
    if _url_password(text):
        return "a URL with a password"
    if any(True for detector in ASSIGNMENT_DETECTORS for _ in detector.analyze_string(text)):
        return "a password or key assignment"
    if any(pattern.search(text) for pattern in _ASSIGNMENT_PATTERNS) or _config_assignment(text):
        return "a password or key assignment"
    if _PIN.search(text):
        return "a PIN or access code"
    # An IBAN first: its digits, read alone, can also pass for a card number.
    if _iban(text):
        return "a bank account number (IBAN)"
    if _card_number(text):
        return "a payment card number"
    if _changed_to(text):
        return "a password or passphrase"
    if any(_is_secret_value(match.group("value")) for match in _PROSE_PASSWORD.finditer(text)):
        return "a password or passphrase"
    if any(_looks_generated(match.group("value")) for match in _BARE_PASSWORD.finditer(text)):
        return "a password or passphrase"
    if any(_looks_generated(match.group("value")) for match in _PROSE_FOREIGN.finditer(text)):
        return "a password or passphrase"
    if any(_looks_generated(match.group("value")) for match in _PROSE_KEY.finditer(text)):
        return "a key or token"
    return None
