"""The gateway's view of the fleet: which names exist in which namespace, and what serves them.

Built (pure) from the ModelDeployments, ModelRoutes and provider-key Secrets the watches hold,
and the approved nodes (`trust`): a replica counts only on an approved node, and carries the
`Authorization` value that node's data plane accepts.
A name resolves within the caller's scope (the namespaces of its API key, in their order): in one
namespace a ModelRoute's name wins over a ModelDeployment's served name; across namespaces the
first namespace of the scope that has the name wins. Nothing outside the scope is visible.
An external backend gets its provider key only where the key's Secret allows both the route's
namespace and the backend's URL (`mlxfleet_operator.api.providerkeys`, the policy the operator's
ModelRoute status applies too); otherwise the backend is unusable, and says why.
May import: the standard library, mlxfleet_operator.api, mlxfleet_agent.contract. Called by:
plan, the proxy, listing, the watches.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from mlxfleet_agent import contract
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import modelroute as mroute
from mlxfleet_operator.api import providerkeys as providers

ALL_NAMESPACES: tuple[str, ...] = ("*",)


@dataclass(frozen=True, slots=True)
class Replica:
    """One ready replica: an agent data plane serving a deployment's slot."""

    id: str  # <namespace>/<deployment>@<node>
    node: str
    url: str  # the agent's data-plane base URL (http://host:port)
    auth: bytes = b""  # the Authorization header value its node accepts (b"": none)


@dataclass(frozen=True, slots=True)
class Deployment:
    """A ModelDeployment as the gateway uses it."""

    namespace: str
    name: str
    served_name: str
    replicas: tuple[Replica, ...]  # ready ones only
    capacity: int  # spec.maxConcurrency: requests one replica serves at once
    slot: str | None = None  # the agent slot (status.placements[].slot): sent as x-mlxfleet-slot
    max_tokens: int | None = None  # spec.server.maxTokens
    context_length: int = 8192  # spec.contextLength
    # spec.minReplicas 0 and not off: without a ready replica its requests wait (the activator)
    wakeable: bool = False
    # placed replicas whose agent has the slot and loads it: its gate holds requests until ready
    starting: tuple[Replica, ...] = ()

    @property
    def ready(self) -> bool:
        return bool(self.replicas)

    def completion_tokens(self, asked: int | None) -> int:
        """The most tokens one answer may generate here (the agent clamps every request to it)."""
        return contract.completion_cap(
            asked=asked, max_tokens=self.max_tokens, context_length=self.context_length
        )

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class External:
    """An OpenAI-compatible endpoint outside the fleet."""

    id: str  # external:<namespace>/<route>/<backend>
    url: str
    model: str
    api_key: str | None
    problem: str | None = None  # why it cannot be used (its key Secret is missing, refuses...)

    @property
    def ready(self) -> bool:
        return self.problem is None


Target = Deployment | External


@dataclass(frozen=True, slots=True)
class Backend:
    """One backend of a compiled rule: its name, weight and what it points at (None: missing)."""

    name: str
    weight: int
    target: Target | None
    missing: str | None = None  # why target is None


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    match: mroute.RuleMatch
    backends: tuple[Backend, ...]


@dataclass(frozen=True, slots=True)
class Route:
    """A ModelRoute with its backends resolved against the deployments of its namespace."""

    namespace: str
    name: str
    names: tuple[str, ...]
    rules: tuple[Rule, ...]
    fallback: tuple[Backend, ...] = ()
    fallback_when: frozenset[mroute.FallbackWhen] = frozenset()
    saturated_at: int | None = None


@dataclass(frozen=True, slots=True)
class Resolved:
    """What a requested name means for one caller."""

    namespace: str
    name: str
    route: Route | None = None
    deployment: Deployment | None = None


@dataclass
class Catalog:
    """Names per namespace; immutable once built (the watches build a new one on change)."""

    deployments: dict[tuple[str, str], Deployment] = field(default_factory=dict)
    routes: dict[str, dict[str, Route]] = field(default_factory=dict)  # ns -> name -> route
    served: dict[str, dict[str, Deployment]] = field(default_factory=dict)  # ns -> served name

    def namespaces(self, scope: Sequence[str]) -> list[str]:
        """The namespaces a scope covers, in its order (`*`: all, sorted)."""
        known = sorted(set(self.routes) | set(self.served))
        out: list[str] = []
        for ns in scope:
            for found in known if ns == "*" else [ns]:
                if found not in out:
                    out.append(found)
        return out

    def resolve(self, scope: Sequence[str], model: str) -> Resolved | None:
        for ns in self.namespaces(scope):
            route = self.routes.get(ns, {}).get(model)
            if route is not None:
                return Resolved(ns, model, route=route)
            dep = self.served.get(ns, {}).get(model)
            if dep is not None:
                return Resolved(ns, model, deployment=dep)
        return None

    def externals(self) -> Iterator[External]:
        """Every external backend of every route (rules and fallback)."""
        for routes in self.routes.values():
            for route in routes.values():
                for backend in [*(b for r in route.rules for b in r.backends), *route.fallback]:
                    if isinstance(backend.target, External):
                        yield backend.target

    def listed(self, scope: Sequence[str]) -> list[Resolved]:
        """What GET /v1/models shows: every route name and every ready deployment in scope,
        each name once (the first namespace of the scope wins)."""
        seen: dict[str, Resolved] = {}
        for ns in self.namespaces(scope):
            for name, route in sorted(self.routes.get(ns, {}).items()):
                seen.setdefault(name, Resolved(ns, name, route=route))
            for name, dep in sorted(self.served.get(ns, {}).items()):
                if dep.ready or dep.wakeable:  # a sleeping model is there: a request wakes it
                    seen.setdefault(name, Resolved(ns, name, deployment=dep))
        return list(seen.values())


_STARTING = frozenset({mdep.PlacementPhase.PENDING, mdep.PlacementPhase.LOADING})


def deployment(md: mdep.ModelDeployment, nodes: Mapping[str, bytes]) -> Deployment:
    """A ModelDeployment's ready replicas (ready placements with an endpoint) on the approved
    `nodes` (name -> the Authorization value its data plane accepts); none elsewhere. For one
    that may sleep (spec.minReplicas 0), the replicas it is bringing up on approved nodes too:
    placed (the operator's PUT reached the agent: an error would be the placement's message),
    not yet ready."""
    namespace, name = md.metadata.namespace or "", md.metadata.name or ""
    placed = sorted(
        (p for p in md.status.placements if p.endpoint and p.node in nodes), key=lambda p: p.node
    )

    def replica(p: mdep.PlacementStatus) -> Replica:
        assert p.endpoint is not None
        return Replica(
            id=f"{namespace}/{name}@{p.node}",
            node=p.node,
            url=p.endpoint.rstrip("/"),
            auth=nodes[p.node],
        )

    replicas = tuple(replica(p) for p in placed if p.ready)
    served = md.status.served_name or md.served_name()
    slot = next((p.slot for p in md.status.placements if p.slot), None)
    wakeable = md.spec.min_replicas == 0 and md.spec.replicas > 0
    starting = tuple(
        replica(p)
        for p in placed
        if wakeable
        and not p.ready
        and p.endpoint
        and p.slot
        and p.phase in _STARTING
        and (p.phase == mdep.PlacementPhase.LOADING or p.message is None)
    )
    return Deployment(
        namespace,
        name,
        served,
        replicas,
        capacity=md.spec.max_concurrency,
        slot=slot,
        max_tokens=md.spec.server.max_tokens,
        context_length=md.spec.context_length,
        wakeable=wakeable,
        starting=starting,
    )


def _backend(
    namespace: str,
    route: str,
    index: int,
    spec: mroute.RouteBackend,
    deployments: Mapping[tuple[str, str], Deployment],
    keys: Mapping[str, providers.ProviderKey],
) -> Backend:
    name = spec.display_name(index)
    if spec.deployment is not None:
        found = deployments.get((namespace, spec.deployment))
        missing = None if found else f"ModelDeployment {namespace}/{spec.deployment} not found"
        return Backend(name, spec.weight, found, missing)
    ext = spec.external
    assert ext is not None  # the model guarantees exactly one of deployment / external
    api_key, problem = None, None
    ref = ext.api_key_secret_ref
    if ref is not None:
        secret = keys.get(ref.name)
        if secret is None:
            problem = f"provider-key Secret {ref.name} not found"
        elif not secret.allows(namespace):
            problem = f"provider-key Secret {ref.name} does not allow namespace {namespace}"
        elif not secret.may_send_to(ext.url):
            problem = secret.refuses(ext.url)
        elif ref.key not in secret.data:
            problem = f"provider-key Secret {ref.name} has no key {ref.key!r}"
        else:
            api_key = secret.data[ref.key]
    target = External(
        id=f"external:{namespace}/{route}/{name}",
        url=ext.url.rstrip("/"),
        model=ext.model,
        api_key=api_key,
        problem=problem,
    )
    return Backend(name, spec.weight, target)


def compile_route(
    mr: mroute.ModelRoute,
    deployments: Mapping[tuple[str, str], Deployment],
    keys: Mapping[str, providers.ProviderKey],
) -> Route:
    namespace, name = mr.metadata.namespace or "", mr.metadata.name or ""
    rules = tuple(
        Rule(
            name=rule.name,
            match=rule.match,
            backends=tuple(
                _backend(namespace, name, i, b, deployments, keys)
                for i, b in enumerate(rule.backends)
            ),
        )
        for rule in mr.spec.rules
    )
    fb = mr.spec.fallback
    return Route(
        namespace=namespace,
        name=name,
        names=tuple(mr.names()),
        rules=rules,
        fallback=tuple(
            _backend(namespace, name, i, b, deployments, keys)
            for i, b in enumerate(fb.backends if fb else ())
        ),
        fallback_when=frozenset(fb.when) if fb else frozenset(),
        saturated_at=fb.saturated_at if fb else None,
    )


def build(
    deployments: Iterable[mdep.ModelDeployment],
    routes: Iterable[mroute.ModelRoute],
    provider_keys: Iterable[providers.ProviderKey] = (),
    *,
    nodes: Mapping[str, bytes],
) -> Catalog:
    """The catalog of everything watched; replicas only on `nodes` (`deployment`)."""
    deps = {(d.namespace, d.name): d for d in (deployment(md, nodes) for md in deployments)}
    keys = {k.name: k for k in provider_keys}
    cat = Catalog(deployments=deps)
    for dep in sorted(deps.values(), key=lambda d: (d.namespace, d.name)):
        served = cat.served.setdefault(dep.namespace, {})
        # two deployments serving one name: the one with ready replicas, else the first by name
        if dep.served_name not in served or (dep.ready and not served[dep.served_name].ready):
            served[dep.served_name] = dep
    for mr in sorted(routes, key=lambda r: (r.metadata.namespace or "", r.metadata.name or "")):
        route = compile_route(mr, deps, keys)
        names = cat.routes.setdefault(route.namespace, {})
        for name in route.names:
            names.setdefault(name, route)
    return cat
