"""The offline model's answers: deterministic, read from the system prompt it is given and the
last message; it saves facts with `memory_update` when the tool is offered, searches earlier
conversations with `conversation_search` when asked "what did we discuss about X" (also "talk
about", "say about", "decide about", or "search my conversations for X"), and says plainly that
it is the offline model otherwise. A time-bound fact ("I'm in Berlin until the 20th") is saved
with `until`, the last day it holds."""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any

from app.names import MEMORY_TOOL_NAME as MEMORY_TOOL
from app.names import RESERVED_TAG_NAME
from app.names import SEARCH_TOOL_NAME as SEARCH_TOOL
from app.offline.wire import ChatRequest, Reply, Text, ToolCall, ToolCalls, content_text

OFFLINE_NOTICE = (
    "This is the built-in offline model, so my answers are canned. "
    "To talk to a real model, set LLM_BASE_URL, LLM_API_KEY and LLM_MODEL "
    "to any OpenAI-compatible chat-completions endpoint."
)
LONG_ANSWER = " ".join(
    f"Sentence {number} of a deliberately long offline answer, streamed word by word so that "
    "you can press Stop halfway and watch the turn end without saving anything."
    for number in range(1, 31)
)

_REMEMBER = re.compile(r"^(?:please\s+)?remember(?:\s+that)?[\s:,]+(?P<rest>.+)$", re.I | re.S)
_I_CLAUSE = re.compile(r"^i\s+(?P<rest>.+)$", re.I | re.S)
_NAME = re.compile(r"\bmy name is\s+(?P<name>[^.!?\n]+)", re.I)
_FORGET = re.compile(
    r"^(?:please\s+)?forget(?:\s+(?:that|about|the fact that))?\s+(?P<phrase>.+)$", re.I | re.S
)
_SEARCH = re.compile(
    r"^(?:(?:what|when) did (?:we|i) "
    r"(?:discuss(?: about)?|talk about|say about|decide about)"
    r"|search (?:my|our) (?:conversations|history) for)\s+(?P<topic>.+?)[\s?.!]*$",
    re.I | re.S,
)
# A time-bound fact: "I'm in Berlin until the 20th", "remember that I work from Lisbon until
# 2027-01-15", "I am on leave until March 3".
_UNTIL_FACT = re.compile(
    r"^(?:(?:please\s+)?remember(?:\s+that)?[\s:,]+)?(?P<fact>i(?:'m|\s).+?)\s+until\s+"
    r"(?P<when>.+?)[\s.!]*$",
    re.I | re.S,
)
_ISO_DAY = re.compile(r"^(?P<iso>\d{4}-\d{2}-\d{2})$")
_DAY_OF_MONTH = re.compile(r"^(?:the\s+)?(?P<day>\d{1,2})(?:st|nd|rd|th)?$", re.I)
_MONTH_DAY = re.compile(
    r"^(?P<month>[a-z]+)\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?$|"
    r"^(?:the\s+)?(?P<day2>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<month2>[a-z]+)$",
    re.I,
)
_MONTHS = {
    name.lower(): number
    for names in (calendar.month_name, calendar.month_abbr)
    for number, name in enumerate(names)
    if name
}
_HEADING = re.compile(r"^(USER PROFILE|AGENT MEMORY|PROJECT MEMORY) \[.*\]$", re.M)
_STORES = {"USER PROFILE": "user", "AGENT MEMORY": "memory", "PROJECT MEMORY": "project"}
_IRREGULAR = {
    "am": "is",
    "have": "has",
    "do": "does",
    "go": "goes",
    "was": "was",
    "can": "can",
    "will": "will",
    "would": "would",
    "should": "should",
    "must": "must",
}
_PRONOUNS = {
    "my": "their",
    "me": "them",
    "myself": "themselves",
    "mine": "theirs",
    "i": "they",
    "i'm": "they are",
}


_OPEN_TAG = re.compile(rf"<{RESERVED_TAG_NAME}_(?P<nonce>[0-9a-f]{{32}})>")


def _entry(line: str) -> str:
    """A rendered entry line: a JSON string literal, or the application's own placeholder."""
    if line.startswith('"'):
        try:
            decoded = json.loads(line)
        except ValueError:
            return line
        return decoded if isinstance(decoded, str) else line
    return line


def memory_entries(system_text: str) -> dict[str, list[str]]:
    """The entries of the memory block in a system prompt (empty when there is no block): the
    block ends at the closing tag with the opening tag's nonce, and each entry line is read as
    the JSON string it is."""
    entries: dict[str, list[str]] = {"user": [], "memory": [], "project": []}
    opening = _OPEN_TAG.search(system_text)
    if opening is None:
        return entries
    end = system_text.find(f"</{RESERVED_TAG_NAME}_{opening.group('nonce')}>", opening.end())
    if end < 0:
        return entries
    block = system_text[opening.end() : end]
    headings = list(_HEADING.finditer(block))
    for position, heading in enumerate(headings):
        stop = headings[position + 1].start() if position + 1 < len(headings) else len(block)
        lines = block[heading.end() : stop].split("\n")
        target = _STORES[heading.group(1)]
        entries[target] = [_entry(line) for line in lines if line.strip()]
    return entries


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".!?").strip()
    return (text[:1].upper() + text[1:] + ".") if text else ""


def _third_person(clause: str) -> str:
    """'prefer short answers' -> 'prefers short answers' (with my/me -> their/them)."""
    words = clause.strip().split()
    if not words:
        return ""
    verb = words[0].lower()
    if verb in _IRREGULAR:
        words[0] = _IRREGULAR[verb]
    elif re.search(r"(s|sh|ch|x|z|o)$", verb):
        words[0] = verb + "es"
    elif re.search(r"[^aeiou]y$", verb):
        words[0] = verb[:-1] + "ies"
    else:
        words[0] = verb + "s"
    rest = [_PRONOUNS.get(word.lower(), word) for word in words[1:]]
    return " ".join([words[0], *rest])


def _user_fact(text: str) -> str | None:
    """A fact about the user in the third person, or None when the text is not one."""
    name = _NAME.search(text)
    if name:
        return _sentence(f"The user's name is {name.group('name').strip()}")
    clause = _I_CLAUSE.match(text.strip())
    if clause:
        return _sentence("The user " + _third_person(clause.group("rest")))
    return None


def _next_date(year: int, month: int, day: int, today: date) -> date | None:
    """That day this year (or month), or the next one when it has passed; None if impossible."""
    for offset in range(0, 13):
        y, m = (year + (month - 1 + offset) // 12, (month - 1 + offset) % 12 + 1)
        try:
            candidate = date(y, m, day)
        except ValueError:
            continue
        if candidate >= today:
            return candidate
    return None


def until_date(when: str, today: date) -> date | None:
    """'the 20th', 'December 20', '20 March', '2027-01-15' as the last day the fact holds (the
    next such day on or after `today`); None when the phrase is none of these."""
    text = when.strip().rstrip(".!?").strip()
    iso = _ISO_DAY.match(text)
    if iso:
        try:
            return date.fromisoformat(iso.group("iso"))
        except ValueError:
            return None
    day_only = _DAY_OF_MONTH.match(text)
    if day_only:
        day = int(day_only.group("day"))
        found = _next_date(today.year, today.month, day, today)
        return found if found is not None and 1 <= day <= 31 else None
    month_day = _MONTH_DAY.match(text)
    if month_day:
        name = (month_day.group("month") or month_day.group("month2") or "").lower()
        month = _MONTHS.get(name) or _MONTHS.get(name[:3])
        day = int(month_day.group("day") or month_day.group("day2"))
        if month is None:
            return None
        for year in (today.year, today.year + 1):
            try:
                candidate = date(year, month, day)
            except ValueError:
                return None
            if candidate >= today:
                return candidate
    return None


def _called_remove(message: Mapping[str, Any]) -> bool:
    """Whether the assistant's tool call before a result removed an entry (to word the reply)."""
    for call in message.get("tool_calls") or ():
        try:
            arguments = json.loads(call.get("function", {}).get("arguments") or "{}")
        except ValueError:
            continue
        operations = arguments.get("operations") if isinstance(arguments, dict) else None
        if any(isinstance(op, dict) and op.get("action") == "remove" for op in operations or ()):
            return True
    return False


def _called(message: Mapping[str, Any], name: str) -> bool:
    calls = message.get("tool_calls") or ()
    return any(call.get("function", {}).get("name") == name for call in calls)


def _after_search(result: str) -> str:
    """The search results, quoted as found (snippets already bounded by the tool)."""
    try:
        payload = json.loads(result)
    except ValueError:
        payload = {}
    found = payload.get("results") if isinstance(payload, dict) else None
    if not isinstance(found, list) or not found:
        status = payload.get("status") if isinstance(payload, dict) else None
        if status == "unavailable":
            return "Search is unavailable right now, so I cannot look that up."
        return "I found nothing about that in our earlier conversations."
    quotes = [
        f'In "{item.get("conversation", "")}" ({item.get("role", "")}, {item.get("date", "")}): '
        f"{item.get('snippet', '')}"
        for item in found
        if isinstance(item, dict)
    ]
    return "From our earlier conversations:\n\n" + "\n\n".join(quotes)


def _targets(request: ChatRequest) -> list[str]:
    """The `target` enum of the memory tool the request offers (empty when not offered)."""
    for tool in request.tools:
        function = tool.get("function", {})
        if function.get("name") == MEMORY_TOOL:
            parameters = function.get("parameters", {})
            item = parameters.get("properties", {}).get("operations", {}).get("items", {})
            return list(item.get("properties", {}).get("target", {}).get("enum", []))
    return []


class OfflineModel:
    """Reads the system prompt it is given and the last message; answers deterministically."""

    async def __call__(self, request: ChatRequest) -> Reply:
        return self.reply(request)

    def reply(self, request: ChatRequest) -> Reply:
        last = request.messages[-1] if request.messages else {}
        if last.get("role") == "tool":
            before = request.messages[-2] if len(request.messages) > 1 else {}
            if _called(before, SEARCH_TOOL):
                return Text(_after_search(content_text(last.get("content"))))
            return Text(self._after_tool(content_text(last.get("content")), _called_remove(before)))
        text = content_text(last.get("content")).strip()
        lowered = text.lower()
        can_write = MEMORY_TOOL in request.tool_names
        entries = memory_entries(request.system_text())

        search = _SEARCH.match(text)
        if search and SEARCH_TOOL in request.tool_names:
            arguments = {"query": search.group("topic"), "limit": 3}
            return ToolCalls((ToolCall(SEARCH_TOOL, arguments, self._call_id(request)),))
        if "what do you remember" in lowered:
            return Text(self._recall(entries))
        timed = _UNTIL_FACT.match(text)
        if timed:
            last_day = until_date(timed.group("when"), datetime.now(UTC).date())
            clause = re.sub(r"^i'm\b", "I am", timed.group("fact"), flags=re.I)
            fact = _user_fact(clause)
            if last_day is not None and fact is not None:
                return self._save("user", fact, can_write, request, until=last_day.isoformat())
        forget = _FORGET.match(text)
        if forget:
            return self._forget(forget.group("phrase"), entries, can_write, request)
        remember = _REMEMBER.match(text)
        if remember:
            rest = remember.group("rest")
            fact = _user_fact(rest)
            if fact is not None:
                return self._save("user", fact, can_write, request)
            # A fact about the work: the project's document in a project (its tool offers the
            # `project` target), else the general one.
            work = "project" if "project" in _targets(request) else "memory"
            return self._save(work, _sentence(rest), can_write, request)
        if re.match(r"^i prefer\b", lowered) or _NAME.search(text):
            fact = _user_fact(text)
            if fact is not None:
                return self._save("user", fact, can_write, request)
        if "long" in lowered or "story" in lowered:
            return Text(LONG_ANSWER)
        return Text(OFFLINE_NOTICE)

    @staticmethod
    def _call_id(request: ChatRequest) -> str:
        done = sum(1 for message in request.messages if message.get("role") == "tool")
        return f"call_offline_{done + 1}"

    def _save(
        self,
        target: str,
        fact: str,
        can_write: bool,
        request: ChatRequest,
        until: str | None = None,
    ) -> Reply:
        if not can_write:
            return Text("Memory is switched off here, so I cannot save that.")
        operation = {"target": target, "action": "add", "content": fact}
        if until is not None:  # remember-until: forgotten after that day
            operation["until"] = until
        return ToolCalls(
            (ToolCall(MEMORY_TOOL, {"operations": [operation]}, self._call_id(request)),)
        )

    def _forget(
        self, phrase: str, entries: dict[str, list[str]], can_write: bool, request: ChatRequest
    ) -> Reply:
        needle = phrase.strip().rstrip(".!?").strip()
        needles = [needle.lower()]
        clause = _I_CLAUSE.match(needle)
        if clause:  # "I prefer tea" is stored as "The user prefers tea."
            needles.append(_third_person(clause.group("rest")).lower())
        needles.append(re.sub(r"\bmy\b", "user's", needle, flags=re.I).lower())
        for target in ("user", "project", "memory"):
            for entry in entries[target]:
                if any(candidate and candidate in entry.lower() for candidate in needles):
                    if not can_write:
                        return Text("Memory is switched off here, so I cannot change it.")
                    operation = {"target": target, "action": "remove", "match": entry}
                    return ToolCalls(
                        (
                            ToolCall(
                                MEMORY_TOOL, {"operations": [operation]}, self._call_id(request)
                            ),
                        )
                    )
        return Text("I have nothing in memory that matches that, so there is nothing to forget.")

    @staticmethod
    def _recall(entries: dict[str, list[str]]) -> str:
        remembered = entries["user"] + entries["project"] + entries["memory"]
        if not remembered:
            return "I do not remember anything yet."
        return "Here is what I remember: " + " ".join(
            entry if entry.endswith((".", "!", "?")) else entry + "." for entry in remembered
        )

    @staticmethod
    def _after_tool(result: str, removed: bool) -> str:
        try:
            payload = json.loads(result)
        except ValueError:
            payload = {}
        status = payload.get("status") if isinstance(payload, dict) else None
        if status == "staged":
            if payload.get("save_mode") == "ask":
                # Nothing is saved before the person accepts: the answer says so (issue 34).
                return (
                    "I'll ask you before forgetting that."
                    if removed
                    else "I'll ask you before saving that."
                )
            if payload.get("save_mode") == "unknown":
                return "I'll save that unless you review changes first."
            return "Forgotten." if removed else "Saved."
        if status == "rejected":
            return f"I could not save that: {payload.get('reason', 'it was rejected')}"
        if status == "unavailable":
            return "Memory is unavailable, nothing was saved."
        return "Done."
