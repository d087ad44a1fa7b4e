"""Semantic conversation search, opt-in: embeddings of stored messages, made off the turn's path
by a worker, searched per owner and fused with the lexical ranking (docs/conversation-search.md).

client: the OpenAI-compatible endpoint. vectors: packing and checks. store: the vectors and the
job queue in the database. worker: embeds the backlog. fusion: reciprocal rank fusion.
semantic: the query side that search calls, falling back to lexical on any failure.
"""
