"""`mlxfleet-agent`: serve, print service definitions, make a tiny dev model.

    mlxfleet-agent serve --state-dir DIR --models-dir DIR [--config agent.yaml] [flags]
    mlxfleet-agent launchd-plist [--user U] [--log-dir D] [--env K=V] [--env-file F] [-- flags]
    mlxfleet-agent systemd-unit [--user U] [--env K=V] [--env-file F] [-- <serve flags>]
    mlxfleet-agent make-model --out DIR [--seed N] [--broken]

May import: app, settings, service_units, devmodels, stdlib. Called by: the console script.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from pathlib import Path
from typing import Any

from mlxfleet_agent import __version__, service_units
from mlxfleet_agent import settings as settings_mod

DEFAULT_SERVE_ARGS = ["--config", "/etc/mlxfleet/agent.yaml"]
SERVE_FLAGS: list[tuple[str, dict[str, Any]]] = [
    ("--state-dir", {"type": Path, "help": "desired state, logs, token (required)"}),
    (
        "--models-dir",
        {"type": Path, "help": "model cache; always an allowed file:// root (required)"},
    ),
    (
        "--bind",
        {"help": "address of both ports (default 127.0.0.1; the LAN address in production)"},
    ),
    ("--control-port", {"type": int, "help": "control API port (default 8470; 0: ephemeral)"}),
    ("--data-port", {"type": int, "help": "OpenAI data plane port (default 8471; 0: ephemeral)"}),
    (
        "--token-file",
        {"type": Path, "help": "control API bearer token (default: <state-dir>/token, created)"},
    ),
    (
        "--peer-token-file",
        {"type": Path, "help": "fleet peer token: serve and fetch models Mac to Mac (optional)"},
    ),
    ("--tls-cert", {"type": Path, "help": "PEM certificate of the control API"}),
    ("--tls-key", {"type": Path, "help": "PEM key of the control API"}),
    ("--data-api-keys-file", {"type": Path, "help": "API keys the data plane accepts, one a line"}),
    (
        "--allowed-root",
        {
            "type": Path,
            "action": "append",
            "dest": "allowed_roots",
            "help": "another directory file:// sources may name (repeatable)",
        },
    ),
    (
        "--memory-budget",
        {"type": int, "help": "bytes slots may use (default: from psutil and memory.budget_bytes)"},
    ),
    ("--python", {"help": "interpreter that runs mlx_lm (default: this one)"}),
    ("--queue-limit", {"type": int, "help": "requests a not-ready slot queues (default 256)"}),
    ("--queue-timeout-s", {"type": float, "help": "longest wait in that queue (default 120)"}),
    (
        "--load-timeout-s",
        {"type": float, "help": "longest load + warm-up of a backend (default 300)"},
    ),
    (
        "--stop-grace-s",
        {"type": float, "help": "SIGINT -> SIGKILL grace of a backend (default 10)"},
    ),
    ("--shutdown-drain-s", {"type": float, "help": "drain of the data plane on exit (default 30)"}),
    ("--max-body-bytes", {"type": int, "help": "largest data-plane request body (default 16 MiB)"}),
    (
        "--max-header-bytes",
        {"type": int, "help": "largest request head on both ports (default 32 KiB): 431"},
    ),
    (
        "--header-timeout-s",
        {"type": float, "help": "time to send a whole request head, both ports (default 10): 408"},
    ),
    ("--max-connections", {"type": int, "help": "open connections on the data port (default 512)"}),
    (
        "--control-max-connections",
        {"type": int, "help": "open connections on the control port (default 64)"},
    ),
    ("--log-level", {"help": "debug, info, warning, error (default info)"}),
    (
        "--no-caffeinate",
        {
            "action": "store_false",
            "dest": "caffeinate",
            "default": None,
            "help": "do not keep the Mac awake while serving",
        },
    ),
]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlxfleet-agent", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the agent (control API + data plane)")
    serve.add_argument(
        "--config", type=Path, help="YAML or JSON file with the same keys as the flags"
    )
    for flag, kwargs in SERVE_FLAGS:
        serve.add_argument(flag, **kwargs)
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
    sub.add_parser("make-model", help="write a tiny dev model (see devmodels)", add_help=False)
    return parser


def _serve_argv(args: argparse.Namespace) -> list[str]:
    program = args.program or shutil.which("mlxfleet-agent") or sys.argv[0]
    rest = [a for a in args.serve_args if a != "--"] or DEFAULT_SERVE_ARGS
    return [str(Path(program).resolve()) if "/" in program else program, "serve", *rest]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["make-model"]:
        from mlxfleet_agent import devmodels

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


def _serve(args: argparse.Namespace) -> int:
    from mlxfleet_agent import app

    flags = {dest: getattr(args, dest) for dest in _serve_dests()}
    try:
        file_values = settings_mod.read_config_file(args.config) if args.config else {}
        cfg = settings_mod.build(file_values=file_values, flag_values=flags)
        app.check_tls(cfg)
        cfg.prepare()
    except settings_mod.SettingsError as exc:
        print(f"mlxfleet-agent: {exc}", file=sys.stderr)
        return 2
    app.configure_logging(cfg.log_level)
    try:
        asyncio.run(app.serve(cfg))
    except settings_mod.SettingsError as exc:  # the bind address or a port (checked when bound)
        print(f"mlxfleet-agent: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"mlxfleet-agent: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def _serve_dests() -> list[str]:
    out = []
    for flag, kwargs in SERVE_FLAGS:
        out.append(kwargs.get("dest") or flag.lstrip("-").replace("-", "_"))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
