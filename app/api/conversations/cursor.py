"""The conversation list's page cursor: the last listed conversation's sort key (pinned, updated
at, id), as opaque URL-safe text. A cursor that does not decode is the caller's mistake (422)."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime

from app.conversations.repository import ListPosition
from app.conversations.service import is_conversation_id


class CursorError(ValueError):
    """The text is not a cursor this service handed out."""


def encode(position: ListPosition) -> str:
    payload = [position.pinned, position.updated_at.isoformat(timespec="microseconds"), position.id]
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str) -> ListPosition:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        pinned, updated_at, conversation_id = json.loads(raw)
        moment = datetime.fromisoformat(updated_at)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError) as error:
        raise CursorError(cursor) from error
    if not isinstance(pinned, bool) or not isinstance(conversation_id, str):
        raise CursorError(cursor)
    if moment.tzinfo is not None or not is_conversation_id(conversation_id):
        raise CursorError(cursor)
    return ListPosition(pinned, moment, conversation_id)
