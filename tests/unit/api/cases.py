"""Valid base objects, a table of valid variants and one of invalid objects, shared by the
pydantic and admission tests.

Each case changes one thing in a valid object; both the models (unit) and the real API server
(integration) must accept a valid variant and reject an invalid one, naming `field`. Pure data: no
pytest, no I/O.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

JsonDict = dict[str, Any]
DELETE = object()
"""A patch value that removes the key."""

BASE: dict[str, JsonDict] = {
    "ModelDeployment": {
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "case"},
        "spec": {
            "model": {"source": "hf://mlx-community/Qwen3-8B-4bit"},
            "replicas": 2,
            "placement": {"nodes": ["mac-1", "mac-2"]},
        },
    },
    "InferenceNode": {
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "InferenceNode",
        "metadata": {"name": "case"},
        "spec": {
            "agent": {
                "url": "https://mac-1.lan:8443",
                "tokenSecretRef": {"name": "mac-1-agent"},
            },
            "cost": {"idlePowerWatts": 10, "busyPowerWatts": 100},
        },
    },
    "SwapPlan": {
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "SwapPlan",
        "metadata": {"name": "case"},
        "spec": {
            "deploymentRef": {"name": "qwen"},
            "target": {"source": "s3://models/qwen3-8b"},
        },
    },
    "ModelRoute": {
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": "case"},
        "spec": {
            "names": ["chat", "auto"],
            "rules": [
                {
                    "name": "code",
                    "match": {"headers": [{"name": "x-mlxfleet-task", "values": ["code"]}]},
                    "backends": [{"deployment": "coder"}],
                },
                {"name": "default", "backends": [{"deployment": "chat", "weight": 90}]},
            ],
            "fallback": {
                "backends": [
                    {
                        "external": {
                            "url": "https://api.example.com/v1",
                            "model": "gpt-4o-mini",
                            "apiKeySecretRef": {"name": "example-provider"},
                        }
                    }
                ]
            },
        },
    },
}


def merge(base: JsonDict, patch: JsonDict) -> JsonDict:
    """`base` deep-merged with `patch` (dicts merge, other values replace, DELETE removes)."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass(frozen=True)
class Case:
    """`kind` with `spec_patch` merged into its spec."""

    id: str
    kind: str
    spec_patch: JsonDict

    def body(self, name: str) -> JsonDict:
        obj = merge(BASE[self.kind], {"spec": self.spec_patch})
        obj["metadata"] = {"name": name}
        return obj


@dataclass(frozen=True)
class Valid(Case):
    """One valid variant: both the models and the API server accept it."""


@dataclass(frozen=True)
class Invalid(Case):
    """One invalid object: `kind` with `spec_patch` merged into its spec; `field` must be named."""

    field: str


MD, IN, SWP, MR = "ModelDeployment", "InferenceNode", "SwapPlan", "ModelRoute"
_ARGV = ["llama-server", "-m", "{model}", "--host", "{host}", "--port", "{port}"]
_COMMAND: JsonDict = {
    "name": "command",
    "command": {"argv": _ARGV, "capabilities": ["chat"], "memoryBytes": 2**30},
}

_ALLOWED_ENV = {"OMP_NUM_THREADS": "4", "TOKENIZERS_PARALLELISM": "false"}
_VLLM_TUNING = ["--seed", "7", "--max-num-batched-tokens=4096", "--enable-prefix-caching"]
# the chain a deny-list let through (issue 22 item 2): each name is refused on its own
ATTACK_ENV = {
    "PYTHONWARNINGS": "ignore::antigravity.x",
    "BROWSER": "/usr/bin/perlthanks",
    "PERL5OPT": '-Mbase;system("id");exit',
}


def _command_env(env: JsonDict) -> JsonDict:
    return {"engine": {**_COMMAND, "command": {**_COMMAND["command"], "env": env}}}


def _vllm_extra(args: list[str]) -> JsonDict:
    return {"engine": {"name": "vllm", "vllm": {"extraArgs": args}}}


# Quantities (memory) are Kubernetes quantities: a string such as 48Gi, or an integer of bytes,
# as in core Kubernetes objects; reservedMemory may be 0 either way.
VALID: tuple[Valid, ...] = (
    Valid("in-reserved-zero-integer", IN, {"reservedMemory": 0}),
    Valid("in-reserved-zero-string", IN, {"reservedMemory": "0"}),
    Valid("in-reserved-integer-bytes", IN, {"reservedMemory": 8 * 2**30}),
    Valid("in-hardware-memory-integer", IN, {"hardware": {"memory": 64 * 2**30}}),
    Valid("md-memory-integer-bytes", MD, {"resources": {"memory": 2**30}}),
    Valid("md-memory-exponent", MD, {"resources": {"memory": "2e9"}}),
    Valid("md-chat-template-args", MD, {"server": {"chatTemplateArgs": {"a": {"b": [1, "x"]}}}}),
    Valid("md-engine-embed", MD, {"engine": {"name": "mlx-embed", "embed": {"maxInputs": 64}}}),
    Valid("md-engine-rerank", MD, {"engine": {"name": "mlx-rerank"}}),
    Valid("md-engine-vllm", MD, {"engine": {"name": "vllm", "vllm": {"task": "embed"}}}),
    Valid("md-engine-command", MD, {"engine": _COMMAND}),
    Valid(
        "md-sleepy", MD, {"replicas": 1, "minReplicas": 0, "maxReplicas": 2, "idleTimeout": "15s"}
    ),
    Valid("md-scale-range", MD, {"minReplicas": 1, "maxReplicas": 2}),
    Valid("md-idle-to-min-one", MD, {"minReplicas": 1, "idleTimeout": "1h30m"}),
    Valid("md-off-with-bounds", MD, {"replicas": 0, "minReplicas": 1, "maxReplicas": 2}),
    Valid(
        "md-engine-command-env-allowed",
        MD,
        {"engine": {**_COMMAND, "command": {**_COMMAND["command"], "env": _ALLOWED_ENV}}},
    ),
    Valid(
        "md-engine-vllm-extra-allowed",
        MD,
        {"engine": {"name": "vllm", "vllm": {"extraArgs": _VLLM_TUNING}}},
    ),
    Valid("md-sharded-tensor", MD, {"replicas": 1, "sharding": {"size": 2}}),
    Valid("md-priority-min-replicas", MD, {"priority": -5, "replicas": 2, "minReplicas": 1}),
    Valid("md-off-below-min-replicas", MD, {"replicas": 0, "minReplicas": 2}),
    Valid(
        "md-sharded-pipeline-jaccl",
        MD,
        {
            "replicas": 2,
            "sharding": {"size": 16, "mode": "Pipeline", "backend": "jaccl"},
            "placement": {"nodes": DELETE},
        },
    ),
)


def _model(source: str) -> JsonDict:
    return {"model": {"source": source}}


_EXTERNAL: JsonDict = {"url": "https://api.example.com/v1", "model": "m"}


def _rule(**parts: Any) -> JsonDict:
    return {"name": "r", "backends": [{"deployment": "a"}], **parts}


INVALID: tuple[Invalid, ...] = (
    # ModelDeployment: the model source
    Invalid("md-unknown-scheme", MD, _model("ftp://host/models/qwen"), "spec.model.source"),
    Invalid("md-https-source", MD, _model("https://huggingface.co/org/repo"), "spec.model.source"),
    Invalid("md-relative-file-path", MD, _model("file://models/qwen"), "spec.model.source"),
    Invalid("md-file-root-only", MD, _model("file:///"), "spec.model.source"),
    Invalid("md-hf-without-repo", MD, _model("hf://mlx-community"), "spec.model.source"),
    Invalid("md-s3-uppercase-bucket", MD, _model("s3://Models/qwen"), "spec.model.source"),
    Invalid("md-dot-dot-segment", MD, _model("file:///models/../etc"), "spec.model.source"),
    Invalid("md-source-missing", MD, {"model": {"source": DELETE}}, "spec.model.source"),
    Invalid("md-model-missing", MD, {"model": DELETE}, "spec.model"),
    Invalid(
        "md-served-name-space", MD, {"model": {"servedName": "my model"}}, "spec.model.servedName"
    ),
    # ModelDeployment: the autoscaler's bounds
    Invalid(
        "md-idle-format", MD, {"minReplicas": 0, "idleTimeout": "15 seconds"}, "spec.idleTimeout"
    ),
    Invalid("md-idle-fraction", MD, {"minReplicas": 0, "idleTimeout": "1.5m"}, "spec.idleTimeout"),
    Invalid(
        "md-idle-too-short", MD, {"minReplicas": 0, "idleTimeout": "500ms"}, "spec.idleTimeout"
    ),
    Invalid("md-idle-too-long", MD, {"minReplicas": 0, "idleTimeout": "1000h"}, "spec.idleTimeout"),
    Invalid("md-idle-without-min", MD, {"idleTimeout": "15s"}, "spec.idleTimeout"),
    Invalid("md-min-zero-without-idle", MD, {"minReplicas": 0}, "spec.minReplicas"),
    Invalid("md-min-negative", MD, {"minReplicas": -1}, "spec.minReplicas"),
    Invalid("md-max-zero", MD, {"maxReplicas": 0}, "spec.maxReplicas"),
    Invalid(
        "md-min-above-max",
        MD,
        {"replicas": 0, "minReplicas": 2, "maxReplicas": 1},
        "spec.minReplicas",
    ),
    Invalid("md-replicas-above-max", MD, {"maxReplicas": 1}, "spec.replicas"),
    Invalid(
        "md-replicas-below-min",
        MD,
        {"replicas": 1, "minReplicas": 2, "maxReplicas": 2},
        "spec.replicas",
    ),
    Invalid("md-max-beyond-nodes", MD, {"maxReplicas": 3}, "spec.placement.nodes"),
    Invalid(
        "md-sharded-autoscaled",
        MD,
        {"replicas": 1, "sharding": {"size": 2}, "minReplicas": 1},
        "spec.sharding",
    ),
    # ModelDeployment: the engine
    Invalid("md-engine-unknown", MD, {"engine": {"name": "llamacpp"}}, "spec.engine.name"),
    Invalid("md-engine-string", MD, {"engine": "mlx-embed"}, "spec.engine"),
    Invalid(
        "md-engine-vllm-options-on-mlx",
        MD,
        {"engine": {"vllm": {"task": "embed"}}},
        "spec.engine.vllm",
    ),
    Invalid(
        "md-engine-embed-options-on-vllm",
        MD,
        {"engine": {"name": "vllm", "embed": {"maxInputs": 4}}},
        "spec.engine.embed",
    ),
    Invalid(
        "md-engine-command-missing", MD, {"engine": {"name": "command"}}, "spec.engine.command"
    ),
    Invalid(
        "md-engine-command-no-port",
        MD,
        {"engine": {**_COMMAND, "command": {**_COMMAND["command"], "argv": ["srv", "{host}"]}}},
        "spec.engine.command.argv",
    ),
    Invalid(
        "md-engine-command-no-memory",
        MD,
        {"engine": {**_COMMAND, "command": {"argv": _ARGV, "capabilities": ["chat"]}}},
        "spec.engine.command.memoryBytes",
    ),
    *(
        Invalid(
            f"md-engine-command-env-{name.lower().replace('_', '-')}",
            MD,
            _command_env({"OMP_NUM_THREADS": "2", name: value}),
            "spec.engine.command.env",
        )
        for name, value in ATTACK_ENV.items()
    ),
    Invalid(
        "md-engine-command-env-node-options",
        MD,
        _command_env({"NODE_OPTIONS": "--require /tmp/x.js"}),
        "spec.engine.command.env",
    ),
    Invalid(
        "md-engine-vllm-extra-worker-cls",
        MD,
        _vllm_extra(["--seed", "1", "--worker-cls", "evil.Worker"]),
        "spec.engine.vllm.extraArgs",
    ),
    Invalid(
        "md-engine-vllm-extra-middleware",
        MD,
        _vllm_extra(["--middleware=evil.app"]),
        "spec.engine.vllm.extraArgs",
    ),
    Invalid(
        "md-engine-vllm-extra-abbreviated",
        MD,
        _vllm_extra(["--tool-parser-plug", "/tmp/x.py"]),
        "spec.engine.vllm.extraArgs",
    ),
    Invalid(
        "md-engine-embed-max-inputs-0",
        MD,
        {"engine": {"name": "mlx-embed", "embed": {"maxInputs": 0}}},
        "spec.engine.embed.maxInputs",
    ),
    Invalid(
        "md-engine-vllm-gpu-share",
        MD,
        {"engine": {"name": "vllm", "vllm": {"gpuMemoryUtilization": 1.5}}},
        "spec.engine.vllm.gpuMemoryUtilization",
    ),
    # ModelDeployment: sizes
    Invalid("md-replicas-65", MD, {"replicas": 65, "placement": DELETE}, "spec.replicas"),
    Invalid("md-replicas-negative", MD, {"replicas": -1, "placement": DELETE}, "spec.replicas"),
    Invalid("md-replicas-not-integer", MD, {"replicas": "two"}, "spec.replicas"),
    Invalid("md-priority-huge", MD, {"priority": 2_000_000_000}, "spec.priority"),
    Invalid("md-priority-not-integer", MD, {"priority": "high"}, "spec.priority"),
    Invalid(
        "md-replicas-below-min-replicas",
        MD,
        {"replicas": 1, "minReplicas": 2, "placement": DELETE},
        "spec.replicas",
    ),
    Invalid("md-context-length-0", MD, {"contextLength": 0}, "spec.contextLength"),
    Invalid("md-context-length-huge", MD, {"contextLength": 2_000_000}, "spec.contextLength"),
    Invalid("md-max-concurrency-0", MD, {"maxConcurrency": 0}, "spec.maxConcurrency"),
    Invalid("md-memory-lots", MD, {"resources": {"memory": "lots"}}, "spec.resources.memory"),
    Invalid("md-memory-gb", MD, {"resources": {"memory": "48GB"}}, "spec.resources.memory"),
    Invalid("md-memory-zero", MD, {"resources": {"memory": "0"}}, "spec.resources.memory"),
    Invalid("md-memory-negative", MD, {"resources": {"memory": "-4Gi"}}, "spec.resources.memory"),
    Invalid("md-memory-zero-integer", MD, {"resources": {"memory": 0}}, "spec.resources.memory"),
    Invalid("md-memory-24-bytes", MD, {"resources": {"memory": "24"}}, "spec.resources.memory"),
    Invalid("md-memory-small-int", MD, {"resources": {"memory": 1000}}, "spec.resources.memory"),
    Invalid("md-memory-512Ki", MD, {"resources": {"memory": "512Ki"}}, "spec.resources.memory"),
    Invalid("md-memory-fraction", MD, {"resources": {"memory": 1.5}}, "spec.resources.memory"),
    Invalid("md-memory-boolean", MD, {"resources": {"memory": True}}, "spec.resources.memory"),
    # ModelDeployment: server options
    Invalid("md-kv-bits-3", MD, {"server": {"kvBits": 3}}, "spec.server.kvBits"),
    Invalid(
        "md-decode-concurrency-0",
        MD,
        {"server": {"decodeConcurrency": 0}},
        "spec.server.decodeConcurrency",
    ),
    Invalid(
        "md-max-tokens-over-context",
        MD,
        {"contextLength": 1024, "server": {"maxTokens": 4096}},
        "spec.server.maxTokens",
    ),
    Invalid(
        "md-chat-template-args-too-many-keys",
        MD,
        {"server": {"chatTemplateArgs": {f"k{i}": i for i in range(65)}}},
        "spec.server.chatTemplateArgs",
    ),
    # ModelDeployment: placement and swap
    Invalid(
        "md-nodes-fewer-than-replicas",
        MD,
        {"replicas": 3, "placement": {"nodes": ["mac-1", "mac-2"]}},
        "spec.placement.nodes",
    ),
    Invalid(
        "md-nodes-repeated",
        MD,
        {"replicas": 1, "placement": {"nodes": ["mac-1", "mac-1"]}},
        "spec.placement.nodes",
    ),
    Invalid(
        "md-node-name-invalid",
        MD,
        {"replicas": 1, "placement": {"nodes": ["Mac_1"]}},
        "spec.placement.nodes",
    ),
    # ModelDeployment: sharding
    Invalid("md-shard-size-1", MD, {"sharding": {"size": 1}}, "spec.sharding.size"),
    Invalid(
        "md-shard-engine",
        MD,
        {"sharding": {"size": 2}, "engine": {"name": "mlx-embed"}},
        "spec.sharding",
    ),
    Invalid("md-shard-size-17", MD, {"sharding": {"size": 17}}, "spec.sharding.size"),
    Invalid("md-shard-size-missing", MD, {"sharding": {"mode": "Tensor"}}, "spec.sharding.size"),
    Invalid("md-shard-mode", MD, {"sharding": {"size": 2, "mode": "Expert"}}, "spec.sharding.mode"),
    Invalid(
        "md-shard-backend", MD, {"sharding": {"size": 2, "backend": "mpi"}}, "spec.sharding.backend"
    ),
    Invalid(
        "md-shard-nodes-fewer-than-ranks",
        MD,
        {"replicas": 2, "sharding": {"size": 2}, "placement": {"nodes": ["a", "b", "c"]}},
        "spec.placement.nodes",
    ),
    Invalid(
        "md-placement-strategy",
        MD,
        {"placement": {"strategy": "Random"}},
        "spec.placement.strategy",
    ),
    Invalid(
        "md-swap-strategy-lowercase", MD, {"swap": {"strategy": "surge"}}, "spec.swap.strategy"
    ),
    Invalid(
        "md-drain-timeout-0",
        MD,
        {"swap": {"drainTimeoutSeconds": 0}},
        "spec.swap.drainTimeoutSeconds",
    ),
    Invalid(
        "md-drain-timeout-3601",
        MD,
        {"swap": {"drainTimeoutSeconds": 3601}},
        "spec.swap.drainTimeoutSeconds",
    ),
    Invalid("md-approval", MD, {"swap": {"approval": "Sometimes"}}, "spec.swap.approval"),
    # InferenceNode
    Invalid(
        "in-url-without-scheme",
        IN,
        {"agent": {"url": "mac-1.lan:8443"}},
        "spec.agent.url",
    ),
    Invalid("in-url-ftp", IN, {"agent": {"url": "ftp://mac-1.lan"}}, "spec.agent.url"),
    Invalid("in-url-no-host", IN, {"agent": {"url": "https:///v1"}}, "spec.agent.url"),
    Invalid("in-agent-missing", IN, {"agent": DELETE}, "spec.agent"),
    Invalid(
        "in-token-secret-missing",
        IN,
        {"agent": {"tokenSecretRef": DELETE}},
        "spec.agent.tokenSecretRef",
    ),
    Invalid(
        "in-token-secret-name-invalid",
        IN,
        {"agent": {"tokenSecretRef": {"name": "Bad_Name"}}},
        "spec.agent.tokenSecretRef.name",
    ),
    Invalid(
        "in-ca-with-http",
        IN,
        {"agent": {"url": "http://mac-1.lan:8080", "caSecretRef": {"name": "mac-1-ca"}}},
        "spec.agent.caSecretRef",
    ),
    Invalid(
        "in-negative-price",
        IN,
        {"cost": {"purchasePriceUSD": -1}},
        "spec.cost.purchasePriceUSD",
    ),
    Invalid(
        "in-negative-electricity",
        IN,
        {"cost": {"electricityUSDPerKWh": -0.1}},
        "spec.cost.electricityUSDPerKWh",
    ),
    Invalid(
        "in-negative-idle-power", IN, {"cost": {"idlePowerWatts": -5}}, "spec.cost.idlePowerWatts"
    ),
    Invalid(
        "in-busy-below-idle",
        IN,
        {"cost": {"idlePowerWatts": 50, "busyPowerWatts": 20}},
        "spec.cost.busyPowerWatts",
    ),
    Invalid(
        "in-amortization-0", IN, {"cost": {"amortizationMonths": 0}}, "spec.cost.amortizationMonths"
    ),
    Invalid("in-reserved-negative", IN, {"reservedMemory": "-1Gi"}, "spec.reservedMemory"),
    Invalid("in-reserved-negative-integer", IN, {"reservedMemory": -1}, "spec.reservedMemory"),
    Invalid("in-hardware-memory-bad", IN, {"hardware": {"memory": "big"}}, "spec.hardware.memory"),
    Invalid("in-unschedulable-not-bool", IN, {"unschedulable": "maybe"}, "spec.unschedulable"),
    # SwapPlan
    Invalid("swp-deployment-ref-missing", SWP, {"deploymentRef": DELETE}, "spec.deploymentRef"),
    Invalid("swp-target-missing", SWP, {"target": DELETE}, "spec.target"),
    Invalid("swp-target-source-missing", SWP, {"target": {"source": DELETE}}, "spec.target.source"),
    Invalid(
        "swp-target-unknown-scheme",
        SWP,
        {"target": {"source": "gs://bucket/model"}},
        "spec.target.source",
    ),
    Invalid("swp-strategy", SWP, {"strategy": "Fast"}, "spec.strategy"),
    Invalid("swp-drain-timeout-0", SWP, {"drainTimeoutSeconds": 0}, "spec.drainTimeoutSeconds"),
    Invalid("swp-nodes-repeated", SWP, {"nodes": ["mac-1", "mac-1"]}, "spec.nodes"),
    Invalid("swp-paused-not-bool", SWP, {"paused": "soon"}, "spec.paused"),
    # ModelRoute
    Invalid("mr-rules-missing", MR, {"rules": DELETE}, "spec.rules"),
    Invalid("mr-rules-empty", MR, {"rules": []}, "spec.rules"),
    Invalid("mr-name-space", MR, {"names": ["my chat"]}, "spec.names"),
    Invalid(
        "mr-backend-both",
        MR,
        {"rules": [_rule(backends=[{"deployment": "a", "external": _EXTERNAL}])]},
        "spec.rules[0].backends[0]",
    ),
    Invalid(
        "mr-backend-neither",
        MR,
        {"rules": [_rule(backends=[{"weight": 5}])]},
        "spec.rules[0].backends[0]",
    ),
    Invalid(
        "mr-weights-all-zero",
        MR,
        {"rules": [_rule(backends=[{"deployment": "a", "weight": 0}])]},
        "spec.rules[0].backends",
    ),
    Invalid(
        "mr-weight-negative",
        MR,
        {"rules": [_rule(backends=[{"deployment": "a", "weight": -1}])]},
        "spec.rules[0].backends[0].weight",
    ),
    Invalid(
        "mr-external-url",
        MR,
        {"rules": [_rule(backends=[{"external": {**_EXTERNAL, "url": "api.example.com"}}])]},
        "spec.rules[0].backends[0].external.url",
    ),
    # userinfo: a credential in the URL, or a host that is not the one it seems (issue 22 item 9)
    *(
        Invalid(
            f"mr-external-url-userinfo-{i}",
            MR,
            {"rules": [_rule(backends=[{"external": {**_EXTERNAL, "url": url}}])]},
            "spec.rules[0].backends[0].external.url",
        )
        for i, url in enumerate(
            (
                "https://user:secret@api.example.com/v1",
                "https://api.example.com@169.254.169.254/v1",
                "http://@10.0.0.1:8080",
            )
        )
    ),
    Invalid(
        "mr-external-url-ftp",
        MR,
        {"rules": [_rule(backends=[{"external": {**_EXTERNAL, "url": "ftp://x"}}])]},
        "spec.rules[0].backends[0].external.url",
    ),
    Invalid("in-url-ftp-short", IN, {"agent": {"url": "ftp://x"}}, "spec.agent.url"),
    Invalid(
        "mr-prompt-range",
        MR,
        {
            "rules": [
                _rule(match={"minPromptTokens": 100, "maxPromptTokens": 10}),
            ]
        },
        "spec.rules[0].match",
    ),
    Invalid(
        "mr-header-upper",
        MR,
        {"rules": [_rule(match={"headers": [{"name": "X-Task", "values": ["a"]}]})]},
        "spec.rules[0].match.headers[0].name",
    ),
    Invalid(
        "mr-match-model-not-a-name",
        MR,
        {"rules": [_rule(match={"models": ["other"]})]},
        "spec.rules",
    ),
    Invalid("mr-fallback-when", MR, {"fallback": {"when": ["Sometimes"]}}, "spec.fallback.when"),
)
