"""The real helm binary, run against a chart (and a control plane's kubeconfig when given).

Helm's own config, cache and data go to a private folder, never the user's home.
Also the operator "as the kubelet would run it" from a release (no kubelet here).
May import: the standard library, PyYAML, httpx, tests.
Called by: tests/integration/chart, tests/e2e (fixture `helm_cli` in tests/support/tools.py).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from mlxfleet_operator.dev import controlplane, processes
from tests.e2e.conftest import stop_process

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "mlxfleet"
NAMESPACE = "mlxfleet-system"
AGENTS = "mlxfleet-agents"  # operator.agentSecretsNamespace: created before `helm install`
RELEASE = "mlxfleet"
OPERATOR = "mlxfleet-operator"


@dataclass(frozen=True)
class Helm:
    binary: Path
    home: Path
    plane: controlplane.ControlPlane | None = None

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.binary), *args]
        if self.plane is not None:
            cmd.append(f"--kubeconfig={self.plane.kubeconfig}")
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        for name in ("CACHE", "CONFIG", "DATA"):
            env[f"HELM_{name}_HOME"] = str(self.home / name.lower())
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def on(self, plane: controlplane.ControlPlane) -> Helm:
        return Helm(self.binary, self.home, plane)

    def template(self, *args: str, chart: Path = CHART) -> list[dict[str, Any]]:
        out = self("template", RELEASE, str(chart), f"--namespace={NAMESPACE}", *args).stdout
        return objects(out)


def objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return found


def chart_copy(dest: Path, *, leader_election: bool = True, gateway: bool = False) -> Path:
    """A copy of the chart whose Chart.yaml says whether the image has Lease election (it has,
    since issue 13; False: an older image) and the gateway (once issue 9 lands)."""
    chart = dest / "mlxfleet"
    shutil.copytree(CHART, chart)
    text = (chart / "Chart.yaml").read_text()
    shipped = 'mlxfleet.io/operator-leader-election: "true"'
    assert shipped in text
    if not leader_election:
        text = text.replace(shipped, 'mlxfleet.io/operator-leader-election: "false"')
    if gateway:
        text = text.replace('mlxfleet.io/gateway: "false"', 'mlxfleet.io/gateway: "true"')
    (chart / "Chart.yaml").write_text(text)
    return chart


def ensure_namespace(plane: controlplane.ControlPlane, *, restricted: bool = True) -> None:
    """The release namespace and the agents' Secret namespace, as docs/quickstart.md makes them
    before `helm install --create-namespace`."""
    for namespace in (NAMESPACE, AGENTS):
        plane.kubectl("create", "namespace", namespace, check=False)
        if restricted:
            plane.kubectl(
                "label",
                "--overwrite",
                "namespace",
                namespace,
                "pod-security.kubernetes.io/enforce=restricted",
                "pod-security.kubernetes.io/warn=restricted",
            )


def account_kubeconfig(plane: controlplane.ControlPlane, account: str, path: Path) -> Path:
    """A kubeconfig at `path` holding a TokenRequest token of a ServiceAccount of the release."""
    token = plane.kubectl(
        "-n", NAMESPACE, "create", "token", account, "--duration=1h"
    ).stdout.strip()
    admin = json.loads(plane.kubeconfig.read_text())
    admin["users"] = [{"name": account, "user": {"token": token}}]
    admin["contexts"][0]["context"]["user"] = account
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(admin))
    path.chmod(0o600)
    return path


@dataclass
class ChartOperator:
    """The operator as the kubelet would run it: the live Deployment's args, the chart's SA."""

    plane: controlplane.ControlPlane
    root: Path
    proc: subprocess.Popen[bytes] | None = None
    liveness: str = ""
    starts: int = 0

    def kubeconfig(self) -> Path:
        """A kubeconfig holding a TokenRequest token of the chart's ServiceAccount."""
        return account_kubeconfig(self.plane, OPERATOR, self.root / "chart-operator.kubeconfig")

    def pod(self) -> dict[str, Any]:
        deployment = json.loads(
            self.plane.kubectl("-n", NAMESPACE, "get", "deployment", OPERATOR, "-o", "json").stdout
        )
        return dict(deployment["spec"]["template"]["spec"])

    def container(self) -> dict[str, Any]:
        (container,) = self.pod()["containers"]
        assert container["command"] == ["mlxfleet-operator"]
        return dict(container)

    def mounted(self, path: str) -> str:
        """Where `path` of a mounted Secret volume is here: its Secret's data written under
        `root/mounts` as the kubelet projects it (an optional Secret that does not exist: a
        path that does not exist either); `path` itself when no volume holds it."""
        pod = self.pod()
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for mount in self.container().get("volumeMounts", []):
            prefix = mount["mountPath"].rstrip("/") + "/"
            secret = volumes.get(mount["name"], {}).get("secret")
            if secret is None or not path.startswith(prefix):
                continue
            local = self.root / "mounts" / mount["name"]
            shutil.rmtree(local, ignore_errors=True)
            found = self.plane.kubectl("-n", NAMESPACE, "get", "secret", secret["secretName"],
                                       "-o", "json", check=False)  # fmt: skip
            if found.returncode == 0:
                local.mkdir(parents=True)
                for key, value in (json.loads(found.stdout).get("data") or {}).items():
                    (local / key).write_bytes(base64.b64decode(value))
            return str(local / path.removeprefix(prefix))
        return path

    def rendered_args(self) -> list[str]:
        return list(self.container()["args"])

    def rendered_env(self) -> dict[str, str]:
        """The container's env as the kubelet would fill it: the downward API's pod name (this
        process's) and namespace; plain values as they are."""
        fields = {"metadata.name": f"{OPERATOR}-{self.starts}", "metadata.namespace": NAMESPACE}
        out: dict[str, str] = {}
        for var in self.container().get("env", []):
            ref = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            out[var["name"]] = fields[ref] if ref else var["value"]
        return out

    def start(self) -> list[str]:
        """Start with the rendered args; only the listen addresses move to free loopback ports."""
        health, metrics = processes.free_ports(2)
        args = []
        for arg in self.rendered_args():
            if arg.startswith("--liveness="):
                arg = f"--liveness=http://127.0.0.1:{health}/healthz"
            elif arg.startswith("--metrics-host="):
                arg = "--metrics-host=127.0.0.1"
            elif arg.startswith("--metrics-port="):
                arg = f"--metrics-port={metrics}"
            elif arg.startswith("--fleet-key-file="):
                arg = f"--fleet-key-file={self.mounted(arg.split('=', 1)[1])}"
            args.append(arg)
        self.liveness = f"http://127.0.0.1:{health}/healthz"
        self.starts += 1
        binary = Path(sys.executable).parent / "mlxfleet-operator"
        cmd = [str(binary), f"--kubeconfig={self.kubeconfig()}", *args]
        env = {**os.environ, **self.rendered_env()}
        with (self.root / f"operator-{self.starts}.log").open("wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
            )
        return args

    def ready(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, self.log()
        try:
            return httpx.get(self.liveness, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def log(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-3000:] for p in sorted(self.root.glob("*.log"))
        )

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, sig=signal.SIGINT, grace=20)
