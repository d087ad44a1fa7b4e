"""The conversation routes and their list cursor."""
