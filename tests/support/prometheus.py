"""A real Prometheus server on loopback (built by scripts/build-tools.sh from the Go module proxy):
start it on a config, wait until it is ready, ask its HTTP API.

May import: the standard library, httpx, yaml, tests.support.tools. Called by: tests.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from mlxfleet_operator.dev import processes
from tests.support import tools


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str, **params: str) -> Any:
        answer = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30)
        answer.raise_for_status()
        body = answer.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar) of `expr` now; [] when it has no data."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"value": data["result"]}]
        return list(data["result"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets", state="active")["activeTargets"])


def wait(
    what: str,
    check: Any,
    *,
    timeout: float = 60.0,
    interval: float = 0.5,
    explain: Any = None,
) -> Any:
    """`check()` until truthy; on timeout the error says `explain()` (what was seen instead)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            seen = f": {explain()}" if explain is not None else ""
            raise AssertionError(f"timed out waiting for {what}{seen}")
        time.sleep(interval)


@contextlib.contextmanager
def running(config: Mapping[str, Any], root: Path) -> Iterator[Prometheus]:
    """Prometheus on `config` (its `rule_files` relative to `root`), stopped on exit."""
    binary = tools.build("prometheus")
    root.mkdir(parents=True, exist_ok=True)
    (root / "prometheus.yml").write_text(yaml.safe_dump(dict(config), sort_keys=False))
    (port,) = processes.free_ports(1)
    log = root / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(binary),
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=info",
            ],
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    prom = Prometheus(url=f"http://127.0.0.1:{port}", proc=proc, log=log)

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"prometheus exited {proc.returncode}:\n{log.read_text()[-4000:]}")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{prom.url}/-/ready", timeout=2).status_code == 200
        return False

    try:
        wait("prometheus ready", ready, timeout=60)
        yield prom
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
