"""The memory routes: entries, history and undo, proposals, import."""
