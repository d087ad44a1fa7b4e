"""The MCP server: the memory tools for other agents (Claude Desktop, Cursor, ...)."""
