"""OCI images in tests: a local registry, and a container run as the kubelet would run it.

`Registry`: go-containerregistry's `crane registry serve` on a loopback port (scripts/build-tools.sh
crane), the registry `make release-local` pushes to. `Pod.run(...)`: one container of a live
Deployment, from its image pulled out of that registry (`crane export` flattens the layers into a
root filesystem, `crane config` gives the image's entrypoint, environment and user), with the
kubelet's rules: `command` replaces the entrypoint, `args` the cmd, `$(VAR)` expands from the
container's env, the downward API fills `fieldRef`s, `secret` volumes hold the Secret's keys,
`emptyDir` is a tmpfs, the ServiceAccount token is mounted where in-cluster clients look for it
and KUBERNETES_SERVICE_HOST/PORT name the API server. The sandbox is bubblewrap run by the pod's
uid (setpriv drops root before it starts; a user namespace maps that uid to itself): read-only
root file system, its own PID namespace, the host's network (the API server is on loopback).
May import: the standard library, httpx, tests. Called by: tests/integration/release.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mlxfleet_operator.dev import controlplane, processes

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass
class Registry:
    """A registry on 127.0.0.1:port (plain HTTP), blobs in memory; `crane` is the CLI."""

    crane: Path
    address: str
    proc: subprocess.Popen[bytes]

    def digest(self, ref: str) -> str:
        return self._crane("digest", ref).strip()

    def config(self, ref: str) -> dict[str, Any]:
        return dict(json.loads(self._crane("config", ref)))

    def export(self, ref: str, dest: Path) -> Path:
        """The image's layers flattened into `dest` (owners kept: this runs as root)."""
        dest.mkdir(parents=True)
        cmd = [str(self.crane), "export", ref, "-"]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE) as export:
            subprocess.run(["tar", "-x", "-C", str(dest)], stdin=export.stdout, check=True)
            assert export.wait(timeout=300) == 0, f"crane export {ref} failed"
        return dest

    def _crane(self, *args: str) -> str:
        proc = subprocess.run(
            [str(self.crane), *args], capture_output=True, text=True, timeout=120, check=False
        )
        assert proc.returncode == 0, f"crane {' '.join(args)}: {proc.stderr}"
        return proc.stdout


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    from tests.support.tools import build  # late: both are pytest plugins (assertion rewriting)

    crane = build("crane")
    (port,) = processes.free_ports(1)
    address = f"127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("registry") / "registry.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(crane), "registry", "serve", "--address", address],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    reg = Registry(crane, address, proc)
    deadline = time.monotonic() + 30
    while subprocess.run([str(crane), "catalog", address], capture_output=True).returncode:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the registry did not answer in 30 s"
        time.sleep(0.2)
    try:
        yield reg
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def mountpoint(root: Path, path: str, *, file: bool = False) -> None:
    """Make `path` inside the image's root file system, as a container runtime makes a mount's
    target before the root becomes read-only (a symlink on the way is followed inside `root`)."""
    current = root
    parts = Path(path).parts[1:]
    for index, part in enumerate(parts):
        step = current / part
        if step.is_symlink():
            target = os.readlink(step)
            step = root / target.lstrip("/") if target.startswith("/") else current / target
        if file and index == len(parts) - 1:
            step.touch(exist_ok=True)
        else:
            step.mkdir(exist_ok=True)
        current = step


def run_in_image(
    root: Path, argv: list[str], *, binds: dict[str, Path] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`argv` in an exported image as its user 65532: read-only root, a tmpfs /tmp, PATH of the
    image, `binds` (target -> host folder) writable."""
    root.chmod(0o755)
    mounts: list[str] = []
    for target, source in (binds or {}).items():
        mountpoint(root, target)
        mounts += ["--bind", str(source), target]
    return subprocess.run(
        ["setpriv", "--reuid=65532", "--regid=65532", "--clear-groups", "--", "bwrap",
         "--unshare-user", "--uid", "65532", "--gid", "65532", "--unshare-pid",
         "--ro-bind", str(root), "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
         *mounts, "--clearenv", "--setenv", "PATH", "/opt/mlxfleet/bin:/usr/bin",
         "--setenv", "HOME", "/tmp", "--", *argv],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def _world_readable_dir(prefix: str) -> Path:
    """A folder the pod's uid may traverse (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o755)
    return path


@dataclass
class Pod:
    """One container of a Deployment in `plane`, from `image_root` (an exported image)."""

    plane: controlplane.ControlPlane
    deployment: dict[str, Any]
    image_config: dict[str, Any]
    image_root: Path
    name: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    work: Path = field(default_factory=lambda: _world_readable_dir("mlxfleet-pod-"))

    @property
    def namespace(self) -> str:
        return str(self.deployment["metadata"]["namespace"])

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.deployment["spec"]["template"]["spec"])

    @property
    def container(self) -> dict[str, Any]:
        (container,) = self.spec["containers"]
        return dict(container)

    def env(self) -> dict[str, str]:
        """The image's Env, then the container's (downward API resolved), then the service
        variables the kubelet adds."""
        out = dict(e.split("=", 1) for e in self.image_config["config"].get("Env") or [])
        fields = {"metadata.name": self.name, "metadata.namespace": self.namespace}
        for var in self.container.get("env", []):
            ref = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            out[var["name"]] = fields[ref] if ref else _expand(var.get("value", ""), out)
        port = self.plane.server.rsplit(":", 1)[1]
        out |= {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
        return out

    def argv(self, env: dict[str, str]) -> list[str]:
        config = self.image_config["config"]
        command = self.container.get("command") or config.get("Entrypoint") or []
        args = self.container.get("args")
        if args is None and not self.container.get("command"):
            args = config.get("Cmd") or []
        # 0.0.0.0 in a pod is the pod's own address; here the host's network: stay on loopback
        return [_expand(a, env).replace("0.0.0.0", "127.0.0.1") for a in [*command, *(args or [])]]

    def user(self) -> tuple[int, int]:
        ctx = {**self.spec.get("securityContext", {}), **self.container.get("securityContext", {})}
        image_user = (self.image_config["config"].get("User") or "0:0").split(":")
        uid = int(ctx.get("runAsUser", image_user[0]))
        gid = int(ctx.get("runAsGroup", image_user[1] if len(image_user) > 1 else uid))
        return uid, gid

    def _mounts(self) -> list[str]:
        """bwrap arguments for the container's volume mounts, the ServiceAccount token and the
        files the kubelet manages (/etc/hosts, /etc/hostname, /etc/resolv.conf)."""
        volumes = {v["name"]: v for v in self.spec.get("volumes", [])}
        out: list[str] = []
        managed = self.work / "etc"
        managed.mkdir()
        (managed / "hosts").write_text(f"127.0.0.1\tlocalhost\n127.0.0.1\t{self.name}\n")
        (managed / "hostname").write_text(self.name + "\n")
        (managed / "resolv.conf").write_text(Path("/etc/resolv.conf").read_text())
        for name in ("hosts", "hostname", "resolv.conf"):
            (managed / name).chmod(0o644)
            mountpoint(self.image_root, f"/etc/{name}", file=True)
            out += ["--ro-bind", str(managed / name), f"/etc/{name}"]
        for mount in self.container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            mountpoint(self.image_root, mount["mountPath"])
            if "emptyDir" in volume:
                out += ["--tmpfs", mount["mountPath"]]
            elif "secret" in volume:
                source = self._secret_dir(volume["secret"]["secretName"], mount["name"])
                out += ["--ro-bind", str(source), mount["mountPath"]]
            else:  # pragma: no cover - the chart mounts nothing else
                raise AssertionError(f"volume {mount['name']}: not emulated here")
        if self.spec.get("automountServiceAccountToken", True):
            mountpoint(self.image_root, SA_DIR)
            out += ["--ro-bind", str(self._service_account()), SA_DIR]
        return out

    def _secret_dir(self, name: str, volume: str) -> Path:
        secret = json.loads(
            self.plane.kubectl("-n", self.namespace, "get", "secret", name, "-o", "json").stdout
        )
        folder = self.work / "volumes" / volume
        folder.mkdir(parents=True)
        for key, value in (secret.get("data") or {}).items():
            (folder / key).write_bytes(base64.b64decode(value))
            (folder / key).chmod(0o644)
        folder.chmod(0o755)
        return folder

    def _service_account(self) -> Path:
        account = self.spec["serviceAccountName"]
        token = self.plane.kubectl(
            "-n", self.namespace, "create", "token", account, "--duration=1h"
        ).stdout.strip()
        folder = self.work / "serviceaccount"
        folder.mkdir(parents=True)
        ca = self.plane.root / "pki" / "serving" / "apiserver.crt"
        for name, text in (("token", token), ("ca.crt", ca.read_text()),
                           ("namespace", self.namespace)):  # fmt: skip
            (folder / name).write_text(text)
            (folder / name).chmod(0o644)
        folder.chmod(0o755)
        return folder

    def start(self) -> list[str]:
        env = self.env()
        argv = self.argv(env)
        uid, gid = self.user()
        self.image_root.chmod(0o755)
        read_only = self.container.get("securityContext", {}).get("readOnlyRootFilesystem")
        cmd = [
            "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--",
            shutil.which("bwrap") or "bwrap", "--unshare-user", "--uid", str(uid), "--gid",
            str(gid), "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname",
            self.name, "--die-with-parent",
            "--ro-bind" if read_only else "--bind", str(self.image_root), "/",
            "--proc", "/proc", "--dev", "/dev", *self._mounts(), "--clearenv",
            *[x for k, v in env.items() for x in ("--setenv", k, v)],
            "--chdir", self.container.get("workingDir")
            or self.image_config["config"].get("WorkingDir") or "/",
            "--", *argv,
        ]  # fmt: skip
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return argv

    def running(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, f"{self.name} exited:\n{self.output()}"
        return True

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.work, ignore_errors=True)


def _expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's `$(VAR)` expansion (unknown names stay as written)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), text)
