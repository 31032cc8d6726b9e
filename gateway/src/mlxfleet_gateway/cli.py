"""`mlxfleet-gateway`: run the gateway, or mint an API key.

    mlxfleet-gateway --kubeconfig PATH --listen HOST:PORT [--allow-anonymous] [flags]
    mlxfleet-gateway new-key --name NAME --namespaces NS[,NS] [--team T] [--owner O]
                             [--models M[,M]] [--requests-per-minute N] [--tokens-per-minute N]
                             [--expires-at RFC3339] [--monthly-budget X] [--scopes admin]

Without `--allow-anonymous` every request needs a valid API key (secure by default). Without a
fleet key (`--fleet-key-file`) it refuses to start unless `--allow-open-data-plane` says the
agents' data planes take requests without a credential (development only). A bad flag
exits 2 naming it. `new-key` prints a fresh key once (to stderr) and the Secret that holds only
its hash (to stdout, for `kubectl apply -f -`), after checking every option (`keys.minted`:
Kubernetes names, an expiry in the future), so it prints nothing for a key that cannot be used.
May import: settings, server (lazily), core.keys, the standard library. Called by: the console
script.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import pydantic

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
        "--kubeconfig", help="kubeconfig file (default: in-cluster ServiceAccount, or $KUBECONFIG)"
    )
    p.add_argument("--listen", required=True, help="HOST:PORT of the OpenAI API (port 0: any)")
    p.add_argument(
        "--allow-anonymous",
        action="store_true",
        help="serve requests without a valid API key (all namespaces, no limits): local demos "
        "and tests only",
    )
    p.add_argument("--metrics-listen", help="HOST:PORT of /metrics and /healthz (default: off)")
    p.add_argument(
        "--namespace",
        help="the gateway's namespace: API-key and provider-key Secrets live here (default: "
        "the pod's, else mlxfleet-system)",
    )
    p.add_argument(
        "--watch-namespace",
        action="append",
        default=[],
        help="route only to ModelDeployments/ModelRoutes of this namespace (repeatable; "
        "default: all)",
    )
    p.add_argument(
        "--fleet-key-file",
        type=Path,
        help="the fleet key (one a line, the current first; also $MLXFLEET_GATEWAY_FLEET_KEY): "
        "never sent; each node's data plane gets its own key derived from it (docs/gateway.md)",
    )
    p.add_argument(
        "--allow-open-data-plane",
        action="store_true",
        help="run without a fleet key: agents get requests with no credential, so their data "
        "planes must be open (development only)",
    )
    p.add_argument("--connect-timeout-s", type=float, default=0.5, help="to agents (default 0.5)")
    p.add_argument(
        "--probe-interval-s", type=float, default=0.2, help="agent liveness probes (default 0.2)"
    )
    p.add_argument(
        "--probe-timeout-s", type=float, default=0.5, help="a probe slower than this fails"
    )
    p.add_argument(
        "--max-attempts", type=int, default=3, help="replicas tried per backend (default 3)"
    )
    p.add_argument(
        "--move-after-s",
        type=float,
        default=1.0,
        help="move requests waiting for their first byte off an agent unresponsive this long "
        "(default 1)",
    )
    p.add_argument(
        "--stream-cut-after-s",
        type=float,
        default=10.0,
        help="cut streams of an agent unresponsive this long (default 10)",
    )
    p.add_argument(
        "--read-timeout-s", type=float, default=600.0, help="longest upstream silence (600)"
    )
    p.add_argument(
        "--no-affinity", action="store_true", help="no prefix affinity (plain least-loaded)"
    )
    p.add_argument(
        "--peers",
        type=int,
        default=1,
        help="gateway replicas behind the Service: each enforces limit / peers (default 1)",
    )
    p.add_argument(
        "--max-header-bytes",
        type=int,
        default=32 * 1024,
        help="largest request head (default 32 KiB): 431",
    )
    p.add_argument(
        "--header-timeout-s",
        type=float,
        default=10.0,
        help="time to send a whole request head (default 10): 408",
    )
    p.add_argument(
        "--body-timeout-s",
        type=float,
        default=60.0,
        help="time to send a whole request body after its head (default 60): 408",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=4096,
        help="open client connections; beyond them 503 + Retry-After (default 4096)",
    )
    p.add_argument(
        "--cold-start-queue",
        type=int,
        default=256,
        help="requests held per sleeping deployment while it loads; beyond them 503 + "
        "Retry-After (default 256)",
    )
    p.add_argument(
        "--cold-start-timeout-s",
        type=float,
        default=120.0,
        help="longest wait of a held request for a sleeping deployment's replica; then 503 + "
        "Retry-After (default 120)",
    )
    p.add_argument(
        "--name",
        help="this replica's name in telemetry and its ModelDemand (default: host name, the "
        "pod's name; unique per replica)",
    )
    p.add_argument("--telemetry-bucket", help="S3/R2 bucket for per-key usage (default: off)")
    p.add_argument("--telemetry-prefix", default="mlxfleet-telemetry")
    p.add_argument("--telemetry-endpoint-url", help="S3-compatible endpoint (R2, MinIO, ...)")
    p.add_argument("--telemetry-region")
    p.add_argument("--telemetry-interval-s", type=float, default=60.0)
    p.add_argument(
        "--console",
        action="store_true",
        help="serve the console at /console/ and the admin API at /admin/v1/ on the same port: "
        "Kubernetes tokens (TokenReview, SubjectAccessReview) or admin-scoped API keys only; "
        "needs the console RBAC (docs/console.md)",
    )
    p.add_argument(
        "--responses-max-stored",
        type=int,
        default=10_000,
        help="responses kept for previous_response_id (/v1/responses), in this replica's memory "
        "(default 10000)",
    )
    p.add_argument(
        "--responses-max-bytes",
        type=int,
        default=64 * 1024 * 1024,
        help="bytes of those responses (default 64 MiB); when full, the API key holding the "
        "most loses its oldest first",
    )
    p.add_argument(
        "--responses-ttl-s",
        type=float,
        default=3600.0,
        help="how long a stored response can be continued (default 3600)",
    )
    p.add_argument("--log-level", default="info", help="debug, info, warning, error")
    p.add_argument(
        "--no-access-log",
        dest="access_log",
        action="store_false",
        help="no line per request (the access log: who, which model, where, how long, tokens; "
        "never the prompt or the answer)",
    )
    return p


def parse(argv: list[str]) -> settings_mod.Settings:
    p = _parser()
    ns = p.parse_args(argv)
    kubeconfig = ns.kubeconfig or os.environ.get("KUBECONFIG") or None
    if kubeconfig and not os.access(kubeconfig, os.R_OK):
        p.error(f"--kubeconfig {kubeconfig}: no such readable file")
    try:
        listen = settings_mod.host_port(ns.listen, flag="--listen")
        metrics = (
            settings_mod.host_port(ns.metrics_listen, flag="--metrics-listen")
            if ns.metrics_listen
            else None
        )
        fleet_key = settings_mod.fleet_key(
            ns.fleet_key_file, os.environ.get("MLXFLEET_GATEWAY_FLEET_KEY") or None
        )
        if fleet_key is None and not ns.allow_open_data_plane:
            raise settings_mod.SettingsError(
                "--fleet-key-file: required (the fleet key each node's data-plane key is "
                "derived from); --allow-open-data-plane runs without one against agents whose "
                "data planes take requests without a credential (development only)"
            )
        values = {
            "kubeconfig": kubeconfig,
            "listen": listen,
            "metrics_listen": metrics,
            "allow_anonymous": ns.allow_anonymous,
            "namespace": ns.namespace or settings_mod.own_namespace(),
            "watch_namespaces": tuple(ns.watch_namespace),
            "fleet_key": fleet_key,
            "connect_timeout_s": ns.connect_timeout_s,
            "probe_interval_s": ns.probe_interval_s,
            "probe_timeout_s": ns.probe_timeout_s,
            "max_attempts": ns.max_attempts,
            "move_after_s": ns.move_after_s,
            "stream_cut_after_s": ns.stream_cut_after_s,
            "read_timeout_s": ns.read_timeout_s,
            "affinity": not ns.no_affinity,
            "peers": ns.peers,
            "max_header_bytes": ns.max_header_bytes,
            "header_timeout_s": ns.header_timeout_s,
            "body_timeout_s": ns.body_timeout_s,
            "max_connections": ns.max_connections,
            "cold_start_queue": ns.cold_start_queue,
            "cold_start_timeout_s": ns.cold_start_timeout_s,
            "telemetry_bucket": ns.telemetry_bucket,
            "telemetry_prefix": ns.telemetry_prefix,
            "telemetry_endpoint_url": ns.telemetry_endpoint_url,
            "telemetry_region": ns.telemetry_region,
            "telemetry_interval_s": ns.telemetry_interval_s,
            "console": ns.console,
            "responses_max_stored": ns.responses_max_stored,
            "responses_max_bytes": ns.responses_max_bytes,
            "responses_ttl_s": ns.responses_ttl_s,
            "log_level": ns.log_level,
            "access_log": ns.access_log,
        }
        if ns.name:
            values["name"] = ns.name
        return settings_mod.Settings.model_validate(values)
    except settings_mod.SettingsError as exc:
        p.error(str(exc))
    except pydantic.ValidationError as exc:  # name the flag
        errors = exc.errors()
        p.error(
            "; ".join(
                f"--{'-'.join(str(x) for x in e['loc']).replace('_', '-')}: {e['msg']}"
                for e in errors
            )
            or str(exc)
        )


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
