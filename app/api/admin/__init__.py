"""Operator routes: the feature flag, usage and the audit log."""
