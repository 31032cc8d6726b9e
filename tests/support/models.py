"""Fixtures: models (see module owner)."""
