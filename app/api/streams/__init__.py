"""Long-lived responses: the SSE encoder and response, the UI message stream, their bounds."""
