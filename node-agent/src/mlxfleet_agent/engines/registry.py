"""The engines by name: one `plugin.Engine` per `contract.EngineName`, and the three questions the
agent asks of a slot's engine (pure; no I/O: the launcher calls it with what it read).

`ENGINES` is the one place a name becomes an engine: `mlx-lm` is `mlxlm`, `mlx-embed` /
`mlx-rerank` the agent's embeddings/rerank server (`embed_engine`), `vllm` `vllm serve`,
`command` the deployment's allow-listed template. `check` refuses a slot whose engine this node
cannot run (discovery's verdict, then the engine's own `admit`); `launch`, `probes` and
`memory` ask the slot's engine; `swept_marks` is what the orphan sweep kills. A new engine is
a module implementing `plugin.Engine` and one entry here (a unit test checks every name has
one).
May import: contract, engines (plugin, mlxlm, embed_engine, vllm, command), the standard
library. Called by: backends.launcher, backends.orphans, models.catalog (memory), tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from mlxfleet_agent import contract
from mlxfleet_agent.engines import command, embed_engine, mlxlm, plugin, vllm

Name = contract.EngineName

ENGINES: Mapping[contract.EngineName, plugin.Engine] = MappingProxyType(
    {
        Name.MLX_LM: mlxlm.ENGINE,
        Name.MLX_EMBED: embed_engine.EMBED,
        Name.MLX_RERANK: embed_engine.RERANK,
        Name.VLLM: vllm.ENGINE,
        Name.COMMAND: command.ENGINE,
    }
)


def check(spec: contract.EngineSpec, host: plugin.Host) -> None:
    """plugin.EngineRefused unless this node can run `spec` (admission of a slot)."""
    if spec.name.value not in host.runnable:
        why = dict(host.reasons).get(spec.name.value, "not available on this node")
        raise plugin.EngineRefused(f"engine {spec.name.value} cannot run on this node: {why}")
    ENGINES[spec.name].admit(spec, host)


def launch(spec: contract.SlotSpec, model_dir: Path, port: int, host: plugin.Host) -> plugin.Launch:
    """How to start the slot's engine on `port` for the weights in `model_dir`."""
    target = plugin.Target(model=str(model_dir), port=port, served_model_name=spec.served_name)
    return ENGINES[spec.engine.name].launch(spec, target, host)


def probes(spec: contract.SlotSpec, *, upstream_model: str) -> Sequence[plugin.Probe]:
    """Readiness, in order: each must be accepted before the slot serves (`upstream_model`:
    the `model` value the engine answers to, `Launch.upstream_model`)."""
    return ENGINES[spec.engine.name].probes(spec, upstream_model=upstream_model)


def memory(spec: contract.SlotSpec, weights: plugin.Weights) -> int:
    """Host bytes the slot reserves once loaded from `weights` (sizing.UnknownModelSize)."""
    return ENGINES[spec.engine.name].memory(spec, weights)


def swept_marks() -> tuple[str, ...]:
    """What a backend's command line must contain for the orphan sweep to kill it, once each."""
    marks = (e.swept_mark for e in ENGINES.values() if e.swept_mark is not None)
    return tuple(dict.fromkeys(marks))
