"""Field types shared by the kinds: model sources, quantities, names, secret refs, swap strategy,
download progress.

Each type carries its pydantic validation and the matching CRD rule (OpenAPI bounds or CEL), so
the API server and the operator refuse the same input. Regular expressions are written in the
subset that Python's `re` and RE2 (CEL `matches`) read alike.
May import: pydantic, the standard library, `base`, `duration`, `quantity`, `resources` and
`mlxfleet_agent.contract`. Called by: the kind modules, core and adapters.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, StrictInt

from mlxfleet_agent import contract
from mlxfleet_operator.api import base, duration, quantity, resources

# ---------------------------------------------------------------------------------------------
# Model sources
# ---------------------------------------------------------------------------------------------

SOURCE_ALLOWED = "hf://<org>/<repo>, s3://<bucket>/<prefix> or file:///<absolute path>"
SOURCE_SCHEME_PATTERN = r"(hf|s3|file)://"
SOURCE_PATTERN = (
    r"hf://[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+"
    r"|s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^?#\s]+"
    r"|file:///[^?#\s]+"
)
SOURCE_DOT_SEGMENT = r"(^[a-z0-9]+://|/)[.]{1,2}(/|$)"
SOURCE_MAX_LENGTH = 2048
_SOURCE = re.compile(SOURCE_PATTERN)
_SOURCE_SCHEME = re.compile(SOURCE_SCHEME_PATTERN)
_SOURCE_DOT = re.compile(SOURCE_DOT_SEGMENT)


def check_source(value: str) -> str:
    """Accept exactly hf://<org>/<repo>, s3://<bucket>/<prefix> or file:///<absolute path>.

    Stricter than (and consistent with) the agent's `contract.check_source`, which also runs.
    """
    if not _SOURCE_SCHEME.match(value):
        scheme = value.split("://", 1)[0] if "://" in value else ""
        raise ValueError(f"unknown source scheme {scheme!r}: allowed are {SOURCE_ALLOWED}")
    if value.startswith("file://") and not value.startswith("file:///"):
        raise ValueError("a file source must be file:///<absolute path> (no host, absolute path)")
    if not _SOURCE.fullmatch(value):
        raise ValueError(f"source {value!r} is not of the form {SOURCE_ALLOWED}")
    if _SOURCE_DOT.search(value):
        raise ValueError("source must not contain '.' or '..' path segments")
    contract.check_source(value)
    return value


SOURCE_RULES = (
    base.rule(
        f"self.matches({base.cel_string('^' + SOURCE_SCHEME_PATTERN)})",
        f"unknown source scheme: allowed are {SOURCE_ALLOWED}",
    ),
    base.rule(
        "!self.startsWith('file://') || self.startsWith('file:///')",
        "a file source must be file:///<absolute path> (no host, absolute path)",
    ),
    base.rule(
        f"self.matches({base.cel_string('^(' + SOURCE_PATTERN + ')$')})",
        f"source must be of the form {SOURCE_ALLOWED}",
    ),
    base.rule(
        f"!self.matches({base.cel_string(SOURCE_DOT_SEGMENT)})",
        "source must not contain '.' or '..' path segments",
    ),
)

ModelSource = Annotated[
    str,
    Field(min_length=4, max_length=SOURCE_MAX_LENGTH, json_schema_extra=base.crd(*SOURCE_RULES)),
    AfterValidator(check_source),
]

REVISION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]*$"
Revision = Annotated[str, Field(min_length=1, max_length=256, pattern=REVISION_PATTERN)]

SERVED_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"
ServedName = Annotated[str, Field(min_length=1, max_length=253, pattern=SERVED_NAME_PATTERN)]

# ---------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------

DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
NamespaceName = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"  # noqa: S105 - a pattern, not a secret
SecretKey = Annotated[str, Field(min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)]

# ---------------------------------------------------------------------------------------------
# Quantities
# ---------------------------------------------------------------------------------------------

_QUANTITY_CEL = base.cel_string("^" + quantity.PATTERN + "$")
# A quantity is an integer (bytes) or a string such as 48Gi, as in core Kubernetes objects
# (`x-kubernetes-int-or-string`): the rules look at the string form only when it is one.
QUANTITY_FORMAT_RULE = base.rule(
    f"type(self) == int || (self.matches({_QUANTITY_CEL}) && isQuantity(self))",
    "must be a Kubernetes quantity such as 48Gi or 512Mi "
    "(suffixes Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E) or an integer number of bytes",
)
QUANTITY_POSITIVE_RULE = base.rule(
    "type(self) == int ? self > 0 : "
    "(!isQuantity(self) || quantity(self).isGreaterThan(quantity('0')))",
    "must be a positive quantity of bytes",
)
QUANTITY_NON_NEGATIVE_RULE = base.rule(
    "type(self) == int ? self >= 0 : "
    "(!isQuantity(self) || !quantity(self).isLessThan(quantity('0')))",
    "must not be a negative quantity of bytes",
)


MODEL_MEMORY_MIN = "1Mi"
MODEL_MEMORY_MIN_BYTES = 2**20
MODEL_MEMORY_RULE = base.rule(
    f"type(self) == int ? self >= {MODEL_MEMORY_MIN_BYTES} : "
    f"(!isQuantity(self) || !quantity(self).isLessThan(quantity('{MODEL_MEMORY_MIN}')))",
    f"must be at least {MODEL_MEMORY_MIN}: a model's memory per replica such as 24Gi "
    "(a number without a suffix is bytes: 24 is 24 bytes)",
)


def _model_memory(value: int | str) -> int | str:
    if quantity.parse_bytes(value) < MODEL_MEMORY_MIN_BYTES:
        raise ValueError(
            f"{value!r} must be at least {MODEL_MEMORY_MIN}: a model's memory per replica such "
            "as 24Gi (a number without a suffix is bytes)"
        )
    return value


def _positive_bytes(value: int | str) -> int | str:
    quantity.parse_bytes(value)
    return value


def _non_negative_bytes(value: int | str) -> int | str:
    quantity.parse_bytes(value, allow_zero=True)
    return value


def _quantity_schema(*rules: base.JsonDict) -> base.JsonDict:
    return {
        **base.crd(*rules, int_or_string=True),
        "maxLength": quantity.MAX_LENGTH,
    }


Quantity = Annotated[
    StrictInt | str,
    Field(json_schema_extra=_quantity_schema(QUANTITY_FORMAT_RULE, QUANTITY_POSITIVE_RULE)),
    AfterValidator(_positive_bytes),
]
"""A positive byte quantity: `48Gi` or an integer of bytes; `quantity.parse_bytes` gives bytes."""

ModelMemory = Annotated[
    StrictInt | str,
    Field(
        json_schema_extra=_quantity_schema(
            QUANTITY_FORMAT_RULE, QUANTITY_POSITIVE_RULE, MODEL_MEMORY_RULE
        )
    ),
    AfterValidator(_positive_bytes),
    AfterValidator(_model_memory),
]
"""A model's memory per replica: a positive quantity of at least 1Mi (`"24"` is 24 bytes, which
no model fits in: refused at admission rather than placed as if it were free)."""

NonNegativeQuantity = Annotated[
    StrictInt | str,
    Field(json_schema_extra=_quantity_schema(QUANTITY_FORMAT_RULE, QUANTITY_NON_NEGATIVE_RULE)),
    AfterValidator(_non_negative_bytes),
]
"""A byte quantity that may be `0` (reservations)."""

# ---------------------------------------------------------------------------------------------
# Durations
# ---------------------------------------------------------------------------------------------

IDLE_TIMEOUT_MIN = "1s"
IDLE_TIMEOUT_MAX = "720h"
_DURATION_CEL = base.cel_string("^" + duration.PATTERN + "$")


def _idle_timeout(value: str) -> str:
    parsed = duration.parse(value)
    low, high = duration.parse(IDLE_TIMEOUT_MIN), duration.parse(IDLE_TIMEOUT_MAX)
    if not low <= parsed <= high:
        raise ValueError(f"{value!r} must be from {IDLE_TIMEOUT_MIN} to {IDLE_TIMEOUT_MAX}")
    return value


IdleTimeout = Annotated[
    str,
    Field(
        min_length=2,
        max_length=duration.MAX_LENGTH,
        json_schema_extra=base.crd(
            base.rule(
                f"self.matches({_DURATION_CEL}) && duration(self) >= "
                f"duration('{IDLE_TIMEOUT_MIN}') && duration(self) <= "
                f"duration('{IDLE_TIMEOUT_MAX}')",
                f"spec.idleTimeout must be {duration.ALLOWED}, from {IDLE_TIMEOUT_MIN} to "
                f"{IDLE_TIMEOUT_MAX}",
            ),
        ),
    ),
    AfterValidator(_idle_timeout),
]
"""How long a deployment may go without requests before it scales to spec.minReplicas."""

# ---------------------------------------------------------------------------------------------
# URLs
# ---------------------------------------------------------------------------------------------

AGENT_URL_PATTERN = r"https?://[^/?#\s]+(/[^?#\s]*)?"
_AGENT_URL = re.compile(AGENT_URL_PATTERN)


def check_agent_url(value: str) -> str:
    """An http(s) URL with a host and no query or fragment."""
    if not _AGENT_URL.fullmatch(value) or not urlsplit(value).hostname:
        raise ValueError(
            f"agent URL {value!r} must be http://<host>[:<port>] or https://<host>[:<port>]"
        )
    return value


AgentUrl = Annotated[
    str,
    Field(
        min_length=1,  # the scheme rule says what is wrong with a short one (ftp://x)
        max_length=2048,
        json_schema_extra=base.crd(
            base.rule(
                f"self.matches({base.cel_string('^(' + AGENT_URL_PATTERN + ')$')})",
                "must be an http:// or https:// URL with a host, such as "
                "https://mac-studio-1.lan:8470 (no query or fragment)",
            )
        ),
    ),
    AfterValidator(check_agent_url),
]

# ---------------------------------------------------------------------------------------------
# Secret references
# ---------------------------------------------------------------------------------------------


class SecretKeyRef(base.ApiModel):
    """A key of an agent credential Secret. The operator may read Secrets only in the agents'
    Secret namespace."""

    name: ObjectName = Field(description="Name of the Secret.")
    namespace: NamespaceName = Field(
        default=resources.AGENT_SECRETS_NAMESPACE,
        description=(
            "Namespace of the Secret; the operator can read Secrets only in the agents' Secret "
            f"namespace ({resources.AGENT_SECRETS_NAMESPACE}, chart value "
            "operator.agentSecretsNamespace)."
        ),
    )
    key: SecretKey = Field(default="token", description="Key within the Secret's data.")


class CaSecretRef(SecretKeyRef):
    """A Secret key holding a PEM CA bundle that signed the agent's certificate."""

    key: SecretKey = Field(default="ca.crt", description="Key within the Secret's data (PEM).")


# ---------------------------------------------------------------------------------------------
# Swap strategy (the CRD spells values in CamelCase, the agent in lower case)
# ---------------------------------------------------------------------------------------------


class SwapStrategy(StrEnum):
    """How a node changes models: Surge (old and new side by side), Hold (queue requests while
    reloading), Auto (Surge when both fit in memory, else Hold)."""

    AUTO = "Auto"
    SURGE = "Surge"
    HOLD = "Hold"


def to_agent_strategy(strategy: SwapStrategy) -> contract.SwapStrategy:
    """The agent contract's spelling (`Surge` -> `surge`)."""
    return contract.SwapStrategy(strategy.value.lower())


def from_agent_strategy(strategy: contract.SwapStrategy) -> SwapStrategy:
    """The CRD's spelling of an agent strategy (`hold` -> `Hold`)."""
    return SwapStrategy(strategy.value.capitalize())


DRAIN_TIMEOUT_MIN = 1
DRAIN_TIMEOUT_MAX = 3600
DRAIN_TIMEOUT_DEFAULT = 300


# ---------------------------------------------------------------------------------------------
# Download progress (the agent's slot `download`, copied into both kinds' status)
# ---------------------------------------------------------------------------------------------


class DownloadStatus(base.ApiModel):
    """How far the download of a replica's weights is, as its agent last reported it."""

    bytes_done: int = Field(
        ge=0, description="Bytes on the node so far.", json_schema_extra={"format": "int64"}
    )
    bytes_total: int = Field(
        ge=0,
        description="The model's size in bytes; 0 while unknown (hf://).",
        json_schema_extra={"format": "int64"},
    )
    bytes_per_second: int = Field(
        ge=0,
        description="Recent transfer rate, bytes per second.",
        json_schema_extra={"format": "int64"},
    )

    @classmethod
    def of(cls, reported: contract.DownloadProgress) -> DownloadStatus:
        return cls(
            bytes_done=reported.bytes_done,
            bytes_total=reported.bytes_total,
            bytes_per_second=int(reported.bytes_per_second),
        )

    def _unit(self) -> tuple[int, str]:
        return (2**30, "GiB") if max(self.bytes_total, self.bytes_done) >= 2**30 else (2**20, "MiB")

    def done_text(self) -> str:
        """`1.20 GiB` (MiB below 1 GiB)."""
        scale, unit = self._unit()
        return f"{self.bytes_done / scale:.2f} {unit}"

    def describe(self) -> str:
        """`1.20/4.00 GiB (30%, 52.0 MiB/s)` (MiB below 1 GiB); `1.20 GiB (52.0 MiB/s, size
        unknown)` without a total."""
        rate = f"{self.bytes_per_second / 2**20:.1f} MiB/s"
        if self.bytes_total <= 0:
            return f"{self.done_text()} ({rate}, size unknown)"
        scale, unit = self._unit()
        percent = min(100, self.bytes_done * 100 // self.bytes_total)
        done = f"{self.bytes_done / scale:.2f}/{self.bytes_total / scale:.2f} {unit}"
        return f"{done} ({percent}%, {rate})"
