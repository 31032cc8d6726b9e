"""Which backend serves a request: the route's first matching rule, a weighted pick among its
ready backends, then the fallback chain and when to use it.

`plan(resolved, traits, rng=...)` is pure: `rng()` returns a float in [0, 1) (injected, so tests
are reproducible). Weights count over the rule's *ready* backends (the split in force); when none
is ready the first weighted backend is the primary, and the fallback chain (if the route says
`Unavailable`) takes over.
May import: the standard library, catalog, traits, errors, mlxfleet_operator.api.
Called by: the proxy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlxfleet_gateway.core import catalog, errors, traits
from mlxfleet_operator.api import modelroute as mroute

When = mroute.FallbackWhen


@dataclass(frozen=True, slots=True)
class Step:
    """A backend to try, and the name it is reported under."""

    name: str
    target: catalog.Target
    fallback: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    namespace: str
    requested: str
    route: str | None
    rule: str | None
    primary: Step | None  # None: the rule's backends do not exist (yet)
    fallback: tuple[Step, ...] = ()
    fallback_when: frozenset[mroute.FallbackWhen] = frozenset()
    saturated_at: int | None = None

    def falls_back_on(self, when: mroute.FallbackWhen) -> bool:
        return bool(self.fallback) and when in self.fallback_when

    def completion_tokens(self, asked: int | None, *, external_default: int) -> int:
        """The most tokens an answer may generate wherever this plan may send the request: a
        deployment's cap for it (the slot's `maxTokens`, which the agent enforces), an external
        backend's `asked` (else `external_default`: its provider's default is unknown here)."""
        caps = [
            s.target.completion_tokens(asked)
            if isinstance(s.target, catalog.Deployment)
            else (asked or external_default)
            for s in (self.primary, *self.fallback)
            if s is not None
        ]
        return max(caps, default=asked or external_default)


def matches(match: mroute.RuleMatch, requested: str, req: traits.Traits) -> bool:
    """Every field the rule sets fits the request."""
    if match.models is not None and requested not in match.models:
        return False
    if match.has_tools is not None and match.has_tools != req.has_tools:
        return False
    tokens = req.prompt_tokens_estimate
    if match.min_prompt_tokens is not None and tokens < match.min_prompt_tokens:
        return False
    if match.max_prompt_tokens is not None and tokens > match.max_prompt_tokens:
        return False
    return all(req.headers.get(h.name) in h.values for h in match.headers)


def _ready(backend: catalog.Backend) -> bool:
    return backend.target is not None and backend.target.ready


def choose(backends: tuple[catalog.Backend, ...], rng: Callable[[], float]) -> catalog.Backend:
    """A weighted pick among the ready backends (all weighted ones when none is ready)."""
    weighted = [b for b in backends if b.weight > 0]
    live = [b for b in weighted if _ready(b)] or weighted
    total = sum(b.weight for b in live)
    point = rng() * total
    for backend in live:
        point -= backend.weight
        if point < 0:
            return backend
    return live[-1]


def plan(resolved: catalog.Resolved, req: traits.Traits, *, rng: Callable[[], float]) -> Plan:
    """The plan for one request; 404 when the route has no rule for it."""
    if resolved.deployment is not None:
        dep = resolved.deployment
        return Plan(resolved.namespace, resolved.name, None, None, Step(dep.name, dep))
    route = resolved.route
    assert route is not None
    rule = next((r for r in route.rules if matches(r.match, resolved.name, req)), None)
    if rule is None:
        raise errors.GatewayError(
            404,
            f"no rule of the route for `{resolved.name}` matches this request",
            code="no_matching_rule",
            param="model",
        )
    picked = choose(rule.backends, rng)
    primary = Step(picked.name, picked.target) if picked.target is not None else None
    fallback = tuple(
        Step(b.name, b.target, fallback=True) for b in route.fallback if b.target is not None
    )
    return Plan(
        namespace=resolved.namespace,
        requested=resolved.name,
        route=route.name,
        rule=rule.name,
        primary=primary,
        fallback=fallback,
        fallback_when=route.fallback_when,
        saturated_at=route.saturated_at,
    )
