"""Which engine runs a slot, and how: its launch (argv, environment, stop signal, the `model`
value requests carry), and its readiness probes, from the slot's spec (memory: models.catalog).

The one place that dispatches on `spec.engine.name`: `mlx-lm` is today's `mlxlm.command` and
warm-up completion, unchanged; `mlx-embed` / `mlx-rerank` the agent's embeddings/rerank server;
`vllm` `vllm serve`; `command` the deployment's allow-listed template. Pure (no I/O): the
launcher and the catalog call it with what they read.
May import: contract, engines (plugin, embed_engine, vllm, command, discovery), backends.mlxlm,
the standard library. Called by: backends.launcher, tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mlxfleet_agent import contract
from mlxfleet_agent.backends import mlxlm
from mlxfleet_agent.engines import command, embed_engine, plugin, vllm

Name = contract.EngineName


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
    runnable: frozenset[str] = frozenset({Name.MLX_LM.value})
    reasons: tuple[tuple[str, str], ...] = ()  # engine -> why not, for refusals


def check(spec: contract.EngineSpec, host: Host) -> None:
    """EngineRefused unless this node can run `spec` (admission of a slot)."""
    if spec.name.value not in host.runnable:
        why = dict(host.reasons).get(spec.name.value, "not available on this node")
        raise EngineRefused(f"engine {spec.name.value} cannot run on this node: {why}")
    if spec.command is not None:
        try:
            command.check_allowed(spec.command.argv[0], host.command_programs)
            command.check_env(spec.command.env, host.command_env)
        except command.TemplateError as exc:
            raise EngineRefused(f"engine command: {exc}") from exc


def _task(name: contract.EngineName) -> embed_engine.Task:
    return "rerank" if name is Name.MLX_RERANK else "embed"


def launch(spec: contract.SlotSpec, model_dir: Path, port: int, host: Host) -> plugin.Launch:
    """How to start the slot's engine on `port` for the weights in `model_dir`."""
    engine = spec.engine
    target = plugin.Target(model=str(model_dir), port=port, served_model_name=spec.served_name)
    if engine.name is Name.MLX_LM:
        argv = mlxlm.command(
            mlxlm.LaunchSpec(
                model_dir=model_dir,
                options=spec.server,
                max_concurrency=spec.max_concurrency,
                python=host.python,
                shard=spec.shard,
            ),
            port=port,
        )
        return plugin.Launch(
            argv=tuple(argv),
            stop_signal=mlxlm.STOP_SIGNAL,
            stop_grace_s=0.0,  # the agent's --stop-grace-s, as always
            upstream_model=str(model_dir),  # pinned: mlx_lm never loads other weights
            health_path=mlxlm.HEALTH_PATH,
        )
    if engine.name in (Name.MLX_EMBED, Name.MLX_RERANK):
        options = engine.embed or contract.EmbedOptions()
        return embed_engine.launch(target, options, python=host.python, task=_task(engine.name))
    if engine.name is Name.VLLM:
        return vllm.launch(target, engine.vllm or contract.VllmOptions())
    assert engine.command is not None
    return command.launch(
        engine.command,
        target,
        allowed_programs=host.command_programs,
        allowed_env=host.command_env,
    )


def probes(spec: contract.SlotSpec, *, upstream_model: str) -> Sequence[plugin.Probe]:
    """Readiness, in order: each must be accepted before the slot serves (`upstream_model`:
    the `model` value the engine answers to, `Launch.upstream_model`)."""
    engine = spec.engine
    if engine.name is Name.MLX_LM:
        body = dict(mlxlm.WARMUP_BODY)
        return [plugin.Probe("POST", mlxlm.WARMUP_PATH, body, plugin.Capability.COMPLETIONS)]
    if engine.name in (Name.MLX_EMBED, Name.MLX_RERANK):
        return [embed_engine.probe(_task(engine.name), served_model_name=upstream_model)]
    if engine.name is Name.VLLM:
        return vllm.probes(engine.vllm or contract.VllmOptions(), served_model_name=upstream_model)
    assert engine.command is not None
    caps = engine.command.capabilities
    main = next(c for c in plugin.Capability if c in caps)  # chat first, as mlx_lm
    return [plugin.probe_for(main, model=upstream_model)]
