"""Browser sessions: the cookie, the server-side rows behind it, and the OpenID Connect login."""
