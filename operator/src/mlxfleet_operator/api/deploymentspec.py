"""ModelDeployment `spec` (`ModelDeploymentSpec`) and its parts, with their bounds and CEL rules.

The model source and revision, replicas (with the autoscaler's bounds: minReplicas, maxReplicas,
idleTimeout), the KV-cache budget (context length x concurrency), an
optional memory override, placement constraints, the priority (preemption), mlx-lm server
options, the engine (the agent
contract's EngineSpec: mlx-lm, mlx-embed, mlx-rerank, vllm, command, with its options; its CEL
rules are here), sharding (`sharding`) and the swap policy. Each bound and cross-field rule is
checked twice alike: by pydantic here and by the API server from the generated CRD.
May import: pydantic, the standard library, the sibling api modules (base, fields, quantity,
sharding) and `mlxfleet_agent.contract`. Called by: api.modeldeployment (`ModelDeployment.spec`),
api.swapplan and api.crdgen; core reads it through `ModelDeployment.spec`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from mlxfleet_agent import contract
from mlxfleet_operator.api import base, fields, quantity
from mlxfleet_operator.api import sharding as sharding_

REPLICAS_MAX = 64
CONTEXT_LENGTH_MIN = 256
CONTEXT_LENGTH_MAX = 1_048_576
MAX_CONCURRENCY_MAX = 256
PRIORITY_MIN = -1_000_000_000
PRIORITY_MAX = 1_000_000_000


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

    memory: fields.ModelMemory | None = Field(
        default=None,
        description="Memory per replica such as 48Gi (at least 1Mi), overriding the estimate "
        "(weights + KV cache + runtime overhead). Set it for models whose size cannot be read "
        "ahead of time.",
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


def _cel_list(names: frozenset[str]) -> str:
    return "[" + ", ".join(base.cel_string(n) for n in sorted(names)) + "]"


_ENV_NAMES = _cel_list(contract.COMMAND_ENV_NAMES)
_VLLM_FLAGS = _cel_list(contract.VLLM_EXTRA_FLAGS)
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
    # allow-lists, the agent's own (contract.COMMAND_ENV_NAMES, contract.VLLM_EXTRA_FLAGS)
    base.rule(
        "!has(self.command) || !has(self.command.env) || "
        f"self.command.env.all(k, k in {_ENV_NAMES})",
        "spec.engine.command.env may set only "
        + ", ".join(sorted(contract.COMMAND_ENV_NAMES))
        + " (settings that load no code; a program's other settings go in argv)",
        field_path=".command.env",
    ),
    base.rule(
        "!has(self.vllm) || !has(self.vllm.extraArgs) || self.vllm.extraArgs.all(a, "
        f"!a.startsWith('-') || a in {_VLLM_FLAGS} || "
        f"{_VLLM_FLAGS}.exists(f, a.startsWith(f + '=')))",
        "spec.engine.vllm.extraArgs may give only the flags "
        + ", ".join(sorted(contract.VLLM_EXTRA_FLAGS))
        + " (a value starting with '-' goes after '=')",
        field_path=".vllm.extraArgs",
    ),
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
_SCALING_RULES = (
    base.rule(
        "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
        "spec.minReplicas must not exceed spec.maxReplicas",
        field_path=".minReplicas",
    ),
    base.rule(
        "!has(self.maxReplicas) || (has(self.replicas) ? self.replicas : 1) <= self.maxReplicas",
        "spec.replicas must not exceed spec.maxReplicas",
        field_path=".replicas",
    ),
    base.rule(
        "!has(self.minReplicas) || !has(self.replicas) || self.replicas == 0 || "
        "self.replicas >= self.minReplicas",
        "spec.replicas must be 0 (off) or at least spec.minReplicas",
        field_path=".replicas",
    ),
    base.rule(
        "!has(self.idleTimeout) || has(self.minReplicas)",
        "spec.idleTimeout needs spec.minReplicas (the count an idle deployment goes to)",
        field_path=".idleTimeout",
    ),
    base.rule(
        "!has(self.minReplicas) || self.minReplicas > 0 || has(self.idleTimeout)",
        "spec.minReplicas 0 needs spec.idleTimeout (how long without requests before it sleeps)",
        field_path=".minReplicas",
    ),
    base.rule(
        "!has(self.sharding) || (!has(self.minReplicas) && !has(self.maxReplicas) && "
        "!has(self.idleTimeout))",
        "spec.minReplicas, spec.maxReplicas and spec.idleTimeout are not supported with "
        "spec.sharding",
        field_path=".sharding",
    ),
    base.rule(
        "!has(self.maxReplicas) || !has(self.placement) || !has(self.placement.nodes) || "
        "size(self.placement.nodes) >= self.maxReplicas",
        "spec.placement.nodes must list at least spec.maxReplicas nodes",
        field_path=".placement.nodes",
    ),
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
            _NODES_RULE, _SHARD_NODES_RULE, _SHARD_ENGINE_RULE, _MAX_TOKENS_RULE, *_SCALING_RULES
        )
    )

    model: ModelSpec = Field(description="The model to serve: source, revision and served name.")
    replicas: int = Field(
        default=1,
        ge=0,
        le=REPLICAS_MAX,
        description="Number of nodes serving the model (0-64); each replica is on a distinct node. "
        "0 turns the deployment off. With spec.minReplicas or spec.maxReplicas set, the count a "
        "new or woken deployment starts from; the operator's autoscaler then moves the count "
        "between them (status.desiredReplicas).",
    )
    min_replicas: int | None = Field(
        default=None,
        ge=0,
        le=REPLICAS_MAX,
        description="Fewest replicas the autoscaler keeps (0-64). 0 lets the deployment sleep "
        "after spec.idleTimeout without requests: its backends stop, the weights stay on disk, "
        "and the next request through the gateway wakes it (a cold start). Preemption by a "
        "deployment of higher spec.priority never takes it below this either. Unset: "
        "spec.replicas (never preempted below what it asks for).",
        json_schema_extra=base.crd(nullable=False),
    )
    max_replicas: int | None = Field(
        default=None,
        ge=1,
        le=REPLICAS_MAX,
        description="Most replicas the autoscaler places (1-64) when requests in flight and "
        "queued exceed spec.maxConcurrency per replica. Unset: spec.replicas.",
        json_schema_extra=base.crd(nullable=False),
    )
    idle_timeout: fields.IdleTimeout | None = Field(
        default=None,
        description="After this long without requests (a duration such as 20s, 10m or 1h30m) "
        "the deployment scales to spec.minReplicas. Requires spec.minReplicas.",
        json_schema_extra=base.crd(nullable=False),
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
    sharding: sharding_.Sharding | None = Field(
        default=None,
        description="Serve each replica from a group of nodes (a model larger than one Mac). "
        "spec.replicas then counts groups. Unset: whole replicas on single nodes.",
        json_schema_extra=base.crd(nullable=False),
    )
    priority: int = Field(
        default=0,
        ge=PRIORITY_MIN,
        le=PRIORITY_MAX,
        description="Higher wins when memory is short (default 0). A replica that finds no "
        "node may evict replicas of deployments of strictly lower priority (never an equal one), "
        "never taking one below its minimum replicas; the evicted replica moves elsewhere "
        "(make-before-break) where memory allows, and comes back when memory frees, after a "
        "back-off that grows with each eviction. Both deployments' status and Events name "
        "the other (docs/operator.md, Priority and preemption).",
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
        self._check_scaling()
        max_tokens = self.server.max_tokens
        if max_tokens is not None and max_tokens > self.context_length:
            raise ValueError("spec.server.maxTokens must not exceed spec.contextLength")
        return self

    def _check_scaling(self) -> None:
        """The bounds of spec.minReplicas, spec.maxReplicas and spec.idleTimeout together (the
        same as the CRD's rules)."""
        low, high, idle = self.min_replicas, self.max_replicas, self.idle_timeout
        if low is not None and high is not None and low > high:
            raise ValueError(f"spec.minReplicas ({low}) must not exceed spec.maxReplicas ({high})")
        if high is not None and self.replicas > high:
            raise ValueError(
                f"spec.replicas ({self.replicas}) must not exceed spec.maxReplicas ({high})"
            )
        if low is not None and 0 < self.replicas < low:
            raise ValueError(
                f"spec.replicas ({self.replicas}) must be 0 (off) or at least spec.minReplicas "
                f"({low})"
            )
        if idle is not None and low is None:
            raise ValueError(
                "spec.idleTimeout needs spec.minReplicas (the count an idle deployment goes to)"
            )
        if low == 0 and idle is None:
            raise ValueError(
                "spec.minReplicas 0 needs spec.idleTimeout (how long without requests before it "
                "sleeps)"
            )
        if self.sharding is not None and (low, high, idle) != (None, None, None):
            raise ValueError(
                "spec.minReplicas, spec.maxReplicas and spec.idleTimeout are not supported with "
                "spec.sharding"
            )
        nodes = self.placement.nodes
        if high is not None and nodes is not None and len(nodes) < high:
            raise ValueError(
                f"spec.placement.nodes lists {len(nodes)} nodes, fewer than spec.maxReplicas "
                f"({high})"
            )

    @property
    def fewest_replicas(self) -> int:
        """spec.minReplicas, or spec.replicas where unset: the fewest the autoscaler keeps awake
        or asleep, and the floor preemption never goes below (one number for both)."""
        return self.min_replicas if self.min_replicas is not None else self.replicas

    @property
    def autoscaled(self) -> bool:
        """The operator's autoscaler owns the count (spec.minReplicas or spec.maxReplicas set)."""
        return self.min_replicas is not None or self.max_replicas is not None

    def memory_bytes(self) -> int | None:
        """spec.resources.memory in bytes, if set."""
        memory = self.resources.memory
        return None if memory is None else quantity.parse_bytes(memory)
