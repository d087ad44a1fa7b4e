"""The memory edit contract, defined once: the operations that the `memory_update` tool offers
the model and that `POST /v1/memory/operations` documents come from this one model.

Validation itself is `parsing.parse_operations` (one code path for the model and for users, with
messages written for the model); this model is the published shape of what it accepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from app.memory.rules import ACTIONS, GENERAL_TARGETS, MAX_OPERATIONS, TARGETS, Action, Target
from app.names import MEMORY_TOOL_NAME as MEMORY_TOOL_NAME

_OPTIONAL_TEXT: dict[str, Any] = {"type": ["string", "null"]}
UNTIL_SCHEMA: dict[str, Any] = {
    "type": ["string", "null"],
    "description": "add/replace only: the entry is forgotten after this ISO 8601 date "
    "(through that day, UTC) or date-time; null or absent: kept until removed (replace keeps "
    "the entry's expiry unless until is given).",
}


class OperationModel(BaseModel):
    """One edit; the owner is never a field."""

    model_config = ConfigDict(extra="forbid")

    target: Annotated[Target, WithJsonSchema({"enum": list(TARGETS)})]
    action: Annotated[Action, WithJsonSchema({"enum": list(ACTIONS)})]
    match: Annotated[str | None, WithJsonSchema(_OPTIONAL_TEXT)] = None
    content: Annotated[str | None, WithJsonSchema(_OPTIONAL_TEXT)] = None
    # Remember-until: add and replace only; a date (through that day, UTC) or a date-time.
    until: Annotated[str | None, WithJsonSchema(UNTIL_SCHEMA)] = None


class OperationsModel(BaseModel):
    """An ordered batch of 1 to 20 edits."""

    model_config = ConfigDict(extra="forbid")

    operations: list[OperationModel] = Field(min_length=1, max_length=MAX_OPERATIONS)


def operations_schema(targets: Sequence[Target] = GENERAL_TARGETS) -> dict[str, Any]:
    """The batch's JSON schema, self-contained (no `$defs`) and without pydantic's titles and
    defaults: exactly the tool parameters a model is given, its `target` enum the targets of
    the scope (outside projects `user` and `memory`, as before projects existed)."""
    schema = OperationsModel.model_json_schema()
    definitions = schema.pop("$defs", {})

    def clean(node: Any) -> Any:
        if isinstance(node, dict):
            reference = node.get("$ref")
            if isinstance(reference, str) and reference.startswith("#/$defs/"):
                return clean(definitions[reference.removeprefix("#/$defs/")])
            return {
                key: clean(value)
                for key, value in node.items()
                if key not in ("title", "description", "default")
            }
        if isinstance(node, list):
            return [clean(item) for item in node]
        return node

    cleaned: dict[str, Any] = clean(schema)
    item = cleaned["properties"]["operations"]["items"]
    item["properties"]["target"] = {"enum": list(targets)}
    item["properties"]["until"] = dict(UNTIL_SCHEMA)  # its description tells the model the rule
    return cleaned
