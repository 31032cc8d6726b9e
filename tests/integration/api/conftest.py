"""Fixtures of the API tests: one event loop per test for the operator's Kubernetes client.

The operator's client (`adapters.kubeapi`) opens its connection pool on the loop that first uses
it and belongs to that loop, as in the operator (kopf's loop): a test that runs several steps
runs them all on `run`'s loop and closes the client there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

Run = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture
def run() -> Iterator[Run]:
    with asyncio.Runner() as runner:
        yield runner.run
