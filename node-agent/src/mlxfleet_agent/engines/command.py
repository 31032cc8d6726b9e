"""The generic `command` engine: any OpenAI-compatible server from an argv template (pure).

    argv: ["llama-server", "--model", "{model}", "--host", "{host}", "--port", "{port}"]

Placeholders are `{model}` (the slot's local model path), `{host}` (always 127.0.0.1) and
`{port}` (the slot's port); `{{` and `}}` are literal braces. Anything else in braces is refused
(no attribute or index access, no format specs: the template is not `str.format`). The argv is
exec'd as given, never through a shell, so quoting and expansion do not exist; a shell as the
program is refused. Its environment is an allow-list: the fleet's `COMMAND_ENV_NAMES` (settings
that load no code), narrowed per agent (`allowed_env`, `--allow-env`); any other name is refused
(a deny-list was bypassed: PYTHONWARNINGS, BROWSER and PERL5OPT chained into code). The agent runs
only programs its operator allow-listed (`allowed_programs`; empty means the engine is off), since
whoever may create a ModelDeployment could otherwise run anything on the node. A template must
pass `{port}` and `{host}`, so the server binds where the agent proxies and nowhere else. It must
declare what it serves and how much memory it needs, because the agent cannot know either.
May import: contract, engines.plugin, the standard library. Called by: engines.registry
(`ENGINE`, the `plugin.Engine`), tests.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mlxfleet_agent import contract
from mlxfleet_agent.contract.engines import (
    COMMAND_ENV_NAMES,
    PLACEHOLDERS,
    SHELLS,
    TOKEN,
    CommandOptions,
    TemplateError,
    check_env,
    fields,
    validate_argv,
)
from mlxfleet_agent.engines import plugin

# the options and template checks live in the contract (admission uses them too)
__all__ = [
    "COMMAND_ENV_NAMES",
    "ENGINE",
    "PLACEHOLDERS",
    "SHELLS",
    "CommandOptions",
    "TemplateError",
    "check_allowed",
    "check_env",
    "fields",
    "launch",
    "memory",
    "render",
    "render_arg",
    "validate_argv",
]


def render_arg(arg: str, values: Mapping[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        text = m.group(0)
        if text in ("{{", "}}"):
            return text[0]
        return values[m.group(1)]

    return TOKEN.sub(sub, arg)


def check_allowed(program: str, allowed_programs: Sequence[str]) -> None:
    """TemplateError unless the node's operator allow-listed `program`."""
    if not allowed_programs:
        raise TemplateError("the command engine is off on this node (no programs are allowed)")
    if program not in allowed_programs:
        raise TemplateError(
            f"program {program!r} is not allowed on this node (allowed: "
            f"{', '.join(sorted(allowed_programs))})"
        )


def render(options: CommandOptions, target: plugin.Target) -> list[str]:
    values = {"model": target.model, "port": str(target.port), "host": target.host}
    return [options.argv[0], *(render_arg(a, values) for a in options.argv[1:])]


def launch(
    options: CommandOptions,
    target: plugin.Target,
    *,
    allowed_programs: Sequence[str],
    allowed_env: frozenset[str] = COMMAND_ENV_NAMES,
) -> plugin.Launch:
    check_allowed(options.argv[0], allowed_programs)
    check_env(options.env, allowed_env)
    by_name = options.request_model == "name"
    return plugin.Launch(
        argv=tuple(render(options, target)),
        env=dict(options.env),
        stop_signal=signal.Signals[options.stop_signal],
        stop_grace_s=options.stop_grace_s,
        upstream_model=target.served_model_name if by_name else target.model,
    )


def memory(options: CommandOptions) -> plugin.Memory:
    return plugin.Memory(host_bytes=options.memory_bytes, basis="declared in the deployment")


@dataclass(frozen=True, slots=True)
class Command:
    """The command engine as a `plugin.Engine`: the deployment's template within this node's
    allow-lists, ready once one real request of its first declared capability answers (chat
    first, as mlx_lm); not swept (its command line is arbitrary)."""

    swept_mark: str | None = None

    def admit(self, spec: contract.EngineSpec, host: plugin.Host) -> None:
        if spec.command is None:
            return
        try:
            check_allowed(spec.command.argv[0], host.command_programs)
            check_env(spec.command.env, host.command_env)
        except TemplateError as exc:
            raise plugin.EngineRefused(f"engine command: {exc}") from exc

    def launch(
        self, spec: contract.SlotSpec, target: plugin.Target, host: plugin.Host
    ) -> plugin.Launch:
        assert spec.engine.command is not None  # EngineSpec requires it for engine command
        return launch(
            spec.engine.command,
            target,
            allowed_programs=host.command_programs,
            allowed_env=host.command_env,
        )

    def probes(self, spec: contract.SlotSpec, *, upstream_model: str) -> list[plugin.Probe]:
        assert spec.engine.command is not None
        caps = spec.engine.command.capabilities
        main = next(c for c in plugin.Capability if c in caps)  # chat first, as mlx_lm
        return [plugin.probe_for(main, model=upstream_model)]

    def memory(self, spec: contract.SlotSpec, weights: plugin.Weights) -> int:
        """The agent cannot know: the deployment declares it."""
        assert spec.engine.command is not None
        return memory(spec.engine.command).host_bytes


ENGINE = Command()
