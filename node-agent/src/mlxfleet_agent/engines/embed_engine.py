"""The `mlx-embed` / `mlx-rerank` engines (`plugin.Engine`: `EMBED`, `RERANK`): argv, readiness,
memory (pure).

The process is `python -m mlxfleet_agent.engines.embed_server` with the slot's model, port and
served name, and the options below (the server's flags). It listens only once the model is
loaded and warmed, so readiness is one real request of its task. It stops on SIGTERM or SIGINT.
Memory: the weights, plus the activations of one forward pass (`batchTokens` padded tokens
through one layer at a time, float32 worst case), plus the attention scores where the backend
materialises them (mlx on CPU; Metal's fused attention does not), plus a flat runtime reserve.
May import: contract, sizing, engines.plugin and the standard library. Called by: engines.registry,
tests.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass
from typing import Any, Literal

from mlxfleet_agent import contract, sizing
from mlxfleet_agent.contract.engines import EmbedOptions
from mlxfleet_agent.engines import plugin

__all__ = ["EMBED", "RERANK", "EmbedOptions", "Task", "command", "launch", "memory", "probe"]

MODULE = "mlxfleet_agent.engines.embed_server"
RUNTIME_BYTES = 512 << 20  # interpreter, mlx, tokenizer, HTTP server


Task = Literal["embed", "rerank"]


def command(target: plugin.Target, options: EmbedOptions, *, python: str, task: Task) -> list[str]:
    argv = [
        python, "-m", MODULE,
        "--model", target.model,
        "--host", target.host,
        "--port", str(target.port),
        "--task", task,
        "--served-model-name", target.served_model_name,
        "--max-inputs", str(options.max_inputs),
        "--max-request-tokens", str(options.max_request_tokens),
        "--batch-tokens", str(options.batch_tokens),
        "--batch-rows", str(options.batch_rows),
        "--matryoshka", options.matryoshka,
    ]  # fmt: skip
    if options.max_input_tokens is not None:
        argv += ["--max-input-tokens", str(options.max_input_tokens)]
    return argv


def launch(
    target: plugin.Target, options: EmbedOptions, *, python: str, task: Task
) -> plugin.Launch:
    return plugin.Launch(
        argv=tuple(command(target, options, python=python, task=task)),
        env={"PYTHONUNBUFFERED": "1"},
        stop_signal=signal.SIGTERM,
        stop_grace_s=10.0,
        upstream_model=target.served_model_name,
    )


def probe(task: Task, *, served_model_name: str) -> plugin.Probe:
    cap = plugin.Capability.EMBEDDINGS if task == "embed" else plugin.Capability.RERANK
    return plugin.probe_for(cap, model=served_model_name)


@dataclass(frozen=True, slots=True)
class EmbedEngine:
    """mlx-embed (`task` embed) or mlx-rerank (`task` rerank) as a `plugin.Engine`: the agent's
    own server from its interpreter, ready once one real request of its task answers."""

    task: Task
    swept_mark: str | None = MODULE

    def admit(self, spec: contract.EngineSpec, host: plugin.Host) -> None:
        return None  # nothing beyond being runnable

    def launch(
        self, spec: contract.SlotSpec, target: plugin.Target, host: plugin.Host
    ) -> plugin.Launch:
        options = spec.engine.embed or contract.EmbedOptions()
        return launch(target, options, python=host.python, task=self.task)

    def probes(self, spec: contract.SlotSpec, *, upstream_model: str) -> list[plugin.Probe]:
        return [probe(self.task, served_model_name=upstream_model)]

    def memory(self, spec: contract.SlotSpec, weights: plugin.Weights) -> int:
        size, _ = weights.inspect()
        return slot_memory(spec, size, weights.config())


EMBED = EmbedEngine("embed")
RERANK = EmbedEngine("rerank")


def slot_memory(spec: contract.SlotSpec, weights_bytes: int, config: dict[str, Any]) -> int:
    """An embeddings/rerank slot: weights + one batch's activations (no KV cache)."""
    cfg = sizing.text_config(config)
    options = spec.engine.embed or contract.EmbedOptions()

    def need(key: str) -> int:
        value = cfg.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise sizing.UnknownModelSize(f"config.json has no positive integer {key}")
        return value

    return memory(
        weights_bytes=weights_bytes,
        hidden_size=need("hidden_size"),
        intermediate_size=need("intermediate_size"),
        heads=need("num_attention_heads"),
        max_input_tokens=options.max_input_tokens or min(8192, spec.context_length),
        options=options,
        attention_materialized=sys.platform != "darwin",  # mlx on CPU materialises scores
    ).host_bytes


def memory(
    *,
    weights_bytes: int,
    hidden_size: int,
    intermediate_size: int,
    heads: int,
    max_input_tokens: int,
    options: EmbedOptions,
    attention_materialized: bool,
) -> plugin.Memory:
    tokens = options.batch_tokens
    activations = tokens * (4 * hidden_size + 3 * intermediate_size) * 4
    scores = tokens * heads * min(max_input_tokens, tokens) * 4 if attention_materialized else 0
    total = weights_bytes + activations + scores + RUNTIME_BYTES
    return plugin.Memory(
        host_bytes=total,
        basis=(
            f"weights {weights_bytes} + activations {activations} + attention {scores} "
            f"+ runtime {RUNTIME_BYTES} B (batchTokens {tokens})"
        ),
    )
