"""The built-in offline model: a deterministic OpenAI-compatible chat-completions endpoint, so
that the service runs, and is tested, with no network and no hosted model.

`wire` is the chat-completions format (requests, replies, streamed and plain bodies), `model` the
deterministic answers, `transport` the in-process httpx transport that hands them to the official
`openai` client (so the production client code path runs end to end). `scripts/offline_model.py`
serves the same answers over HTTP.
"""
