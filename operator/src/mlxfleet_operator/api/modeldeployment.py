"""ModelDeployment (namespaced, `mdep`): a user's intent to serve one model, and its status.

Spec: the model source and revision, replicas, the KV-cache budget (context length x concurrency),
an optional memory override, placement constraints, mlx-lm server options, the engine (mlx-lm,
mlx-embed, mlx-rerank, vllm, command, with its options), the swap policy.
Status: placements per node, ready replicas, the endpoint, conditions (Ready/Reconciling/Stalled).
May import: pydantic, the standard library, the sibling api modules and `mlxfleet_agent.contract`.
Called by: core (placement, planning), handlers and adapters.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from mlxfleet_agent import contract
from mlxfleet_operator.api import base, fields, modelref, quantity, resources
from mlxfleet_operator.api import conditions as cond

REPLICAS_MAX = 64
CONTEXT_LENGTH_MIN = 256
CONTEXT_LENGTH_MAX = 1_048_576
MAX_CONCURRENCY_MAX = 256


class ModelSpec(base.ApiModel):
    """Which weights to serve and under which name clients ask for them."""

    source: fields.ModelSource = Field(
        description=(
            "Where the weights come from: hf://<org>/<repo> (Hugging Face), s3://<bucket>/<prefix> "
            "(any S3-compatible store) or file:///<absolute path> (a directory on each Mac). "
            "Changing it swaps the model without failed requests (see spec.swap)."
        ),
    )
    revision: fields.Revision | None = Field(
        default=None,
        description="Revision of the source: a Hugging Face commit, branch or tag, or an S3 "
        "object version label. Unset means the latest.",
    )
    served_name: fields.ServedName | None = Field(
        default=None,
        description="The `model` value clients send to the OpenAI-compatible endpoint. "
        "Defaults to metadata.name.",
    )


class Resources(base.ApiModel):
    """Memory the model needs on each node."""

    memory: fields.Quantity | None = Field(
        default=None,
        description="Memory per replica such as 48Gi, overriding the estimate (weights + KV cache "
        "+ runtime overhead). Set it for models whose size cannot be read ahead of time.",
    )


class PlacementStrategy(StrEnum):
    SPREAD = "Spread"
    BIN_PACK = "BinPack"


class Placement(base.ApiModel):
    """Which InferenceNodes may carry replicas, and how to choose among them."""

    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Labels an InferenceNode must carry to receive a replica.",
        json_schema_extra={"maxProperties": 64},
    )
    strategy: PlacementStrategy = Field(
        default=PlacementStrategy.SPREAD,
        description="Spread replicas over the emptiest nodes, or BinPack them onto the fullest "
        "nodes that still fit (keeping whole Macs free for large models).",
    )
    nodes: list[fields.ObjectName] | None = Field(
        default=None,
        max_length=REPLICAS_MAX,
        description="Explicit InferenceNode names, in order of preference. When set, only these "
        "nodes are used, and there must be at least spec.replicas of them.",
        json_schema_extra=base.crd(list_type="set", nullable=False),
    )


# what contract.check_image_url_prefix accepts, as a pattern the API server checks too
ImageUrlPrefix = Annotated[
    str, Field(min_length=8, max_length=2048, pattern=r"^https?://[^/@?#\s]+/([^?#\s]*/)?$")
]


class ServerOptions(base.ApiModel):
    """mlx-lm server options; the same names and bounds as the agent contract's ServerOptions."""

    decode_concurrency: int | None = Field(
        default=None, ge=1, le=1024, description="mlx_lm.server --decode-concurrency."
    )
    prompt_concurrency: int | None = Field(
        default=None, ge=1, le=1024, description="mlx_lm.server --prompt-concurrency."
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        le=CONTEXT_LENGTH_MAX,
        description="Default cap on generated tokens per request; at most spec.contextLength.",
        json_schema_extra=base.crd(nullable=False),
    )
    kv_bits: Literal[4, 8] | None = Field(
        default=None,
        description="Quantize the KV cache to 4 or 8 bits (smaller memory estimate). "
        "Unset keeps the model's dtype.",
    )
    chat_template_args: contract.ChatTemplateArgs | None = Field(
        default=None,
        description="Arguments passed to the tokenizer's chat template (a JSON object), "
        'for example {"enable_thinking": false}: at most '
        f"{contract.CHAT_TEMPLATE_ARGS_MAX_KEYS} keys, {contract.CHAT_TEMPLATE_ARGS_MAX_DEPTH} "
        f"levels deep and {contract.CHAT_TEMPLATE_ARGS_MAX_BYTES} bytes as JSON (the API server "
        "checks the key count; the operator and the agent check all three).",
        json_schema_extra=base.crd(preserve_unknown_fields=True),
    )
    allowed_image_urls: list[ImageUrlPrefix] | None = Field(
        default=None,
        max_length=32,
        description="URL prefixes (https://host[:port]/path/, ending with '/') that image parts "
        "of chat requests may name; the backend fetches them. Unset: only data: URLs, other "
        "image URLs are refused with 400. Changing it does not restart the backend.",
    )

    def to_agent(self) -> contract.ServerOptions:
        """The agent contract's ServerOptions (same field names)."""
        return contract.ServerOptions.model_validate(self.model_dump(by_alias=True))


_ENGINE_RULES = (
    base.rule(
        "self.name == 'command' ? has(self.command) : !has(self.command)",
        "spec.engine.command (argv, capabilities, memoryBytes) is required for engine command "
        "and allowed only with it",
        field_path=".command",
    ),
    base.rule(
        "!has(self.vllm) || self.name == 'vllm'",
        "spec.engine.vllm is allowed only with engine vllm",
        field_path=".vllm",
    ),
    base.rule(
        "!has(self.embed) || self.name == 'mlx-embed' || self.name == 'mlx-rerank'",
        "spec.engine.embed is allowed only with engine mlx-embed or mlx-rerank",
        field_path=".embed",
    ),
    base.rule(
        "!has(self.command) || (self.command.argv.exists(a, a.contains('{port}')) && "
        "self.command.argv.exists(a, a.contains('{host}')))",
        "spec.engine.command.argv must pass {host} and {port} (the server listens where the "
        "agent proxies)",
        field_path=".command.argv",
    ),
)


class ShardingMode(StrEnum):
    TENSOR = "Tensor"
    PIPELINE = "Pipeline"


class ShardingBackend(StrEnum):
    RING = "ring"
    JACCL = "jaccl"


class Sharding(base.ApiModel):
    """Split each replica over several nodes (mlx.distributed): a replica is then a group of
    `size` ranks on distinct nodes, Ready only when every rank is; rank 0 serves requests."""

    size: int = Field(
        ge=contract.SHARD_SIZE_MIN,
        le=contract.SHARD_SIZE_MAX,
        description=f"Ranks (nodes) per replica ({contract.SHARD_SIZE_MIN}-"
        f"{contract.SHARD_SIZE_MAX}).",
    )
    mode: ShardingMode = Field(
        default=ShardingMode.TENSOR,
        description="Tensor splits every layer by KV heads (the model's KV heads must divide "
        "by size); Pipeline splits the layers, in proportion to each node's free memory "
        "(only for architectures whose mlx-lm model supports it, e.g. DeepSeek V3; not llama).",
    )
    backend: ShardingBackend = Field(
        default=ShardingBackend.RING,
        description="ring: TCP between the nodes (Ethernet or Thunderbolt IP); jaccl: RDMA over "
        "Thunderbolt 5 (macOS 26.2+, see docs/sharding.md).",
    )

    def to_agent_mode(self) -> contract.ShardMode:
        return contract.ShardMode(self.mode.value.lower())

    def to_agent_backend(self) -> contract.ShardBackend:
        return contract.ShardBackend(self.backend.value)


class SwapApproval(StrEnum):
    AUTOMATIC = "Automatic"
    MANUAL = "Manual"


class SwapSettings(base.ApiModel):
    """How a model change is rolled out: one node at a time, without failed requests."""

    strategy: fields.SwapStrategy = Field(
        default=fields.SwapStrategy.AUTO,
        description="Surge starts the new model beside the old one; Hold queues requests while "
        "the node reloads; Auto picks Surge when both fit in memory, else Hold.",
    )
    drain_timeout_seconds: int = Field(
        default=fields.DRAIN_TIMEOUT_DEFAULT,
        ge=fields.DRAIN_TIMEOUT_MIN,
        le=fields.DRAIN_TIMEOUT_MAX,
        description="How long in-flight requests (streams included) may take to finish on the "
        "old model before it is stopped.",
    )
    approval: SwapApproval = Field(
        default=SwapApproval.AUTOMATIC,
        description="Manual creates the SwapPlan paused: a person sets spec.paused=false to "
        "run it.",
    )

    def to_agent(self) -> contract.SwapPolicy:
        return contract.SwapPolicy(
            strategy=fields.to_agent_strategy(self.strategy),
            drain_timeout_seconds=self.drain_timeout_seconds,
        )


_NODES_RULE = base.rule(
    "!has(self.placement) || !has(self.placement.nodes) || "
    "size(self.placement.nodes) >= (has(self.replicas) ? self.replicas : 1)",
    "spec.placement.nodes must list at least spec.replicas nodes",
    field_path=".placement.nodes",
)
_SHARD_NODES_RULE = base.rule(
    "!has(self.sharding) || !has(self.placement) || !has(self.placement.nodes) || "
    "size(self.placement.nodes) >= (has(self.replicas) ? self.replicas : 1) * self.sharding.size",
    "spec.placement.nodes must list at least spec.replicas x spec.sharding.size nodes "
    "(every rank needs its own node)",
    field_path=".placement.nodes",
)
_SHARD_ENGINE_RULE = base.rule(
    "!has(self.sharding) || !has(self.engine) || self.engine.name == 'mlx-lm'",
    "spec.sharding is supported only with engine mlx-lm (mlx_lm.server's distributed serving)",
    field_path=".sharding",
)
_MAX_TOKENS_RULE = base.rule(
    "!has(self.server) || !has(self.server.maxTokens) || "
    "self.server.maxTokens <= (has(self.contextLength) ? self.contextLength : 8192)",
    "spec.server.maxTokens must not exceed spec.contextLength",
    field_path=".server.maxTokens",
)


class ModelDeploymentSpec(base.ApiModel):
    """Desired state of a ModelDeployment."""

    model_config = ConfigDict(
        json_schema_extra=base.crd(
            _NODES_RULE, _SHARD_NODES_RULE, _SHARD_ENGINE_RULE, _MAX_TOKENS_RULE
        )
    )

    model: ModelSpec = Field(description="The model to serve: source, revision and served name.")
    replicas: int = Field(
        default=1,
        ge=0,
        le=REPLICAS_MAX,
        description="Number of nodes serving the model (0-64); each replica is on a distinct node.",
    )
    context_length: int = Field(
        default=8192,
        ge=CONTEXT_LENGTH_MIN,
        le=CONTEXT_LENGTH_MAX,
        description="Longest prompt + completion in tokens (256-1048576); sizes the KV cache.",
    )
    max_concurrency: int = Field(
        default=4,
        ge=1,
        le=MAX_CONCURRENCY_MAX,
        description="Requests served at once per replica (1-256); sizes the KV cache.",
    )
    resources: Resources = Field(
        default_factory=Resources,
        description="Memory per replica, overriding the estimate.",
        json_schema_extra=base.crd(default={}),
    )
    placement: Placement = Field(
        default_factory=Placement,
        description="Which InferenceNodes may carry replicas.",
        json_schema_extra=base.crd(default={}),
    )
    server: ServerOptions = Field(
        default_factory=ServerOptions,
        description="mlx-lm server options.",
        json_schema_extra=base.crd(default={}),
    )
    engine: contract.EngineSpec = Field(
        default_factory=contract.EngineSpec,
        description="The server each replica runs: name (mlx-lm by default: chat and "
        "completions; mlx-embed: /v1/embeddings; mlx-rerank: /v1/rerank; vllm; command) and "
        "that engine's options (embed, vllm or command). Only nodes whose agent can run it "
        "(InferenceNode status.engines) are chosen. Changing it swaps like a model change.",
        json_schema_extra=base.crd(*_ENGINE_RULES, default={"name": "mlx-lm"}),
    )
    swap: SwapSettings = Field(
        default_factory=SwapSettings,
        description="How a change of spec.model is rolled out.",
        json_schema_extra=base.crd(default={}),
    )
    sharding: Sharding | None = Field(
        default=None,
        description="Serve each replica from a group of nodes (a model larger than one Mac). "
        "spec.replicas then counts groups. Unset: whole replicas on single nodes.",
        json_schema_extra=base.crd(nullable=False),
    )

    @model_validator(mode="after")
    def _cross_field(self) -> ModelDeploymentSpec:
        nodes = self.placement.nodes
        if nodes is not None and len(nodes) < self.replicas:
            raise ValueError(
                f"spec.placement.nodes lists {len(nodes)} nodes, fewer than spec.replicas "
                f"({self.replicas})"
            )
        if self.sharding is not None and self.engine.name != contract.EngineName.MLX_LM:
            raise ValueError(
                f"spec.sharding is supported only with engine mlx-lm, not {self.engine.name}"
            )
        ranks = self.replicas * (self.sharding.size if self.sharding is not None else 1)
        if nodes is not None and self.sharding is not None and len(nodes) < ranks:
            raise ValueError(
                f"spec.placement.nodes lists {len(nodes)} nodes, fewer than spec.replicas x "
                f"spec.sharding.size ({ranks})"
            )
        if nodes is not None and len(set(nodes)) != len(nodes):
            raise ValueError("spec.placement.nodes must not repeat a node")
        max_tokens = self.server.max_tokens
        if max_tokens is not None and max_tokens > self.context_length:
            raise ValueError("spec.server.maxTokens must not exceed spec.contextLength")
        return self

    def memory_bytes(self) -> int | None:
        """spec.resources.memory in bytes, if set."""
        memory = self.resources.memory
        return None if memory is None else quantity.parse_bytes(memory)


class PlacementPhase(StrEnum):
    PENDING = "Pending"
    LOADING = "Loading"
    READY = "Ready"
    SWAPPING = "Swapping"
    FAILED = "Failed"
    REMOVING = "Removing"


class PlacementStatus(base.ApiModel):
    """One replica: where it runs and what it serves."""

    node: str = Field(description="InferenceNode carrying the replica.")
    phase: PlacementPhase = Field(description="Phase of the agent slot serving the replica.")
    ready: bool = Field(default=False, description="Whether the replica answers requests.")
    source: str | None = Field(default=None, description="Model source the replica serves.")
    revision: str | None = Field(default=None, description="Revision the replica serves.")
    endpoint: str | None = Field(
        default=None, description="The agent's data-plane URL serving the replica."
    )
    slot: str | None = Field(
        default=None,
        description="The agent slot serving the replica; the gateway names it in the "
        "x-mlxfleet-slot header, so equal served names of two namespaces never mix.",
    )
    message: str | None = Field(default=None, description="Why the replica is not ready.")
    download: fields.DownloadStatus | None = Field(
        default=None,
        description="While the replica's weights download: bytes done and total, and the rate.",
    )


class RankStatus(base.ApiModel):
    """One rank of a sharded group."""

    rank: int = Field(ge=0, description="Rank in the group (0 serves requests).")
    node: str = Field(description="InferenceNode running the rank.")
    ready: bool = Field(default=False, description="Whether the rank runs (rank 0: serves).")
    endpoint: str | None = Field(
        default=None, description="Rank 0: the agent's data-plane URL; others: their ring address."
    )
    memory_bytes: int | None = Field(
        default=None, ge=0, description="Memory placed for this rank (its share).",
        json_schema_extra=base.crd(int_format="int64"),
    )  # fmt: skip
    message: str | None = Field(default=None, description="Why the rank is not ready.")


class GroupStatus(base.ApiModel):
    """One replica of a sharded deployment: a group of ranks."""

    index: int = Field(ge=0, description="Replica (group) number.")
    id: str = Field(description="Id of this formation; a re-formed group gets a new one.")
    ready: bool = Field(default=False, description="Every rank is ready.")
    source: str | None = Field(default=None, description="Model source the group serves.")
    revision: str | None = Field(default=None, description="Revision the group serves.")
    broken_at: str | None = Field(
        default=None, description="When a rank of this formation was lost (RFC 3339)."
    )
    ranks: list[RankStatus] = Field(default_factory=list, description="Ranks by number.")


class ModelDeploymentStatus(base.ApiModel):
    """Observed state of a ModelDeployment, written only by the operator."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation this status describes."
    )
    conditions: list[cond.Condition] = Field(
        default_factory=list,
        description=cond.CONDITIONS_DESCRIPTION,
        json_schema_extra=cond.CONDITIONS_EXTRA,
    )
    served_name: str | None = Field(
        default=None, description="The `model` value clients send (spec or metadata.name)."
    )
    replicas: int | None = Field(default=None, ge=0, description="Replicas placed on nodes.")
    ready_replicas: int | None = Field(default=None, ge=0, description="Replicas serving.")
    placements: list[PlacementStatus] = Field(
        default_factory=list, description="One entry per placed replica."
    )
    swap_plan: str | None = Field(
        default=None, description="Name of the SwapPlan rolling out the current model, if any."
    )
    groups: list[GroupStatus] = Field(
        default_factory=list,
        description="Sharded deployments: one entry per group (replica) with its ranks.",
    )
    estimated_memory_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Memory per replica used for placement (spec.resources.memory or estimate).",
        json_schema_extra=base.crd(int_format="int64"),
    )
    endpoint: str | None = Field(
        default=None,
        description="In-cluster address of the OpenAI-compatible endpoint (the Service).",
    )
    selector: str | None = Field(
        default=None,
        description="Label selector of the objects serving this deployment (its Service and "
        "EndpointSlices), for the scale subresource: HorizontalPodAutoscaler and KEDA require one.",
    )


class ModelDeployment(base.ApiModel):
    """A model served by one or more Macs: `kubectl get mdep`."""

    api_version: Literal["mlxfleet.io/v1alpha1"] = resources.API_VERSION
    kind: Literal["ModelDeployment"] = "ModelDeployment"
    metadata: base.ObjectMeta = Field(default_factory=base.ObjectMeta)
    spec: ModelDeploymentSpec
    status: ModelDeploymentStatus = Field(default_factory=ModelDeploymentStatus)

    def model_ref(self) -> modelref.ModelRef:
        """The model the spec asks for (spec.model's source and revision)."""
        return modelref.ModelRef.of(self.spec.model)

    def served_name(self) -> str:
        """What clients send as `model`: spec.model.servedName, else metadata.name."""
        name = self.spec.model.served_name or self.metadata.name
        if not name:
            raise ValueError("ModelDeployment has neither spec.model.servedName nor metadata.name")
        return name


PRINTER_COLUMNS: list[base.JsonDict] = [
    {
        "name": "Model",
        "type": "string",
        "jsonPath": ".status.servedName",
        "description": "The `model` value clients send.",
    },
    {
        "name": "Replicas",
        "type": "integer",
        "jsonPath": ".spec.replicas",
        "description": "Desired replicas.",
    },
    {
        "name": "Ready",
        "type": "integer",
        "jsonPath": ".status.readyReplicas",
        "description": "Replicas serving.",
    },
    {
        "name": "Status",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
        "description": "Reason of the Ready condition.",
    },
    {
        "name": "Source",
        "type": "string",
        "jsonPath": ".spec.model.source",
        "description": "Model source.",
        "priority": 1,
    },
    {
        "name": "Message",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].message',
        "description": "Message of the Ready condition (download progress while loading).",
        "priority": 1,
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
