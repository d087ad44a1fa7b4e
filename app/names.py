"""Names the model sees, shared by the agent, the offline model, the memory layer and telemetry:
constants at the bottom, so that none of them imports another's layer for a name."""

MEMORY_TOOL_NAME = "memory_update"
SEARCH_TOOL_NAME = "conversation_search"
# The tag around the memory block of the system prompt (its opening carries a nonce).
RESERVED_TAG_NAME = "persistent_memory_data"
