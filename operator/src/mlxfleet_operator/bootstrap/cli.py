"""`mlxfleet token`: create, list and delete the bootstrap tokens Macs join with.

    mlxfleet token create [--ttl 24h] [--description TEXT] [--group G] [--ca-out FILE]
                          [--secrets-namespace NS] [--kubeconfig F]
    mlxfleet token list [--kubeconfig F]
    mlxfleet token delete (ID... | --expired) [--kubeconfig F]

`create` prints the token alone on stdout (for scripts) and the join command on stderr;
`--ca-out FILE` also writes the CA certificate the kubeconfig trusts for the API server (from a
file or inline data) to FILE, for the Macs' `join --ca-file`; `--secrets-namespace NS` (the
chart's operator.agentSecretsNamespace, when not the default) is added to the printed join command.
May import: kubernetes, api.resources, bootstrap.tokens, kubectl_plugin.kubeconfig.
Called by: the `mlxfleet` CLI.
"""

from __future__ import annotations

import argparse
import base64
import sys
from datetime import UTC, datetime
from pathlib import Path

import kubernetes
from kubernetes.client.exceptions import ApiException

from mlxfleet_operator.api import resources
from mlxfleet_operator.bootstrap import tokens
from mlxfleet_operator.kubectl_plugin import kubeconfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlxfleet token", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="create a bootstrap token for `mlxfleet-agent join`")
    create.add_argument("--ttl", default="24h", help="lifetime: 30m, 24h, 7d (1m to 30d)")
    create.add_argument("--description", default="mlxfleet-agent join", help="shown by list")
    create.add_argument(
        "--group", default=tokens.DEFAULT_GROUP, help="extra group (chart join.group)"
    )
    create.add_argument(
        "--secrets-namespace",
        default=resources.AGENT_SECRETS_NAMESPACE,
        help="the chart's operator.agentSecretsNamespace, where join puts each Mac's token "
        f"Secret (default {resources.AGENT_SECRETS_NAMESPACE}; printed in the join command "
        "when it differs)",
    )
    create.add_argument(
        "--ca-out",
        type=Path,
        help="write the API server's CA certificate (from the kubeconfig) here, for --ca-file",
    )
    listing = sub.add_parser("list", help="bootstrap tokens with their expiry (never the secret)")
    delete = sub.add_parser("delete", help="delete tokens by id, or every expired one")
    delete.add_argument("ids", nargs="*", metavar="ID")
    delete.add_argument("--expired", action="store_true", help="delete every expired token")
    for p in (create, listing, delete):
        kubeconfig.add_flags(p, namespaced=False)
    return parser


def _tokens(core: kubernetes.client.CoreV1Api) -> list[tokens.Listed]:
    found = core.list_namespaced_secret(
        tokens.NAMESPACE, field_selector=f"type={tokens.SECRET_TYPE}"
    )
    out = []
    for item in found.items:
        data = {
            k: base64.b64decode(v).decode(errors="replace") for k, v in (item.data or {}).items()
        }
        out.append(tokens.listed(data))
    return out


def _write_ca(target: kubeconfig.Target, out: Path) -> None:
    """Copy the CA the kubeconfig trusts (the kubernetes client keeps inline data in a temporary
    file, gone after this process) to `out`; TokenError naming --ca-out when there is none."""
    if not target.ca_file:
        raise tokens.TokenError(
            f"--ca-out {out}: the kubeconfig names no CA certificate for {target.server} "
            "(leave --ca-out out when the API server's certificate is publicly trusted)"
        )
    try:
        pem = Path(target.ca_file).read_bytes()
        out.write_bytes(pem)
    except OSError as exc:
        raise tokens.TokenError(f"--ca-out {out}: {exc.strerror or exc}") from None


def create(
    args: argparse.Namespace, core: kubernetes.client.CoreV1Api, target: kubeconfig.Target
) -> int:
    ttl = tokens.parse_ttl(args.ttl)
    group = tokens.check_group(args.group)
    namespace = tokens.check_namespace(args.secrets_namespace, flag="--secrets-namespace")
    ca_out: Path | None = args.ca_out
    if ca_out is not None:
        _write_ca(target, ca_out)
    token = tokens.generate()
    now = datetime.now(UTC)
    body = tokens.secret(token, now=now, ttl=ttl, group=group, description=args.description)
    core.create_namespaced_secret(tokens.NAMESPACE, body)  # type: ignore[arg-type]
    print(token)
    ca_path = ca_out.name if ca_out is not None else target.ca_file
    flags = f" --ca-file {ca_path}" if ca_path else ""
    if namespace != resources.AGENT_SECRETS_NAMESPACE:
        flags += f" --secrets-namespace {namespace}"
    print(
        f"bootstrap token {token.id} expires {tokens.rfc3339(now + ttl)}; on each Mac:\n"
        f"  mlxfleet-agent join --server {target.server} --token {token}{flags}\n"
        "(--ca-file: the cluster's CA certificate, copied to the Mac; leave it out when the "
        "API server's certificate is publicly trusted)",
        file=sys.stderr,
    )
    return 0


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        target = kubeconfig.connect(args)
        core = kubernetes.client.CoreV1Api(target.client)
        if args.action == "create":
            return create(args, core, target)
        now = datetime.now(UTC)
        if args.action == "list":
            print(f"{'ID':<8} {'EXPIRES':<21} {'STATE':<8} {'GROUPS':<34} DESCRIPTION")
            for t in sorted(_tokens(core), key=lambda t: t.id):
                when = tokens.rfc3339(t.expiration) if t.expiration else "never"
                state = "expired" if t.expired(now) else "valid"
                print(f"{t.id:<8} {when:<21} {state:<8} {t.groups:<34} {t.description}")
            return 0
        if not args.ids and not args.expired:
            print("mlxfleet token delete: give token ids or --expired", file=sys.stderr)
            return 2
        doomed = set(args.ids) | {t.id for t in _tokens(core) if args.expired and t.expired(now)}
        for token_id in sorted(doomed):
            try:
                core.delete_namespaced_secret(tokens.SECRET_PREFIX + token_id, tokens.NAMESPACE)
                print(f"deleted bootstrap token {token_id}")
            except ApiException as exc:
                if exc.status != 404:
                    raise
                print(f"bootstrap token {token_id}: not found", file=sys.stderr)
        return 0
    except (tokens.TokenError, kubeconfig.KubeconfigError) as exc:
        print(f"mlxfleet token: {exc}", file=sys.stderr)
        return 2
    except ApiException as exc:
        print(
            f"mlxfleet token: the API server answered {exc.status}: {exc.reason}", file=sys.stderr
        )
        return 1
