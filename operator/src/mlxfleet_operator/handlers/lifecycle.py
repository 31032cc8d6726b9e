"""Operator startup and shutdown: kopf settings (our finalizer and annotation prefix), the shared
runtime, the metrics server; and the liveness probe.

May import: kopf, adapters, api, settings. Called by: kopf.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import runtime
from mlxfleet_operator.api import resources


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config = opsettings.current()
    settings.persistence.finalizer = resources.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=resources.ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=resources.ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    # Events come from explicit kopf.event calls (Ready flips, plans); not from every log line.
    settings.posting.level = logging.WARNING
    settings.execution.default_backoff = min(10.0, max(1.0, config.poll_seconds))
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    memo[runtime.KEY] = runtime.start(config)


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    found = memo.get(runtime.KEY)
    if isinstance(found, runtime.Runtime):
        await found.aclose()


@kopf.on.probe(id="nodes")
def known_nodes(memo: kopf.Memo, **_: Any) -> int:
    """Liveness: the runtime exists; reports how many nodes the fleet view holds."""
    return len(runtime.of(memo).fleet.entries)
