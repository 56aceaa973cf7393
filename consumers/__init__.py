"""Runs coordinator members (listeners) and producers as long-lived processes."""
