"""Operator pages in the Django admin: epochs, assignments, revocation progress, shard count changes."""
