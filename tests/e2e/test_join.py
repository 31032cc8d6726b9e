"""`mlxfleet token create` + `mlxfleet-agent join` / `leave` against the real API server.

The bootstrap identity's limits are proven with raw API calls as that identity (it cannot read
Secrets, touch other InferenceNodes, or create anything but a Mac's own two objects); join
registers a real agent started from the systemd unit join rendered (not installed), re-join is
idempotent, and leave drains the node (its replica moves make-before-break to another Mac),
deletes its objects and removes its files. Malformed input fails naming the flag.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import plistlib
import pwd
import shlex
import shutil
import signal
import ssl
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mlxfleet_operator.dev import controlplane, processes
from tests.e2e.conftest import (
    AGENT_SECRETS,
    BIN,
    E2E,
    Agents,
    Operator,
    condition,
    is_true,
    stop_process,
    wait_for,
)

pytestmark = [pytest.mark.cluster]
NS = AGENT_SECRETS
NODES = "/apis/mlxfleet.io/v1alpha1/inferencenodes"


def run(
    *cmd: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | (env or {})
    return subprocess.run(
        list(cmd), capture_output=True, text=True, env=full, timeout=timeout, check=False
    )


def create_token(cluster: controlplane.ControlPlane, *extra: str) -> str:
    proc = run(
        str(BIN / "mlxfleet"), "token", "create", "--kubeconfig", str(cluster.kubeconfig), *extra
    )
    assert proc.returncode == 0, proc.stderr
    assert "mlxfleet-agent join --server" in proc.stderr
    return proc.stdout.strip()


def ca_file(cluster: controlplane.ControlPlane) -> Path:
    return cluster.root / "pki" / "serving" / "apiserver.crt"


def as_bootstrap(cluster: controlplane.ControlPlane, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=cluster.server,
        headers={"Authorization": f"Bearer {token}"},
        verify=ssl.create_default_context(cafile=str(ca_file(cluster))),
        timeout=30,
    )


def secret_body(name: str, *, labelled: bool = True, **data: str) -> dict[str, Any]:
    labels = {"mlxfleet.io/agent-credentials": "true"} if labelled else {}
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "stringData": data or {"token": "t"}}  # fmt: skip


def node_body(name: str, secret: str) -> dict[str, Any]:
    return {"apiVersion": "mlxfleet.io/v1alpha1", "kind": "InferenceNode",
            "metadata": {"name": name},
            "spec": {"agent": {"url": "https://127.0.0.1:1",
                               "tokenSecretRef": {"name": secret}},
                     "approved": False, "unschedulable": True}}  # fmt: skip


def changed(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `body` with the dotted `path` set to `value` (None: removed)."""
    out: dict[str, Any] = json.loads(json.dumps(body))
    *parents, last = path.split(".")
    here = out
    for part in parents:
        here = here.setdefault(part, {})
    if value is None:
        here.pop(last, None)
    else:
        here[last] = value
    return out


OWNER = [{"apiVersion": "v1", "kind": "Namespace", "name": "kube-system", "uid": "0" * 8}]
# what the admission policy refuses for the bootstrap identity, and the field its message names
NODE_REFUSALS = [
    ("metadata.labels", {"pool": "big"}, "metadata.labels"),
    ("metadata.annotations", {"note": "x"}, "metadata.annotations"),
    ("metadata.annotations", {"mlxfleet.io/requested-labels": "x" * 5000}, "4096"),
    ("metadata.finalizers", ["example.com/keep"], "metadata.finalizers"),
    ("metadata.ownerReferences", OWNER, "metadata.ownerReferences"),
    ("spec.unschedulable", False, "spec.unschedulable"),
    ("spec.unschedulable", None, "spec.unschedulable"),
    ("spec.approved", True, "spec.approved"),
    ("spec.approved", None, "spec.approved"),
    ("spec.drain", True, "spec.agent, spec.hardware"),
    ("spec.cost", {"purchasePriceUSD": 1}, "spec.agent, spec.hardware"),
    ("spec.reservedMemory", "0", "spec.agent, spec.hardware"),
]
SECRET_REFUSALS = [
    ("metadata.labels", {"mlxfleet.io/agent-credentials": "true", "pool": "big"}, "labels"),
    ("metadata.annotations", {"note": "x"}, "metadata.annotations"),
    ("metadata.finalizers", ["example.com/keep"], "metadata.finalizers"),
    ("metadata.ownerReferences", OWNER, "metadata.ownerReferences"),
    ("immutable", True, "immutable"),
]


def test_bootstrap_token_can_create_only_its_own_node_and_secret(
    cluster: controlplane.ControlPlane, e2e: E2E
) -> None:
    victim = f"{e2e.label}-victim"
    e2e.secret(f"{victim}-agent", {"token": "the-victims-token"})
    e2e.node("victim", "https://127.0.0.1:2", f"{victim}-agent")
    mine = f"{e2e.label}-mine"
    e2e.nodes.append(mine)
    e2e.secrets.append(f"{mine}-agent")
    secrets = f"/api/v1/namespaces/{NS}/secrets"
    with as_bootstrap(cluster, create_token(cluster, "--ttl", "10m")) as api:
        # what join needs: its own Secret and InferenceNode
        assert api.post(secrets, json=secret_body(f"{mine}-agent")).status_code == 201
        assert api.post(NODES, json=node_body(mine, f"{mine}-agent")).status_code == 201
        # no reads of any Secret, not even its own
        assert api.get(f"{secrets}/{victim}-agent").status_code == 403
        assert api.get(secrets).status_code == 403
        assert api.get("/api/v1/namespaces/kube-system/secrets").status_code == 403
        # no changes to other InferenceNodes (nor its own)
        for path in (f"{NODES}/{victim}", f"{NODES}/{mine}"):
            patch = api.patch(path, json={"spec": {"unschedulable": True}},
                              headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
            assert patch.status_code == 403, patch.text
            assert api.delete(path).status_code == 403
            assert api.get(path).status_code == 403
        # no Secret of another shape: unlabelled, other name, extra keys, other namespace
        refused = {
            "unlabelled": api.post(secrets,
                                   json=secret_body(f"{e2e.label}-x-agent", labelled=False)),
            "name": api.post(secrets, json=secret_body(f"{e2e.label}-anything")),
            "keys": api.post(secrets,
                             json=secret_body(f"{e2e.label}-y-agent", token="t", other="x")),
            "namespace": api.post("/api/v1/namespaces/default/secrets",
                                  json={**secret_body("z-agent"), "metadata": {"name": "z-agent"}}),
            "gateway's namespace": api.post(
                "/api/v1/namespaces/mlxfleet-system/secrets",
                json={**secret_body("w-agent"), "metadata": {"name": "w-agent"}}),
        }  # fmt: skip
        assert {k: r.status_code for k, r in refused.items()} == dict.fromkeys(refused, 403)
        assert "agent-credentials" in refused["unlabelled"].json()["message"]
        # no InferenceNode that points at another node's Secret (its token would go to our URL)
        stolen = api.post(NODES, json=node_body(f"{e2e.label}-thief", f"{victim}-agent"))
        assert stolen.status_code == 403
        assert "tokenSecretRef" in stolen.json()["message"]
        # nothing beyond what join writes, on either object: each refused, naming the field
        answers: dict[str, tuple[httpx.Response, str]] = {}
        for path, value, named in NODE_REFUSALS:
            other = f"{e2e.label}-n{len(answers)}"
            body = changed(node_body(other, f"{other}-agent"), path, value)
            answers[f"node {path}={value!r}"[:80]] = (api.post(NODES, json=body), named)
        for path, value, named in SECRET_REFUSALS:
            other = f"{e2e.label}-s{len(answers)}-agent"
            body = changed(secret_body(other), path, value)
            answers[f"secret {path}={value!r}"[:80]] = (api.post(secrets, json=body), named)
        wrong = {
            case: (r.status_code, r.json().get("message", "")[-200:])
            for case, (r, named) in answers.items()
            if r.status_code != 403 or named not in r.json().get("message", "")
        }
        assert wrong == {}
    victim_obj = e2e.get("inferencenode", victim, namespaced=False)
    assert victim_obj["spec"].get("unschedulable") is not True


def test_expired_token_is_refused_by_the_api_server_and_join_names_the_flag(
    cluster: controlplane.ControlPlane, tmp_path: Path
) -> None:
    past = (datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.kubectl("-n", "kube-system", "apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": "bootstrap-token-old123", "namespace": "kube-system"},
        "stringData": {"token-id": "old123", "token-secret": "0123456789abcdef",
                       "expiration": past, "usage-bootstrap-authentication": "true",
                       "auth-extra-groups": "system:bootstrappers:mlxfleet"},
    }))  # fmt: skip
    listed = run(str(BIN / "mlxfleet"), "token", "list", "--kubeconfig", str(cluster.kubeconfig))
    assert any(
        line.startswith("old123") and "expired" in line for line in listed.stdout.splitlines()
    )
    proc = join_cmd(cluster, tmp_path, "old123.0123456789abcdef", "expired")
    assert proc.returncode == 2
    assert "--token" in proc.stderr
    assert "401" in proc.stderr
    pruned = run(
        str(BIN / "mlxfleet"),
        "token",
        "delete",
        "--expired",
        "--kubeconfig",
        str(cluster.kubeconfig),
    )
    assert "deleted bootstrap token old123" in pruned.stdout


def test_join_into_the_gateways_namespace_is_refused_and_names_the_flag(
    cluster: controlplane.ControlPlane, e2e: E2E, tmp_path: Path
) -> None:
    """A cluster keeps agent tokens in mlxfleet-agents: `token create` for another namespace
    prints it in the join command, and join into the gateway's namespace is refused (403) with
    a message naming --secrets-namespace; nothing is registered."""
    proc = run(str(BIN / "mlxfleet"), "token", "create", "--ttl", "10m", "--kubeconfig",
               str(cluster.kubeconfig), "--secrets-namespace", "mlxfleet-system")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "--secrets-namespace mlxfleet-system" in proc.stderr
    assert "--secrets-namespace" not in run(
        str(BIN / "mlxfleet"), "token", "create", "--ttl", "10m", "--kubeconfig",
        str(cluster.kubeconfig),
    ).stderr  # fmt: skip
    node = f"{e2e.label}-wrongns"
    e2e.nodes.append(node)
    refused = join_cmd(cluster, tmp_path, proc.stdout.strip(), node,
                       "--secrets-namespace", "mlxfleet-system")  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert "403" in refused.stderr, refused.stderr
    assert "--secrets-namespace" in refused.stderr, refused.stderr
    assert not e2e.get("inferencenode", node, namespaced=False)


def join_cmd(
    cluster: controlplane.ControlPlane, root: Path, token: str, node: str, *extra: str,
    control_port: int = 8470, data_port: int = 8471, server: str | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return run(
        str(BIN / "mlxfleet-agent"), "join", "--server", server or cluster.server,
        "--token", token, "--ca-file", str(ca_file(cluster)), "--node-name", node,
        "--advertise-address", "127.0.0.1", "--bind", "127.0.0.1",
        "--control-port", str(control_port), "--data-port", str(data_port),
        "--config-dir", str(root / "etc"), "--state-dir", str(root / "state"),
        "--unit-dir", str(root / "units"), "--log-dir", str(root / "log"),
        *(() if "--user" in extra or "--os" in extra else ("--user", "nobody")), *extra,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        pytest.param(["--labels", "a=b,=c"], "--labels", id="label-without-key"),
        pytest.param(["--labels", "nope"], "--labels", id="label-without-value"),
        pytest.param(["--labels", "k=" + "v" * 64], "--labels", id="label-value-too-long"),
        pytest.param(["--server", "http://127.0.0.1:6443"], "--server", id="plain-http"),
        pytest.param(["--server", "https://127.0.0.1:1"], "--server", id="unreachable"),
        pytest.param(["--token", "not-a-token"], "--token", id="token-format"),
        pytest.param(["--node-name", "Bad_Name!"], "--node-name", id="node-name"),
        pytest.param(["--secrets-namespace", "Agents!"], "--secrets-namespace", id="namespace"),
    ],
)
def test_join_refuses_malformed_input_naming_the_flag(
    cluster: controlplane.ControlPlane, tmp_path: Path, flags: list[str], named: str
) -> None:
    token = "abcdef.0123456789abcdef"
    server = None
    args = list(flags)
    if "--server" in args:
        server = args[args.index("--server") + 1]
        del args[args.index("--server") : args.index("--server") + 2]
    if "--token" in args:
        token = args[args.index("--token") + 1]
        del args[args.index("--token") : args.index("--token") + 2]
    node = "ok-node"
    if "--node-name" in args:
        node = args[args.index("--node-name") + 1]
        del args[args.index("--node-name") : args.index("--node-name") + 2]
    proc = join_cmd(cluster, tmp_path, token, node, *args, server=server)
    assert proc.returncode == 2, proc.stderr
    assert named in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.fixture
def joined_agent(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        stop_process(proc, sig=signal.SIGTERM, grace=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def exec_start(unit: Path) -> list[str]:
    (line,) = [x for x in unit.read_text().splitlines() if x.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


@pytest.mark.mlx
def test_join_registers_rejoin_is_idempotent_and_leave_drains(
    cluster: controlplane.ControlPlane,
    operator: Operator,
    e2e: E2E,
    agents: Agents,
    model_a: Path,
    tmp_path: Path,
    joined_agent: list[subprocess.Popen[bytes]],
) -> None:
    node = f"{e2e.label}-joined"
    root = tmp_path / "mac"
    control, data = processes.free_ports(2)
    token = create_token(cluster, "--ttl", "15m")
    extra = (
        "--labels",
        f"e2e={e2e.label},mlxfleet.io/room=lab-2",
        "--allowed-root",
        str(model_a.parent),
    )
    proc = join_cmd(cluster, root, token, node, *extra, control_port=control, data_port=data)
    assert proc.returncode == 0, proc.stderr
    e2e.nodes.append(node)
    e2e.secrets.append(f"{node}-agent")
    # files: private, atomic (no temporary left), the unit rendered and not started
    modes = {"agent.yaml": 0o640, "token": 0o600, "tls.key": 0o600, "tls.crt": 0o644,
             "join.json": 0o600}  # fmt: skip
    for name, mode in modes.items():
        assert (root / "etc" / name).stat().st_mode & 0o777 == mode, name
    assert not [p for p in (root / "etc").iterdir() if p.name.startswith(".")]
    unit = root / "units" / "mlxfleet-agent.service"
    argv = exec_start(unit)
    assert argv[1:] == ["serve", "--config", str((root / "etc" / "agent.yaml").resolve())]
    assert "not started" in proc.stderr
    token_before = (root / "etc" / "token").read_text()

    obj = e2e.get("inferencenode", node, namespaced=False)
    assert "labels" not in obj["metadata"]  # asked for, applied when a person approves
    asked = json.loads(obj["metadata"]["annotations"]["mlxfleet.io/requested-labels"])
    assert asked["mlxfleet.io/room"] == "lab-2"
    assert (obj["spec"]["approved"], obj["spec"]["unschedulable"]) == (False, True)
    assert obj["spec"]["hardware"]["memory"].endswith("Mi")  # /proc/meminfo on Linux
    assert obj["spec"]["agent"]["tokenSecretRef"] == {
        "name": f"{node}-agent",
        "namespace": AGENT_SECRETS,
        "key": "token",
    }
    # the token is out of the gateway's reach (it may read every Secret of its own namespace)
    stolen = cluster.kubectl("-n", NS, "get", "secret", f"{node}-agent", as_gateway=True,
                             check=False)  # fmt: skip
    assert stolen.returncode != 0, stolen.stdout
    assert "forbidden" in stolen.stderr.lower(), stolen.stderr

    # the agent as the unit runs it: the operator reaches it over TLS with the joined token
    with (tmp_path / "joined-agent.log").open("wb") as log:
        joined_agent.append(subprocess.Popen(
            [*argv, "--python", str(BIN / "python"), "--no-caffeinate", "--stop-grace-s", "5"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        ))  # fmt: skip
    wait_for(
        "joined node AwaitingApproval",
        lambda: (
            condition(e2e.get("inferencenode", node, namespaced=False), "Ready").get("reason")
            == "AwaitingApproval"
        ),
        timeout=90,
    )
    approve = run(str(BIN / "kubectl-mlxfleet"), "approve", "node", node,
                  env={"KUBECONFIG": str(cluster.kubeconfig)})  # fmt: skip
    assert approve.returncode == 0, approve.stderr
    labels = e2e.get("inferencenode", node, namespaced=False)["metadata"]["labels"]
    assert labels["mlxfleet.io/room"] == "lab-2"
    wait_for(
        "joined node Ready",
        lambda: is_true(e2e.get("inferencenode", node, namespaced=False), "Ready"),
        timeout=90,
    )

    # re-join: same token, same objects, exit 0
    again = join_cmd(cluster, root, token, node, *extra, control_port=control, data_port=data)
    assert again.returncode == 0, again.stderr
    assert "registered by an earlier join" in again.stderr
    assert (root / "etc" / "token").read_text() == token_before
    # another Mac claiming the same name is refused
    other = join_cmd(cluster, tmp_path / "other-mac", token, node, *extra)
    assert other.returncode == 2
    assert "--node-name" in other.stderr

    # a replica on the joined node, then a second Mac: leave moves it there
    e2e.apply(e2e.deployment("chat", model_a, replicas=1))
    wait_for("replica on the joined node", lambda: [
        p["node"] for p in e2e.get("mdep", "chat").get("status", {}).get("placements", [])
        if p.get("ready")
    ] == [node])  # fmt: skip
    e2e.register(agents.start("second"))
    leave = run(str(BIN / "mlxfleet-agent"), "leave", "--config-dir", str(root / "etc"),
                "--unit-dir", str(root / "units"), "--timeout", "150",
                env={"KUBECONFIG": str(cluster.kubeconfig)})  # fmt: skip
    assert leave.returncode == 0, leave.stderr
    # it says what is still there and why, as `kubectl mlxfleet drain` does, then that it drained
    assert f"1 replica(s) still on {node}: {e2e.namespace}/chat" in leave.stderr
    assert f"       {e2e.namespace}/chat: " in leave.stderr  # with its Ready reason
    assert f"drained {node} (" in leave.stderr
    md = e2e.get("mdep", "chat")
    assert [p["node"] for p in md["status"]["placements"]] == [f"{e2e.label}-second"]
    assert md["status"]["readyReplicas"] == 1
    wait_for(
        "InferenceNode deleted",
        lambda: not e2e.get("inferencenode", node, namespaced=False),
        timeout=60,
    )
    assert cluster.kubectl("-n", NS, "get", "secret", f"{node}-agent", check=False).returncode != 0
    assert not unit.exists()
    assert sorted(p.name for p in (root / "etc").iterdir()) == []


@pytest.fixture
def world_readable_root() -> Iterator[Path]:
    """A temporary root the agent's account may traverse (pytest's tmp_path is root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="mlxfleet-mac-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def system_account(name: str, *, create: bool) -> Iterator[None]:
    """`name` exists during the block when `create` (made by useradd here, as dscl does on a
    Mac); removed afterwards when the block (or join inside it) made it."""
    existed = subprocess.run(["id", name], capture_output=True).returncode == 0
    if create and not existed:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                        "--shell", "/usr/sbin/nologin", name], check=True)  # fmt: skip
    try:
        yield
    finally:
        if not existed:
            subprocess.run(["userdel", name], capture_output=True, check=False)
            subprocess.run(["groupdel", name], capture_output=True, check=False)


def as_account(name: str, code: str) -> subprocess.CompletedProcess[str]:
    """Python code run as `name` (its uid and group only), as launchd or systemd start it."""
    entry = pwd.getpwnam(name)
    return subprocess.run(
        ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups",
         "--", "/usr/bin/python3", "-c", code],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_mac_joined_with_defaults_runs_unprivileged_and_rejoin_keeps_admin_edits(
    cluster: controlplane.ControlPlane, e2e: E2E, world_readable_root: Path
) -> None:
    """Issue 23: join as on a Mac (LaunchDaemon rendered into a temporary root, the default
    account _mlxfleet), then an admin edits agent.yaml and join runs again with a new option."""
    root, node = world_readable_root, f"{e2e.label}-studio"
    token = create_token(cluster, "--ttl", "15m")
    e2e.nodes.append(node)
    e2e.secrets.append(f"{node}-agent")
    hf = root / "hf.token"
    hf.write_text("hf_0123456789abcdefABCDEF\n")
    with system_account("_mlxfleet", create=True):
        first = join_cmd(cluster, root, token, node, "--os", "macos", "--hf-token-file", str(hf))
        assert first.returncode == 0, first.stderr
        entry = pwd.getpwnam("_mlxfleet")
        plist = plistlib.loads((root / "units" / "io.mlxfleet.agent.plist").read_bytes())
        assert plist["UserName"] == "_mlxfleet"
        assert plist["GroupName"] == grp.getgrgid(entry.pw_gid).gr_name
        config = root / "etc" / "agent.yaml"
        assert plist["ProgramArguments"][1:] == ["serve", "--config", str(config)]
        env = plist["EnvironmentVariables"]
        assert env["HF_HOME"] == f"{root / 'state'}/huggingface"
        assert env["HF_TOKEN_PATH"] == str(root / "etc" / "hf-token")
        # the account owns its state and reads its secrets; the configuration is root's
        for folder in ("state", "state/models", "log"):
            assert (root / folder).stat().st_uid == entry.pw_uid, folder
        for secret in ("token", "tls.key", "hf-token"):
            status = (root / "etc" / secret).stat()
            assert (status.st_uid, status.st_mode & 0o777) == (entry.pw_uid, 0o600), secret
        assert (config.stat().st_uid, config.stat().st_gid) == (0, entry.pw_gid)
        probe = as_account("_mlxfleet", (
            "import pathlib, tempfile\n"
            f"for name in ('token', 'tls.key', 'hf-token', 'agent.yaml', 'tls.crt'):\n"
            f"    pathlib.Path({str(root / 'etc')!r}, name).read_text()\n"
            f"for folder in ('state', 'state/models', 'log'):\n"
            f"    tempfile.NamedTemporaryFile(dir=pathlib.Path({str(root)!r}, folder)).close()\n"
            f"try:\n    pathlib.Path({str(config)!r}).write_text('x')\nexcept PermissionError:\n"
            "    print('config read-only')\n"
        ))  # fmt: skip
        assert probe.returncode == 0, probe.stderr
        assert probe.stdout.strip() == "config read-only"
        assert is_true(e2e.get("inferencenode", node, namespaced=False), "Ready") is False

        # the admin edits agent.yaml: a new key, and a value join set
        edited = yaml.safe_load(config.read_text())
        edited |= {"logLevel": "debug", "dataPort": 9999}
        config.write_text(yaml.safe_dump(edited, sort_keys=False))
        before = config.read_text()
        # a dry run of a re-join with one more option says what it would do, writes nothing
        dry = join_cmd(cluster, root, token, node, "--os", "macos", "--dry-run",
                       "--telemetry-bucket", "fleet-telemetry")  # fmt: skip
        assert dry.returncode == 0, dry.stderr
        assert "agent.yaml: would have added telemetryBucket" in dry.stderr, dry.stderr
        assert "kept your dataPort: 9999 (join would set 8471)" in dry.stderr
        assert "dry run: nothing was written or registered" in dry.stderr
        assert config.read_text() == before

        again = join_cmd(cluster, root, token, node, "--os", "macos",
                         "--telemetry-bucket", "fleet-telemetry")  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert 'agent.yaml: added telemetryBucket: "fleet-telemetry"' in again.stderr
        assert "kept your dataPort: 9999 (join would set 8471)" in again.stderr
        assert "kept your logLevel" not in again.stderr  # join has no opinion on it
        merged = yaml.safe_load(config.read_text())
        assert merged["logLevel"] == "debug"
        assert merged["dataPort"] == 9999
        assert merged["telemetryBucket"] == "fleet-telemetry"
        assert "registered by an earlier join" in again.stderr
        assert (
            plistlib.loads((root / "units" / "io.mlxfleet.agent.plist").read_bytes())["UserName"]
            == "_mlxfleet"
        )


def test_join_on_linux_creates_its_account(
    cluster: controlplane.ControlPlane, e2e: E2E, world_readable_root: Path
) -> None:
    """A missing --user is created (a system account with no login shell); the systemd unit
    runs as it; --no-create-user refuses instead, naming the flag."""
    name = f"mlxf-{e2e.label}"[:32]
    node = f"{e2e.label}-linux"
    token = create_token(cluster, "--ttl", "15m")
    root = world_readable_root
    with system_account(name, create=False):
        refused = join_cmd(cluster, root / "a", token, node, "--os", "linux", "--user", name,
                           "--no-create-user")  # fmt: skip
        assert refused.returncode == 2
        assert "--user" in refused.stderr
        assert "--no-create-user" in refused.stderr
        proc = join_cmd(cluster, root / "b", token, node, "--os", "linux", "--user", name)
        e2e.nodes.append(node)
        e2e.secrets.append(f"{node}-agent")
        assert proc.returncode == 0, proc.stderr
        assert f"created the account {name}" in proc.stderr
        entry = pwd.getpwnam(name)
        assert entry.pw_shell == "/usr/sbin/nologin"
        assert entry.pw_uid < 1000  # a system account
        unit = (root / "b" / "units" / "mlxfleet-agent.service").read_text().splitlines()
        assert f"User={name}" in unit
        assert f"Group={name}" in unit
        assert (root / "b" / "state").stat().st_uid == entry.pw_uid
