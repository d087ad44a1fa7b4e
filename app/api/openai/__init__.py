"""The edges of `/openai/v1`: CORS, errors in OpenAI's shape, its OpenAPI description (the route
itself is app/api/openai_compat.py)."""
