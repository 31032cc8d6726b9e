"""`make image` and `make release-local`, then `helm install oci://...` and both images running.

One build per module (slow: two images from Debian packages and PyPI wheels, a few minutes cold,
the Debian layers cached in ~/.cache/mlxfleet/images): `make release-local` into a temporary
DIST against a local registry (`crane registry serve`). Then the chart is installed from that
registry by its oci:// reference into a bare API server, the Deployments must name the pushed
images by digest, and each Deployment's container is started the way the kubelet would (image
pulled from the registry by that reference, the pod's uid, read-only root, the chart's
ServiceAccount token): the operator takes its Lease, the gateway answers /healthz and /readyz.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxfleet_operator import __version__
from mlxfleet_operator.dev import controlplane, processes
from tests.e2e.conftest import wait_for
from tests.support.helm import AGENTS, NAMESPACE, RELEASE, REPO, Helm, ensure_namespace
from tests.support.oci import Pod, Registry, _world_readable_dir, run_in_image

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.tools, pytest.mark.timeout(2400)]

VERSION = __version__
IMPORT_ALL = """
import importlib, pkgutil, sys
for root in sys.argv[1:]:
    package = importlib.import_module(root)
    for info in pkgutil.walk_packages(package.__path__, root + "."):
        importlib.import_module(info.name)
"""
# what each image runs: its own package (the operator's without `dev`, which needs the agent)
PACKAGES = {
    "operator": ["mlxfleet_operator.api", "mlxfleet_operator.core", "mlxfleet_operator.adapters",
                 "mlxfleet_operator.handlers", "mlxfleet_operator.reports",
                 "mlxfleet_operator.bootstrap", "mlxfleet_operator.kubectl_plugin"],
    "gateway": ["mlxfleet_gateway"],
}  # fmt: skip
TEST_TOOLING = ("pytest", "hypothesis", "ruff", "mypy", "schemathesis", "openai", "pip")
PDF_STACK = ("weasyprint", "pyarrow", "fontTools", "pyphen")


@dataclass(frozen=True)
class Release:
    dist: Path
    registry: Registry
    pushed: dict[str, Any]
    seconds: float
    revision: str  # the commit the build saw

    def layout(self, name: str) -> Path:
        return self.dist / "images" / name

    def image_config(self, name: str) -> dict[str, Any]:
        layout = self.layout(name)
        index = json.loads((layout / "index.json").read_text())
        manifest = json.loads(_blob(layout, index["manifests"][0]["digest"]))
        return dict(json.loads(_blob(layout, manifest["config"]["digest"])))


def _blob(layout: Path, digest: str) -> str:
    return (layout / "blobs" / digest.replace(":", "/")).read_text()


@pytest.fixture(scope="module")
def release(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Release:
    dist = tmp_path_factory.mktemp("dist")
    revision = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(
        ["nice", "-n", "10", "make", "-C", str(REPO), "release-local", f"DIST={dist}",
         f"REGISTRY={registry.address}"],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    print(f"make release-local: {seconds:.0f} s\n{proc.stderr[-1500:]}")  # the build's timing
    assert f"helm install mlxfleet oci://{registry.address}/mlxfleet/charts/mlxfleet" in (
        proc.stdout
    )
    pushed = json.loads((dist / "release.json").read_text())
    return Release(dist, registry, pushed, seconds, revision)


def test_images_are_non_root_labelled_and_carry_only_their_own_parts(release: Release) -> None:
    sizes = json.loads((release.dist / "images" / "sizes.json").read_text())
    for name, program in (("operator", "mlxfleet-operator"), ("gateway", "mlxfleet-gateway")):
        config = release.image_config(name)
        assert config["config"]["User"] == "65532:65532", name
        assert config["config"]["Entrypoint"] == [f"/opt/mlxfleet/bin/{program}"]
        labels = config["config"]["Labels"]
        assert labels["org.opencontainers.image.version"] == VERSION
        assert labels["org.opencontainers.image.revision"] == release.revision
        assert labels["org.opencontainers.image.title"] == f"mlxfleet-{name}"
        figures = sizes[name]
        assert figures["layers"] == 2
        assert 0 < figures["compressedBytes"] < figures["uncompressedBytes"]
        print(f"{name}: {figures['compressedBytes'] / 2**20:.1f} MiB compressed, "
              f"{figures['uncompressedBytes'] / 2**20:.1f} MiB unpacked")  # fmt: skip
    # the slim gateway: no PDF stack, no operator runtime; neither carries test tooling or pip
    roots = {}
    for name in ("operator", "gateway"):
        ref = f"{release.registry.address}/mlxfleet/{name}:{VERSION}"
        roots[name] = release.registry.export(ref, _world_readable_dir("mlxfleet-img-") / "root")
    try:
        site = {n: r / "opt/mlxfleet/lib/python3.11/site-packages" for n, r in roots.items()}
        for package in (*PDF_STACK, "kopf"):
            assert not (site["gateway"] / package).exists(), package
        assert not list((roots["gateway"] / "usr/lib/x86_64-linux-gnu").glob("libpango*"))
        assert (site["operator"] / "weasyprint").is_dir()
        assert list((roots["operator"] / "usr/lib/x86_64-linux-gnu").glob("libpango-1.0.so*"))
        for name, packages in site.items():
            for tool in TEST_TOOLING:
                assert not (packages / tool).exists(), (name, tool)
            assert not (roots[name] / "bin/sh").exists(), name  # no shell: packages extracted
            assert "mlxfleet:x:65532:65532:" in (roots[name] / "etc/passwd").read_text()
            assert (roots[name] / "var/lib/dpkg/status.d/libc6").is_file()  # for scanners
            # every module the image runs imports there (system libraries its wheels need)
            imported = run_in_image(roots[name], ["python", "-c", IMPORT_ALL, *PACKAGES[name]])
            assert imported.returncode == 0, (name, imported.stderr[-3000:])
    finally:
        for root in roots.values():
            shutil.rmtree(root.parent, ignore_errors=True)


@pytest.fixture
def installed(
    release: Release, bare_cluster: controlplane.ControlPlane, helm_cli: Helm
) -> Iterator[dict[str, dict[str, Any]]]:
    """`helm install oci://...` of the pushed chart (gateway on, ports free on this machine)."""
    plane, helm = bare_cluster, helm_cli.on(bare_cluster)
    ensure_namespace(plane)
    plane.kubectl("-n", NAMESPACE, "create", "secret", "generic", "mlxfleet-fleet-key",
                  f"--from-literal=key={os.urandom(16).hex()}")  # fmt: skip
    health, metrics, gw, gw_metrics = processes.free_ports(4)
    chart = release.pushed["chart"]
    helm("install", RELEASE, chart["ref"], "--version", VERSION, "--plain-http",
         f"--namespace={NAMESPACE}", "--set=gateway.enabled=true",
         f"--set=operator.healthPort={health}", f"--set=operator.metricsPort={metrics}",
         f"--set=gateway.port={gw}", f"--set=gateway.metricsPort={gw_metrics}")  # fmt: skip
    deployments = {
        name: json.loads(
            plane.kubectl(
                "-n", NAMESPACE, "get", "deployment", f"mlxfleet-{name}", "-o", "json"
            ).stdout
        )
        for name in ("operator", "gateway")
    }
    try:
        yield deployments
    finally:
        helm("uninstall", RELEASE, f"--namespace={NAMESPACE}", "--wait", check=False)
        plane.kubectl("delete", "namespace", AGENTS, "--wait=false", check=False)


def test_helm_install_from_the_registry_pins_digests_and_both_images_run(
    release: Release,
    installed: dict[str, dict[str, Any]],
    bare_cluster: controlplane.ControlPlane,
    tmp_path: Path,
) -> None:
    plane, registry = bare_cluster, release.registry
    images = {}
    for name, deployment in installed.items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        image = container["image"]
        # pinned: repository:tag@digest, the digest of what the registry holds under the tag
        repository = f"{registry.address}/mlxfleet/{name}"
        assert image == f"{repository}:{VERSION}@{registry.digest(f'{repository}:{VERSION}')}"
        assert release.pushed["images"][name] == f"{repository}@{image.rsplit('@', 1)[1]}"
        images[name] = image

    pods: list[Pod] = []
    try:
        for name in ("operator", "gateway"):
            pod = Pod(
                plane=plane,
                deployment=installed[name],
                image_config=registry.config(images[name]),
                image_root=Path(),
                name=f"mlxfleet-{name}-7d9f-1",
                log=tmp_path / f"{name}.log",
            )
            pod.image_root = registry.export(images[name], pod.work / "rootfs")
            pods.append(pod)
            pod.start()
        operator, gateway = pods

        def holder() -> str:
            proc = plane.kubectl("-n", NAMESPACE, "get", "lease", "mlxfleet-operator", "-o",
                                 "json", check=False)  # fmt: skip
            if proc.returncode:
                return ""
            return str(json.loads(proc.stdout)["spec"].get("holderIdentity", ""))

        wait_for(
            "the operator (its image, the chart's identity) holds the chart's Lease",
            lambda: operator.running() and holder().startswith(operator.name),
            timeout=120,
        )
        port = gateway.argv(gateway.env())[1].rsplit(":", 1)[1]  # --listen=...:PORT

        def answers(path: str) -> bool:
            gateway.running()
            try:
                return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("the gateway image answers /healthz", lambda: answers("/healthz"), timeout=120)
        wait_for("the gateway synced the fleet (/readyz)", lambda: answers("/readyz"), timeout=60)
    except BaseException:
        for pod in pods:
            print(f"--- {pod.name}\n{pod.output()}")
        raise
    finally:
        for pod in pods:
            pod.stop()


def test_the_operator_image_renders_the_monthly_pdf(release: Release, tmp_path: Path) -> None:
    """The report CronJobs run the operator image: weasyprint with pango and the DejaVu fonts
    from the extracted Debian packages renders the sample month's executive PDF."""
    ref = f"{release.registry.address}/mlxfleet/operator:{VERSION}"
    work = _world_readable_dir("mlxfleet-report-")
    try:
        root = release.registry.export(ref, work / "rootfs")
        out = work / "out"
        out.mkdir()
        os.chown(out, 65532, 65532)
        proc = run_in_image(root, ["mlxfleet", "report", "sample", "--out", "/out"],
                            binds={"/out": out})  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        (pdf,) = out.rglob("*.pdf")
        assert pdf.read_bytes().startswith(b"%PDF")
        text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip
        assert "cost" in text.lower()
    finally:
        shutil.rmtree(work, ignore_errors=True)
