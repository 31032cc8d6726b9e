"""The generic `command` engine: any OpenAI-compatible server from an argv template (pure).

    argv: ["llama-server", "--model", "{model}", "--host", "{host}", "--port", "{port}"]

Placeholders are `{model}` (the slot's local model path), `{host}` (always 127.0.0.1) and
`{port}` (the slot's port); `{{` and `}}` are literal braces. Anything else in braces is refused
(no attribute or index access, no format specs: the template is not `str.format`). The argv is
exec'd as given, never through a shell, so quoting and expansion do not exist; a shell as the
program is refused, as are variables that inject code into an allowed program (LD_PRELOAD and
friends). The agent runs only programs its operator allow-listed (`allowed_programs`; empty means
the engine is off), since whoever may create a ModelDeployment could otherwise run anything on
the node. A template must pass `{port}` and `{host}`, so the server binds where the agent
proxies and nowhere else. It must declare what it serves and how much memory it needs, because
the agent cannot know either.
May import: pydantic, engines.plugin, the standard library. Called by: the agent's engine
registry (part 2), tests.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Mapping, Sequence
from typing import Literal

import pydantic

from mlxfleet_agent.engines import plugin

PLACEHOLDERS = ("model", "host", "port")
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "csh", "tcsh", "busybox"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FORBIDDEN_ENV = re.compile(
    r"^(LD_|DYLD_)|^(PYTHONPATH|PYTHONSTARTUP|PYTHONHOME|PATH|BASH_ENV|ENV)$"
)
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


class TemplateError(ValueError):
    """The template cannot be used; the message names the argument and what is allowed."""


def fields(arg: str) -> list[str]:
    """Placeholder names in one argument; TemplateError on a lone brace."""
    names = []
    for m in _TOKEN.finditer(arg):
        text = m.group(0)
        if text in ("{{", "}}"):
            continue
        if m.group(1) is None:
            raise TemplateError(f"{arg!r} has a lone {text!r} (write {text * 2} for a literal one)")
        names.append(m.group(1))
    return names


def render_arg(arg: str, values: Mapping[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        text = m.group(0)
        if text in ("{{", "}}"):
            return text[0]
        return values[m.group(1)]

    return _TOKEN.sub(sub, arg)


class CommandOptions(plugin.EngineOptions):
    """Engine options of a `command` ModelDeployment."""

    argv: tuple[str, ...] = pydantic.Field(min_length=1, max_length=256)
    env: dict[str, str] = pydantic.Field(default_factory=dict)
    capabilities: tuple[plugin.Capability, ...] = pydantic.Field(min_length=1)
    memory_bytes: int = pydantic.Field(gt=0)
    stop_signal: Literal["SIGTERM", "SIGINT"] = "SIGTERM"
    stop_grace_s: float = pydantic.Field(default=10.0, gt=0, le=300)
    # what the data plane puts in a request's `model`: the served name, or the local model path
    # (mlx_lm.server loads whatever `model` names, so it needs "path")
    request_model: Literal["name", "path"] = "name"

    @pydantic.field_validator("argv")
    @classmethod
    def _argv(cls, argv: tuple[str, ...]) -> tuple[str, ...]:
        validate_argv(argv)
        return argv

    @pydantic.field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"env name {name!r} must match [A-Za-z_][A-Za-z0-9_]*")
            if _FORBIDDEN_ENV.match(name):
                raise ValueError(
                    f"env {name} may not be set (it changes what code the program runs)"
                )
            if "\x00" in value:
                raise ValueError(f"env {name} contains a NUL byte")
        return env


def validate_argv(argv: Sequence[str]) -> None:
    """TemplateError unless `argv` is a usable template (see the module docstring)."""
    if not argv or not argv[0]:
        raise TemplateError("argv must name a program first")
    seen: set[str] = set()
    for i, arg in enumerate(argv):
        if "\x00" in arg:
            raise TemplateError(f"argv[{i}] contains a NUL byte")
        for name in fields(arg):
            if name not in PLACEHOLDERS:
                allowed = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
                raise TemplateError(f"argv[{i}] uses {{{name}}}; the placeholders are {allowed}")
            if i == 0:
                raise TemplateError("argv[0] (the program) may not contain placeholders")
            seen.add(name)
    program = os.path.basename(argv[0])
    if program in SHELLS:
        raise TemplateError(
            f"argv[0] is the shell {program!r}; give the server's own command line instead"
        )
    for needed in ("port", "host"):
        if needed not in seen:
            raise TemplateError(
                f"the template must pass {{{needed}}} so the server listens where the agent "
                "proxies (loopback, the slot's port)"
            )


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
    options: CommandOptions, target: plugin.Target, *, allowed_programs: Sequence[str]
) -> plugin.Launch:
    check_allowed(options.argv[0], allowed_programs)
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
