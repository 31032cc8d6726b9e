"""Which engines this node can run, decided from host facts (pure; `facts.gather` reads them).

Engine names (the values `spec.engine` takes): `mlx-lm` (chat, completions), `mlx-embed`
(embeddings), `mlx-rerank` (rerank) — the last two are this package's embed_server —, `vllm`
(chat/completions or, with task embed/rerank, embeddings/rerank; needs an NVIDIA GPU) and
`command` (whatever the deployment declares; needs an allow-listed program). The result goes
into InferenceNode status so placement only picks nodes whose agent can run the engine, and a
refusal names the reason given here.
May import: engines.plugin and the standard library. Called by: engines.facts, the agent at start,
tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mlxfleet_agent.engines import plugin

MLX_LM, MLX_EMBED, MLX_RERANK, VLLM, COMMAND = (
    "mlx-lm",
    "mlx-embed",
    "mlx-rerank",
    "vllm",
    "command",
)
ENGINES = (MLX_LM, MLX_EMBED, MLX_RERANK, VLLM, COMMAND)
CAPABILITIES: Mapping[str, frozenset[plugin.Capability]] = {
    MLX_LM: frozenset({plugin.Capability.CHAT, plugin.Capability.COMPLETIONS}),
    MLX_EMBED: frozenset({plugin.Capability.EMBEDDINGS}),
    MLX_RERANK: frozenset({plugin.Capability.RERANK}),
    VLLM: frozenset(plugin.Capability),  # depends on its task option
    COMMAND: frozenset(plugin.Capability),  # declared per deployment
}
# distributions that give mlx a backend that runs (plain `mlx` on Linux installs but cannot run)
MLX_BACKENDS = frozenset({"mlx-metal", "mlx-cpu", "mlx-cuda"})


@dataclass(frozen=True, slots=True)
class Gpu:
    name: str
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class HostFacts:
    system: str  # platform.system(): "Darwin", "Linux"
    machine: str  # platform.machine(): "arm64", "x86_64"
    modules: frozenset[str] = frozenset()  # importable top-level modules (mlx, mlx_lm, ...)
    distributions: frozenset[str] = frozenset()  # installed distributions (mlx-cpu, ...)
    executables: Mapping[str, str] = field(default_factory=dict)  # name -> resolved path
    nvidia_gpus: tuple[Gpu, ...] = ()
    command_programs: tuple[str, ...] = ()  # the operator's allow-list, as configured


@dataclass(frozen=True, slots=True)
class Availability:
    engine: str
    available: bool
    reason: str  # why not (or what it runs on), for InferenceNode status and placement


def _mlx(facts: HostFacts) -> str | None:
    """None when mlx can run here, else why not."""
    if "mlx" not in facts.modules:
        return "the mlx package is not installed"
    if facts.distributions & MLX_BACKENDS:
        return None
    if facts.system == "Darwin" and facts.machine == "arm64":
        return None  # older mlx wheels carried the Metal backend themselves
    return (
        "mlx has no backend here (install mlx[cpu] on Linux, mlx[cuda] for NVIDIA, "
        "or run on Apple Silicon)"
    )


def _mlx_engine(engine: str, facts: HostFacts, needs: tuple[str, ...]) -> Availability:
    why = _mlx(facts)
    missing = [m for m in needs if m not in facts.modules]
    if why is None and missing:
        why = f"{', '.join(missing)} not installed"
    return Availability(engine, why is None, why or f"mlx on {facts.system} {facts.machine}")


def _vllm(facts: HostFacts) -> Availability:
    if "vllm" not in facts.executables:
        return Availability(VLLM, False, "vllm is not installed (no `vllm` on PATH)")
    if not facts.nvidia_gpus:
        return Availability(VLLM, False, "no NVIDIA GPU found (nvidia-smi lists none)")
    gpus = ", ".join(f"{g.name} ({g.memory_bytes >> 30} GiB)" for g in facts.nvidia_gpus)
    return Availability(VLLM, True, f"{len(facts.nvidia_gpus)} GPU(s): {gpus}")


def _command(facts: HostFacts) -> Availability:
    if not facts.command_programs:
        return Availability(COMMAND, False, "no programs are allow-listed for the command engine")
    found = [p for p in facts.command_programs if p in facts.executables]
    if not found:
        return Availability(
            COMMAND,
            False,
            f"none of the allowed programs exists: {', '.join(facts.command_programs)}",
        )
    return Availability(COMMAND, True, f"allowed: {', '.join(found)}")


def engines(facts: HostFacts) -> list[Availability]:
    """One entry per known engine, in ENGINES order."""
    return [
        _mlx_engine(MLX_LM, facts, ("mlx_lm",)),
        _mlx_engine(MLX_EMBED, facts, ("mlx_lm", "tokenizers")),
        _mlx_engine(MLX_RERANK, facts, ("mlx_lm", "tokenizers")),
        _vllm(facts),
        _command(facts),
    ]


def runnable(facts: HostFacts) -> list[str]:
    return [a.engine for a in engines(facts) if a.available]


def parse_nvidia_smi(text: str) -> tuple[Gpu, ...]:
    """`nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits` (MiB)."""
    gpus = []
    for line in text.splitlines():
        name, sep, mib = line.rpartition(",")
        mib = mib.strip()
        if not sep or not name.strip() or not mib.isdigit():
            continue
        gpus.append(Gpu(name.strip(), int(mib) * 1024 * 1024))
    return tuple(gpus)
