"""`mlxfleet-agent`: serve, print service definitions, make a tiny dev model.

    mlxfleet-agent serve --state-dir DIR --models-dir DIR [--config agent.yaml] [flags]
    mlxfleet-agent launchd-plist [--user U] [--log-dir D] [--env K=V] [--env-file F] [-- flags]
    mlxfleet-agent systemd-unit [--user U] [--env K=V] [--env-file F] [-- <serve flags>]
    mlxfleet-agent make-model --out DIR [--seed N] [--broken] [--kind chat|embedding|reranker]
    mlxfleet-agent join --server URL --token BOOTSTRAP [--labels k=v] [flags]
    mlxfleet-agent leave [--kubeconfig F]

May import: runtime (settings, serve, logs), service_units, dev (make-model), join.command,
uvloop, stdlib.
Called by: the console script, `python -m mlxfleet_agent.cli`.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from mlxfleet_agent import __version__, service_units
from mlxfleet_agent.runtime import settings as settings_mod

DEFAULT_SERVE_ARGS = ["--config", "/etc/mlxfleet/agent.yaml"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlxfleet-agent", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the agent (control API + data plane)")
    serve.add_argument(
        "--config", type=Path, help="YAML or JSON file with the same keys as the flags"
    )
    for flag in settings_mod.flags():
        serve.add_argument(flag.option, dest=flag.dest, **flag.kwargs)
    for name, helptext in (
        ("launchd-plist", "print a LaunchDaemon plist that runs `serve`"),
        ("systemd-unit", "print a systemd unit that runs `serve`"),
    ):
        unit = sub.add_parser(name, help=helptext)
        unit.add_argument("--program", help="path of mlxfleet-agent (default: found on PATH)")
        unit.add_argument("--user", help="account the agent runs as")
        unit.add_argument(
            "--env",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="an environment variable of the agent (repeatable), e.g. HF_HOME=/var/lib/hf",
        )
        unit.add_argument(
            "--env-file",
            action="append",
            default=[],
            metavar="PATH",
            help=(
                "KEY=VALUE lines (telemetry keys, ...): systemd reads the file at each start; "
                "launchd has no such option, so its values are copied into the plist now"
                if name == "systemd-unit"
                else "KEY=VALUE lines (telemetry keys, ...), copied into the plist now: "
                "install the plist 0600 when they are secret"
            ),
        )
        if name == "launchd-plist":
            unit.add_argument("--log-dir", default="/var/log/mlxfleet")
            unit.add_argument("--label", default=service_units.LABEL)
        unit.add_argument("serve_args", nargs=argparse.REMAINDER, help="-- then the serve flags")
    sub.add_parser("make-model", help="write a tiny dev model (see dev.devmodels)", add_help=False)
    sub.add_parser("join", help="join this Mac to a cluster (bootstrap token)", add_help=False)
    sub.add_parser("leave", help="drain this Mac and remove it from the cluster", add_help=False)
    return parser


def _serve_argv(args: argparse.Namespace) -> list[str]:
    program = args.program or shutil.which("mlxfleet-agent") or sys.argv[0]
    rest = [a for a in args.serve_args if a != "--"] or DEFAULT_SERVE_ARGS
    return [str(Path(program).resolve()) if "/" in program else program, "serve", *rest]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["join"], ["leave"]):  # their own parsers: mlxfleet_agent.join.command
        from mlxfleet_agent.join import command

        return command.main(argv[0], argv[1:])
    if argv[:1] == ["make-model"]:
        from mlxfleet_agent.dev import devmodels  # development tooling, loaded only here

        return devmodels.main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command in ("launchd-plist", "systemd-unit"):
        try:
            text = _unit(args)
        except (service_units.UnitError, OSError) as exc:
            print(f"mlxfleet-agent: {exc}", file=sys.stderr)
            return 2
        print(text, end="")
        return 0
    return _serve(args)


def _unit(args: argparse.Namespace) -> str:
    """The service definition a unit command prints."""
    env = dict(service_units.env_assignment(item) for item in args.env)
    if args.command == "systemd-unit":
        return service_units.systemd_unit(
            _serve_argv(args), user=args.user, environment=env, environment_files=args.env_file
        )
    from_files: dict[str, str] = {}
    for path in args.env_file:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise service_units.UnitError(
                f"--env-file {path}: {exc.strerror or exc} (launchd-plist reads it now)"
            ) from exc
        from_files |= service_units.env_file(text, origin=f"--env-file {path}")
    return service_units.launchd_plist(
        _serve_argv(args),
        label=args.label,
        log_dir=args.log_dir,
        user=args.user,
        environment=from_files | env,
    )


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run the agent on uvloop where it is built, like the gateway (much of the data plane's
    cost per streamed event is the event loop's), else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is not built for every platform
        asyncio.run(main)
        return
    uvloop.run(main)


def _serve(args: argparse.Namespace) -> int:
    from mlxfleet_agent.runtime import logs, serve

    flags = {flag.dest: getattr(args, flag.dest) for flag in settings_mod.flags()}
    try:
        file_values = settings_mod.read_config_file(args.config) if args.config else {}
        cfg = settings_mod.build(file_values=file_values, flag_values=flags)
        serve.check_tls(cfg)
        cfg.prepare()
    except settings_mod.SettingsError as exc:
        print(f"mlxfleet-agent: {exc}", file=sys.stderr)
        return 2
    logs.configure(cfg.log_level)
    try:
        _run(serve.serve(cfg))
    except settings_mod.SettingsError as exc:  # the bind address or a port (checked when bound)
        print(f"mlxfleet-agent: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"mlxfleet-agent: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
