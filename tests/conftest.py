"""Shared pytest wiring: fixture modules live in tests/support/ and are loaded as plugins."""

pytest_plugins = [
    "tests.support.cluster",
    "tests.support.models",
    "tests.support.oci",
    "tests.support.s3",
    "tests.support.tools",
]
