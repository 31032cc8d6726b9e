"""The engine plug-in interface proposed for the agent (pure values; part 2 of issue 11 wires it).

An engine tells the agent, for one slot: how to start it (`Launch`: argv, extra environment,
how to stop it), how to know it is ready (`Probe`: a real request and what a good answer looks
like), what it serves (`Capability`), and how much memory to reserve (`Memory`). Everything here
is data computed from a spec and host facts, so it is unit-tested without processes; the
agent's supervisor stays the only code that spawns, probes and signals.
Engine options are pydantic models (`EngineOptions`: camelCase, unknown keys refused) so the
same classes can validate a ModelDeployment's `spec.engine` at admission.
May import: pydantic and the standard library. Called by: engines.{vllm,command,embed_engine,
discovery}, tests.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Capability", "EngineOptions"]

from mlxfleet_agent.contract.engines import Capability, EngineOptions


@dataclass(frozen=True, slots=True)
class Target:
    """Where one slot's engine serves: its local model path, its loopback port, the name
    clients use for it."""

    model: str
    port: int
    served_model_name: str
    host: str = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start and stop one engine process for a slot.

    `argv` is exec'd directly (never through a shell); `env` is added to the agent's
    environment; `upstream_model` is what the data plane writes into a request's `model` field
    (mlx_lm: its pinned model path; servers started with a served name: that name);
    `health_path` is a GET that answers 200 while the engine can serve (mlx_lm's /health turns
    503 once its generation thread died while the process lives on): the agent watches it and
    restarts the backend when it says no (None: only the process's exit is watched).
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    stop_signal: signal.Signals = signal.SIGTERM
    stop_grace_s: float = 10.0
    upstream_model: str = ""
    health_path: str | None = None


@dataclass(frozen=True, slots=True)
class Probe:
    """A readiness request: ready once it answers 200 with a body `accepts` agrees with."""

    method: Literal["GET", "POST"]
    path: str
    body: Mapping[str, Any] | None
    expect: Capability | Literal["models"]


@dataclass(frozen=True, slots=True)
class Memory:
    """What a slot reserves: host (unified) memory and, for CUDA engines, GPU memory."""

    host_bytes: int
    gpu_bytes: int = 0
    basis: str = ""  # how it was sized, for status messages


def probe_for(capability: Capability, *, model: str) -> Probe:
    """The smallest real request that proves an engine serves `capability` for `model`."""
    if capability is Capability.CHAT:
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": "ping"}],
            "max_tokens": 1,
            "temperature": 0.0,
        }
        return Probe("POST", "/v1/chat/completions", body, capability)
    if capability is Capability.COMPLETIONS:
        body = {"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0.0}
        return Probe("POST", "/v1/completions", body, capability)
    if capability is Capability.EMBEDDINGS:
        return Probe("POST", "/v1/embeddings", {"model": model, "input": "ping"}, capability)
    body = {"model": model, "query": "ping", "documents": ["ping"]}
    return Probe("POST", "/v1/rerank", body, capability)


def accepts(probe: Probe, status: int, answer: object) -> bool:
    """Does this answer prove readiness? (status 200 and the shape the capability promises)."""
    if status != 200 or not isinstance(answer, dict):
        return False
    if probe.expect == "models" or probe.expect is Capability.EMBEDDINGS:
        data = answer.get("data")
        return isinstance(data, list) and len(data) > 0
    if probe.expect is Capability.RERANK:
        results = answer.get("results")
        return isinstance(results, list) and len(results) > 0
    choices = answer.get("choices")
    return isinstance(choices, list) and len(choices) > 0
