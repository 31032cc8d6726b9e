"""The node agent's wire contract: pydantic models of its HTTP API and of its telemetry objects.

This package (with the pure `mlxfleet_agent.sizing`) is the only agent code that the operator,
the gateway and hollow agents import. Field names on the wire are camelCase, Python names
snake_case. Every public name of the submodules is re-exported here, so callers write
`from mlxfleet_agent import contract` and `contract.SlotSpec`.

- `base`: `Wire`/`StrictWire`, `API_PREFIX`, `DNS_LABEL`;
- `sources`: the source string check (`check_source`, `ModelSource`);
- `slots`: `SlotSpec`, `SlotStatus`, swap policy, `SwapRecord`;
- `shards`: `RankSpec` (one rank of a sharded group), its backend and mode;
- `models`: the model store (`CachedModel`, `ModelShape`, `PrefetchRequest`, `DownloadProgress`,
  `Transfer`);
- `state`: GET /v1/state (`AgentState`);
- `engines`: `EngineSpec` (a slot's engine and its options), `Capability` (an endpoint family
  of `mlxfleet_common.wire.endpoints`, the one table of paths), `EngineInfo`;
- `errors`: error bodies (`ErrorBody`, `InsufficientMemory`);
- `telemetry`: `TelemetryInterval` and its object key;
- `credentials`: per-node keys (`NodeCredentials`, `CredentialsStatus`) and their derivation from
  the fleet key (its functions are called as `contract.credentials.for_node(...)`).

May import: pydantic, the standard library and mlxfleet_common.wire.endpoints only (no I/O). Called
by: every agent folder, the operator (api, core, adapters, reports), the gateway.
"""

from mlxfleet_agent.contract import credentials
from mlxfleet_agent.contract.base import API_PREFIX, DNS_LABEL, StrictWire, Wire
from mlxfleet_agent.contract.credentials import CredentialsStatus, NodeCredentials
from mlxfleet_agent.contract.engines import (
    COMMAND_ENV_NAMES,
    VLLM_EXTRA_FLAGS,
    Capability,
    CommandOptions,
    EmbedOptions,
    EngineInfo,
    EngineName,
    EngineOptions,
    EngineSpec,
    VllmOptions,
)
from mlxfleet_agent.contract.errors import ErrorBody, ErrorDetail, InsufficientMemory
from mlxfleet_agent.contract.models import (
    CachedModel,
    DownloadProgress,
    ModelList,
    ModelShape,
    Peer,
    PeerUrl,
    PrefetchRequest,
    Transfer,
)
from mlxfleet_agent.contract.shards import (
    SHARD_SIZE_MAX,
    SHARD_SIZE_MIN,
    RankAddress,
    RankSpec,
    ShardBackend,
    ShardMode,
)
from mlxfleet_agent.contract.slots import (
    CHAT_TEMPLATE_ARGS_MAX_BYTES,
    CHAT_TEMPLATE_ARGS_MAX_DEPTH,
    CHAT_TEMPLATE_ARGS_MAX_KEYS,
    MLX_DEFAULT_MAX_TOKENS,
    REQUEST_ID_MAX,
    REQUEST_ID_PATTERN,
    ChatTemplateArgs,
    ImageUrlPrefix,
    RequestId,
    ServerOptions,
    SlotPhase,
    SlotSpec,
    SlotStatus,
    SwapList,
    SwapOutcome,
    SwapPolicy,
    SwapRecord,
    SwapStrategy,
    check_chat_template_args,
    check_image_url_prefix,
    completion_cap,
)
from mlxfleet_agent.contract.sources import (
    ALLOWED_SOURCES,
    HF_REPO,
    S3_BUCKET,
    SOURCE_SCHEMES,
    ModelSource,
    SourceError,
    check_source,
)
from mlxfleet_agent.contract.state import (
    DOCTOR_CHECKS,
    AgentState,
    DiskInfo,
    DoctorReport,
    MemoryInfo,
    ThermalInfo,
)
from mlxfleet_agent.contract.telemetry import (
    LATENCY_BUCKETS_S,
    TELEMETRY_KEY_LAYOUT,
    TELEMETRY_NODE,
    TELEMETRY_SCHEMA_VERSION,
    THERMAL_LEVELS,
    TOKEN_LATENCY_BUCKETS_S,
    HistogramData,
    IntervalCodec,
    KeyTelemetry,
    NodeTelemetry,
    SlotTelemetry,
    SwapEvent,
    TelemetryInterval,
    telemetry_date_prefix,
    telemetry_key,
)

__all__ = [
    "ALLOWED_SOURCES",
    "API_PREFIX",
    "CHAT_TEMPLATE_ARGS_MAX_BYTES",
    "CHAT_TEMPLATE_ARGS_MAX_DEPTH",
    "CHAT_TEMPLATE_ARGS_MAX_KEYS",
    "COMMAND_ENV_NAMES",
    "DNS_LABEL",
    "DOCTOR_CHECKS",
    "HF_REPO",
    "LATENCY_BUCKETS_S",
    "MLX_DEFAULT_MAX_TOKENS",
    "REQUEST_ID_MAX",
    "REQUEST_ID_PATTERN",
    "S3_BUCKET",
    "SHARD_SIZE_MAX",
    "SHARD_SIZE_MIN",
    "SOURCE_SCHEMES",
    "TELEMETRY_KEY_LAYOUT",
    "TELEMETRY_NODE",
    "TELEMETRY_SCHEMA_VERSION",
    "THERMAL_LEVELS",
    "TOKEN_LATENCY_BUCKETS_S",
    "VLLM_EXTRA_FLAGS",
    "AgentState",
    "CachedModel",
    "Capability",
    "ChatTemplateArgs",
    "CommandOptions",
    "CredentialsStatus",
    "DiskInfo",
    "DoctorReport",
    "DownloadProgress",
    "EmbedOptions",
    "EngineInfo",
    "EngineName",
    "EngineOptions",
    "EngineSpec",
    "ErrorBody",
    "ErrorDetail",
    "HistogramData",
    "ImageUrlPrefix",
    "InsufficientMemory",
    "IntervalCodec",
    "KeyTelemetry",
    "MemoryInfo",
    "ModelList",
    "ModelShape",
    "ModelSource",
    "NodeCredentials",
    "NodeTelemetry",
    "Peer",
    "PeerUrl",
    "PrefetchRequest",
    "RankAddress",
    "RankSpec",
    "RequestId",
    "ServerOptions",
    "ShardBackend",
    "ShardMode",
    "SlotPhase",
    "SlotSpec",
    "SlotStatus",
    "SlotTelemetry",
    "SourceError",
    "StrictWire",
    "SwapEvent",
    "SwapList",
    "SwapOutcome",
    "SwapPolicy",
    "SwapRecord",
    "SwapStrategy",
    "TelemetryInterval",
    "ThermalInfo",
    "Transfer",
    "VllmOptions",
    "Wire",
    "check_chat_template_args",
    "check_image_url_prefix",
    "check_source",
    "completion_cap",
    "credentials",
    "telemetry_date_prefix",
    "telemetry_key",
]
