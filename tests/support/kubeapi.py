"""The API server as the admin identity, over httpx: cheap frequent reads for fault and election
tests (the Lease holder every 50 ms, objects while a control plane restarts), where a kubectl
process per read would be too slow.
May import: httpx, the standard library. Called by: tests/integration/election, tests/faults.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

NAMESPACE = "mlxfleet-system"
LEASE = "mlxfleet-operator"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"


class AdminApi:
    """The API server as the admin identity (httpx, for frequent cheap reads)."""

    def __init__(self, kubeconfig: Path) -> None:
        config = json.loads(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        token = config["users"][0]["user"]["token"]
        self.http = httpx.Client(
            base_url=cluster["server"],
            headers={"Authorization": f"Bearer {token}"},
            verify=ssl.create_default_context(cadata=ca),
            timeout=5,
        )

    def lease(self, name: str = LEASE) -> dict[str, Any] | None:
        r = self.http.get(f"{LEASES}/{name}")
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return dict(r.json())

    def holder(self) -> str | None:
        found = self.lease()
        return None if found is None else found.get("spec", {}).get("holderIdentity")

    def delete_lease(self, name: str = LEASE) -> None:
        self.http.delete(f"{LEASES}/{name}")

    def put_lease(self, body: dict[str, Any]) -> httpx.Response:
        name = body["metadata"]["name"]
        return self.http.put(f"{LEASES}/{name}", json=body)

    def get(self, path: str) -> dict[str, Any] | None:
        """Any object by its API path (None: not found)."""
        r = self.http.get(path)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return dict(r.json())

    def close(self) -> None:
        self.http.close()


@dataclass
class Sample:
    sent: float
    received: float
    holder: str | None


class LeaseSampler:
    """Reads the Lease every `interval` seconds in a thread, recording who held it when."""

    def __init__(self, api: AdminApi, interval: float = 0.05) -> None:
        self.api = api
        self.interval = interval
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.time()
            with contextlib.suppress(httpx.HTTPError, ValueError):
                holder = self.api.holder()
                self.samples.append(Sample(sent, time.time(), holder))
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
