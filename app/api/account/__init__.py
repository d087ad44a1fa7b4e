"""The person's account: browser sign-in, dev tokens, erasure of everything."""
