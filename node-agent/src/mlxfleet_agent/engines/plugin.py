"""The engine plug-in interface: the `Engine` protocol every engine module implements, and the
values it deals in (pure).

An engine tells the agent, for one slot: whether this node may run the spec beyond the engine
being runnable (`Engine.admit`), how to start it (`Engine.launch` -> `Launch`: argv, extra
environment, how to stop it), how to know it is ready (`Engine.probes` -> `Probe`: a real request
and what a good answer looks like), which of its processes a restarted agent may kill
(`Engine.swept_mark`), and how much host memory the slot reserves once loaded (`Engine.memory`,
from its model directory through `Weights`, read only when the engine needs it); what it serves
is `Capability`, the sizing of an engine `Memory`.
One module per engine implements it (`mlxlm`, `embed_engine` for mlx-embed and mlx-rerank,
`vllm`, `command`); `registry` maps each `contract.EngineName` to its engine. Everything here
is data computed from a spec and host facts (`Host`), so it is unit-tested without processes;
the agent's supervisor (backends) stays the only code that spawns, probes and signals.
Engine options are pydantic models (`EngineOptions`: camelCase, unknown keys refused) so the
same classes can validate a ModelDeployment's `spec.engine` at admission.
May import: contract, pydantic and the standard library. Called by: engines.{registry,mlxlm,
vllm,command,embed_engine,discovery}, backends, tests.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = ["Capability", "EngineOptions"]

from mlxfleet_agent import contract
from mlxfleet_agent.contract.engines import Capability, EngineOptions


class EngineRefused(ValueError):
    """This node cannot run the slot's engine (the message names the engine and why)."""


@dataclass(frozen=True, slots=True)
class Host:
    """What a launch needs from the agent: its interpreter, the command engine's allow-lists
    (programs, environment names), and the engines discovery found runnable (with why not, for
    the others)."""

    python: str
    command_programs: tuple[str, ...] = ()
    command_env: frozenset[str] = contract.COMMAND_ENV_NAMES  # names a command slot may set
    runnable: frozenset[str] = frozenset({contract.EngineName.MLX_LM.value})
    reasons: tuple[tuple[str, str], ...] = ()  # engine -> why not, for refusals


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


class Weights(Protocol):
    """A slot's model directory as an engine's memory needs it, read only when asked
    (models.catalog gives one over models.modeldir; errors are modeldir's and sizing's)."""

    def inspect(self) -> tuple[int, contract.ModelShape]:
        """The weights' bytes and the model's shape (sizing.UnknownModelSize when unknown)."""
        ...

    def config(self) -> dict[str, Any]:
        """The model's config.json."""
        ...


class Engine(Protocol):
    """One engine as the agent runs it (see the module docstring); `registry.ENGINES` holds one
    per `contract.EngineName`. Pure: every answer is computed from its arguments."""

    @property
    def swept_mark(self) -> str | None:
        """What the command line of this engine's processes contains, so the orphan sweep of a
        restarted agent kills them (None: not swept, the command line is arbitrary)."""
        ...

    def admit(self, spec: contract.EngineSpec, host: Host) -> None:
        """EngineRefused when this node may not run `spec` for a reason of the engine's own
        (the registry has already checked that the engine is runnable here)."""
        ...

    def launch(self, spec: contract.SlotSpec, target: Target, host: Host) -> Launch:
        """How to start the slot's engine for `target` (its model path, port, served name)."""
        ...

    def probes(self, spec: contract.SlotSpec, *, upstream_model: str) -> Sequence[Probe]:
        """Readiness, in order: each must be accepted before the slot serves (`upstream_model`:
        the `model` value the engine answers to, `Launch.upstream_model`)."""
        ...

    def memory(self, spec: contract.SlotSpec, weights: Weights) -> int:
        """Host bytes the slot reserves once loaded (sizing.UnknownModelSize: refuse it)."""
        ...
