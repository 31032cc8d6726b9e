"""Fixtures: cluster (see module owner)."""
