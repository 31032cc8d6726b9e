"""Which cluster a command-line tool talks to, found the way kubectl finds it.

`--kubeconfig PATH` wins, then `KUBECONFIG` (a `:`-separated list, merged as kubectl merges it),
then ~/.kube/config; `--context` picks a context; `-n/--namespace` falls back to the context's
namespace, then `default`. Read at call time (the kubernetes package reads KUBECONFIG at import).
May import: kubernetes, the standard library. Called by: kubectl_plugin.cli, bootstrap.cli.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import kubernetes
from kubernetes.config.config_exception import ConfigException


class KubeconfigError(Exception):
    """No usable kubeconfig; the message names the flag or variable and the path."""


@dataclass(frozen=True)
class Target:
    client: kubernetes.client.ApiClient
    namespace: str
    server: str
    ca_file: str | None


def add_flags(parser: argparse.ArgumentParser, *, namespaced: bool = True) -> None:
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    if namespaced:
        parser.add_argument(
            "-n", "--namespace", help="namespace (default: the context's, then `default`)"
        )


def source(kubeconfig: str | None) -> tuple[str, str]:
    """(where it came from, path or `:` list) of the kubeconfig to load."""
    if kubeconfig:
        return "--kubeconfig", kubeconfig
    env = os.environ.get("KUBECONFIG", "")
    if env.strip(os.pathsep):
        return "KUBECONFIG", env
    return "~/.kube/config", str(Path("~/.kube/config").expanduser())


def connect(args: argparse.Namespace) -> Target:
    """The API client (and namespace) that `args` (from `add_flags`) point at."""
    origin, path = source(getattr(args, "kubeconfig", None))
    files = [p for p in path.split(os.pathsep) if p]
    if not any(Path(p).expanduser().is_file() for p in files):
        raise KubeconfigError(f"{origin} {path}: no such kubeconfig file")
    context = getattr(args, "context", None)
    try:
        loader = kubernetes.config.kube_config._get_kube_config_loader(  # type: ignore[no-untyped-call]
            filename=path, active_context=context
        )
        configuration = kubernetes.client.Configuration()
        loader.load_and_set(configuration)
    except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        where = f"--context {context}" if context else f"{origin} {path}"
        raise KubeconfigError(f"{where}: {exc}") from None
    current: dict[str, Any] = loader.current_context or {}
    namespace = getattr(args, "namespace", None) or (
        cast(dict[str, Any], current.get("context") or {}).get("namespace") or "default"
    )
    client = kubernetes.client.ApiClient(configuration)
    return Target(
        client=client,
        namespace=str(namespace),
        server=str(configuration.host),
        ca_file=configuration.ssl_ca_cert,
    )
