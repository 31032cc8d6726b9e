"""ModelRoute (namespaced, `mroute`): names applications ask for, mapped to weighted backends.

Spec: the names clients send as `model`, ordered rules (first match wins) that match request traits
(the requested name, headers such as `x-mlxfleet-task`, whether the request carries tools, the
estimated prompt size) and pick one of their backends by weight, and a fallback chain used when no
local replica is ready, all retries failed or the local replicas are saturated. A backend is a
ModelDeployment in the route's namespace or an external OpenAI-compatible endpoint (URL, model
name, API key from a provider-key Secret in the gateway's namespace).
Status (written by the operator): each backend's readiness and the traffic split in force.
The gateway reads spec; the operator only writes status.
May import: pydantic, the standard library and the sibling api modules.
Called by: the gateway (routing), the operator's ModelRoute status handler, crdgen.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from mlxfleet_operator.api import base, fields, resources
from mlxfleet_operator.api import conditions as cond

NAMES_MAX = 16
RULES_MAX = 32
BACKENDS_MAX = 16
WEIGHT_MAX = 10_000
HEADERS_MAX = 8
PROMPT_TOKENS_MAX = 10_000_000
TASK_HEADER = "x-mlxfleet-task"
PROVIDER_KEY_TYPE = "mlxfleet.io/provider-key"
"""Secret type of an external provider's API key (in the gateway's namespace)."""
PROVIDER_KEY_NAMESPACES = "mlxfleet.io/allowed-namespaces"
"""Annotation of a provider-key Secret: namespaces whose routes may use it (`*`: all)."""
PROVIDER_KEY_URLS = "mlxfleet.io/allowed-urls"
"""Annotation of a provider-key Secret: the URL prefixes it may be sent to (required)."""


HEADER_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
HeaderName = Annotated[str, Field(min_length=1, max_length=128, pattern=HEADER_NAME_PATTERN)]
RULE_NAME_PATTERN = fields.DNS_LABEL_PATTERN
RuleName = Annotated[str, Field(min_length=1, max_length=63, pattern=RULE_NAME_PATTERN)]


def _check_external_url(value: str) -> str:
    try:
        fields.check_agent_url(value)
    except ValueError:
        raise ValueError(
            f"{value!r} must be an http:// or https:// base URL such as https://api.openai.com/v1"
        ) from None
    if "@" in urlsplit(value).netloc:
        raise ValueError(USERINFO_MESSAGE)
    return value


USERINFO_MESSAGE = (
    "must not carry user information (user:password@host): a key goes in apiKeySecretRef, and "
    "https://api.example.com@other.host/ points at other.host"
)
USERINFO_PATTERN = r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@"


ExternalUrl = Annotated[
    str,
    Field(
        min_length=1,  # the scheme rule says what is wrong with a short one (ftp://x)
        max_length=2048,
        json_schema_extra=base.crd(
            base.rule(
                f"self.matches({base.cel_string('^(' + fields.AGENT_URL_PATTERN + ')$')})",
                "must be an http:// or https:// base URL of an OpenAI-compatible API, such as "
                "https://api.openai.com/v1 (no query or fragment)",
            ),
            base.rule(f"!self.matches({base.cel_string(USERINFO_PATTERN)})", USERINFO_MESSAGE),
        ),
    ),
    AfterValidator(_check_external_url),
]


class HeaderMatch(base.ApiModel):
    """A request header that must carry one of the listed values."""

    name: HeaderName = Field(description=f"Header name in lower case, such as {TASK_HEADER}.")
    values: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        min_length=1,
        max_length=32,
        description="Values that match (exact, case-sensitive); any one of them.",
        json_schema_extra=base.crd(list_type="set"),
    )


_PROMPT_RANGE = base.rule(
    "!has(self.minPromptTokens) || !has(self.maxPromptTokens) || "
    "self.minPromptTokens <= self.maxPromptTokens",
    "match.minPromptTokens must not exceed match.maxPromptTokens",
)


class RuleMatch(base.ApiModel):
    """Request traits a rule matches; every field set must match (an empty match matches all)."""

    model_config = ConfigDict(json_schema_extra=base.crd(_PROMPT_RANGE))

    models: list[fields.ServedName] | None = Field(
        default=None,
        max_length=NAMES_MAX,
        description="Requested names (a subset of spec.names) this rule applies to, such as "
        '["auto"]. Unset: any of spec.names.',
        json_schema_extra=base.crd(list_type="set", nullable=False),
    )
    headers: list[HeaderMatch] = Field(
        default_factory=list,
        max_length=HEADERS_MAX,
        description=f"Headers the request must carry, such as {TASK_HEADER}: code.",
        json_schema_extra=base.crd(list_type="map", list_map_keys=("name",)),
    )
    has_tools: bool | None = Field(
        default=None,
        description="true: only requests that offer tools (a non-empty `tools` or `functions`); "
        "false: only requests without. Unset: either.",
    )
    min_prompt_tokens: int | None = Field(
        default=None,
        ge=0,
        le=PROMPT_TOKENS_MAX,
        description="Only prompts of at least this many tokens (estimated as characters / 4).",
        json_schema_extra=base.crd(nullable=False),
    )
    max_prompt_tokens: int | None = Field(
        default=None,
        ge=0,
        le=PROMPT_TOKENS_MAX,
        description="Only prompts of at most this many tokens (estimated as characters / 4).",
        json_schema_extra=base.crd(nullable=False),
    )

    @model_validator(mode="after")
    def _range(self) -> RuleMatch:
        low, high = self.min_prompt_tokens, self.max_prompt_tokens
        if low is not None and high is not None and low > high:
            raise ValueError("match.minPromptTokens must not exceed match.maxPromptTokens")
        names = [h.name for h in self.headers]
        if len(set(names)) != len(names):
            raise ValueError("match.headers must not repeat a header name")
        return self


class ProviderKeyRef(base.ApiModel):
    """A key of a provider-key Secret in the gateway's namespace."""

    name: fields.ObjectName = Field(
        description=f"Name of a Secret of type {PROVIDER_KEY_TYPE} in the gateway's namespace "
        f"({resources.OPERATOR_NAMESPACE}) whose annotation {PROVIDER_KEY_NAMESPACES} lists "
        f"this route's namespace (or `*`) and whose annotation {PROVIDER_KEY_URLS} lists a "
        "prefix of this backend's url (the gateway sends the key nowhere else)."
    )
    key: fields.SecretKey = Field(default="apiKey", description="Key within the Secret's data.")


class ExternalBackend(base.ApiModel):
    """An OpenAI-compatible endpoint outside the fleet (a cloud provider, another server)."""

    url: ExternalUrl = Field(
        description="Base URL of the API, up to and including its version, such as "
        "https://api.openai.com/v1; requests go to <url>/chat/completions etc."
    )
    model: fields.ServedName = Field(description="The `model` value sent to that endpoint.")
    api_key_secret_ref: ProviderKeyRef | None = Field(
        default=None,
        description="Where the endpoint's API key is (sent as a bearer token). Unset: none.",
        json_schema_extra=base.crd(nullable=False),
    )


_ONE_TARGET = base.rule(
    "has(self.deployment) != has(self.external)",
    "a backend names exactly one of deployment or external",
)


class RouteBackend(base.ApiModel):
    """One backend of a rule or of the fallback chain."""

    model_config = ConfigDict(json_schema_extra=base.crd(_ONE_TARGET))

    name: RuleName | None = Field(
        default=None,
        description="Name in status, metrics and the x-mlxfleet-backend header. Default: the "
        "deployment's name, or external-<index> for an external backend.",
        json_schema_extra=base.crd(nullable=False),
    )
    deployment: fields.ObjectName | None = Field(
        default=None,
        description="A ModelDeployment in the route's namespace.",
        json_schema_extra=base.crd(nullable=False),
    )
    external: ExternalBackend | None = Field(
        default=None,
        description="An OpenAI-compatible endpoint outside the fleet.",
        json_schema_extra=base.crd(nullable=False),
    )
    weight: int = Field(
        default=100,
        ge=0,
        le=WEIGHT_MAX,
        description="Relative share of the rule's requests (0-10000); ignored in the fallback "
        "chain, which is tried in order.",
    )

    @model_validator(mode="after")
    def _one_target(self) -> RouteBackend:
        if (self.deployment is None) == (self.external is None):
            raise ValueError("a backend names exactly one of deployment or external")
        return self

    def display_name(self, index: int) -> str:
        """`name`, else the deployment's name, else external-<index>."""
        if self.name:
            return self.name
        if self.deployment:
            return self.deployment
        return f"external-{index}"


def _unique_names(backends: list[RouteBackend]) -> list[RouteBackend]:
    names = [b.display_name(i) for i, b in enumerate(backends)]
    if len(set(names)) != len(names):
        raise ValueError("backends of one rule (or of the fallback) must have distinct names")
    return backends


def _some_weight(backends: list[RouteBackend]) -> list[RouteBackend]:
    if not any(b.weight > 0 for b in backends):
        raise ValueError("a rule needs at least one backend with a weight above 0")
    return _unique_names(backends)


_SOME_WEIGHT = base.rule(
    "self.backends.exists(b, !has(b.weight) || b.weight > 0)",
    "a rule needs at least one backend with a weight above 0",
    field_path=".backends",
)


class RouteRule(base.ApiModel):
    """Requests that match go to one of `backends`, chosen by weight."""

    model_config = ConfigDict(json_schema_extra=base.crd(_SOME_WEIGHT))

    name: RuleName = Field(description="Name of the rule (status, metrics).")
    match: RuleMatch = Field(
        default_factory=RuleMatch,
        description="Traits the request must have; empty matches every request.",
        json_schema_extra=base.crd(default={}),
    )
    backends: Annotated[list[RouteBackend], AfterValidator(_some_weight)] = Field(
        min_length=1, max_length=BACKENDS_MAX, description="Backends and their weights."
    )


class FallbackWhen(StrEnum):
    """When the fallback chain is used."""

    UNAVAILABLE = "Unavailable"  # the chosen backend has no ready replica
    FAILED = "Failed"  # every attempt on the chosen backend failed before an answer
    SATURATED = "Saturated"  # every ready replica is at the saturation limit (or answered 429)


class Fallback(base.ApiModel):
    """Backends tried in order when the rule's backend cannot serve a request."""

    when: list[FallbackWhen] = Field(
        default_factory=lambda: [FallbackWhen.UNAVAILABLE, FallbackWhen.FAILED],
        min_length=1,
        max_length=3,
        description="Unavailable (no ready local replica), Failed (all retries failed before "
        "an answer), Saturated (every ready replica has saturatedAt requests in flight from "
        "this gateway, or answered 429).",
        json_schema_extra=base.crd(list_type="set", default=["Unavailable", "Failed"]),
    )
    saturated_at: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="In-flight requests per replica (counted by each gateway replica) that "
        "make it saturated. Default: 2 x the deployment's spec.maxConcurrency.",
        json_schema_extra=base.crd(nullable=False),
    )
    backends: Annotated[list[RouteBackend], AfterValidator(_unique_names)] = Field(
        min_length=1, max_length=BACKENDS_MAX, description="Backends, tried in this order."
    )


def _unique_rules(rules: list[RouteRule]) -> list[RouteRule]:
    names = [r.name for r in rules]
    if len(set(names)) != len(names):
        raise ValueError("spec.rules must have distinct names")
    return rules


_MODELS_IN_NAMES = base.rule(
    "!has(self.names) || self.rules.all(r, !has(r.match) || !has(r.match.models) || "
    "r.match.models.all(m, m in self.names))",
    "rules[].match.models must be names listed in spec.names",
    field_path=".rules",
)


class ModelRouteSpec(base.ApiModel):
    """Desired routing of a ModelRoute."""

    model_config = ConfigDict(json_schema_extra=base.crd(_MODELS_IN_NAMES))

    names: list[fields.ServedName] | None = Field(
        default=None,
        min_length=1,
        max_length=NAMES_MAX,
        description="The `model` values clients send that this route answers (such as chat, "
        "auto). Unset: metadata.name. In this namespace a route's name wins over a "
        "ModelDeployment serving the same name.",
        json_schema_extra=base.crd(list_type="set", nullable=False),
    )
    rules: Annotated[list[RouteRule], AfterValidator(_unique_rules)] = Field(
        min_length=1,
        max_length=RULES_MAX,
        description="Ordered rules; the first whose match fits the request picks its backend. "
        "A request no rule matches is refused (404).",
        json_schema_extra=base.crd(list_type="map", list_map_keys=("name",)),
    )
    fallback: Fallback | None = Field(
        default=None,
        description="Where requests go when the chosen backend cannot serve them.",
        json_schema_extra=base.crd(nullable=False),
    )

    @model_validator(mode="after")
    def _models_in_names(self) -> ModelRouteSpec:
        if self.names is not None:
            for rule in self.rules:
                extra = set(rule.match.models or ()) - set(self.names)
                if extra:
                    raise ValueError(
                        f"spec.rules[{rule.name}].match.models lists {sorted(extra)}, which "
                        "spec.names does not"
                    )
        return self


class BackendKind(StrEnum):
    DEPLOYMENT = "Deployment"
    EXTERNAL = "External"


class BackendStatus(base.ApiModel):
    """One backend as the operator last saw it."""

    name: str = Field(description="The backend's name (see spec).")
    rule: str = Field(description="The rule it belongs to, or `fallback`.")
    kind: BackendKind = Field(description="Deployment or External.")
    ready: bool = Field(
        default=False,
        description="A deployment: it has ready replicas. External: it names no API key, or "
        f"its provider-key Secret exists in {resources.OPERATOR_NAMESPACE} with type "
        f"{PROVIDER_KEY_TYPE}, allows this namespace and may be sent to the backend's URL "
        f"({PROVIDER_KEY_URLS}) (checked from the Secret's type and "
        "annotations, never its data; the key inside and the endpoint itself are the "
        "gateway's to try, and it ejects one that fails).",
    )
    ready_replicas: int | None = Field(
        default=None, ge=0, description="Ready replicas of the deployment."
    )
    message: str | None = Field(default=None, description="Why it is not ready.")


class SplitEntry(base.ApiModel):
    """The share of a rule's traffic one backend gets now: weights over the ready backends;
    0 for every backend of a rule that has none ready (the fallback, if any, serves it)."""

    rule: str = Field(description="The rule.")
    backend: str = Field(description="The backend.")
    percent: float = Field(ge=0, le=100, description="Share of the rule's requests, 0-100.")


class ModelRouteStatus(base.ApiModel):
    """Observed state of a ModelRoute, written only by the operator."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation this status describes."
    )
    conditions: list[cond.Condition] = Field(
        default_factory=list,
        description=cond.CONDITIONS_DESCRIPTION,
        json_schema_extra=cond.CONDITIONS_EXTRA,
    )
    names: list[str] = Field(default_factory=list, description="The names the route answers.")
    backends_ready: str | None = Field(
        default=None, description="Ready backends out of all, such as 2/3."
    )
    backends: list[BackendStatus] = Field(
        default_factory=list, description="Every backend of every rule and of the fallback."
    )
    split: list[SplitEntry] = Field(
        default_factory=list, description="Traffic split in force per rule."
    )


class ModelRoute(base.ApiModel):
    """Names applications ask for, routed to ModelDeployments or external endpoints: `kubectl
    get mroute`."""

    api_version: Literal["mlxfleet.io/v1alpha1"] = resources.API_VERSION
    kind: Literal["ModelRoute"] = "ModelRoute"
    metadata: base.ObjectMeta = Field(default_factory=base.ObjectMeta)
    spec: ModelRouteSpec
    status: ModelRouteStatus = Field(default_factory=ModelRouteStatus)

    def names(self) -> list[str]:
        """What clients send as `model`: spec.names, else [metadata.name]."""
        if self.spec.names:
            return list(self.spec.names)
        if not self.metadata.name:
            raise ValueError("ModelRoute has neither spec.names nor metadata.name")
        return [self.metadata.name]


def split(backends: list[RouteBackend], *, ready: Collection[str]) -> dict[str, float]:
    """Percent of requests per backend name: weights over the `ready` backends; 0 for each
    when none is ready (no backend of the rule gets traffic: the split in force, not the
    weights, which spec shows)."""
    named = [(b.display_name(i), b) for i, b in enumerate(backends)]
    chosen = {n: b for n, b in named if b.weight > 0 and n in ready}
    total = sum(b.weight for b in chosen.values())
    return {n: (100.0 * b.weight / total if n in chosen else 0.0) for n, b in named}


PRINTER_COLUMNS: list[base.JsonDict] = [
    {
        "name": "Names",
        "type": "string",
        "jsonPath": ".status.names",
        "description": "The `model` values clients send.",
    },
    {
        "name": "Backends",
        "type": "string",
        "jsonPath": ".status.backendsReady",
        "description": "Ready backends out of all.",
    },
    {
        "name": "Status",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
        "description": "Reason of the Ready condition.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
