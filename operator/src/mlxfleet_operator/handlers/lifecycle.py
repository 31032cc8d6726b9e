"""Operator startup and shutdown: logging in to the API server (the kubernetes client's config:
in-cluster ServiceAccount or $KUBECONFIG; at most `apisession.KUBE_CONNECTIONS` requests at
once), kopf's own settings (our finalizer and annotation prefix, backoff from --poll-seconds),
closing the shared runtime, and the liveness probe.

`main` builds the runtime (settings, Kubernetes facade, fleet view, metrics server) before kopf
starts and hands it to every handler in kopf's memo; these handlers only tune kopf and clean up.
May import: kopf, adapters, api. Called by: kopf.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import apisession, runtime
from mlxfleet_operator.api import resources


async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config = runtime.of(memo).config
    settings.persistence.finalizer = resources.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=resources.ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = DiffBase(
        prefix=resources.ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    # Events come from explicit Event posts (Ready flips, plans); not from every log line.
    settings.posting.level = logging.WARNING
    settings.execution.default_backoff = min(10.0, max(1.0, config.poll_seconds))
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330


class DiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's record of the spec it last handled (`last-handled-configuration`, with its
    `kopf-managed` marker), kept on every kind but ModelDeployments. Their changes are noticed
    by a handler of watch events that remembers in memory what it ran for
    (`deployments.changed`); kopf would still write the record on each one's first sight and
    change, for its delete handler alone, never to read it (at 500 x 1,000: 2,975 object
    PATCHes while converging, about a third of them this record)."""

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        if body.get("kind") == resources.MODEL_DEPLOYMENT.kind:
            return None
        return super().fetch(body=body)

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if body.get("kind") != resources.MODEL_DEPLOYMENT.kind:
            super().store(body=body, patch=patch, essence=essence)


async def close(memo: kopf.Memo, **_: Any) -> None:
    found = memo.get(runtime.KEY)
    if isinstance(found, runtime.Runtime):
        await found.aclose()


def known_nodes(memo: kopf.Memo, **_: Any) -> int:
    """Liveness: the runtime exists; reports how many nodes the fleet view holds."""
    return len(runtime.of(memo).fleet.entries)


def register(registry: kopf.OperatorRegistry, config: opsettings.OperatorSettings) -> None:
    # An explicit registry has none of kopf's fallback logins: name the one we rely on (the
    # credentials of the operator's own client, in a session with a bound on connections).
    kubeconfig = config.kubeconfig

    async def login(**kwargs: Any) -> kopf.AiohttpSession:
        return await apisession.login(kubeconfig=kubeconfig, **kwargs)

    kopf.on.login(id="login", errors=kopf.ErrorsMode.IGNORED, registry=registry)(login)
    kopf.on.startup(registry=registry)(configure)
    kopf.on.cleanup(registry=registry)(close)
    kopf.on.probe(id="nodes", registry=registry)(known_nodes)
