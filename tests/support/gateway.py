"""Start a real `mlxfleet-gateway` process (its own ServiceAccount identity) and mint API keys.

`start_gateway(cluster, root, ...)` runs the console script against the session's control plane
with `.../gateway.kubeconfig`, on an ephemeral loopback port, and waits for its `gateway ready`
log line and for `/readyz` (every watch listed once). `api_key_secret(...)` returns a new key and
the Secret manifest holding its hash. Everything is stopped by process id.
May import: the standard library, httpx, openai, mlxfleet_gateway.core.keys, the agent contract.
Called by: the gateway integration and e2e tests, the benchmark.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

from mlxfleet_agent import contract
from mlxfleet_gateway.core import keys

BIN = Path(sys.executable).parent
READY_TIMEOUT_S = 60.0
FLEET_KEY = "fleet-key-of-the-test-fleet-never-sent-to-agents"
"""The gateway's and the operator's fleet key: each node's data plane accepts only its own key
derived from it (`node_key`)."""


def node_key(node: str, fleet_key: str = FLEET_KEY) -> str:
    """What node `node`'s data plane accepts (the operator sends it; the gateway derives it)."""
    return contract.credentials.data_plane_key(fleet_key, node)


def write_fleet_key(root: Path, fleet_key: str = FLEET_KEY) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    key_file = root / "fleet-key"
    key_file.write_text(fleet_key + "\n")
    key_file.chmod(0o600)
    return key_file


@dataclass
class Gateway:
    proc: subprocess.Popen[bytes]
    url: str
    metrics_url: str | None
    log_path: Path
    args: list[str] = field(default_factory=list)
    clients: list[openai.OpenAI] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def openai(self, api_key: str = "none", **kwargs: Any) -> openai.OpenAI:
        """A client of this gateway, closed when the gateway stops (a client left to the
        garbage collector leaves an unclosed socket, an error under `-W error` at exit)."""
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 120)
        client = openai.OpenAI(base_url=self.base_url, api_key=api_key, **kwargs)
        self.clients.append(client)
        return client

    def metrics(self) -> str:
        assert self.metrics_url is not None
        return httpx.get(self.metrics_url + "/metrics", timeout=10).text

    def counter(self, family: str, *, key: str) -> float:
        """The sum of `mlxfleet_gateway_<family>` over the series of API key `key`."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(f"mlxfleet_gateway_{family}{{") and f'key="{key}"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, what: str, check: Any, *, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"gateway exited: {self.log()[-3000:]}")
            last = check()
            if last:
                return last
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; last {last!r}")

    def stop(self, sig: int = signal.SIGTERM, *, timeout: float = 40.0) -> int:
        for client in self.clients:
            client.close()
        self.clients.clear()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)


def start_gateway(
    kubeconfig: Path,
    root: Path,
    *,
    anonymous: bool = False,
    fleet_key: str | None = FLEET_KEY,
    extra: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> Gateway:
    root.mkdir(parents=True, exist_ok=True)
    args = [
        str(BIN / "mlxfleet-gateway"),
        "--kubeconfig",
        str(kubeconfig),
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ]
    if anonymous:
        args.append("--allow-anonymous")
    if fleet_key is not None:
        args += ["--fleet-key-file", str(write_fleet_key(root, fleet_key))]
    else:
        args.append("--allow-open-data-plane")  # agents' data planes are open (loopback)
    args += extra or []
    log_path = root / "gateway.log"
    full_env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with log_path.open("ab") as out:
        offset = out.tell()
        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**full_env, **(env or {})},
            start_new_session=True,
        )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"gateway exited {proc.returncode}:\n{log_path.read_text()}")
        with log_path.open("rb") as fh:
            fh.seek(offset)
            for line in fh.read().decode(errors="replace").splitlines():
                if '"gateway ready"' in line:
                    ready = json.loads(line)
                    gw = Gateway(
                        proc=proc,
                        url=f"http://127.0.0.1:{ready['port']}",
                        metrics_url=f"http://127.0.0.1:{ready['metrics_port']}",
                        log_path=log_path,
                        args=args,
                    )
                    gw.wait_for("/readyz", functools.partial(_ready, gw), timeout=30)
                    return gw
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"gateway not ready in {READY_TIMEOUT_S}s:\n{log_path.read_text()}")


def _ready(gw: Gateway) -> bool:
    try:
        return httpx.get(gw.url + "/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def api_key_secret(
    name: str,
    *,
    namespaces: str,
    namespace: str = "mlxfleet-system",
    **fields: Any,
) -> tuple[str, dict[str, Any]]:
    """(key, Secret manifest) for a new API key; `fields` are camelCase KeySpec fields."""
    key = keys.new_key()
    data = {"keyHash": keys.hash_key(key), "namespaces": namespaces}
    data.update({k: str(v) for k, v in fields.items() if v is not None})
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": keys.SECRET_TYPE,
        "metadata": {"name": name, "namespace": namespace},
        "stringData": data,
    }
    return key, secret
