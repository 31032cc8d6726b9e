"""Fixtures: s3 (see module owner)."""
