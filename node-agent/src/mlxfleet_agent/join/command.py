"""`mlxfleet-agent join` and `mlxfleet-agent leave`, step by step with progress on stderr.

join: check the flags; keep the credentials of an earlier join of this node (or make a token and a
TLS certificate); write the agent config, token and key (0600, atomic); render the service unit
(systemd on Linux, a LaunchDaemon on macOS) into --unit-dir; register the Secret then the
InferenceNode with the bootstrap token, unapproved and cordoned, the labels asked for in an
annotation (`plan.inference_node`); start the service (only when the unit went to the system
directory). The agent's data plane has no key until a person approves the node and the operator
sends it its own (it listens on --bind, 0.0.0.0, and refuses every request until then). Re-running
join with the same node is idempotent: objects this Mac created before (recorded in
<config-dir>/join.json) answer 409 and count as done; a 409 for an object it did not create means
another Mac has that name, and join stops.
leave: with a kubeconfig allowed to patch and delete InferenceNodes and the Secret (an admin's;
the bootstrap token can do neither): cordon and drain the node, wait until no replica is left on
it (reporting what is still there and why, as `kubectl mlxfleet drain` does), stop the
service, delete the InferenceNode and the Secret, remove the unit and the files.
May import: the standard library, join modules, `service_units`, `drainreport`, `host.files`.
Called by: mlxfleet_agent.cli.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlxfleet_agent import drainreport
from mlxfleet_agent.host import files as host_files
from mlxfleet_agent.join import (
    account,
    configmerge,
    credentials,
    facts,
    files,
    kubeapi,
    options,
    plan,
    target,
)

HOST = target.Target.of(None)
MAC = HOST.mac
SYSTEM_UNIT_DIR = str(HOST.unit_dir)
UNIT_NAME = HOST.unit_name


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def add_join_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", required=True, help="the API server, https://HOST:6443")
    p.add_argument("--token", required=True, help="bootstrap token from `mlxfleet token create`")
    p.add_argument("--labels", action="append", default=[], metavar="K=V[,K=V]",
                   help="labels asked for this node's InferenceNode (repeatable): set when a "
                   "person approves it")  # fmt: skip
    p.add_argument("--ca-file", type=Path, help="CA of the API server (default: system trust)")
    p.add_argument("--node-name", help="InferenceNode name (default: the host name)")
    p.add_argument("--advertise-address", help="name or IP the cluster reaches this Mac at "
                   "(default: the host's name)")  # fmt: skip
    p.add_argument("--bind", default="0.0.0.0", help="address the agent listens on (0.0.0.0)")
    p.add_argument("--control-port", type=int, default=8470)
    p.add_argument("--data-port", type=int, default=8471)
    p.add_argument("--allowed-root", action="append", default=[], type=Path,
                   help="a directory file:// sources may name (repeatable)")  # fmt: skip
    p.add_argument("--secrets-namespace", default=plan.NAMESPACE,
                   help="namespace of this Mac's token Secret: the chart's "
                   f"operator.agentSecretsNamespace (default {plan.NAMESPACE})")  # fmt: skip
    add_local_flags(p)
    p.add_argument("--state-dir", type=Path, default=Path("/var/lib/mlxfleet"))
    p.add_argument("--models-dir", type=Path, help="model cache (default: <state-dir>/models)")
    p.add_argument("--log-dir", type=Path, default=Path("/var/log/mlxfleet"))
    p.add_argument("--no-start", dest="start", action="store_false", default=None,
                   help="render the unit, do not start it (default when --unit-dir is not "
                   "the system's)")  # fmt: skip
    options.add_flags(p)


def add_local_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config-dir", type=Path, default=Path("/etc/mlxfleet"))
    p.add_argument("--unit-dir", type=Path,
                   help=f"where the service unit goes (default {SYSTEM_UNIT_DIR})")  # fmt: skip


def add_leave_flags(p: argparse.ArgumentParser) -> None:
    add_local_flags(p)
    p.add_argument("--kubeconfig", type=Path, help="an admin kubeconfig (default: $KUBECONFIG)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the drain")
    p.add_argument("--poll", type=float, default=2.0, help=argparse.SUPPRESS)
    p.add_argument("--report-every", type=float, default=30.0, help=argparse.SUPPRESS)
    p.add_argument("--local-only", action="store_true",
                   help="only remove the unit and files (the node is gone already)")  # fmt: skip


def _record(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _service(action: str, unit: Path) -> None:
    HOST.service(action, unit)


def join(args: argparse.Namespace) -> int:
    server = plan.server(args.server)
    token = plan.token(args.token)
    labels = plan.labels(args.labels)
    node = plan.node_name(args.node_name or plan.default_node_name(socket.gethostname()))
    secrets_namespace = plan.secrets_namespace(args.secrets_namespace)
    host = args.advertise_address or socket.getfqdn()
    url = plan.advertise_url(host, args.control_port)
    for flag, port in (("--control-port", args.control_port), ("--data-port", args.data_port)):
        if not 1 <= port <= 65535:
            raise plan.JoinError(f"{flag} {port}: a port from 1 to 65535")
    machine = target.Target.of(args.os)
    unit_dir = args.unit_dir or machine.unit_dir
    layout = plan.Layout(
        config_dir=str(args.config_dir.resolve()),
        state_dir=str(args.state_dir.resolve()),
        models_dir=str((args.models_dir or args.state_dir / "models").resolve()),
        unit_dir=str(unit_dir.resolve()),
        log_dir=str(args.log_dir),
    )
    record_path = Path(layout.record)
    record = _record(record_path)
    if record and (record.get("node") != node or record.get("server") != server):
        raise plan.JoinError(
            f"--config-dir {args.config_dir}: this Mac joined {record.get('server')} as "
            f"{record.get('node')}; run `mlxfleet-agent leave` first"
        )
    api = kubeapi.bootstrap(server, token, args.ca_file)

    say(f"joining {server} as {node} ({url})")
    detected = facts.detect()
    memory = f"{(detected.memory_bytes or 0) / 2**30:.0f} GiB"
    say(f"hardware: {detected.chip or '?'}, {memory}, GPU cores {detected.gpu_cores or '?'}")
    local = _set_up_locally(args, machine, layout, node, host, record)
    agent_token, cert_pem = local.token, local.cert_pem
    unit = local.unit
    if args.dry_run:
        say(f"would register secret/{plan.secret_name(node)} in {secrets_namespace} and "
            f"inferencenode/{node}, then start {unit.name}")  # fmt: skip
        say("dry run: nothing was written or registered")
        return 0

    created = list(record.get("created", []))
    record = {"server": server, "node": node, "url": url, "unit": str(unit), "created": created,
              "caFile": str(args.ca_file.resolve()) if args.ca_file else None,
              "secretsNamespace": secrets_namespace, "user": local.user,
              "agentConfig": local.agent_config}  # fmt: skip
    host_files.write_atomic(record_path, json.dumps(record, indent=2).encode())
    objects = [
        ("secret", kubeapi.secrets_path(secrets_namespace),
         plan.secret(node, namespace=secrets_namespace, token=agent_token, ca_pem=cert_pem)),
        ("inferencenode", kubeapi.NODES,
         plan.inference_node(node, namespace=secrets_namespace, url=url, facts=detected,
                             extra_labels=labels)),
    ]  # fmt: skip
    for kind, path, body in objects:
        name = body["metadata"]["name"]
        try:
            fresh = api.create(path, body)
        except kubeapi.KubeApiError as exc:
            raise _refused(exc, kind, name) from None
        if fresh:
            created.append(kind)
            host_files.write_atomic(record_path, json.dumps(record, indent=2).encode())
            say(f"created {kind}/{name}")
        elif kind in created:
            say(f"{kind}/{name} exists (registered by an earlier join)")
        else:
            raise plan.JoinError(
                f"--node-name {node}: {kind} {name} already exists and this Mac did not create "
                "it (another Mac with this name?); pick another --node-name, or have an admin "
                "delete it"
            )
    start = args.start if args.start is not None else unit.parent == machine.unit_dir
    if start:
        machine.service("start", unit)
        record["started"] = True
        host_files.write_atomic(record_path, json.dumps(record, indent=2).encode())
        say(f"started {unit.name}")
    else:
        say(f"not started: run `mlxfleet-agent serve --config {layout.config}` or install {unit}")
    _say_awaiting_approval(node)
    return 0


def _say_awaiting_approval(node: str) -> None:
    """What happens next: the node waits for a person, its data plane closed meanwhile."""
    say(
        f"joined: kubectl get inode {node} (AwaitingApproval: it takes no traffic until an admin "
        f"runs `kubectl mlxfleet approve node {node}`)"
    )
    say(
        "the data plane refuses every request until then: on approval the operator sends this "
        "node its own key (no fleet-wide secret is ever written here)"
    )


@dataclass(frozen=True)
class Local:
    """What join set up on this machine: the agent's credentials, its unit, its account."""

    token: str
    cert_pem: str
    unit: Path
    user: str
    agent_config: dict[str, Any]


def _set_up_locally(
    args: argparse.Namespace,
    machine: target.Target,
    layout: plan.Layout,
    node: str,
    host: str,
    record: dict[str, Any],
) -> Local:
    """The account, folders, credentials, options, agent.yaml (the admin's edits kept) and the
    unit, in that order; in a dry run only said."""
    dry = args.dry_run
    default = account.default_name(mac=machine.mac)
    name = account.check_name(args.user or record.get("user") or default)
    acct = account.ensure(name, mac=machine.mac, create=args.create_user, dry_run=dry, say=say)
    own = account.Ownership(acct, admin_uid=os.geteuid())
    out = files.Writer(dry_run=dry, say=say)
    for folder in (layout.state_dir, layout.models_dir, layout.log_dir):
        out.folder(Path(folder), own.folder())
    out.folder(Path(layout.config_dir), None)
    token_file, cert_file, key_file = (Path(layout.token), Path(layout.tls_cert),
                                       Path(layout.tls_key))  # fmt: skip
    if record and token_file.exists() and cert_file.exists() and key_file.exists():
        say("keeping the credentials of the earlier join")
        agent_token, cert_pem, key_pem = (
            token_file.read_text().strip(),
            cert_file.read_text(),
            key_file.read_text(),
        )
    else:
        agent_token = credentials.token()
        cert_pem, key_pem = credentials.self_signed(host)
    out.write(key_file, key_pem, owner=own.secret())
    out.write(cert_file, cert_pem, mode=0o644)
    out.write(token_file, agent_token + "\n", owner=own.secret())

    config_dir = Path(layout.config_dir)
    hf_file = config_dir / "hf-token"
    if args.hf_token_file is not None:
        out.write(hf_file, options.hf_token(args.hf_token_file), owner=own.secret())
    telemetry_file = config_dir / "telemetry.env"
    telemetry = None
    if args.telemetry_credentials_file is not None:
        telemetry = options.telemetry_credentials(args.telemetry_credentials_file)
        out.write(telemetry_file, telemetry)
    elif telemetry_file.exists():
        telemetry = telemetry_file.read_text()

    desired = plan.agent_config(
        node, layout, bind=args.bind, control_port=args.control_port, data_port=args.data_port
    )
    if args.allowed_root:
        desired["allowedRoots"] = [str(p.resolve()) for p in args.allowed_root]
    desired |= options.config_keys(args)
    _write_agent_config(out, Path(layout.config), desired, record, owner=own.config())

    program = shutil.which("mlxfleet-agent") or str(Path(sys.argv[0]).resolve())
    argv = [program, "serve", "--config", layout.config]
    env, env_files = options.unit_environment(
        layout, hf_token_file=hf_file if (hf_file.exists() or args.hf_token_file) else None,
        telemetry=telemetry, mac=machine.mac,
    )  # fmt: skip
    group = acct.group if acct is not None else name
    text = machine.unit(argv, log_dir=layout.log_dir, user=name, group=group, environment=env,
                        environment_files=env_files)  # fmt: skip
    unit = Path(layout.unit_dir) / machine.unit_name
    secret_in_unit = machine.mac and telemetry is not None  # launchd: the values are in it
    if out.write(unit, text, mode=0o600 if secret_in_unit else 0o644) and not dry:
        say(f"wrote {unit} (runs as {name})")
    return Local(agent_token, cert_pem, unit, name, desired)


def _write_agent_config(
    out: files.Writer,
    path: Path,
    desired: dict[str, Any],
    record: dict[str, Any],
    *,
    owner: files.Owner,
) -> None:
    """agent.yaml merged with the admin's edits since the last join (configmerge), each change
    said; rewritten only when a key join manages changes."""
    try:
        current = yaml.safe_load(path.read_text()) if path.exists() else None
    except yaml.YAMLError as exc:
        raise plan.JoinError(
            f"--config-dir: {path} is not YAML ({exc}); fix it or move it away"
        ) from None
    if current is not None and not isinstance(current, dict):
        raise plan.JoinError(f"--config-dir: {path} is not a mapping of settings")
    merged = configmerge.merge(desired=desired, current=current, base=record.get("agentConfig"))
    prefix = "would have " if out.dry_run else ""
    for change in merged.changes:
        if current is not None:
            say(f"{path.name}: {prefix if change.action != 'kept' else ''}{change.describe()}")
    text = yaml.safe_dump(merged.result, sort_keys=False) if merged.writes else path.read_text()
    out.write(path, text, mode=0o640, owner=owner)


def _refused(exc: kubeapi.KubeApiError, kind: str, name: str) -> plan.JoinError:
    if exc.status == 401:
        return plan.JoinError(
            "--token: the API server refused the bootstrap token (401: expired, deleted or "
            "mistyped); create a new one with `mlxfleet token create`"
        )
    if exc.status == 0:
        return plan.JoinError(f"--server: cannot reach the API server: {exc}")
    if exc.status == 403 and kind == "secret":
        return plan.JoinError(
            f"creating secret {name}: the API server answered 403: {exc} (is --secrets-namespace "
            "the cluster's operator.agentSecretsNamespace?)"
        )
    return plan.JoinError(f"creating {kind} {name}: the API server answered {exc.status}: {exc}")


def leave(args: argparse.Namespace) -> int:
    record_path = args.config_dir / "join.json"
    record = _record(record_path)
    if not record:
        raise plan.JoinError(f"--config-dir {args.config_dir}: no join.json; this Mac never joined")
    node = str(record["node"])
    unit = Path(record.get("unit") or (args.unit_dir or HOST.unit_dir) / UNIT_NAME)
    if not args.local_only:
        config = args.kubeconfig or (
            Path(os.environ["KUBECONFIG"].split(os.pathsep)[0])
            if os.environ.get("KUBECONFIG")
            else None
        )
        if config is None:
            raise plan.JoinError(
                "--kubeconfig: leave needs an identity that may drain and delete the node (an "
                "admin kubeconfig, or KUBECONFIG); --local-only skips the cluster"
            )
        api = kubeapi.from_kubeconfig(
            config, flag="--kubeconfig" if args.kubeconfig else "KUBECONFIG"
        )
        _drain(api, node, timeout=args.timeout, poll=args.poll, report_every=args.report_every)
    if record.get("started"):
        _service("stop", unit)
        say(f"stopped {unit.name}")
    if not args.local_only:
        namespace = _secrets_namespace(api, node, record)
        api.delete(f"{kubeapi.NODES}/{node}")
        say(f"deleted inferencenode/{node}")
        api.delete(f"{kubeapi.secrets_path(namespace)}/{plan.secret_name(node)}")
        say(f"deleted secret/{plan.secret_name(node)}")
    for path in (
        unit,
        *(
            args.config_dir / n
            for n in ("agent.yaml", "token", "tls.crt", "tls.key", "hf-token", "telemetry.env")
        ),
    ):
        if files.remove(path):
            say(f"removed {path}")
    files.remove(record_path)
    say(f"{node} left the fleet")
    return 0


def _secrets_namespace(api: kubeapi.Api, node: str, record: dict[str, Any]) -> str:
    """Where the node's token Secret is: as its InferenceNode names it (an admin may have moved
    it), else as join recorded it (0.1.0 joins recorded nothing: mlxfleet-system)."""
    try:
        found = api.call("GET", f"{kubeapi.NODES}/{node}") or {}
    except kubeapi.KubeApiError:
        found = {}
    ref = ((found.get("spec") or {}).get("agent") or {}).get("tokenSecretRef") or {}
    return str(ref.get("namespace") or record.get("secretsNamespace") or plan.LEGACY_NAMESPACE)


def _drain(
    api: kubeapi.Api, node: str, *, timeout: float, poll: float, report_every: float
) -> None:
    """Cordon and drain `node`, then wait until no replica is left on it, reporting what is
    still there and why (each deployment's Ready condition) when that changes and at least
    every `report_every` seconds, as `kubectl mlxfleet drain` does (`drainreport`)."""
    try:
        body = {"spec": {"unschedulable": True, "drain": True}}
        api.call("PATCH", f"{kubeapi.NODES}/{node}", body, patch=True)
    except kubeapi.KubeApiError as exc:
        if exc.status == 404:
            say(f"inferencenode/{node} is gone already")
            return
        raise plan.JoinError(
            f"--kubeconfig: cordoning {node} failed ({exc.status}): {exc}"
        ) from None
    say(f"cordoned and draining {node}")
    start, cadence = time.monotonic(), drainreport.Cadence(every=report_every)
    while True:
        found = api.call("GET", kubeapi.DEPLOYMENTS) or {}
        left = drainreport.waiting_on(found.get("items", []), node)
        elapsed = time.monotonic() - start
        if not left:
            say(f"drained {node} ({elapsed:.0f}s)")
            return
        if elapsed > timeout:
            for line in drainreport.drain_timeout(node, left, timeout):
                say(line)
            raise plan.JoinError(
                f"--timeout {timeout:.0f}: replicas still on {node}: "
                f"{', '.join(w.deployment for w in left)}; the node stays cordoned and draining"
            )
        if cadence.due(drainreport.report_key(left), elapsed):
            for line in drainreport.drain_lines(node, left, elapsed):
                say(line)
        time.sleep(poll)


def main(command: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"mlxfleet-agent {command}")
    (add_join_flags if command == "join" else add_leave_flags)(parser)
    args = parser.parse_args(argv)
    try:
        return join(args) if command == "join" else leave(args)
    except (plan.JoinError, account.AccountError, kubeapi.KubeApiError) as exc:
        print(f"mlxfleet-agent {command}: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, kubeapi.KubeApiError) else 2
