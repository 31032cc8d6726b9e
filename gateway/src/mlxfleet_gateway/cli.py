"""`mlxfleet-gateway`: run the gateway, or mint an API key.

    mlxfleet-gateway --kubeconfig PATH --listen HOST:PORT [--allow-anonymous] [flags]
    mlxfleet-gateway --config gateway.yaml [flags]
    mlxfleet-gateway new-key --name NAME --namespaces NS[,NS] [--team T] [--owner O]
                             [--models M[,M]] [--requests-per-minute N] [--tokens-per-minute N]
                             [--expires-at RFC3339] [--monthly-budget X] [--scopes admin]

Without `--allow-anonymous` every request needs a valid API key (secure by default). Without a
fleet key (`--fleet-key-file`) it refuses to start unless `--allow-open-data-plane` says the
agents' data planes take requests without a credential (development only). The flags, the
`--config` keys and the environment variables come from `settings.Settings`'s declarations
(mlxfleet_common.settings); a bad flag, key or variable exits 2 naming it. `new-key` prints a
fresh key once (to stderr) and the Secret that holds only its hash (to stdout, for
`kubectl apply -f -`), after checking every option (`keys.minted`: Kubernetes names, an expiry
in the future), so it prints nothing for a key that cannot be used.
May import: settings, mlxfleet_common.settings, server (lazily), core.keys, the standard
library. Called by: the console script.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from mlxfleet_common import settings as mechanism
from mlxfleet_gateway import __version__
from mlxfleet_gateway import settings as settings_mod
from mlxfleet_gateway.core import keys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mlxfleet-gateway",
        description="The fleet's OpenAI-compatible front door: routes by model, fails over, "
        "falls back, knows who is calling. `mlxfleet-gateway new-key --help` mints API keys.",
    )
    p.add_argument("--version", action="version", version=__version__)
    p.add_argument(
        "--config",
        type=Path,
        help="YAML or JSON file with the same keys as the flags (camelCase or snake_case)",
    )
    mechanism.add_flags(p, settings_mod.Settings)
    return p


def parse(argv: list[str], environ: Mapping[str, str] | None = None) -> settings_mod.Settings:
    """The settings from `argv`, the `--config` file and the environment (flags win, then the
    file, then the environment); exits 2 naming a bad flag, file key or variable."""
    p = _parser()
    ns = p.parse_args(argv)
    try:
        file_values = mechanism.read_config_file(ns.config) if ns.config else {}
        cfg = mechanism.build(
            settings_mod.Settings,
            file_values=file_values,
            flag_values=mechanism.flag_values(settings_mod.Settings, ns),
            environ=environ,
        )
        if cfg.kubeconfig and not os.access(cfg.kubeconfig, os.R_OK):
            why = f"--kubeconfig {cfg.kubeconfig}: no such readable file"
            raise settings_mod.SettingsError(why)
        key = settings_mod.fleet_key(cfg.fleet_key_file, cfg.fleet_key)
        if key is None and not cfg.allow_open_data_plane:
            raise settings_mod.SettingsError(
                "--fleet-key-file: required (the fleet key each node's data-plane key is "
                "derived from); --allow-open-data-plane runs without one against agents whose "
                "data planes take requests without a credential (development only)"
            )
        return cfg.model_copy(update={"fleet_key": key})
    except settings_mod.SettingsError as exc:
        p.error(str(exc))


def _flag(field: str) -> str:
    """The `new-key` option behind a Secret field (`expiresAt` -> `--expires-at`)."""
    name = field.split(".")[0]
    if name == "namespace":
        return "--secret-namespace"
    return "--" + re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def new_key(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="mlxfleet-gateway new-key", description=new_key.__doc__)
    p.add_argument("--name", required=True, help="the Secret's name (also the key's name)")
    p.add_argument("--namespaces", required=True, help="comma-separated, in order; * for all")
    p.add_argument("--secret-namespace", default=settings_mod.DEFAULT_NAMESPACE)
    p.add_argument("--team")
    p.add_argument("--owner")
    p.add_argument("--models", help="comma-separated names the key may use (default: all)")
    p.add_argument("--requests-per-minute", type=int)
    p.add_argument("--tokens-per-minute", type=int)
    p.add_argument("--expires-at", help="RFC 3339, such as 2027-01-31T00:00:00Z")
    p.add_argument(
        "--monthly-budget",
        type=float,
        help="spend per UTC month at the budgets' prices (docs/console.md, Budgets)",
    )
    p.add_argument(
        "--scopes", help="comma-separated; admin: the console and the admin API (docs/console.md)"
    )
    ns = p.parse_args(argv)
    key = keys.new_key()
    data = {
        "keyHash": keys.hash_key(key),
        "owner": ns.owner,
        "team": ns.team,
        "namespaces": ns.namespaces,
        "models": ns.models,
        "requestsPerMinute": ns.requests_per_minute,
        "tokensPerMinute": ns.tokens_per_minute,
        "expiresAt": ns.expires_at,
        "monthlyBudget": ns.monthly_budget,
        "scopes": ns.scopes,
    }
    string_data = {k: str(v) for k, v in data.items() if v is not None}
    try:
        keys.minted(ns.name, string_data, namespace=ns.secret_namespace, now_utc=datetime.now(UTC))
    except keys.InvalidKey as exc:  # before anything is printed: no key for a Secret never applied
        p.error("; ".join(f"{_flag(field)}: {problem}" for field, problem in exc.problems))
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": keys.SECRET_TYPE,
        "metadata": {"name": ns.name, "namespace": ns.secret_namespace},
        "stringData": string_data,
    }
    print(f"API key (shown once; store it now): {key}", file=sys.stderr)
    print(json.dumps(secret, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["new-key"]:
        return new_key(argv[1:])
    cfg = parse(argv)
    from mlxfleet_gateway import server

    server.configure_logging(cfg.log_level, access_log=cfg.access_log)
    try:
        import uvloop

        uvloop.run(server.serve(cfg))
    except ImportError:  # pragma: no cover - uvloop is not built for every platform
        import asyncio

        asyncio.run(server.serve(cfg))
    except OSError as exc:  # a port in use
        print(f"mlxfleet-gateway: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
