"""ModelRoute status (pure): each backend's readiness, the traffic split in force, the verdict.

A deployment backend is ready when its ModelDeployment has ready replicas. An external backend
is ready when it names no API key, or when its provider-key Secret exists with the provider-key
type, allows the route's namespace and may be sent to the backend's URL (`api.providerkeys`,
the gateway's own judgement): the handler passes what it saw of each Secret named
(`KeySeen`: type and annotations, never the data), and a Secret it could not look at makes the
backend not ready with a message saying so (unknown is not ready). The operator never calls
providers: the key inside the Secret and the endpoint are the gateway's to try.
The split in force counts only ready backends (0 for each when a rule has none). Ready is True
when every rule has a ready backend; False with FallbackOnly when some rule can only be served
by the fallback chain, NoReadyBackend when not even that, BackendNotFound when a backend (of a
rule or of the fallback) names a ModelDeployment that does not exist in the route's namespace or
a provider-key Secret it cannot use. Each message is said once.
May import: the standard library, `api`, `core.kit.conditions`. Called by: handlers.modelroutes,
adapters.kube (the `KeySeen` it answers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modelroute as mroute
from mlxfleet_operator.api import providerkeys
from mlxfleet_operator.core.kit import conditions

R = cond.Reason
FALLBACK = "fallback"


@dataclass(frozen=True, slots=True)
class KeySeen:
    """What the operator could see of a provider-key Secret without its data: its type and
    annotations, or why it could not look (`error`: forbidden, API error)."""

    type: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ProviderKeys:
    """The provider-key Secrets a route names, as the handler found them in `namespace` (the
    gateway's): name -> what was seen, None when the Secret does not exist."""

    namespace: str
    seen: Mapping[str, KeySeen | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Row:
    status: mroute.BackendStatus
    not_found: bool  # names something that does not exist (or cannot be used): BackendNotFound


def key_refs(mr: mroute.ModelRoute) -> list[str]:
    """The provider-key Secrets the route's external backends name (each once, in order)."""
    spec = mr.spec
    every = [b for r in spec.rules for b in r.backends]
    every += spec.fallback.backends if spec.fallback is not None else []
    names = [
        b.external.api_key_secret_ref.name
        for b in every
        if b.external is not None and b.external.api_key_secret_ref is not None
    ]
    return list(dict.fromkeys(names))


def _key_problem(
    name: str, seen: KeySeen | None, *, namespace: str, key_namespace: str, url: str
) -> tuple[str | None, bool]:
    """Why the provider-key Secret `name` (in `key_namespace`) cannot be used by a route of
    `namespace` (None: it can) and whether that counts as not found. A missing Secret, one of
    another type and one that does not allow the namespace read the same, so a route author
    learns only whether a key usable by their namespace exists, nothing about other Secrets of
    the gateway's namespace. One that does may still refuse the backend's URL (its allowed-urls
    annotation, judged as the gateway judges it: `api.providerkeys`)."""
    if seen is not None and seen.error is not None:
        return f"cannot tell whether provider-key Secret {name} is usable: {seen.error}", False
    key = None if seen is None else providerkeys.from_secret(name, seen.annotations, {})[0]
    if (
        key is None
        or seen is None
        or seen.type != mroute.PROVIDER_KEY_TYPE
        or not key.allows(namespace)
    ):
        return (
            f"provider-key Secret {name} not found: no Secret of that name in {key_namespace} "
            f"has type {mroute.PROVIDER_KEY_TYPE} and lists {namespace} in its annotation "
            f"{mroute.PROVIDER_KEY_NAMESPACES}",
            True,
        )
    if not key.may_send_to(url):
        return key.refuses(url), True
    return None, False


def _backend(
    rule: str,
    index: int,
    spec: mroute.RouteBackend,
    *,
    namespace: str,
    ready_replicas: Mapping[str, int],
    keys: ProviderKeys,
) -> _Row:
    name = spec.display_name(index)
    if spec.external is not None:
        ref = spec.external.api_key_secret_ref
        problem, not_found = (None, False)
        if ref is not None:
            if ref.name in keys.seen:
                problem, not_found = _key_problem(
                    ref.name,
                    keys.seen[ref.name],
                    namespace=namespace,
                    key_namespace=keys.namespace,
                    url=spec.external.url,
                )
            else:
                problem = f"provider-key Secret {ref.name} was not checked"
        status = mroute.BackendStatus(
            name=name,
            rule=rule,
            kind=mroute.BackendKind.EXTERNAL,
            ready=problem is None,
            message=problem,
        )
        return _Row(status, not_found)
    assert spec.deployment is not None
    replicas = ready_replicas.get(spec.deployment)
    if replicas is None:
        message: str | None = f"ModelDeployment {spec.deployment} not found"
    else:
        message = (
            None if replicas > 0 else f"ModelDeployment {spec.deployment} has no ready replica"
        )
    status = mroute.BackendStatus(
        name=name,
        rule=rule,
        kind=mroute.BackendKind.DEPLOYMENT,
        ready=bool(replicas),
        ready_replicas=replicas,
        message=message,
    )
    return _Row(status, replicas is None)


def status(
    mr: mroute.ModelRoute,
    *,
    ready_replicas: Mapping[str, int],
    now: datetime,
    keys: ProviderKeys | None = None,
) -> mroute.ModelRouteStatus:
    """The whole status; `ready_replicas` maps deployment name (route's namespace) -> ready,
    `keys` what the handler saw of each provider-key Secret of `key_refs(mr)` (unset: none
    looked at, so a backend that names one is not ready: not checked)."""
    spec = mr.spec
    namespace = mr.metadata.namespace or ""
    seen = keys if keys is not None else ProviderKeys(namespace="")
    rows: list[_Row] = []
    split: list[mroute.SplitEntry] = []
    unserved: list[str] = []

    def row(rule: str, index: int, backend: mroute.RouteBackend) -> _Row:
        return _backend(
            rule, index, backend, namespace=namespace, ready_replicas=ready_replicas, keys=seen
        )

    for rule in spec.rules:
        rule_rows = [row(rule.name, i, b) for i, b in enumerate(rule.backends)]
        rows += rule_rows
        ready = {r.status.name for r in rule_rows if r.status.ready}
        shares = mroute.split(rule.backends, ready=ready)
        split += [
            mroute.SplitEntry(rule=rule.name, backend=name, percent=round(pct, 2))
            for name, pct in shares.items()
        ]
        if not ready:
            unserved.append(rule.name)
    fallback = spec.fallback.backends if spec.fallback is not None else []
    fb_rows = [row(FALLBACK, i, b) for i, b in enumerate(fallback)]
    rows += fb_rows
    backends = [r.status for r in rows]
    missing = list(dict.fromkeys(r.status.message or "" for r in rows if r.not_found))
    ready_count = sum(b.ready for b in backends)
    if missing:
        verdict = conditions.Verdict(False, R.BACKEND_NOT_FOUND, "; ".join(missing))
    elif not unserved:
        verdict = conditions.Verdict(True, R.READY, f"{ready_count}/{len(backends)} backends ready")
    elif any(r.status.ready for r in fb_rows):
        verdict = conditions.Verdict(
            False,
            R.FALLBACK_ONLY,
            f"rules {', '.join(unserved)} have no ready backend: served by the fallback",
        )
    else:
        verdict = conditions.Verdict(
            False, R.NO_READY_BACKEND, f"rules {', '.join(unserved)} have no ready backend"
        )
    generation = mr.metadata.generation
    return mroute.ModelRouteStatus(
        observed_generation=generation,
        conditions=conditions.apply_verdict(
            mr.status.conditions, verdict, generation=generation, now=now
        ),
        names=mr.names(),
        backends_ready=f"{ready_count}/{len(backends)}",
        backends=backends,
        split=split,
    )
